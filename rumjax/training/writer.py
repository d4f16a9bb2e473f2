"""The metric writer: TensorBoard event files (tensorboardX) and ``metrics.jsonl`` in the workdir.

Only process 0 writes. Each record is one JSON object ``{"step": s, "train_loss": ...}``.

A run that resumes from the checkpoint at step ``k`` computes the steps after ``k`` again,
so the records a previous invocation wrote after ``k`` (it was killed before its next
checkpoint) would be doubled: they are moved, in order, to ``metrics.discarded.jsonl``
(appended, never lost), and TensorBoard is told to purge its events after ``k``.
"""

import json
import os
from typing import Mapping

import jax
import numpy as np
from tensorboardX import SummaryWriter

from rumjax import utils


class MetricWriter:
  """Writes scalar records to TensorBoard and ``metrics.jsonl``."""

  def __init__(self, workdir: str, start_step: int = 0):
    self.enabled = jax.process_index() == 0
    if self.enabled:
      path = os.path.join(workdir, "metrics.jsonl")
      drop_after(path, start_step, os.path.join(workdir, "metrics.discarded.jsonl"))
      self.tb = SummaryWriter(logdir=os.path.join(workdir, "tensorboard"),
                              purge_step=start_step + 1)
      self.jsonl = open(path, "a")

  def write(self, step: int, scalars: Mapping[str, float]) -> None:
    if not self.enabled:
      return
    record = {"step": int(step)}
    for name, value in scalars.items():
      value = float(np.asarray(value))
      record[name] = value
      self.tb.add_scalar(name, value, global_step=int(step))
    self.jsonl.write(json.dumps(record) + "\n")
    self.jsonl.flush()
    self.tb.flush()

  def close(self) -> None:
    if self.enabled:
      self.tb.close()
      self.jsonl.close()


def drop_after(path: str, step: int, discarded: str) -> int:
  """Moves the records of the ``.jsonl`` file ``path`` with a step after ``step`` to the
  end of ``discarded`` (kept in order; ``path`` is rewritten atomically). Returns their
  number."""
  if not os.path.exists(path):
    return 0
  with open(path) as f:
    lines = [line for line in f if line.strip()]
  late = [line for line in lines if _step(line) > step]
  if not late:
    return 0
  with open(discarded, "a") as f:
    f.writelines(line if line.endswith("\n") else line + "\n" for line in late)
  utils.write_text(path, "".join(line if line.endswith("\n") else line + "\n"
                                 for line in lines if _step(line) <= step))
  return len(late)


def _step(line: str) -> float:
  """The step of a JSON-lines record (a torn last line, from a killed run, counts as
  after every step)."""
  try:
    return json.loads(line)["step"]
  except (ValueError, KeyError, TypeError):
    return float("inf")

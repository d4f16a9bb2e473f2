"""The ``loss`` evaluator: a task's metric sums over a split (loss, accuracy, BPC, ...).

The predict function (default ``"metrics"``) maps ``(params, batch, model_state)`` to
``({name: (sum, count)}, new_model_state)``; sums and counts are added over the batches
(and, inside the jit-compiled function, over the devices), then reported as
``f"{prefix}_{name}" = sum / count``. A carried model state (a language model's recurrent
state over consecutive windows of a stream) starts from ``model_state()`` at every run and
flows from batch to batch, so the whole stream is evaluated with the state carried.
"""

from typing import Any, Callable, Optional

import jax
import numpy as np

from rumjax.evaluators.base import register_evaluator
from rumjax import metrics as metrics_lib
from rumjax import sharding as sharding_lib


def sharded_batches(data: Callable[[], Any], mesh, batches: Optional[int]):
  """The first ``batches`` (all if ``None``/0) batches of ``data()``, sharded on the mesh."""
  for i, batch in enumerate(data()):
    if batches and i >= batches:
      return
    yield sharding_lib.shard_batch(batch, mesh)


@register_evaluator("loss")
class LossEvaluator:
  """Sums ``(sum, count)`` metrics over the batches of a split.

  Args:
    predict_fn: ``(params, batch, model_state) -> (metrics, model_state)``.
    data: ``() -> iterable of batches`` (this process's rows).
    mesh: the device mesh.
    prefix: metric name prefix.
    batches: at most this many batches (0 or ``None``: the whole split).
    model_state: ``() -> initial carried state`` or ``None``.
  """
  default_pred = "metrics"

  def __init__(self, predict_fn, *, data, mesh, prefix: str,
               batches: Optional[int] = None, model_state=None):
    self.predict_fn, self.data, self.mesh = predict_fn, data, mesh
    self.prefix, self.batches, self.model_state = prefix, batches, model_state

  def sums(self, state) -> dict:
    """``{name: (sum, count)}`` over the split (NumPy scalars)."""
    totals, read = None, 0
    model_state = self.model_state() if self.model_state is not None else None
    for batch in sharded_batches(self.data, self.mesh, self.batches):
      metrics, model_state = self.predict_fn(state.params, batch, model_state)
      totals = metrics_lib.accumulate(totals, jax.device_get(metrics))
      read += 1
    if not read:
      raise ValueError(f"config.evals.{self.prefix}: the split gave no batches (check its "
                       "split, batches and batch_size).")
    return totals or {}

  def run(self, state) -> dict[str, float]:
    totals = self.sums(state)
    if totals and not any(float(np.sum(count)) for _, count in totals.values()):
      raise ValueError(f"config.evals.{self.prefix}: the split has no real rows (every row "
                       "is padding: check its split, batches and batch_size).")
    return metrics_lib.summarize(totals, self.prefix)

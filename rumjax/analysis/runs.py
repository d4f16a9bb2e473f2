"""A trained run, read one way for every analysis: its task, config and parameters.

A run is a ``train_and_evaluate`` workdir (``config.json`` and checkpoints) or a
``params.npz`` that :func:`save_params_npz` wrote. The figures' JSON files name a run by
:func:`recorded_path` (no machine's absolute path).
"""

import os
import zipfile
from typing import Any, Callable, Mapping, Optional

import jax
import numpy as np

from rumjax import configs
from rumjax.training import checkpoint as checkpoint_lib


def recorded_path(path: str, root: Optional[str] = None) -> str:
  """``path`` as a figure's JSON records it, naming no machine: relative to ``root``
  (default: the current directory, the checkout for ``python -m launch...``) when it lies
  inside it, else its last component, the workdir's name (``/tmp/runs/lead`` ->
  ``lead``)."""
  root = os.path.abspath(root or os.getcwd())
  full = os.path.abspath(os.path.expanduser(path))
  if os.path.commonpath([root, full]) == root:
    return os.path.relpath(full, root)
  return os.path.basename(os.path.normpath(full))



def load_run(workdir: str, get_task: Callable[[str], Any], step: Optional[int] = None):
  """The task, config and parameters of a training workdir.

  The config is the task's ``get_config(variant)`` updated with
  ``<workdir>/config.json`` (as ``launch.evaluate`` reads it); the parameters are the
  checkpoint at ``step`` (default: the latest) read by
  :func:`rumjax.training.checkpoint.read_params`.

  Args:
    workdir: a ``train_and_evaluate`` workdir.
    get_task: ``name -> task`` (``tasks.get_task``).
    step: the checkpoint step.

  Returns:
    ``(task, config, step, params)``.

  Raises:
    ValueError: one line naming the missing folder, ``config.json`` or checkpoint.
  """
  task, config = configs.load_workdir_config(workdir, get_task)
  at, params = checkpoint_lib.read_params(workdir, step)
  return task, config, at, params


# ----------------------------------------------------------------------- parameters


def flatten(tree: Any, prefix: str = "") -> dict[str, np.ndarray]:
  """A nested dict of arrays as ``{"a/b/c": array}``."""
  if isinstance(tree, Mapping):
    out = {}
    for key, value in tree.items():
      out.update(flatten(value, f"{prefix}{key}/"))
    return out
  return {prefix[:-1]: np.asarray(tree)}


def unflatten(flat: Mapping[str, Any]) -> dict:
  """Inverse of :func:`flatten`."""
  out: dict = {}
  for path, value in flat.items():
    node = out
    *parents, leaf = path.split("/")
    for p in parents:
      node = node.setdefault(p, {})
    node[leaf] = np.asarray(value)
  return out


def save_params_npz(path: str, params: Any) -> None:
  """Saves a parameter tree to ``path`` (``.npz``, keys ``"rnn/cell/kernel_h"``, ...)."""
  flat = flatten(jax.device_get(params))
  with open(path, "wb") as f:
    np.savez(f, **flat)


# The one reader of checkpoints' parameters lives with the checkpoints.
checkpoint_steps = checkpoint_lib.checkpoint_steps
load_checkpoint_params = checkpoint_lib.read_params


def load_params(path: str, step: Optional[int] = None) -> tuple[Optional[int], dict]:
  """Parameters from a ``.npz`` file (step ``None``) or a workdir's checkpoints; one-line
  ``ValueError`` for a path that is neither."""
  if path.endswith(".npz") and not os.path.isfile(path):
    raise ValueError(f"no parameter file {path!r}.")
  if os.path.isfile(path):
    if not zipfile.is_zipfile(path):
      raise ValueError(f"{path!r} is not a .npz of parameters (launch.reproduce writes "
                       "params.npz); give a .npz or a training workdir.")
    with np.load(path, allow_pickle=False) as data:
      return None, unflatten({k: data[k] for k in data.files})
  return load_checkpoint_params(path, step)


# --------------------------------------------------------------------------- curves


def metric_curves(workdir: str, name: str) -> dict[str, list]:
  """One metric of a training workdir's ``metrics.jsonl``: ``{"steps", "values",
  "seconds"}`` (lists; ``seconds`` is the training time at each of those steps from the
  logged ``steps_per_sec``, :func:`rumjax.analysis.angles.metric_over_time`).

  Raises:
    ValueError: one line, when the workdir has no ``metrics.jsonl`` or no such metric.
  """
  from rumjax import utils
  from rumjax.analysis import angles
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    raise ValueError(f"{workdir!r} has no metrics.jsonl; pass a launch.train workdir.")
  records = utils.read_jsonl(path)
  steps, values = angles.metric_curve(records, name)
  if not len(steps):
    known = sorted({k for r in records for k in r if k != "step"})
    raise ValueError(f"{workdir!r} records no {name!r}; it records {known}.")
  seconds, _ = angles.metric_over_time(records, name)
  return {"steps": steps.tolist(), "values": values.tolist(), "seconds": seconds.tolist()}

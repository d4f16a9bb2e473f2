"""Every registered cell trains a few steps on copying and recall through the generic loop
(the code path of ``python -m launch.train --task=... --cell=NAME``), and on recall in
bfloat16 (``--config.model.dtype=bfloat16``)."""

import math

import jax
import numpy as np
import pytest

import tasks
from rumjax import cells, training


def _tiny(task_name, cell, dtype="float32"):
  task = tasks.get_task(task_name)
  config = task.get_config()
  config.update(dict(batch_size=8, num_steps=3, eval_every=0, checkpoint_every=0,
                     log_every=1, num_train=64, num_test=8))
  config.model.update(dict(cell=cell, hidden_size=8, dtype=dtype))
  for entry in config.evals.values():
    entry.batches = 1
  if task_name == "copying":
    config.delay = 3
  else:
    config.update(dict(length=6, num_dev=8))
  task.validate_config(config)
  return task, config


def _cases():
  """Every cell as a classifier (recall); as a per-step tagger (copying) GRU by default and
  every cell with -m slow (~10-30 s each: compiling the loop)."""
  out = []
  for cell in cells.cell_names():
    out.append(pytest.param(cell, "recall", id=f"{cell}-recall"))
    out.append(pytest.param(cell, "copying", id=f"{cell}-copying",
                            marks=() if cell == "gru" else pytest.mark.slow))
  return out


@pytest.mark.parametrize("cell,task_name", _cases())
def test_cell_trains_a_few_steps(tmp_path, task_name, cell):
  task, config = _tiny(task_name, cell)
  summary = training.train_and_evaluate(config, str(tmp_path), task)
  assert summary["step"] == 3
  assert math.isfinite(summary["train_loss"]) and math.isfinite(summary["train_grad_norm"])
  assert summary["train_grad_norm"] > 0
  assert all(np.all(np.isfinite(np.asarray(x))) for x in
             __import__("jax").tree.leaves(summary["params"]))


@pytest.mark.slow   # ~10-30 s each (compiling the loop); test_cells_precision covers the cells
@pytest.mark.parametrize("cell", cells.cell_names())
def test_cell_trains_a_few_steps_in_bfloat16(tmp_path, cell):
  """The precision policy through the loop: finite loss and gradients, float32 params."""
  task, config = _tiny("recall", cell, dtype="bfloat16")
  summary = training.train_and_evaluate(config, str(tmp_path), task)
  assert summary["step"] == 3
  assert math.isfinite(summary["train_loss"]) and math.isfinite(summary["train_grad_norm"])
  assert summary["train_grad_norm"] > 0
  leaves = jax.tree.leaves(summary["params"])
  assert all(x.dtype == np.float32 and np.all(np.isfinite(np.asarray(x))) for x in leaves)

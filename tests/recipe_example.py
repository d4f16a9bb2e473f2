"""The recipes of WORKSPACE.md ("Adding a cell", "Adding a task") as running code: a
throwaway Elman cell and a throwaway task, registered from outside the zoo and trained
through the launcher (``tests/test_recipes.py``)::

    python -m launch.train --imports=tests.recipe_example --task=first_symbol \\
        --cell=elman --workdir=/tmp/first_symbol --steps=20
"""

from typing import Optional

import flax.linen as nn
import jax.numpy as jnp
import ml_collections
import numpy as np

import tasks
from rumjax import metrics, models
from rumjax.cells import RecurrentCell, register_cell
from tasks import common
from tasks.base import Task
from tasks.data import ShuffledBatches, eval_batches


# ------------------------------------------------------------------ the cell recipe


@register_cell("elman")
class ElmanCell(RecurrentCell):
  """``h_t = tanh(W_x x_t + W_h h_{t-1} + b)`` (Elman, 1990)."""
  features: int

  @nn.compact
  def __call__(self, carry, inputs):
    dense = lambda name, bias: nn.Dense(self.features, use_bias=bias, name=name,
                                        dtype=self.dtype, param_dtype=self.param_dtype)
    h = jnp.tanh(dense("x", True)(inputs) + dense("h", False)(carry))
    return h, h


# ------------------------------------------------------------------ the task recipe

VOCAB, LENGTH = 4, 6


def get_config(variant: Optional[str] = None) -> ml_collections.ConfigDict:
  """Classify the first of ``LENGTH`` random symbols (a one-step memory)."""
  common.check_variant("first_symbol", variant, {})
  c = common.base_config("first_symbol", variant)
  c.model = common.cell_model_config("classifier", cell="elman", hidden_size=16)
  c.optimizer, c.learning_rate, c.batch_size = "adam", 1e-2, 16
  c.num_steps, c.eval_every, c.checkpoint_every = 20, 10, 10
  c.num_train = 256         # training sequences, drawn once from a fixed seed
  c.evals.test = common.eval_entry("test", c.get_ref("eval_every"))
  return c


def _examples(split: str, num: int) -> dict:
  rng = np.random.default_rng({"train": 0, "test": 1}[split])
  inputs = rng.integers(0, VOCAB, size=(num, LENGTH), dtype=np.int32)
  return {"inputs": inputs, "targets": inputs[:, 0].copy()}


def validate_config(config) -> None:
  common.check_task(config, "first_symbol", {})
  common.validate_common(config, ("test",))
  common.validate_cell_model(config.model)


def train_data(config, *, process_index=0, process_count=1):
  data = _examples("train", config.num_train)
  return ShuffledBatches(config.num_train, lambda idx: {k: v[idx] for k, v in data.items()},
                         seed=config.seed, batch_size=config.batch_size,
                         process_index=process_index, process_count=process_count)


def eval_data(config, split, *, process_index=0, process_count=1):
  data = _examples(split, 64)
  return eval_batches(64, lambda idx: {k: v[idx] for k, v in data.items()},
                      batch_size=config.batch_size, max_batches=None,
                      process_index=process_index, process_count=process_count)


def build_model(config):
  return models.build_model(config.model, vocab_size=VOCAB, num_classes=VOCAB)


TASK = tasks.register_task(Task(
    name="first_symbol", get_config=get_config, validate_config=validate_config,
    train_data=train_data, eval_data=eval_data, build_model=build_model,
    loss_and_metrics=metrics.classification_loss_and_metrics, eval_splits=("test",)))

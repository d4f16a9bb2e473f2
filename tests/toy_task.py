"""A tiny task that follows the task contract, for fast tests of the training loop.

Linear regression on fixed random data; ``nan_at_step`` injects a NaN into one batch;
``stateful`` makes the model carry a per-example state across batches (like a language
model over consecutive segments).
"""

import dataclasses

import flax.linen as nn
import jax.numpy as jnp
import ml_collections
import numpy as np

from tasks.base import Task

EVAL_SPLITS = ("dev",)


def default_config():
  c = ml_collections.ConfigDict(dict(
      batch_size=8, num_steps=10, seed=0, optimizer="adam", learning_rate=0.5,
      lr_boundaries=[], lr_values=[], grad_clip=None, eval_every=5, checkpoint_every=5,
      keep_checkpoints=3, log_every=5, nan_at_step=-1, stateful=False, features=4))
  c.evals = ml_collections.ConfigDict({"eval": dict(type="loss", split="dev", batches=2)})
  c.evals.eval.every = c.get_ref("eval_every")
  return c


def validate_config(config):
  del config


class Iterator:
  def __init__(self, config, process_index, process_count):
    self.config, self.index = config, 0
    self.rows = slice(process_index * config.batch_size // process_count,
                      (process_index + 1) * config.batch_size // process_count)

  def __iter__(self):
    return self

  def __next__(self):
    rng = np.random.default_rng([self.config.seed, self.index])
    x = rng.normal(size=(self.config.batch_size, self.config.features)).astype(np.float32)
    y = x @ np.arange(1.0, self.config.features + 1, dtype=np.float32)
    if self.index + 1 == self.config.nan_at_step:
      x[0, 0] = np.nan
    self.index += 1
    return {"x": x[self.rows], "y": y[self.rows]}

  def get_state(self):
    return {"index": self.index}

  def set_state(self, state):
    self.index = int(state["index"])


def train_data(config, *, process_index=0, process_count=1):
  return Iterator(config, process_index, process_count)


def eval_data(config, split, *, process_index=0, process_count=1):
  it = Iterator(config.copy_and_resolve_references(), process_index, process_count)
  it.index = 10_000
  return [next(it) for _ in range(3)]


class Model(nn.Module):
  stateful: bool = False

  @nn.compact
  def __call__(self, batch, *, train, model_state=None):
    pred = nn.Dense(1)(batch["x"])[:, 0]
    if not self.stateful:
      return pred
    pred = pred + 0.1 * model_state
    return pred, pred  # the new state: this batch's prediction


def build_model(config):
  return Model(stateful=config.stateful)


def initial_model_state(config, batch_size):
  if not config.stateful:
    return None
  return jnp.zeros((batch_size,), jnp.float32)


def loss_and_metrics(pred, batch):
  err = (pred - batch["y"]) ** 2
  n = jnp.asarray(err.size, jnp.float32)
  return jnp.mean(err), {"loss": (jnp.sum(err), n)}


TASK = Task(name="toy", get_config=lambda variant=None: default_config(),
            validate_config=validate_config, train_data=train_data, eval_data=eval_data,
            build_model=build_model, loss_and_metrics=loss_and_metrics,
            initial_model_state=initial_model_state, eval_splits=EVAL_SPLITS)


def with_parts(**parts) -> Task:
  """The toy task with some of its parts replaced (``predict_fns=...``, ``wrap_optimizer=...``)."""
  return dataclasses.replace(TASK, **parts)

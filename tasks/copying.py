"""Task (A): copying memory (Dangovski et al., TACL 2019, sec. 4; set-up of Jing et al.,
2017b, "Tunable efficient unitary neural networks", after Hochreiter & Schmidhuber 1997).

Alphabet of 10 symbols: data symbols ``0..7`` (``n = 8``), ``BLANK = 8``, ``MARKER = 9``.
With ``M = 10`` symbols to copy and a delay ``T`` (``config.delay``) a sequence has
``T + 2M`` steps::

    inputs  = [d_1 .. d_10, BLANK * (T - 1), MARKER, BLANK * 10]
    targets = [BLANK * (T + 10),                     d_1 .. d_10]

The model outputs one of 9 classes (``0..8``: data or blank) at every step; the loss
is the cross-entropy averaged over all ``T + 20`` steps. A memoryless strategy (blank,
then uniform guesses) scores ``C = M log n / (T + 2M)``
(:func:`memoryless_baseline`, footnote 4 of the paper), reported as the metric
``memoryless_baseline``; ``accuracy`` is measured on the 10 copied symbols only.

The config is :mod:`tasks.configs.copying` (variants ``T200``, ``T500``, ``T1000`` as in
the paper; without a variant a small setting that RUM learns on a 2-core CPU in a few
minutes). The examples are fixed (drawn once from fixed seeds per split); ``config.seed``
only sets the order of the batches.
"""

import functools
import math
from typing import Any, Iterator, Mapping

import jax.numpy as jnp
import numpy as np

from rumjax import metrics, models
from tasks import common
from tasks.base import Task
from tasks.configs import copying as config_lib
from tasks.data import ShuffledBatches, eval_batches

NAME = config_lib.NAME
EVAL_SPLITS = ("test",)

NUM_DATA = 8                   # n: data symbols 0..7
BLANK = 8
MARKER = 9
VOCAB_SIZE = 10                # input alphabet
NUM_CLASSES = 9                # outputs: data symbols and blank (never the marker)
COPY_LENGTH = 10               # M: symbols to copy
_SPLIT_SEEDS = {"train": 1701, "test": 1702}


def memoryless_baseline(delay: int) -> float:
  """Cross-entropy of the memoryless strategy: ``M log n / (T + 2M) = 10 log 8 / (T + 20)``."""
  return COPY_LENGTH * math.log(NUM_DATA) / (delay + 2 * COPY_LENGTH)


def validate_config(config: Mapping[str, Any]) -> None:
  """Raises ``ValueError`` naming the first bad field."""
  common.check_task(config, NAME, config_lib.VARIANTS)
  common.validate_common(config, EVAL_SPLITS)
  common.validate_cell_model(config.model)
  common.check_int(config, "delay", 1)
  common.check_int(config, "num_train", 1)
  common.check_int(config, "num_test", 1)


# ----------------------------------------------------------------------------- data


@functools.lru_cache(maxsize=4)
def _symbols(split: str, num: int) -> np.ndarray:
  """The fixed data symbols of a split, <int32>[num, 10] (row i is the same for any num)."""
  rng = np.random.default_rng(_SPLIT_SEEDS[split])
  out = rng.integers(0, NUM_DATA, size=(num, COPY_LENGTH), dtype=np.int32)
  out.flags.writeable = False
  return out


def make_examples(symbols: np.ndarray, delay: int) -> dict[str, np.ndarray]:
  """Copying sequences for given data symbols.

  Args:
    symbols: <int>[batch, 10] the data symbols (``0..7``) to copy.
    delay: the delay ``T >= 1``.

  Returns:
    ``{"inputs": <int32>[batch, T + 20], "targets": <int32>[batch, T + 20]}``.
  """
  symbols = np.asarray(symbols, np.int32)
  n, m = symbols.shape
  length = delay + 2 * m
  inputs = np.full((n, length), BLANK, np.int32)
  inputs[:, :m] = symbols
  inputs[:, m + delay - 1] = MARKER
  targets = np.full((n, length), BLANK, np.int32)
  targets[:, -m:] = symbols
  return {"inputs": inputs, "targets": targets}


def train_data(config, *, process_index: int = 0,
               process_count: int = 1) -> ShuffledBatches:
  """Endless batches ``{"inputs", "targets": <int32>[rows, T + 20], "mask": <f32>[rows]}``
  of this process's rows of the global batch; see :class:`tasks.data.ShuffledBatches`."""
  symbols, delay = _symbols("train", config.num_train), config.delay
  return ShuffledBatches(
      config.num_train, lambda idx: make_examples(symbols[idx], delay),
      seed=config.seed, batch_size=config.batch_size, process_index=process_index,
      process_count=process_count)


def eval_data(config, split: str = "test", *, process_index: int = 0,
              process_count: int = 1) -> Iterator[dict[str, np.ndarray]]:
  """The ``"test"`` split in batches of ``batch_size`` (padded rows have mask 0)."""
  if split not in EVAL_SPLITS:
    raise ValueError(f"unknown copying split {split!r}; known splits are "
                     f"{list(EVAL_SPLITS)}.")
  symbols, delay = _symbols(split, config.num_test), config.delay
  return eval_batches(
      config.num_test, lambda idx: make_examples(symbols[idx], delay),
      batch_size=config.batch_size, max_batches=None,
      process_index=process_index, process_count=process_count)


# ---------------------------------------------------------------------------- model


def build_model(config):
  """``config.model`` (a :class:`rumjax.models.SequenceTagger`: one-hot inputs, 9 output
  classes)."""
  return models.build_model(config.model, vocab_size=VOCAB_SIZE, num_classes=NUM_CLASSES)


def loss_and_metrics(logits, batch):
  """Mean cross-entropy over all steps, and metrics as ``(sum, count)`` pairs.

  Args:
    logits: <float>[batch, T + 20, 9].
    batch: ``{"targets": <int>[batch, T + 20], "mask"?: <float>[batch], ...}``.

  Returns:
    ``(loss, {"loss": (ce_sum, steps), "accuracy": (correct, copied),
    "memoryless_baseline": (C * steps, steps)})``, where ``accuracy`` counts the 10
    copied symbols of each sequence and padded rows (mask 0) count nowhere.
  """
  targets = batch["targets"]
  rows, length = targets.shape
  mask = metrics.batch_mask(batch, rows)
  ce = metrics.cross_entropy(logits, targets)
  ce_sum = jnp.sum(ce * mask[:, None])
  steps = jnp.sum(mask) * length
  loss = ce_sum / jnp.maximum(steps, 1.0)
  copied = jnp.argmax(logits[:, -COPY_LENGTH:], axis=-1) == targets[:, -COPY_LENGTH:]
  correct = jnp.sum(copied * mask[:, None])
  baseline = memoryless_baseline(length - 2 * COPY_LENGTH)
  return loss, {
      "loss": (ce_sum, steps),
      "accuracy": (correct, jnp.sum(mask) * COPY_LENGTH),
      "memoryless_baseline": (baseline * steps, steps),
  }


def to_text(tokens) -> str:
  """A readable sequence: data symbols as digits, ``_`` for blank, ``:`` for the marker."""
  return "".join("_" if t == BLANK else ":" if t == MARKER else str(int(t))
                 for t in np.asarray(tokens))


TASK = Task(name=NAME, get_config=config_lib.get_config, validate_config=validate_config,
            train_data=train_data, eval_data=eval_data, build_model=build_model,
            loss_and_metrics=loss_and_metrics, variants=tuple(config_lib.VARIANTS),
            eval_splits=EVAL_SPLITS, hidden_size_for=config_lib.hidden_size_for,
            to_text=to_text)

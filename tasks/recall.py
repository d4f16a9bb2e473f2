"""Task (B): associative recall (Dangovski et al., TACL 2019, sec. 4; set-up of Ba et al.,
2016a and Zhang & Zhou, 2017).

A sequence of ``T`` characters (``config.length``) is ``T/2`` letter-digit pairs,
then the separator ``??`` and a query letter: ``T + 3`` steps, e.g.
``c1a7d3b3??d`` for ``T = 8``. The target is the digit that follows the query letter
(``3``), one of 10 classes.

"We fix the size of the letter set to half the length of the sequence ... No letter is
repeated": the letters of a sequence are the first ``T/2`` letters ``a, b, ...`` in a
random order (a permutation of the letter set, as in the authors' released data
generator); the digits are uniform in ``0..9`` (repeats allowed); the query is one of
the sequence's letters, uniformly.

Inputs are one-hot over the fixed vocabulary :data:`VOCAB` (26 letters, 10 digits,
``?``), so ``T <= 52``; only the first ``T/2`` letters occur. The 100k / 10k / 20k
train / dev / test examples are generated once from fixed seeds (one per split and
length); ``config.seed`` only sets the order of the training batches.

The config is :mod:`tasks.configs.recall` (variants ``T30`` and ``T50`` as in the paper;
without a variant ``T30`` with few steps).
"""

import functools
import string
from typing import Any, Iterator, Mapping

import numpy as np

from rumjax import metrics, models
from tasks import common
from tasks.base import Task
from tasks.configs import recall as config_lib
from tasks.data import ShuffledBatches, eval_batches

NAME = config_lib.NAME
EVAL_SPLITS = ("dev", "test")

LETTERS = list(string.ascii_lowercase)
DIGITS = list(string.digits)
QUERY = "?"
VOCAB = LETTERS + DIGITS + [QUERY]
VOCAB_SIZE = len(VOCAB)                  # 37
LETTER0 = 0                              # token of "a"
DIGIT0 = len(LETTERS)                    # token of "0"
QUERY_TOKEN = VOCAB.index(QUERY)         # 36
NUM_CLASSES = 10                         # the answer digit
MAX_LENGTH = 2 * len(LETTERS)
_SPLIT_SEEDS = {"train": 2701, "dev": 2702, "test": 2703}


def validate_config(config: Mapping[str, Any]) -> None:
  """Raises ``ValueError`` naming the first bad field."""
  common.check_task(config, NAME, config_lib.VARIANTS)
  common.validate_common(config, EVAL_SPLITS)
  common.validate_cell_model(config.model)
  length = common.check_int(config, "length", 2)
  if length % 2 or length > MAX_LENGTH:
    raise ValueError(f"config.length={length} must be even and <= {MAX_LENGTH} "
                     f"(T/2 distinct letters out of {len(LETTERS)}).")
  for field in ("num_train", "num_dev", "num_test"):
    common.check_int(config, field, 1)


# ----------------------------------------------------------------------------- data


def generate(length: int, num: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
  """``num`` recall examples of ``length`` characters (``length / 2`` pairs).

  Returns:
    ``{"inputs": <int32>[num, length + 3], "targets": <int32>[num]}``: tokens of
    :data:`VOCAB` and the answer digit ``0..9``.
  """
  pairs = length // 2
  letters = rng.permuted(np.tile(np.arange(pairs, dtype=np.int32), (num, 1)), axis=1)
  digits = rng.integers(0, 10, size=(num, pairs), dtype=np.int32)
  query = rng.integers(0, pairs, size=num)
  rows = np.arange(num)
  inputs = np.empty((num, length + 3), np.int32)
  inputs[:, 0:length:2] = LETTER0 + letters
  inputs[:, 1:length:2] = DIGIT0 + digits
  inputs[:, length:length + 2] = QUERY_TOKEN
  inputs[:, length + 2] = LETTER0 + letters[rows, query]
  return {"inputs": inputs, "targets": digits[rows, query]}


@functools.lru_cache(maxsize=6)
def _split(split: str, length: int, num: int) -> dict[str, np.ndarray]:
  data = generate(length, num, np.random.default_rng([_SPLIT_SEEDS[split], length]))
  for v in data.values():
    v.flags.writeable = False
  return data


def _take(data, idx):
  return {k: v[idx] for k, v in data.items()}


def train_data(config, *, process_index: int = 0,
               process_count: int = 1) -> ShuffledBatches:
  """Endless batches ``{"inputs": <int32>[rows, T + 3], "targets": <int32>[rows],
  "mask": <f32>[rows]}``; see :class:`tasks.data.ShuffledBatches`."""
  data = _split("train", config.length, config.num_train)
  return ShuffledBatches(
      config.num_train, lambda idx: _take(data, idx), seed=config.seed,
      batch_size=config.batch_size, process_index=process_index,
      process_count=process_count)


def eval_data(config, split: str, *, process_index: int = 0,
              process_count: int = 1) -> Iterator[dict[str, np.ndarray]]:
  """The ``"dev"`` or ``"test"`` split in batches of ``batch_size`` (padded rows have
  mask 0)."""
  if split not in EVAL_SPLITS:
    raise ValueError(f"unknown recall split {split!r}; known splits are "
                     f"{list(EVAL_SPLITS)}.")
  num = config[f"num_{split}"]
  data = _split(split, config.length, num)
  return eval_batches(
      num, lambda idx: _take(data, idx), batch_size=config.batch_size,
      max_batches=None, process_index=process_index,
      process_count=process_count)


def to_text(tokens) -> str:
  """Tokens to text, e.g. ``"c1a7d3b3??d"``."""
  return "".join(VOCAB[int(t)] for t in np.asarray(tokens))


def encode(text: str) -> np.ndarray:
  """Text to tokens <int32>[len(text)] (inverse of :func:`to_text`)."""
  return np.array([VOCAB.index(ch) for ch in text], np.int32)


def answer(tokens) -> int:
  """The correct answer of one sequence, by reading it (a slow reference)."""
  text = to_text(tokens)
  key = text[-1]
  return int(text[text.index(key) + 1])


# ---------------------------------------------------------------------------- model


def build_model(config):
  """``config.model`` (a :class:`rumjax.models.SequenceClassifier`: one-hot inputs, 10
  output classes)."""
  return models.build_model(config.model, vocab_size=VOCAB_SIZE, num_classes=NUM_CLASSES)


# Mean cross-entropy of the answer digit and accuracy, as (sum, count) pairs.
loss_and_metrics = metrics.classification_loss_and_metrics


TASK = Task(name=NAME, get_config=config_lib.get_config, validate_config=validate_config,
            train_data=train_data, eval_data=eval_data, build_model=build_model,
            loss_and_metrics=loss_and_metrics, variants=tuple(config_lib.VARIANTS),
            eval_splits=EVAL_SPLITS, to_text=to_text)

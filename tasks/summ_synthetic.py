"""A synthetic summarization task that exercises every part of the pointer-generator on a
CPU in minutes (RUM paper §4 E's model; the task is ours).

An article is 4-8 sentences of 5-9 words followed by ``.``; its words are drawn from
``num_common`` frequent words (``"w0"``, ``"w1"``, ..., Zipf-distributed) and, one or two
per sentence, from ``num_rare`` rare words (``"r0"``, ...; most of them occur too seldom to
enter the decoder's vocabulary, ``vocab_size`` 200 by default, so they are article OOVs).
One sentence, not the last, begins with the marker word ``key``: the summary is that
sentence without the marker. So a model must find the marked sentence (attention to a
position given by content) and copy its rare words (the pointer). Example::

    article: w3 r8812 w0 w17 . key w5 r431 w2 w9 r77 . w1 w0 r5120 w4 w12 .
    summary: w5 r431 w2 w9 r77 .

The ``*_hard`` variants (``config.difficulty="hard"``, :func:`make_hard_example`) rank the
configurations where the easy task cannot (every one of them decodes it exactly): 8-12
sentences of 6-11 words with 2-3 rare words each; 2-3 sentences begin with ``key`` and the
summary is all of them, in article order, without the marker; 1-2 distractor sentences
begin with ``key not`` and are left out (telling them apart takes the next word as well).
Example::

    article: w3 r8 w0 . key w5 r4 w2 r7 . key not w1 r5 w4 . w9 r2 w1 . key w6 r9 w0 .
    summary: w5 r4 w2 r7 . w6 r9 w0 .

Everything is a function of ``(data seed, split, index)`` (NumPy's ``default_rng``), so any
process builds the same data. The data seed is ``config.data_seed``, or ``config.seed``
where it is None (the default, as every run before the field had it: then another seed is
other data, too; set ``data_seed`` to compare seeds on the same examples, as copying and
recall do with their fixed ones). Splits: ``train`` (``num_train``, 20,000), ``dev`` and
``test`` (``num_eval`` each, 500). Sizes (CPU): embedding 64, hidden 128, batch 32, Adam
1e-3 (the paper's Adagrad 0.15 is the ``cnn_dailymail`` setting), 80 encoder / 12 decoder
steps, beam 4, no ``min_len`` (the config is :mod:`tasks.configs.summ_synthetic`). Variants
``lead``, ``encrum``, ``decrum``, ``allrum`` set the encoder and decoder cells;
``--config.model.coverage=True`` (with ``init_from``) adds coverage. Metrics:
``eval_loss`` / ``eval_accuracy`` (teacher forced, dev, every ``eval_every``);
``test_rouge1``, ``test_rouge2``, ``test_rougeLsum`` (F1, %, beam search, at the end);
``lead3_rouge*`` (the extractive baseline).
"""

import functools
import types

import numpy as np

from tasks import common
from tasks import summarization as summ
from tasks.configs import summ_synthetic as config_lib

NAME = config_lib.NAME
EVAL_SPLITS = summ.EVAL_SPLITS
MARKER = "key"
NEGATION = "not"   # "key not ...": a distractor of the hard variant
DIFFICULTIES = ("easy", "hard")
SPLIT_SEEDS = {"train": 0, "dev": 1, "test": 2}


def validate_config(config) -> None:
  """Raises ``ValueError`` naming the first bad field."""
  summ.validate_config(config, NAME, config_lib.VARIANTS)
  for field, low in (("num_train", 1), ("num_eval", 1), ("num_common", 10),
                     ("num_rare", 1)):
    common.check_int(config, field, low)
  if config.get("data_seed") is not None:
    common.check_int(config, "data_seed", 0)
  if config.get("difficulty", "easy") not in DIFFICULTIES:
    raise ValueError(f"config.difficulty={config['difficulty']!r} must be one of "
                     f"{list(DIFFICULTIES)} (or pick a *_hard variant).")


# ----------------------------------------------------------------------------- data


def make_example(rng: np.random.Generator, *, num_common: int, num_rare: int) -> dict:
  """One article and its summary (module docstring) from ``rng``."""
  ranks = np.arange(1, num_common + 1)
  zipf = (1.0 / ranks) / np.sum(1.0 / ranks)
  num_sentences = int(rng.integers(4, 9))
  marked = int(rng.integers(0, num_sentences - 1))
  sentences = []
  for s in range(num_sentences):
    length = int(rng.integers(5, 10))
    words = [f"w{int(i)}" for i in rng.choice(num_common, size=length, p=zipf)]
    for pos in rng.choice(length, size=int(rng.integers(1, 3)), replace=False):
      words[int(pos)] = f"r{int(rng.integers(num_rare))}"
    sentences.append(words + ["."])
  summary = [list(sentences[marked])]
  sentences[marked] = [MARKER] + sentences[marked]
  return {"article": [t for s in sentences for t in s], "summary": summary,
          "article_sentences": sentences}


def _sentence(rng: np.random.Generator, zipf, num_rare: int, length: int, rare: int) -> list:
  """``length`` Zipf-drawn common words with ``rare`` of them replaced by rare words."""
  words = [f"w{int(i)}" for i in rng.choice(len(zipf), size=length, p=zipf)]
  for pos in rng.choice(length, size=rare, replace=False):
    words[int(pos)] = f"r{int(rng.integers(num_rare))}"
  return words + ["."]


def make_hard_example(rng: np.random.Generator, *, num_common: int, num_rare: int) -> dict:
  """One article of the hard variant (module docstring) from ``rng``: the summary is every
  ``key`` sentence in order, the ``key not`` distractors left out."""
  ranks = np.arange(1, num_common + 1)
  zipf = (1.0 / ranks) / np.sum(1.0 / ranks)
  num_sentences = int(rng.integers(8, 13))
  num_keys, num_distractors = int(rng.integers(2, 4)), int(rng.integers(1, 3))
  roles = rng.permutation(num_sentences)
  keys, distractors = set(roles[:num_keys].tolist()), set(
      roles[num_keys:num_keys + num_distractors].tolist())
  sentences, summary = [], []
  for s in range(num_sentences):
    words = _sentence(rng, zipf, num_rare, int(rng.integers(6, 12)), int(rng.integers(2, 4)))
    if s in keys:
      summary.append(words)
      words = [MARKER] + words
    elif s in distractors:
      words = [MARKER, NEGATION] + words
    sentences.append(words)
  return {"article": [t for s in sentences for t in s], "summary": summary,
          "article_sentences": sentences}


def examples(config, split: str) -> list:
  """The ``split``'s examples, a function of ``(config.seed, split, index)`` only (the data
  seed: :func:`data` passes it as ``seed``)."""
  n = config.num_train if split == "train" else config.num_eval
  make = make_hard_example if config.difficulty == "hard" else make_example
  return [make(np.random.default_rng([config.seed, SPLIT_SEEDS[split], i]),
               num_common=config.num_common, num_rare=config.num_rare)
          for i in range(n)]


@functools.lru_cache(maxsize=2)
def _data(seed, num_train, num_eval, num_common, num_rare, vocab_size, max_enc, max_dec,
          difficulty):
  cfg = types.SimpleNamespace(seed=seed, num_train=num_train, num_eval=num_eval,
                              num_common=num_common, num_rare=num_rare, difficulty=difficulty)
  return summ.encode({s: examples(cfg, s) for s in ("train", "dev", "test")},
                     vocab_size=vocab_size, max_enc_steps=max_enc, max_dec_steps=max_dec)


def data(config) -> summ.Data:
  """The encoded splits of ``config`` (built once per process), drawn from
  ``config.data_seed`` (None: ``config.seed``)."""
  data_seed = config.get("data_seed")
  return _data(config.seed if data_seed is None else data_seed, config.num_train, config.num_eval, config.num_common,
               config.num_rare, config.vocab_size, config.max_enc_steps,
               config.max_dec_steps, config.get("difficulty", "easy"))


TASK = summ.make_task(name=NAME, get_config=config_lib.get_config,
                      validate_config=validate_config, data=data,
                      variants=tuple(config_lib.VARIANTS))

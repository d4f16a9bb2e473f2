"""Natural language inference on SNLI 1.0 (Cheng, Dong, Lapata 2016, §5.3 and Table 3).

Data: ``snli_1.0_{train,dev,test}.jsonl[.gz]`` through the TFDS builder
:mod:`tasks.datasets.snli` (pairs labelled ``"-"`` dropped: 549,367 / 9,842 / 9,824), read
from ``manual_dir`` (default ``../shared/data/snli``) or downloaded. Labels: 0 entailment,
1 neutral, 2 contradiction. Variants (``data_split``):

* ``"full"``: the paper's set-up: train on train, validate on dev, test on test. Needs
  ``snli_1.0_train.jsonl`` (or ``.jsonl.gz``); without it, an error naming that file.
* ``"dev90"`` (default, as ``../shared/data/snli`` has no train file): **trains on 90% of
  the dev set** and validates on the other 10% (split ``"dev10"``, metrics
  ``eval_dev10_*``), tests on the whole test set (``test_*``). The 90/10 split is a fixed
  permutation of the dev set's premises (:func:`dev90_split`, seed :data:`DEV90_SEED`; all
  pairs of a premise on one side), independent of ``config.seed``: 8,858 training and 984
  held-out pairs. Numbers from this variant are not
  comparable to the paper's (60x less training data).

Text: lower-cased and tokenised with :func:`tasks.text.treebank_words` (§5.3: "We performed
lower-casing and tokenization"). The vocabulary is every word of the training pairs (min
count 1) plus ``<pad>`` (id 0) and ``<unk>``. A batch is ``{"premise": <int32>[B, M],
"premise_lengths": <int32>[B], "hypothesis": <int32>[B, T], "hypothesis_lengths",
"targets": <int32>[B], "index": <int32>[B] (the pair's line in its file), "mask"}``, each
sentence padded to the next power of two of its longest (``bucket_lengths``).

Models (``config.model.name``, :mod:`rumjax.models.text_classifier`), hidden 100 by default
(300 and 450 in Table 3: ``--config.model.hidden_size``): ``"lstm"`` (two LSTMs, Bowman et
al., 2015), ``"lstmn"`` (two LSTMNs, default), ``"lstmn_shallow"`` and ``"lstmn_deep"``
(attention fusion, premise -> hypothesis). Each sentence's tape is averaged over its real
tokens, the two averages are concatenated and classified by 2 ReLU layers (``mlp_layers``)
with dropout 0.2 (the paper selects it from [0.1, 0.2, 0.3, 0.4]) and a softmax layer.

Training (§5.3): Adam (0.9, 0.999) at 1e-3, batch 32 ("16 or 32"), 300-d embeddings.
``word_vectors`` (a GloVe/word2vec text file; "" = embeddings trained from scratch, the
default here): the embedding starts from the file's vectors, OOV words N(0, 1), and "we only
updated OOV vectors in the first epoch": :func:`wrap_optimizer` zeroes the updates of the
pre-trained rows during the first epoch (:func:`tasks.text.embeddings.snli_row_scale`, chained
after the optimizer, as for SST in :mod:`tasks.sst`).
"""

import dataclasses
import functools
import os
from typing import Any, Iterator, Mapping, Optional, Sequence

import numpy as np
import optax

from rumjax import metrics
from rumjax.models import text_classifier
from tasks import common
from tasks.base import Task
from tasks.configs import snli as config_lib
from tasks.data import ShuffledBatches, bucket_length, eval_batches
from tasks.text import embeddings, tokenizers
from tasks.text.vocabulary import Vocabulary

NAME = config_lib.NAME
VARIANTS = tuple(config_lib.VARIANTS)
EVAL_SPLITS = ("dev", "dev10", "test")
MODELS = ("lstm", "lstmn", "lstmn_shallow", "lstmn_deep")
LABELS = ("entailment", "neutral", "contradiction")
NUM_CLASSES = len(LABELS)
# The splits each data_split trains on and evaluates on.
SPLITS = {"full": ("train", "dev", "test"), "dev90": ("train", "dev10", "test")}
DEV90_SEED = 90
DEV90_FRACTION = 0.9
PAD, UNK = "<pad>", "<unk>"
MIN_BUCKET = 8


# --------------------------------------------------------------------------- config


def validate_config(config: Mapping[str, Any]) -> None:
  """Raises ``ValueError`` naming the first bad field (and missing data files)."""
  common.check_task(config, NAME, VARIANTS)
  common.validate_common(config, EVAL_SPLITS)
  common.validate_cell_model(config.model)
  text_classifier.check_model_config(config.model, MODELS)
  scheme = config["data_split"]
  if scheme not in VARIANTS:
    raise ValueError(f"config.data_split={scheme!r} must be one of {list(VARIANTS)}.")
  for name, entry in config["evals"].items():
    if entry["split"] not in SPLITS[scheme]:
      raise ValueError(f"config.evals.{name}.split={entry['split']!r} is not an evaluation "
                       f"split of data_split={scheme!r}; use one of "
                       f"{list(SPLITS[scheme][1:])}"
                       f"{' (dev90 trains on 90% of dev)' if scheme == 'dev90' else ''}.")
  if not isinstance(config["bucket_lengths"], bool):
    raise ValueError(f"config.bucket_lengths={config['bucket_lengths']!r} must be True or "
                     "False.")
  common.check_int(config, "eval_batch_size", 1)
  embeddings.check_word_vectors(config)
  common.check_data_folders(config, "snli_1.0_{train,dev,test}.jsonl (or .jsonl.gz)")
  root = os.path.expanduser(config["manual_dir"])
  if root:
    needed = {"full": ("train", "dev", "test"), "dev90": ("dev", "test")}[scheme]
    missing = [f"{os.path.join(root, f'snli_1.0_{s}')}.jsonl (or .jsonl.gz)" for s in needed
               if not any(os.path.isfile(os.path.join(root, f"snli_1.0_{s}{suffix}"))
                          for suffix in (".jsonl", ".jsonl.gz"))]
    if missing:
      hint = (" (the dev90 variant trains on 90% of dev instead: --variant=dev90)"
              if scheme == "full" else "")
      raise ValueError(f"config.manual_dir={config['manual_dir']!r} lacks "
                       f"{', '.join(missing)}: data_split={scheme!r} needs it{hint}.")


# ----------------------------------------------------------------------------- data


def tokenize(text: str) -> list[str]:
  """Lower-cased treebank tokens (:func:`tasks.text.treebank_words`)."""
  return tokenizers.treebank_words(text)


def dev90_split(premises: Sequence[str], fraction: float = DEV90_FRACTION,
                seed: int = DEV90_SEED) -> tuple[np.ndarray, np.ndarray]:
  """``(train, heldout)``: sorted, disjoint indices covering ``range(len(premises))``,
  split by premise: the pairs of one premise (SNLI has about three hypotheses per premise)
  are all in ``train`` or all held out, as SNLI's own splits never share a premise (split
  by pair, 975 of the 984 held-out pairs had their premise in training; session 32). The
  premises in the order of the permutation of ``default_rng(seed)``; each one that still
  fits goes to ``train`` until it holds ``round(fraction * n)`` pairs."""
  groups = {}
  for i, premise in enumerate(premises):
    groups.setdefault(premise, []).append(i)
  order = [list(groups)[j] for j in np.random.default_rng(seed).permutation(len(groups))]
  k = int(round(fraction * len(premises)))
  train = []
  for premise in order:
    if len(train) + len(groups[premise]) <= k:
      train += groups[premise]
  train = np.sort(np.asarray(train, np.int64))
  return train, np.setdiff1d(np.arange(len(premises)), train)


@dataclasses.dataclass(frozen=True)
class Data:
  """The encoded pairs of one ``data_split``.

  Attributes:
    vocab: the :class:`tasks.text.Vocabulary` of the training pairs.
    splits: ``{split: {"premise": <int32>[N, M_max], "premise_lengths", "hypothesis",
      "hypothesis_lengths", "targets", "index"}}`` for ``SPLITS[data_split]``.
  """
  vocab: Vocabulary
  splits: dict

  def size(self, split: str) -> int:
    return len(self.splits[split]["targets"])


def _padded(token_lists, vocab: Vocabulary, width: int) -> tuple[np.ndarray, np.ndarray]:
  lengths = np.asarray([len(t) for t in token_lists], np.int32)
  ids = np.zeros((len(token_lists), width), np.int32)
  for i, tokens in enumerate(token_lists):
    ids[i, :len(tokens)] = vocab.encode(tokens)
  return ids, lengths


def encode(pairs: Mapping[str, list], vocab: Optional[Vocabulary] = None) -> Data:
  """Token ids of every split of ``pairs`` (``{split: [pair dict]}``, one of them
  ``"train"``), premises (and hypotheses) padded to the longest of all splits; the
  vocabulary from the training pairs unless given."""
  tokens = {s: ([tokenize(p["premise"]) for p in ps], [tokenize(p["hypothesis"]) for p in ps])
            for s, ps in pairs.items()}
  if vocab is None:
    vocab = Vocabulary.build(tokens["train"][0] + tokens["train"][1], pad=PAD, unk=UNK,
                             bos=None, eos=None)
  # One cap per sentence role over all splits, so the splits' batches share bucket shapes.
  width = [max(1, max((len(t) for ts in tokens.values() for t in ts[k]), default=1))
           for k in (0, 1)]
  splits = {}
  for split, ps in pairs.items():
    premise, premise_lengths = _padded(tokens[split][0], vocab, width[0])
    hypothesis, hypothesis_lengths = _padded(tokens[split][1], vocab, width[1])
    splits[split] = {"premise": premise, "premise_lengths": premise_lengths,
                     "hypothesis": hypothesis, "hypothesis_lengths": hypothesis_lengths,
                     "targets": np.asarray([p["label"] for p in ps], np.int32),
                     "index": np.asarray([p["index"] for p in ps], np.int32)}
    for v in splits[split].values():
      v.flags.writeable = False
  return Data(vocab, splits)


def load_pairs(data_split: str, manual_dir: str = "", data_dir: str = "") -> dict[str, list]:
  """``{split: [pair dict]}`` of ``SPLITS[data_split]`` (see the module docstring).

  Raises:
    ValueError: one line naming the missing file(s) (``full`` without the train file).
  """
  from tasks.datasets import snli as snli_data  # imports TFDS: only when data is needed
  builder_splits = {"full": ("train", "validation", "test"),
                    "dev90": ("validation", "test")}[data_split]
  try:
    raw = snli_data.load_splits(os.path.expanduser(manual_dir) if manual_dir else "",
                                os.path.expanduser(data_dir) if data_dir else "",
                                splits=builder_splits)
  except FileNotFoundError as err:
    hint = " (or train on 90% of dev: --variant=dev90)" if data_split == "full" else ""
    raise ValueError(" ".join(str(err).split()) + hint) from None
  if data_split == "full":
    return {"train": raw["train"], "dev": raw["validation"], "test": raw["test"]}
  dev = raw["validation"]
  train, heldout = dev90_split([pair["premise"] for pair in dev])
  return {"train": [dev[i] for i in train], "dev10": [dev[i] for i in heldout],
          "test": raw["test"]}


@functools.lru_cache(maxsize=4)
def _data(data_split: str, manual_dir: str, data_dir: str) -> Data:
  return encode(load_pairs(data_split, manual_dir, data_dir))


def data(config) -> Data:
  """The encoded data of ``config`` (prepared and loaded once per process)."""
  return _data(config["data_split"], config["manual_dir"], config["data_dir"])


def batch_maker(arrays: Mapping[str, np.ndarray], bucket: bool):
  """``idx -> batch``: rows ``idx``, each sentence cut to the power-of-two bucket of its
  longest in the batch (at least 8 tokens) when ``bucket``."""

  def make(idx):
    batch = {k: v[idx] for k, v in arrays.items()}
    for key in ("premise", "hypothesis"):
      cap = batch[key].shape[1]
      size = bucket_length(batch[f"{key}_lengths"].max(), MIN_BUCKET, cap) if bucket else cap
      batch[key] = np.ascontiguousarray(batch[key][:, :size])
    return batch

  return make


def train_data(config, *, process_index: int = 0,
               process_count: int = 1) -> ShuffledBatches:
  """Endless shuffled batches of the training pairs; deterministic in ``(seed, step)`` and
  resumable (:class:`tasks.data.ShuffledBatches`)."""
  d = data(config)
  return ShuffledBatches(d.size("train"), batch_maker(d.splits["train"], config.bucket_lengths),
                         seed=config.seed, batch_size=config.batch_size,
                         process_index=process_index, process_count=process_count)


def eval_data(config, split: str, *, process_index: int = 0,
              process_count: int = 1) -> Iterator[dict[str, np.ndarray]]:
  """An evaluation split (``"dev"`` for full, ``"dev10"`` for dev90, ``"test"``) in file
  order, every pair exactly once (padded rows of the last batch have mask 0)."""
  allowed = SPLITS[config.data_split][1:]
  if split not in allowed:
    raise ValueError(f"unknown snli split {split!r} for data_split="
                     f"{config.data_split!r}; its evaluation splits are {list(allowed)}.")
  d = data(config)
  return eval_batches(d.size(split), batch_maker(d.splits[split], config.bucket_lengths),
                      batch_size=config.batch_size, process_index=process_index,
                      process_count=process_count)


def sentence_batch(config, text: str, hypothesis: Optional[str] = None
                   ) -> tuple[list[str], dict[str, np.ndarray]]:
  """``(premise tokens, batch)`` of one pair (the hypothesis defaults to the premise), e.g.
  for :func:`rumjax.models.text_classifier.intra_attention` (``sentence="premise"``)."""
  vocab = data(config).vocab
  batch = {}
  tokens = None
  for key, sentence in (("premise", text), ("hypothesis", hypothesis or text)):
    words = tokenize(sentence)
    if not words:
      raise ValueError(f"the sentence {sentence!r} has no tokens.")
    tokens = words if tokens is None else tokens
    batch[key] = vocab.encode(words)[None]
    batch[f"{key}_lengths"] = np.asarray([len(words)], np.int32)
  return tokens, batch


def to_text(config, batch, row: int = 0) -> str:
  """A batch row as ``"premise || hypothesis -> label"``."""
  vocab = data(config).vocab
  text = lambda key: vocab.to_text(batch[key][row][:int(batch[f"{key}_lengths"][row])])
  return f"{text('premise')} || {text('hypothesis')} -> {LABELS[int(batch['targets'][row])]}"


# ----------------------------------------------------------------------- word vectors


def word_vectors(config) -> tuple[np.ndarray, np.ndarray]:
  """``(matrix <float32>[V, embed_dim], pretrained <bool>[V])`` of ``config.word_vectors``
  for the vocabulary (:func:`tasks.text.embeddings.config_word_vectors`)."""
  return embeddings.config_word_vectors(config, data(config).vocab)


def wrap_optimizer(config, tx: optax.GradientTransformation) -> optax.GradientTransformation:
  """With ``word_vectors``: pre-trained rows frozen (update x0) in the first epoch, only
  OOV rows learn (§5.3); else ``tx`` unchanged."""
  return embeddings.wrap_first_epoch(config, tx, data, embeddings.snli_row_scale)


# ---------------------------------------------------------------------------- model


def build_model(config):
  """The pair classifier of ``config.model`` (:func:`rumjax.models.text_classifier.
  build_text_classifier`); with ``word_vectors`` the embedding starts from them."""
  vocab = data(config).vocab
  return text_classifier.build_text_classifier(
      config.model.to_dict(), vocab_size=len(vocab), num_classes=NUM_CLASSES,
      embedding_init=embeddings.embedding_init(config, vocab))


# Mean cross-entropy of the label and accuracy, as (sum, count) pairs.
loss_and_metrics = metrics.classification_loss_and_metrics


TASK = Task(name=NAME, get_config=config_lib.get_config, validate_config=validate_config,
            train_data=train_data, eval_data=eval_data, build_model=build_model,
            loss_and_metrics=loss_and_metrics, variants=VARIANTS, eval_splits=EVAL_SPLITS,
            wrap_optimizer=wrap_optimizer, sentence_batch=sentence_batch,
            tokenize=tokenize, to_text=to_text)

"""Sentiment classification on the Stanford Sentiment Treebank (Cheng, Dong, Lapata 2016,
"Long Short-Term Memory-Networks for Machine Reading", §5.2 and Table 2).

Data: the PTB-format trees ``train.txt`` / ``dev.txt`` / ``test.txt`` through the TFDS
builder :mod:`tasks.datasets.sst`, read from ``manual_dir`` (default ``../shared/data/sst``
next to the checkout when it exists) or downloaded. Variants (``granularity``):

* ``"fine"`` (default): 5 classes, 8,544 / 1,101 / 2,210 sentences;
* ``"binary"``: neutral sentences removed, 0-1 -> negative, 3-4 -> positive: 6,920 / 872 /
  1,821 sentences.

Labels: **sentence-level only** (the root label of each tree). The builder also holds the
labels of every phrase (``span_*``), which the tree models of Table 2 train on; they are
not used here, as the paper's sequence models read whole sentences.

Text: the leaves lower-cased, PTB escapes mapped back (``-LRB-`` -> ``(``, ``-RRB-`` ->
``)``, ``-LSB-``/``-RSB-``, ``-LCB-``/``-RCB-``, ``\\/`` -> ``/``, ``\\*`` -> ``*``;
:func:`normalize`). The vocabulary is every word of the training sentences (min count 1)
plus ``<pad>`` (id 0) and ``<unk>`` (dev/test words not seen in training). A batch is
``{"inputs": <int32>[B, T], "lengths": <int32>[B], "targets": <int32>[B], "index":
<int32>[B] (the sentence's place among its file's trees), "mask"}``, padded to the next
power of two of its longest sentence (``bucket_lengths``; one compilation per bucket).

Models (``config.model``, :mod:`rumjax.models.text_classifier`): ``"lstmn"`` (default: 1
layer, hidden/memory 168, the paper's "memory size ... 168") or ``"lstm"`` (the LSTM
baseline, hidden 168; ``--config.model.name=lstm``, any cell with ``--cell``); the sentence
vector is the masked average of the hidden tape (``pooling="mean"``, for every model; the
paper states it for the 2-layer model only). ``model.mlp_layers`` None means the paper's
classifier: a linear softmax layer for 1 layer, a 2-layer ReLU network for
``model.num_layers=2``; dropout 0.5 before the softmax layer. Embeddings of 300
dimensions.

Training (§5.2): Adam (0.9, 0.999) at 2e-3, L2 1e-4 (``l2``), batch 5. Metrics:
``eval_accuracy`` (dev, every epoch and at the end), ``test_accuracy`` (at the end).

Word vectors: ``word_vectors`` is the path of a GloVe/word2vec text file (the paper: 300-d
GloVe 840B); ``""`` (default) trains the embeddings from scratch (no vector file is
available here). With a file, the embedding starts from its vectors (other words N(0, 1),
:func:`tasks.text.embeddings.load_word_vectors`) and, "the gradient for words with Glove
embeddings was scaled by 0.35 in the first epoch", :func:`wrap_optimizer` multiplies the
*updates* of those rows by 0.35 during the first epoch
(:func:`tasks.text.embeddings.scale_embedding_rows` chained after the optimizer): Adam divides by
the running RMS of the gradient, so a constant factor on a row's gradient (before Adam)
leaves its steps unchanged (measured: x0.35 before Adam gives steps x1.00; after Adam,
exactly x0.35).
"""

import dataclasses
import functools
import os
import re
from typing import Any, Iterator, Mapping, Optional

import numpy as np
import optax

from rumjax import metrics
from rumjax.models import text_classifier
from tasks import common
from tasks.base import Task
from tasks.configs import sst as config_lib
from tasks.data import ShuffledBatches, bucket_length, eval_batches
from tasks.text import embeddings, tokenizers
from tasks.text.vocabulary import Vocabulary

NAME = config_lib.NAME
VARIANTS = tuple(config_lib.VARIANTS)
EVAL_SPLITS = ("dev", "test")
SPLITS = ("train", "dev", "test")
MODELS = ("lstm", "lstmn")
FILES = ("train.txt", "dev.txt", "test.txt")
NUM_CLASSES = {"fine": 5, "binary": 2}
LABEL_NAMES = {"fine": ("very negative", "negative", "neutral", "positive", "very positive"),
               "binary": ("negative", "positive")}
PAD, UNK = "<pad>", "<unk>"
MIN_BUCKET = 8
_BUILDER_SPLIT = {"train": "train", "dev": "validation", "test": "test"}
_PTB_ESCAPES = {"-lrb-": "(", "-rrb-": ")", "-lsb-": "[", "-rsb-": "]", "-lcb-": "{",
                "-rcb-": "}"}


def check_files(config: Mapping[str, Any], names, what: str) -> None:
  """``ValueError`` (one line) naming the files of ``names`` missing from a non-empty
  ``config.manual_dir``."""
  root = os.path.expanduser(config["manual_dir"])
  if not root:
    return
  missing = [os.path.join(root, n) for n in names
             if not os.path.isfile(os.path.join(root, n))]
  if missing:
    raise ValueError(f"config.manual_dir={config['manual_dir']!r} lacks {', '.join(missing)}; "
                     f"it must hold {what}.")


def validate_config(config: Mapping[str, Any]) -> None:
  """Raises ``ValueError`` naming the first bad field (and missing data files)."""
  common.check_task(config, NAME, VARIANTS)
  common.validate_common(config, EVAL_SPLITS)
  common.validate_cell_model(config.model)
  text_classifier.check_model_config(config.model, MODELS)
  if config["granularity"] not in VARIANTS:
    raise ValueError(f"config.granularity={config['granularity']!r} must be one of "
                     f"{list(VARIANTS)}.")
  if not isinstance(config["bucket_lengths"], bool):
    raise ValueError(f"config.bucket_lengths={config['bucket_lengths']!r} must be True or "
                     "False.")
  common.check_int(config, "eval_batch_size", 1)
  embeddings.check_word_vectors(config)
  what = "the SST trees train.txt, dev.txt, test.txt (trainDevTestTrees_PTB.zip, trees/)"
  common.check_data_folders(config, what)
  check_files(config, FILES, what)


# ----------------------------------------------------------------------------- data


def normalize(token: str) -> str:
  """An SST leaf as a model token: lower-cased, PTB escapes mapped back
  (``-LRB-`` -> ``(``, ``\\/`` -> ``/``, ...)."""
  token = token.lower()
  return _PTB_ESCAPES.get(token, token).replace("\\/", "/").replace("\\*", "*")


# The punctuation the SST trees write as one token where the treebank regex splits it: an
# ellipsis ("..." 643 times in train.txt; "…"), a dash ("--" 513) and the double quote
# (``...'' 266 pairs, the Penn Treebank's opening and closing quotes).
_SST_MARKS = re.compile(r"\.{3,}|…|-{2,}|—|\"")
_OPENS_QUOTE = re.compile(r"(?:^|[\s(\[{—-])$")


def _mark(text: str, match: re.Match) -> str:
  """The SST token of one :data:`_SST_MARKS` match."""
  mark = match.group()
  if mark == '"':   # opening at the start, after a space, bracket or dash; else closing
    return "``" if _OPENS_QUOTE.search(text[:match.start()]) else "''"
  return "..." if mark[0] in ".…" else "--"


def tokenize(text: str) -> list[str]:
  """A raw sentence as model tokens, as the SST trees write them: ellipses, dashes and
  double quotes as the corpus's ``...``, ``--``, `````` and ``''`` (:data:`_SST_MARKS`),
  the rest by :func:`tasks.text.treebank_words` (SST's clitics: ``"it's"`` -> ``it 's``),
  then :func:`normalize`; e.g. ``'It's tough -- "fantastic" ...'`` -> ``["it", "'s",
  "tough", "--", "``", "fantastic", "''", "..."]``. On SST's dev set, a sentence's leaves
  written as raw text (joined by spaces, quotes as ``"`` touching the quoted words) come
  back as its leaves for 1,067 of 1,101 sentences (942 with the treebank regex alone; the
  rest differ in abbreviations such as ``vs.``, single quotes and rare marks)."""
  tokens, start = [], 0
  for match in _SST_MARKS.finditer(text):
    tokens += tokenizers.treebank_words(text[start:match.start()])
    tokens.append(_mark(text, match))
    start = match.end()
  tokens += tokenizers.treebank_words(text[start:])
  return [normalize(t) for t in tokens]


@dataclasses.dataclass(frozen=True)
class Data:
  """The encoded sentences of one granularity.

  Attributes:
    vocab: the :class:`tasks.text.Vocabulary` of the training sentences.
    splits: ``{split: {"inputs": <int32>[N, T_max], "lengths", "targets", "index"}}``.
  """
  vocab: Vocabulary
  splits: dict

  def size(self, split: str) -> int:
    return len(self.splits[split]["targets"])


def one_line(err: Exception) -> str:
  """A (multi-line) error message as one line."""
  return " ".join(str(err).split())


def encode(examples: Mapping[str, list], vocab: Optional[Vocabulary] = None) -> Data:
  """Token ids of every split, padded to the longest sentence of all splits (so dev and
  test batches share their bucket shapes); the vocabulary from ``examples["train"]``
  unless given."""
  tokens = {s: [[normalize(t) for t in ex["tokens"]] for ex in examples[s]] for s in SPLITS}
  if vocab is None:
    vocab = Vocabulary.build(tokens["train"], pad=PAD, unk=UNK, bos=None, eos=None)
  width = max(1, max(len(t) for ts in tokens.values() for t in ts))  # one cap: shared shapes
  splits = {}
  for split in SPLITS:
    exs = examples[split]
    lengths = np.asarray([len(t) for t in tokens[split]], np.int32)
    inputs = np.zeros((len(exs), width), np.int32)
    for i, words in enumerate(tokens[split]):
      inputs[i, :len(words)] = vocab.encode(words)
    splits[split] = {"inputs": inputs, "lengths": lengths,
                     "targets": np.asarray([ex["label"] for ex in exs], np.int32),
                     "index": np.asarray([ex["index"] for ex in exs], np.int32)}
    for v in splits[split].values():
      v.flags.writeable = False
  return Data(vocab, splits)


@functools.lru_cache(maxsize=4)
def _data(granularity: str, manual_dir: str, data_dir: str) -> Data:
  from tasks.datasets import sst as sst_data  # imports TFDS: only when data is needed
  try:
    raw = sst_data.load_splits(os.path.expanduser(manual_dir) if manual_dir else "",
                               os.path.expanduser(data_dir) if data_dir else "")
  except FileNotFoundError as err:
    raise ValueError(one_line(err)) from None
  examples = {s: raw[b] for s, b in _BUILDER_SPLIT.items()}
  if granularity == "binary":
    examples = {s: sst_data.binary_examples(v) for s, v in examples.items()}
  return encode(examples)


def data(config) -> Data:
  """The encoded data of ``config`` (prepared and loaded once per process)."""
  return _data(config["granularity"], config["manual_dir"], config["data_dir"])


def batch_maker(arrays: Mapping[str, np.ndarray], bucket: bool):
  """``idx -> batch``: rows ``idx``, cut to the power-of-two bucket of their longest
  sentence (at least 8 tokens) when ``bucket``."""

  def make(idx):
    batch = {k: v[idx] for k, v in arrays.items()}
    cap = batch["inputs"].shape[1]
    size = bucket_length(batch["lengths"].max(), MIN_BUCKET, cap) if bucket else cap
    batch["inputs"] = np.ascontiguousarray(batch["inputs"][:, :size])
    return batch

  return make


def train_data(config, *, process_index: int = 0,
               process_count: int = 1) -> ShuffledBatches:
  """Endless shuffled batches of the training sentences (module docstring); deterministic
  in ``(seed, step)`` and resumable (:class:`tasks.data.ShuffledBatches`)."""
  d = data(config)
  return ShuffledBatches(d.size("train"), batch_maker(d.splits["train"], config.bucket_lengths),
                         seed=config.seed, batch_size=config.batch_size,
                         process_index=process_index, process_count=process_count)


def eval_data(config, split: str, *, process_index: int = 0,
              process_count: int = 1) -> Iterator[dict[str, np.ndarray]]:
  """The ``"dev"`` or ``"test"`` sentences in file order, every one exactly once (padded
  rows of the last batch have mask 0)."""
  if split not in EVAL_SPLITS:
    raise ValueError(f"unknown sst split {split!r}; known splits are {list(EVAL_SPLITS)}.")
  d = data(config)
  return eval_batches(d.size(split), batch_maker(d.splits[split], config.bucket_lengths),
                      batch_size=config.batch_size, process_index=process_index,
                      process_count=process_count)


def sentence_batch(config, text: str, hypothesis: Optional[str] = None
                   ) -> tuple[list[str], dict[str, np.ndarray]]:
  """``(tokens, batch)`` of one raw sentence (:func:`tokenize`; words not in the
  vocabulary are ``<unk>``), e.g. for :func:`rumjax.models.text_classifier.intra_attention`.
  ``hypothesis`` must be None (SST reads one sentence; the argument mirrors
  :func:`tasks.snli.sentence_batch`)."""
  if hypothesis is not None:
    raise ValueError("sst reads one sentence; a hypothesis is for snli.")
  tokens = tokenize(text)
  if not tokens:
    raise ValueError(f"the sentence {text!r} has no tokens.")
  ids = data(config).vocab.encode(tokens)
  return tokens, {"inputs": ids[None], "lengths": np.asarray([len(ids)], np.int32)}


def to_text(config, batch, row: int = 0) -> str:
  """A batch row as ``"words -> label"``."""
  d = data(config)
  n = int(batch["lengths"][row])
  words = d.vocab.to_text(batch["inputs"][row][:n])
  return f"{words} -> {LABEL_NAMES[config.granularity][int(batch['targets'][row])]}"


# ----------------------------------------------------------------------- word vectors


def word_vectors(config) -> tuple[np.ndarray, np.ndarray]:
  """``(matrix <float32>[V, embed_dim], pretrained <bool>[V])`` of ``config.word_vectors``
  for the vocabulary (:func:`tasks.text.embeddings.config_word_vectors`)."""
  return embeddings.config_word_vectors(config, data(config).vocab)


def wrap_optimizer(config, tx: optax.GradientTransformation) -> optax.GradientTransformation:
  """With ``word_vectors``: the updates of the pre-trained rows x0.35 in the first epoch
  (§5.2), chained after the optimizer (module docstring); else ``tx`` unchanged."""
  return embeddings.wrap_first_epoch(config, tx, data, embeddings.sst_row_scale)


# ---------------------------------------------------------------------------- model


def model_config(config) -> dict:
  """``config.model`` as a dict with ``mlp_layers`` None resolved: 0 (a linear softmax
  layer) for 1 layer, 2 (the paper's "2-layer neural network classifier with ReLU") for
  more."""
  model = config.model.to_dict()
  if model["mlp_layers"] is None:
    model["mlp_layers"] = 0 if model["num_layers"] == 1 else 2
  return model


def build_model(config):
  """The classifier of ``config.model`` (:func:`rumjax.models.text_classifier.
  build_text_classifier`); with ``word_vectors`` the embedding starts from them."""
  vocab = data(config).vocab
  return text_classifier.build_text_classifier(
      model_config(config), vocab_size=len(vocab),
      num_classes=NUM_CLASSES[config.granularity],
      embedding_init=embeddings.embedding_init(config, vocab))


# Mean cross-entropy of the sentence label and accuracy, as (sum, count) pairs.
loss_and_metrics = metrics.classification_loss_and_metrics


TASK = Task(name=NAME, get_config=config_lib.get_config, validate_config=validate_config,
            train_data=train_data, eval_data=eval_data, build_model=build_model,
            loss_and_metrics=loss_and_metrics, variants=VARIANTS, eval_splits=EVAL_SPLITS,
            wrap_optimizer=wrap_optimizer, sentence_batch=sentence_batch,
            tokenize=tokenize, to_text=to_text)

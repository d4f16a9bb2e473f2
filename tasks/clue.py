"""The CLUE tasks of the StarSaber paper: three :class:`tasks.base.Task` objects
(``AFQMC``, ``TNEWS``, ``CMNLI``, registered as ``afqmc``, ``tnews``, ``cmnli``) over the
functions of this module; what differs between them is a :class:`Spec` looked up by name
in :data:`SPECS`, the config is :mod:`tasks.configs.clue`.

Set-up of "Transforming Recurrent Neural Networks with Attention and Fixed-point
Equations" (ICLR 2021 submission, §4):

* Text: characters (:func:`tasks.text.tokenizers.characters`, whitespace dropped); the
  vocabulary is every character of the task's train, dev and test inputs (the splits
  present), plus ``<pad>`` (id 0), ``<unk>`` (1) and the pair separator ``<sep>`` (2). A
  pair task (``Spec.pair``: AFQMC, CMNLI) reads ``sentence1 <sep> sentence2`` as one
  sequence ("we concatenate the two input sentences with a seperation"); TNEWS reads the
  title alone (keywords not used). Sequences longer than ``max_length`` are cut, the
  longer sentence of a pair first (the paper gives no length).
* ``objective`` (:data:`OBJECTIVES`) ``"classify"`` (default): a batch is ``{"inputs":
  <int32>[B, T], "lengths": <int32>[B], "targets": <int32>[B] (-1 on unlabelled test
  rows), "index", "id", "mask"}``, padded to the power-of-two bucket of its longest row.
  The loss is the multi-class hinge loss (:func:`rumjax.metrics.multi_margin_loss`, "Hinge Loss in
  training"), with ``class_weights="balanced"`` (not in the paper) weighted per row by
  :func:`balanced_class_weights` (the batch then carries ``"class_weight"``); metrics ``loss``, ``accuracy`` and, for two classes, ``precision``,
  ``recall`` and ``f1`` of class 1 and ``recall_0`` of class 0 (balanced accuracy is
  ``(recall + recall_0) / 2``; AFQMC's dev is 69.0% label 0, so accuracy alone cannot
  tell a model from the majority class). Adam 1e-4 ("1e-4 in fine-tuning"), seed 10, early
  stopping on dev accuracy (AFQMC: on dev loss, which moves while the accuracy sits at
  the majority class).
* ``objective="mlm"`` (variant ``"mlm"``, pretraining): the corpus is every input of
  train, dev and test without labels; each example gets a new mask every epoch
  (:func:`tasks.data.mlm.mask_tokens`, p = 0.3, a masked position takes a token drawn
  uniformly from the vocabulary without the specials, no [MASK] symbol; ``<sep>`` is never
  masked). The batch adds ``"targets" <int32>[B, T]`` (the original tokens) and
  ``"weights"`` (1 at masked positions); the loss is the cross-entropy "on all positions
  of a sequence", ``masked_accuracy`` / ``masked_loss`` report the masked ones. Adam 1e-3
  (the paper's Transformer used 1e-4 for both: ``--config.learning_rate=1e-4``). Its
  ``dev`` evaluation masks the dev inputs once (epoch 0): a monitor only, as the dev inputs
  are part of the pretraining corpus by the paper's design.
* Fine-tuning: ``--config.init_from=<the mlm workdir>`` (the embedding and encoder have
  the same parameter paths under both objectives; :func:`rumjax.training.restore_params`
  keeps the new classifier head). Use the same model sizes.
* Models (``config.model.name``, :mod:`rumjax.models.encoders`): ``starsaber``,
  ``starsaber_gate``, ``starsaber_pe``, ``starsaber_nodirect``, ``transformer``,
  ``rezero``, ``bilstm``. Default size (CPU-scaled): 4 layers, hidden 256; the paper's
  Table 1 sizes are in :mod:`tasks.experiments.clue`.
* Word2Vec group: ``word_vectors`` (a word2vec/GloVe text file of characters) starts the
  embedding from it (:func:`tasks.text.embeddings.embedding_init`) and
  ``model.freeze_embeddings`` keeps it fixed. No vector file is available here.
* Test labels are private (CLUE's leaderboard): :func:`submission` turns predictions of
  the ``test`` split into the benchmark's jsonl rows (``launch.predict``).
"""

import dataclasses
import functools
import os
from typing import Any, Callable, Mapping, Optional

import jax.numpy as jnp
import numpy as np

from rumjax import metrics
from rumjax.models import build_model as build_registered_model
from rumjax.models import encoders
from rumjax.models.text_classifier import length_mask
from rumjax.registry import Registry
from tasks import common
from tasks.base import Task
from tasks.configs import clue as config_lib
from tasks.data import ShuffledBatches, bucket_length, eval_batches
from tasks.data.mlm import mask_tokens
from tasks.text import embeddings, tokenizers
from tasks.text.vocabulary import Vocabulary

VARIANTS = tuple(config_lib.VARIANTS)
EVAL_SPLITS = ("dev", "test")
PAD, UNK, SEP = "<pad>", "<unk>", "<sep>"
MIN_BUCKET = 16
CLASS_WEIGHTS = ("none", "balanced")
_BUILDER_SPLIT = {"train": "train", "dev": "validation", "test": "test"}


@dataclasses.dataclass(frozen=True)
class Spec:
  """What one CLUE task is.

  Attributes:
    num_classes: the labels (the classifier's outputs).
    pair: the input is ``sentence1 <sep> sentence2`` (else ``sentence1`` alone).
    label_desc: the submission rows carry ``label_desc`` besides ``label``.
  """
  num_classes: int
  pair: bool
  label_desc: bool = False


SPECS = Registry("CLUE task")
SPECS.register("afqmc", Spec(num_classes=2, pair=True))
SPECS.register("tnews", Spec(num_classes=15, pair=False, label_desc=True))
SPECS.register("cmnli", Spec(num_classes=3, pair=True))


# --------------------------------------------------------------------------- config


def validate_config(task: str, config: Mapping[str, Any]) -> None:
  """Raises ``ValueError`` naming the first bad field of CLUE ``task``'s config (and
  missing data files)."""
  common.check_task(config, task, VARIANTS)
  common.validate_common(config, EVAL_SPLITS)
  if config["objective"] not in OBJECTIVES:
    raise ValueError(f"config.objective={config['objective']!r} must be one of "
                     f"{OBJECTIVES.names()}.")
  encoders.check_model_config(config.model)
  common.check_int(config, "max_length", 3)
  common.check_int(config, "eval_batch_size", 1)
  if not (common._is_number(config["mask_prob"]) and 0 < config["mask_prob"] <= 1):
    raise ValueError(f"config.mask_prob={config['mask_prob']!r} must be in (0, 1].")
  if config["class_weights"] not in CLASS_WEIGHTS:
    raise ValueError(f"config.class_weights={config['class_weights']!r} must be one of "
                     f"{list(CLASS_WEIGHTS)}.")
  if not isinstance(config["bucket_lengths"], bool):
    raise ValueError(f"config.bucket_lengths={config['bucket_lengths']!r} must be True or "
                     "False.")
  for name, entry in config.evals.items():
    if entry["split"] == "test" and config["objective"] == "classify":
      raise ValueError(f"config.evals.{name}.split='test': CLUE's test labels are "
                       "private; evaluate on 'dev' and write test predictions with "
                       "launch.predict.")
  embeddings.check_word_vectors(config, "word2vec/GloVe text file")
  common.check_data_folders(config, f"the CLUE {task} files train.json, dev.json, test.json")


# ----------------------------------------------------------------------------- data


def tokenize(text: str) -> list[str]:
  """Characters without whitespace, e.g. ``"花呗 账单"`` -> ``["花", "呗", "账", "单"]``."""
  return tokenizers.characters(text)


def join_pair(first: list, second: Optional[list], sep_id: int, max_length: int) -> list:
  """``first`` (+ ``[sep_id] + second`` for a pair), cut to ``max_length`` tokens: the
  longer sentence of a pair loses its last token first."""
  first = list(first)
  if second is None:
    return first[:max_length]
  second = list(second)
  while len(first) + len(second) + 1 > max_length:
    (first if len(first) >= len(second) else second).pop()
  return first + [sep_id] + second


def _split_inputs(examples: list, task: str):
  second = SPECS.get(task).pair
  return [(tokenize(ex["sentence1"]), tokenize(ex["sentence2"]) if second else None)
          for ex in examples]


def encode(examples: Mapping[str, list], task: str, max_length: int) -> "Data":
  """Ids of every split present (padded to ``max_length``) and the vocabulary of all
  their inputs."""
  texts = {s: _split_inputs(exs, task) for s, exs in examples.items()}
  corpus = [t for pairs in texts.values() for a, b in pairs for t in (a, b) if t is not None]
  chars = Vocabulary.build(corpus, pad=PAD, unk=UNK, bos=None, eos=None)
  vocab = Vocabulary((PAD, UNK, SEP) + chars.tokens[2:], (0, 0, 0) + chars.counts[2:],
                     pad=PAD, unk=UNK, bos=None, eos=None)
  sep = vocab.id(SEP)
  splits = {}
  for split, pairs in texts.items():
    rows = [join_pair(vocab.encode(a), None if b is None else vocab.encode(b), sep,
                      max_length) for a, b in pairs]
    inputs = np.zeros((len(rows), max_length), np.int32)
    for i, r in enumerate(rows):
      inputs[i, :len(r)] = r
    exs = examples[split]
    splits[split] = {"inputs": inputs,
                     "lengths": np.asarray([len(r) for r in rows], np.int32),
                     "targets": np.asarray([ex["label"] for ex in exs], np.int32),
                     "index": np.asarray([ex["index"] for ex in exs], np.int32),
                     "id": np.asarray([ex["id"] for ex in exs], np.int64)}
    for v in splits[split].values():
      v.flags.writeable = False
  return Data(vocab, splits)


class Data:
  """The encoded splits of one CLUE task.

  Attributes:
    vocab: the character :class:`tasks.text.Vocabulary` of all inputs.
    splits: ``{"train"|"dev"|"test": {"inputs": <int32>[N, max_length], "lengths",
      "targets", "index", "id"}}`` for the splits present.
  """

  def __init__(self, vocab: Vocabulary, splits: dict):
    self.vocab, self.splits = vocab, splits

  def size(self, split: str) -> int:
    return len(self.splits[split]["targets"])

  def corpus(self) -> dict:
    """The MLM corpus: every split's inputs and lengths, concatenated in split order."""
    names = [s for s in ("train", "dev", "test") if s in self.splits]
    return {k: np.concatenate([self.splits[s][k] for s in names])
            for k in ("inputs", "lengths")}


@functools.lru_cache(maxsize=4)
def _data(task: str, manual_dir: str, data_dir: str, max_length: int) -> Data:
  from tasks.datasets import clue as clue_data  # imports TFDS: only when data is needed
  try:
    raw = clue_data.load_splits(task, os.path.expanduser(manual_dir) if manual_dir else "",
                                os.path.expanduser(data_dir) if data_dir else "")
  except FileNotFoundError as err:
    raise ValueError(" ".join(str(err).split())) from None
  examples = {s: raw[b] for s, b in _BUILDER_SPLIT.items() if b in raw}
  if "train" not in examples:
    raise ValueError(f"the {task} data in {manual_dir or 'the download'} has no train.json; "
                     "put the CLUE files train.json, dev.json, test.json there.")
  return encode(examples, task, max_length)


def data(config) -> Data:
  """The encoded data of ``config`` (prepared and loaded once per process)."""
  return _data(config["task"], config["manual_dir"], config["data_dir"],
               config["max_length"])


def _cut(batch: dict, bucket: bool) -> dict:
  cap = batch["inputs"].shape[1]
  size = bucket_length(max(1, int(batch["lengths"].max())), MIN_BUCKET, cap) if bucket else cap
  for key in ("inputs", "targets", "weights"):
    if key in batch and batch[key].ndim == 2:
      batch[key] = np.ascontiguousarray(batch[key][:, :size])
  return batch


def _mlm_maker(config, arrays: Mapping[str, np.ndarray], vocab: Vocabulary, seed: int):
  """``(idx, epochs) -> batch`` of dynamically masked rows (module docstring)."""

  def make(idx, epochs=0):
    sep = vocab.id(SEP)
    masked = mask_tokens(arrays["inputs"][idx], indices=idx, epochs=epochs, seed=seed,
                         vocab_size=len(vocab), p=config.mask_prob, pad_id=vocab.pad_id,
                         protected_ids=[sep], exclude_ids=[*vocab.special_ids, sep])
    batch = {**masked, "lengths": arrays["lengths"][idx]}
    return _cut(batch, config.bucket_lengths)

  return make


def balanced_class_weights(targets: np.ndarray, num_classes: int) -> np.ndarray:
  """``w_c = N / (C N_c)`` (<float32>[C]): ``N_c`` rows of the ``N`` labelled ones
  (``targets >= 0``) have label ``c``; 0 for a class without rows. Weighted by them, every
  class holds the same share of the loss (scikit-learn's ``class_weight="balanced"``)."""
  targets = np.asarray(targets)
  counts = np.bincount(targets[targets >= 0], minlength=num_classes).astype(np.float64)
  weights = np.where(counts > 0, counts.sum() / (num_classes * np.maximum(counts, 1)), 0.0)
  return weights.astype(np.float32)


def _classify_maker(config, arrays: Mapping[str, np.ndarray], vocab: Vocabulary,
                    seed: int):
  """``idx -> batch`` of the labelled rows (``vocab`` and ``seed`` unused: no masking);
  with ``class_weights="balanced"`` each row's ``"class_weight"``, from the training
  split's label counts whatever split ``arrays`` is (0 on unlabelled rows)."""
  del vocab, seed
  weights = None
  if config.class_weights == "balanced":
    weights = balanced_class_weights(data(config).splits["train"]["targets"],
                                     SPECS.get(config.task).num_classes)

  def make(idx):
    batch = {k: v[idx] for k, v in arrays.items()}
    if weights is not None:
      targets = batch["targets"]
      batch["class_weight"] = np.where(targets >= 0, weights[np.maximum(targets, 0)], 0.0
                                       ).astype(np.float32)
    return _cut(batch, config.bucket_lengths)

  return make


@dataclasses.dataclass(frozen=True)
class Objective:
  """What ``config.objective`` trains on and how its batches are made.

  Attributes:
    train_arrays: ``Data -> arrays`` trained on (the training split, or the MLM corpus).
    maker: ``(config, arrays, vocab, seed) -> make(idx[, epochs]) -> batch``.
    new_mask_per_epoch: ``make`` takes the rows' epochs (a new mask every epoch).
  """
  train_arrays: Callable[["Data"], dict]
  maker: Callable[..., Callable]
  new_mask_per_epoch: bool


OBJECTIVES = Registry("objective")
OBJECTIVES.register("classify", Objective(lambda d: d.splits["train"], _classify_maker,
                                          new_mask_per_epoch=False))
OBJECTIVES.register("mlm", Objective(lambda d: d.corpus(), _mlm_maker,
                                     new_mask_per_epoch=True))


def train_data(config, *, process_index: int = 0,
               process_count: int = 1) -> ShuffledBatches:
  """Endless shuffled batches (of the training examples, or of the MLM corpus with a new
  mask per example and epoch); deterministic in ``(seed, step)`` and resumable."""
  d, objective = data(config), OBJECTIVES.get(config.objective)
  arrays = objective.train_arrays(d)
  return ShuffledBatches(len(arrays["lengths"]),
                         objective.maker(config, arrays, d.vocab, config.seed),
                         seed=config.seed, batch_size=config.batch_size,
                         process_index=process_index, process_count=process_count,
                         pass_epochs=objective.new_mask_per_epoch)


def eval_data(config, split: str, *, process_index: int = 0, process_count: int = 1):
  """The ``"dev"`` or ``"test"`` examples in file order, every one exactly once (padded
  rows of the last batch have mask 0); for ``mlm`` masked once (epoch 0, seed + 1)."""
  if split not in EVAL_SPLITS:
    raise ValueError(f"unknown {config.task} split {split!r}; known splits are "
                     f"{list(EVAL_SPLITS)}.")
  d = data(config)
  if split not in d.splits:
    raise ValueError(f"the {config.task} data has no {split} split (no "
                     f"{'dev' if split == 'dev' else 'test'}.json in "
                     f"{config.manual_dir or 'the download'}).")
  make = OBJECTIVES.get(config.objective).maker(config, d.splits[split], d.vocab,
                                                config.seed + 1)
  return eval_batches(d.size(split), make, batch_size=config.batch_size,
                      process_index=process_index, process_count=process_count)


def to_text(config, batch, row: int = 0) -> str:
  """A batch row as its characters (``<sep>`` between a pair) and its label index."""
  d = data(config)
  n = int(batch["lengths"][row])
  text = d.vocab.to_text(batch["inputs"][row][:n], sep="", strip_special=False)
  targets = batch["targets"][row]
  return text if np.ndim(targets) else f"{text} -> {int(targets)}"


# ---------------------------------------------------------------------------- model


def build_model(config):
  """The encoder model ``config.model.name`` (:mod:`rumjax.models.encoders`) over the
  task's vocabulary; with ``word_vectors`` the embedding starts from them."""
  vocab = data(config).vocab
  init = embeddings.embedding_init(config, vocab)
  kwargs = {"embedding_init": init} if init is not None else {}
  return build_registered_model(config.model, vocab_size=len(vocab),
                                num_classes=SPECS.get(config.task).num_classes, **kwargs)


def loss_and_metrics(outputs, batch):
  """Classification (logits <float>[B, C]): the hinge loss, accuracy and, for C = 2,
  precision / recall / F1 of class 1 and the recall of class 0. MLM (logits <float>[B, T, V]): the cross-entropy over
  every real position, and the loss / accuracy at the masked positions. All as
  ``(sum, count)`` pairs over the real (mask 1) rows. With ``batch["class_weight"]``
  (``class_weights="balanced"``) the loss is the weighted mean
  ``sum_i w_i l_i / sum_i w_i``; the other metrics count rows."""
  if outputs.ndim == 3:
    return mlm_loss_and_metrics(outputs, batch)
  targets = batch["targets"]
  mask = metrics.batch_mask(batch, targets.shape[0])
  weight = mask * batch["class_weight"] if "class_weight" in batch else mask
  hinge = jnp.sum(metrics.multi_margin_loss(outputs, targets) * weight)
  n, n_weight = jnp.sum(mask), jnp.sum(weight)
  pred = jnp.argmax(outputs, axis=-1)
  out = {"loss": (hinge, n_weight), "accuracy": (jnp.sum((pred == targets) * mask), n)}
  if outputs.shape[-1] == 2:
    true_pos = jnp.sum((pred == 1) * (targets == 1) * mask)
    out["precision"] = (true_pos, jnp.sum((pred == 1) * mask))
    out["recall"] = (true_pos, jnp.sum((targets == 1) * mask))
    # F1 of class 1 = 2 TP / (predicted 1 + labelled 1); recall of class 0.
    out["f1"] = (2 * true_pos, jnp.sum((pred == 1) * mask) + jnp.sum((targets == 1) * mask))
    out["recall_0"] = (jnp.sum((pred == 0) * (targets == 0) * mask),
                       jnp.sum((targets == 0) * mask))
  return hinge / jnp.where(n_weight > 0, n_weight, 1.0), out


def context_free_floor(data: Data, split: str = "dev") -> dict:
  """The masked-LM floor that pretraining must beat: what a predictor that ignores the
  context scores at the masked positions of ``split``. Positions are masked uniformly among
  the real ones (not ``SEP``), so with the character frequencies ``n_c`` of the MLM corpus
  (``data.corpus()``, ``N`` characters, vocabulary ``V``):

  - ``accuracy``: the share of ``split``'s positions holding the corpus's most frequent
    character (always predicting it);
  - ``cross_entropy``: ``-mean log p(c)`` over ``split``'s positions with the add-one
    unigram ``p(c) = (n_c + 1) / (N + V)``, in nats.
  """
  def real(arrays):
    inputs = np.asarray(arrays["inputs"])
    ids = inputs[np.asarray(length_mask(inputs, arrays["lengths"]))]
    return ids[ids != data.vocab.id(SEP)]

  counts = np.bincount(real(data.corpus()), minlength=len(data.vocab))
  ids = real(data.splits[split])
  p = (counts + 1.0) / (counts.sum() + len(data.vocab))
  return {"accuracy": float(np.mean(ids == np.argmax(counts))),
          "cross_entropy": float(-np.mean(np.log(p[ids])))}


def mlm_loss_and_metrics(logits, batch):
  """Masked-LM reconstruction: cross-entropy on all real positions (the paper), metrics at
  the masked positions (``weights``)."""
  targets = batch["targets"]
  rows = metrics.batch_mask(batch, targets.shape[0])
  real = length_mask(targets, batch["lengths"]) * rows[:, None]
  masked = batch["weights"] * rows[:, None]
  ce = metrics.cross_entropy(logits, targets)
  n = jnp.sum(real)
  correct = (jnp.argmax(logits, axis=-1) == targets)
  out = {"loss": (jnp.sum(ce * real), n),
         "masked_loss": (jnp.sum(ce * masked), jnp.sum(masked)),
         "masked_accuracy": (jnp.sum(correct * masked), jnp.sum(masked))}
  return out["loss"][0] / jnp.maximum(n, 1.0), out


# ----------------------------------------------------------------------- submission


def submission(config, rows) -> list[dict]:
  """CLUE's submission rows ``{"id": ..., "label": "<CLUE label>"}`` (TNEWS adds
  ``label_desc``) from :func:`rumjax.training.predict_checkpoint`'s ``rows`` of logits,
  padded rows (mask 0) dropped, in the split's order."""
  from tasks.datasets import clue as clue_data
  if config.objective != "classify":
    raise ValueError("a submission needs a classifier (config.objective='classify'); this "
                     "is a pretraining run.")
  # The labels the data was encoded with: the prepared builder's (a labels.json in a
  # <task>_public/ sub-folder or behind "~" is found there, as in training).
  builder = clue_data.prepare(config.task, config.manual_dir,
                              os.path.expanduser(config.data_dir) if config.data_dir else "")
  names = clue_data.label_names(config.task, builder)
  label_desc = SPECS.get(config.task).label_desc
  out = []
  for batch, logits in rows:
    pred = np.argmax(np.asarray(logits), axis=-1)
    for i in np.flatnonzero(np.asarray(batch["mask"]) > 0):
      code, desc = names[int(pred[i])]
      row = {"id": int(batch["id"][i]), "label": code}
      if label_desc:
        row["label_desc"] = desc
      out.append(row)
  return out


def _task(name: str) -> Task:
  """The Task of CLUE ``name`` (a name of :data:`SPECS`): this module's functions with the
  config and the config check of ``name``."""
  return Task(name=name, get_config=functools.partial(config_lib.get_config, name),
              validate_config=functools.partial(validate_config, name),
              train_data=train_data, eval_data=eval_data, build_model=build_model,
              loss_and_metrics=loss_and_metrics, variants=VARIANTS,
              eval_splits=EVAL_SPLITS, submission=submission, tokenize=tokenize,
              to_text=to_text)


AFQMC = _task("afqmc")    # question matching: 2 classes, pairs
TNEWS = _task("tnews")    # news titles: 15 categories
CMNLI = _task("cmnli")    # NLI: 3 classes, pairs

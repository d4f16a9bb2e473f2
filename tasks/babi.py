"""Task (C): bAbI question answering (Dangovski et al., TACL 2019, sec. 4.2 and Table 2;
ICLR-workshop version, appendix C and Table 4).

One model per sub-task ``babi_task`` (1..20) of bAbI v1.2 English (``version``
``"en-10k"``: about 9k/1k/1k train/dev/test questions, dev whole stories of the train file; or
``"en"``: 900/100/1,000). The data
comes from the TFDS builder :class:`tasks.datasets.babi.Babi` (array_record, no TensorFlow),
prepared once in ``data_dir`` from ``manual_dir`` (a folder laid out as the bAbI archive;
default ``../shared/data/babi`` next to the checkout when it exists) or, with an empty
``manual_dir``, from the public archive (online only).

Text: lower-cased, split into words and punctuation (:func:`tasks.text.words`:
``"Where is Mary?"`` -> ``where is mary ?``). The word vocabulary and the answer classes
are built from the train, dev and test questions of the sub-task (as usual for bAbI, e.g.
MemN2N and the Keras ``babi_rnn`` example), so there is no unknown word; id 0 is padding.
Answers are whole strings (``"apple,football"`` in lists-sets and ``"n,w"`` in
path-finding are one class).

Two levels (``level``):

* ``"word"``: the story's words then the question's words, one sequence (right-padded,
  ``lengths`` for ``nn.RNN(seq_lengths=...)``), 64-dim embeddings, the cell, a softmax at
  the last real step (:class:`rumjax.models.SequenceClassifier`). Batch
  ``{"inputs": <int32>[B, T], "lengths": <int32>[B], "targets": <int32>[B], "mask"}``.
* ``"sentence"``: every sentence and the question as the average of their word
  embeddings; the cell reads the sentences then the question; optional dot-product
  ``attention`` (:class:`rumjax.models.babi.SentenceQA`). Batch ``{"story": <int32>[B, S,
  W], "story_lengths": <int32>[B], "question": <int32>[B, W], "targets", "mask"}``.

With ``bucket_lengths`` a batch is padded only to the next power of two (at least 16
words / 8 sentences, at most the sub-task's maximum) of its longest row, so short stories
do not pay for the longest one; each bucket is one more compilation of the train step.

Training (the papers): batch 32, Adam lr 1e-3, no other regularisation, 64-dim embeddings,
hidden 256, RUM ``lam=0`` (word level) or ``lam`` 0/1 (sentence level), ``eta=None``; "train
until convergence on the dev set": ``launch/babi_all.py`` does early stopping on the dev
accuracy and keeps the best checkpoint. ``num_steps`` defaults to 20 epochs (appendix C).
Metrics: ``eval_accuracy`` on ``dev`` during training, ``test_accuracy`` at the end. The
config is :mod:`tasks.configs.babi` (variants ``word``, the default, ``sentence`` and
``sentence_attention``).

Data gap here: ``../shared/data/babi/en-10k`` lacks ``qa3_three-supporting-facts_train.txt``
(see its README); en-10k task 3 then fails with an error naming that file.
"""

import dataclasses
import functools
from typing import Any, Iterator, Mapping

import numpy as np

from rumjax import metrics, models
from tasks import common
from tasks.base import Task
from tasks.configs import babi as config_lib
from tasks.data import ShuffledBatches, bucket_length, eval_batches
from tasks.text import tokenizers

NAME = config_lib.NAME
EVAL_SPLITS = ("dev", "test")
SPLITS = ("train", "dev", "test")
LEVELS = tuple(config_lib.MODEL_OF_LEVEL)
DATA_VERSIONS = tuple(config_lib.PAPER_TRAIN_QUESTIONS)     # "en-10k", "en"
NUM_TASKS = config_lib.NUM_TASKS
PAD = "<pad>"


def validate_config(config: Mapping[str, Any]) -> None:
  """Raises ``ValueError`` naming the first bad field."""
  common.check_task(config, NAME, config_lib.VARIANTS)
  common.validate_common(config, EVAL_SPLITS)
  common.validate_cell_model(config.model)
  task = config["babi_task"]
  if not common._is_int(task) or not 1 <= task <= NUM_TASKS:
    raise ValueError(f"config.babi_task={task!r} must be an integer in 1..{NUM_TASKS}.")
  if config["version"] not in DATA_VERSIONS:
    raise ValueError(f"config.version={config['version']!r} must be one of "
                     f"{list(DATA_VERSIONS)}.")
  if config["level"] not in LEVELS:
    raise ValueError(f"config.level={config['level']!r} must be one of {list(LEVELS)}.")
  if not isinstance(config["bucket_lengths"], bool):
    raise ValueError(f"config.bucket_lengths={config['bucket_lengths']!r} must be True or "
                     "False.")
  expected = config_lib.MODEL_OF_LEVEL[config["level"]]
  if config.model.name != expected:
    raise ValueError(f"config.level={config['level']!r} needs config.model.name="
                     f"{expected!r} (got {config.model.name!r}); the variants "
                     f"{list(config_lib.VARIANTS)} set both.")
  if config.model.name == "sentence_qa" and not isinstance(config.model.attention, bool):
    raise ValueError(f"config.model.attention={config.model.attention!r} must be True or "
                     "False.")
  common.check_int(config.model, "embed_dim", 1, "config.model")
  common.check_data_folders(
      config, "the bAbI files as in the archive (en-10k/qa1_..._train.txt, ...)")


# ----------------------------------------------------------------------------- data


@functools.lru_cache(maxsize=8)
def load_questions(version: str, babi_task: int, manual_dir: str = "",
                   data_dir: str = "") -> dict[str, list[dict]]:
  """The questions of every split as dicts (see :mod:`tasks.datasets.babi`), in file order.

  Prepares the TFDS data in ``data_dir`` on first use (from ``manual_dir``, or by
  downloading when ``manual_dir`` is empty). Missing files or malformed lines raise an
  error naming the files/line.
  """
  from tasks.datasets import babi as babi_builder
  from tasks.datasets import prepare  # slow imports (TFDS): only when needed

  try:
    builder = babi_builder.prepare(version, int(babi_task), manual_dir, data_dir)
  except FileNotFoundError as err:   # one line; a ValueError and still a FileNotFoundError
    raise prepare.MissingSourceError(" ".join(str(err).split())) from None
  out = {}
  for split in SPLITS:
    source = builder.as_data_source(split=split)
    rows = source.__getitems__(list(range(len(source))))
    rows = [_plain(r) for r in rows]
    out[split] = sorted(rows, key=lambda r: r["question_index"])
  return out


def _plain(row: Mapping[str, Any]) -> dict:
  """A decoded TFDS row with ``str`` text and ``int`` ids."""
  text = lambda b: b.decode("utf-8") if isinstance(b, bytes) else str(b)
  return {"story": [text(s) for s in row["story"]],
          "story_line_ids": [int(i) for i in row["story_line_ids"]],
          "question": text(row["question"]), "answer": text(row["answer"]),
          "supporting_facts": [int(i) for i in row["supporting_facts"]],
          "story_index": int(row["story_index"]),
          "question_index": int(row["question_index"])}


@dataclasses.dataclass(frozen=True)
class Encoded:
  """A sub-task's questions as padded arrays for one level.

  Attributes:
    vocab: the words, ``vocab[0] == "<pad>"``.
    answers: the answer strings; ``targets`` index into it.
    splits: ``{split: {name: array}}`` with the batch fields of the module docstring,
      padded to the sub-task's maximum sizes (batches are cut down to their bucket).
  """
  vocab: tuple
  answers: tuple
  splits: dict

  def size(self, split: str) -> int:
    return len(self.splits[split]["targets"])


def encode(questions: Mapping[str, list[dict]], level: str) -> Encoded:
  """Token ids and answer classes of every split (vocabulary from all splits)."""
  tokenize = tokenizers.words
  tokenized = {s: [([tokenize(x) for x in q["story"]], tokenize(q["question"]), q["answer"])
                   for q in qs] for s, qs in questions.items()}
  words, answers = set(), set()
  for rows in tokenized.values():
    for story, question, answer in rows:
      words.update(w for sentence in story for w in sentence)
      words.update(question)
      answers.add(answer)
  vocab = (PAD,) + tuple(sorted(words))
  answers = tuple(sorted(answers))
  word_id = {w: i for i, w in enumerate(vocab)}
  answer_id = {a: i for i, a in enumerate(answers)}
  ids = lambda ws: [word_id[w] for w in ws]
  rows = [r for rs in tokenized.values() for r in rs]
  splits = {}
  if level == "word":
    max_len = max(sum(map(len, story)) + len(q) for story, q, _ in rows)
    for split, rs in tokenized.items():
      inputs = np.zeros((len(rs), max_len), np.int32)
      lengths = np.zeros((len(rs),), np.int32)
      for i, (story, question, _) in enumerate(rs):
        seq = ids([w for sentence in story for w in sentence] + question)
        inputs[i, :len(seq)] = seq
        lengths[i] = len(seq)
      splits[split] = {"inputs": inputs, "lengths": lengths}
  else:
    max_sent = max(1, max(len(story) for story, _, _ in rows))
    max_words = max(max([len(s) for s in story] + [len(q)]) for story, q, _ in rows)
    for split, rs in tokenized.items():
      story_arr = np.zeros((len(rs), max_sent, max_words), np.int32)
      question_arr = np.zeros((len(rs), max_words), np.int32)
      story_lengths = np.zeros((len(rs),), np.int32)
      for i, (story, question, _) in enumerate(rs):
        for j, sentence in enumerate(story):
          story_arr[i, j, :len(sentence)] = ids(sentence)
        question_arr[i, :len(question)] = ids(question)
        story_lengths[i] = len(story)
      splits[split] = {"story": story_arr, "story_lengths": story_lengths,
                       "question": question_arr}
  for split, rs in tokenized.items():
    splits[split]["targets"] = np.asarray([answer_id[a] for _, _, a in rs], np.int32)
  for arrays in splits.values():
    for v in arrays.values():
      v.flags.writeable = False
  return Encoded(vocab=vocab, answers=answers, splits=splits)


@functools.lru_cache(maxsize=8)
def _encoded_cached(version, babi_task, manual_dir, data_dir, level) -> Encoded:
  return encode(load_questions(version, babi_task, manual_dir, data_dir), level)


def encoded(config) -> Encoded:
  """The encoded sub-task of ``config`` (loaded and prepared once per process)."""
  return _encoded_cached(config["version"], int(config["babi_task"]), config["manual_dir"],
                         config["data_dir"], config["level"])


def batch_maker(arrays: Mapping[str, np.ndarray], level: str, bucket: bool,
                subtask: int = 0):
  """``idx -> batch``: the rows ``idx`` of a split, cut to their length bucket, with the
  rows' bAbI sub-task <int32>[rows] as ``"subtask"`` (for per-sub-task accuracy)."""

  def make(idx):
    batch = {k: v[idx] for k, v in arrays.items()}
    batch["subtask"] = np.full((len(idx),), subtask, np.int32)
    if level == "word":
      cap = batch["inputs"].shape[1]
      size = bucket_length(batch["lengths"].max(), 16, cap) if bucket else cap
      batch["inputs"] = np.ascontiguousarray(batch["inputs"][:, :size])
    else:
      cap = batch["story"].shape[1]
      size = bucket_length(batch["story_lengths"].max(), 8, cap) if bucket else cap
      batch["story"] = np.ascontiguousarray(batch["story"][:, :size])
    return batch

  return make


def train_data(config, *, process_index: int = 0,
               process_count: int = 1) -> ShuffledBatches:
  """Endless shuffled batches of the ``train`` split (see the module docstring for the
  fields); deterministic in ``(seed, step)``, resumable (:class:`tasks.data.ShuffledBatches`)."""
  data = encoded(config)
  return ShuffledBatches(
      data.size("train"), batch_maker(data.splits["train"], config.level,
                                      config.bucket_lengths, config.babi_task),
      seed=config.seed, batch_size=config.batch_size, process_index=process_index,
      process_count=process_count)


def eval_data(config, split: str, *, process_index: int = 0,
              process_count: int = 1) -> Iterator[dict[str, np.ndarray]]:
  """The ``"dev"`` or ``"test"`` split in order, in batches of ``batch_size`` (padded
  rows have mask 0)."""
  if split not in EVAL_SPLITS:
    raise ValueError(f"unknown babi split {split!r}; known splits are "
                     f"{list(EVAL_SPLITS)}.")
  data = encoded(config)
  return eval_batches(
      data.size(split), batch_maker(data.splits[split], config.level,
                                    config.bucket_lengths, config.babi_task),
      batch_size=config.batch_size, max_batches=None,
      process_index=process_index, process_count=process_count)


# ---------------------------------------------------------------------------- model


def build_model(config):
  """``config.model``: word level :class:`rumjax.models.SequenceClassifier` with an
  ``embed_dim`` embedding; sentence level :class:`rumjax.models.babi.SentenceQA`."""
  data = encoded(config)
  return models.build_model(config.model, vocab_size=len(data.vocab),
                            num_classes=len(data.answers))


# Mean cross-entropy of the answer and accuracy, as (sum, count) pairs.
loss_and_metrics = metrics.classification_loss_and_metrics


def to_text(config, batch, row: int = 0) -> str:
  """A readable question of a batch: the story, the question and the answer."""
  data = encoded(config)
  words = lambda ids: " ".join(data.vocab[int(i)] for i in ids if int(i))
  answer = data.answers[int(batch["targets"][row])]
  if "inputs" in batch:
    text = words(batch["inputs"][row][:int(batch["lengths"][row])])
  else:
    n = int(batch["story_lengths"][row])
    text = " | ".join(words(s) for s in batch["story"][row][:n])
    text += " || " + words(batch["question"][row])
  return f"{text} -> {answer}"


TASK = Task(name=NAME, get_config=config_lib.get_config, validate_config=validate_config,
            train_data=train_data, eval_data=eval_data, build_model=build_model,
            loss_and_metrics=loss_and_metrics, variants=tuple(config_lib.VARIANTS),
            eval_splits=EVAL_SPLITS, to_text=to_text)

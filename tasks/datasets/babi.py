r"""TFDS builder for the bAbI question answering tasks v1.2 (Weston et al., 2016), English.

One ``BuilderConfig`` per data version and sub-task: ``en-10k_qa1`` ... ``en-10k_qa20``
(10,000 training questions per sub-task) and ``en_qa1`` ... ``en_qa20`` (1,000). Splits:

* ``train`` / ``dev``: the file ``qa<k>_<name>_train.txt`` split 90/10 by story with a
  fixed seed (:func:`dev_indices`: about 9,000 / 1,000 questions for en-10k, 900 / 100
  for en; whole stories, so no story asks in both);
* ``test``: ``qa<k>_<name>_test.txt`` (1,000 questions).

Each example is one question with the story it sees::

    {"story": ["Mary moved to the bathroom.", "John went to the hallway."],  # Text
     "story_line_ids": [1, 2],       # the sentences' ids in the file
     "question": "Where is Mary?", "answer": "bathroom",                     # Text
     "supporting_facts": [1],        # line ids (as in the file) of the supporting sentences
     "story_index": 0,               # 0-based story number in the file
     "question_index": 0}            # 0-based question number in the file (a stable order)

The bAbI format: every line is ``<id> <text>``; ids count up from 1 and a 1 starts a new
story. A question line is ``<id> <question>\t<answer>\t<supporting ids>``. A question sees
the statements of its story before it, not the later ones and not the earlier questions
(their ids are still counted, so supporting ids can skip numbers). Answers with several
words (lists-sets "apple,football", path-finding "n,w") are kept as one string.

Source: the public archive ``tasks_1-20_v1-2.tar.gz`` (downloaded when online) or, with
``manual_dir``, a folder laid out as in the archive::

    <manual_dir>/en-10k/qa1_single-supporting-fact_train.txt
    <manual_dir>/en-10k/qa1_single-supporting-fact_test.txt
    <manual_dir>/en/qa1_single-supporting-fact_train.txt   ...

Use (TensorFlow not needed)::

    >>> builder = prepare("en-10k", 1, manual_dir="../shared/data/babi", data_dir="/tmp/tfds")
    >>> ds = builder.as_data_source(split="train")   # random access, 9,000 examples

:func:`prepare` prepares the data under a config named after the source files' content
(``en-10k_qa1-<tag>``, see :mod:`tasks.datasets.prepare`: a changed file is prepared
afresh) and logs one line per split whose question count is not the published one
(:data:`NUM_QUESTIONS`). A file that is not UTF-8 text is a
:class:`tasks.datasets.prepare.SourceFileError` naming the file and the byte.

``Babi(..., allow_download=False)`` never goes online: a missing or empty ``manual_dir``
is an error that says which files to put where.
"""

import hashlib
import re
from typing import Iterable, Iterator, Sequence

import numpy as np
import tensorflow_datasets as tfds
from etils import epath

from tasks.datasets import prepare as prepare_lib

URL = "http://www.thespermwhale.com/jaseweston/babi/tasks_1-20_v1-2.tar.gz"
ARCHIVE_ROOT = "tasks_1-20_v1-2"   # the archive's top folder
VERSIONS = ("en-10k", "en")
TASK_NAMES = {
    1: "single-supporting-fact", 2: "two-supporting-facts", 3: "three-supporting-facts",
    4: "two-arg-relations", 5: "three-arg-relations", 6: "yes-no-questions",
    7: "counting", 8: "lists-sets", 9: "simple-negation", 10: "indefinite-knowledge",
    11: "basic-coreference", 12: "conjunction", 13: "compound-coreference",
    14: "time-reasoning", 15: "basic-deduction", 16: "basic-induction",
    17: "positional-reasoning", 18: "size-reasoning", 19: "path-finding",
    20: "agents-motivations",
}
DEV_FRACTION = 0.1
DEV_SEED = 0
# Questions per file of the published data (the training file's 10,000 or 1,000, which
# train and dev split about 90/10 by whole stories; the test file's 1,000), checked on
# ../shared/data/babi. (The split by stories cannot always hit 10% exactly: en-10k qa18
# and qa20 give 8,998/1,002 and 8,993/1,007, en qa17 and qa20 896/104 and 893/107.)
NUM_QUESTIONS = {"en-10k": {"train+dev": 10_000, "test": 1_000},
                 "en": {"train+dev": 1_000, "test": 1_000}}
SPLIT_FILES = {"train": "train", "dev": "train", "test": "test"}   # the file of each split
FIX = (f"put back the file of the bAbI v1.2 archive ({URL}), plain UTF-8 text, and run "
       "again (the data is prepared again)")

_CITATION = """\
@inproceedings{weston2016towards,
  title={Towards AI-Complete Question Answering: A Set of Prerequisite Toy Tasks},
  author={Weston, Jason and Bordes, Antoine and Chopra, Sumit and Rush, Alexander M. and
          van Merri{\\"e}nboer, Bart and Joulin, Armand and Mikolov, Tomas},
  booktitle={ICLR}, year={2016}}
"""


def config_name(version: str, task: int) -> str:
  """``"en-10k_qa1"`` etc."""
  return f"{version}_qa{task}"


def file_name(task: int, split: str) -> str:
  """``file_name(1, "train") == "qa1_single-supporting-fact_train.txt"``."""
  return f"qa{task}_{TASK_NAMES[task]}_{split}.txt"


def relative_paths(version: str, task: int) -> dict[str, str]:
  """The archive-relative paths of a sub-task's files: ``{"train": ..., "test": ...}``."""
  return {s: f"{version}/{file_name(task, s)}" for s in ("train", "test")}


class BabiFormatError(ValueError):
  """A line that is not in the bAbI format; the message names the file and line."""


# --------------------------------------------------------------------------- parsing


def parse_lines(lines: Iterable[str], source: str = "<lines>") -> list[dict]:
  """The questions of a bAbI file, in order, each with the story it sees.

  Args:
    lines: the file's lines.
    source: the file name for error messages.

  Returns:
    One dict per question with the fields of the module docstring (plain Python types).

  Raises:
    BabiFormatError: naming ``source`` and the 1-based line number.
  """
  out: list[dict] = []
  story: list[tuple[int, str]] = []
  prev_id, story_index = 0, -1
  for lineno, raw in enumerate(lines, start=1):
    line = raw.rstrip("\r\n")
    if not line.strip():
      continue  # blank lines (e.g. a trailing one) carry nothing

    def fail(msg):
      raise BabiFormatError(f"{source}, line {lineno}: {msg}; got {line[:120]!r}. A bAbI "
                            "line is '<id> <sentence>' or '<id> <question>\\t<answer>\\t"
                            "<supporting ids>'.")

    m = re.fullmatch(r"(\d+) (.*)", line)
    if m is None:
      fail("expected a line id (a positive integer) and a space")
    line_id, text = int(m.group(1)), m.group(2)
    if line_id == 1:
      story, story_index = [], story_index + 1
    elif line_id != prev_id + 1 or story_index < 0:
      fail(f"line id {line_id} does not follow {prev_id} (ids count up from 1 within a "
           "story, and 1 starts a new story)")
    prev_id = line_id
    if "\t" not in text:
      if not text.strip():
        fail("empty sentence")
      story.append((line_id, text.strip()))
      continue
    fields = text.split("\t")
    if len(fields) != 3:
      fail(f"a question line needs 3 tab-separated fields (question, answer, supporting "
           f"fact ids), found {len(fields)}")
    question, answer, support = (f.strip() for f in fields)
    if not question or not answer:
      fail("empty question or answer")
    try:
      support_ids = [int(s) for s in support.split()]
    except ValueError:
      fail(f"supporting fact ids {support!r} are not integers")
    statement_ids = {i for i, _ in story}
    bad = [i for i in support_ids if i not in statement_ids]
    if bad:
      fail(f"supporting fact id(s) {bad} are not statements of this story before the "
           "question")
    out.append({
        "story": [s for _, s in story],
        "story_line_ids": [i for i, _ in story],
        "question": question,
        "answer": answer,
        "supporting_facts": support_ids,
        "story_index": story_index,
        "question_index": len(out),
    })
  return out


def parse_file(path) -> list[dict]:
  """:func:`parse_lines` of a file (UTF-8; else :class:`prepare_lib.SourceFileError`
  naming the file and the byte offset)."""
  path = epath.Path(path)
  return parse_lines(prepare_lib.read_text_lines(path, fix=FIX), source=str(path))


def dev_indices(story_indices: Sequence[int], seed: int = DEV_SEED) -> np.ndarray:
  """The sorted indices of the training questions that form the ``dev`` split, given each
  question's story (``story_indices[i]``).

  Whole stories, in the order of ``sha256(f"{seed}:{story}")``: each story that still fits
  in ``k = round(DEV_FRACTION * n)`` questions (at least 1 when ``n >= 2``); if that leaves
  dev short of ``k``, the first story left that does not empty the training split (a file
  of one story gives its last question to dev, so that dev is never empty). Whole stories: a story that asks the same
  question twice (qa15 "What is gertrude afraid of?" three times over the same sentences)
  must not put one copy in train and one in dev; split by question, 512 of en-10k qa15's
  1,000 dev questions were exact copies of training questions (session 32). A pure
  function of ``(story_indices, seed)``, stable across NumPy and Python versions.
  """
  n = len(story_indices)
  k = int(round(DEV_FRACTION * n))
  if n >= 2:
    k = max(k, 1)
  questions_of = {}
  for i, story in enumerate(story_indices):
    questions_of.setdefault(int(story), []).append(i)
  order = sorted(questions_of,
                 key=lambda s: hashlib.sha256(f"{seed}:{s}".encode()).digest())
  dev, taken = [], set()
  for story in order:
    if len(dev) + len(questions_of[story]) <= k:
      dev += questions_of[story]
      taken.add(story)
  for story in order:
    if len(dev) >= k:
      break
    if story not in taken and len(dev) + len(questions_of[story]) < n:
      dev += questions_of[story]
  if not dev and n >= 2:   # one story (a tiny file): its last question, so dev is not empty
    dev = [n - 1]
  return np.asarray(sorted(dev), np.int64)


def split_train_dev(questions: Sequence[dict], seed: int = DEV_SEED):
  """``(train, dev)`` lists: the 90/10 split of a training file's questions, by story
  (:func:`dev_indices`)."""
  dev = set(dev_indices([q["story_index"] for q in questions], seed).tolist())
  return ([q for i, q in enumerate(questions) if i not in dev],
          [q for i, q in enumerate(questions) if i in dev])


# --------------------------------------------------------------------------- builder


def missing_files_message(root, version: str, task: int, *, reason: str) -> str:
  """One line: ``reason``, the files to create and where they come from."""
  return prepare_lib.create_files_message(
      f"bAbI {config_name(version, task)}",
      [epath.Path(root) / p for p in relative_paths(version, task).values()], reason=reason,
      source=f"the files of the bAbI v1.2 archive ({URL}, unpacked; its folder "
      f"{ARCHIVE_ROOT}/ holds en/ and en-10k/)", layout="laid out as in the archive",
      download="it")


class BabiConfig(tfds.core.BuilderConfig):
  """A data version (``"en-10k"`` or ``"en"``) and a sub-task (1..20)."""

  def __init__(self, *, babi_version: str, task: int, **kwargs):
    super().__init__(name=config_name(babi_version, task),
                     description=f"bAbI v1.2 {babi_version} task {task}: "
                     f"{TASK_NAMES[task]}.", **kwargs)
    self.babi_version = babi_version
    self.task = task


class Babi(prepare_lib.AllowDownload, tfds.core.GeneratorBasedBuilder):
  """bAbI v1.2 English QA, one config per version and sub-task (see the module doc)."""

  VERSION = tfds.core.Version("1.1.0")
  RELEASE_NOTES = {"1.0.0": "bAbI v1.2; train split 90/10 into train/dev (seed 0).",
                   "1.1.0": "train/dev split by story, not by question (a story's repeated "
                            "question was in both)."}
  BUILDER_CONFIGS = [BabiConfig(babi_version=v, task=t) for v in VERSIONS
                     for t in sorted(TASK_NAMES)]
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      f"Unpack {URL} and pass its folder {ARCHIVE_ROOT}/ (the one holding en/ and "
      "en-10k/) as manual_dir, e.g. manual_dir/en-10k/qa1_single-supporting-fact_train.txt.")

  def _info(self) -> tfds.core.DatasetInfo:
    return prepare_lib.dataset_info(
        self, {"story": tfds.features.Sequence(tfds.features.Text()),
               "story_line_ids": tfds.features.Sequence(np.int32),
               "question": tfds.features.Text(), "answer": tfds.features.Text(),
               "supporting_facts": tfds.features.Sequence(np.int32),
               "story_index": np.int32, "question_index": np.int32},
        homepage="https://research.facebook.com/downloads/babi/", citation=_CITATION,
        file_order=False)

  def _missing_files(self, root, *, reason: str) -> str:
    config = self.builder_config
    return missing_files_message(root, config.babi_version, config.task, reason=reason)

  def _source_root(self, dl_manager) -> epath.Path:
    """The folder holding ``en/`` and ``en-10k/``: ``manual_dir`` or the download."""
    return prepare_lib.source_root(
        dl_manager, allow_download=self._allow_download, url=URL, folder=ARCHIVE_ROOT,
        missing=self._missing_files)

  def _split_generators(self, dl_manager):
    config = self.builder_config
    paths = prepare_lib.require_files(
        self._source_root(dl_manager), relative_paths(config.babi_version, config.task),
        self._missing_files)
    train, dev = split_train_dev(parse_file(paths["train"]))
    test = parse_file(paths["test"])
    return {"train": self._generate_examples(train), "dev": self._generate_examples(dev),
            "test": self._generate_examples(test)}

  def _generate_examples(self, questions: Sequence[dict]) -> Iterator[tuple[int, dict]]:
    for q in questions:
      yield q["question_index"], q


# --------------------------------------------------------------------------- preparing


def prepare(version: str, task: int, manual_dir: str = "", data_dir: str = "") -> Babi:
  """The prepared builder of a sub-task (prepared in ``data_dir`` on first use; safe for two
  runs that share ``data_dir``).

  Data from ``manual_dir`` is prepared under the config ``<version>_qa<task>-<tag>`` of its
  files (:func:`prepare_lib.prepare_sourced`: a changed file is prepared afresh). Logs one
  line per split whose question count is not :data:`NUM_QUESTIONS`.

  Raises:
    FileNotFoundError: listing the files to put in ``manual_dir``.
    BabiFormatError: naming the file and line of a malformed line.
    prepare_lib.SourceFileError: a file that is not UTF-8 text (names it and the byte).
  """
  name = config_name(version, task)
  if name not in Babi.builder_configs:
    raise ValueError(f"bAbI {name} is not a sub-task; use a version of {list(VERSIONS)} and "
                     f"a task 1..{len(TASK_NAMES)}.")
  manual_dir = str(epath.Path(manual_dir).expanduser()) if manual_dir else ""
  paths = relative_paths(version, task)
  record = prepare_lib.source_record(manual_dir, paths.values()) if manual_dir else None
  builder = prepare_lib.prepare_sourced(Babi, Babi.builder_configs[name], manual_dir, data_dir,
                                        record=record, dataset=f"bAbI {name}")
  root = manual_dir or f"the downloaded {ARCHIVE_ROOT}"
  sizes = prepare_lib.split_sizes(builder, tuple(SPLIT_FILES))
  got = {s: n for s, n in sizes.items() if s == "test"}
  if "train" in sizes and "dev" in sizes:
    got["train+dev"] = sizes["train"] + sizes["dev"]
  prepare_lib.warn_counts(
      f"bAbI {name}", got, NUM_QUESTIONS[version], what="questions",
      files={"train+dev": f"{epath.Path(root) / paths['train']}",
             "test": f"{epath.Path(root) / paths['test']}"})
  return builder

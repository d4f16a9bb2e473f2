r"""TFDS builder for story / summary / title data (Science-Daily style) and the RUM paper's
four summarization sub-tasks on it.

Splits ``train`` / ``validation`` / ``test`` from ``train.jsonl`` / ``validation.jsonl`` /
``test.jsonl`` in ``manual_dir`` (no download: there is no public archive), each optional.
One JSON object per line with the fields ``story`` (paragraphs separated by a blank line,
``"\n\n"``), ``summary`` and ``title``; each example::

    {"index": 0,     # 0-based line of the story in its file (blank lines not counted)
     "story": "Researchers have found ...\n\nThe team ...",
     "summary": "A new study shows ...",
     "title": "Bees use sun as compass"}     # "" when the line has no "title"

``story`` and ``summary`` must be non-empty strings; ``title`` may be left out ("") unless
the task is ``s2t`` (:func:`source_target` refuses an empty title). The texts are stored as
written: lower-casing and tokenisation are the task's.

The RUM paper's Science-Daily tasks (:data:`SUBTASKS`, :func:`source_target`):

* ``s2s``: story -> summary;
* ``sh2s``: the story with its paragraphs shuffled -> summary; the order is fixed per
  example and split (:func:`shuffled_paragraphs`: ``np.random.default_rng([seed, split,
  index])``), so every epoch and every run with the same seed sees the same shuffled story;
* ``s2t``: story -> title;
* ``oods2s``: story -> summary, as ``s2s``: out of domain is the evaluation data, not the
  pairs. The task trains on one prepared dataset and evaluates on another (its config names
  a second ``manual_dir``; each is prepared under its own config name, see :func:`prepare`).

Missing splits: the builder builds the splits whose files are there and logs one line
naming the missing files; :func:`read_split` of a split that was not built raises
:class:`MissingSplitError`. No file at all is a one-line ``FileNotFoundError`` naming the
folder and files. A malformed line raises :class:`StoriesFormatError` naming the file and
line. Data prepared from ``manual_dir`` follows its files (:mod:`tasks.datasets.prepare`):
a file added, changed or removed later is prepared afresh, in a new folder.

Use (TensorFlow not needed)::

    >>> from tasks.datasets import stories
    >>> builder = stories.prepare("/data/sciencedaily", "/tmp/tfds")   # config "sciencedaily"
    >>> train = stories.read_split(builder, "train")
    >>> stories.source_target(train[0], "sh2s", seed=0)     # (shuffled story, summary)
"""

import re
from typing import Iterable, Mapping, Optional, Sequence, Union

import numpy as np
import tensorflow_datasets as tfds
from etils import epath

from tasks.datasets import prepare as prepare_lib

SPLITS = ("train", "validation", "test")
FILE_NAMES = {s: f"{s}.jsonl" for s in SPLITS}
FIELDS = ("story", "summary", "title")
REQUIRED = ("story", "summary")   # non-empty strings; "title" may be missing ("")
SUBTASKS = ("s2s", "sh2s", "s2t", "oods2s")
PARAGRAPH_BREAK = "\n\n"
_BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")
_NAME = re.compile(r"[^a-z0-9_]+")


class StoriesFormatError(ValueError):
  """A line that is not a story record; the message names the file and line."""


class MissingSplitError(prepare_lib.MissingSplitError):
  """A split whose file was missing when the data was prepared; the message names it."""


_check_split = prepare_lib.split_checker(SPLITS, "a stories split")


def expected_file(root, split: str) -> str:
  """``"<root>/<split>.jsonl"``: a split's file."""
  _check_split(split)
  return str(epath.Path(root) / FILE_NAMES[split])


# --------------------------------------------------------------------------- sub-tasks


def paragraphs(story: str) -> list[str]:
  """The paragraphs of a story: its text split at blank lines (``"\n\n"``, blanks allowed in
  the empty line), each stripped, empty ones dropped. A story without a blank line is one
  paragraph; ``""`` has none."""
  return [p.strip() for p in _BLANK_LINE.split(story.replace("\r\n", "\n")) if p.strip()]


# The split's place in the key of :func:`shuffled_paragraphs` (an ``index`` counts lines
# within its split's file, so train's example 3 and test's example 3 share it).
SPLIT_KEYS = {"train": 0, "validation": 1, "test": 2}


def shuffled_paragraphs(story: str, seed: int, index: int, split: str = "train") -> str:
  """The story with its paragraphs in a random order, joined by ``"\n\n"`` (the ``sh2s``
  source).

  The order is ``np.random.default_rng([seed, SPLIT_KEYS[split], index]).permutation(n)``
  of the ``n`` :func:`paragraphs`: the same for the same ``seed``, ``split`` and example
  ``index`` (any run, any epoch), independent between examples and splits. It may be the
  original order (probability ``1/n!``); a story of one paragraph is returned as that
  paragraph.

  Args:
    story: the story text.
    seed: the task's data seed (a non-negative integer).
    index: the example's ``index`` (a non-negative integer).
    split: the builder split the example is from (a key of :data:`SPLIT_KEYS`).
  """
  if seed < 0 or index < 0:
    raise ValueError(f"seed={seed} and index={index} must be non-negative.")
  if split not in SPLIT_KEYS:
    raise ValueError(f"split={split!r}; use one of {list(SPLIT_KEYS)}.")
  parts = paragraphs(story)
  order = np.random.default_rng([int(seed), SPLIT_KEYS[split], int(index)]).permutation(
      len(parts))
  return PARAGRAPH_BREAK.join(parts[i] for i in order)


def source_target(example: Mapping, subtask: str, seed: int = 0,
                  split: str = "train") -> tuple[str, str]:
  """``(source_text, target_text)`` of an example for a sub-task (module docstring).

  Args:
    example: a dict of :func:`read_split` (``index``, ``story``, ``summary``, ``title``).
    subtask: ``"s2s"``, ``"sh2s"``, ``"s2t"`` or ``"oods2s"``.
    seed: ``sh2s``: the seed of :func:`shuffled_paragraphs` (others ignore it).
    split: ``sh2s``: the example's builder split (:func:`shuffled_paragraphs`).

  Raises:
    ValueError: an unknown sub-task, or ``s2t`` of an example without a title.
  """
  if subtask not in SUBTASKS:
    raise ValueError(f"subtask={subtask!r}; use one of {list(SUBTASKS)}.")
  story, summary = str(example["story"]), str(example["summary"])
  if subtask in ("s2s", "oods2s"):
    return story, summary
  if subtask == "sh2s":
    return shuffled_paragraphs(story, seed, int(example["index"]), split), summary
  title = str(example.get("title", ""))
  if not title.strip():
    raise ValueError(f"s2t: example {example.get('index')} has no title; s2t needs a "
                     "\"title\" on every line of the data.")
  return story, title


# --------------------------------------------------------------------------- parsing


def parse_lines(lines: Iterable[Union[str, bytes]], source: str = "<lines>") -> list[dict]:
  """The examples of a ``.jsonl`` file's lines, in order (module docstring).

  Returns:
    One dict per non-blank line; ``index`` is its 0-based position among them.

  Raises:
    StoriesFormatError: naming ``source`` and the 1-based line (not UTF-8, not JSON, not an
      object, a field that is missing, not a string or empty).
  """

  def fail(lineno, msg):
    raise StoriesFormatError(f"{source}, line {lineno}: {msg}; a stories line is one JSON "
                             "object with the strings story, summary (and title).")

  out = []
  for lineno, index, record in prepare_lib.json_records(lines, fail):
    for key in FIELDS:
      if key not in record:
        if key in REQUIRED:
          fail(lineno, f"no field {key!r}")
        continue
      if not isinstance(record[key], str):
        fail(lineno, f"field {key!r} is a {type(record[key]).__name__}, not a string")
      if key in REQUIRED and not record[key].strip():
        fail(lineno, f"field {key!r} is empty")
    out.append({"index": index, "story": record["story"], "summary": record["summary"],
                "title": record.get("title", "")})
  return out


def parse_file(path) -> list[dict]:
  """:func:`parse_lines` of a file (UTF-8, a BOM allowed)."""
  path = epath.Path(path)
  with path.open("rb") as f:
    return parse_lines(f, source=str(path))


# --------------------------------------------------------------------------- builder


def no_files_message(root, *, reason: str) -> str:
  """One line: ``reason`` and the files expected in ``root``."""
  reason = " ".join(str(reason).splitlines())
  wanted = ", ".join(expected_file(root, s) for s in SPLITS)
  return (f"Stories: {reason}; expected (any of) {wanted}, one JSON object per line with "
          "story (paragraphs separated by a blank line), summary and title. There is no "
          "download: pass the folder as manual_dir.")


def config_name(manual_dir: str) -> str:
  """The default config name of a data folder: its base name, lower-cased, runs of other
  characters than ``a-z0-9_`` as ``_`` (``"../data/Science-Daily"`` -> ``"science_daily"``)."""
  name = _NAME.sub("_", epath.Path(manual_dir).expanduser().resolve().name.lower()).strip("_")
  return name or "stories"


class StoriesConfig(tfds.core.BuilderConfig):
  """One dataset (its name: the prepared data's folder, so that two datasets can share a
  ``data_dir``)."""


class Stories(prepare_lib.ExamplesByIndex, tfds.core.GeneratorBasedBuilder):
  """Story / summary / title jsonl files from ``manual_dir``; builds the splits whose
  files exist."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "story/summary/title jsonl; missing splits skipped."}
  BUILDER_CONFIGS = [StoriesConfig(name="stories", description="a stories dataset")]
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      "Pass as manual_dir a folder holding train.jsonl, validation.jsonl, test.jsonl (any "
      "of them): one JSON object per line with story, summary and title.")

  def _info(self) -> tfds.core.DatasetInfo:
    return prepare_lib.dataset_info(
        self, {"index": np.int32, "story": tfds.features.Text(),
               "summary": tfds.features.Text(), "title": tfds.features.Text()},
        supervised_keys=("story", "summary"),
        metadata=True)  # the source folder and the splits that were missing

  def _split_generators(self, dl_manager):
    try:
      root = dl_manager.manual_dir   # AssertionError if missing or empty
    except AssertionError:
      path = getattr(dl_manager, "_manual_dir", None)
      raise FileNotFoundError(no_files_message(
          path, reason=f"manual_dir {path} does not exist or is empty")) from None
    paths = prepare_lib.split_files(
        self, root, {s: expected_file(root, s) for s in SPLITS}, dataset="Stories",
        expected=expected_file,
        no_files=no_files_message(root, reason=f"no stories file in {root}"))
    examples = {s: parse_file(p) for s, p in paths.items()}
    return {s: self._generate_examples(v) for s, v in examples.items()}


# --------------------------------------------------------------------------- reading


def prepare(manual_dir: str, data_dir: str = "", name: str = "") -> Stories:
  """The prepared builder of the dataset in ``manual_dir`` (prepared in ``data_dir`` on
  first use; safe for two runs that share ``data_dir``). Splits whose files are missing are
  left out, with one logged line.

  Args:
    manual_dir: the folder with ``train.jsonl``, ``validation.jsonl``, ``test.jsonl`` (any
      of them).
    data_dir: where TFDS keeps the prepared data (``""``: ``~/tensorflow_datasets``).
    name: the config name, under which the data is prepared (``""``: :func:`config_name`
      of ``manual_dir``); two datasets need two names.

  Raises:
    FileNotFoundError: no split's file is there (one line naming the folder and files).
    StoriesFormatError: naming the file and line of a malformed line.
  """
  if not manual_dir:
    raise ValueError("stories.prepare needs manual_dir (the folder of train.jsonl, "
                     "validation.jsonl, test.jsonl): there is no download.")
  manual_dir = str(epath.Path(manual_dir).expanduser())
  name = name or config_name(manual_dir)
  record = prepare_lib.source_record(manual_dir, FILE_NAMES.values())
  return prepare_lib.prepare_sourced(
      Stories, StoriesConfig(name=name, description=f"stories from {manual_dir}"), manual_dir,
      data_dir, record=record, dataset=f"Stories {name}")


def _plain(row: Mapping) -> dict:
  text = prepare_lib.text
  return {"index": int(row["index"]), "story": text(row["story"]),
          "summary": text(row["summary"]), "title": text(row["title"])}


def _dataset(builder: tfds.core.DatasetBuilder) -> str:
  """``"Stories <name>"``: the dataset in messages (its config name without the tag)."""
  return f"Stories {prepare_lib.base_config_name(builder.builder_config.name)}"


# The examples of a split as plain dicts (module docstring), in file order:
# read_split(builder, split) or read_split(data_source); a split that was not built is a
# MissingSplitError naming its file.
_READER = prepare_lib.SplitReader(SPLITS, _plain, _check_split, dataset=_dataset,
                                  expected=expected_file, error=MissingSplitError)
read_split = _READER.read
available_splits = _READER.available
missing_split_message = _READER.missing_message


def load_splits(manual_dir: str, data_dir: str = "", splits: Optional[Sequence[str]] = None,
                name: str = "") -> dict[str, list[dict]]:
  """``{split: read_split(...)}`` of :func:`prepare`'s builder: the splits it holds
  (``splits=None``) or ``splits`` (every one of them must have been built, else
  :class:`MissingSplitError`)."""
  return _READER.read_all(prepare(manual_dir, data_dir, name), splits)

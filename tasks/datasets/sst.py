r"""TFDS builder for the Stanford Sentiment Treebank (Socher et al., 2013), PTB-format trees.

Splits ``train`` / ``validation`` / ``test`` (the files ``train.txt`` / ``dev.txt`` /
``test.txt``; 8,544 / 1,101 / 2,210 sentences, one tree per line). Each example is one
sentence with its tree's labels (0 very negative, 1 negative, 2 neutral, 3 positive, 4 very
positive)::

    {"index": 0,                              # the tree's place among the file's trees
     "tokens": ["It", "'s", "good"],          # Sequence(Text): the leaves, as in the file
     "label": 3,                              # the root's (sentence) label, 0..4
     "span_starts": [0, 0, 1, 1, 2],          # every node of the tree, pre-order (root
     "span_ends":   [3, 1, 3, 2, 3],          #   first), covering tokens[start:end]
     "span_labels": [3, 2, 4, 2, 4]}

Tokens are stored as written in the files (case kept; ``-LRB-``, ``-RRB-``, `````` and
``''``, ``\/``; three train leaves hold a no-break space, see :mod:`tasks.text.trees`):
lower-casing and unescaping are the task's choice. The spans (all 2n - 1 nodes of a tree
over n words) let a task train on the phrase labels; the sentence label is ``label``
(== ``span_labels[0]``).

Binary view (the paper's "binary" task, neutral removed): :func:`binary_examples` drops the
sentences labelled 2 and maps 0, 1 -> 0 and 3, 4 -> 1 (and the same for the spans):
6,920 / 872 / 1,821 sentences (:data:`NUM_BINARY`).

Source: Stanford's archive ``trainDevTestTrees_PTB.zip`` (downloaded when ``manual_dir``
is empty; its files are in ``trees/``) or ``manual_dir``, a folder holding the three files
flat::

    <manual_dir>/train.txt  dev.txt  test.txt

:func:`prepare` follows the files of ``manual_dir`` (config ``default-<tag>``, see
:mod:`tasks.datasets.prepare`: a changed file is prepared afresh), logs one line per split
whose sentence count is not :data:`NUM_SENTENCES`, and names the file and byte of a file
that is not UTF-8 text.

Use (TensorFlow not needed)::

    >>> from tasks.datasets import sst
    >>> splits = sst.load_splits(manual_dir="../shared/data/sst", data_dir="/tmp/tfds")
    >>> splits["train"][0]["tokens"][:3], splits["train"][0]["label"]
    (['The', 'Rock', 'is'], 3)
    >>> binary = {s: sst.binary_examples(v) for s, v in splits.items()}  # 6,920 / 872 / 1,821
"""

from typing import Iterable, Mapping, Optional

import numpy as np
import tensorflow_datasets as tfds
from etils import epath

from tasks.datasets import prepare as prepare_lib
from tasks.text import trees

URL = "https://nlp.stanford.edu/sentiment/trainDevTestTrees_PTB.zip"
ARCHIVE_FOLDER = "trees"   # the archive's folder holding train.txt, dev.txt, test.txt
SPLITS = ("train", "validation", "test")
FILE_NAMES = {"train": "train.txt", "validation": "dev.txt", "test": "test.txt"}
NUM_CLASSES = 5
LABEL_NAMES = ("very negative", "negative", "neutral", "positive", "very positive")
NEUTRAL = 2

# Sentences per split (fine-grained, all five labels) and in the binary view (neutral
# removed), as in the LSTMN paper (Cheng et al., 2016, §5.2); checked on ../shared/data/sst.
NUM_SENTENCES = {"train": 8_544, "validation": 1_101, "test": 2_210}
NUM_BINARY = {"train": 6_920, "validation": 872, "test": 1_821}
FIX = (f"put back the file of Stanford's {URL} (folder {ARCHIVE_FOLDER}/), plain UTF-8 "
       "text, and run again (the data is prepared again)")

_CITATION = """\
@inproceedings{socher2013recursive,
  title={Recursive Deep Models for Semantic Compositionality Over a Sentiment Treebank},
  author={Socher, Richard and Perelygin, Alex and Wu, Jean and Chuang, Jason and
          Manning, Christopher D. and Ng, Andrew and Potts, Christopher},
  booktitle={EMNLP}, year={2013}}
"""


class SstFormatError(ValueError):
  """A tree that is malformed or has a label outside 0..4; the message names file and line."""


_check_split = prepare_lib.split_checker(SPLITS, "an SST split")


# --------------------------------------------------------------------------- parsing


def example_from_tree(tree: trees.LabelledTree, index: int) -> dict:
  """The example dict of the module docstring (plain Python types) for one tree."""
  starts, ends, labels = zip(*tree.spans)
  return {"index": index, "tokens": list(tree.tokens), "label": tree.label,
          "span_starts": list(starts), "span_ends": list(ends), "span_labels": list(labels)}


def parse_lines(lines: Iterable[str], source: str = "<lines>") -> list[dict]:
  """The examples of an SST file's lines (one tree per non-blank line), in order.

  Raises:
    SstFormatError: naming ``source`` and the 1-based line (a malformed tree, or a label
      outside 0..4).
  """
  out = []
  for lineno, text in enumerate(lines, start=1):
    if not text.strip():
      continue
    try:
      tree = trees.parse_tree(text, source=source, line=lineno)
    except trees.TreeFormatError as err:
      raise SstFormatError(str(err)) from None
    bad = [label for _, _, label in tree.spans if not 0 <= label < NUM_CLASSES]
    if bad:
      raise SstFormatError(f"{source}, line {lineno}: label {bad[0]} is not a sentiment "
                           f"label 0..{NUM_CLASSES - 1}; is this an SST tree file?")
    out.append(example_from_tree(tree, len(out)))
  return out


def parse_file(path) -> list[dict]:
  """:func:`parse_lines` of a file (UTF-8; else :class:`prepare_lib.SourceFileError`
  naming the file and the byte offset)."""
  path = epath.Path(path)
  return parse_lines(prepare_lib.read_text_lines(path, fix=FIX), source=str(path))


# --------------------------------------------------------------------------- builder


def missing_files_message(root, *, reason: str) -> str:
  """One line: ``reason``, the files to create and where they come from."""
  return prepare_lib.create_files_message(
      "SST", [epath.Path(root) / n for n in FILE_NAMES.values()], reason=reason,
      source=f"the three files of Stanford's {URL} (unpacked; they are in its folder "
      f"{ARCHIVE_FOLDER}/)")


class Sst(prepare_lib.AllowDownload, prepare_lib.ExamplesByIndex,
          tfds.core.GeneratorBasedBuilder):
  """The Stanford Sentiment Treebank, one example per sentence (see the module doc)."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "PTB-format trees; tokens as in the files, root and span labels."}
  BUILDER_CONFIGS = prepare_lib.single_config("The three tree files.")
  MANUAL_DOWNLOAD_INSTRUCTIONS = prepare_lib.unpack_instructions(
      URL, ARCHIVE_FOLDER, holds="train.txt, dev.txt and test.txt")

  def _info(self) -> tfds.core.DatasetInfo:
    return prepare_lib.dataset_info(
        self, {"index": np.int32, "tokens": tfds.features.Sequence(tfds.features.Text()),
               "label": np.int32, "span_starts": tfds.features.Sequence(np.int32),
               "span_ends": tfds.features.Sequence(np.int32),
               "span_labels": tfds.features.Sequence(np.int32)},
        homepage="https://nlp.stanford.edu/sentiment/", citation=_CITATION)

  def _source_root(self, dl_manager) -> epath.Path:
    """The folder holding the three ``.txt`` files: ``manual_dir`` or the download."""
    return prepare_lib.source_root(
        dl_manager, allow_download=self._allow_download, url=URL, folder=ARCHIVE_FOLDER,
        missing=missing_files_message)

  def _split_generators(self, dl_manager):
    root = self._source_root(dl_manager)
    paths = prepare_lib.require_files(root, FILE_NAMES, missing_files_message)
    return {s: self._generate_examples(parse_file(p)) for s, p in paths.items()}


# --------------------------------------------------------------------------- reading


def prepare(manual_dir: str = "", data_dir: str = "") -> Sst:
  """The prepared builder (prepared in ``data_dir`` on first use; safe for two runs that
  share ``data_dir``), following the files of ``manual_dir`` and checking the sentence
  counts (module docstring).

  Args:
    manual_dir: the folder with ``train.txt``, ``dev.txt``, ``test.txt``; ``""`` downloads
      :data:`URL`.
    data_dir: where TFDS keeps the prepared data (``""``: ``~/tensorflow_datasets``).

  Raises:
    FileNotFoundError: listing the files to put in ``manual_dir``.
    SstFormatError: naming the file and line of a malformed tree.
    prepare_lib.SourceFileError: a file that is not UTF-8 text (names it and the byte).
  """
  manual_dir = str(epath.Path(manual_dir).expanduser()) if manual_dir else ""
  record = prepare_lib.source_record(manual_dir, FILE_NAMES.values()) if manual_dir else None
  builder = prepare_lib.prepare_sourced(Sst, Sst.builder_configs["default"], manual_dir,
                                        data_dir, record=record, dataset="SST")
  root = manual_dir or f"the downloaded {ARCHIVE_FOLDER}"
  prepare_lib.warn_counts(
      "SST", prepare_lib.split_sizes(builder, SPLITS), NUM_SENTENCES, what="sentences",
      files={s: str(epath.Path(root) / FILE_NAMES[s]) for s in SPLITS})
  return builder


def _plain(row: Mapping) -> dict:
  """A decoded TFDS row with ``str`` tokens and ``int`` labels."""
  ints = lambda xs: [int(x) for x in xs]
  return {"index": int(row["index"]), "tokens": [prepare_lib.text(t) for t in row["tokens"]],
          "label": int(row["label"]), "span_starts": ints(row["span_starts"]),
          "span_ends": ints(row["span_ends"]), "span_labels": ints(row["span_labels"])}


# The examples of a split as plain dicts (module docstring), in file order:
# read_split(builder, split) or read_split(data_source).
_READER = prepare_lib.SplitReader(SPLITS, _plain, _check_split)
read_split = _READER.read


def load_splits(manual_dir: str = "", data_dir: str = "") -> dict[str, list[dict]]:
  """``{split: read_split(...)}`` for the three splits of :func:`prepare`'s builder."""
  return _READER.read_all(prepare(manual_dir, data_dir), SPLITS)


# --------------------------------------------------------------------------- views


def binary_label(label: int) -> Optional[int]:
  """0, 1 -> 0 (negative); 3, 4 -> 1 (positive); 2 (neutral) -> ``None``."""
  if not 0 <= label < NUM_CLASSES:
    raise ValueError(f"label={label!r} is not a sentiment label 0..{NUM_CLASSES - 1}.")
  return None if label == NEUTRAL else int(label > NEUTRAL)


def binary_examples(examples: Iterable[Mapping]) -> list[dict]:
  """The binary view: sentences whose label is 2 dropped, labels mapped by
  :func:`binary_label`; the spans keep only their non-neutral nodes, mapped the same way
  (the root is always kept). ``index`` still names the line in the file."""
  out = []
  for ex in examples:
    if ex["label"] == NEUTRAL:
      continue
    kept = [(s, e, binary_label(l)) for s, e, l in
            zip(ex["span_starts"], ex["span_ends"], ex["span_labels"]) if l != NEUTRAL]
    starts, ends, labels = (list(x) for x in zip(*kept))
    out.append(dict(ex, label=binary_label(ex["label"]), span_starts=starts,
                    span_ends=ends, span_labels=labels))
  return out


def label_counts(examples: Iterable[Mapping], num_classes: int = NUM_CLASSES) -> np.ndarray:
  """<int64>[num_classes]: how many sentences have each label."""
  return np.bincount([int(ex["label"]) for ex in examples], minlength=num_classes)

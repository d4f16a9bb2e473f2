r"""TFDS builder for the Stanford Natural Language Inference corpus 1.0 (Bowman et al., 2015).

Splits ``train`` / ``validation`` / ``test`` from ``snli_1.0_train.jsonl`` /
``snli_1.0_dev.jsonl`` / ``snli_1.0_test.jsonl``, each read as it is or gzipped
(``.jsonl.gz``; when both are there the ``.jsonl`` is read). Pairs whose ``gold_label`` is
``"-"`` (no majority among the annotators) are dropped, as in the LSTMN paper (§5.3):
549,367 / 9,842 / 9,824 pairs (:data:`NUM_PAIRS`). Each example::

    {"index": 0,                 # 0-based line of the pair in its file (stable order)
     "pair_id": "4705552913.jpg#2r1n",
     "premise": "Two women are embracing while holding to go packages.",   # sentence1
     "hypothesis": "The sisters are hugging goodbye while holding ...",   # sentence2
     "label": 1}                 # 0 entailment, 1 neutral, 2 contradiction (LABELS)

The sentences are stored as written; lower-casing and tokenisation are the task's
(``tasks.text.treebank_words``).

Missing splits: the builder builds the splits whose files are there and logs one line
naming the missing ones and where to put them (here only dev and test exist, see
../shared/data/README.md). :func:`read_split` of a split that was not built raises
:class:`MissingSplitError`, one line naming the file it expects. Data prepared from
``manual_dir`` follows its files (:mod:`tasks.datasets.prepare`): a file added, changed or
removed later is prepared afresh on the next :func:`prepare`.

Source: the public archive ``snli_1.0.zip`` (downloaded when ``manual_dir`` is empty; its
files are in ``snli_1.0/``) or ``manual_dir``, a folder holding the files flat::

    <manual_dir>/snli_1.0_train.jsonl[.gz]  snli_1.0_dev.jsonl[.gz]  snli_1.0_test.jsonl[.gz]

Use (TensorFlow not needed)::

    >>> from tasks.datasets import snli
    >>> builder = snli.prepare(manual_dir="../shared/data/snli", data_dir="/tmp/tfds")
    >>> snli.available_splits(builder)
    ('validation', 'test')
    >>> pairs = snli.read_split(builder, "validation")     # 9,842 dicts, file order
"""

import json
from typing import Iterable, Mapping, Optional, Sequence, Union

import numpy as np
import tensorflow_datasets as tfds
from etils import epath

from tasks.datasets import prepare as prepare_lib

URL = "https://nlp.stanford.edu/projects/snli/snli_1.0.zip"
ARCHIVE_FOLDER = "snli_1.0"   # the archive's folder holding the .jsonl files
SPLITS = ("train", "validation", "test")
FILE_STEMS = {"train": "snli_1.0_train", "validation": "snli_1.0_dev",
              "test": "snli_1.0_test"}
SUFFIXES = (".jsonl", ".jsonl.gz")   # the order in which a split's file is looked for
LABELS = ("entailment", "neutral", "contradiction")
NO_LABEL = "-"
# Labelled pairs per split ("-" dropped), as in the paper and ../shared/data/README.md.
NUM_PAIRS = {"train": 549_367, "validation": 9_842, "test": 9_824}
FIX = (f"put back the file of {URL} (folder {ARCHIVE_FOLDER}/), as it is or gzipped, and "
       "run again (the data is prepared again)")

_CITATION = """\
@inproceedings{bowman2015large,
  title={A large annotated corpus for learning natural language inference},
  author={Bowman, Samuel R. and Angeli, Gabor and Potts, Christopher and Manning,
          Christopher D.},
  booktitle={EMNLP}, year={2015}}
"""


class SnliFormatError(ValueError):
  """A line that is not an SNLI JSON record; the message names the file and line."""


class MissingSplitError(prepare_lib.MissingSplitError):
  """A split whose file was missing when the data was prepared; the message names it."""


_check_split = prepare_lib.split_checker(SPLITS, "an SNLI split")


def expected_file(root, split: str) -> str:
  """``"<root>/snli_1.0_<train|dev|test>.jsonl (or .jsonl.gz)"``: a split's file in
  messages."""
  _check_split(split)
  return f"{epath.Path(root) / FILE_STEMS[split]}.jsonl (or .jsonl.gz)"


def find_file(root, split: str) -> Optional[epath.Path]:
  """The file of ``split`` in ``root`` (``.jsonl`` first, then ``.jsonl.gz``), or None."""
  _check_split(split)
  for suffix in SUFFIXES:
    path = epath.Path(root) / (FILE_STEMS[split] + suffix)
    if path.exists():
      return path
  return None


# --------------------------------------------------------------------------- parsing


def parse_lines(lines: Iterable[Union[str, bytes]], source: str = "<lines>") -> list[dict]:
  """The labelled pairs of an SNLI ``.jsonl`` file's lines, in order ("-" dropped).

  Returns:
    One dict per labelled pair (the fields of the module docstring); ``index`` is the
    0-based line of the pair among the file's non-blank lines.

  Raises:
    SnliFormatError: naming ``source`` and the 1-based line (not JSON, a missing field, an
      unknown ``gold_label``).
  """
  out = []
  index = -1
  for lineno, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    index += 1

    def fail(msg):
      raise SnliFormatError(f"{source}, line {lineno}: {msg}; an SNLI line is one JSON "
                            "object with gold_label, sentence1, sentence2 (and pairID).")

    try:
      record = json.loads(line)
    except ValueError as err:
      fail(f"not JSON ({err})")
    if not isinstance(record, dict):
      fail(f"a JSON {type(record).__name__}, not an object")
    missing = [k for k in ("gold_label", "sentence1", "sentence2") if k not in record]
    if missing:
      fail(f"no field {missing[0]!r}")
    gold = record["gold_label"]
    if gold == NO_LABEL:
      continue
    if gold not in LABELS:
      fail(f"gold_label {gold!r} is none of {list(LABELS)} or {NO_LABEL!r}")
    out.append({"index": index, "pair_id": str(record.get("pairID", "")),
                "premise": str(record["sentence1"]), "hypothesis": str(record["sentence2"]),
                "label": LABELS.index(gold)})
  return out


def parse_file(path) -> list[dict]:
  """:func:`parse_lines` of a ``.jsonl`` or ``.jsonl.gz`` file (UTF-8; else
  :class:`prepare_lib.SourceFileError` naming the file and the byte offset, in the
  decompressed text for a ``.gz``; a broken gzip file too)."""
  source = str(path)
  return parse_lines((prepare_lib.decode_line(raw, source, offset=offset, line=i, fix=FIX)
                      for i, (offset, raw) in enumerate(prepare_lib.binary_lines(path), 1)),
                     source=source)


# --------------------------------------------------------------------------- builder


def missing_files_message(root, splits: Sequence[str], *, reason: str) -> str:
  """One line: ``reason``, the files to create and where they come from."""
  return prepare_lib.create_files_message(
      "SNLI", [expected_file(root, s) for s in splits], reason=reason,
      source=f"the files of {URL} (unpacked; they are in its folder {ARCHIVE_FOLDER}/)",
      layout="as they are or gzipped, flat")


class Snli(prepare_lib.AllowDownload, prepare_lib.ExamplesByIndex,
           tfds.core.GeneratorBasedBuilder):
  """SNLI 1.0, one example per labelled pair; builds the splits whose files exist."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "SNLI 1.0 jsonl(.gz); '-' labels dropped; missing splits skipped."}
  BUILDER_CONFIGS = prepare_lib.single_config("The .jsonl[.gz] files.")
  MANUAL_DOWNLOAD_INSTRUCTIONS = prepare_lib.unpack_instructions(
      URL, ARCHIVE_FOLDER,
      holds="snli_1.0_{train,dev,test}.jsonl; gzipped copies .jsonl.gz work too")

  def _info(self) -> tfds.core.DatasetInfo:
    return prepare_lib.dataset_info(
        self, {"index": np.int32, "pair_id": tfds.features.Text(),
               "premise": tfds.features.Text(), "hypothesis": tfds.features.Text(),
               "label": tfds.features.ClassLabel(names=LABELS)},
        homepage="https://nlp.stanford.edu/projects/snli/", citation=_CITATION,
        metadata=True)  # the source folder and the splits that were missing

  def _source_root(self, dl_manager) -> epath.Path:
    """The folder holding the ``.jsonl[.gz]`` files: ``manual_dir`` or the download."""
    return prepare_lib.source_root(
        dl_manager, allow_download=self._allow_download, url=URL, folder=ARCHIVE_FOLDER,
        missing=lambda path, reason: missing_files_message(path, SPLITS, reason=reason))

  def _split_generators(self, dl_manager):
    root = self._source_root(dl_manager)
    paths = prepare_lib.split_files(
        self, root, {s: find_file(root, s) for s in SPLITS}, dataset="SNLI",
        expected=expected_file, what="its file is", sep="; ",
        no_files=missing_files_message(root, SPLITS, reason=f"no SNLI file in {root}"))
    return {s: self._generate_examples(parse_file(p)) for s, p in paths.items()}


# --------------------------------------------------------------------------- reading


def prepare(manual_dir: str = "", data_dir: str = "") -> Snli:
  """The prepared builder (prepared in ``data_dir`` on first use; safe for two runs that
  share ``data_dir``). Splits whose files are missing are left out, with one logged line.

  Args:
    manual_dir: the folder with the ``snli_1.0_*.jsonl[.gz]`` files; ``""`` downloads
      :data:`URL`.
    data_dir: where TFDS keeps the prepared data (``""``: ``~/tensorflow_datasets``).

  Raises:
    FileNotFoundError: no split's file is there (the message lists them).
    SnliFormatError: naming the file and line of a malformed line.
  """
  manual_dir = str(epath.Path(manual_dir).expanduser()) if manual_dir else ""
  record = (prepare_lib.source_record(
      manual_dir, [FILE_STEMS[s] + x for s in SPLITS for x in SUFFIXES])
            if manual_dir else None)
  builder = prepare_lib.prepare_sourced(Snli, Snli.builder_configs["default"], manual_dir,
                                        data_dir, record=record, dataset="SNLI")
  root = manual_dir or f"the downloaded {ARCHIVE_FOLDER}"
  prepare_lib.warn_counts(
      "SNLI", prepare_lib.split_sizes(builder, SPLITS), NUM_PAIRS, what="labelled pairs",
      files={s: str(find_file(root, s) or expected_file(root, s)) for s in SPLITS})
  return builder


def _plain(row: Mapping) -> dict:
  text = prepare_lib.text
  return {"index": int(row["index"]), "pair_id": text(row["pair_id"]),
          "premise": text(row["premise"]), "hypothesis": text(row["hypothesis"]),
          "label": int(row["label"])}


# The pairs of a split as plain dicts (module docstring), in file order: read_split(builder,
# split) or read_split(data_source); a split that was not built is a MissingSplitError.
_READER = prepare_lib.SplitReader(SPLITS, _plain, _check_split, dataset="SNLI",
                                  expected=expected_file, error=MissingSplitError)
read_split = _READER.read
available_splits = _READER.available
missing_split_message = _READER.missing_message


def load_splits(manual_dir: str = "", data_dir: str = "",
                splits: Sequence[str] = SPLITS) -> dict[str, list[dict]]:
  """``{split: read_split(...)}`` of :func:`prepare`'s builder for ``splits`` (every
  one of them must have been built, else :class:`MissingSplitError`)."""
  return _READER.read_all(prepare(manual_dir, data_dir), splits)


def label_counts(pairs: Iterable[Mapping]) -> np.ndarray:
  """<int64>[3]: pairs per label (entailment, neutral, contradiction)."""
  return np.bincount([int(p["label"]) for p in pairs], minlength=len(LABELS))

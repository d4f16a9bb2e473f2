r"""TFDS builder for three CLUE classification tasks (Xu et al., 2020): AFQMC, TNEWS, CMNLI.

One ``BuilderConfig`` per task, each with the splits ``train`` / ``validation`` / ``test``
from ``train.json`` / ``dev.json`` / ``test.json`` (JSON lines, as in CLUE's
``<task>_public.zip``). Each example is one line::

    {"index": 0,          # 0-based line of the example in its file (stable order)
     "id": 0,             # the line's "id" field (CLUE's test files have one; a submission
                          #   file names it), else ``index``
     "sentence1": "蚂蚁借呗等额还款可以换成先息后本吗",    # TNEWS: the title ("sentence")
     "sentence2": "借呗有先息到期还本吗",                  # TNEWS: "" (keywords not used)
     "label": 0}          # the class index (LABELS[task]), -1 for an unlabelled (test) row

The classes of a task, in order (:data:`LABELS`, the strings CLUE writes; :func:`label_names`
adds a description; :func:`label_string` maps an index back for a submission file):

* ``afqmc``: ``"0"``, ``"1"`` (the two questions mean the same: 1);
* ``tnews``: the 15 codes of ``labels.json`` in its order, ``"100"`` (news_story) ...
  ``"116"`` (news_game); the codes skip 105 and 111, so a code is not ``100 + index``. The
  order is read from the source's ``labels.json`` (CLUE's own list when it is missing);
* ``cmnli``: ``"entailment"``, ``"neutral"``, ``"contradiction"`` (as :mod:`snli`; CLUE's
  baselines order them contradiction, entailment, neutral and Hugging Face's ``clue``
  neutral, entailment, contradiction: only the strings count in a submission). Lines labelled
  ``"-"`` (no gold label) are dropped, with one logged line per file saying how many.

TNEWS's keywords are not used (as in the StarSaber paper); ``label_desc`` is checked against
``labels.json``. The texts are stored as written.

Missing splits: the builder builds the splits whose files are there and logs one line
naming the missing files (here TNEWS has no ``test.json``, see ../shared/data/README.md).
:func:`read_split` of a split that was not built raises :class:`MissingSplitError`, one line
naming the file it expects. A task with no file at all (CMNLI here) is a one-line
``FileNotFoundError`` naming the folder and the files. Data prepared from
``manual_dir`` follows its files (:mod:`tasks.datasets.prepare`): a file added, changed
or removed later is prepared afresh, in a new folder.

Source: CLUE's public archive (:data:`URLS`, downloaded when ``manual_dir`` is empty) or
``manual_dir``, a folder holding one task's files flat (an archive's ``<task>_public/``
sub-folder is found too)::

    <manual_dir>/train.json  dev.json  test.json  [labels.json: TNEWS]

Use (TensorFlow not needed)::

    >>> from tasks.datasets import clue
    >>> builder = clue.prepare("tnews", manual_dir="../shared/data/clue/tnews",
    ...                        data_dir="/tmp/tfds")
    >>> clue.available_splits(builder)
    ('train', 'validation')
    >>> dev = clue.read_split(builder, "validation")     # 10,000 dicts, file order
    >>> clue.label_string("tnews", dev[0]["label"], builder)
    '102'
"""

import json
from typing import Iterable, Mapping, Optional, Sequence, Union

import numpy as np
import tensorflow_datasets as tfds
from absl import logging
from etils import epath

from tasks.datasets import prepare as prepare_lib

TASKS = ("afqmc", "tnews", "cmnli")
SPLITS = ("train", "validation", "test")
FILE_NAMES = {"train": "train.json", "validation": "dev.json", "test": "test.json"}
LABELS_FILE = "labels.json"   # TNEWS: one {"label": code, "label_desc": name} per line
URLS = {t: f"https://storage.googleapis.com/cluebenchmark/tasks/{t}_public.zip"
        for t in TASKS}
# The folder inside the archive that holds the files ("": its top).
ARCHIVE_FOLDERS = {"afqmc": "", "tnews": "", "cmnli": "cmnli_public"}
NO_LABEL = -1      # the label of a row without one (CLUE's test files)
NLI_NO_GOLD = "-"  # CMNLI: no majority label; such rows are dropped

# (CLUE's label string, a description) per class index.
LABEL_NAMES = {
    "afqmc": (("0", "different_meaning"), ("1", "same_meaning")),
    "tnews": (("100", "news_story"), ("101", "news_culture"), ("102", "news_entertainment"),
              ("103", "news_sports"), ("104", "news_finance"), ("106", "news_house"),
              ("107", "news_car"), ("108", "news_edu"), ("109", "news_tech"),
              ("110", "news_military"), ("112", "news_travel"), ("113", "news_world"),
              ("114", "news_stock"), ("115", "news_agriculture"), ("116", "news_game")),
    "cmnli": (("entailment", "entailment"), ("neutral", "neutral"),
              ("contradiction", "contradiction")),
}
LABELS = {t: tuple(code for code, _ in names) for t, names in LABEL_NAMES.items()}
NUM_CLASSES = {t: len(names) for t, names in LABELS.items()}
# Lines per split of CLUE's release (checked on ../shared/data/clue for afqmc and tnews
# train/validation; TNEWS test from the Hugging Face catalog). CMNLI is not here to check.
NUM_EXAMPLES = {"afqmc": {"train": 34_334, "validation": 4_316, "test": 3_861},
                "tnews": {"train": 53_360, "validation": 10_000, "test": 10_000}}

_TEXT_FIELDS = {"afqmc": ("sentence1", "sentence2"), "tnews": ("sentence",),
                "cmnli": ("sentence1", "sentence2")}
_DESCRIPTIONS = {
    "afqmc": "Ant Financial Question Matching Corpus: do two questions mean the same?",
    "tnews": "Toutiao short news titles in 15 classes.",
    "cmnli": "Chinese Multi-Genre NLI (XNLI zh + translated MNLI): 3 classes.",
}
_CITATION = """\
@inproceedings{xu2020clue,
  title={CLUE: A Chinese Language Understanding Evaluation Benchmark},
  author={Xu, Liang and Hu, Hai and Zhang, Xuanwei and Li, Lu and Cao, Chenjie and Li, Yudong
          and others},
  booktitle={COLING}, year={2020}}
"""


class ClueFormatError(ValueError):
  """A line that is not a CLUE JSON record; the message names the file and line."""


class MissingSplitError(prepare_lib.MissingSplitError):
  """A split whose file was missing when the data was prepared; the message names it."""


def _check_task(task: str) -> None:
  if task not in TASKS:
    raise ValueError(f"task={task!r} is not a CLUE task here; use one of {list(TASKS)}.")


_check_split = prepare_lib.split_checker(SPLITS, "a CLUE split")


def expected_file(root, split: str) -> str:
  """``"<root>/<train|dev|test>.json"``: a split's file."""
  _check_split(split)
  return str(epath.Path(root) / FILE_NAMES[split])


def find_file(root, split: str) -> Optional[epath.Path]:
  """The file of ``split`` in ``root``, or None."""
  path = epath.Path(expected_file(root, split))
  return path if path.exists() else None


def find_root(root, task: str) -> epath.Path:
  """``root``, or its sub-folder ``<task>_public/`` when that holds the files and ``root``
  does not (an unpacked archive)."""
  root = epath.Path(root)
  inner = root / f"{task}_public"
  if (not any(find_file(root, s) for s in SPLITS) and inner.is_dir()
      and any(find_file(inner, s) for s in SPLITS)):
    return inner
  return root


# --------------------------------------------------------------------------- labels


def _read_label_names(path) -> tuple:
  """The ``(code, desc)`` pairs of a TNEWS ``labels.json``, in file order."""
  path = epath.Path(path)
  out = []
  lines = prepare_lib.read_text_lines(path, fix="save it as UTF-8 text (CLUE's TNEWS "
                                     "labels.json) and run again")
  for lineno, line in enumerate(lines, start=1):
    line = line.lstrip("\ufeff") if lineno == 1 else line
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except ValueError as err:
      raise ClueFormatError(f"{path}, line {lineno}: not JSON ({err}); a labels.json line "
                            "is {\"label\": \"100\", \"label_desc\": \"news_story\"}.") from None
    if not isinstance(record, dict) or "label" not in record:
      raise ClueFormatError(f"{path}, line {lineno}: no field 'label'; a labels.json line "
                            "is {\"label\": \"100\", \"label_desc\": \"news_story\"}.")
    code = str(record["label"])
    if code in (c for c, _ in out):
      raise ClueFormatError(f"{path}, line {lineno}: label {code!r} is listed twice.")
    out.append((code, str(record.get("label_desc", code))))
  if not out:
    raise ClueFormatError(f"{path}: no label in the file.")
  return tuple(out)


def label_names(task: str, root: Union[None, str, epath.Path,
                                       tfds.core.DatasetBuilder] = None) -> tuple:
  """``((label string, description), ...)`` by class index: index -> CLUE's label.

  Args:
    task: ``"afqmc"``, ``"tnews"`` or ``"cmnli"``.
    root: ``None`` (CLUE's lists, :data:`LABEL_NAMES`), a source folder (TNEWS: its
      ``labels.json`` when there) or a prepared builder (the list it was built with).
  """
  _check_task(task)
  if isinstance(root, tfds.core.DatasetBuilder):
    stored = (root.info.metadata or {}).get("labels")
    return tuple((str(c), str(d)) for c, d in stored) if stored else LABEL_NAMES[task]
  if root is not None and task == "tnews":
    path = epath.Path(root) / LABELS_FILE
    if path.exists():
      return _read_label_names(path)
  return LABEL_NAMES[task]


def label_string(task: str, index: int, labels: Union[
    None, str, epath.Path, tfds.core.DatasetBuilder, Sequence] = None) -> str:
  """CLUE's label string of class ``index`` (``"1"``, ``"102"``, ``"neutral"``), as a
  submission file writes it.

  Args:
    labels: where the classes come from: ``None`` (CLUE's lists), a source folder or a
      prepared builder (see :func:`label_names`), or the ``(code, desc)`` pairs.
  """
  names = (tuple(labels) if isinstance(labels, (list, tuple))
           else label_names(task, labels))
  index = int(index)
  if not 0 <= index < len(names):
    raise ValueError(f"CLUE {task}: label index {index} is not a class 0..{len(names) - 1}"
                     f"{' (-1: an unlabelled row)' if index == NO_LABEL else ''}.")
  return str(names[index][0])


# --------------------------------------------------------------------------- parsing


def _parse(lines: Iterable[Union[str, bytes]], task: str, split: str, source: str,
           labels: Optional[Sequence] = None) -> tuple[list[dict], int]:
  """(examples, rows dropped for the label "-")."""
  _check_task(task)
  _check_split(split)
  names = tuple(labels) if labels is not None else LABEL_NAMES[task]
  codes = {code: i for i, (code, _) in enumerate(names)}
  descs = dict(names)
  fields = _TEXT_FIELDS[task]
  want = ", ".join(fields + (("label",) if split != "test" else ("id",)))

  def fail(lineno, msg):
    raise ClueFormatError(f"{source}, line {lineno}: {msg}; a CLUE {task} line is one JSON "
                          f"object with {want}.")

  out, dropped = [], 0
  for lineno, index, record in prepare_lib.json_records(
      lines, fail, fix="save the file as UTF-8 (CLUE's own files are)"):
    for key in fields:
      if key not in record:
        fail(lineno, f"no field {key!r}")
      if not isinstance(record[key], str):
        fail(lineno, f"field {key!r} is a {type(record[key]).__name__}, not a string")
    raw = record.get("label")
    if raw is None or (split == "test" and raw == ""):
      if split != "test":
        fail(lineno, "no field 'label'")
      label = NO_LABEL
    elif task == "cmnli" and str(raw) == NLI_NO_GOLD:
      dropped += 1
      continue
    elif str(raw) not in codes:
      fail(lineno, f"label {raw!r} is none of {list(codes)}")
    else:
      label = codes[str(raw)]
      desc = record.get("label_desc")
      if desc is not None and str(desc) != descs[str(raw)]:
        fail(lineno, f"label_desc {desc!r} is not {descs[str(raw)]!r}, the name of label "
             f"{raw!r} in the label list (labels.json)")
    ident = record.get("id", index)
    try:
      if isinstance(ident, bool) or not isinstance(ident, (int, str)):
        raise ValueError
      ident = int(ident)
    except ValueError:
      fail(lineno, f"id {record['id']!r} is not an integer")
    out.append({"index": index, "id": ident, "sentence1": record[fields[0]],
                "sentence2": record[fields[1]] if len(fields) > 1 else "",
                "label": label})
  return out, dropped


def _dropped_line(task: str, source: str, dropped: int) -> str:
  return (f"CLUE {task}: dropped {dropped} line(s) of {source} labelled "
          f"{NLI_NO_GOLD!r} (no gold label).")


def parse_lines(lines: Iterable[Union[str, bytes]], task: str, split: str,
                source: str = "<lines>", labels: Optional[Sequence] = None) -> list[dict]:
  """The examples of a CLUE ``.json`` file's lines, in order (module docstring).

  Args:
    lines: the file's lines (``str`` or UTF-8 ``bytes``).
    task: ``"afqmc"``, ``"tnews"`` or ``"cmnli"``.
    split: the split the file is (a ``"test"`` line may have no label: -1).
    source: the file's name in messages.
    labels: TNEWS: the ``(code, desc)`` pairs (:func:`label_names`); ``None``: CLUE's.

  Returns:
    One dict per line (CMNLI: lines labelled "-" dropped, with one logged line); ``index``
    is the 0-based line among the file's non-blank lines.

  Raises:
    ClueFormatError: naming ``source`` and the 1-based line (not JSON, a missing field, an
      unknown label, a label_desc that does not match, an id that is not an integer).
  """
  examples, dropped = _parse(lines, task, split, source, labels)
  if dropped:
    logging.warning(_dropped_line(task, source, dropped))
  return examples


def parse_file(path, task: str, split: str, labels: Optional[Sequence] = None) -> list[dict]:
  """:func:`parse_lines` of a file (UTF-8, a BOM allowed)."""
  path = epath.Path(path)
  with path.open("rb") as f:
    return parse_lines(f, task, split, source=str(path), labels=labels)


# --------------------------------------------------------------------------- builder


def no_files_message(task: str, root, *, reason: str) -> str:
  """One line: ``reason``, the folder and the files it should hold, how to get them."""
  reason = " ".join(str(reason).splitlines())  # e.g. a download error's message
  wanted = ", ".join(expected_file(root, s) for s in SPLITS)
  extra = f" (and {epath.Path(root) / LABELS_FILE})" if task == "tnews" else ""
  inside = f" (its folder {ARCHIVE_FOLDERS[task]}/)" if ARCHIVE_FOLDERS[task] else ""
  return (f"CLUE {task}: {reason}; expected in {root}: {wanted}{extra}. Put the files of "
          f"{URLS[task]}{inside} there, flat, or leave manual_dir empty to download it "
          "when online.")


class ClueConfig(tfds.core.BuilderConfig):
  """A CLUE task: ``"afqmc"``, ``"tnews"`` or ``"cmnli"``."""

  def __init__(self, *, task: str, **kwargs):
    _check_task(task)
    super().__init__(name=task, description=_DESCRIPTIONS[task], **kwargs)
    self.task = task


class Clue(prepare_lib.AllowDownload, prepare_lib.ExamplesByIndex,
           tfds.core.GeneratorBasedBuilder):
  """CLUE AFQMC / TNEWS / CMNLI, one example per line; builds the splits whose files exist."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "CLUE json lines; labels as class indices (-1: test); "
                            "CMNLI '-' dropped; missing splits skipped."}
  BUILDER_CONFIGS = [ClueConfig(task=t) for t in TASKS]
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      "Unpack https://storage.googleapis.com/cluebenchmark/tasks/<task>_public.zip and pass "
      "the folder holding train.json, dev.json, test.json (TNEWS: and labels.json) as "
      "manual_dir.")

  def _info(self) -> tfds.core.DatasetInfo:
    return prepare_lib.dataset_info(
        self, {"index": np.int32, "id": np.int64, "sentence1": tfds.features.Text(),
               "sentence2": tfds.features.Text(), "label": np.int32},
        homepage="https://www.cluebenchmarks.com/", citation=_CITATION,
        metadata=True)  # the source folder, the missing splits, the label list

  def _source_root(self, dl_manager) -> epath.Path:
    """The folder holding the ``.json`` files: ``manual_dir`` or the download."""
    task = self.builder_config.task
    root = prepare_lib.source_root(
        dl_manager, allow_download=self._allow_download, url=URLS[task],
        folder=ARCHIVE_FOLDERS[task],
        missing=lambda path, reason: no_files_message(task, path, reason=reason))
    return find_root(root, task)

  def _split_generators(self, dl_manager):
    task = self.builder_config.task
    root = self._source_root(dl_manager)
    paths = prepare_lib.split_files(
        self, root, {s: find_file(root, s) for s in SPLITS}, dataset=f"CLUE {task}",
        expected=expected_file,
        no_files=no_files_message(task, root, reason=f"no CLUE {task} file in {root}"))
    if task == "tnews" and not (epath.Path(root) / LABELS_FILE).exists():
      logging.warning(f"CLUE tnews: no {epath.Path(root) / LABELS_FILE}; using CLUE's 15 "
                      "labels (clue.LABEL_NAMES['tnews']).")
    labels = label_names(task, root)
    if labels != LABEL_NAMES[task]:
      logging.warning(f"CLUE {task}: the labels of {epath.Path(root) / LABELS_FILE} differ "
                      f"from CLUE's list; using the file's: {[c for c, _ in labels]}.")
    examples, dropped = {}, {}
    for split, path in paths.items():
      with path.open("rb") as f:
        examples[split], dropped[split] = _parse(f, task, split, str(path), labels)
      if dropped[split]:
        logging.warning(_dropped_line(task, str(path), dropped[split]))
    self.info.metadata["labels"] = [list(pair) for pair in labels]
    self.info.metadata["dropped_no_gold"] = dropped
    return {s: self._generate_examples(v) for s, v in examples.items()}


# --------------------------------------------------------------------------- reading


def prepare(task: str, manual_dir: str = "", data_dir: str = "") -> Clue:
  """The prepared builder of a task (prepared in ``data_dir`` on first use; safe for two
  runs that share ``data_dir``). Splits whose files are missing are left out, with one
  logged line.

  Args:
    task: ``"afqmc"``, ``"tnews"`` or ``"cmnli"``.
    manual_dir: the folder with the task's ``train.json``, ``dev.json``, ``test.json``
      (TNEWS: ``labels.json``); ``""`` downloads ``URLS[task]``.
    data_dir: where TFDS keeps the prepared data (``""``: ``~/tensorflow_datasets``).

  Raises:
    FileNotFoundError: no split's file is there (one line naming the folder and files).
    ClueFormatError: naming the file and line of a malformed line.
  """
  _check_task(task)
  manual_dir = str(epath.Path(manual_dir).expanduser()) if manual_dir else ""
  record = None
  if manual_dir:
    inner = epath.Path(find_root(manual_dir, task)).relative_to(manual_dir)
    names = [str(inner / n) if str(inner) != "." else n
             for n in (*FILE_NAMES.values(), LABELS_FILE)]
    record = prepare_lib.source_record(manual_dir, names)
  builder = prepare_lib.prepare_sourced(Clue, Clue.builder_configs[task], manual_dir, data_dir,
                                        record=record, dataset=f"CLUE {task}")
  if task in NUM_EXAMPLES:
    root = (builder.info.metadata or {}).get("source_dir") or "<the download>"
    prepare_lib.warn_counts(
        f"CLUE {task}", prepare_lib.split_sizes(builder, SPLITS), NUM_EXAMPLES[task],
        what="examples", files={s: expected_file(root, s) for s in SPLITS})
  return builder


def _plain(row: Mapping) -> dict:
  text = prepare_lib.text
  return {"index": int(row["index"]), "id": int(row["id"]),
          "sentence1": text(row["sentence1"]), "sentence2": text(row["sentence2"]),
          "label": int(row["label"])}


# The examples of a split as plain dicts (module docstring), in file order:
# read_split(builder, split) or read_split(data_source); a split that was not built is a
# MissingSplitError naming its file.
_READER = prepare_lib.SplitReader(
    SPLITS, _plain, _check_split, dataset=lambda b: f"CLUE {b.builder_config.task}",
    expected=expected_file, error=MissingSplitError)
read_split = _READER.read
available_splits = _READER.available
missing_split_message = _READER.missing_message


def load_splits(task: str, manual_dir: str = "", data_dir: str = "",
                splits: Optional[Sequence[str]] = None) -> dict[str, list[dict]]:
  """``{split: read_split(...)}`` of :func:`prepare`'s builder: the splits it holds
  (``splits=None``) or ``splits`` (every one of them must have been built, else
  :class:`MissingSplitError`)."""
  return _READER.read_all(prepare(task, manual_dir, data_dir), splits)


def label_counts(examples: Iterable[Mapping], num_classes: int) -> np.ndarray:
  """<int64>[num_classes]: examples per class (unlabelled rows, label -1, not counted)."""
  labels = [int(ex["label"]) for ex in examples]
  bad = [l for l in labels if l != NO_LABEL and not 0 <= l < num_classes]
  if bad:
    raise ValueError(f"label {bad[0]} is not a class 0..{num_classes - 1} (or -1).")
  return np.bincount([l for l in labels if l != NO_LABEL], minlength=num_classes)

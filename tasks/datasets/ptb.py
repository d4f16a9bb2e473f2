r"""TFDS builder for the Penn Treebank of Mikolov's language-modelling set (``simple-examples``).

Two ``BuilderConfig``\ s, each with the splits ``train`` / ``validation`` / ``test`` (the
files' ``train`` / ``valid`` / ``test``):

* ``word``: ``ptb.{train,valid,test}.txt``, one sentence per line, words separated by
  spaces; rare words are already ``<unk>`` and numbers ``N`` (10,000 word types with the
  end-of-line token ``<eos>``);
* ``char``: ``ptb.char.{train,valid,test}.txt``, the same lines as characters separated by
  spaces, ``_`` marking the space between two words (``a e r _ b a n k n o t e``).

Each example is one line of the file, in file order::

    {"line_index": 0,                        # 0-based position of the line in the split
     "tokens": "aer banknote berlitz"}       # Text: the line's tokens joined by one space

``tokens`` holds no end-of-line token: :func:`stream` appends ``<eos>`` after every line.
For ``char`` the tokens are the file's symbols (``"a e r _ b a n k"``). Lines holding
nothing but whitespace are skipped (each char file ends in an unterminated line holding one
space); no other line of the real files is blank.

Source: the public archive ``simple-examples.tgz`` (downloaded when ``manual_dir`` is empty;
its files are under ``simple-examples/data/``) or ``manual_dir``, a folder holding the six
files flat (the archive's ``simple-examples/data/``)::

    <manual_dir>/ptb.train.txt  ptb.valid.txt  ptb.test.txt
    <manual_dir>/ptb.char.train.txt  ptb.char.valid.txt  ptb.char.test.txt

Use (TensorFlow not needed)::

    >>> from tasks.datasets import ptb
    >>> builder = ptb.prepare("word", manual_dir="../shared/data/ptb", data_dir="/tmp/tfds")
    >>> lines = {s: ptb.read_split(builder, s) for s in ptb.SPLITS}  # list[list[str]]
    >>> vocab = ptb.build_vocabulary("word", lines["train"])         # 10,000 tokens
    >>> ids = ptb.stream(lines["train"], vocab)                      # <int32>[929_589]

Measured on ``../shared/data/ptb`` (tests/test_ptb_data.py, ``-m slow``): see
:data:`NUM_LINES`, :data:`STREAM_LENGTHS` and :data:`VOCAB_SIZES`.

Errors and checks (tests/test_data_errors.py): a missing file or empty ``manual_dir`` is a
one-line ``FileNotFoundError`` listing the paths to create; a file that is not UTF-8 text a
:class:`tasks.datasets.prepare.SourceFileError` naming the file and the byte; line counts
(:func:`prepare`) and stream lengths (:func:`load_splits`) that differ from the published
ones are one logged line per split naming the file. Data prepared from ``manual_dir``
follows its files (config ``<level>-<tag>``, :mod:`tasks.datasets.prepare`).
"""

from typing import Iterable, Iterator, Mapping, Optional, Sequence, Union

import numpy as np
import tensorflow_datasets as tfds
from etils import epath

from tasks.datasets import prepare as prepare_lib
from tasks.text.vocabulary import Vocabulary

URL = "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz"
ARCHIVE_DATA = "simple-examples/data"  # the archive's folder holding the ptb.*.txt files
LEVELS = ("char", "word")
SPLITS = ("train", "validation", "test")
FILE_SPLITS = {"train": "train", "validation": "valid", "test": "test"}
EOS = "<eos>"   # the end-of-line token of both levels
UNK = "<unk>"   # PTB's own rare-word token (a word of the word-level files)
SPACE = "_"     # the word boundary of the char files

# Lines per split (both levels have the same lines).
NUM_LINES = {"train": 42_068, "validation": 3_370, "test": 3_761}
# Tokens of stream(lines, vocab): the line's tokens plus one EOS per line. Word level:
# 887,521 / 70,390 / 78,669 words; char level: 4,975,414 / 389,672 / 438,662 symbols.
STREAM_LENGTHS = {
    "word": {"train": 929_589, "validation": 73_760, "test": 82_430},
    "char": {"train": 5_017_482, "validation": 393_042, "test": 442_423},
}
# build_vocabulary(level, train lines): word 9,999 word types of ptb.train.txt (with
# <unk> and N) + <eos>; char: 49 symbols of ptb.char.train.txt (48 characters and `_`;
# valid and test use 49 and 47 of them) + <eos>.
VOCAB_SIZES = {"word": 10_000, "char": 50}
# What to do about a source file that cannot be read.
FIX = (f"put back the file of Mikolov's simple-examples archive ({URL}, folder "
       f"{ARCHIVE_DATA}/), plain UTF-8 text, and run again (the data is prepared again)")

_CITATION = """\
@inproceedings{mikolov2010recurrent,
  title={Recurrent neural network based language model},
  author={Mikolov, Tom{\\'a}{\\v{s}} and Karafi{\\'a}t, Martin and Burget, Luk{\\'a}{\\v{s}} and
          {\\v{C}}ernock{\\'y}, Jan and Khudanpur, Sanjeev},
  booktitle={Interspeech}, year={2010}}
@article{marcus1993building,
  title={Building a Large Annotated Corpus of {E}nglish: The {P}enn {T}reebank},
  author={Marcus, Mitchell P. and Santorini, Beatrice and Marcinkiewicz, Mary Ann},
  journal={Computational Linguistics}, volume={19}, number={2}, pages={313--330}, year={1993}}
"""


def _check_level(level: str) -> None:
  if level not in LEVELS:
    raise ValueError(f"level={level!r} is not a PTB level; use one of {list(LEVELS)}.")


def file_name(level: str, split: str) -> str:
  """``file_name("word", "validation") == "ptb.valid.txt"``; char: ``"ptb.char.valid.txt"``."""
  _check_level(level)
  if split not in FILE_SPLITS:
    raise ValueError(f"split={split!r} is not a PTB split; use one of {list(SPLITS)}.")
  return f"ptb.{'char.' if level == 'char' else ''}{FILE_SPLITS[split]}.txt"


def file_names(level: str) -> dict[str, str]:
  """``{split: file name}`` of a level's three files."""
  return {s: file_name(level, s) for s in SPLITS}


class PtbFormatError(ValueError):
  """A line that is not in the PTB format; the message names the file and line."""


# --------------------------------------------------------------------------- parsing


def parse_lines(lines: Iterable[str], level: str, source: str = "<lines>") -> list[list[str]]:
  """The tokens of every non-blank line, in order.

  Args:
    lines: the file's lines.
    level: ``"word"`` (tokens are the space-separated words) or ``"char"`` (every
      space-separated token must be one character).
    source: the file name for error messages.

  Returns:
    One list of tokens per line that holds anything but whitespace.

  Raises:
    PtbFormatError: naming ``source`` and the 1-based line number (a char-level token of
      several characters, or the reserved ``<eos>`` in a word-level line).
  """
  _check_level(level)
  out = []
  for lineno, line in enumerate(lines, start=1):
    tokens = line.split()
    if not tokens:
      continue
    if level == "char":
      bad = next((t for t in tokens if len(t) != 1), None)
      if bad is not None:
        raise PtbFormatError(f"{source}, line {lineno}: token {bad!r} is not one character; "
                             "a PTB char file holds single characters separated by spaces, "
                             f"'{SPACE}' between words (is this a word-level file?).")
    elif EOS in tokens:
      raise PtbFormatError(f"{source}, line {lineno}: the line holds {EOS!r}, which is "
                           "reserved for the end of a line; PTB word files hold none.")
    out.append(tokens)
  return out


def parse_file(path, level: str) -> list[list[str]]:
  """:func:`parse_lines` of a file (UTF-8; else :class:`prepare_lib.SourceFileError`
  naming the file and the byte offset)."""
  path = epath.Path(path)
  return parse_lines(prepare_lib.read_text_lines(path, fix=FIX), level, source=str(path))


# --------------------------------------------------------------------------- builder


def missing_files_message(root, level: str, *, reason: str) -> str:
  """One line: ``reason``, the files to create and where they come from."""
  return prepare_lib.create_files_message(
      f"PTB {level}", [epath.Path(root) / n for n in file_names(level).values()],
      reason=reason, source=f"the files of Mikolov's simple-examples archive ({URL}, "
      f"unpacked; they are in its folder {ARCHIVE_DATA}/)")


def source_file(manual_dir: str, level: str, split: str) -> str:
  """A split's file in messages: its path in ``manual_dir``, or the archive's file."""
  name = file_name(level, split)
  return (str(epath.Path(manual_dir) / name) if manual_dir
          else f"{name} of the downloaded {URL.rsplit('/', 1)[-1]}")


class PtbConfig(tfds.core.BuilderConfig):
  """A level: ``"char"`` or ``"word"``."""

  def __init__(self, *, level: str, **kwargs):
    _check_level(level)
    unit = "characters ('_' between words)" if level == "char" else "words"
    super().__init__(name=level, description=f"Penn Treebank (Mikolov), lines of {unit}.",
                     **kwargs)
    self.level = level


class Ptb(prepare_lib.AllowDownload, tfds.core.GeneratorBasedBuilder):
  """Mikolov's Penn Treebank, one example per line (see the module doc)."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "simple-examples PTB; one example per line, in file order."}
  BUILDER_CONFIGS = [PtbConfig(level=level) for level in LEVELS]
  MANUAL_DOWNLOAD_INSTRUCTIONS = prepare_lib.unpack_instructions(
      URL, ARCHIVE_DATA,
      holds="ptb.train.txt, ptb.valid.txt, ptb.test.txt and ptb.char.{train,valid,test}.txt")

  def _info(self) -> tfds.core.DatasetInfo:
    return prepare_lib.dataset_info(
        self, {"line_index": np.int32, "tokens": tfds.features.Text()},
        homepage="http://www.fit.vutbr.cz/~imikolov/rnnlm/", citation=_CITATION)

  def _missing_files(self, root, *, reason: str) -> str:
    return missing_files_message(root, self.builder_config.level, reason=reason)

  def _source_root(self, dl_manager) -> epath.Path:
    """The folder holding the ``ptb.*.txt`` files: ``manual_dir`` or the download."""
    return prepare_lib.source_root(
        dl_manager, allow_download=self._allow_download, url=URL, folder=ARCHIVE_DATA,
        missing=self._missing_files)

  def _split_generators(self, dl_manager):
    level = self.builder_config.level
    paths = prepare_lib.require_files(self._source_root(dl_manager), file_names(level),
                                      self._missing_files)
    return {s: self._generate_examples(parse_file(p, level)) for s, p in paths.items()}

  def _generate_examples(self, lines: Sequence[list[str]]) -> Iterator[tuple[int, dict]]:
    for i, tokens in enumerate(lines):
      yield i, {"line_index": i, "tokens": " ".join(tokens)}


# --------------------------------------------------------------------------- reading


def prepare(level: str, manual_dir: str = "", data_dir: str = "") -> Ptb:
  """The prepared builder of a level (prepared in ``data_dir`` on first use).

  Args:
    level: ``"char"`` or ``"word"``.
    manual_dir: the folder with the ``ptb.*.txt`` files; ``""`` downloads :data:`URL`.
    data_dir: where TFDS keeps the prepared data (``""``: TFDS's default,
      ``~/tensorflow_datasets``).

  Data from ``manual_dir`` is prepared under the config ``<level>-<tag>`` of its files
  (:func:`prepare_lib.prepare_sourced`: a changed file is prepared afresh). Logs one line
  per split whose line count is not :data:`NUM_LINES`.

  Raises:
    FileNotFoundError: listing the files to put in ``manual_dir``.
    PtbFormatError: naming the file and line of a malformed line.
    prepare_lib.SourceFileError: a file that is not UTF-8 text (names it and the byte).
  """
  _check_level(level)
  manual_dir = str(epath.Path(manual_dir).expanduser()) if manual_dir else ""
  record = (prepare_lib.source_record(manual_dir, file_names(level).values())
            if manual_dir else None)
  builder = prepare_lib.prepare_sourced(Ptb, Ptb.builder_configs[level], manual_dir, data_dir,
                                        record=record, dataset=f"PTB {level}")
  prepare_lib.warn_counts(
      f"PTB {level}", prepare_lib.split_sizes(builder, SPLITS), NUM_LINES,
      what="lines", files={s: source_file(manual_dir, level, s) for s in SPLITS})
  return builder


def _plain(row: Mapping) -> dict:
  """A decoded TFDS row: ``int`` line index, the tokens as a ``str`` list."""
  return {"line_index": int(row["line_index"]),
          "tokens": prepare_lib.text(row["tokens"]).split(" ")}


def read_split(source: Union[tfds.core.DatasetBuilder, Sequence[Mapping]],
               split: Optional[str] = None) -> list[list[str]]:
  """The tokens of every line of a split, in file order.

  Args:
    source: a prepared :class:`Ptb` builder (then give ``split``) or a data source
      (``builder.as_data_source(split)``: any sequence of ``{"line_index", "tokens"}``
      rows).
    split: ``"train"``, ``"validation"`` or ``"test"`` when ``source`` is a builder.

  Returns:
    One list of tokens per line (no end-of-line token), ordered by ``line_index``.
  """
  rows = prepare_lib.read_rows(source, split, splits=SPLITS, plain=_plain, order="line_index")
  return [row["tokens"] for row in rows]


def load_splits(level: str, manual_dir: str = "", data_dir: str = "") -> dict[str, list]:
  """``{split: read_split(...)}`` for every split of :func:`prepare`'s builder.

  Logs one line per split whose stream length (:data:`STREAM_LENGTHS`) differs from the
  published one while its line count is right (a line cut short; other counts are said by
  :func:`prepare`)."""
  builder = prepare(level, manual_dir, data_dir)
  lines = {s: read_split(builder, s) for s in SPLITS}
  manual_dir = str(epath.Path(manual_dir).expanduser()) if manual_dir else ""
  prepare_lib.warn_counts(
      f"PTB {level}", {s: sum(len(line) + 1 for line in v) for s, v in lines.items()
                       if len(v) == NUM_LINES[s]},
      STREAM_LENGTHS[level], what="stream tokens (one <eos> per line)",
      files={s: source_file(manual_dir, level, s) for s in SPLITS})
  return lines


# --------------------------------------------------------------------------- vocabulary


def build_vocabulary(level: str, train_lines: Iterable[Sequence[str]]) -> Vocabulary:
  """The vocabulary of the training lines plus the end-of-line token ``<eos>``.

  Ids (:meth:`Vocabulary.build`, so deterministic): the special tokens first, then the
  training tokens by count (descending), ties broken by the token:

  * word: ``<unk>`` = 0 (PTB's own token, a word of the files), ``<eos>`` = 1, then the
    words: 10,000 tokens on the full training file; ``<unk>`` is ``unk_id``, so
    :meth:`Vocabulary.encode` maps unseen words to it (PTB's valid and test have none);
  * char: ``<eos>`` = 0, then the symbols of the char file (``_`` for the space between
    words): 49 + 1 = 50 tokens on the full training file; no ``<unk>`` (valid and test use
    no other symbol), so an unseen character is a ``ValueError`` in :func:`stream`.

  No ``<pad>`` or ``<bos>`` (``pad_id``/``bos_id`` are ``None``). ``counts`` are the
  training counts, ``<eos>``'s the number of lines. Decode with ``vocab.to_text(ids)``
  (``sep=""`` for characters; it stops at the first ``<eos>`` unless
  ``stop_at_eos=False``).

  Args:
    level: ``"char"`` or ``"word"``.
    train_lines: the training split's lines as token lists (:func:`read_split`).
  """
  _check_level(level)
  lines = [list(line) + [EOS] for line in train_lines]
  if level == "word":
    return Vocabulary.build(lines, pad=None, unk=UNK, bos=None, eos=EOS)
  return Vocabulary.build(lines, pad=None, unk=None, bos=None, eos=EOS)


def stream(lines: Iterable[Sequence[str]], vocab: Vocabulary, source: str = "") -> np.ndarray:
  """The token ids <int32>[N] of all lines, ``vocab.eos_id`` after every line.

  ``N = sum(len(line) + 1 for line in lines)``, e.g. :data:`STREAM_LENGTHS` on the full
  splits. The language-model stream of Zaremba et al. / Mikolov (``tasks.data.stream``).

  Args:
    lines: token lists (:func:`read_split`).
    vocab: :func:`build_vocabulary` of the training lines.
    source: the file ``lines`` come from, named in errors.

  Raises:
    ValueError: if ``vocab`` has no eos token, or (char level, no unk) for a symbol that is
      not in ``vocab`` (naming ``source`` and the line).
  """
  if vocab.eos is None:
    raise ValueError("vocab has no eos token; build it with build_vocabulary(level, "
                     "train_lines), which adds '<eos>'.")
  flat = []
  lines = list(lines)   # read twice (the line of an unknown symbol): an iterator is consumed
  for line in lines:
    if isinstance(line, str):
      raise ValueError(f"lines holds the string {line[:20]!r}; give token lists "
                       "(read_split(...) or line.split()).")
    flat.extend(line)
    flat.append(vocab.eos)
  if vocab.unk is None:
    known = set(vocab.tokens)
    bad = next((t for t in flat if t not in known), None)
    if bad is not None:
      at = next(i for i, line in enumerate(lines, 1) if bad in line)
      where = f"{source}, line {at}: " if source else f"line {at}: "
      raise ValueError(f"{where}{bad!r} is not in the vocabulary of the training file (and "
                       "it has no unk token); the training file lacks it: is it truncated "
                       "or of another version? Use the complete simple-examples files.")
  return vocab.encode(flat)


def check_counts(level: str, splits: Mapping[str, Sequence], vocab: Vocabulary) -> None:
  """Raises ``ValueError`` unless the splits' line counts, stream lengths and the vocabulary
  size are those of the full PTB (:data:`NUM_LINES`, :data:`STREAM_LENGTHS`,
  :data:`VOCAB_SIZES`); for a task that wants to be sure it reads the standard data."""
  _check_level(level)
  got = {s: (len(lines), sum(len(line) + 1 for line in lines)) for s, lines in splits.items()}
  want = {s: (NUM_LINES[s], STREAM_LENGTHS[level][s]) for s in splits}
  if got != want or len(vocab) != VOCAB_SIZES[level]:
    raise ValueError(f"PTB {level}: (lines, stream tokens) per split {got} and vocabulary "
                     f"size {len(vocab)} differ from the standard {want} and "
                     f"{VOCAB_SIZES[level]}; check the files in manual_dir.")

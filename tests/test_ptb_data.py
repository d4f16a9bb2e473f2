"""PTB data (tasks/datasets/ptb.py): the TFDS builder on tiny fixture folders, the
vocabularies and token streams, the errors, and (``-m slow``) the full counts of
../shared/data/ptb."""

import os
import time

import numpy as np
import pytest

from tasks.datasets import ptb
from tests import data_files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_PTB = os.path.normpath(os.path.join(REPO, os.pardir, "shared", "data", "ptb"))

# Word-level lines as in the real files: a leading space, words separated by one space.
WORDS = {
    "train": [" the cat sat on the mat ", " a <unk> of N dogs ", " the dog sat "],
    "validation": [" the mat sat ", " a cat "],
    "test": [" the <unk> dog "],
}


def _chars(line: str) -> str:
  """The char-file form of a word-file line: ``" the cat "`` -> ``" t h e _ c a t"``."""
  return " " + " ".join("_".join(line.split()))


def _write_fixture(root, skip=()):
  """Both levels' files, flat in ``root`` (the char files end in "\\n " as the real ones)."""
  files = {}
  for split, lines in WORDS.items():
    files[ptb.file_name("word", split)] = data_files.lines_text(lines)
    files[ptb.file_name("char", split)] = data_files.lines_text(map(_chars, lines)) + " "
  return data_files.write_files(root, files, skip=skip)


@pytest.fixture(scope="module")
def fixture_dirs(tmp_path_factory):
  base = tmp_path_factory.mktemp("ptb")
  return {"manual_dir": _write_fixture(base / "manual"), "data_dir": str(base / "tfds")}


def _expected(level, split):
  lines = [line.split() for line in WORDS[split]]
  return [list("_".join(line)) for line in lines] if level == "char" else lines


# ----------------------------------------------------------------------------- parsing


def test_file_names():
  assert ptb.file_names("word") == {"train": "ptb.train.txt", "validation": "ptb.valid.txt",
                                    "test": "ptb.test.txt"}
  assert ptb.file_name("char", "validation") == "ptb.char.valid.txt"
  with pytest.raises(ValueError, match="level='chars'.*'char', 'word'"):
    ptb.file_name("chars", "train")
  with pytest.raises(ValueError, match="split='valid'.*'validation'"):
    ptb.file_name("word", "valid")


def test_parse_skips_blank_lines_and_checks_chars():
  assert ptb.parse_lines([" a b _ c\n", "\n", " "], "char") == [["a", "b", "_", "c"]]
  with pytest.raises(ptb.PtbFormatError, match="ptb.char.train.txt, line 2: token 'cat'"):
    ptb.parse_lines([" a\n", " c a t _ cat\n"], "char", "ptb.char.train.txt")
  with pytest.raises(ptb.PtbFormatError, match="ptb.train.txt, line 1: .*'<eos>'"):
    ptb.parse_lines([" the <eos> cat\n"], "word", "ptb.train.txt")


# ----------------------------------------------------------------------------- builder


@pytest.mark.parametrize("level", ptb.LEVELS)
def test_builder_lines_vocab_and_stream(fixture_dirs, level):
  builder = ptb.prepare(level, **fixture_dirs)
  assert {s: builder.info.splits[s].num_examples for s in ptb.SPLITS} == {
      "train": 3, "validation": 2, "test": 1}
  lines = {s: ptb.read_split(builder, s) for s in ptb.SPLITS}
  for split in ptb.SPLITS:
    assert lines[split] == _expected(level, split)
  # A data source works too, and load_splits gives the same.
  assert ptb.read_split(builder.as_data_source(split="validation")) == lines["validation"]
  assert ptb.load_splits(level, **fixture_dirs) == lines

  vocab = ptb.build_vocabulary(level, lines["train"])
  assert vocab.pad_id is None and vocab.bos_id is None
  sep = "" if level == "char" else " "
  if level == "word":
    # <unk> 0, <eos> 1, then by count: the (3), sat (2), then count 1 by token.
    assert vocab.tokens == ("<unk>", "<eos>", "the", "sat", "N", "a", "cat", "dog", "dogs",
                            "mat", "of", "on")
    assert (vocab.unk_id, vocab.eos_id) == (0, 1)
    assert vocab.counts[:4] == (1, 3, 3, 2)
  else:
    # "the cat sat on the mat" / "a <unk> of N dogs" / "the dog sat": <eos> 0, then the
    # 17 characters and '_' by count (_ 11, t 7, a 5, o 4, ...), ties by the symbol.
    assert vocab.tokens == ("<eos>", "_", "t", "a", "o", "e", "h", "s", "d", "g", "n", "<",
                            ">", "N", "c", "f", "k", "m", "u")
    assert vocab.unk_id is None and vocab.eos_id == 0
    assert vocab.counts[:5] == (3, 11, 7, 5, 4)

  for split in ptb.SPLITS:
    ids = ptb.stream(lines[split], vocab)
    assert ids.dtype == np.int32
    assert len(ids) == sum(len(line) + 1 for line in lines[split])
    assert (ids == vocab.eos_id).sum() == len(lines[split]) and ids[-1] == vocab.eos_id
    # The ids decode to the lines, each followed by <eos>.
    want = " ".join(" ".join(line + ["<eos>"]) for line in lines[split])
    assert vocab.to_text(ids, strip_special=False, stop_at_eos=False) == want
    # Line by line: to_text stops at the first <eos>.
    first = ids[:len(lines[split][0]) + 1]
    assert vocab.to_text(first, sep=sep) == sep.join(lines[split][0])
    if level == "char":
      words = vocab.to_text(ids, sep="", stop_at_eos=False).replace("_", " ")
      assert words == "".join(" ".join(line.split()) for line in WORDS[split])


def test_char_stream_rejects_unseen_symbols(fixture_dirs):
  vocab = ptb.build_vocabulary("char", [["a", "b"]])
  with pytest.raises(ValueError, match="'z' is not in the vocabulary"):
    ptb.stream([["a", "z"]], vocab)
  with pytest.raises(ValueError, match="string"):
    ptb.stream(["a b"], vocab)
  # Word level: unseen words become <unk>.
  words = ptb.build_vocabulary("word", [["<unk>", "the"]])
  assert ptb.stream([["the", "zebra"]], words).tolist() == [2, 0, 1]


def test_missing_folder_lists_the_files(tmp_path):
  missing = str(tmp_path / "nowhere")
  with pytest.raises(FileNotFoundError) as err:
    ptb.prepare("char", missing, str(tmp_path / "tfds"))
  text = str(err.value)
  assert f"manual_dir {missing} does not exist" in text
  for name in ("ptb.char.train.txt", "ptb.char.valid.txt", "ptb.char.test.txt"):
    assert os.path.join(missing, name) in text
  assert ptb.URL in text and "simple-examples/data" in text


def test_missing_file_is_named(tmp_path):
  manual = _write_fixture(tmp_path / "manual", skip=("ptb.valid.txt",))
  with pytest.raises(FileNotFoundError, match="missing file") as err:
    ptb.prepare("word", manual, str(tmp_path / "tfds"))
  text = str(err.value)
  assert f"[{os.path.join(manual, 'ptb.valid.txt')!r}]" in text   # the missing one
  assert os.path.join(manual, "ptb.train.txt") in text            # and the expected list


def test_download_reads_the_archive_layout(tmp_path, monkeypatch):
  """No internet here: the download returns a folder unpacked as the archive would be."""
  extracted = tmp_path / "extracted"
  _write_fixture(extracted / "simple-examples" / "data")
  urls = data_files.fake_download(monkeypatch, str(extracted))
  builder = ptb.prepare("word", "", str(tmp_path / "tfds"))
  assert urls == [ptb.URL]
  assert ptb.read_split(builder, "test") == _expected("word", "test")

  data_files.fake_download(monkeypatch, error=OSError("no route to host"))
  with pytest.raises(FileNotFoundError, match="downloading failed .OSError: no route") as err:
    ptb.prepare("char", "", str(tmp_path / "tfds2"))
  assert "ptb.char.train.txt" in str(err.value)


def test_check_counts():
  with pytest.raises(ValueError, match="differ from the standard"):
    ptb.check_counts("word", {"test": [["a"]]}, ptb.build_vocabulary("word", [["a"]]))


# ----------------------------------------------------------------------------- shared data


@pytest.mark.slow
@pytest.mark.parametrize("level", ptb.LEVELS)
def test_shared_ptb_counts(level, tmp_path):
  if not os.path.isdir(SHARED_PTB):
    pytest.skip(f"{SHARED_PTB} is not here")
  start = time.perf_counter()
  builder = ptb.prepare(level, SHARED_PTB, str(tmp_path))
  lines = {s: ptb.read_split(builder, s) for s in ptb.SPLITS}
  vocab = ptb.build_vocabulary(level, lines["train"])
  streams = {s: ptb.stream(lines[s], vocab) for s in ptb.SPLITS}
  print(f"PTB {level}: lines { {s: len(v) for s, v in lines.items()} }, stream "
        f"{ {s: len(v) for s, v in streams.items()} }, vocab {len(vocab)}, "
        f"{time.perf_counter() - start:.1f} s")
  assert {s: len(v) for s, v in lines.items()} == ptb.NUM_LINES
  assert {s: len(v) for s, v in streams.items()} == ptb.STREAM_LENGTHS[level]
  assert len(vocab) == ptb.VOCAB_SIZES[level]
  ptb.check_counts(level, lines, vocab)
  if level == "word":
    assert ptb.STREAM_LENGTHS["word"] == {"train": 929_589, "validation": 73_760,
                                          "test": 82_430}
    assert len(vocab) == 10_000 and vocab.tokens[:3] == ("<unk>", "<eos>", "the")
    assert lines["train"][0][:3] == ["aer", "banknote", "berlitz"]
  else:
    # 49 symbols in ptb.char.train.txt (48 characters and '_') + <eos>.
    assert len(vocab) == 50 and "_" in vocab and " " not in vocab
    # Every char line is the word line with '_' between words.
    words = ptb.parse_file(os.path.join(SHARED_PTB, ptb.file_name("word", "test")), "word")
    assert ["_".join(w) for w in words] == ["".join(c) for c in lines["test"]]
  # Valid and test hold no token outside the training vocabulary (no <unk> fallback used).
  for split in ("validation", "test"):
    assert {t for line in lines[split] for t in line} <= set(vocab.tokens)
  # The stream decodes back to the file's first line.
  assert vocab.to_tokens(streams["train"]) == lines["train"][0]

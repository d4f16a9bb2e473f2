"""Preparing a TFDS builder while another run prepares the same data_dir, and the parts the
builders share (tasks/datasets/prepare.py)."""

import logging

import pytest

from tasks.datasets import prepare


class _Builder:
  def __init__(self, log, prepared_after):
    self.log, self.prepared_after = log, prepared_after

  def download_and_prepare(self, download_config):
    self.log.append(("prepare", download_config.manual_dir))
    raise FileExistsError("Cannot rename incomplete.X: destination already exists.")

  def is_prepared(self):
    self.log.append("check")
    return sum(1 for e in self.log if e == "check") >= self.prepared_after


def test_the_second_run_waits_for_the_first_and_uses_its_data():
  log = []
  builders = []

  def make():
    builders.append(_Builder(log, prepared_after=3))
    return builders[-1]

  got = prepare.prepare(make, "/data/ptb", wait_seconds=30)
  assert got is builders[-1] and log[0] == ("prepare", "/data/ptb")
  assert log.count("check") == 3
  assert len(builders) == 2   # the one that failed, then one built on the prepared data


def test_it_gives_up_after_the_wait():
  with pytest.raises(FileExistsError):
    prepare.prepare(lambda: _Builder([], prepared_after=10**9), "", wait_seconds=0.0)


# ----------------------------------------------------------------------------- shared parts


def _fail(lineno, msg):
  raise ValueError(f"line {lineno}: {msg}")


def test_json_records_lines_indices_bom_and_bytes():
  lines = ['\ufeff{"a": 1}\n', "\n", "  \n", '{"a": 2}\n']
  assert list(prepare.json_records(lines, _fail)) == [(1, 0, {"a": 1}), (4, 1, {"a": 2})]
  raw = [b'\xef\xbb\xbf{"a": 1}\n', b'{"a": 2}\n']
  assert [r for _, _, r in prepare.json_records(raw, _fail)] == [{"a": 1}, {"a": 2}]
  # Byte offsets count from the start of the file; the fix ends the message.
  with pytest.raises(ValueError, match=r"^line 2: not UTF-8: byte 11 of the file is 0xff "
                     r".*; do this$"):
    list(prepare.json_records([b'{"a": 1}\n', b"ab\xff\n"], _fail, fix="do this"))
  with pytest.raises(ValueError, match=r"^line 2: not JSON \("):
    list(prepare.json_records(["{}", "{x"], _fail))
  with pytest.raises(ValueError, match=r"^line 1: a JSON list, not an object$"):
    list(prepare.json_records(["[1]"], _fail))


def test_split_checker_names_the_splits():
  check = prepare.split_checker(("train", "test"), "a toy split")
  check("test")
  with pytest.raises(ValueError, match=r"^split='dev' is not a toy split; use one of "
                     r"\['train', 'test'\]\.$"):
    check("dev")


class _Info:
  def __init__(self):
    self.metadata = {}


class _MetadataOnly:
  """What split_files touches of a builder: ``info.metadata``."""

  def __init__(self):
    self.info = _Info()


def test_split_files_builds_what_is_there(tmp_path, caplog):
  (tmp_path / "a.txt").write_text("x")
  (tmp_path / "b.txt").mkdir()   # a folder is not a split's file
  paths = {"train": tmp_path / "a.txt", "dev": tmp_path / "b.txt", "test": None}
  builder = _MetadataOnly()
  expected = lambda root, s: f"{root}/{s}.txt"
  with caplog.at_level(logging.WARNING):
    got = prepare.split_files(builder, tmp_path, paths, dataset="Toy", expected=expected,
                              no_files="none")
  assert got == {"train": tmp_path / "a.txt"}
  assert builder.info.metadata == {"source_dir": str(tmp_path), "missing_splits": ["dev", "test"]}
  assert [r.getMessage() for r in caplog.records] == [
      f"Toy: building train only; no dev, test split, file(s) missing: {tmp_path}/dev.txt, "
      f"{tmp_path}/test.txt."]
  with pytest.raises(FileNotFoundError, match="^no toy file$"):
    prepare.split_files(builder, tmp_path, {"dev": None}, dataset="Toy", expected=expected,
                        no_files="no toy file")


def test_require_files_lists_the_missing_ones(tmp_path):
  (tmp_path / "a.txt").write_text("x")
  missing = lambda root, *, reason: f"{root}: {reason}"
  assert prepare.require_files(tmp_path, {"train": "a.txt"}, missing) == {
      "train": tmp_path / "a.txt"}
  with pytest.raises(FileNotFoundError) as err:
    prepare.require_files(tmp_path, {"train": "a.txt", "test": "b.txt"}, missing)
  assert str(err.value) == f"{tmp_path}: missing file(s) {[str(tmp_path / 'b.txt')]}"


def test_split_reader_reads_a_data_source_in_file_order():
  reader = prepare.SplitReader(("train",), lambda r: {"index": int(r["index"]), "x": r["x"]},
                               prepare.split_checker(("train",), "a toy split"))
  rows = [{"index": 2, "x": "c"}, {"index": 0, "x": "a"}, {"index": 1, "x": "b"}]
  assert [r["x"] for r in reader.read(rows)] == ["a", "b", "c"]
  with pytest.raises(ValueError, match="split='train' is only for a builder"):
    reader.read(rows, "train")


def test_each_builders_missing_split_error_is_one_kind():
  from tasks.datasets import clue, cnn_dailymail, snli, stories
  for module in (clue, cnn_dailymail, snli, stories):
    assert issubclass(module.MissingSplitError, prepare.MissingSplitError)
    assert issubclass(module.MissingSplitError, FileNotFoundError)
    assert module.MissingSplitError is not prepare.MissingSplitError

"""A user's data mistakes (issue 27, item 3), for every dataset builder of tasks/datasets/:
a missing or empty folder, a file that is not UTF-8 text, a stream too short for the batch,
counts that differ from the published ones, and prepared data that follows its source
files. Fixtures are tiny folders written under ``tmp_path``."""

import functools
import gzip
import json
import logging
import os
import shutil

import numpy as np
import pytest

from tasks import data as data_lib
from tasks.datasets import babi, clue, cnn_dailymail, prepare, ptb, snli, sst, stories
from tests import data_files
from tests.data_files import lines_text, write_files

_said = functools.partial(data_files.said, anywhere=True)   # the logged lines holding a text

BINARY = b"abc\xf8\xff\x00 def\n"   # 0xf8 at byte 3: not UTF-8

PTB_LINES = {"train": [" the cat sat on the mat ", " a <unk> of N dogs ", " the dog sat "],
             "validation": [" the mat sat ", " a cat "], "test": [" the <unk> dog "]}
BABI_TRAIN = ("1 Mary moved to the bathroom.\n2 John went to the hallway.\n"
              "3 Where is Mary? \tbathroom\t1\n4 Where is John? \thallway\t2\n")
BABI_TEST = "1 John moved to the kitchen.\n2 Where is John? \tkitchen\t1\n"
SST_FILES = {"train.txt": "(3 (2 It) (4 good))\n(1 (2 A) (1 bore))\n",
             "dev.txt": "(4 (4 Great) (2 .))\n", "test.txt": "(0 (0 Awful) (2 .))\n"}


def _ptb(root, level="word", **override) -> str:
  files = {ptb.file_name(level, s): lines_text(lines) for s, lines in PTB_LINES.items()}
  if level == "char":
    files = {ptb.file_name("char", s): lines_text(
        " " + " ".join("_".join(line.split())) for line in lines)
        for s, lines in PTB_LINES.items()}
  files.update(override)
  return write_files(root, files)


def _babi(root, **override) -> str:
  paths = babi.relative_paths("en", 1)
  return write_files(root, {paths["train"]: BABI_TRAIN, paths["test"]: BABI_TEST, **override})


def _snli_line(label, i):
  return json.dumps({"gold_label": label, "sentence1": f"A{i}.", "sentence2": f"B{i}.",
                     "pairID": f"p{i}"}) + "\n"


def _snli(root) -> str:
  return write_files(root, {f"snli_1.0_{s}.jsonl": _snli_line("neutral", i)
                       for i, s in enumerate(("train", "dev", "test"))})


def _afqmc(root, **override) -> str:
  line = json.dumps({"sentence1": "一", "sentence2": "二", "label": "0"}) + "\n"
  return write_files(root, {"train.json": line, "dev.json": line, **override})


def _one_line(err) -> str:
  text = str(err.value)
  assert "\n" not in text, text
  return text


# ----------------------------------------------------------------------------- missing


@pytest.mark.parametrize("name, prepare_fn, wanted", [
    ("ptb", lambda m, d: ptb.prepare("word", m, d), ["ptb.train.txt", "ptb.test.txt"]),
    ("babi", lambda m, d: babi.prepare("en", 1, m, d),
     ["en/qa1_single-supporting-fact_train.txt"]),
    ("sst", sst.prepare, ["train.txt", "dev.txt", "test.txt"]),
    ("snli", snli.prepare, ["snli_1.0_train.jsonl", "snli_1.0_dev.jsonl"]),
    ("clue", lambda m, d: clue.prepare("afqmc", m, d), ["train.json", "dev.json"]),
    ("cnn_dailymail", cnn_dailymail.prepare, ["url_lists/all_train.txt"]),
    ("stories", stories.prepare, ["train.jsonl", "validation.jsonl"]),
])
def test_empty_manual_dir_is_one_line_listing_the_paths(tmp_path, name, prepare_fn, wanted):
  empty = tmp_path / "empty"
  empty.mkdir()
  with pytest.raises(FileNotFoundError) as err:
    prepare_fn(str(empty), str(tmp_path / "tfds"))
  text = _one_line(err)
  assert f"manual_dir {empty} does not exist or is empty" in text
  for n in wanted:
    assert os.path.join(str(empty), n) in text
  assert not list((tmp_path / "tfds").rglob("dataset_info.json"))   # nothing prepared


@pytest.mark.parametrize("name, make, prepare_fn, split", [
    ("sst", lambda r: write_files(r, {**SST_FILES, "dev.txt": ""}), sst.prepare,
     "validation"),
    ("snli", lambda r: write_files(r, {f"snli_1.0_{s}.jsonl": _snli_line(
        "-" if s == "test" else "neutral", i) for i, s in enumerate(("train", "dev", "test"))}),
     snli.prepare, "test"),
    ("clue", lambda r: _afqmc(r, **{"dev.json": ""}),
     lambda m, d: clue.prepare("afqmc", m, d), "validation"),
    ("ptb", lambda r: _ptb(r, **{ptb.file_name("word", "test"): ""}),
     lambda m, d: ptb.prepare("word", m, d), "test"),
    ("babi", lambda r: _babi(r, **{babi.relative_paths("en", 1)["test"]: ""}),
     lambda m, d: babi.prepare("en", 1, m, d), "test"),
])
def test_a_split_with_no_examples_is_one_line_naming_it(tmp_path, name, make, prepare_fn,
                                                         split):
  """An empty source file, or one whose every entry is dropped (SNLI's '-' pairs): one
  line naming the split and the folder, not TFDS's AssertionError; nothing prepared."""
  root = make(tmp_path / name)
  with pytest.raises(prepare.SourceFileError) as err:
    prepare_fn(str(root), str(tmp_path / "tfds"))
  text = _one_line(err)
  assert f"the {split} split has no examples: its source file in {root} is empty" in text
  assert not list((tmp_path / "tfds").rglob("dataset_info.json"))


def test_ptb_task_with_an_empty_manual_dir_says_what_to_create(tmp_path):
  from tasks import ptb as ptb_task
  empty = tmp_path / "empty"
  empty.mkdir()
  config = ptb_task.TASK.get_config()
  config.manual_dir, config.data_dir = str(empty), str(tmp_path / "tfds")
  with pytest.raises(ValueError, match=f"create {empty}/ptb.char.train.txt") as err:
    ptb_task.train_data(config)
  _one_line(err)


@pytest.mark.parametrize("name", ["stories", "cnn_dailymail"])
def test_summarization_tasks_with_missing_sources_are_one_line_value_errors(tmp_path, name):
  """The launchers print a ValueError as one line; these two tasks raised the builders'
  FileNotFoundError (a 57-line traceback from launch.train)."""
  import tasks
  empty = tmp_path / "empty"
  empty.mkdir()
  task = tasks.get_task(name)
  config = task.get_config()
  config.manual_dir, config.data_dir = str(empty), str(tmp_path / "tfds")
  with pytest.raises(ValueError, match=f"manual_dir {empty} does not exist or is empty") as err:
    task.train_data(config)
  _one_line(err)


def test_a_csv_row_without_highlights_names_the_file_and_line(tmp_path):
  """A short row of --config.train_csv was an AttributeError on None."""
  from tasks import cnn_dailymail as cnn_task
  path = tmp_path / "short.csv"
  path.write_text('id,article,highlights\n1,"Some article.",A highlight.\n'
                  '2,"Another article only."\n')
  with pytest.raises(ValueError, match=rf"^{path}, line 3: the row has no 'article' or no "
                     r"'highlights' value") as err:
    cnn_task.read_csv(str(path))
  _one_line(err)


# ----------------------------------------------------------------------------- not UTF-8


@pytest.mark.parametrize("name", ["ptb", "babi", "sst"])
def test_binary_text_file_names_file_byte_and_fix(tmp_path, name):
  manual = tmp_path / "m"
  if name == "ptb":
    bad = _ptb(manual, **{"ptb.valid.txt": b"ok line\n" + BINARY}) + "/ptb.valid.txt"
    run = lambda: ptb.prepare("word", str(manual), str(tmp_path / "tfds"))
  elif name == "babi":
    path = babi.relative_paths("en", 1)["test"]
    bad = _babi(manual, **{path: b"ok line\n" + BINARY}) + "/" + path
    run = lambda: babi.prepare("en", 1, str(manual), str(tmp_path / "tfds"))
  else:
    bad = write_files(manual, {**SST_FILES, "dev.txt": b"ok line\n" + BINARY}) + "/dev.txt"
    run = lambda: sst.prepare(str(manual), str(tmp_path / "tfds"))
  with pytest.raises(prepare.SourceFileError) as err:
    run()
  text = _one_line(err)
  assert isinstance(err.value, ValueError)
  assert text.startswith(f"{bad}: byte 11 (line 2) is 0xf8, which is not UTF-8 text")
  assert "put back the file" in text


@pytest.mark.parametrize("gz", [False, True])
def test_snli_binary_or_broken_gzip_is_named(tmp_path, gz):
  manual = _snli(tmp_path / "m")
  dev = os.path.join(manual, "snli_1.0_dev.jsonl")
  os.remove(dev)
  content = _snli_line("neutral", 1).encode() + BINARY
  write_files(manual, {"snli_1.0_dev.jsonl": content}, gz=["snli_1.0_dev.jsonl"] if gz else [])
  start = len(_snli_line("neutral", 1).encode())
  with pytest.raises(prepare.SourceFileError, match=f"byte {start + 3} .line 2. is 0xf8"):
    snli.prepare(manual, str(tmp_path / "tfds"))
  # A file named .gz that is not gzip, and a truncated gzip file.
  for data in (b"not gzip at all\n", gzip.compress(_snli_line("neutral", 1).encode() * 100)[:40]):
    write_files(manual, {"snli_1.0_dev.jsonl.gz": data})
    if os.path.exists(dev):
      os.remove(dev)
    with pytest.raises(prepare.SourceFileError) as err:
      snli.prepare(manual, str(tmp_path / "tfds"))
    assert _one_line(err).startswith(f"{dev}.gz: not a complete gzip file")


def test_clue_stories_cnn_binary_files_are_named(tmp_path):
  afqmc = _afqmc(tmp_path / "afqmc", **{"dev.json": BINARY})
  with pytest.raises(clue.ClueFormatError) as err:
    clue.prepare("afqmc", afqmc, str(tmp_path / "tfds"))
  assert _one_line(err).startswith(f"{afqmc}/dev.json, line 1: not UTF-8: byte 3 of the "
                                   "file is 0xf8")
  tnews = write_files(tmp_path / "tnews", {"train.json": "", "labels.json": BINARY})
  with pytest.raises(prepare.SourceFileError, match="labels.json: byte 3 .line 1. is 0xf8"):
    clue.prepare("tnews", tnews, str(tmp_path / "tfds"))
  first = b'{"story": "x", "summary": "y"}\n'
  sd = write_files(tmp_path / "sd", {"test.jsonl": first + BINARY})
  with pytest.raises(stories.StoriesFormatError) as err:
    stories.prepare(sd, str(tmp_path / "tfds"))
  assert _one_line(err).startswith(f"{sd}/test.jsonl, line 2: not UTF-8: byte "
                                   f"{len(first) + 3} of the file is 0xf8")
  story = "a" * 40
  cnn = write_files(tmp_path / "cnn", {
      "url_lists/all_train.txt": f"http://x/{story}\n",
      f"cnn_stories/{cnn_dailymail.url_hash('http://x/' + story)}.story": BINARY})
  with pytest.raises(cnn_dailymail.StoryFormatError) as err:
    cnn_dailymail.prepare(cnn, str(tmp_path / "tfds"))
  assert "byte 3 (line 1) is 0xf8, not UTF-8" in _one_line(err)
  write_files(cnn, {"url_lists/all_train.txt": BINARY})
  with pytest.raises(prepare.SourceFileError, match="all_train.txt: byte 3 .line 1. is 0xf8"):
    cnn_dailymail.prepare(cnn, str(tmp_path / "tfds"))


# ----------------------------------------------------------------------------- too short


def test_stream_too_short_names_source_found_and_needed():
  with pytest.raises(ValueError) as err:
    data_lib.StreamBatches(np.arange(23), batch_size=4, seq_len=10, source="/d/ptb.train.txt")
  assert _one_line(err) == (
      "the stream of /d/ptb.train.txt has 23 tokens, too few for batch_size=4 rows of "
      "seq_len=10 steps: one window needs batch_size * seq_len + 1 = 41; use the complete "
      "data (is the file truncated?) or a smaller batch_size or seq_len.")


def test_ptb_task_truncated_train_file_names_it(tmp_path):
  from tasks import ptb as ptb_task
  manual = _ptb(tmp_path / "m")
  config = ptb_task.TASK.get_config()
  config.level, config.manual_dir, config.data_dir = "word", manual, str(tmp_path / "tfds")
  config.batch_size, config.seq_len = 4, 10
  with pytest.raises(ValueError) as err:
    ptb_task.train_data(config)
  text = _one_line(err)
  # 3 lines of 6, 5 and 3 words, one <eos> each.
  assert text.startswith(f"the stream of the PTB word train split ({manual}/ptb.train.txt) "
                         "has 17 tokens, too few for batch_size=4 rows of seq_len=10 steps: "
                         "one window needs batch_size * seq_len + 1 = 41")


def test_ptb_char_symbol_missing_from_a_truncated_train_file_names_the_file(tmp_path):
  vocab = ptb.build_vocabulary("char", [["a", "b"]])
  for lines in ([["a"], ["b", "z"]], iter([["a"], ["b", "z"]])):   # an iterator too (it
    with pytest.raises(ValueError) as err:                          # was a StopIteration)
      ptb.stream(lines, vocab, "/d/ptb.char.valid.txt")
    assert _one_line(err).startswith("/d/ptb.char.valid.txt, line 2: 'z' is not in the "
                                     "vocabulary of the training file")


# ----------------------------------------------------------------------------- counts


def test_ptb_counts_that_differ_are_one_warning_per_split(tmp_path, caplog, monkeypatch):
  manual = _ptb(tmp_path / "m")
  with caplog.at_level(logging.WARNING):
    ptb.prepare("word", manual, str(tmp_path / "tfds"))
  assert _said(caplog, "PTB word train:") == [
      f"PTB word train: {manual}/ptb.train.txt gives 3 lines where the published data has "
      "42,068; check the file (truncated, or another version?): results on it are not "
      "comparable with published ones."]
  assert len(_said(caplog, "published data has")) == 3
  # Right line counts but a line cut short: the stream length says it (load_splits).
  monkeypatch.setattr(ptb, "NUM_LINES", {"train": 3, "validation": 2, "test": 1})
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    ptb.load_splits("word", manual, str(tmp_path / "tfds"))
  assert _said(caplog, "published data has") == [
      f"PTB word {s}: {manual}/{ptb.file_name('word', s)} gives {n} stream tokens (one "
      f"<eos> per line) where the published data has {want:,}; check the file (truncated, "
      "or another version?): results on it are not comparable with published ones."
      for s, n, want in (("train", 17, 929_589), ("validation", 7, 73_760),
                         ("test", 4, 82_430))]


def test_babi_sst_snli_clue_counts_that_differ_are_warned(tmp_path, caplog):
  with caplog.at_level(logging.WARNING):
    babi.prepare("en", 1, _babi(tmp_path / "babi"), str(tmp_path / "tfds"))
    sst.prepare(write_files(tmp_path / "sst", SST_FILES), str(tmp_path / "tfds"))
    snli.prepare(_snli(tmp_path / "snli"), str(tmp_path / "tfds"))
    clue.prepare("afqmc", _afqmc(tmp_path / "afqmc"), str(tmp_path / "tfds"))
  # Two training questions (train 1, dev 1: at least one), one test question. The
  # training file's count is checked, not train and dev apart (whole stories cannot split
  # every file exactly 90/10: the published en qa17 gives 896/104).
  paths = {s: tmp_path / "babi" / p for s, p in babi.relative_paths("en", 1).items()}
  assert _said(caplog, "bAbI en_qa1 ") == [
      f"bAbI en_qa1 {s}: {paths[f]} gives {got} questions where the published data has "
      f"{n:,}; check the file (truncated, or another version?): results on it are not "
      "comparable with published ones."
      for s, f, got, n in (("test", "test", 1, 1000), ("train+dev", "train", 2, 1000))]
  assert [m.split(" gives ")[0] for m in _said(caplog, "SST ")] == [
      f"SST {s}: {tmp_path / 'sst' / f}" for s, f in sst.FILE_NAMES.items()]
  assert "gives 2 sentences where the published data has 8,544" in _said(caplog, "SST train")[0]
  assert len(_said(caplog, "SNLI ")) == 3 and "9,842" in _said(caplog, "SNLI validation")[0]
  assert [m.split(":")[0] for m in _said(caplog, "CLUE afqmc ")] == [
      "CLUE afqmc train", "CLUE afqmc validation"]   # no test.json: nothing to compare


def test_published_counts_give_no_warning(caplog):
  with caplog.at_level(logging.WARNING):
    assert prepare.warn_counts("PTB word", dict(ptb.NUM_LINES), ptb.NUM_LINES, what="lines",
                               files={}) == []
  assert not caplog.records


# ----------------------------------------------------------------------------- source changes


def test_fixed_ptb_file_is_prepared_again_and_the_old_folder_kept(tmp_path, caplog):
  """The issue's row: a truncated train file gives an error; once the file is fixed the
  next run uses the fixed file (no stale prepared data), and says why it prepared again."""
  from tasks import ptb as ptb_task
  full = "".join(line + "\n" for line in PTB_LINES["train"]) * 4   # 12 lines, 68 tokens
  manual = _ptb(tmp_path / "m", **{"ptb.train.txt": full[:30]})    # cut mid-line
  data_dir = str(tmp_path / "tfds")
  config = ptb_task.TASK.get_config()
  config.level, config.manual_dir, config.data_dir = "word", manual, data_dir
  config.batch_size, config.seq_len = 4, 10
  with pytest.raises(ValueError, match="has 10 tokens, too few"):
    ptb_task.train_data(config)
  old = ptb.prepare("word", manual, data_dir)
  write_files(manual, {"ptb.train.txt": full})
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    new = ptb.prepare("word", manual, data_dir)
  assert new.data_dir != old.data_dir
  assert _said(caplog, "changed since") == [
      f"PTB word: the source files in {manual} changed since the data in {old.data_dir} was "
      f"prepared (ptb.train.txt: 30 -> {len(full):,} bytes); preparing it again in "
      f"{new.data_dir} (the old folder is kept: delete it to free the space)."]
  assert len(ptb.read_split(new, "train")) == 12
  assert len(ptb.read_split(ptb.prepare("word", manual, data_dir), "train")) == 12
  # The old data is untouched (a run may still read it) and the record sits with each.
  assert len(ptb.read_split(old, "train")) == 2
  with open(os.path.join(new.data_dir, prepare.SOURCES_FILE)) as f:
    record = json.load(f)
  assert record["ptb.train.txt"]["bytes"] == len(full)
  assert record == prepare.source_record(manual, ptb.file_names("word").values())
  # The task (a new process in real life: its cache is per folder) trains on it.
  ptb_task._streams.cache_clear()
  assert ptb_task.train_data(config).num_tokens == 68
  # Preparing again with unchanged files: the same folder, and no line.
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    assert ptb.prepare("word", manual, data_dir).data_dir == new.data_dir
  assert not _said(caplog, "changed since")


def test_same_size_edit_and_another_folder_with_the_same_files(tmp_path, caplog):
  manual = write_files(tmp_path / "sst", SST_FILES)
  data_dir = str(tmp_path / "tfds")
  first = sst.prepare(manual, data_dir)
  write_files(manual, {"dev.txt": SST_FILES["dev.txt"].replace("(4 (4", "(3 (4")})
  with caplog.at_level(logging.WARNING):
    edited = sst.prepare(manual, data_dir)
  assert sst.read_split(edited, "validation")[0]["label"] == 3
  assert sst.read_split(first, "validation")[0]["label"] == 4
  said = _said(caplog, "changed since")
  assert len(said) == 1 and "(dev.txt: same size, other content (sha256 " in said[0]
  # A copy of the files in another folder uses the data already prepared from them.
  copy = shutil.copytree(manual, tmp_path / "copy")
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    assert sst.prepare(str(copy), data_dir).data_dir == edited.data_dir
  assert not _said(caplog, "changed since")


def test_babi_snli_clue_follow_their_files(tmp_path):
  data_dir = str(tmp_path / "tfds")
  manual = _babi(tmp_path / "babi")
  before = babi.prepare("en", 1, manual, data_dir)
  write_files(manual, {babi.relative_paths("en", 1)["test"]: BABI_TEST + BABI_TEST})
  after = babi.prepare("en", 1, manual, data_dir)
  assert (before.info.splits["test"].num_examples, after.info.splits["test"].num_examples) == (
      1, 2)
  assert prepare.base_config_name(after.builder_config.name) == "en_qa1"
  manual = _snli(tmp_path / "snli")
  before = snli.prepare(manual, data_dir)
  os.remove(os.path.join(manual, "snli_1.0_train.jsonl"))
  after = snli.prepare(manual, data_dir)
  assert (snli.available_splits(before), snli.available_splits(after)) == (
      snli.SPLITS, ("validation", "test"))
  manual = _afqmc(tmp_path / "afqmc")
  before = clue.prepare("afqmc", manual, data_dir)
  write_files(manual, {"test.json": json.dumps({"id": 7, "sentence1": "a", "sentence2": "b"})})
  after = clue.prepare("afqmc", manual, data_dir)
  assert clue.available_splits(after) == clue.SPLITS != clue.available_splits(before)


def test_source_record_and_tag():
  assert prepare.base_config_name("word-3f9a1c2b7d10") == "word"
  assert prepare.base_config_name("en-10k_qa1") == "en-10k_qa1"
  assert prepare.base_config_name("en-10k_qa1-00000000000a") == "en-10k_qa1"
  a = {"x.txt": {"bytes": 3, "sha256": "ab"}, "y.txt": None}
  assert prepare.source_tag(a) == prepare.source_tag(dict(reversed(list(a.items()))))
  assert len(prepare.source_tag(a)) == prepare.TAG_LENGTH
  assert prepare.source_tag(a) != prepare.source_tag({**a, "y.txt": {"bytes": 0,
                                                                     "sha256": "e3"}})
  assert prepare._changes(a, {"x.txt": {"bytes": 5, "sha256": "cd"}}) == [
      "x.txt: 3 -> 5 bytes"]


def test_a_wrong_babi_folder_is_not_called_changed_files_and_leaves_no_folder(tmp_path,
                                                                              caplog):
  """Issue 46, item 7: --config.manual_dir pointing at another data set (here PTB's files)
  after bAbI was prepared from the right folder: the error lists the bAbI files to create,
  no line says the source files 'changed since' the good data was prepared (advice that
  points at the good data), and no empty folder is left under <data_dir>/babi/."""
  data_dir = tmp_path / "tfds"
  good = babi.prepare("en", 1, _babi(tmp_path / "babi"), str(data_dir))
  before = sorted(os.listdir(data_dir / "babi"))
  assert os.path.basename(os.path.dirname(good.data_dir)) in before
  wrong = _ptb(tmp_path / "ptb")
  for _ in range(2):
    caplog.clear()
    with caplog.at_level(logging.WARNING), pytest.raises(FileNotFoundError) as err:
      babi.prepare("en", 1, wrong, str(data_dir))
    assert f"{wrong}/en/qa1_single-supporting-fact_train.txt" in _one_line(err)
    assert not _said(caplog, "changed since")
    assert sorted(os.listdir(data_dir / "babi")) == before
  assert prepare.remove_empty_folders([str(data_dir / "babi")]) == []   # holds the data


@pytest.mark.parametrize("task_name", ["ptb", "babi", "sst", "snli", "tnews",
                                       "cnn_dailymail", "stories"])
def test_a_data_dir_that_is_a_file_is_a_one_line_config_error(tmp_path, task_name):
  # It was a NotADirectoryError traceback from the TFDS preparation (review).
  import tasks as tasks_lib
  task = tasks_lib.get_task(task_name)
  config = task.get_config()
  afile = tmp_path / "afile"
  afile.write_text("")
  if task_name == "stories":   # it has no download: its manual_dir is checked first
    config.manual_dir = str(tmp_path)
  for data_dir in (str(afile), str(afile / "sub")):
    config.data_dir = data_dir
    with pytest.raises(ValueError, match=rf"^config.data_dir='{data_dir}': {afile} is a file; "
                                         r"pass a folder"):
      task.validate_config(config)
  config.data_dir = str(tmp_path / "new" / "folder")   # missing folders are created later
  try:
    task.validate_config(config)
  except ValueError as err:
    assert "data_dir" not in str(err)

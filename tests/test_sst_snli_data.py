"""SST and SNLI data (tasks/datasets/sst.py, tasks/datasets/snli.py, tasks/text/trees.py,
tasks.text.treebank_words): the tree parser, both TFDS builders on tiny fixture folders,
the binary SST view, SNLI's missing splits, and the errors."""

import json
import logging
import os

import pytest

from tasks import text
from tasks.datasets import snli, sst
from tasks.text import trees
from tests import data_files

# ----------------------------------------------------------------------------- trees


def test_parse_tree_leaves_spans_and_labels():
  tree = trees.parse_tree("(3 (2 It) (4 (2 's) (4 (3 very) (4 good))))\n")
  assert tree.tokens == ("It", "'s", "very", "good")
  assert tree.label == 3
  # Pre-order, root first, (start, end, label) with end exclusive: 2n - 1 nodes.
  assert tree.spans == ((0, 4, 3), (0, 1, 2), (1, 4, 4), (1, 2, 2), (2, 4, 4), (2, 3, 3),
                        (3, 4, 4))
  # Non-binary nodes, a one-word tree, SST's escapes and the no-break space in a word.
  assert trees.parse_tree("(1 (0 a) (2 b) (1 c))").spans == (
      (0, 3, 1), (0, 1, 0), (1, 2, 2), (2, 3, 1))
  assert trees.parse_tree("  (4 Great)  ").spans == ((0, 1, 4),)
  assert trees.parse_tree("(2 (2 -LRB-) (2 8\xa01\\/2))").tokens == ("-LRB-", "8\xa01\\/2")


@pytest.mark.parametrize("line, message", [
    ("(3 (2 It) (4 good)", "1 unclosed '\\('"),
    ("(x It)", "expected an integer label after '\\(', found 'x'"),
    ("(3 It (2 good))", "a node holds a word and a subtree"),
    ("(3 (2 It) good)", "word 'good' is not alone in its node"),
    ("(3 (2 It)) (2 b)", "after the end of the tree"),
    ("(3 (2 It)))", "after the end of the tree"),
    ("(3)", "a label but no word or subtree"),
    ("It is good", "word 'It' outside brackets"),
    ("(3 (", "the text ends after '\\('"),
])
def test_malformed_tree_names_source_and_line(line, message):
  lines = ["(2 (2 fine) (2 .))\n", "\n", line + "\n"]
  with pytest.raises(trees.TreeFormatError, match=message) as err:
    trees.parse_lines(lines, "train.txt")
  assert str(err.value).startswith("train.txt, line 3, character ")
  assert "\n" not in str(err.value)


# ----------------------------------------------------------------------------- SST

SST_FILES = {
    "train.txt": [
        "(3 (2 It) (4 (2 's) (4 good)))",
        "(2 (2 A) (2 film))",
        "(0 (1 (1 Not) (2 good)) (2 .))",
        "(4 (4 Great) (2 .))",
        "(1 (2 The) (1 (1 dull) (2 plot)))",
    ],
    "dev.txt": ["(2 (2 So) (2 so))", "(1 (1 Weak) (3 fun))"],
    "test.txt": ["(3 (2 -LRB-) (3 Nice) (2 -RRB-))", "(2 (2 Meh) (2 .))",
                 "(0 (0 Awful) (2 .))"],
}


def _write_sst(root, files=SST_FILES, skip=()):
  return data_files.write_files(root, {n: data_files.lines_text(v) for n, v in files.items()},
                                skip=skip)


@pytest.fixture(scope="module")
def sst_splits(tmp_path_factory):
  base = tmp_path_factory.mktemp("sst")
  builder = sst.prepare(_write_sst(base / "manual"), str(base / "tfds"))
  assert {s: builder.info.splits[s].num_examples for s in sst.SPLITS} == {
      "train": 5, "validation": 2, "test": 3}
  return {s: sst.read_split(builder, s) for s in sst.SPLITS}


def test_sst_builder_examples(sst_splits):
  train = sst_splits["train"]
  assert [ex["index"] for ex in train] == [0, 1, 2, 3, 4]
  assert train[0] == {"index": 0, "tokens": ["It", "'s", "good"], "label": 3,
                      "span_starts": [0, 0, 1, 1, 2], "span_ends": [3, 1, 3, 2, 3],
                      "span_labels": [3, 2, 4, 2, 4]}
  assert [ex["label"] for ex in train] == [3, 2, 0, 4, 1]
  # Tokens kept as in the file (case, -LRB-); the root label is the first span's.
  assert sst_splits["test"][0]["tokens"] == ["-LRB-", "Nice", "-RRB-"]
  for split in sst.SPLITS:
    for ex in sst_splits[split]:
      assert ex["span_labels"][0] == ex["label"]
      assert (ex["span_starts"][0], ex["span_ends"][0]) == (0, len(ex["tokens"]))
  assert sst.label_counts(train).tolist() == [1, 1, 1, 1, 1]


def test_sst_binary_view(sst_splits):
  binary = {s: sst.binary_examples(v) for s, v in sst_splits.items()}
  assert {s: len(v) for s, v in binary.items()} == {"train": 4, "validation": 1, "test": 2}
  assert [(ex["index"], ex["label"]) for ex in binary["train"]] == [(0, 1), (2, 0), (3, 1),
                                                                     (4, 0)]
  # Spans: the neutral nodes are dropped, the others mapped (0, 1 -> 0; 3, 4 -> 1).
  first = binary["train"][0]
  assert (first["span_starts"], first["span_ends"], first["span_labels"]) == (
      [0, 1, 2], [3, 3, 3], [1, 1, 1])
  assert binary["validation"][0]["span_labels"] == [0, 0, 1]
  assert [sst.binary_label(k) for k in range(5)] == [0, 0, None, 1, 1]
  with pytest.raises(ValueError, match="label=5"):
    sst.binary_label(5)
  # The originals are untouched.
  assert sst_splits["train"][0]["span_labels"] == [3, 2, 4, 2, 4]


def test_sst_bad_label_and_malformed_tree_name_file_and_line():
  with pytest.raises(sst.SstFormatError, match="dev.txt, line 2: label 7 is not"):
    sst.parse_lines(["(2 (2 a) (2 b))\n", "(7 (2 a) (2 b))\n"], "dev.txt")
  with pytest.raises(sst.SstFormatError, match="dev.txt, line 1, character"):
    sst.parse_lines(["(2 (2 a) (2 b)\n"], "dev.txt")


def test_sst_missing_files(tmp_path):
  manual = _write_sst(tmp_path / "manual", skip=("dev.txt",))
  with pytest.raises(FileNotFoundError, match="missing file") as err:
    sst.prepare(manual, str(tmp_path / "tfds"))
  assert f"[{os.path.join(manual, 'dev.txt')!r}]" in str(err.value)
  nowhere = str(tmp_path / "nowhere")
  with pytest.raises(FileNotFoundError, match=f"manual_dir {nowhere} does not exist") as err:
    sst.prepare(nowhere, str(tmp_path / "tfds2"))
  for name in ("train.txt", "dev.txt", "test.txt"):
    assert os.path.join(nowhere, name) in str(err.value)


# ----------------------------------------------------------------------------- SNLI


def _record(i, gold, s1, s2):
  return {"annotator_labels": [gold], "captionID": f"c{i}", "gold_label": gold,
          "pairID": f"p{i}", "sentence1": s1, "sentence1_binary_parse": "",
          "sentence1_parse": "", "sentence2": s2, "sentence2_binary_parse": "",
          "sentence2_parse": ""}


SNLI_SPLITS = {
    "train": [_record(0, "entailment", "A man sleeps.", "A person rests."),
              _record(1, "-", "A dog runs.", "An animal moves."),
              _record(2, "contradiction", "Two kids play.", "Nobody plays."),
              _record(3, "neutral", "A woman sings.", "She sings well.")],
    "validation": [_record(10, "neutral", "A cat naps.", "The cat is old."),
                   _record(11, "-", "Rain falls.", "It's wet.")],
    "test": [_record(20, "contradiction", "A boy swims.", "The boy is asleep."),
             _record(21, "entailment", "Girls dance.", "People dance.")],
}


def _write_snli(root, splits=SNLI_SPLITS, gz=("validation", "test")):
  """The train file as .jsonl, the others gzipped (as in ../shared/data/snli)."""
  names = {s: snli.FILE_STEMS[s] + ".jsonl" for s in splits}
  return data_files.write_files(
      root, {names[s]: data_files.jsonl_text(r) for s, r in splits.items()},
      gz=[names[s] for s in gz if s in names])


def test_snli_builder_all_splits_drops_unlabelled(tmp_path):
  manual = _write_snli(tmp_path / "manual")
  builder = snli.prepare(manual, str(tmp_path / "tfds"))
  assert snli.available_splits(builder) == snli.SPLITS
  pairs = {s: snli.read_split(builder, s) for s in snli.SPLITS}
  assert {s: len(v) for s, v in pairs.items()} == {"train": 3, "validation": 1, "test": 2}
  assert pairs["train"][0] == {"index": 0, "pair_id": "p0", "premise": "A man sleeps.",
                               "hypothesis": "A person rests.", "label": 0}
  # "-" dropped; index is the line in the file; labels entailment 0 / neutral 1 / contra 2.
  assert [(p["index"], p["label"]) for p in pairs["train"]] == [(0, 0), (2, 2), (3, 1)]
  assert [p["pair_id"] for p in pairs["test"]] == ["p20", "p21"]
  assert snli.label_counts(pairs["train"]).tolist() == [1, 1, 1]
  assert snli.load_splits(manual, str(tmp_path / "tfds"), splits=("test",)) == {
      "test": pairs["test"]}


def test_snli_missing_split_is_said_and_asked_for(tmp_path, caplog):
  splits = {s: SNLI_SPLITS[s] for s in ("validation", "test")}
  manual = _write_snli(tmp_path / "manual", splits, gz=("test",))  # dev plain, test gz
  with caplog.at_level(logging.WARNING):
    builder = snli.prepare(manual, str(tmp_path / "tfds"))
  train_file = os.path.join(manual, "snli_1.0_train.jsonl")
  said = [r.getMessage() for r in caplog.records if "SNLI: building" in r.getMessage()]
  assert said == [f"SNLI: building validation, test only; no train split, its file is "
                  f"missing: {train_file} (or .jsonl.gz)."]
  assert snli.available_splits(builder) == ("validation", "test")
  assert len(snli.read_split(builder, "validation")) == 1
  with pytest.raises(snli.MissingSplitError, match="SNLI split 'train' was not built") as err:
    snli.read_split(builder, "train")
  assert f"{train_file} (or .jsonl.gz)" in str(err.value)
  assert "\n" not in str(err.value)
  # A builder re-opened from data_dir remembers it.
  again = snli.prepare(manual, str(tmp_path / "tfds"))
  assert again.info.metadata["missing_splits"] == ["train"]
  with pytest.raises(FileNotFoundError, match="snli_1.0_train.jsonl"):
    snli.load_splits(manual, str(tmp_path / "tfds"))
  # Adding the file later: the data is prepared again, with it, in a new folder (the old
  # one is kept), and one line says why.
  _write_snli(manual, {"train": SNLI_SPLITS["train"]}, gz=())
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    again = snli.prepare(manual, str(tmp_path / "tfds"))
  assert snli.available_splits(again) == snli.SPLITS
  assert again.data_dir != builder.data_dir and os.path.isdir(builder.data_dir)
  said = [r.getMessage() for r in caplog.records if "changed since" in r.getMessage()]
  assert len(said) == 1 and "(snli_1.0_train.jsonl: added)" in said[0]
  assert builder.data_dir in said[0] and again.data_dir in said[0]


def test_snli_no_file_at_all_lists_the_files(tmp_path):
  empty = tmp_path / "empty"
  empty.mkdir()
  (empty / "README").write_text("nothing here")
  with pytest.raises(FileNotFoundError, match="no SNLI file") as err:
    snli.prepare(str(empty), str(tmp_path / "tfds"))
  for stem in snli.FILE_STEMS.values():
    assert os.path.join(str(empty), stem) + ".jsonl (or .jsonl.gz)" in str(err.value)


def test_snli_jsonl_is_preferred_over_gz_and_errors_name_the_line(tmp_path):
  root = _write_snli(tmp_path, {"test": SNLI_SPLITS["test"]}, gz=("test",))
  assert snli.find_file(root, "test").name == "snli_1.0_test.jsonl.gz"
  _write_snli(tmp_path, {"test": SNLI_SPLITS["test"][:1]}, gz=())
  assert snli.find_file(root, "test").name == "snli_1.0_test.jsonl"
  assert len(snli.parse_file(snli.find_file(root, "test"))) == 1
  assert snli.find_file(root, "train") is None
  good = json.dumps(SNLI_SPLITS["test"][0])
  for line, message in [("{not json", "not JSON"), ("[1, 2]", "a JSON list"),
                        (json.dumps({"gold_label": "neutral", "sentence1": "a"}),
                         "no field 'sentence2'"),
                        (json.dumps(_record(0, "maybe", "a", "b")), "gold_label 'maybe'")]:
    with pytest.raises(snli.SnliFormatError, match=message) as err:
      snli.parse_lines([good, "", line], "snli_1.0_dev.jsonl")
    assert str(err.value).startswith("snli_1.0_dev.jsonl, line 3: ")


def test_treebank_words():
  assert text.treebank_words("A man's dog doesn't swim.") == [
      "a", "man", "'s", "dog", "does", "n't", "swim", "."]
  assert text.treebank_words("They're at the well-known cafe, paying $3.50!") == [
      "they", "'re", "at", "the", "well-known", "cafe", ",", "paying", "$", "3.50", "!"]
  assert text.treebank_words("I can't", lower=False) == ["I", "ca", "n't"]
  assert text.treebank_words("I'm sure") == ["i", "'m", "sure"]
  assert text.treebank_words("  ") == []


def test_inner_node_label_is_checked():
  with pytest.raises(sst.SstFormatError, match="dev.txt, line 1: label 7 is not"):
    sst.parse_lines(["(2 (2 a) (7 b))\n"], "dev.txt")

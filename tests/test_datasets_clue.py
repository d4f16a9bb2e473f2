"""CLUE data (tasks/datasets/clue.py): the TFDS builder's three configs (afqmc, tnews, cmnli)
on tiny fixture folders, the label mappings, missing splits and files, malformed lines, and
(``-m slow``) the counts of ../shared/data/clue."""

import json
import logging
import os
import time

import numpy as np
import pytest

from tasks.datasets import clue
from tests import data_files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_CLUE = os.path.normpath(os.path.join(REPO, os.pardir, "shared", "data", "clue"))

AFQMC = {
    "train.json": [
        {"sentence1": "蚂蚁借呗等额还款可以换成先息后本吗", "sentence2": "借呗有先息到期还本吗",
         "label": "0"},
        {"sentence1": "花呗怎么还款", "sentence2": "花呗如何还钱", "label": "1"},
        {"sentence1": "借呗额度为什么降低了", "sentence2": "借呗怎么提额", "label": "0"},
        {"sentence1": "花呗可以分期吗", "sentence2": "花呗能不能分期付款", "label": "1"},
    ],
    "dev.json": [
        {"sentence1": "双十一花呗提额在哪", "sentence2": "哪里可以提花呗额度", "label": "0"},
        {"sentence1": "借呗逾期了怎么办", "sentence2": "借呗逾期一天有影响吗", "label": "0"},
        {"sentence1": "我的花呗冻结了", "sentence2": "花呗被冻结怎么办", "label": "1"},
    ],
    # CLUE's test files: an "id", no label (ids need not be the line numbers).
    "test.json": [
        {"id": 7, "sentence1": "借呗什么时候会取消", "sentence2": "蚂蚁借呗什么时候可以恢复"},
        {"id": 3, "sentence1": "网商贷怎么转变成借呗", "sentence2": "如何将网商贷切换为借呗"},
        {"id": 12, "sentence1": "我的借呗为啥开通不了", "sentence2": "我怎么没法开通借呗"},
    ],
}

TNEWS_LABELS = [{"label": c, "label_desc": d} for c, d in clue.LABEL_NAMES["tnews"]]
_DESC = dict(clue.LABEL_NAMES["tnews"])


def _news(code, sentence, keywords=""):
  return {"label": code, "label_desc": _DESC[code], "sentence": sentence, "keywords": keywords}


TNEWS = {
    "labels.json": TNEWS_LABELS,
    "train.json": [
        _news("108", "上课时学生手机响个不停，老师一怒之下把手机摔了", "手机,老师"),
        _news("104", "商赢环球股份有限公司关于延期回复问询函的公告", "商赢环球,年度报告"),
        _news("106", "通过中介公司买了二手房，首付都付了，现在卖家不想卖了"),
        _news("116", "王者荣耀新英雄上线，玩家怎么看？"),
        _news("100", "一个关于老屋的故事"),
    ],
    "dev.json": [
        _news("102", "江疏影甜甜圈自拍，迷之角度竟这么好看"),
        _news("112", "云南大理，一个来了就不想走的地方"),
        _news("115", "今年的苹果收成怎么样？"),
    ],
}

CMNLI = {
    "train.json": [
        {"sentence1": "从概念上讲，奶油略读有两个基本维度", "sentence2": "产品和地理是奶油撇油的作用",
         "label": "neutral"},
        {"sentence1": "你知道在这个季节", "sentence2": "如果人们回忆起来，你就会失去一切",
         "label": "-"},
        {"sentence1": "我们的一个号码会详细执行你的指示", "sentence2": "我团队的一个成员将执行你的命令",
         "label": "entailment"},
        {"sentence1": "男孩在公园里踢球", "sentence2": "没有人在公园里", "label": "contradiction"},
    ],
    "dev.json": [
        {"sentence1": "新的权利足够好了", "sentence2": "每个人都很喜欢最新的福利", "label": "-"},
        {"sentence1": "这个网站包括一个清单", "sentence2": "网站上有一个清单", "label": "entailment"},
    ],
    "test.json": [
        {"id": 0, "sentence1": "一个女人在唱歌", "sentence2": "她唱得很好"},
        {"id": 1, "sentence1": "两个孩子在玩", "sentence2": "没有人在玩"},
    ],
}


def _write(root, files, skip=()):
  """``files``: ``{name: records}``, written as JSON lines."""
  return data_files.write_files(root, {n: data_files.jsonl_text(r) for n, r in files.items()},
                                skip=skip)


# ----------------------------------------------------------------------------- labels


def test_label_lists_and_strings():
  assert clue.TASKS == ("afqmc", "tnews", "cmnli")
  assert clue.LABELS["afqmc"] == ("0", "1")
  assert clue.LABELS["cmnli"] == ("entailment", "neutral", "contradiction")
  # TNEWS: 15 codes 100..116 without 105 and 111, so code != 100 + index.
  assert clue.LABELS["tnews"] == tuple(str(c) for c in range(100, 117) if c not in (105, 111))
  assert clue.NUM_CLASSES == {"afqmc": 2, "tnews": 15, "cmnli": 3}
  assert [clue.label_string("tnews", i) for i in (0, 4, 5, 9, 10, 14)] == [
      "100", "104", "106", "110", "112", "116"]
  assert clue.label_names("tnews")[5] == ("106", "news_house")
  assert clue.label_string("afqmc", 1) == "1"
  assert clue.label_string("cmnli", 2) == "contradiction"
  assert clue.label_string("tnews", 1, [("x", "a"), ("y", "b")]) == "y"
  with pytest.raises(ValueError, match="label index -1 is not a class 0..14 .*unlabelled"):
    clue.label_string("tnews", -1)
  with pytest.raises(ValueError, match="task='ocnli'"):
    clue.label_names("ocnli")
  assert clue.label_counts([{"label": 1}, {"label": -1}, {"label": 1}], 3).tolist() == [
      0, 2, 0]


# ----------------------------------------------------------------------------- AFQMC


def test_afqmc_all_splits_test_ids_and_file_order(tmp_path):
  manual = _write(tmp_path / "afqmc", AFQMC)
  builder = clue.prepare("afqmc", manual, str(tmp_path / "tfds"))
  assert clue.available_splits(builder) == clue.SPLITS
  splits = {s: clue.read_split(builder, s) for s in clue.SPLITS}
  assert {s: len(v) for s, v in splits.items()} == {"train": 4, "validation": 3, "test": 3}
  assert splits["train"][0] == {"index": 0, "id": 0, "sentence1": "蚂蚁借呗等额还款可以换成先息后本吗",
                                "sentence2": "借呗有先息到期还本吗", "label": 0}
  for split, name in (("train", "train.json"), ("validation", "dev.json"),
                      ("test", "test.json")):   # file order, texts as written
    assert [(ex["sentence1"], ex["sentence2"]) for ex in splits[split]] == [
        (r["sentence1"], r["sentence2"]) for r in AFQMC[name]]
    assert [ex["index"] for ex in splits[split]] == list(range(len(AFQMC[name])))
  assert [ex["label"] for ex in splits["train"]] == [0, 1, 0, 1]
  assert [ex["id"] for ex in splits["validation"]] == [0, 1, 2]   # no id field: the index
  # Test rows: label -1, their own ids kept.
  assert [(ex["id"], ex["label"]) for ex in splits["test"]] == [(7, -1), (3, -1), (12, -1)]
  assert clue.label_counts(splits["validation"], 2).tolist() == [2, 1]
  assert clue.label_counts(splits["test"], 2).tolist() == [0, 0]
  assert clue.load_splits("afqmc", manual, str(tmp_path / "tfds")) == splits
  assert clue.load_splits("afqmc", manual, str(tmp_path / "tfds"), splits=("test",)) == {
      "test": splits["test"]}
  assert clue.label_names("afqmc", builder) == clue.LABEL_NAMES["afqmc"]


def test_missing_split_is_one_line_and_asked_for(tmp_path, caplog):
  manual = _write(tmp_path / "afqmc", AFQMC, skip=("dev.json",))
  with caplog.at_level(logging.WARNING):
    builder = clue.prepare("afqmc", manual, str(tmp_path / "tfds"))
  dev = os.path.join(manual, "dev.json")
  assert data_files.said(caplog, "CLUE afqmc: building") == [
      f"CLUE afqmc: building train, test only; no validation split, file(s) missing: {dev}."]
  assert clue.available_splits(builder) == ("train", "test")
  assert set(clue.load_splits("afqmc", manual, str(tmp_path / "tfds"))) == {"train", "test"}
  with pytest.raises(clue.MissingSplitError, match="CLUE afqmc split 'validation' was not "
                     "built") as err:
    clue.read_split(builder, "validation")
  assert isinstance(err.value, FileNotFoundError)
  assert f"its file {dev} was missing" in str(err.value)
  assert "put the file there and run again" in str(err.value)
  assert "\n" not in str(err.value)
  with pytest.raises(clue.MissingSplitError):
    clue.load_splits("afqmc", manual, str(tmp_path / "tfds"), splits=clue.SPLITS)
  # Adding the file later: the data is prepared again with it (a new folder; the old one
  # is kept), and one line says why.
  _write(manual, {"dev.json": AFQMC["dev.json"]})
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    again = clue.prepare("afqmc", manual, str(tmp_path / "tfds"))
  assert clue.available_splits(again) == clue.SPLITS
  assert again.info.metadata["missing_splits"] == []
  assert os.path.isdir(builder.data_dir) and again.data_dir != builder.data_dir
  assert [m for m in data_files.said(caplog, "CLUE afqmc:") if "changed since" in m] == [
      f"CLUE afqmc: the source files in {manual} changed since the data in "
      f"{builder.data_dir} was prepared (dev.json: added); preparing it again in "
      f"{again.data_dir} (the old folder is kept: delete it to free the space)."]


def test_archive_subfolder_is_found(tmp_path):
  manual = tmp_path / "unpacked"
  _write(manual / "afqmc_public", AFQMC)
  builder = clue.prepare("afqmc", str(manual), str(tmp_path / "tfds"))
  assert clue.available_splits(builder) == clue.SPLITS
  assert builder.info.metadata["source_dir"] == str(manual / "afqmc_public")


# ----------------------------------------------------------------------------- TNEWS


def test_tnews_codes_to_indices_no_test_file(tmp_path, caplog):
  manual = _write(tmp_path / "tnews", TNEWS)
  with caplog.at_level(logging.WARNING):
    builder = clue.prepare("tnews", manual, str(tmp_path / "tfds"))
  test_file = os.path.join(manual, "test.json")
  assert data_files.said(caplog, "CLUE tnews:") == [
      f"CLUE tnews: building train, validation only; no test split, file(s) missing: "
      f"{test_file}."]
  assert clue.available_splits(builder) == ("train", "validation")
  splits = clue.load_splits("tnews", manual, str(tmp_path / "tfds"))
  assert set(splits) == {"train", "validation"}
  train = splits["train"]
  # The title is sentence1, sentence2 is "" (keywords not used).
  assert train[0] == {"index": 0, "id": 0, "label": 7, "sentence2": "",
                      "sentence1": "上课时学生手机响个不停，老师一怒之下把手机摔了"}
  # Codes -> their position in labels.json: 108->7, 104->4, 106->5, 116->14, 100->0.
  assert [ex["label"] for ex in train] == [7, 4, 5, 14, 0]
  assert [ex["label"] for ex in splits["validation"]] == [2, 10, 13]
  assert [clue.label_string("tnews", ex["label"], builder) for ex in train] == [
      r["label"] for r in TNEWS["train.json"]]
  assert clue.label_names("tnews", manual) == clue.label_names("tnews", builder) == (
      clue.LABEL_NAMES["tnews"])
  assert clue.label_counts(train, 15).tolist() == [1, 0, 0, 0, 1, 1, 0, 1] + [0] * 6 + [1]
  with pytest.raises(clue.MissingSplitError, match=f"its file {test_file} was missing"):
    clue.read_split(builder, "test")


def test_tnews_keeps_the_order_of_labels_json(tmp_path, caplog):
  reordered = list(reversed(TNEWS_LABELS))      # "116" first ... "100" last
  manual = _write(tmp_path / "tnews", dict(TNEWS, **{"labels.json": reordered}))
  with caplog.at_level(logging.WARNING):
    builder = clue.prepare("tnews", manual, str(tmp_path / "tfds"))
  assert any("differ from CLUE's list" in m for m in data_files.said(caplog, "CLUE tnews:"))
  train = clue.read_split(builder, "train")
  assert [ex["label"] for ex in train] == [14 - k for k in (7, 4, 5, 14, 0)]
  names = clue.label_names("tnews", builder)
  assert names[0] == ("116", "news_game") and names == clue.label_names("tnews", manual)
  # The codes come back through the builder's list (CLUE's list would be wrong here).
  assert [clue.label_string("tnews", ex["label"], builder) for ex in train] == [
      r["label"] for r in TNEWS["train.json"]]
  assert clue.label_string("tnews", 0) == "100"


def test_tnews_without_labels_json_uses_clues_list(tmp_path, caplog):
  manual = _write(tmp_path / "tnews", TNEWS, skip=("labels.json",))
  with caplog.at_level(logging.WARNING):
    builder = clue.prepare("tnews", manual, str(tmp_path / "tfds"))
  assert any(f"no {os.path.join(manual, 'labels.json')}; using CLUE's 15 labels" in m
             for m in data_files.said(caplog, "CLUE tnews:"))
  assert [ex["label"] for ex in clue.read_split(builder, "validation")] == [2, 10, 13]


# ----------------------------------------------------------------------------- CMNLI


def test_cmnli_drops_no_gold_and_says_so(tmp_path, caplog):
  manual = _write(tmp_path / "cmnli", CMNLI)
  with caplog.at_level(logging.WARNING):
    builder = clue.prepare("cmnli", manual, str(tmp_path / "tfds"))
  assert data_files.said(caplog, "CLUE cmnli: dropped") == [
      f"CLUE cmnli: dropped 1 line(s) of {os.path.join(manual, f)} labelled '-' (no gold "
      "label)." for f in ("train.json", "dev.json")]
  splits = {s: clue.read_split(builder, s) for s in clue.SPLITS}
  # index is still the line in the file; entailment 0 / neutral 1 / contradiction 2.
  assert [(ex["index"], ex["label"]) for ex in splits["train"]] == [(0, 1), (2, 0), (3, 2)]
  assert [(ex["index"], ex["label"]) for ex in splits["validation"]] == [(1, 0)]
  assert splits["test"][1] == {"index": 1, "id": 1, "sentence1": "两个孩子在玩",
                               "sentence2": "没有人在玩", "label": -1}
  assert builder.info.metadata["dropped_no_gold"] == {"train": 1, "validation": 1, "test": 0}
  assert [clue.label_string("cmnli", ex["label"]) for ex in splits["train"]] == [
      "neutral", "entailment", "contradiction"]


def test_cmnli_with_no_file_at_all_is_one_line(tmp_path):
  nowhere = str(tmp_path / "cmnli")          # as ../shared/data/clue/cmnli: not there
  with pytest.raises(FileNotFoundError) as err:
    clue.prepare("cmnli", nowhere, str(tmp_path / "tfds"))
  message = str(err.value)
  assert message.startswith(f"CLUE cmnli: manual_dir {nowhere} does not exist or is empty")
  other = tmp_path / "other"                 # a folder without any of the files
  other.mkdir()
  (other / "README").write_text("nothing here")
  with pytest.raises(FileNotFoundError) as err2:
    clue.prepare("cmnli", str(other), str(tmp_path / "tfds"))
  assert str(err2.value).startswith(f"CLUE cmnli: no CLUE cmnli file in {other}; ")
  for root, text in ((nowhere, message), (str(other), str(err2.value))):
    assert "\n" not in text and "cmnli_public.zip" in text
    for name in ("train.json", "dev.json", "test.json"):
      assert os.path.join(root, name) in text


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("task, split, line, message", [
    ("afqmc", "train", '{"sentence1": "你好", "sentence2": "您好", "label": "0"', "not JSON"),
    ("afqmc", "train", '["你好", "您好"]', "a JSON list, not an object"),
    ("afqmc", "validation", '{"sentence1": "你好", "label": "1"}', "no field 'sentence2'"),
    ("afqmc", "train", '{"sentence1": "你好", "sentence2": "您好"}', "no field 'label'"),
    ("afqmc", "train", '{"sentence1": "你好", "sentence2": "您好", "label": "2"}',
     r"label '2' is none of \['0', '1'\]"),
    ("afqmc", "test", '{"id": "x", "sentence1": "你好", "sentence2": "您好"}',
     "id 'x' is not an integer"),
    ("tnews", "train", '{"label": "105", "label_desc": "news_x", "sentence": "新闻"}',
     "label '105' is none of"),
    ("tnews", "train", '{"label": "106", "label_desc": "news_car", "sentence": "新闻"}',
     "label_desc 'news_car' is not 'news_house'"),
    ("tnews", "train", '{"label": "106", "sentence": 3}', "field 'sentence' is a int"),
    ("cmnli", "train", '{"sentence1": "甲", "sentence2": "乙", "label": "maybe"}',
     "label 'maybe' is none of"),
])
def test_malformed_line_names_file_and_line(task, split, line, message):
  good = {"afqmc": AFQMC["train.json"][0], "tnews": TNEWS["train.json"][0],
          "cmnli": CMNLI["train.json"][0]}[task]
  if split == "test":
    good = AFQMC["test.json"][0]
  lines = [json.dumps(good, ensure_ascii=False), "", line]
  with pytest.raises(clue.ClueFormatError, match=message) as err:
    clue.parse_lines(lines, task, split, "dev.json")
  assert str(err.value).startswith("dev.json, line 3: ")
  assert "\n" not in str(err.value) and isinstance(err.value, ValueError)


def test_malformed_file_stops_prepare_naming_file_and_line(tmp_path):
  manual = _write(tmp_path / "afqmc", AFQMC)
  with open(os.path.join(manual, "dev.json"), "a", encoding="utf-8") as f:
    f.write('{"sentence1": "坏行", "sentence2": \n')
  with pytest.raises(clue.ClueFormatError) as err:
    clue.prepare("afqmc", manual, str(tmp_path / "tfds"))
  assert str(err.value).startswith(f"{os.path.join(manual, 'dev.json')}, line 4: not JSON")
  assert "\n" not in str(err.value)
  # Bytes lines (as read from a file), a BOM, and a blank last line are fine.
  lines = [("\ufeff" + json.dumps(AFQMC["train.json"][0], ensure_ascii=False)).encode(),
           b"\n"]
  assert [ex["sentence2"] for ex in clue.parse_lines(lines, "afqmc", "train")] == [
      "借呗有先息到期还本吗"]
  with pytest.raises(clue.ClueFormatError, match="<lines>, line 1: not UTF-8"):
    clue.parse_lines([b"\xff\xfe"], "afqmc", "train")


# ----------------------------------------------------------------------------- real data


@pytest.mark.slow
def test_shared_clue_counts(tmp_path):
  if not all(os.path.isdir(os.path.join(SHARED_CLUE, t)) for t in ("afqmc", "tnews")):
    pytest.skip(f"{SHARED_CLUE}/afqmc or tnews is not here")
  start = time.perf_counter()
  afqmc = clue.load_splits("afqmc", os.path.join(SHARED_CLUE, "afqmc"), str(tmp_path))
  tnews = clue.load_splits("tnews", os.path.join(SHARED_CLUE, "tnews"), str(tmp_path))
  longest = {t: {s: max(len(ex["sentence1"]) for ex in v) for s, v in d.items()}
             for t, d in (("afqmc", afqmc), ("tnews", tnews))}
  print(f"CLUE afqmc { {s: len(v) for s, v in afqmc.items()} }, tnews "
        f"{ {s: len(v) for s, v in tnews.items()} }, afqmc dev labels "
        f"{clue.label_counts(afqmc['validation'], 2).tolist()}, tnews dev labels "
        f"{clue.label_counts(tnews['validation'], 15).tolist()}, longest sentence1 {longest},"
        f" sentence2 { {s: max(len(ex['sentence2']) for ex in v) for s, v in afqmc.items()} }"
        f", {time.perf_counter() - start:.1f} s")
  assert {s: len(v) for s, v in afqmc.items()} == clue.NUM_EXAMPLES["afqmc"] == {
      "train": 34_334, "validation": 4_316, "test": 3_861}
  assert {s: len(v) for s, v in tnews.items()} == {"train": 53_360, "validation": 10_000}
  assert clue.label_counts(afqmc["validation"], 2).tolist() == [2_978, 1_338]
  assert clue.label_counts(afqmc["train"], 2).tolist() == [23_761, 10_573]
  # AFQMC's test ids are its line numbers; every test row is unlabelled.
  assert [ex["id"] for ex in afqmc["test"]] == list(range(3_861))
  assert {ex["label"] for ex in afqmc["test"]} == {-1}
  counts = clue.label_counts(tnews["validation"], 15)
  assert counts.sum() == 10_000 and counts.min() > 0
  assert tnews["validation"][0]["sentence1"] == "江疏影甜甜圈自拍，迷之角度竟这么好看，美吸引一切事物"
  assert clue.label_string("tnews", tnews["validation"][0]["label"]) == "102"
  assert all(ex["sentence2"] == "" for ex in tnews["train"])
  assert np.all(np.diff([ex["index"] for ex in tnews["train"]]) == 1)


def test_test_row_with_empty_label_is_unlabelled():
  rows = clue.parse_lines(['{"id": 0, "sentence1": "a", "sentence2": "b", "label": ""}'],
                          "afqmc", "test")
  assert rows[0]["label"] == clue.NO_LABEL

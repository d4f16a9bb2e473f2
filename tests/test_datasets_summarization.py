"""Summarization data: the CNN/DailyMail builder (tasks/datasets/cnn_dailymail.py) on tiny
fixture folders of .story files named by the SHA-1 of made-up URLs, and on the 20-story
sample of ../shared/data (skipped without it); the story/summary/title builder
(tasks/datasets/stories.py) and the RUM paper's four Science-Daily sub-tasks."""

import hashlib
import logging
import os
import time

import pytest

from tasks.datasets import cnn_dailymail as cnndm
from tasks.datasets import prepare as prepare_lib
from tasks.datasets import stories
from tests import data_files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_CNNDM = os.path.normpath(os.path.join(REPO, os.pardir, "shared", "data",
                                             "cnn_dailymail_sample"))


# ----------------------------------------------------------------------------- CNN/DM

# A story: article paragraphs (a caption without a period; a quote ending in a curly quote),
# then @highlight blocks (one with an empty line after it).
STORY_A = """(CNN) -- A cat named Tom climbed a tree on Monday.

Firefighters brought him down

"He was fine," said his owner\u201d

@highlight

Tom the cat climbed a tree

@highlight

Firefighters helped!
"""
STORY_B = """LONDON, England (CNN) -- It rained.

@highlight

It rained in London .
"""
STORY_C = """By Daily Mail Reporter

A dog learned to surf (photo)

@highlight


Dog surfs

@highlight

Owner amazed.
"""

CNN_URLS = {
    "train": ["http://www.cnn.com/2015/04/01/cat/index.html",
              "http://www.cnn.com/2015/04/02/rain/index.html"],
    "validation": ["http://www.cnn.com/2015/04/03/val/index.html"],
    "test": ["http://www.cnn.com/2015/04/04/test/index.html"],
}
DM_URLS = {"train": ["http://www.dailymail.co.uk/news/article-1/dog-surfs.html"]}


def _hash(url):
  return hashlib.sha1(url.encode("utf-8")).hexdigest()


def _cnndm(root, *, texts=None, skip_lists=(), skip_stories=(), dailymail=True):
  """Writes a fixture folder: the stories of the urls above and the url lists."""
  texts = texts or {}
  default = {CNN_URLS["train"][0]: STORY_A, CNN_URLS["train"][1]: STORY_B,
             CNN_URLS["validation"][0]: STORY_B, CNN_URLS["test"][0]: STORY_A,
             DM_URLS["train"][0]: STORY_C}
  os.makedirs(root / "url_lists")
  for folder, urls in (("cnn_stories", CNN_URLS), ("dailymail_stories", DM_URLS)):
    if folder == "dailymail_stories" and not dailymail:
      continue
    os.makedirs(root / folder)
    for split_urls in urls.values():
      for url in split_urls:
        if url not in skip_stories:
          (root / folder / f"{_hash(url)}.story").write_text(
              texts.get(url, default[url]), encoding="utf-8")
  for split, name in cnndm.URL_LISTS.items():
    if split not in skip_lists:
      urls = CNN_URLS[split][:1] + DM_URLS.get(split, []) + CNN_URLS[split][1:]
      (root / "url_lists" / name).write_text("".join(u + "\n" for u in urls) + "\n")
  return str(root)


def test_url_hash_and_fix_missing_period():
  url = "http://www.cnn.com/2015/04/01/cat/index.html"
  assert cnndm.url_hash(url) == cnndm.url_hash(url + " \n") == hashlib.sha1(
      url.encode()).hexdigest()
  assert len(cnndm.url_hash(url)) == 40
  fix = cnndm.fix_missing_period
  assert fix("A caption") == "A caption ."
  for line in ("Ends.", "Why?", "Yes!", "Wait...", "'quoted'", '"quoted"', "`x`",
               "he said\u2019", "he said\u201d", "(aside)", "", "@highlight"):
    assert fix(line) == line


def test_parse_story_article_highlights_and_periods():
  article, highlights = cnndm.parse_story(STORY_A, "a.story")
  assert article == ('(CNN) -- A cat named Tom climbed a tree on Monday. Firefighters '
                     'brought him down . "He was fine," said his owner\u201d')
  assert highlights == ["Tom the cat climbed a tree .", "Firefighters helped!"]
  # An empty line after @highlight is skipped; every line after the first @highlight is
  # a highlight; a line with trailing blanks is stripped.
  article, highlights = cnndm.parse_story(STORY_C.replace("Owner amazed.", "Owner amazed.  "))
  assert article == "By Daily Mail Reporter . A dog learned to surf (photo)"
  assert highlights == ["Dog surfs .", "Owner amazed."]
  # Windows line ends, no final newline.
  assert cnndm.parse_story("Text\r\n\r\n@highlight\r\n\r\nSummary") == (
      "Text .", ["Summary ."])


@pytest.mark.parametrize("text, reason", [
    ("@highlight\n\nOnly a summary.\n", "no article text before the first @highlight line"),
    ("\n\n  \n", r"no text \(the file is blank\)"),
    ("An article.\n\nNo highlight at all.\n", "no @highlight line"),
    ("An article.\n\n@highlight\n\n\n@highlight\n", "no highlight text after its @highlight"),
])
def test_malformed_story_names_the_file(text, reason):
  with pytest.raises(cnndm.StoryFormatError, match=reason) as err:
    cnndm.parse_story(text, "/data/cnn_stories/abc.story")
  assert str(err.value).startswith("/data/cnn_stories/abc.story: ")
  assert "\n" not in str(err.value) and isinstance(err.value, ValueError)
  assert cnndm.parse_story(text, check=False) is not None   # See et al. keep them


def test_splits_by_url_hash_from_both_folders(tmp_path):
  manual = _cnndm(tmp_path / "cnndm")
  builder = cnndm.prepare(manual, str(tmp_path / "tfds"))
  assert cnndm.available_splits(builder) == cnndm.SPLITS
  splits = cnndm.load_splits(manual, str(tmp_path / "tfds"))
  # train.txt lists cat (cnn), dog (dailymail), rain (cnn): url-list order, both folders.
  train = splits["train"]
  assert [ex["id"] for ex in train] == [_hash(CNN_URLS["train"][0]), _hash(DM_URLS["train"][0]),
                                        _hash(CNN_URLS["train"][1])]
  assert [ex["index"] for ex in train] == [0, 1, 2]
  assert train[0] == {"index": 0, "id": _hash(CNN_URLS["train"][0]),
                      "article": cnndm.parse_story(STORY_A)[0],
                      "highlights": "Tom the cat climbed a tree .\nFirefighters helped!"}
  assert cnndm.highlight_sentences(train[1]) == ["Dog surfs .", "Owner amazed."]
  assert [ex["id"] for ex in splits["validation"]] == [_hash(CNN_URLS["validation"][0])]
  assert [ex["id"] for ex in splits["test"]] == [_hash(CNN_URLS["test"][0])]
  assert splits["validation"][0]["highlights"] == "It rained in London ."
  assert builder.info.metadata["missing_stories"] == {"train": 0, "validation": 0, "test": 0}
  assert prepare_lib.base_config_name(builder.info.config_name) == "strict"


def test_missing_story_is_an_error_unless_allowed(tmp_path, caplog):
  gone = [CNN_URLS["train"][1], DM_URLS["train"][0]]
  manual = _cnndm(tmp_path / "cnndm", skip_stories=gone)
  with pytest.raises(FileNotFoundError) as err:
    cnndm.prepare(manual, str(tmp_path / "tfds"))
  message = str(err.value)
  first = os.path.join(manual, "cnn_stories", _hash(DM_URLS["train"][0]) + ".story")
  assert message.startswith(
      f"CNN/DailyMail train: 2 of 3 stories listed in "
      f"{os.path.join(manual, 'url_lists', 'all_train.txt')} are missing; the first: {first} "
      f"(nor in {os.path.join(manual, 'dailymail_stories')}/), url {DM_URLS['train'][0]}.")
  assert "allow_missing_stories=True" in message and "\n" not in message
  with caplog.at_level(logging.WARNING):
    builder = cnndm.prepare(manual, str(tmp_path / "tfds"), allow_missing_stories=True)
  assert data_files.said(caplog, "CNN/DailyMail train: skipping") == [
      f"CNN/DailyMail train: skipping 2 of 3 stories listed in "
      f"{os.path.join(manual, 'url_lists', 'all_train.txt')} whose file is missing "
      f"(allow_missing_stories=True); the first: {first} (nor in "
      f"{os.path.join(manual, 'dailymail_stories')}/), url {DM_URLS['train'][0]}."]
  train = cnndm.read_split(builder, "train")
  assert [(ex["index"], ex["id"]) for ex in train] == [(0, _hash(CNN_URLS["train"][0]))]
  assert builder.info.metadata["missing_stories"] == {"train": 2, "validation": 0, "test": 0}
  assert prepare_lib.base_config_name(builder.info.config_name) == "allow_missing"


def test_missing_url_list_is_one_line_and_asked_for(tmp_path, caplog):
  manual = _cnndm(tmp_path / "cnndm", skip_lists=("test",), dailymail=False,
                  skip_stories=DM_URLS["train"])
  os.remove(os.path.join(manual, "url_lists", "all_train.txt"))   # the dm story is gone
  lists = os.path.join(manual, "url_lists")
  with caplog.at_level(logging.WARNING):
    builder = cnndm.prepare(manual, str(tmp_path / "tfds"))
  assert data_files.said(caplog, "CNN/DailyMail: building") == [
      f"CNN/DailyMail: building validation only; no train, test split, url list missing: "
      f"{os.path.join(lists, 'all_train.txt')}, "
      f"{os.path.join(lists, 'all_test.txt')}."]
  assert cnndm.available_splits(builder) == ("validation",)
  with pytest.raises(cnndm.MissingSplitError, match="CNN/DailyMail split 'test' was not "
                     "built") as err:
    cnndm.read_split(builder, "test")
  assert isinstance(err.value, FileNotFoundError) and "\n" not in str(err.value)
  assert f"its url list {os.path.join(lists, 'all_test.txt')} was missing" in str(
      err.value)
  # Added later: the data is prepared again with it (the old folder is kept), and one line
  # says why.
  with open(os.path.join(lists, "all_test.txt"), "w") as f:
    f.write(CNN_URLS["test"][0] + "\n")
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    again = cnndm.prepare(manual, str(tmp_path / "tfds"))
  assert cnndm.available_splits(again) == ("validation", "test")
  assert again.data_dir != builder.data_dir and os.path.isdir(builder.data_dir)
  assert [m for m in data_files.said(caplog, "CNN/DailyMail:") if "changed since" in m] == [
      f"CNN/DailyMail: the source files in {manual} changed since the data in "
      f"{builder.data_dir} was prepared (url_lists/all_test.txt: added); preparing it again "
      f"in {again.data_dir} (the old folder is kept: delete it to free the space)."]


def test_no_url_list_or_no_story_folder_is_one_line(tmp_path):
  nowhere = str(tmp_path / "nowhere")
  with pytest.raises(FileNotFoundError) as err:
    cnndm.prepare(nowhere, str(tmp_path / "tfds"))
  assert str(err.value).startswith(f"CNN/DailyMail: manual_dir {nowhere} does not exist or "
                                   "is empty")
  other = tmp_path / "other"
  (other / "cnn_stories").mkdir(parents=True)
  (other / "cnn_stories" / "x.story").write_text(STORY_A)
  with pytest.raises(FileNotFoundError) as err2:
    cnndm.prepare(str(other), str(tmp_path / "tfds"))
  assert str(err2.value).startswith(
      f"CNN/DailyMail: no url list in {other / 'url_lists'}; expected ")
  bare = tmp_path / "bare"
  _cnndm(bare)
  for folder in ("cnn_stories", "dailymail_stories"):
    for p in (bare / folder).iterdir():
      p.unlink()
    (bare / folder).rmdir()
  with pytest.raises(FileNotFoundError, match=f"no story folder in {bare}; ") as err3:
    cnndm.prepare(str(bare), str(tmp_path / "tfds"))
  for text in (str(err.value), str(err2.value), str(err3.value)):
    assert "\n" not in text and "all_val.txt" in text and "cnn_stories/" in text


def test_malformed_story_stops_prepare_or_is_skipped_or_kept(tmp_path, caplog):
  bad_url = CNN_URLS["train"][1]
  manual = _cnndm(tmp_path / "cnndm", texts={bad_url: "@highlight\n\nNo article.\n"})
  bad = os.path.join(manual, "cnn_stories", _hash(bad_url) + ".story")
  with pytest.raises(cnndm.StoryFormatError) as err:
    cnndm.prepare(manual, str(tmp_path / "tfds"))
  assert str(err.value).startswith(f"{bad}: no article text before the first @highlight")
  assert "\n" not in str(err.value)
  with caplog.at_level(logging.WARNING):
    skipping = cnndm.prepare(manual, str(tmp_path / "tfds"), malformed_stories="skip")
  assert data_files.said(caplog, "CNN/DailyMail train: skipped") == [
      f"CNN/DailyMail train: skipped 1 malformed stories (malformed_stories='skip'); the "
      f"first: {bad}: no article text before the first @highlight line."]
  assert [ex["index"] for ex in cnndm.read_split(skipping, "train")] == [0, 1]
  assert skipping.info.metadata["malformed_stories"] == {"train": 1, "validation": 0,
                                                         "test": 0}
  keeping = cnndm.prepare(manual, str(tmp_path / "tfds"), malformed_stories="keep")
  kept = cnndm.read_split(keeping, "train")[2]
  assert (kept["article"], kept["highlights"]) == ("", "No article.")
  assert prepare_lib.base_config_name(keeping.info.config_name) == "keep_malformed"
  with pytest.raises(ValueError, match="malformed_stories='drop'"):
    cnndm.prepare(manual, str(tmp_path / "tfds"), malformed_stories="drop")


def test_download_reads_the_archive_layout(tmp_path, monkeypatch):
  """No internet here: the download gives the archives unpacked (cnn/stories/,
  dailymail/stories/) and the url lists as files."""
  fixture = tmp_path / "fixture"
  _cnndm(fixture)
  got = {}
  for key, folder in (("cnn_stories", "cnn_stories"), ("dailymail_stories",
                                                         "dailymail_stories")):
    inner = tmp_path / "dl" / key / cnndm.ARCHIVE_FOLDERS[key]
    os.makedirs(inner.parent)
    os.rename(fixture / folder, inner)
    got[key] = str(tmp_path / "dl" / key)
  for split, name in cnndm.URL_LISTS.items():
    got[split] = str(fixture / "url_lists" / name)
  asked = data_files.fake_download(monkeypatch, got)
  builder = cnndm.prepare("", str(tmp_path / "tfds"))
  assert asked == [cnndm.URLS]
  assert [ex["id"] for ex in cnndm.read_split(builder, "train")] == [
      _hash(CNN_URLS["train"][0]), _hash(DM_URLS["train"][0]), _hash(CNN_URLS["train"][1])]

  data_files.fake_download(monkeypatch, error=OSError("no route to host"))
  with pytest.raises(FileNotFoundError, match="downloading failed .OSError: no route") as err:
    cnndm.prepare("", str(tmp_path / "tfds2"))
  assert "all_train.txt" in str(err.value) and "\n" not in str(err.value)


def test_shared_sample_twenty_stories(tmp_path, caplog):
  if not os.path.isdir(os.path.join(SHARED_CNNDM, "cnn_stories")):
    pytest.skip(f"{SHARED_CNNDM} is not here")
  start = time.perf_counter()
  with caplog.at_level(logging.WARNING):
    builder = cnndm.prepare(SHARED_CNNDM, str(tmp_path))
  test_list = os.path.join(SHARED_CNNDM, "url_lists", "all_test.txt")
  assert data_files.said(caplog, "CNN/DailyMail:") == [
      f"CNN/DailyMail: building train, validation only; no test split, url list missing: "
      f"{test_list}."]
  assert cnndm.available_splits(builder) == ("train", "validation")
  splits = {s: cnndm.read_split(builder, s) for s in ("train", "validation")}
  assert {s: len(v) for s, v in splits.items()} == {"train": 10, "validation": 10}
  for split, name in (("train", "all_train.txt"), ("validation", "all_val.txt")):
    urls = cnndm.read_url_list(os.path.join(SHARED_CNNDM, "url_lists", name))
    assert [ex["id"] for ex in splits[split]] == [cnndm.url_hash(u) for u in urls]
  examples = splits["train"] + splits["validation"]
  assert sum(len(cnndm.highlight_sentences(ex)) for ex in examples) == 59
  assert all(ex["article"] and "@highlight" not in ex["article"] for ex in examples)
  assert all(s[-1] in cnndm.END_TOKENS for ex in examples
             for s in cnndm.highlight_sentences(ex))
  with pytest.raises(cnndm.MissingSplitError, match=f"its url list {test_list} was missing"):
    cnndm.read_split(builder, "test")
  words = {s: max(len(ex["article"].split()) for ex in v) for s, v in splits.items()}
  print(f"CNN/DM sample: { {s: len(v) for s, v in splits.items()} }, highlights "
        f"{ {s: sum(len(cnndm.highlight_sentences(ex)) for ex in v) for s, v in splits.items()} }"
        f", longest article (words) {words}, {time.perf_counter() - start:.1f} s")


# ----------------------------------------------------------------------------- stories

STORY5 = "One.\n\nTwo.\n\nThree.\n\nFour.\n\nFive."
RECORDS = {
    "train.jsonl": [
        {"story": STORY5, "summary": "Numbers.", "title": "Count"},
        {"story": "Bees dance.\n\nThey use the sun.", "summary": "Bees navigate.",
         "title": "Bee compass"},
    ],
    "validation.jsonl": [
        {"story": "A comet.\n \nIt is bright.", "summary": "A bright comet.",
         "title": "Comet"},
    ],
    "test.jsonl": [
        {"story": "Ice melts.", "summary": "Warming.", "title": "Ice"},
    ],
}


def _stories(root, files=RECORDS, skip=()):
  return data_files.write_files(root, {n: data_files.jsonl_text(r) for n, r in files.items()},
                                skip=skip)


def test_paragraphs_and_shuffling():
  assert stories.paragraphs(STORY5) == ["One.", "Two.", "Three.", "Four.", "Five."]
  assert stories.paragraphs("A\nstill A.\n  \n\nB.\r\n\r\nC. ") == ["A\nstill A.", "B.", "C."]
  assert stories.paragraphs("Only one.") == ["Only one."] and stories.paragraphs("") == []
  once = stories.shuffled_paragraphs(STORY5, seed=3, index=7)
  assert once == stories.shuffled_paragraphs(STORY5, seed=3, index=7)
  assert sorted(stories.paragraphs(once)) == sorted(stories.paragraphs(STORY5))
  orders = {stories.shuffled_paragraphs(STORY5, seed=3, index=i) for i in range(6)}
  assert len(orders) > 1   # different examples, different orders
  assert stories.shuffled_paragraphs(STORY5, 3, 7) != stories.shuffled_paragraphs(STORY5, 3, 8)
  assert stories.shuffled_paragraphs("Only one.", 0, 0) == "Only one."
  with pytest.raises(ValueError, match="non-negative"):
    stories.shuffled_paragraphs(STORY5, -1, 0)
  # Each split its own orders: train's example i and test's example i share the index.
  train, test = ([stories.shuffled_paragraphs(STORY5, 3, i, split) for i in range(6)]
                 for split in ("train", "test"))
  assert train != test
  assert train == [stories.shuffled_paragraphs(STORY5, 3, i) for i in range(6)]
  with pytest.raises(ValueError, match=r"split='dev'; use one of \['train', 'validation'"):
    stories.shuffled_paragraphs(STORY5, 3, 0, "dev")


def test_source_target_of_the_four_subtasks():
  ex = {"index": 7, "story": STORY5, "summary": "Numbers.", "title": "Count"}
  assert stories.SUBTASKS == ("s2s", "sh2s", "s2t", "oods2s")
  assert stories.source_target(ex, "s2s") == (STORY5, "Numbers.")
  assert stories.source_target(ex, "oods2s") == (STORY5, "Numbers.")
  assert stories.source_target(ex, "s2t") == (STORY5, "Count")
  assert stories.source_target(ex, "sh2s", seed=3) == (
      stories.shuffled_paragraphs(STORY5, 3, 7), "Numbers.")
  with pytest.raises(ValueError, match="s2t: example 7 has no title"):
    stories.source_target(dict(ex, title=""), "s2t")
  with pytest.raises(ValueError, match="subtask='t2s'"):
    stories.source_target(ex, "t2s")


def test_stories_all_splits_file_order(tmp_path, caplog):
  manual = _stories(tmp_path / "Science-Daily")
  builder = stories.prepare(manual, str(tmp_path / "tfds"))
  assert prepare_lib.base_config_name(builder.info.config_name) == "science_daily"
  assert stories.available_splits(builder) == stories.SPLITS
  splits = stories.load_splits(manual, str(tmp_path / "tfds"))
  assert {s: len(v) for s, v in splits.items()} == {"train": 2, "validation": 1, "test": 1}
  assert splits["train"][0] == {"index": 0, "story": STORY5, "summary": "Numbers.",
                                "title": "Count"}
  assert [ex["title"] for ex in splits["train"]] == ["Count", "Bee compass"]
  assert stories.source_target(splits["validation"][0], "s2s") == (
      "A comet.\n \nIt is bright.", "A bright comet.")
  # A second dataset in the same data_dir is prepared under its own name.
  other = _stories(tmp_path / "other", {"test.jsonl": [{"story": "X.", "summary": "Y."}]})
  ood = stories.prepare(other, str(tmp_path / "tfds"))
  assert prepare_lib.base_config_name(ood.info.config_name) == "other"
  assert stories.available_splits(ood) == ("test",)
  assert stories.read_split(ood, "test") == [{"index": 0, "story": "X.", "summary": "Y.",
                                              "title": ""}]
  # The same name for another folder: its own data (prepared under the name and the
  # files' tag), the first folder's data untouched.
  same = stories.prepare(other, str(tmp_path / "tfds"), name="science_daily")
  assert stories.available_splits(same) == ("test",) and same.data_dir != builder.data_dir
  assert stories.available_splits(stories.prepare(manual, str(tmp_path / "tfds"))) == (
      stories.SPLITS)


def test_stories_missing_split_and_no_files(tmp_path, caplog):
  manual = _stories(tmp_path / "sd", skip=("validation.jsonl",))
  with caplog.at_level(logging.WARNING):
    builder = stories.prepare(manual, str(tmp_path / "tfds"))
  missing = os.path.join(manual, "validation.jsonl")
  assert data_files.said(caplog, "Stories: building") == [
      f"Stories: building train, test only; no validation split, file(s) missing: "
      f"{missing}."]
  with pytest.raises(stories.MissingSplitError, match=f"its file {missing} was missing") as e:
    stories.read_split(builder, "validation")
  assert "\n" not in str(e.value)
  _stories(manual, {"validation.jsonl": RECORDS["validation.jsonl"]})   # added later
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    again = stories.prepare(manual, str(tmp_path / "tfds"))
  assert stories.available_splits(again) == stories.SPLITS
  assert data_files.said(caplog, "Stories sd: ") == [
      f"Stories sd: the source files in {manual} changed since the data in "
      f"{builder.data_dir} was prepared (validation.jsonl: added); preparing it again in "
      f"{again.data_dir} (the old folder is kept: delete it to free the space)."]
  nowhere = str(tmp_path / "nowhere")
  with pytest.raises(FileNotFoundError) as err:
    stories.prepare(nowhere, str(tmp_path / "tfds"))
  assert str(err.value).startswith(f"Stories: manual_dir {nowhere} does not exist or is empty")
  empty = tmp_path / "empty"
  empty.mkdir()
  (empty / "README").write_text("no data")
  with pytest.raises(FileNotFoundError, match=f"Stories: no stories file in {empty}; "):
    stories.prepare(str(empty), str(tmp_path / "tfds"))
  with pytest.raises(ValueError, match="needs manual_dir"):
    stories.prepare("", str(tmp_path / "tfds"))


@pytest.mark.parametrize("line, message", [
    ('{"story": "A.", "summary": ', "not JSON"),
    ('["A.", "B."]', "a JSON list, not an object"),
    ('{"summary": "B.", "title": "T"}', "no field 'story'"),
    ('{"story": "A.", "title": "T"}', "no field 'summary'"),
    ('{"story": "  ", "summary": "B."}', "field 'story' is empty"),
    ('{"story": "A.", "summary": "B.", "title": 3}', "field 'title' is a int"),
])
def test_stories_malformed_line_names_file_and_line(tmp_path, line, message):
  manual = _stories(tmp_path / "sd")
  path = os.path.join(manual, "train.jsonl")
  with open(path, "a", encoding="utf-8") as f:
    f.write("\n" + line + "\n")
  with pytest.raises(stories.StoriesFormatError, match=message) as err:
    stories.prepare(manual, str(tmp_path / "tfds"))
  assert str(err.value).startswith(f"{path}, line 4: ")
  assert "\n" not in str(err.value)


def test_index_is_the_url_list_position_when_stories_are_missing(tmp_path):
  manual = _cnndm(tmp_path / "cnndm", skip_stories=[CNN_URLS["train"][0]])
  builder = cnndm.prepare(manual, str(tmp_path / "tfds"), allow_missing_stories=True)
  assert [(ex["index"], ex["id"]) for ex in cnndm.read_split(builder, "train")] == [
      (1, _hash(DM_URLS["train"][0])), (2, _hash(CNN_URLS["train"][1]))]


def test_kept_malformed_stories_are_counted_and_said(tmp_path, caplog):
  manual = _cnndm(tmp_path / "cnndm", texts={CNN_URLS["train"][1]: "@highlight\n\nNo article.\n"})
  with caplog.at_level(logging.WARNING):
    keeping = cnndm.prepare(manual, str(tmp_path / "tfds"), malformed_stories="keep")
  assert keeping.info.metadata["malformed_stories"] == {"train": 1, "validation": 0, "test": 0}
  assert data_files.said(caplog, "CNN/DailyMail train: kept") == [
      "CNN/DailyMail train: kept 1 stories with no article text or no highlight "
      "(malformed_stories='keep')."]


def test_parse_story_strips_leading_blanks():
  assert cnndm.parse_story("  Text\n\n  @highlight\n\n  Summary.") == ("Text .", ["Summary."])


def test_source_target_shuffles_per_split():
  ex = {"index": 7, "story": STORY5, "summary": "Numbers.", "title": "Count"}
  for split in ("train", "validation", "test"):
    assert stories.source_target(ex, "sh2s", seed=3, split=split) == (
        stories.shuffled_paragraphs(STORY5, 3, 7, split), "Numbers.")


def test_paragraphs_blank_line_holding_blanks():
  assert stories.paragraphs("A comet.\n \nIt is bright.\n\t\nEnd.") == [
      "A comet.", "It is bright.", "End."]

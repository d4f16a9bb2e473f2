r"""TFDS builder for CNN/DailyMail (Hermann et al., 2015; non-anonymised, See et al., 2017).

The raw ``.story`` files of the DeepMind Q&A release, split as See et al.'s
``make_datafiles.py`` does: a story's file name is the SHA-1 hex digest of its URL
(:func:`url_hash`), and the URL lists ``url_lists/all_train.txt`` / ``all_val.txt`` /
``all_test.txt`` give the splits ``train`` / ``validation`` / ``test`` (287,226 / 13,368 /
11,490 stories in the full release, :data:`NUM_STORIES`). A story is looked up in
``cnn_stories/`` first, then ``dailymail_stories/`` (either may be absent). Each example::

    {"index": 0,          # 0-based position of the story's URL in its url list (stable order)
     "id": "2bd8ada1de6a7b02f59430cc82045eb8d29cf033",      # the SHA-1 of the URL
     "article": "(CNN)For the first time in eight years, a TV legend returned ... beat.",
     "highlights": "Bob Barker returned to host \"The Price Is Right\" on Wednesday .\n"
                   "Barker, 91, had retired as host in 2007 ."}

A story file (:func:`parse_story`) is article paragraphs, then ``@highlight`` blocks: every
non-empty line after the first line starting with ``@highlight`` (the marker lines excepted)
is one highlight sentence; the lines before it are the article. Lines are stripped and empty
lines skipped. The article is its non-empty lines joined by one space (as the reference does:
paragraph breaks are not kept); ``highlights`` is the highlight sentences joined by ``"\n"``
(one sentence per line, as ROUGE-Lsum wants them). :func:`fix_missing_period` is applied to
every line, as in the reference: a line whose last character is none of :data:`END_TOKENS`
gets ``" ."`` appended (image captions without a period would otherwise run on into the next
sentence). See et al. append ``" ."`` (their text is tokenised); TFDS's ``cnn_dailymail``
>= 3.2.0 appends ``"."`` without the space (both are the same tokens after
``tasks.text.treebank_words`` and the same for ROUGE). The text is stored cased, as written:
lower-casing (See et al. lower-case everything) and tokenisation are the task's.

Errors (each one line):

* a url list whose story file is missing: ``FileNotFoundError`` naming how many are missing
  and the first missing path. With the config option ``allow_missing_stories=True`` those
  stories are skipped and one logged line gives the count (the builder never skips silently);
* a url list that is missing: that split is not built (one logged line names the file, as
  :mod:`snli` does); :func:`read_split` of it raises :class:`MissingSplitError`. No url list
  at all, or no story folder, is a ``FileNotFoundError`` naming the files to put in place;
* a malformed story (no article text before the first ``@highlight``, no highlight after it,
  not UTF-8): :class:`StoryFormatError` naming the file. An empty highlight line is skipped
  and an article with empty lines is fine. The full release has about 114 stories with no
  article text (abisee/pointer-generator#1), all in the train list: See et al. keep them
  (hence 287,226; their batcher skips them when training), TFDS and Hugging Face drop them
  (287,113 train, the other splits whole). So the full train split builds only with the
  option ``malformed_stories``: ``"error"`` (default), ``"skip"`` (dropped, one logged line
  with the count per split) or ``"keep"`` (stored with the empty article or highlights, as
  See et al.; a model must then cope with an empty article).

The options are the builder configs (:func:`config_name`): ``"strict"``, ``"allow_missing"``,
``"skip_malformed"``, ``"allow_missing_skip_malformed"``, ... each prepared in its own folder.

Source: ``manual_dir``, a folder laid out as the public release::

    <manual_dir>/cnn_stories/<sha1>.story ...        (or cnn/stories/, as cnn_stories.tgz
    <manual_dir>/dailymail_stories/<sha1>.story ...   and dailymail_stories.tgz unpack)
    <manual_dir>/url_lists/all_train.txt  all_val.txt  all_test.txt

or, when ``manual_dir`` is empty, the download of :data:`URLS` (the two story archives of
https://cs.nyu.edu/~kcho/DMQA/ and See et al.'s url lists). Data prepared from
``manual_dir`` follows its files (:mod:`tasks.datasets.prepare`): a file added, changed
or removed later is prepared afresh, in a new folder.

Use (TensorFlow not needed)::

    >>> from tasks.datasets import cnn_dailymail
    >>> builder = cnn_dailymail.prepare("../shared/data/cnn_dailymail_sample", "/tmp/tfds")
    >>> cnn_dailymail.available_splits(builder)      # the sample has no all_test.txt
    ('train', 'validation')
    >>> train = cnn_dailymail.read_split(builder, "train")    # 10 dicts, url-list order
    >>> train[0]["highlights"].split("\n")                     # the summary's sentences
"""

import dataclasses
import hashlib
from typing import Iterator, Mapping, Optional, Sequence

import numpy as np
import tensorflow_datasets as tfds
from absl import logging
from etils import epath

from tasks.datasets import prepare as prepare_lib

SPLITS = ("train", "validation", "test")
URL_LIST_FOLDER = "url_lists"
URL_LISTS = {"train": "all_train.txt", "validation": "all_val.txt", "test": "all_test.txt"}
# Where the .story files are looked for, in this order (the first folder that has a story
# wins): the public layout, then the folders the two archives unpack to.
STORY_FOLDERS = ("cnn_stories", "cnn/stories", "dailymail_stories", "dailymail/stories")
STORY_SUFFIX = ".story"
HIGHLIGHT = "@highlight"
# See et al.'s "acceptable ways to end a sentence" (a line is checked by its last character,
# so "..." is covered by ".").
DM_SINGLE_CLOSE_QUOTE = "\u2019"
DM_DOUBLE_CLOSE_QUOTE = "\u201d"
END_TOKENS = (".", "!", "?", "...", "'", "`", '"', DM_SINGLE_CLOSE_QUOTE,
              DM_DOUBLE_CLOSE_QUOTE, ")")
MISSING_PERIOD = " ."   # what fix_missing_period appends (See et al.)
MALFORMED = ("error", "skip", "keep")
# Stories per split of the full release (url lists; See et al.'s counts).
NUM_STORIES = {"train": 287_226, "validation": 13_368, "test": 11_490}

HOMEPAGE = "https://github.com/abisee/cnn-dailymail"
_URL_LISTS_URL = "https://raw.githubusercontent.com/abisee/cnn-dailymail/master/url_lists/"
URLS = {
    # The DeepMind Q&A stories (https://cs.nyu.edu/~kcho/DMQA/), as TFDS's cnn_dailymail.
    "cnn_stories": "https://drive.google.com/uc?export=download&id=0BwmD_VLjROrfTHk4NFg2SndKcjQ",
    "dailymail_stories":
        "https://drive.google.com/uc?export=download&id=0BwmD_VLjROrfM1BxdkxVaTY2bWs",
    **{split: _URL_LISTS_URL + name for split, name in URL_LISTS.items()},
}
# The folder inside each downloaded story archive that holds the .story files.
ARCHIVE_FOLDERS = {"cnn_stories": "cnn/stories", "dailymail_stories": "dailymail/stories"}

_CITATION = """\
@inproceedings{see2017get,
  title={Get To The Point: Summarization with Pointer-Generator Networks},
  author={See, Abigail and Liu, Peter J. and Manning, Christopher D.},
  booktitle={ACL}, year={2017}}
@inproceedings{hermann2015teaching,
  title={Teaching Machines to Read and Comprehend},
  author={Hermann, Karl Moritz and Kocisky, Tomas and Grefenstette, Edward and Espeholt, Lasse
          and Kay, Will and Suleyman, Mustafa and Blunsom, Phil},
  booktitle={NeurIPS}, year={2015}}
"""


class StoryFormatError(ValueError):
  """A ``.story`` file without article text or highlight; the message names the file
  (``source``) and says what is wrong (``reason``)."""

  def __init__(self, source: str, reason: str, hint: str = ""):
    super().__init__(f"{source}: {reason}{hint}")
    self.source, self.reason, self.hint = source, reason, hint

  def __reduce__(self):
    return type(self), (self.source, self.reason, self.hint)


class MissingSplitError(prepare_lib.MissingSplitError):
  """A split whose url list was missing when the data was prepared; the message names it."""


_check_split = prepare_lib.split_checker(SPLITS, "a CNN/DailyMail split")


# --------------------------------------------------------------------------- parsing


def url_hash(url: str) -> str:
  """The SHA-1 hex digest of a URL (UTF-8, surrounding blanks stripped): the name of its
  story file without ``.story`` (See et al.'s ``hashhex``)."""
  return hashlib.sha1(url.strip().encode("utf-8")).hexdigest()


def read_url_list(path) -> list[str]:
  """The URLs of a url list file, in order (blank lines skipped); not UTF-8:
  :class:`prepare_lib.SourceFileError` naming the file and the byte offset."""
  lines = prepare_lib.read_text_lines(path, fix=f"put back {HOMEPAGE}'s url list")
  return [line.strip() for line in lines if line.strip()]


def fix_missing_period(line: str) -> str:
  """``line + " ."`` unless ``line`` is empty, contains ``@highlight`` or ends with one of
  :data:`END_TOKENS` (See et al.'s rule: image captions in the articles have no period)."""
  if HIGHLIGHT in line or not line or line[-1] in END_TOKENS:
    return line
  return line + MISSING_PERIOD


def parse_story(text: str, source: str = "<story>", *,
                check: bool = True) -> tuple[str, list[str]]:
  """``(article, highlights)`` of a ``.story`` file's text (module docstring).

  Args:
    text: the file's text.
    source: the file's name in messages.
    check: raise for a story without article text or highlight (``False``: return them
      empty, as See et al.'s script does).

  Returns:
    The article (its non-empty lines, each through :func:`fix_missing_period`, joined by one
    space) and the list of highlight sentences (the same fix applied), in order.

  Raises:
    StoryFormatError: ``check`` and no article text before the first ``@highlight`` line, or
      no non-empty line after it; the message names ``source``.
  """
  article, highlights, in_highlights = [], [], False
  for raw in text.splitlines():
    line = fix_missing_period(raw.strip())
    if not line:
      continue
    if line.startswith(HIGHLIGHT):
      in_highlights = True
    elif in_highlights:
      highlights.append(line)
    else:
      article.append(line)
  hint = (f"; a .story file is the article's paragraphs, then {HIGHLIGHT} blocks each "
          "followed by one summary sentence (build with malformed_stories='skip' or 'keep' "
          "to drop or keep such stories).")
  if check and not article:
    raise StoryFormatError(source, f"no article text before the first {HIGHLIGHT} line"
                           if in_highlights else "no text (the file is blank)", hint)
  if check and not highlights:
    raise StoryFormatError(source, f"no {HIGHLIGHT} line" if not in_highlights else
                           f"no highlight text after its {HIGHLIGHT} line(s)", hint)
  return " ".join(article), highlights


def parse_story_file(path, *, check: bool = True) -> tuple[str, list[str]]:
  """:func:`parse_story` of a file (UTF-8)."""
  path = epath.Path(path)
  data = path.read_bytes()
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as err:
    line = data.count(b"\n", 0, err.start) + 1
    raise StoryFormatError(str(path), f"byte {err.start:,} (line {line}) is "
                           f"0x{data[err.start]:02x}, not UTF-8 (binary, damaged or another "
                           "encoding?)", "; put back the original .story file.") from None
  return parse_story(text, str(path), check=check)


def highlight_sentences(example: Mapping) -> list[str]:
  """The summary sentences of an example (its ``highlights`` split at ``"\n"``)."""
  return [s for s in prepare_lib.text(example["highlights"]).split("\n") if s]


# --------------------------------------------------------------------------- source files


def expected_list(root, split: str) -> str:
  """``"<root>/url_lists/all_<train|val|test>.txt"``: a split's url list in messages."""
  _check_split(split)
  return str(epath.Path(root) / URL_LIST_FOLDER / URL_LISTS[split])


def find_url_list(root, split: str) -> Optional[epath.Path]:
  """A split's url list in ``root`` (``url_lists/all_*.txt``), or None."""
  path = epath.Path(expected_list(root, split))
  return path if path.is_file() else None


def find_story_dirs(root) -> list[epath.Path]:
  """The story folders in ``root`` that exist, in :data:`STORY_FOLDERS` order."""
  root = epath.Path(root)
  return [root / f for f in STORY_FOLDERS if (root / f).is_dir()]


@dataclasses.dataclass
class Source:
  """The source files: ``root`` (for messages), the story folders and the url lists (None:
  missing) by split."""
  root: epath.Path
  story_dirs: list
  url_lists: dict


def local_source(root) -> Source:
  """The :class:`Source` of a folder laid out as the public release."""
  root = epath.Path(root)
  return Source(root, find_story_dirs(root), {s: find_url_list(root, s) for s in SPLITS})


def no_files_message(root, *, reason: str) -> str:
  """One line: ``reason``, the files expected in ``root`` and where they come from."""
  reason = " ".join(str(reason).splitlines())
  lists = ", ".join(expected_list(root, s) for s in SPLITS)
  stories = " and/or ".join(str(epath.Path(root) / f) + "/" for f in STORY_FOLDERS[::2])
  return (f"CNN/DailyMail: {reason}; expected {stories} (the <sha1>.story files of "
          "cnn_stories.tgz / dailymail_stories.tgz from https://cs.nyu.edu/~kcho/DMQA/) "
          f"and the url lists {lists} (from {HOMEPAGE}); or leave manual_dir empty to "
          "download them when online.")


def missing_stories_line(split: str, list_path, story_dirs: Sequence, missing: Sequence,
                         total: int, *, skipped: bool) -> str:
  """One line: how many stories of a url list have no file, and the first one's path."""
  first_url, first_hash = missing[0]
  first = epath.Path(story_dirs[0]) / (first_hash + STORY_SUFFIX)
  others = [str(epath.Path(d)) + "/" for d in story_dirs[1:]]
  where = f" (nor in {', '.join(others)})" if others else ""
  if skipped:
    return (f"CNN/DailyMail {split}: skipping {len(missing)} of {total} stories listed in "
            f"{list_path} whose file is missing (allow_missing_stories=True); the first: "
            f"{first}{where}, url {first_url}.")
  return (f"CNN/DailyMail {split}: {len(missing)} of {total} stories listed in {list_path} "
          f"are missing; the first: {first}{where}, url {first_url}. Put the story files "
          "there, or build with allow_missing_stories=True to skip them.")


# --------------------------------------------------------------------------- builder


def config_name(allow_missing_stories: bool = False, malformed_stories: str = "error") -> str:
  """The builder config of the options: ``"strict"``, ``"allow_missing"``,
  ``"skip_malformed"``, ``"allow_missing_keep_malformed"``, ..."""
  if malformed_stories not in MALFORMED:
    raise ValueError(f"malformed_stories={malformed_stories!r}; use one of {list(MALFORMED)}.")
  parts = (["allow_missing"] if allow_missing_stories else []) + (
      [f"{malformed_stories}_malformed"] if malformed_stories != "error" else [])
  return "_".join(parts) or "strict"


class CnnDailymailConfig(tfds.core.BuilderConfig):
  """The options: ``allow_missing_stories`` (skip url-list entries without a story file,
  with one logged line) and ``malformed_stories`` (``"error"``, ``"skip"``, ``"keep"``)."""

  def __init__(self, *, allow_missing_stories: bool = False,
               malformed_stories: str = "error", **kwargs):
    name = config_name(allow_missing_stories, malformed_stories)
    super().__init__(name=name, description=(
        f"allow_missing_stories={allow_missing_stories}, "
        f"malformed_stories={malformed_stories!r}"), **kwargs)
    self.allow_missing_stories = allow_missing_stories
    self.malformed_stories = malformed_stories


class CnnDailymail(prepare_lib.AllowDownload, tfds.core.GeneratorBasedBuilder):
  """CNN/DailyMail from the ``.story`` files and See et al.'s url lists (module docstring)."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Raw .story files split by url hashes; cased; highlights "
                            "newline-separated; See et al.'s fix_missing_period."}
  BUILDER_CONFIGS = [CnnDailymailConfig(allow_missing_stories=a, malformed_stories=m)
                     for a in (False, True) for m in MALFORMED]
  MANUAL_DOWNLOAD_INSTRUCTIONS = (
      "Unpack cnn_stories.tgz and dailymail_stories.tgz (https://cs.nyu.edu/~kcho/DMQA/) and "
      f"put their .story files in <manual_dir>/cnn_stories/ and dailymail_stories/, and "
      f"{HOMEPAGE}'s url_lists/all_{{train,val,test}}.txt in <manual_dir>/url_lists/.")

  def _info(self) -> tfds.core.DatasetInfo:
    return prepare_lib.dataset_info(
        self, {"index": np.int32, "id": tfds.features.Text(),
               "article": tfds.features.Text(), "highlights": tfds.features.Text()},
        supervised_keys=("article", "highlights"), homepage=HOMEPAGE, citation=_CITATION,
        # The source, the missing splits, skipped stories per split; stored in url-list order.
        metadata=True)

  def _source(self, dl_manager) -> Source:
    """``manual_dir`` when it exists and is not empty, else the download of :data:`URLS`."""
    try:
      return local_source(dl_manager.manual_dir)   # AssertionError if missing or empty
    except AssertionError:
      pass
    manual_path = getattr(dl_manager, "_manual_dir", None)
    if not self._allow_download:
      raise FileNotFoundError(no_files_message(
          manual_path, reason=f"manual_dir {manual_path} does not exist or is empty (and "
          "downloading is switched off)"))
    try:
      paths = dl_manager.download_and_extract(URLS)
    except Exception as err:  # offline, proxy, ...: say where the files can go instead
      raise FileNotFoundError(no_files_message(
          manual_path, reason=f"downloading failed ({type(err).__name__}: "
          f"{str(err)[:200]}) and manual_dir {manual_path} does not exist or is "
          "empty")) from err
    dirs = [epath.Path(paths[k]) / ARCHIVE_FOLDERS[k] for k in ARCHIVE_FOLDERS]
    return Source(epath.Path(paths["cnn_stories"]).parent, [d for d in dirs if d.is_dir()],
                  {s: epath.Path(paths[s]) for s in SPLITS})

  def _split_generators(self, dl_manager):
    config = self.builder_config
    source = self._source(dl_manager)
    root = source.root
    url_lists = prepare_lib.split_files(
        self, root, source.url_lists, dataset="CNN/DailyMail", expected=expected_list,
        what="url list", no_files=no_files_message(
            root, reason=f"no url list in {epath.Path(root) / URL_LIST_FOLDER}"))
    if not source.story_dirs:
      raise FileNotFoundError(no_files_message(root, reason=f"no story folder in {root}"))
    # File name -> folder, the first folder of STORY_FOLDERS winning (one listing each).
    where = {}
    for folder in reversed(source.story_dirs):
      where.update((p.name, folder) for p in folder.iterdir())
    plans, skipped_missing = {}, {}
    for split, list_path in url_lists.items():
      urls = read_url_list(list_path)
      found, absent = [], []
      for index, url in enumerate(urls):
        digest = url_hash(url)
        folder = where.get(digest + STORY_SUFFIX)
        if folder is None:
          absent.append((url, digest))
        else:
          found.append((index, digest, folder / (digest + STORY_SUFFIX)))
      if absent:
        line = missing_stories_line(split, list_path, source.story_dirs, absent, len(urls),
                                    skipped=config.allow_missing_stories)
        if not config.allow_missing_stories:
          raise FileNotFoundError(line)
        logging.warning(line)
      plans[split] = found
      skipped_missing[split] = len(absent)
    metadata = self.info.metadata
    metadata["story_dirs"] = [str(d) for d in source.story_dirs]
    metadata["missing_stories"] = skipped_missing
    metadata["malformed_stories"] = {s: 0 for s in plans}
    return {s: self._generate_examples(s, plan) for s, plan in plans.items()}

  def _generate_examples(self, split: str, plan: Sequence[tuple]
                         ) -> Iterator[tuple[int, dict]]:
    mode = self.builder_config.malformed_stories
    malformed, first = 0, None
    for index, digest, path in plan:
      try:   # "keep": only a file that is not UTF-8 raises
        article, highlights = parse_story_file(path, check=mode != "keep")
      except StoryFormatError as err:
        if mode != "skip":
          raise
        malformed, first = malformed + 1, first or f"{err.source}: {err.reason}"
        continue
      if not (article and highlights):
        malformed += 1
      yield index, {"index": index, "id": digest, "article": article,
                    "highlights": "\n".join(highlights)}
    self.info.metadata["malformed_stories"][split] = malformed
    if malformed and mode == "skip":
      logging.warning(f"CNN/DailyMail {split}: skipped {malformed} malformed stories "
                      f"(malformed_stories='skip'); the first: {first}.")
    elif malformed:
      logging.warning(f"CNN/DailyMail {split}: kept {malformed} stories with no article "
                      "text or no highlight (malformed_stories='keep').")


# --------------------------------------------------------------------------- reading


def prepare(manual_dir: str = "", data_dir: str = "", *, allow_missing_stories: bool = False,
            malformed_stories: str = "error") -> CnnDailymail:
  """The prepared builder (prepared in ``data_dir`` on first use; safe for two runs that
  share ``data_dir``). Splits whose url list is missing are left out, with one logged line.

  Args:
    manual_dir: the folder laid out as the public release (module docstring); ``""``
      downloads :data:`URLS`.
    data_dir: where TFDS keeps the prepared data (``""``: ``~/tensorflow_datasets``).
    allow_missing_stories: skip the url-list entries whose story file is missing (one
      logged line with the count) instead of failing.
    malformed_stories: a story without article text or highlight: ``"error"``, ``"skip"``
      or ``"keep"`` (module docstring).

  Raises:
    FileNotFoundError: no url list or story folder, or (``allow_missing_stories=False``)
      stories missing: one line naming the files.
    StoryFormatError: ``malformed_stories="error"`` and a malformed story (names the file).
  """
  name = config_name(allow_missing_stories, malformed_stories)
  manual_dir = str(epath.Path(manual_dir).expanduser()) if manual_dir else ""
  record = None
  if manual_dir:
    record = prepare_lib.source_record(
        manual_dir, [f"{URL_LIST_FOLDER}/{n}" for n in URL_LISTS.values()])
    record.update({f"{f}/": prepare_lib.folder_digest(epath.Path(manual_dir) / f,
                                                      STORY_SUFFIX) for f in STORY_FOLDERS})
  builder = prepare_lib.prepare_sourced(CnnDailymail, CnnDailymail.builder_configs[name],
                                        manual_dir, data_dir, record=record,
                                        dataset="CNN/DailyMail")
  return builder


def _plain(row: Mapping) -> dict:
  text = prepare_lib.text
  return {"index": int(row["index"]), "id": text(row["id"]),
          "article": text(row["article"]), "highlights": text(row["highlights"])}


# The examples of a split as plain dicts (module docstring), in url-list order:
# read_split(builder, split) or read_split(data_source); a split that was not built is a
# MissingSplitError naming its url list.
_READER = prepare_lib.SplitReader(SPLITS, _plain, _check_split, dataset="CNN/DailyMail",
                                  expected=expected_list, error=MissingSplitError,
                                  what="url list")
read_split = _READER.read
available_splits = _READER.available
missing_split_message = _READER.missing_message


def load_splits(manual_dir: str = "", data_dir: str = "",
                splits: Optional[Sequence[str]] = None, **options) -> dict[str, list[dict]]:
  """``{split: read_split(...)}`` of :func:`prepare`'s builder (``options``: its keyword
  arguments): the splits it holds (``splits=None``) or ``splits`` (every one of them must
  have been built, else :class:`MissingSplitError`)."""
  return _READER.read_all(prepare(manual_dir, data_dir, **options), splits)

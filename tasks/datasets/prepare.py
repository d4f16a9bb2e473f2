"""Preparing a TFDS builder from ``manual_dir`` or a download, safe for concurrent runs,
and reading a prepared split back as plain dicts: the parts the builders share.

Prepared data follows its source. A builder prepared from ``manual_dir`` is prepared under
a config named after the content of its source files (:func:`source_record`: size and
SHA-256 of every file it reads, and which ones are absent), e.g. ``ptb/word-3f9a1c2b7d10/``:
a changed, truncated, fixed or added file gives another name, so the data is prepared
afresh in a new folder (one logged line names the files that changed), while the folder
of the old files stays untouched (a run may still be reading it; delete it to free the
space). The record is kept next to the data, in ``sources.json``. Data prepared from a
download (``manual_dir`` empty) keeps the plain config name: the archive does not change.
Two runs on one ``data_dir`` stay safe (:func:`prepare`): the same files give the same
folder, prepared once; other files another folder. Limits: hashing reads every source file
once per :func:`prepare` (PTB word: 6 MB, well under a second; CNN/DailyMail's story folders
are fingerprinted by their listing of names and sizes, :func:`folder_digest`); a file edited
while it is being prepared leaves data under the tag of its earlier content (the next run
prepares the new content again); old folders are never deleted automatically.

Source files are read as UTF-8 (:func:`read_text_lines`); a file that is not (binary,
another encoding, a wrong gzip) is a :class:`SourceFileError` naming the file, the byte
offset and the fix. :func:`warn_counts` logs one line per split whose size differs from the
published one.

What the builders share otherwise: their ``_info`` (:func:`dataset_info`), examples keyed by
their place in the file (:class:`ExamplesByIndex`), a builder that needs every file
(:func:`require_files`) or builds the splits whose files are there (:func:`split_files`,
:class:`MissingSplitError`), JSON-lines parsing (:func:`json_records`), and reading a
prepared split back as plain dicts (:class:`SplitReader`: each module's ``read_split``,
``available_splits``, ``missing_split_message``).
"""

import contextlib
import copy
import dataclasses
import gzip
import hashlib
import json
import logging as std_logging
import os
import re
import time
import uuid
import zlib
from typing import Any, Callable, Iterable, Iterator, Mapping, NoReturn, Optional, Sequence, Union

import tensorflow_datasets as tfds
from absl import logging
from etils import epath

SOURCES_FILE = "sources.json"   # the record of the source files, next to the prepared data
TAG_LENGTH = 12                 # hex digits of the source fingerprint in the config name
_CHUNK = 1 << 20


class MissingSourceError(FileNotFoundError, ValueError):
  """Source files are missing (one line listing what to create): a ``FileNotFoundError``
  for callers that fall back to other data (bAbI's en-10k -> en 1k) and a ``ValueError``,
  which the launchers print as a one-line error."""


class MissingSplitError(FileNotFoundError):
  """A split whose source file was missing when the data was prepared (each builder module
  has its own subclass); the message names the file."""


class SourceFileError(ValueError):
  """A source file that cannot be read (not UTF-8 text, a broken gzip file); the message
  names the file, the byte offset and the fix."""


# --------------------------------------------------------------------------- source record


def file_digest(path) -> dict:
  """``{"bytes": size, "sha256": hex digest}`` of a file (read in 1 MiB chunks)."""
  h, size = hashlib.sha256(), 0
  with epath.Path(path).open("rb") as f:
    while chunk := f.read(_CHUNK):
      h.update(chunk)
      size += len(chunk)
  return {"bytes": size, "sha256": h.hexdigest()}


def source_record(root, names: Iterable[str]) -> dict:
  """What data prepared from ``root`` is prepared from: ``{name: file_digest or None}``
  for every file ``name`` (relative to ``root``) a builder may read, ``None`` for one that
  is absent (so that adding it later changes the record too). Content only: the same
  files in another folder give the same record."""
  root = epath.Path(root)
  return {n: file_digest(root / n) if (root / n).is_file() else None
          for n in sorted(set(names))}


def folder_digest(path, suffix: str = "") -> Optional[dict]:
  """``{"files": n, "bytes": total size, "sha256": digest of the sorted (name, size)
  listing}`` of the files of a folder whose names end in ``suffix`` (``None`` if the folder
  is absent). A cheap stand-in for :func:`file_digest` of each file, for folders of
  hundreds of thousands of files: a file added, removed, renamed or resized changes it, one
  edited in place to the same size does not."""
  path = epath.Path(path)
  if not path.is_dir():
    return None
  listing = sorted((e.name, e.stat().st_size) for e in os.scandir(os.fspath(path))
                   if e.is_file() and e.name.endswith(suffix))
  h = hashlib.sha256("\n".join(f"{n}\t{b}" for n, b in listing).encode())
  return {"files": len(listing), "bytes": sum(b for _, b in listing), "sha256": h.hexdigest()}


def source_tag(record: Mapping) -> str:
  """The first :data:`TAG_LENGTH` hex digits of the SHA-256 of ``record`` (canonical
  JSON): the suffix of the config a builder prepares its data under."""
  text = json.dumps(record, sort_keys=True, separators=(",", ":"))
  return hashlib.sha256(text.encode()).hexdigest()[:TAG_LENGTH]


def sourced_config(config: tfds.core.BuilderConfig, record: Optional[Mapping]
                   ) -> tfds.core.BuilderConfig:
  """``config`` renamed ``<name>-<source_tag(record)>`` (a copy; ``record=None``: ``config``
  itself, for data prepared from a download)."""
  if record is None:
    return config
  out = copy.copy(config)
  out.name = f"{config.name}-{source_tag(record)}"
  return out


def base_config_name(name: str) -> str:
  """The config name without its source tag (``"word-3f9a1c2b7d10"`` -> ``"word"``)."""
  head, sep, tail = name.rpartition("-")
  if sep and len(tail) == TAG_LENGTH and all(c in "0123456789abcdef" for c in tail):
    return head
  return name


def _changes(old: Mapping, new: Mapping) -> list[str]:
  """``["ptb.train.txt: 230 -> 5,101,618 bytes", "x.txt: added", ...]``."""
  out = []
  for name in sorted(set(old) | set(new)):
    a, b = old.get(name), new.get(name)
    if a == b:
      continue
    if a is None:
      out.append(f"{name}: added")
    elif b is None:
      out.append(f"{name}: removed")
    elif a["bytes"] != b["bytes"]:
      out.append(f"{name}: {a['bytes']:,} -> {b['bytes']:,} bytes")
    else:
      out.append(f"{name}: same size, other content (sha256 {a['sha256'][:12]} -> "
                 f"{b['sha256'][:12]})")
  return out


def previous_preparation(builder: tfds.core.DatasetBuilder
                         ) -> Optional[tuple[epath.Path, dict]]:
  """The most recent other folder prepared for ``builder``'s config from other source files,
  and its record (``None`` if there is none)."""
  base = base_config_name(builder.builder_config.name)
  here = epath.Path(builder.data_path)
  version = here.name
  found = []
  for path in here.parent.parent.glob(f"{base}-*/{version}/{SOURCES_FILE}"):
    if path.parent == here or base_config_name(path.parent.parent.name) != base:
      continue
    try:
      found.append((os.stat(os.fspath(path)).st_mtime, path.parent, json.loads(path.read_text())))
    except (OSError, ValueError):
      continue
  if not found:
    return None
  _, folder, record = max(found, key=lambda t: t[0])
  return folder, record


def _write_record(builder: tfds.core.DatasetBuilder, record: Mapping) -> None:
  """``sources.json`` in the prepared folder (written once, atomically: a unique temporary
  file renamed, so two runs never see half a file)."""
  path = epath.Path(builder.data_path) / SOURCES_FILE
  if path.exists():
    return
  tmp = path.parent / f".{SOURCES_FILE}.{uuid.uuid4().hex}"
  tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
  os.replace(os.fspath(tmp), os.fspath(path))


class _NoCustomConfigLine(std_logging.Filter):
  """Drops TFDS's "Using custom data configuration" line (a sourced config is one)."""

  def filter(self, record):
    return not str(record.msg).startswith("Using custom data configuration")


@contextlib.contextmanager
def _quiet_custom_config():
  logger, line = std_logging.getLogger("absl"), _NoCustomConfigLine()
  logger.addFilter(line)
  try:
    yield
  finally:
    logger.removeFilter(line)


class AllowDownload:
  """Mixin (before ``tfds.core.GeneratorBasedBuilder``) adding the constructor argument
  ``allow_download``: ``False`` reads ``manual_dir`` only and never goes online (see
  :func:`source_root`)."""

  def __init__(self, *, allow_download: bool = True, **kwargs):
    self._allow_download = allow_download
    super().__init__(**kwargs)


def unpack_instructions(url: str, folder: str, holds: str) -> str:
  """``MANUAL_DOWNLOAD_INSTRUCTIONS`` of a builder whose files are the folder ``folder`` of
  the archive ``url`` (``holds``: the files)."""
  return f"Unpack {url} and pass its folder {folder}/ as manual_dir (it holds {holds})."


def single_config(description: str) -> list[tfds.core.BuilderConfig]:
  """``BUILDER_CONFIGS`` of a builder without options: one config, ``"default"``, so that data
  prepared from ``manual_dir`` can be named after its files (:func:`sourced_config`; a
  download is prepared under ``"default"``)."""
  return [tfds.core.BuilderConfig(name="default", description=description)]


def dataset_info(builder: tfds.core.DatasetBuilder, features: Mapping[str, Any], *,
                 metadata: bool = False, file_order: bool = True, **kwargs
                 ) -> tfds.core.DatasetInfo:
  """``builder``'s ``DatasetInfo``: ``features`` (of a ``FeaturesDict``) and ``kwargs``
  (``homepage``, ``citation``, ``supervised_keys``).

  Args:
    metadata: give the builder an empty ``MetadataDict`` that it fills while preparing
      (the source folder, the missing splits, ...), written with the data.
    file_order: store the examples in the order of their keys (``disable_shuffling``):
      the source file's order (``read_split`` sorts anyway).
  """
  if metadata:
    kwargs["metadata"] = tfds.core.MetadataDict()
  return builder.dataset_info_from_configs(
      features=tfds.features.FeaturesDict(dict(features)), disable_shuffling=file_order,
      **kwargs)


class ExamplesByIndex:
  """Mixin (before ``tfds.core.GeneratorBasedBuilder``): ``_generate_examples(examples)``
  yields every example dict keyed by its ``"index"`` (its place in the source file)."""

  def _generate_examples(self, examples: Sequence[dict]) -> Iterator[tuple[int, dict]]:
    for ex in examples:
      yield ex["index"], ex


def has_sources(record: Mapping) -> bool:
  """Whether a :func:`source_record` found any of its files (else ``manual_dir`` holds
  none of them: a wrong folder, not changed files, so there is nothing to compare)."""
  return any(v is not None for v in record.values())


def absent_folders(path, levels: int) -> list[str]:
  """``path`` and its parents, ``levels`` folders in all, that do not exist yet, deepest
  first (what a failed preparation may leave behind, empty)."""
  out, path = [], epath.Path(path)
  for _ in range(levels):
    if not path.exists():
      out.append(os.fspath(path))
    path = path.parent
  return out


def remove_empty_folders(folders: Sequence[str]) -> list[str]:
  """Removes each folder of ``folders`` (deepest first) that holds nothing but empty
  folders; one with a file anywhere in it is kept (another run may be preparing there).
  Returns the folders removed."""
  removed = []
  for folder in folders:
    if not os.path.isdir(folder) or any(files for _, _, files in os.walk(folder)):
      continue
    try:
      for root, dirs, _ in os.walk(folder, topdown=False):
        for name in dirs:
          os.rmdir(os.path.join(root, name))
      os.rmdir(folder)
      removed.append(folder)
    except OSError:   # a file appeared meanwhile (a concurrent run): keep the rest
      continue
  return removed


def _empty_split(err: BaseException) -> Optional[str]:
  """The split named by TFDS's ``AssertionError`` for a split that yielded no examples
  (``Failed to finalize writing of split "dev": No examples were yielded.``), else None."""
  match = re.search(r'split "([^"]+)": No examples were yielded', str(err))
  return match.group(1) if isinstance(err, AssertionError) and match else None


def prepare(make_builder: Callable[[], tfds.core.DatasetBuilder], manual_dir: str = "",
            *, wait_seconds: float = 600.0, record: Optional[Mapping] = None,
            dataset: str = "") -> tfds.core.DatasetBuilder:
  """``make_builder()`` prepared (``download_and_prepare``) and returned.

  Two runs that share a ``data_dir`` may prepare the same data at once; TFDS then fails in
  the one that finishes second (``FileExistsError`` when it renames its temporary folder).
  That run waits until the other's data is complete (at most ``wait_seconds``) and uses it.

  With ``record`` (:func:`source_record`; the builder's config is then
  :func:`sourced_config` of it), data about to be prepared while data of the same config
  prepared from other source files exists logs one line naming the files that changed, and
  the record is written to ``sources.json`` in the prepared folder. Nothing is deleted.

  Args:
    make_builder: builds the builder (with its ``config``, ``data_dir``, ``file_format``).
    manual_dir: the folder of the source files (``""``: download).
    record: the source record the builder's config name was made from.
    dataset: the data set as messages begin (``"PTB word"``).
  """
  config = tfds.download.DownloadConfig(manual_dir=manual_dir or None)
  with _quiet_custom_config():
    builder = make_builder()
  if (record is not None and has_sources(record)
      and not (epath.Path(builder.data_path) / "dataset_info.json").exists()):
    previous = previous_preparation(builder)
    if previous is not None and previous[1] != record:
      folder, old = previous
      logging.warning(
          f"{dataset or builder.name}: the source files in {manual_dir} changed since the "
          f"data in {folder} was prepared ({'; '.join(_changes(old, record))}); preparing "
          f"it again in {builder.data_dir} (the old folder is kept: delete it to free "
          "the space).")
  data_path = getattr(builder, "data_path", None)
  new_folders = absent_folders(data_path, levels=2) if data_path is not None else []
  try:
    builder.download_and_prepare(download_config=config)
  except FileExistsError:
    # Poll the folder on disk, then build once: a TFDS builder of unprepared data leaves
    # an empty temporary folder behind (DatasetInfo.initialize_from_bucket), one per poll.
    deadline = time.monotonic() + wait_seconds
    while not builder.is_prepared():
      if time.monotonic() >= deadline:
        raise
      time.sleep(1.0)
    with _quiet_custom_config():
      builder = make_builder()   # its DatasetInfo read from the prepared folder
  except BaseException as err:   # e.g. missing source files: no empty folder left behind
    remove_empty_folders(new_folders)
    empty = _empty_split(err)
    if empty is not None:
      source = f"its source file in {manual_dir}" if manual_dir else "its source file"
      raise SourceFileError(
          f"{dataset or builder.name}: the {empty} split has no examples: {source} is "
          "empty or every entry in it was dropped (e.g. pairs labelled '-'); put back the "
          "complete file.") from None
    raise
  if record is not None:
    _write_record(builder, record)
  return builder


def prepare_sourced(builder_cls: type, config: tfds.core.BuilderConfig, manual_dir: str,
                    data_dir: str, *, record: Optional[Mapping], dataset: str
                    ) -> tfds.core.DatasetBuilder:
  """:func:`prepare` of ``builder_cls`` under ``sourced_config(config, record)``: array_record
  files in ``data_dir`` (``""``: TFDS's default folder), downloading only without
  ``manual_dir`` (for an :class:`AllowDownload` builder). What every builder's ``prepare``
  shares."""
  config = sourced_config(config, record)
  data_dir = str(epath.Path(data_dir).expanduser()) if data_dir else None
  options = {"allow_download": not manual_dir} if issubclass(builder_cls, AllowDownload) else {}
  return prepare(lambda: builder_cls(config=config, data_dir=data_dir,
                                     file_format="array_record", **options),
                 manual_dir, record=record, dataset=dataset)


def create_files_message(dataset: str, wanted: Iterable[Any], *, reason: str, source: str,
                         layout: str = "flat", download: str = "the archive") -> str:
  """One line for a missing source file: ``"<dataset>: <reason>; create <wanted>: <source>,
  <layout> (or leave manual_dir empty to download <download> when online)."``"""
  return (f"{dataset}: {reason}; create {', '.join(str(w) for w in wanted)}: {source}, "
          f"{layout} (or leave manual_dir empty to download {download} when online).")


def source_root(dl_manager, *, allow_download: bool, url: str, folder: str,
                missing: Callable[..., str]):
  """The folder of a builder's source files: ``manual_dir`` if it exists and is not empty,
  else ``url`` downloaded and extracted (its sub-folder ``folder``).

  Args:
    dl_manager: the builder's ``tfds.download.DownloadManager``.
    allow_download: ``False``: never go online (a missing ``manual_dir`` is an error).
    url: the public archive.
    folder: the folder inside the archive that holds the files.
    missing: ``(manual_dir, reason=...) -> message`` for the ``FileNotFoundError`` (it
      should list the files to put in ``manual_dir``).
  """
  try:
    return dl_manager.manual_dir  # AssertionError if missing or empty
  except AssertionError:
    pass
  manual_path = getattr(dl_manager, "_manual_dir", None)
  if not allow_download:
    raise FileNotFoundError(missing(manual_path, reason=f"manual_dir {manual_path} does not "
                                    "exist or is empty (and downloading is switched off)"))
  try:
    return epath.Path(dl_manager.download_and_extract(url)) / folder
  except Exception as err:  # offline, proxy, ...: say where the files can go instead
    raise FileNotFoundError(missing(
        manual_path, reason=f"downloading failed ({type(err).__name__}: {str(err)[:200]}) "
        f"and manual_dir {manual_path} does not exist or is empty")) from err


def split_checker(splits: Sequence[str], what: str) -> Callable[[str], None]:
  """A function that raises ``ValueError("split='dev' is not <what>; use one of [...]")``
  for a name that is not one of ``splits``."""

  def check_split(split: str) -> None:
    if split not in splits:
      raise ValueError(f"split={split!r} is not {what}; use one of {list(splits)}.")

  return check_split


def require_files(root, names: Mapping[str, str], missing: Callable[..., str]) -> dict:
  """``{split: root / name}`` for a builder that needs every file of ``names``: one that is
  absent is a ``FileNotFoundError(missing(root, reason=...))``, the reason listing them."""
  paths = {s: epath.Path(root) / n for s, n in names.items()}
  absent = [str(p) for p in paths.values() if not p.exists()]
  if absent:
    raise FileNotFoundError(missing(root, reason=f"missing file(s) {absent}"))
  return paths


def split_files(builder: tfds.core.DatasetBuilder, root, paths: Mapping[str, Any], *,
                dataset: str, expected: Callable[[Any, str], str], no_files: str,
                what: str = "file(s)", sep: str = ", ") -> dict:
  """The files of the splits that are there (``paths``: ``{split: its file}``; ``None`` or
  a path that is not a file: missing), for a builder that builds only those.

  No file at all is a ``FileNotFoundError(no_files)``; some missing, one logged line names
  the splits built and the ``expected(root, split)`` files of the others (``"SNLI: building
  validation, test only; no train split, <what> missing: <file>."``). Writes ``source_dir``
  (``root``) and ``missing_splits`` to ``builder.info.metadata`` (for
  :func:`missing_split_message`).
  """
  missing = [s for s, p in paths.items() if p is None or not epath.Path(p).is_file()]
  if len(missing) == len(paths):
    raise FileNotFoundError(no_files)
  if missing:
    logging.warning(
        f"{dataset}: building {', '.join(s for s in paths if s not in missing)} only; no "
        f"{', '.join(missing)} split, {what} missing: "
        f"{sep.join(expected(root, s) for s in missing)}.")
  builder.info.metadata["source_dir"] = str(root)
  builder.info.metadata["missing_splits"] = missing
  return {s: epath.Path(p) for s, p in paths.items() if s not in missing}


# --------------------------------------------------------------------------- source files


def undecodable_message(source: str, data: bytes, err: UnicodeDecodeError, *, offset: int = 0,
                        line: Optional[int] = None, fix: str = "") -> str:
  """One line: ``source`` is not UTF-8 at byte ``offset + err.start`` (and ``line``)."""
  where = offset + err.start
  if line is None:
    line = data.count(b"\n", 0, err.start) + 1
  return (f"{source}: byte {where:,} (line {line}) is 0x{data[err.start]:02x}, which is not "
          f"UTF-8 text: the file is binary, damaged or in another encoding; "
          f"{fix or 'replace it with the original file'}.")


def decode_line(raw: bytes, source: str, *, offset: int, line: int, fix: str = "") -> str:
  """A line of a file as ``str``; :class:`SourceFileError` naming the file, the byte
  offset (``offset``: the line's first byte in the file) and the line if it is not UTF-8."""
  try:
    return raw.decode("utf-8")
  except UnicodeDecodeError as err:
    raise SourceFileError(undecodable_message(source, raw, err, offset=offset, line=line,
                                              fix=fix)) from None


def split_lines(text: str) -> list[str]:
  """``text``'s lines, each with its ``"\n"`` (the last one without it if the text does
  not end in one). Only ``"\n"`` ends a line, as when iterating over a file."""
  parts = text.split("\n")
  return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def read_text_lines(path, *, fix: str = "") -> list[str]:
  """The lines of a UTF-8 text file (:func:`split_lines`).

  Raises:
    SourceFileError: the file is not UTF-8 text; names the file, the byte offset, the
      line and ``fix`` (what to do).
  """
  path = epath.Path(path)
  data = path.read_bytes()
  try:
    return split_lines(data.decode("utf-8"))
  except UnicodeDecodeError as err:
    raise SourceFileError(undecodable_message(str(path), data, err, fix=fix)) from None


def binary_lines(path) -> Iterable[tuple[int, bytes]]:
  """``(byte offset, line)`` of every line of a file, read as bytes (streamed); a ``.gz``
  file is decompressed (offsets in the decompressed text), and a broken one is a
  :class:`SourceFileError` naming it."""
  path = epath.Path(path)
  offset = 0
  with path.open("rb") as raw:
    f = gzip.open(raw, "rb") if str(path).endswith(".gz") else raw
    try:
      for line in f:
        yield offset, line
        offset += len(line)
    except (OSError, EOFError, zlib.error) as err:
      raise SourceFileError(
          f"{path}: not a complete gzip file ({type(err).__name__}: {err}) after "
          f"{offset:,} bytes of text; give the file as downloaded, or the unpacked file "
          "without .gz.") from None


def json_records(lines: Iterable[Union[str, bytes]], fail: Callable[[int, str], NoReturn], *,
                 fix: str = "save the file as UTF-8") -> Iterator[tuple[int, int, dict]]:
  """``(line, index, record)`` of every non-blank line of a JSON-lines file: its 1-based
  line, its 0-based index among the non-blank lines and the JSON object it holds.

  Args:
    lines: the file's lines, ``str`` or UTF-8 ``bytes`` (decoded here, counting the byte
      offsets); a BOM at the start of the first line is dropped.
    fail: ``(line, message)`` -> raises the builder's format error (a line that is not
      UTF-8, not JSON or not a JSON object).
    fix: what to do about a line that is not UTF-8 (the end of its message).
  """
  index, offset = -1, 0
  for lineno, line in enumerate(lines, start=1):
    if isinstance(line, bytes):
      start, offset = offset, offset + len(line)
      try:
        line = line.decode("utf-8")
      except UnicodeDecodeError as err:
        fail(lineno, f"not UTF-8: byte {start + err.start:,} of the file is "
             f"0x{line[err.start]:02x} (binary, damaged or another encoding?); {fix}")
    if lineno == 1:
      line = line.lstrip("\ufeff")
    if not line.strip():
      continue
    index += 1
    try:
      record = json.loads(line)
    except ValueError as err:
      fail(lineno, f"not JSON ({err})")
    if not isinstance(record, dict):
      fail(lineno, f"a JSON {type(record).__name__}, not an object")
    yield lineno, index, record


def warn_counts(dataset: str, got: Mapping[str, int], want: Mapping[str, int], *,
                what: str, files: Mapping[str, str]) -> list[str]:
  """Logs one line per split whose count differs from the published one, naming the
  file; returns the lines.

  Args:
    dataset: as messages begin (``"PTB word"``).
    got: ``{split: count}`` found (splits that are not in ``want`` are not checked).
    want: ``{split: published count}``.
    what: the unit (``"lines"``, ``"questions"``).
    files: ``{split: the file it was read from}``.
  """
  lines = []
  for split, n in got.items():
    if split in want and n != want[split]:
      lines.append(f"{dataset} {split}: {files.get(split, '?')} gives {n:,} {what} where "
                   f"the published data has {want[split]:,}; check the file (truncated, or "
                   "another version?): results on it are not comparable with published "
                   "ones.")
      logging.warning(lines[-1])
  return lines


# --------------------------------------------------------------------------- reading


def text(b) -> str:
  """``b`` as ``str``: a data source gives a ``Text`` feature as UTF-8 ``bytes``."""
  return b.decode("utf-8") if isinstance(b, bytes) else str(b)


def split_source(source, split: Optional[str], *, splits: Sequence[str],
                 check_split: Optional[Callable[[str], None]] = None,
                 missing: Optional[Callable[[Any, str], Exception]] = None):
  """The data source a builder's ``read_split(source, split)`` reads.

  Args:
    source: a prepared builder (then ``split`` is needed) or a data source (one split
      already, so ``split`` must be ``None``); a data source is returned as it is.
    split: the split to read from a builder.
    splits: the builder's splits, named when ``split`` is missing.
    check_split: raises for a name that is not a split (the builder's own message).
    missing: ``(builder, split) -> `` the exception for a split that was not built (its
      file was missing when the data was prepared); ``None``: TFDS's own error.
  """
  if isinstance(source, tfds.core.DatasetBuilder):
    if split is None:
      raise ValueError(f"read_split(builder) needs split=, one of {list(splits)}.")
    if check_split is not None:
      check_split(split)
    if missing is not None and split not in source.info.splits:
      raise missing(source, split)
    return source.as_data_source(split=split)
  if split is not None:
    raise ValueError(f"split={split!r} is only for a builder; a data source is one split "
                     "already (read_split(builder, split) or read_split(data_source)).")
  return source


def available_splits(builder: tfds.core.DatasetBuilder, splits: Sequence[str]) -> tuple:
  """The splits a prepared builder holds, in the order of ``splits``."""
  return tuple(s for s in splits if s in builder.info.splits)


def missing_split_message(builder: tfds.core.DatasetBuilder, split: str, *, dataset: str,
                          splits: Sequence[str], expected: Callable[[Any, str], str],
                          what: str = "file") -> str:
  """One line: ``dataset``'s ``split`` was not built, the ``what`` it needs
  (``expected(source_dir, split)``), how to rebuild, and the splits that were built."""
  root = (builder.info.metadata or {}).get("source_dir", "<manual_dir>")
  return (f"{dataset} split {split!r} was not built: its {what} {expected(root, split)} was "
          f"missing when the data was prepared in {builder.data_dir}; put the file there "
          "and run again (data prepared from manual_dir is prepared again when its files "
          f"change; built: {list(available_splits(builder, splits))}).")


def split_sizes(builder: tfds.core.DatasetBuilder, splits: Sequence[str]) -> dict[str, int]:
  """``{split: number of examples}`` of the splits a prepared builder holds, in the order of
  ``splits`` (for :func:`warn_counts`)."""
  return {s: builder.info.splits[s].num_examples for s in available_splits(builder, splits)}


def all_rows(source: Sequence[Mapping]) -> list:
  """Every row of a data source, in its order: one ``__getitems__`` call when the source
  has it (far faster than a read per row), else one ``source[i]`` per row."""
  n = len(source)
  if hasattr(source, "__getitems__"):
    return source.__getitems__(list(range(n)))
  return [source[i] for i in range(n)]


def read_rows(source, split: Optional[str], *, splits: Sequence[str],
              plain: Callable[[Mapping], dict], order: str = "index",
              check_split: Optional[Callable[[str], None]] = None,
              missing: Optional[Callable[[Any, str], Exception]] = None) -> list[dict]:
  """The rows of a split as ``plain(row)`` dicts, sorted by their field ``order`` (a
  stable sort: the file order the builders store there, whatever order TFDS reads in).

  ``source``, ``split``, ``splits``, ``check_split`` and ``missing``: see
  :func:`split_source`.
  """
  rows = all_rows(split_source(source, split, splits=splits, check_split=check_split,
                               missing=missing))
  return sorted((plain(r) for r in rows), key=lambda r: r[order])


@dataclasses.dataclass(frozen=True)
class SplitReader:
  """How a module reads its builder's prepared splits back as plain dicts: its
  ``read_split`` (:meth:`read`), ``available_splits``, ``missing_split_message`` and
  ``load_splits`` (:meth:`read_all`).

  Attributes:
    splits: the builder's splits, in order.
    plain: a decoded TFDS row -> the module's plain dict.
    check_split: raises for a name that is not a split (the module's message).
    dataset: the data set as messages begin, or ``builder -> `` that (CLUE: the task);
      ``None``: every split is always built (a missing one is TFDS's own error).
    expected: ``(source folder, split) -> `` the file a split is built from, in messages.
    error: the exception class of a split that was not built (its file was missing).
    what: what ``expected`` names (``"file"``, ``"url list"``).
  """
  splits: Sequence[str]
  plain: Callable[[Mapping], dict]
  check_split: Callable[[str], None]
  dataset: Union[None, str, Callable[[Any], str]] = None
  expected: Optional[Callable[[Any, str], str]] = None
  error: type = MissingSplitError
  what: str = "file"

  def available(self, builder: tfds.core.DatasetBuilder) -> tuple:
    """The splits a prepared builder holds, in the order of :attr:`splits`."""
    return available_splits(builder, self.splits)

  def missing_message(self, builder: tfds.core.DatasetBuilder, split: str) -> str:
    """One line: ``split`` was not built, the file it needs, how to rebuild."""
    dataset = self.dataset(builder) if callable(self.dataset) else self.dataset
    return missing_split_message(builder, split, dataset=dataset, splits=self.splits,
                                 expected=self.expected, what=self.what)

  def read(self, source, split: Optional[str] = None) -> list[dict]:
    """The examples of a split as plain dicts, in file order (:func:`read_rows`).

    Args:
      source: a prepared builder (then give ``split``) or a data source
        (``builder.as_data_source(split)``).
      split: one of :attr:`splits` when ``source`` is a builder.

    Raises:
      error: the split's file was missing when the data was prepared.
    """
    missing = (None if self.dataset is None
               else lambda builder, s: self.error(self.missing_message(builder, s)))
    return read_rows(source, split, splits=self.splits, plain=self.plain,
                     check_split=self.check_split, missing=missing)

  def read_all(self, builder: tfds.core.DatasetBuilder,
               splits: Optional[Sequence[str]] = None) -> dict[str, list[dict]]:
    """``{split: read(builder, split)}`` for ``splits`` (``None``: those the builder holds;
    each one asked for must have been built, else :attr:`error`)."""
    wanted = self.available(builder) if splits is None else splits
    return {s: self.read(builder, s) for s in wanted}

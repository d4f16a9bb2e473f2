"""Preparing a TFDS builder from ``manual_dir`` or a download, safe for concurrent runs,
and reading a prepared split back as plain dicts: the parts the builders share."""

import time
from typing import Any, Callable, Mapping, Optional, Sequence

import tensorflow_datasets as tfds
from absl import logging
from etils import epath


class AllowDownload:
  """Mixin (before ``tfds.core.GeneratorBasedBuilder``) adding the constructor argument
  ``allow_download``: ``False`` reads ``manual_dir`` only and never goes online (see
  :func:`source_root`)."""

  def __init__(self, *, allow_download: bool = True, **kwargs):
    self._allow_download = allow_download
    super().__init__(**kwargs)


def prepare(make_builder: Callable[[], tfds.core.DatasetBuilder], manual_dir: str = "",
            *, wait_seconds: float = 600.0) -> tfds.core.DatasetBuilder:
  """``make_builder()`` prepared (``download_and_prepare``) and returned.

  Two runs that share a ``data_dir`` may prepare the same data at once; TFDS then fails in
  the one that finishes second (``FileExistsError`` when it renames its temporary folder).
  That run waits until the other's data is complete (at most ``wait_seconds``) and uses it.

  Args:
    make_builder: builds the builder (with its ``config``, ``data_dir``, ``file_format``).
    manual_dir: the folder of the source files (``""``: download).
  """
  config = tfds.download.DownloadConfig(manual_dir=manual_dir or None)
  builder = make_builder()
  try:
    builder.download_and_prepare(download_config=config)
    return builder
  except FileExistsError:
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
      builder = make_builder()
      if builder.is_prepared():
        return builder
      time.sleep(1.0)
    raise


def source_root(dl_manager, *, allow_download: bool, url: str, folder: str,
                missing: Callable[[Any, str], str]):
  """The folder of a builder's source files: ``manual_dir`` if it exists and is not empty,
  else ``url`` downloaded and extracted (its sub-folder ``folder``).

  Args:
    dl_manager: the builder's ``tfds.download.DownloadManager``.
    allow_download: ``False``: never go online (a missing ``manual_dir`` is an error).
    url: the public archive.
    folder: the folder inside the archive that holds the files.
    missing: ``(manual_dir, reason) -> message`` for the ``FileNotFoundError`` (it should
      list the files to put in ``manual_dir``).
  """
  try:
    return dl_manager.manual_dir  # AssertionError if missing or empty
  except AssertionError:
    pass
  manual_path = getattr(dl_manager, "_manual_dir", None)
  if not allow_download:
    raise FileNotFoundError(missing(manual_path, f"manual_dir {manual_path} does not exist "
                                    "or is empty (and downloading is switched off)"))
  try:
    return epath.Path(dl_manager.download_and_extract(url)) / folder
  except Exception as err:  # offline, proxy, ...: say where the files can go instead
    raise FileNotFoundError(missing(
        manual_path, f"downloading failed ({type(err).__name__}: {str(err)[:200]}) and "
        f"manual_dir {manual_path} does not exist or is empty")) from err


def warn_added_files(name: str, builder: tfds.core.DatasetBuilder,
                     find_file: Callable[[str], Any]) -> None:
  """Logs one line when the file of a split that was missing when ``builder``'s data was
  prepared is there now.

  TFDS never rebuilds prepared data, so without this line the new file would be ignored
  silently; the line names it and says how to rebuild with it.

  Args:
    name: the data set as the builder's messages begin (``"SNLI"``, ``"CLUE tnews"``).
    builder: a prepared builder whose metadata lists its ``"missing_splits"``.
    find_file: ``split -> `` the split's file in the source folder, or ``None``.
  """
  added = [s for s in (builder.info.metadata or {}).get("missing_splits", [])
           if find_file(s) is not None]
  if added:
    logging.warning(f"{name}: {find_file(added[0])} is there now but the data in "
                    f"{builder.data_dir} was prepared without it; delete that folder to "
                    "rebuild with it.")


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
          f"and delete that folder to rebuild (built: "
          f"{list(available_splits(builder, splits))}).")


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

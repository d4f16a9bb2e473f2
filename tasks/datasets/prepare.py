"""Preparing a TFDS builder from ``manual_dir`` or a download, safe for concurrent runs."""

import time
from typing import Any, Callable

import tensorflow_datasets as tfds
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

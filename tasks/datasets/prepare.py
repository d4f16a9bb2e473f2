"""Preparing a TFDS builder from ``manual_dir`` or a download, safe for concurrent runs."""

import time
from typing import Callable

import tensorflow_datasets as tfds


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

"""What the data tests share (test_datasets_*.py, test_sst_snli_data.py, test_ptb_data.py,
test_data_errors.py): writing tiny source folders, standing in for the download (there is no
internet here) and reading the logged lines."""

import gzip
import json
import os
from typing import Any, Iterable, Mapping, Optional, Union


def lines_text(lines: Iterable[str]) -> str:
  """The text of a file holding ``lines``, each ended by ``"\\n"``."""
  return "".join(line + "\n" for line in lines)


def jsonl_text(records: Iterable[Any]) -> str:
  """The text of a JSON-lines file: one ``json.dumps`` per record (non-ASCII as UTF-8)."""
  return lines_text(json.dumps(r, ensure_ascii=False) for r in records)


def write_files(root, files: Mapping[str, Union[str, bytes]], *, skip: Iterable[str] = (),
                gz: Iterable[str] = ()) -> str:
  """Writes ``files`` (``{path relative to root: str (as UTF-8) or bytes}``) under ``root``,
  making folders as needed, and returns ``str(root)``. The names in ``skip`` are left out;
  those in ``gz`` are gzipped, as ``<name>.gz``."""
  os.makedirs(root, exist_ok=True)
  for name, content in files.items():
    if name in skip:
      continue
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = content if isinstance(content, bytes) else content.encode("utf-8")
    with (gzip.open(path + ".gz", "wb") if name in gz else open(path, "wb")) as f:
      f.write(data)
  return str(root)


def fake_download(monkeypatch, result: Any = None, error: Optional[Exception] = None) -> list:
  """TFDS's ``DownloadManager.download_and_extract`` returns ``result`` (or raises ``error``)
  instead of going online; returns the list of what it is asked for (the URL or dict of URLs
  of each call)."""
  import tensorflow_datasets as tfds
  asked = []

  def download_and_extract(self, urls):
    asked.append(urls)
    if error is not None:
      raise error
    return dict(result) if isinstance(result, Mapping) else result

  monkeypatch.setattr(tfds.download.DownloadManager, "download_and_extract",
                      download_and_extract)
  return asked


def said(caplog, text: str, *, anywhere: bool = False) -> list[str]:
  """The logged messages that start with ``text`` (``anywhere``: that hold it)."""
  messages = [r.getMessage() for r in caplog.records]
  return [m for m in messages if (text in m if anywhere else m.startswith(text))]

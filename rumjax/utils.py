"""Small helpers shared by the library and the command-line tools: JSON files written
atomically, JSON-lines reading, parameter counting, prediction speed, the host processor's
name, and a log filter for orbax's chatter."""

import json
import os
import platform
import tempfile
from typing import Any

import jax


def write_text(path: str, text: str) -> None:
  """Writes ``text`` (UTF-8) to ``path`` atomically: a temporary file of a name unique to
  this writer in the same folder, then a rename. A crash never leaves half a file, and two
  processes writing the same file (e.g. two ``launch.reproduce --models=...`` in one
  workdir) leave one whole version, never a mix. Missing folders are created."""
  folder = os.path.dirname(os.path.abspath(path))
  os.makedirs(folder, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=folder,
                             prefix=os.path.basename(path) + ".", suffix=".tmp")
  try:
    with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
      f.write(text)
    os.chmod(tmp, 0o644)   # mkstemp's 0o600 would hide results from other users
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def write_json(path: str, obj: Any) -> None:
  """Writes ``obj`` as JSON to ``path`` atomically (:func:`write_text`); NumPy/JAX scalars
  are written as floats."""
  write_text(path, json.dumps(obj, indent=1, default=float))


def write_jsonl(path: str, rows) -> None:
  """Writes ``rows`` (dicts) as JSON lines to ``path`` atomically (:func:`write_text`);
  non-ASCII text is kept as is (UTF-8), e.g. Chinese label descriptions."""
  write_text(path, "".join(json.dumps(row, ensure_ascii=False, default=float) + "\n"
                           for row in rows))


def _not_json(path: str, err: json.JSONDecodeError, line: int = 0) -> ValueError:
  where = f"line {line}: " if line else ""
  return ValueError(f"{path} is not valid JSON ({where}{err}): was it cut short or edited "
                    "by hand? Restore it from a copy.")


def read_json(path: str, default: Any = None) -> Any:
  """The JSON content of ``path``, or ``default`` if the file does not exist.

  Raises:
    ValueError: one line naming the file if it is not valid JSON.
  """
  if not os.path.exists(path):
    return default
  with open(path) as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as err:
      raise _not_json(path, err) from None


def read_jsonl(path: str) -> list[dict]:
  """The records of a ``.jsonl`` file (``[]`` if it does not exist); ``ValueError`` (one
  line, naming the file and line) for a line that is not JSON."""
  if not os.path.exists(path):
    return []
  rows = []
  with open(path) as f:
    for number, line in enumerate(f, 1):
      if line.strip():
        try:
          rows.append(json.loads(line))
        except json.JSONDecodeError as err:
          raise _not_json(path, err, number) from None
  return rows


def count_params(tree: Any) -> int:
  """The number of scalars in a parameter tree (arrays or ``ShapeDtypeStruct``s)."""
  return int(sum(x.size for x in jax.tree.leaves(tree)))


def host_cpu(cpuinfo: str = "/proc/cpuinfo") -> str:
  """The host processor's model name: ``model name`` of ``/proc/cpuinfo`` (Linux), else
  ``platform.processor()`` or ``platform.machine()``. CPU timings depend on it (RESULTS.md,
  issue 45: the same RUM step was 2.3x Flax GRU's on an AMD EPYC, 2.9x on an Intel Xeon)."""
  try:
    with open(cpuinfo) as f:
      for line in f:
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
          return value.strip()
  except OSError:
    pass
  return platform.processor() or platform.machine() or "unknown processor"


def rows_per_second(rows, seconds) -> dict:
  """The speed of a prediction pass (:func:`rumjax.training.predict_checkpoint`'s
  ``(batch, outputs)`` rows and per-batch ``seconds``): ``rows_per_sec`` over the real rows
  (``batch["mask"] > 0``) of every batch but the first (which includes compilation; None
  when there is only one) and ``first_batch_sec``."""
  real = [int((batch["mask"] > 0).sum()) if "mask" in batch else len(next(iter(
      batch.values()))) for batch, _ in rows]
  rest = sum(seconds[1:])
  return {"rows_per_sec": sum(real[1:]) / rest if len(seconds) > 1 and rest > 0 else None,
          "first_batch_sec": seconds[0] if seconds else None}


class QuietOrbax:
  """A ``logging`` filter that drops orbax's per-save INFO lines (warnings still show)::

      absl.logging.get_absl_handler().addFilter(QuietOrbax())
  """

  def filter(self, record) -> bool:
    return record.levelno >= 30 or "/orbax/" not in record.pathname

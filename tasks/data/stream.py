"""Batches of one long token stream for truncated back-propagation through time.

The language-model layout of Zaremba et al. (2014) and of the FS-RNN / AWD-LSTM code: the
stream is cut into ``B`` contiguous rows that the model reads in parallel, window after
window of ``T`` steps, carrying its recurrent state from one window to the next. The
target of a token is the next token of the stream.

Training (:class:`StreamBatches`), for a stream ``x`` of ``N`` tokens, ``B`` rows and
windows of ``T`` steps::

    L = (N - 1) // B                  steps per row
    row b: inputs  x[b L     : b L + L]
           targets x[b L + 1 : b L + L + 1]
    window w of every epoch: steps [w T, (w + 1) T) of every row, w = 0 .. L // T - 1

An epoch is ``L // T`` windows (floor: every training batch has the same shape, so the
train step compiles once). Per epoch this drops the last ``(N - 1) - B L`` targets of the
stream (fewer than ``B``) and the last ``L mod T`` steps of every row (fewer than ``T``):
``N - 1 - B T (L // T)`` of the ``N - 1`` targets. Windows are never shuffled; epochs
repeat endlessly, and ``"reset"`` is True on the first window of each epoch so that the
training loop restarts the carried state there.

Evaluation (:func:`eval_stream`) reads the whole stream once and drops nothing: with
``L = ceil((N - 1) / B)`` row ``b`` holds the targets ``b L + 1 .. min(b L + L, N - 1)``
of ``x`` (the last rows may be short or empty), in ``ceil(L / T)`` windows; positions
past a row's end are padded and have weight 0. Summing a per-token loss times
``"weights"`` over all batches therefore counts each of the ``N - 1`` targets exactly
once. Each row starts from the initial state (``"reset"`` on the first window), so a row
``b > 0`` has no context from before its first token: ``batch_size=1`` gives exactly the
papers' evaluation, larger batches a slightly pessimistic but much faster one.

Batches (``rows`` = ``batch_size / process_count``; process ``p`` of ``P`` gets rows
``[p B/P, (p + 1) B/P)`` of every global batch)::

    {"inputs":  <int32>[rows, T],    tokens
     "targets": <int32>[rows, T],    the next tokens
     "weights": <float32>[rows, T],  1 for a real target, 0 for padding (eval only)
     "mask":    <float32>[rows],     1 if the row has a real target in this window
     "reset":   <bool>[rows]}        True where the carried state must be re-initialised
"""

import math
import zlib
from typing import Any, Iterator, Mapping

import numpy as np

from tasks import common
from tasks.data.batches import process_rows

Batch = dict[str, np.ndarray]


def _as_stream(tokens) -> np.ndarray:
  tokens = np.asarray(tokens)
  if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
    raise ValueError(f"tokens must be a 1-D integer array, got dtype {tokens.dtype} and "
                     f"shape {tokens.shape}; concatenate the encoded lines first.")
  if len(tokens) < 2:
    raise ValueError(f"the stream has {len(tokens)} tokens; it needs at least 2 (an input "
                     "and its target).")
  return tokens.astype(np.int32, copy=False)


def _check_sizes(batch_size: int, seq_len: int) -> None:
  if not common._is_int(batch_size) or batch_size < 1:
    raise ValueError(f"batch_size={batch_size!r} must be an integer >= 1.")
  if not common._is_int(seq_len) or seq_len < 1:
    raise ValueError(f"seq_len={seq_len!r} must be an integer >= 1.")


def checksum(tokens: np.ndarray) -> int:
  """CRC-32 of the stream's int32 little-endian bytes (ties an iterator state to it)."""
  return zlib.crc32(np.ascontiguousarray(tokens, "<i4").tobytes())


class StreamBatches:
  """Endless, resumable training windows over a token stream (see the module docstring).

  Example (PTB: ``B = 20`` rows, ``T = 35`` steps)::

      train = StreamBatches(ids, batch_size=20, seq_len=35)
      batch = next(train)    # batch["inputs"]: <int32>[20, 35], batch["reset"]: all True

  Args:
    tokens: <int>[N] the stream.
    batch_size, seq_len: ``B`` rows of windows of ``T`` steps.
    process_index, process_count: this process's rows of every global batch.
    source: where the stream comes from (a file, ``"the PTB train split (ptb.train.txt)"``),
      named when it is too short.

  Attributes:
    step: the global window counter of the batch ``next()`` returns; its epoch is
      ``step // windows_per_epoch`` and its window ``step % windows_per_epoch``.
    steps_per_row: ``L = (N - 1) // batch_size``.
    windows_per_epoch: ``L // seq_len`` (>= 1).
  """

  def __init__(self, tokens, *, batch_size: int, seq_len: int, process_index: int = 0,
               process_count: int = 1, source: str = ""):
    tokens = _as_stream(tokens)
    _check_sizes(batch_size, seq_len)
    self.num_tokens = len(tokens)
    self.batch_size = int(batch_size)
    self.seq_len = int(seq_len)
    self.steps_per_row = (self.num_tokens - 1) // self.batch_size
    self.windows_per_epoch = self.steps_per_row // self.seq_len
    if self.windows_per_epoch < 1:
      needed = self.batch_size * self.seq_len + 1
      origin = f" of {source}" if source else ""
      raise ValueError(f"the stream{origin} has {self.num_tokens:,} tokens, too few for "
                       f"batch_size={batch_size} rows of seq_len={seq_len} steps: one "
                       f"window needs batch_size * seq_len + 1 = {needed:,}; use the "
                       "complete data (is the file truncated?) or a smaller batch_size or "
                       "seq_len.")
    self.rows = process_rows(self.batch_size, process_index, process_count)
    self.checksum = checksum(tokens)
    used = self.batch_size * self.steps_per_row
    self._inputs = tokens[:used].reshape(self.batch_size, -1)[self.rows]
    self._targets = tokens[1:used + 1].reshape(self.batch_size, -1)[self.rows]
    self.step = 0

  @property
  def epoch(self) -> int:
    return self.step // self.windows_per_epoch

  def __iter__(self):
    return self

  def __next__(self) -> Batch:
    window = self.step % self.windows_per_epoch
    self.step += 1
    cols = slice(window * self.seq_len, (window + 1) * self.seq_len)
    rows = self.rows.stop - self.rows.start
    return {"inputs": np.ascontiguousarray(self._inputs[:, cols]),
            "targets": np.ascontiguousarray(self._targets[:, cols]),
            "weights": np.ones((rows, self.seq_len), np.float32),
            "mask": np.ones((rows,), np.float32),
            "reset": np.full((rows,), window == 0)}

  def get_state(self) -> dict:
    """JSON-able position: the next step (and its epoch and window), plus the stream's
    size, layout and checksum that :meth:`set_state` checks."""
    return {"step": int(self.step), "epoch": self.epoch,
            "window": self.step % self.windows_per_epoch, "num_tokens": self.num_tokens,
            "batch_size": self.batch_size, "seq_len": self.seq_len,
            "checksum": self.checksum}

  def set_state(self, state: Mapping[str, Any]) -> None:
    """Resumes at ``state["step"]`` (mid-epoch included); ``ValueError`` if the state is
    of another stream or layout."""
    for key in ("num_tokens", "batch_size", "seq_len", "checksum"):
      if key in state and int(state[key]) != getattr(self, key):
        raise ValueError(f"iterator state has {key}={state[key]} but this stream has "
                         f"{key}={getattr(self, key)}; it comes from another data set or "
                         "config.")
    step = state["step"]
    if not common._is_int(step) or step < 0:
      raise ValueError(f"iterator state step={step!r} must be an integer >= 0.")
    self.step = int(step)


def eval_stream(tokens, *, batch_size: int, seq_len: int, process_index: int = 0,
                process_count: int = 1, pad_id: int = 0) -> Iterator[Batch]:
  """Every target of the stream exactly once, in windows (see the module docstring).

  Args:
    tokens: <int>[N] the stream, ``N >= 2``.
    batch_size: the global number of rows ``B`` (1 reproduces the papers exactly).
    seq_len: the window length ``T``.
    process_index, process_count: this process's rows of every global batch.
    pad_id: the input and target id of padded positions (weight 0).

  Returns:
    An iterator over the ``ceil(ceil((N - 1) / B) / T)`` batches in order, made lazily;
    ``sum(b["weights"].sum())`` over them and over all processes is ``N - 1``.
  """
  tokens = _as_stream(tokens)
  _check_sizes(batch_size, seq_len)
  rows = process_rows(batch_size, process_index, process_count)
  return _eval_windows(tokens, batch_size, seq_len, rows, pad_id)


def _eval_windows(tokens, batch_size, seq_len, rows, pad_id) -> Iterator[Batch]:
  num_targets = len(tokens) - 1
  per_row = math.ceil(num_targets / batch_size)
  starts = per_row * np.arange(rows.start, rows.stop)[:, None]
  for w in range(math.ceil(per_row / seq_len)):
    step = w * seq_len + np.arange(seq_len)[None, :]
    real = (step < per_row) & (starts + step < num_targets)
    pos = np.where(real, starts + step, 0)
    weights = real.astype(np.float32)
    yield {"inputs": np.where(real, tokens[pos], pad_id).astype(np.int32),
           "targets": np.where(real, tokens[pos + 1], pad_id).astype(np.int32),
           "weights": weights,
           "mask": (weights.sum(axis=1) > 0).astype(np.float32),
           "reset": np.full((len(weights),), w == 0)}

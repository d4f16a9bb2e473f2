"""Batches over a fixed data set of examples: a deterministic, process-sharded,
resumable training iterator, evaluation batches with padding masks, and padding helpers.

Batch determinism: the global batch of step ``i`` holds the examples
``perm_e[k mod N]`` for ``k = i * B, ..., i * B + B - 1`` and ``e = k // N``, where
``perm_e = np.random.default_rng([seed, e]).permutation(N)``: a fresh shuffle of the
fixed training set every epoch, a function of ``(seed, i)`` only. Process ``p`` of
``P`` gets rows ``[p B/P, (p + 1) B/P)`` of that global batch, so 1 or N processes
train on the same global batches. Every process makes the whole global batch and keeps
its rows (:func:`_process_part`): a batch maker that pads to the longest row's bucket
then pads every process's part to the same width, as ``jax.make_array_from_process_local_data``
needs (padding each part to its own longest row gave the processes different shapes).
"""

import math
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import numpy as np

from tasks import common

Batch = dict[str, np.ndarray]


def process_rows(batch_size: int, process_index: int, process_count: int) -> slice:
  """The rows of a global batch that process ``process_index`` of ``process_count`` gets."""
  if not common._is_int(process_count) or process_count < 1:
    raise ValueError(f"process_count={process_count!r} must be an integer >= 1.")
  if not common._is_int(process_index) or not 0 <= process_index < process_count:
    raise ValueError(f"process_index={process_index!r} must be in [0, {process_count}).")
  if batch_size % process_count:
    raise ValueError(f"batch_size={batch_size} is not divisible by process_count="
                     f"{process_count}; every process must get the same number of rows.")
  per = batch_size // process_count
  return slice(process_index * per, (process_index + 1) * per)


def _process_part(batch: Batch, rows: slice, size: int) -> Batch:
  """This process's ``rows`` of a global batch of ``size`` rows (every entry's first
  axis)."""
  wrong = {k: np.shape(v) for k, v in batch.items() if np.ndim(v) == 0 or len(v) != size}
  if wrong:
    raise ValueError(f"the batch maker's entries {wrong} do not have the batch's {size} "
                     "rows first.")
  return {k: v[rows] for k, v in batch.items()}


# ------------------------------------------------------------------------ iterators


class ShuffledBatches:
  """Deterministic, resumable iterator over epoch-shuffled batches of a fixed data set.

  Yields this process's rows of ``make_batch(indices)``, where ``indices``
  <int>[batch_size] are the global batch of the current step (see the module
  docstring); every batch also has ``"mask"`` <float32>[rows] of ones, so train and
  eval batches have the same structure. With ``pass_epochs=True`` it calls
  ``make_batch(indices, epochs)`` with each index's epoch <int>[batch_size] as well (e.g. for
  dynamic masking that draws a new mask per example and epoch, :mod:`tasks.data.mlm`).

  Attributes:
    step: the step whose batch ``next()`` returns.
  """

  def __init__(self, num_examples: int, make_batch: Callable[..., Batch], *,
               seed: int, batch_size: int, process_index: int = 0,
               process_count: int = 1, pass_epochs: bool = False):
    if num_examples < 1:
      raise ValueError(f"num_examples={num_examples} must be >= 1.")
    self.num_examples = int(num_examples)
    self.make_batch = make_batch
    self.seed = int(seed)
    self.batch_size = int(batch_size)
    self.rows = process_rows(batch_size, process_index, process_count)
    self.pass_epochs = bool(pass_epochs)
    self.step = 0
    self._perms: dict[int, np.ndarray] = {}

  def _permutation(self, epoch: int) -> np.ndarray:
    if epoch not in self._perms:
      if len(self._perms) >= 2:
        self._perms.pop(min(self._perms))
      self._perms[epoch] = np.random.default_rng([self.seed, epoch]).permutation(
          self.num_examples)
    return self._perms[epoch]

  def _positions(self, step: int, all_rows: bool) -> np.ndarray:
    rows = slice(0, self.batch_size) if all_rows else self.rows
    return step * self.batch_size + np.arange(rows.start, rows.stop)

  def epochs(self, step: int, all_rows: bool = False) -> np.ndarray:
    """The epoch <int64>[rows] of each of this process's rows of the batch of ``step``
    (``all_rows``: of every row of the global batch)."""
    return self._positions(step, all_rows) // self.num_examples

  def indices(self, step: int, all_rows: bool = False) -> np.ndarray:
    """This process's example indices <int64>[rows] for the global batch of ``step``
    (``all_rows``: the whole global batch's)."""
    k = self._positions(step, all_rows)
    epochs, pos = np.divmod(k, self.num_examples)
    out = np.empty_like(k)
    for e in np.unique(epochs):
      sel = epochs == e
      out[sel] = self._permutation(int(e))[pos[sel]]
    return out

  def __iter__(self):
    return self

  def __next__(self) -> Batch:
    idx, epochs = self.indices(self.step, True), self.epochs(self.step, True)
    self.step += 1
    batch = self.make_batch(idx, epochs) if self.pass_epochs else self.make_batch(idx)
    batch["mask"] = np.ones((len(idx),), np.float32)
    return _process_part(batch, self.rows, self.batch_size)

  def get_state(self) -> dict:
    """JSON-able position: the next step, plus what the sequence depends on."""
    return {"step": int(self.step), "seed": self.seed, "num_examples": self.num_examples,
            "batch_size": self.batch_size}

  def set_state(self, state: Mapping[str, Any]) -> None:
    """Resumes at ``state["step"]``; ``ValueError`` if the state is of another stream."""
    for key in ("seed", "num_examples", "batch_size"):
      if key in state and int(state[key]) != getattr(self, key):
        raise ValueError(f"iterator state has {key}={state[key]} but this iterator has "
                         f"{key}={getattr(self, key)}; it comes from another config.")
    step = state["step"]
    if not common._is_int(step) or step < 0:
      raise ValueError(f"iterator state step={step!r} must be an integer >= 0.")
    self.step = int(step)


def eval_batches(num_examples: int, make_batch: Callable[[np.ndarray], Batch], *,
                 batch_size: int, max_batches: Optional[int] = None, process_index: int = 0,
                 process_count: int = 1) -> Iterator[Batch]:
  """The global batches of an eval split in order (the first ``max_batches`` of them if
  given), made lazily: an evaluator that reads only a few batches pays for no more.

  The last batch is padded to ``batch_size`` rows with copies of example 0 whose
  ``"mask"`` is 0, so metrics weighted by the mask ignore them. Each process gets its
  rows of each global batch (made whole, so that every process's part has the same
  padded width).
  """
  rows = process_rows(batch_size, process_index, process_count)
  count = math.ceil(num_examples / batch_size)
  if max_batches:
    count = min(count, max_batches)
  for b in range(count):
    k = b * batch_size + np.arange(batch_size)
    valid = k < num_examples
    batch = make_batch(np.where(valid, k, 0))
    batch["mask"] = valid.astype(np.float32)
    yield _process_part(batch, rows, batch_size)


# -------------------------------------------------------------------------- padding


def bucket_length(n: int, minimum: int, cap: int) -> int:
  """The next power of two >= ``max(n, minimum, 1)``, at most ``cap``.

  Padding a batch to its bucket instead of its longest row bounds the number of
  distinct shapes (compilations) to ``log2(cap)``, e.g. ``bucket_length(17, 16, 100)
  == 32`` and ``bucket_length(90, 16, 100) == 100``.
  """
  n = max(int(n), int(minimum), 1)
  return min(int(cap), 1 << (n - 1).bit_length())


def pad_to_length(seqs: Sequence[Sequence[int]], length: Optional[int] = None, *,
                  pad_id: int = 0, truncate: bool = False) -> tuple[np.ndarray, np.ndarray]:
  """Right-pads id sequences into one array.

  Args:
    seqs: ``n`` sequences of ids (lists or 1-D arrays, possibly empty).
    length: the padded length; ``None`` for the longest sequence (at least 1).
    pad_id: the id written after each sequence.
    truncate: cut longer sequences to ``length``; if False they raise ``ValueError``.

  Returns:
    ``(ids <int32>[n, length], lengths <int32>[n])``, ``lengths`` the unpadded (after
    truncation) lengths, e.g. ``pad_to_length([[5, 6], [7]], 3)`` ->
    ``([[5, 6, 0], [7, 0, 0]], [2, 1])``.
  """
  seqs = [np.asarray(s, np.int64).reshape(-1) for s in seqs]
  longest = max((len(s) for s in seqs), default=0)
  if length is None:
    length = max(longest, 1)
  if not common._is_int(length) or length < 0:
    raise ValueError(f"length={length!r} must be an integer >= 0 (or None for the longest).")
  if longest > length and not truncate:
    raise ValueError(f"a sequence has {longest} ids but length={length}; raise length or "
                     "pass truncate=True.")
  ids = np.full((len(seqs), length), pad_id, np.int32)
  lengths = np.zeros((len(seqs),), np.int32)
  for i, s in enumerate(seqs):
    s = s[:length]
    ids[i, :len(s)] = s
    lengths[i] = len(s)
  return ids, lengths

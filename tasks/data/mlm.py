"""Dynamic masked-language-model corruption as StarSaber pre-trains (no ``[MASK]`` symbol).

Every real position of an example is selected with probability ``p`` (0.3 in the
StarSaber paper) and its token replaced by one drawn uniformly from the whole vocabulary
(``[0, vocab_size)`` minus ``pad_id`` and ``exclude_ids``; the draw may give back the
original token, which the model must then still predict). The targets are the original tokens, weighted
1 at the selected positions only.

Dynamic: an example gets a new mask every epoch, a function of ``(seed, epoch, index)``
only (``index`` its position in the data set): the row uses
``np.random.default_rng([seed, epoch, index])``, drawing first ``n`` uniforms for the
selection then ``n`` replacement indices, ``n`` the number of maskable positions. So the
mask does not depend on the batch, the process, the padded width or the order of the
rows. Padding (``pad_id``) and ``protected_ids`` (e.g. a ``[CLS]`` or ``<bos>``) are
never selected.

An example in which no position is selected (likely only for very short ones) is left
as is with all weights 0: it adds nothing to the loss, and a loss normalised by the sum
of the weights of the batch stays exact.

With :class:`tasks.data.ShuffledBatches` (``pass_epochs=True`` gives each row's epoch)::

    def make_batch(idx, epochs):
      return mask_tokens(ids[idx], indices=idx, epochs=epochs, seed=config.seed,
                         vocab_size=len(vocab), pad_id=vocab.pad_id,
                         exclude_ids=vocab.special_ids)
"""

from typing import Optional, Sequence

import numpy as np

Batch = dict[str, np.ndarray]


def replacement_ids(vocab_size: int, exclude_ids: Sequence[int] = ()) -> np.ndarray:
  """The ids a masked position may receive, <int32>[k]: ``[0, vocab_size)`` minus
  ``exclude_ids``."""
  if not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
    raise ValueError(f"vocab_size={vocab_size!r} must be an integer >= 1.")
  ids = np.setdiff1d(np.arange(vocab_size), np.asarray(list(exclude_ids), np.int64))
  if not len(ids):
    raise ValueError(f"exclude_ids={list(exclude_ids)} leaves no id of the vocabulary of "
                     f"{vocab_size} to draw replacements from; exclude fewer ids.")
  return ids.astype(np.int32)


def mask_tokens(tokens, *, indices, epochs, seed: int, vocab_size: int, p: float = 0.3,
                pad_id: Optional[int] = 0, protected_ids: Sequence[int] = (),
                exclude_ids: Sequence[int] = ()) -> Batch:
  """Masks a batch of examples (see the module docstring).

  Args:
    tokens: <int>[n, T] the examples (right-padded or not).
    indices: <int>[n] each row's index in the data set.
    epochs: <int>[n] or an int: each row's epoch.
    seed: the masking seed.
    vocab_size: replacements are drawn from ``[0, vocab_size)``...
    p: the probability that a maskable position is selected, in ``[0, 1]``.
    pad_id: the padding id, never masked nor drawn (``None``: every position is real).
    protected_ids: ids never masked either (``[CLS]``, ``<bos>``, ...).
    exclude_ids: ...minus ``pad_id`` and these ids (e.g. the special ids).

  Returns:
    ``{"inputs": <int32>[n, T] the corrupted tokens, "targets": <int32>[n, T] the
    original tokens, "weights": <float32>[n, T] 1 at the masked positions}``.
  """
  tokens = np.asarray(tokens)
  if tokens.ndim != 2:
    raise ValueError(f"tokens must be <int>[n, T], got shape {tokens.shape}.")
  n = tokens.shape[0]
  indices = np.asarray(indices).reshape(-1)
  epochs = np.broadcast_to(np.asarray(epochs), (n,))
  if len(indices) != n:
    raise ValueError(f"indices has {len(indices)} entries for {n} rows of tokens; give "
                     "one data-set index per row.")
  if not 0 <= p <= 1:
    raise ValueError(f"p={p!r} must be a probability in [0, 1].")
  padding = [] if pad_id is None else [pad_id]
  choices = replacement_ids(vocab_size, list(exclude_ids) + padding)
  maskable = ~np.isin(tokens, list(protected_ids) + padding)
  inputs = tokens.astype(np.int32, copy=True)
  weights = np.zeros(tokens.shape, np.float32)
  for r in range(n):
    cols = np.flatnonzero(maskable[r])
    rng = np.random.default_rng([int(seed), int(epochs[r]), int(indices[r])])
    chosen = rng.random(len(cols)) < p
    picks = choices[rng.integers(0, len(choices), size=len(cols))]
    inputs[r, cols[chosen]] = picks[chosen]
    weights[r, cols[chosen]] = 1.0
  return {"inputs": inputs, "targets": tokens.astype(np.int32), "weights": weights}

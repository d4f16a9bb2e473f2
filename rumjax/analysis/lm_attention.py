"""Where an LSTMN language model attends (Cheng et al., 2016, §5.1 and Figure 4).

The language model (:class:`rumjax.models.lm.LanguageModel` around
:class:`rumjax.models.lstmn.LSTMNCore`) reads a token stream in windows; each window's tapes
start with the previous window's last ``(h, c)`` at position 0 (the *carried slot*), so
step t of a window attends to that slot and to the window's tokens 1..t-1. The paper's
Figure 4 shows that "much attention focuses on recent memories"; :func:`profile` measures
it over a stream: the mean weight on the carried slot and at each distance ``d = t - i``
(``d = 1``: the previous token), beside what uniform attention over the visible positions
would give.

The weights are those of :func:`rumjax.lstmn_scan` (``return_attention=True``) with the
model's own parameters (evaluation mode: no dropout), layer by layer, so this reads the
same recurrence that training runs.
"""

import functools
from typing import Any, Iterable, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rumjax.core import lstmn as lstmn_lib

Array = jax.Array


def stack_params(params: Mapping[str, Any]) -> list:
  """The LSTMN layers' parameters of a language model, bottom first (``rnn/stack``)."""
  try:
    stack = params["rnn"]["stack"]
  except (KeyError, TypeError):
    raise ValueError("these parameters are not an LSTMN language model's (no rnn/stack); "
                     "train --task=ptb --variant=word_lstmn1 (config.model.core 'lstmn')."
                     ) from None
  return [dict(stack[f"layer_{k}"]) for k in range(len(stack))]


@functools.partial(jax.jit, static_argnames="memory_span")
def _window(layers, embedding, tokens, carry, memory_span):
  """One window: per layer the weights <float>[B, T, T + 1], and the new carry."""
  inputs, weights, new_carry = embedding[tokens], [], []
  for layer, initial in zip(layers, carry):
    hs, cs, s = lstmn_lib.lstmn_scan(layer, inputs, initial=initial, impl="reference",
                                     memory_span=memory_span, return_attention=True)
    weights.append(s)
    new_carry.append((hs[:, -1], cs[:, -1]))
    inputs = hs
  return weights, tuple(new_carry)


def window_attention(params: Mapping[str, Any], tokens, carry: Optional[Sequence] = None,
                     memory_span: Optional[int] = None):
  """The intra-attention of every layer on one window of tokens.

  Args:
    params: the language model's parameters (``embed``, ``rnn/stack/layer_k``, ...).
    tokens: <int>[B, T] token ids.
    carry: None (zeros: an empty slot 0, as at the start of a stream) or one ``(h, c)``
      <float>[B, Nh] per layer (the state after the previous window).
    memory_span: the model's ``memory_span`` (None or 0: the whole window).

  Returns:
    ``(weights, carry)``: one <float>[B, T, T + 1] per layer (``s[b, t - 1, i]``, the weight
    of tape position i when reading token t; position 0 is the carried slot), and the
    carry after the window.
  """
  layers = stack_params(params)
  tokens = jnp.asarray(tokens, jnp.int32)
  if carry is None:
    nh = layers[0]["gates_h"].shape[0]
    zeros = jnp.zeros((tokens.shape[0], nh), jnp.float32)
    carry = tuple((zeros, zeros) for _ in layers)
  embedding = jnp.asarray(params["embed"]["embedding"])
  return _window(layers, embedding, tokens, tuple(tuple(c) for c in carry),
                 memory_span or None)


def distance_weights(weights, memory_span: Optional[int] = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Sums and counts of the attention weight by distance, over a batch of windows.

  Step t sees the tape positions ``lo .. t - 1`` with ``lo = 0``, or with a
  ``memory_span`` K ``lo = max(0, t - K)`` (:func:`rumjax.core.lstmn.visible_positions`;
  position 0 is the carried slot).

  Args:
    weights: <float>[B, T, T + 1] of :func:`window_attention` (one layer).
    memory_span: the model's (None or 0: the whole window).

  Returns:
    ``(at_distance, uniform, count)``, each float64 [T + 1]: entry 0 is the carried slot
    (summed over the steps that see it), entry ``d >= 1`` sums ``s[t - 1, t - d]`` over the
    steps that see the token d positions back; ``uniform`` sums what uniform attention
    over the ``t - lo`` visible positions would give, ``count`` the number of terms.
  """
  w = np.asarray(weights, np.float64)
  b, t_len, _ = w.shape
  at = np.zeros(t_len + 1)
  uniform = np.zeros(t_len + 1)
  count = np.zeros(t_len + 1)
  for t in range(1, t_len + 1):
    lo = 0 if not memory_span else max(0, t - memory_span)
    visible = t - lo
    if lo == 0:
      at[0] += w[:, t - 1, 0].sum()
      uniform[0] += b / visible
      count[0] += b
    for d in range(1, t - max(lo, 1) + 1):      # tokens t - d >= max(lo, 1)
      at[d] += w[:, t - 1, t - d].sum()
      uniform[d] += b / visible
      count[d] += b
  return at, uniform, count


def profile(params: Mapping[str, Any], windows: Iterable[Mapping[str, Any]],
            max_windows: Optional[int] = None, memory_span: Optional[int] = None
            ) -> list[dict]:
  """The mean attention by distance over a stream read with the state carried.

  Args:
    params: an LSTMN language model's parameters.
    windows: batches ``{"inputs": <int>[B, T], "reset"?: <bool>[B]}`` of one stream in
      order (e.g. ``task.eval_data(config, "valid")``); the carry is reset where ``reset``.
    max_windows: read at most this many.
    memory_span: the model's (None or 0: the whole window).

  Returns:
    One dict per layer (bottom first): ``carried`` (mean weight on the carried slot),
    ``at_distance`` (list, index d - 1: mean weight on the token d back, over the steps
    that see it), ``uniform_carried`` / ``uniform_at_distance`` (the same under uniform
    attention over the visible positions), ``windows`` read.
  """
  carry, totals, n = None, None, 0
  for batch in windows:
    if max_windows is not None and n >= max_windows:
      break
    tokens = np.asarray(batch["inputs"])
    if carry is not None and "reset" in batch:
      keep = ~np.asarray(batch["reset"], bool)[:, None]
      carry = tuple((h * keep, c * keep) for h, c in carry)
    weights, carry = window_attention(params, tokens, carry, memory_span)
    sums = [distance_weights(w, memory_span) for w in weights]
    totals = sums if totals is None else [tuple(a + b for a, b in zip(x, y))
                                          for x, y in zip(totals, sums)]
    n += 1
  if totals is None:
    raise ValueError("no windows to read.")
  out = []
  for at, uniform, count in totals:
    mean, mean_u = at / np.maximum(count, 1), uniform / np.maximum(count, 1)
    seen = 1 + int(np.flatnonzero(count[1:]).max(initial=-1)) + 1   # distances seen: 1..
    out.append({"carried": float(mean[0]), "at_distance": mean[1:seen].tolist(),
                "uniform_carried": float(mean_u[0]),
                "uniform_at_distance": mean_u[1:seen].tolist(), "windows": n})
  return out


def sentence_attention(params: Mapping[str, Any], context, sentence, seq_len: int = 35,
                       max_context_windows: int = 20, memory_span: Optional[int] = None
                       ) -> list[np.ndarray]:
  """The intra-attention on one sentence read after its context, as in evaluation.

  Args:
    params: an LSTMN language model's parameters.
    context: <int>[N] the stream before the sentence: its last ``max_context_windows``
      windows of ``seq_len`` tokens are read first (batch 1, state carried) to build the
      carried slot; empty: the sentence starts from zeros.
    sentence: <int>[L] the sentence's token ids, read as one window.
    memory_span: the model's (None or 0: the whole window).

  Returns:
    One <float>[L, L + 1] per layer (position 0: the carried slot).
  """
  context = np.asarray(context, np.int32)
  keep = min(len(context) // seq_len, max_context_windows) * seq_len
  context = context[len(context) - keep:]
  carry = None
  for start in range(0, keep, seq_len):
    _, carry = window_attention(params, context[None, start:start + seq_len], carry,
                                memory_span)
  weights, _ = window_attention(params, np.asarray(sentence, np.int32)[None], carry,
                                memory_span)
  return [np.asarray(w[0]) for w in weights]

"""The LSTMN recurrence (Cheng, Dong, Lapata, EMNLP 2016) as pure JAX functions.

The Long Short-Term Memory-Network keeps a *hidden tape* ``H = (h_0, h_1, ...)`` and a
*memory tape* ``C = (c_0, c_1, ...)``, one slot per token. At step t (1-based) it reads
the tapes written so far with intra-attention (§3.2)::

    a_i = v^T tanh(W_h h_i + W_x x_t + W_h~ h~_{t-1})   i = 0..t-1            eq. (4)
    s   = softmax(a)                                                          eq. (5)
    h~_t = sum_i s_i h_i,   c~_t = sum_i s_i c_i       (adaptive summaries)   eq. (6)
    [i, f, o] = sigmoid(W [h~_t, x_t]),  c^_t = tanh(W [h~_t, x_t])          eq. (7)
    c_t = f * c~_t + i * c^_t                                                eq. (8)
    h_t = o * tanh(c_t)                                                      eq. (9)

and writes ``(h_t, c_t)`` at tape position t. (Eqs. (6)-(7) were lost in the extraction
of our copy of the paper; they are the attention-weighted sums above and gates computed
from ``[h~_t, x_t]``, as in the authors' code, cheng6076/SNLI-attention.)

Tape position 0 holds ``h_0 = c_0 = 0`` (or a given initial state) and ``h~_0 = 0``, as in
the authors' code: step 1 attends only to that vector, so ``h~_1 = h_0``, ``c~_1 = c_0``.

Parameter layout (kernels act from the right as in Flax: ``x @ attn_x`` is ``W_x x``)::

    params = {"attn_h":  (Nh, Na),     # W_h
              "attn_x":  (Nx, Na),     # W_x
              "attn_ht": (Nh, Na),     # W_h~
              "attn_v":  (Na,),        # v
              "gates_x": (Nx, 4 Nh),   # columns [i | f | o | c^]
              "gates_h": (Nh, 4 Nh),   # the h~_t part of eq. (7)
              "gates_bias": (4 Nh,)}

Implementation: one ``lax.scan`` over time whose carry holds pre-allocated tapes of length
``T + 1`` (O(T^2 N) time, O(T N) memory). ``W_h h_i`` is computed once, when ``h_i`` is
written (a third, projected tape), and the input projections ``W_x x_t`` and
``x_t @ gates_x`` of the whole sequence are one matmul each outside the scan. The generic
:func:`tape_scan` (also used by the deep-fusion decoder, ``rumjax.models.fusion``) has a
hand-written backward pass: autodiff of a scan would save the whole tape at every step
(O(T^2 N) memory); the backward pass here saves O(T N) and recomputes each step from the
final tapes (a step only reads the positions before it, which never change afterwards).
"""

import functools
import numbers
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp

from rumjax.core import initializers
from rumjax.core.attention import masked_softmax
from rumjax.core.precision import (add_bias, at_least_float32, cast_weights,
                                   resolve_precision)

Array = jax.Array

# The biases of the LSTMN and of the fusion models (:mod:`rumjax.models.fusion`): under a
# bfloat16 policy they stay float32 and are added by ``add_bias`` (their gradients are
# sums over the batch and time, accumulated in float32).
BIASES = ("gates_bias", "gate_r_bias", "out_bias")
PARAM_NAMES = ("attn_h", "attn_x", "attn_ht", "attn_v", "gates_x", "gates_h", "gates_bias")
IMPLS = ("fast", "reference")


# ------------------------------------------------------------ parameters, checks


def param_shapes(nx: int, nh: int, na: int) -> dict:
  """The pinned parameter shapes of :func:`lstmn_scan` for sizes ``Nx, Nh, Na``."""
  return {"attn_h": (nh, na), "attn_x": (nx, na), "attn_ht": (nh, na), "attn_v": (na,),
          "gates_x": (nx, 4 * nh), "gates_h": (nh, 4 * nh), "gates_bias": (4 * nh,)}


def attn_v_init(key, shape, dtype=jnp.float32):
  """``v ~ N(0, 1 / Na)``, so the scores ``v^T tanh(.)`` start at unit scale."""
  return jax.random.normal(key, shape, dtype) / jnp.sqrt(jnp.asarray(shape[-1], dtype))


INITIALIZERS: dict[str, Callable] = {
    "attn_h": jax.nn.initializers.lecun_normal(),
    "attn_x": jax.nn.initializers.lecun_normal(),
    "attn_ht": jax.nn.initializers.lecun_normal(),
    "attn_v": attn_v_init,
    "gates_x": jax.nn.initializers.lecun_normal(),
    "gates_h": initializers.block_orthogonal(4),  # as the recurrent kernels of Flax's LSTMCell
    "gates_bias": jax.nn.initializers.zeros,
}


def init_lstmn_params(key: Array, nx: int, nh: int, na: int, dtype=jnp.float32) -> dict:
  """LSTMN parameters in the layout of :func:`lstmn_scan`.

  Attention kernels and ``gates_x`` are LeCun-normal, ``gates_h`` has an orthogonal
  ``(Nh, Nh)`` block per gate, ``v ~ N(0, 1/Na)``, biases are zero (the initializers of
  :class:`rumjax.models.lstmn.LSTMN`).

  Args:
    key: a PRNG key.
    nx: input size ``Nx``.
    nh: hidden (and memory) size ``Nh``.
    na: attention size ``Na``.
    dtype: parameter dtype.

  Returns:
    ``{"attn_h": (nh, na), "attn_x": (nx, na), "attn_ht": (nh, na), "attn_v": (na,),
    "gates_x": (nx, 4 nh), "gates_h": (nh, 4 nh), "gates_bias": (4 nh,)}``.
  """
  initializers.check_sizes(nx=nx, nh=nh, na=na)
  shapes = param_shapes(nx, nh, na)
  keys = jax.random.split(key, len(PARAM_NAMES))
  return {name: INITIALIZERS[name](k, shapes[name], dtype)
          for name, k in zip(PARAM_NAMES, keys)}


def check_params(params, nx: Optional[int] = None, names: Sequence[str] = PARAM_NAMES,
                 what: str = "lstmn_scan") -> tuple[int, int, int]:
  """Validates the LSTMN part of ``params`` (keys ``names`` at least); ``(Nx, Nh, Na)``."""
  if not isinstance(params, dict) or not set(names) <= set(params):
    got = sorted(params) if isinstance(params, dict) else type(params).__name__
    raise ValueError(
        f"{what}: params must be a dict with keys {sorted(names)}; got {got}. Use "
        "rumjax.init_lstmn_params(key, nx, nh, na) to create them.")
  nh = jnp.shape(params["gates_h"])[0]
  na = jnp.shape(params["attn_v"])[0] if jnp.ndim(params["attn_v"]) == 1 else -1
  nx_p = jnp.shape(params["attn_x"])[0]
  expected = param_shapes(nx_p, nh, na)
  for name in PARAM_NAMES:
    if tuple(jnp.shape(params[name])) != expected[name]:
      raise ValueError(
          f"{what}: params[{name!r}] has shape {tuple(jnp.shape(params[name]))}; with "
          f"Nx={nx_p}, Nh={nh}, Na={na} it must be {expected[name]} (the pinned layout "
          "is in the docstring of rumjax.core.lstmn).")
  if nx is not None and nx != nx_p:
    raise ValueError(
        f"{what}: xs has {nx} features in its last axis but params['attn_x'] expects "
        f"Nx={nx_p}; the parameters do not match the inputs.")
  return nx_p, nh, na


def check_memory_span(memory_span) -> Optional[int]:
  if memory_span is None:
    return None
  if (isinstance(memory_span, bool) or not isinstance(memory_span, numbers.Integral)
      or memory_span < 1):
    raise ValueError(
        f"memory_span={memory_span!r} must be None (unlimited) or an int >= 1 (the number "
        "of most recent tape positions a step may attend to).")
  return int(memory_span)


# ------------------------------------------------------------- the building blocks


def attention_weights(keys_proj: Array, query_proj: Array, v: Array, valid: Array, *,
                      precision: Any = None) -> Array:
  """Additive attention: ``softmax_i(v^T tanh(K_i + q))`` over the valid positions.

  Eqs. (4)-(5) (intra-attention, ``K_i = W_h h_i``, ``q = W_x x_t + W_h~ h~_{t-1}``) and
  eqs. (11)-(12) (inter-attention, ``K_j = W_g g_j``, ``q = W_x x_t + W_g~ g~_{t-1}``).

  Args:
    keys_proj: <float>[B, M, Na] the projected tape ``K``.
    query_proj: <float>[B, Na] the projected query ``q``.
    v: <float>[Na].
    valid: <bool>[B, M] the positions that may be attended to.
    precision: the matmul precision of ``v^T tanh(.)`` (None: the backend's default).

  Returns:
    ``s`` <float>[B, M], summing to 1 over the valid positions, in the dtype of
    ``keys_proj`` (the scores and the softmax are computed in float32 whatever it is).
  """
  scores = jnp.einsum("bma,a->bm", jnp.tanh(keys_proj + query_proj[:, None, :]), v,
                      precision=resolve_precision(precision),
                      preferred_element_type=at_least_float32(keys_proj, v))
  return masked_softmax(scores, valid).astype(jnp.result_type(keys_proj))


def summarize(weights: Array, tape: Array, *, precision: Any = None) -> Array:
  """The adaptive summary ``sum_i s_i tape_i`` (eqs. (6), (13)): [B, M], [B, M, N] -> [B, N]
  (at the matmul ``precision``; None: the backend's default)."""
  return jnp.einsum("bm,bmn->bn", weights, tape, precision=resolve_precision(precision))


def lstmn_update(pre: Array, c_tilde: Array, extra_memory: Any = 0.0) -> tuple[Array, Array]:
  """Eqs. (7)-(9) (and (15)-(16)): gates from the pre-activation, the new ``(h_t, c_t)``.

  Args:
    pre: <float>[B, 4 Nh] ``h~_t @ gates_h + x_t @ gates_x + gates_bias``, columns
      ``[i | f | o | c^]``.
    c_tilde: <float>[B, Nh] the memory summary ``c~_t``.
    extra_memory: added to ``c_t`` (deep fusion's ``r_t * a~_t``, eq. (15)).

  Returns:
    ``(h_t, c_t)``: ``c_t = f * c~_t + i * c^_t (+ extra)``, ``h_t = o * tanh(c_t)``.
  """
  i, f, o, c_hat = jnp.split(pre, 4, axis=-1)
  i, f, o, c_hat = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jax.nn.sigmoid(o), jnp.tanh(c_hat)
  c = f * c_tilde + i * c_hat + extra_memory
  return o * jnp.tanh(c), c


def visible_positions(k: Array, valid_tape: Array, pos_tape: Array, pos_t: Array,
                      memory_span: Optional[int]) -> Array:
  """Which tape positions step ``k + 1`` may attend to, <bool>[B, T + 1].

  Positions ``0..k`` that hold a real token (or the initial vector at 0), and, with a
  ``memory_span`` K, only the K most recent ones: ``pos_t - pos_i <= K`` where ``pos`` counts
  real tokens (so padding inside a sequence does not use up the span).

  Args:
    k: the 0-based step index (the step writes tape position ``k + 1``).
    valid_tape: <bool>[B, T + 1] real-token flags of the tape (True at position 0).
    pos_tape: <int>[B, T + 1] the number of real tokens up to each position (0 at 0).
    pos_t: <int>[B] ``pos_tape[:, k + 1]``.
    memory_span: None (unlimited) or K >= 1.
  """
  idx = jnp.arange(valid_tape.shape[1])
  visible = (idx <= k)[None, :] & valid_tape
  if memory_span is not None:
    visible &= (pos_t[:, None] - pos_tape) <= memory_span
  return visible


# ------------------------------------------------------------------- tape scan


def _new_tapes(first: Sequence[Array], length: int) -> tuple:
  """Tapes <[B, length + 1, n]> with ``first`` at position 0 and zeros elsewhere."""
  return tuple(
      jnp.zeros((f.shape[0], length + 1) + f.shape[1:], f.dtype).at[:, 0].set(f)
      for f in first)


def _scan_forward(step, params, const, xs, aux, carry0, first, *, keep_carries: bool,
                  keep_extras: bool):
  """Runs ``step`` over time; returns ``(tapes, carries_in, extras)`` (None if not kept)."""
  length = jax.tree.leaves(xs)[0].shape[0]
  tapes0 = _new_tapes(first, length)

  def body(state, inputs):
    carry, tapes = state
    k, x_t, aux_t = inputs
    entries, new_carry, extras = step(params, const, x_t, aux_t, carry, tapes, k)
    tapes = tuple(jax.lax.dynamic_update_index_in_dim(tape, e.astype(tape.dtype), k + 1, 1)
                  for tape, e in zip(tapes, entries))
    return (new_carry, tapes), (carry if keep_carries else None,
                                extras if keep_extras else None)

  (_, tapes), (carries, extras) = jax.lax.scan(
      body, (carry0, tapes0), (jnp.arange(length), xs, aux))
  return tapes, carries, extras


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _tape_scan_fast(step, params, const, xs, aux, carry0, first):
  return _scan_forward(step, params, const, xs, aux, carry0, first, keep_carries=False,
                       keep_extras=False)[0]


def _tape_scan_fast_fwd(step, params, const, xs, aux, carry0, first):
  tapes, carries, _ = _scan_forward(step, params, const, xs, aux, carry0, first,
                                    keep_carries=True, keep_extras=False)
  return tapes, (params, const, xs, aux, carries, tapes, carry0)


def _tape_scan_fast_bwd(step, res, d_tapes):
  """Reverse scan: step k is recomputed from the final tapes (positions <= k are final)
  and differentiated by ``jax.vjp``; tape cotangents accumulate in O(T N) buffers."""
  params, const, xs, aux, carries, tapes, carry0 = res
  length = jax.tree.leaves(xs)[0].shape[0]
  zeros = lambda tree: jax.tree.map(jnp.zeros_like, tree)

  def body(state, inputs):
    d_params, d_carry, d_tapes = state
    k, x_t, aux_t, carry_in = inputs
    f = lambda p, x, c, tp: step(p, const, x, aux_t, c, tp, k)[:2]
    _, vjp = jax.vjp(f, params, x_t, carry_in, tapes)
    d_entries = tuple(jax.lax.dynamic_index_in_dim(dt, k + 1, 1, keepdims=False)
                      for dt in d_tapes)
    dp, dx, dc, dtp = vjp((d_entries, d_carry))
    d_params = jax.tree.map(jnp.add, d_params, dp)
    d_tapes = tuple(a + b for a, b in zip(d_tapes, dtp))
    return (d_params, dc, d_tapes), dx

  (d_params, d_carry, d_tapes), d_xs = jax.lax.scan(
      body, (zeros(params), zeros(carry0), tuple(d_tapes)),
      (jnp.arange(length), xs, aux, carries), reverse=True)
  d_first = tuple(dt[:, 0] for dt in d_tapes)
  return d_params, None, d_xs, None, d_carry, d_first


_tape_scan_fast.defvjp(_tape_scan_fast_fwd, _tape_scan_fast_bwd)


def tape_scan(step: Callable, params: Any, const: Any, xs: Any, aux: Any, carry0: Any,
              first: Sequence[Array], *, impl: str = "fast", return_extras: bool = False):
  """Scans ``step`` over time, writing one entry per tape per step (the LSTMN skeleton).

  ``step(params, const, x_t, aux_t, carry, tapes, k) -> (entries, new_carry, extras)``
  computes step ``k + 1`` (``k`` 0-based) from the tapes, whose positions ``0..k`` are
  written; ``entries`` (one <float>[B, n_j] per tape) go to position ``k + 1``. A step must
  read only positions ``<= k`` (mask the others out *exactly*, as :func:`masked_softmax`
  does): the fast backward pass recomputes it on the final tapes.

  Args:
    step: the step function (pure; ``extras`` are returned only with ``return_extras``).
    params: differentiable constants (weights, a source sequence's tapes), a pytree.
    const: non-differentiable constants (masks, positions), a pytree.
    xs: differentiable per-step inputs, a pytree of <float>[T, ...].
    aux: non-differentiable per-step inputs, a pytree of [T, ...].
    carry0: the initial carry (differentiable pytree; e.g. ``h~_0``).
    first: the tapes' entries at position 0, a tuple of <float>[B, n_j].
    impl: ``"fast"``: a ``custom_vjp`` whose backward pass saves only the final tapes and
      the carry of every step (O(T N)) and recomputes each step; ``"reference"``: autodiff
      of the plain scan (saves every step's tapes, O(T^2 N); supports forward mode).
    return_extras: also return the stacked ``extras`` (e.g. attention weights) <[T, ...]>;
      uses the reference path.

  Returns:
    ``tapes``: a tuple of <float>[B, T + 1, n_j] (position 0 = ``first``); with
    ``return_extras``, ``(tapes, extras)``.
  """
  if impl not in IMPLS:
    raise ValueError(f"impl={impl!r} is unknown; accepted values are {list(IMPLS)}.")
  first = tuple(first)
  if return_extras:
    tapes, _, extras = _scan_forward(step, params, const, xs, aux, carry0, first,
                                     keep_carries=False, keep_extras=True)
    return tapes, extras
  if impl == "fast":
    return _tape_scan_fast(step, params, const, xs, aux, carry0, first)
  return _scan_forward(step, params, const, xs, aux, carry0, first, keep_carries=False,
                       keep_extras=False)[0]


# ---------------------------------------------------------------------- LSTMN


def lstmn_step(params: dict, const: tuple, x_t: tuple, aux_t: tuple, carry: Array,
               tapes: tuple, k: Array, *, memory_span: Optional[int] = None,
               precision: Any = None):
  """One LSTMN step (eqs. (4)-(9)) in the :func:`tape_scan` protocol.

  Args:
    params: ``{"attn_h", "attn_ht", "attn_v", "gates_h"}`` (the recurrent weights).
    const: ``(valid_tape <bool>[B, T+1], pos_tape <int>[B, T+1])``.
    x_t: ``(x_t @ attn_x <float>[B, Na], x_t @ gates_x + gates_bias <float>[B, 4 Nh])``.
    aux_t: ``(m_t <bool>[B], pos_t <int>[B])``: whether step t is a real token, its position
      among the real tokens.
    carry: ``h~_{t-1}`` <float>[B, Nh].
    tapes: ``(H, C, W_h H)``, <float>[B, T+1, Nh | Nh | Na].
    k: the 0-based step index.
    memory_span: None or the number of most recent positions visible.
    precision: the matmul precision of every product of the step (None: the backend's
      default; a name of :data:`rumjax.core.precision.PRECISIONS`).

  Returns:
    ``((h_t, c_t, h_t @ attn_h), h~_t, s_t)``; on a padded step the carry keeps
    ``h~_{t-1}`` (so padding inside a sequence is skipped) and ``h_t, c_t`` are unspecified
    (they are never attended to).
  """
  xa_t, xg_t = x_t
  m_t, pos_t = aux_t
  valid_tape, pos_tape = const
  h_tape, c_tape, p_tape = tapes
  precision = resolve_precision(precision)
  mm = functools.partial(jnp.matmul, precision=precision)
  visible = visible_positions(k, valid_tape, pos_tape, pos_t, memory_span)
  s = attention_weights(p_tape, xa_t + mm(carry, params["attn_ht"]), params["attn_v"],
                        visible, precision=precision)                          # (4)-(5)
  h_tilde = summarize(s, h_tape, precision=precision)                         # (6)
  c_tilde = summarize(s, c_tape, precision=precision)
  h, c = lstmn_update(mm(h_tilde, params["gates_h"]) + xg_t, c_tilde)         # (7)-(9)
  new_carry = jnp.where(m_t[:, None], h_tilde, carry)
  return (h, c, mm(h, params["attn_h"])), new_carry, s


def tape_masks(mask: Array) -> tuple[tuple[Array, Array], tuple[Array, Array]]:
  """``const = (valid_tape, pos_tape)`` <[B, T+1]> and time-major ``aux = (m, pos)`` <[T, B]>
  for :func:`lstmn_step`, from ``mask`` <bool>[B, T]."""
  valid_tape = jnp.concatenate([jnp.ones((mask.shape[0], 1), mask.dtype), mask], axis=1)
  pos_tape = jnp.cumsum(valid_tape.astype(jnp.int32), axis=1) - 1
  return (valid_tape, pos_tape), (mask.T, pos_tape[:, 1:].T)


def initial_tape_entries(params: dict, initial, batch: int, dtype, *,
                         precision: Any = None) -> tuple:
  """``(h_0, c_0, h_0 @ attn_h)`` for tape position 0 (zeros unless ``initial``), the
  product at the matmul ``precision``."""
  nh = params["gates_h"].shape[0]
  if initial is None:
    h0 = c0 = jnp.zeros((batch, nh), dtype)
  else:
    h0, c0 = (jnp.asarray(a, dtype) for a in initial)
    for name, a in (("h0", h0), ("c0", c0)):
      if a.shape != (batch, nh):
        raise ValueError(f"initial {name} has shape {a.shape}; expected {(batch, nh)}.")
  return h0, c0, jnp.matmul(h0, params["attn_h"], precision=resolve_precision(precision))


def _prepare(params: dict, xs: Array, mask: Optional[Array], initial, extra: Sequence = ()):
  """Casts to one dtype, the :data:`BIASES` to at least float32 (added by ``add_bias``);
  returns ``(params, xs, mask, initial, dtype)``."""
  weights = [v for k, v in params.items() if k not in BIASES]
  dtype = jnp.result_type(xs, *weights, *jax.tree.leaves(initial), *jax.tree.leaves(extra))
  if not jnp.issubdtype(dtype, jnp.floating):
    dtype = jnp.promote_types(dtype, jnp.float32)
  cast = lambda tree: jax.tree.map(lambda a: jnp.asarray(a, dtype), tree)
  xs = cast(xs)
  if mask is None:
    mask = jnp.ones(xs.shape[:2], bool)
  mask = jnp.asarray(mask, bool)
  if mask.shape != xs.shape[:2]:
    raise ValueError(f"mask has shape {mask.shape}; xs {xs.shape} needs {xs.shape[:2]}.")
  return cast_weights(params, dtype, BIASES), xs, mask, cast(initial), dtype


@functools.partial(jax.jit, static_argnames=("memory_span", "impl", "return_attention",
                                             "precision"))
def _lstmn_scan(params, xs, mask, initial, *, memory_span, impl, return_attention,
                precision):
  params, xs, mask, initial, dtype = _prepare(params, xs, mask, initial)
  batch = xs.shape[0]
  mm = functools.partial(jnp.matmul, precision=precision)
  w = {k: params[k] for k in ("attn_h", "attn_ht", "attn_v", "gates_h")}
  xa = jnp.swapaxes(mm(xs, params["attn_x"]), 0, 1)                       # W_x x_t
  xg = jnp.swapaxes(add_bias(mm(xs, params["gates_x"]), params["gates_bias"]), 0, 1)  # (7)
  const, aux = tape_masks(mask)
  carry0 = jnp.zeros((batch, params["gates_h"].shape[0]), dtype)          # h~_0 = 0
  first = initial_tape_entries(params, initial, batch, dtype, precision=precision)
  step = functools.partial(lstmn_step, memory_span=memory_span, precision=precision)
  out = tape_scan(step, w, const, (xa, xg), aux, carry0, first, impl=impl,
                  return_extras=return_attention)
  (h_tape, c_tape, _), s = out if return_attention else (out, None)
  hs, cs = h_tape[:, 1:], c_tape[:, 1:]
  return (hs, cs, jnp.swapaxes(s, 0, 1)) if return_attention else (hs, cs)


def lstmn_scan(params: dict, xs: Array, *, mask: Optional[Array] = None,
               memory_span: Optional[int] = None, initial: Optional[tuple] = None,
               impl: str = "fast", return_attention: bool = False, precision: Any = None):
  """Runs the LSTMN (Cheng et al., 2016, eqs. (4)-(9)) over a batch of sequences.

  At step t = 1..T the intra-attention runs over tape positions 0..t-1. Position 0 holds
  ``h_0 = c_0 = 0`` (or ``initial``) and ``h~_0 = 0``, so step 1 attends only to that
  vector (``h~_1 = h_0``, ``c~_1 = c_0``), as in the authors' code.

  Args:
    params: the pinned layout (see the module docstring; :func:`init_lstmn_params`).
    xs: <float>[B, T, Nx].
    mask: <bool>[B, T], True at real tokens (right padding; None = all real). Padded
      positions are never attended to (score ``-inf`` before the softmax); the outputs at
      padded steps are unspecified (finite) and never reach a real position. Padded steps
      also keep ``h~`` unchanged, so any mask (left padding, holes) gives at the real
      positions exactly the outputs of the sequence with the padded tokens removed.
    memory_span: None (unlimited) or K >= 1: step t attends only to the K most recent real
      tape positions (position 0 counts as one until it falls out of the span).
    initial: None or ``(h_0, c_0)``, each <float>[B, Nh], written at tape position 0
      instead of zeros (``h~_0`` stays 0). A language model carries ``(hs[:, -1],
      cs[:, -1])`` of the previous window here, so the new window can attend to (a
      summary of) the past; it cannot see the previous window's other positions.
    impl: ``"fast"`` (default): hand-written backward pass, training memory O(T N);
      ``"reference"``: autodiff of the plain scan, O(T^2 N) (supports forward-mode AD).
      Same values and gradients.
    return_attention: also return the intra-attention weights ``s`` <float>[B, T, T + 1]
      (``s[b, t-1, i]``: the weight of tape position i at step t; position 0 = the
      initial vector); computed on the reference path.
    precision: the matmul precision of every product, forward and backward (Flax's
      ``precision=``: None or ``"default"``, the backend's default; ``"high"``,
      ``"highest"`` or a ``lax.Precision``; :data:`rumjax.core.precision.PRECISIONS`).
      The fast backward pass recomputes each step at the same precision.

  Returns:
    ``(hs, cs)``: the hidden and memory tapes ``h_1..h_T``, ``c_1..c_T``, each
    <float>[B, T, Nh]; with ``return_attention``, ``(hs, cs, s)``. jit-compiled.

  Example::

    >>> params = rumjax.init_lstmn_params(jax.random.key(0), nx=8, nh=32, na=16)
    >>> hs, cs = rumjax.lstmn_scan(params, jnp.ones((4, 10, 8)))
    >>> hs.shape, cs.shape
    ((4, 10, 32), (4, 10, 32))
  """
  if jnp.ndim(xs) != 3:
    raise ValueError(f"xs must have shape (B, T, Nx); got shape {jnp.shape(xs)}.")
  check_params(params, nx=jnp.shape(xs)[-1])
  params = {k: params[k] for k in PARAM_NAMES}
  memory_span = check_memory_span(memory_span)
  if impl not in IMPLS:
    raise ValueError(f"impl={impl!r} is unknown; accepted values are {list(IMPLS)}.")
  if initial is not None and (not isinstance(initial, (tuple, list)) or len(initial) != 2):
    raise ValueError("initial must be None or a pair (h0, c0), each <float>[B, Nh].")
  return _lstmn_scan(params, xs, mask, None if initial is None else tuple(initial),
                     memory_span=memory_span, impl=impl,
                     return_attention=bool(return_attention),
                     precision=resolve_precision(precision))

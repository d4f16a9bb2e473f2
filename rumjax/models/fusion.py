"""Two sequences with LSTMNs (Cheng, Dong, Lapata, EMNLP 2016, §4): shallow and deep fusion.

An LSTMN encoder reads the source ``x^s_1..x^s_m`` into its hidden tape ``Y = (g_1..g_m)``
and memory tape ``A = (a_1..a_m)``; a decoder reads the target ``x_1..x_T`` with
intra-attention over its own tapes (eqs. (4)-(9)) and inter-attention over the source.

**Shallow fusion** (Figure 3a; the paper gives no equations, this is our reading): the
decoder is an unchanged LSTMN ("a separate module ... in lieu of a standard RNN"), and the
inter-attention is triggered when it reads target token t, with its new state ``h_t`` as
the query, Bahdanau-style (additive) over the source hidden tape (the authors'
``decoder_attention.lua`` does the same with ``next_h``)::

    e_tj = u^T tanh(W_g g_j + W_h h_t)      alpha_t = softmax_j(e_t)     (source mask)
    z_t  = sum_j alpha_tj g_j                                            (context)
    o_t  = tanh(W_oz z_t + W_oh h_t + b_o)                               (output)

The context does not enter the recurrence (that is deep fusion); it is combined with
``h_t`` into the attentional output ``o_t`` (Luong et al.'s ``tanh(W_c [z_t; h_t])``, the
"readout" of Bahdanau et al.), which is what a classifier pools over the target.

**Deep fusion** (eqs. (11)-(16)): the decoder's memory update also stores the
inter-alignment. With ``g~_0 = 0``::

    b_j  = u^T tanh(W_g g_j + W_x x_t + W_g~ g~_{t-1})                  eq. (11)
    p    = softmax(b)                              (source padding: -inf) eq. (12)
    g~_t = sum_j p_j g_j,   a~_t = sum_j p_j a_j                          eq. (13)
    r_t  = sigmoid(W_r [g~_t, x_t])         (with a bias, as the gates)  eq. (14)
    c_t  = r_t * a~_t + f_t * c~_t + i_t * c^_t                           eq. (15)
    h_t  = o_t * tanh(c_t)                                                eq. (16)

where ``h~_t, c~_t`` and the gates ``i, f, o, c^`` (from ``[h~_t, x_t]``) are the
decoder's intra-attention of eqs. (4)-(8). The source tapes are the encoder's positions
1..m only (``A = [a_1..a_m]`` in the paper; the authors' code also offers the zero vector
at position 0); a source without any real token gives ``g~_t = a~_t = 0``. ``a~_t`` is
added to the target memory, so source and target hidden sizes are equal.

The decoder's tape position 0 holds zeros (as in the paper's LSTMN and the authors'
``LSTMN.lua``) or, with ``condition_on_source=True``, the encoder's last real ``(h, c)``
(the authors' ``main.lua`` does this, Rocktaschel et al.'s conditional encoding).
"""

import functools
from typing import Any, NamedTuple, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from rumjax.core import lstmn as lstmn_lib
from rumjax.core.attention import masked_softmax
from rumjax.core.precision import (add_bias, at_least_float32, cast_weights,
                                   resolve_precision)
from rumjax.models.lstmn import LSTMN

Array = jax.Array

DEEP_NAMES = ("inter_g", "inter_x", "inter_gt", "inter_u", "gate_r_g", "gate_r_x",
              "gate_r_bias")
SHALLOW_NAMES = ("inter_g", "inter_h", "inter_u", "out_ctx", "out_h", "out_bias")

_lecun = jax.nn.initializers.lecun_normal()
INITIALIZERS = {
    "inter_g": _lecun, "inter_x": _lecun, "inter_gt": _lecun, "inter_h": _lecun,
    "inter_u": lstmn_lib.attn_v_init, "gate_r_g": _lecun, "gate_r_x": _lecun,
    "gate_r_bias": jax.nn.initializers.zeros, "out_ctx": _lecun, "out_h": _lecun,
    "out_bias": jax.nn.initializers.zeros,
}


class FusionOutputs(NamedTuple):
  """What the fusion models return (all <float>[B, ., Nh]).

  Attributes:
    tgt_hs: the decoder's hidden tape ``h_1..h_T`` <[B, T, Nh]>.
    tgt_cs: the decoder's memory tape ``c_1..c_T``.
    src_hs: the encoder's hidden tape ``g_1..g_m`` <[B, M, Nh]>.
    src_cs: the encoder's memory tape ``a_1..a_m``.
    outputs: what a classifier reads over the target <[B, T, Nh]>: ``tgt_hs`` for deep
      fusion, the attentional outputs ``o_t`` for shallow fusion.
  """
  tgt_hs: Array
  tgt_cs: Array
  src_hs: Array
  src_cs: Array
  outputs: Array


def deep_param_shapes(nx: int, nh: int, na: int, nb: int) -> dict:
  """Shapes of the deep-fusion decoder: the LSTMN's plus eqs. (11) and (14)."""
  return {**lstmn_lib.param_shapes(nx, nh, na),
          "inter_g": (nh, nb), "inter_x": (nx, nb), "inter_gt": (nh, nb), "inter_u": (nb,),
          "gate_r_g": (nh, nh), "gate_r_x": (nx, nh), "gate_r_bias": (nh,)}


def shallow_param_shapes(nh: int, nb: int) -> dict:
  """Shapes of shallow fusion's inter-attention and output layer."""
  return {"inter_g": (nh, nb), "inter_h": (nh, nb), "inter_u": (nb,),
          "out_ctx": (nh, nh), "out_h": (nh, nh), "out_bias": (nh,)}


def _init(key, shapes, dtype):
  keys = jax.random.split(key, len(shapes))
  return {name: (lstmn_lib.INITIALIZERS.get(name) or INITIALIZERS[name])(k, shape, dtype)
          for (name, shape), k in zip(sorted(shapes.items()), keys)}


def init_deep_fusion_params(key: Array, nx: int, nh: int, na: int, nb: Optional[int] = None,
                            dtype=jnp.float32) -> dict:
  """Parameters of :func:`deep_fusion_scan` (``nb``, the inter-attention size, defaults
  to ``na``)."""
  return _init(key, deep_param_shapes(nx, nh, na, na if nb is None else nb), dtype)


def init_shallow_fusion_params(key: Array, nh: int, nb: int, dtype=jnp.float32) -> dict:
  """Parameters of :func:`shallow_fusion_outputs`."""
  return _init(key, shallow_param_shapes(nh, nb), dtype)


def _check(params: dict, shapes: dict, what: str) -> None:
  missing = sorted(set(shapes) - set(params))
  if missing:
    raise ValueError(f"{what}: params lack {missing}; expected keys {sorted(shapes)}.")
  for name, shape in shapes.items():
    if tuple(jnp.shape(params[name])) != tuple(shape):
      raise ValueError(f"{what}: params[{name!r}] has shape "
                       f"{tuple(jnp.shape(params[name]))}; expected {tuple(shape)}.")


def _source_mask(src_hs: Array, src_mask: Optional[Array]) -> Array:
  if src_mask is None:
    return jnp.ones(src_hs.shape[:2], bool)
  src_mask = jnp.asarray(src_mask, bool)
  if src_mask.shape != src_hs.shape[:2]:
    raise ValueError(f"src_mask has shape {src_mask.shape}; the source tapes "
                     f"{src_hs.shape} need {src_hs.shape[:2]}.")
  return src_mask


def last_state(hs: Array, cs: Array, mask: Optional[Array]) -> tuple[Array, Array]:
  """``(h, c)`` at each row's last real position, <float>[B, Nh] (zeros for empty rows)."""
  if mask is None:
    return hs[:, -1], cs[:, -1]
  mask = jnp.asarray(mask, bool)
  length = mask.shape[1]
  last = length - 1 - jnp.argmax(mask[:, ::-1], axis=1)
  any_real = jnp.any(mask, axis=1)[:, None]
  take = lambda a: jnp.where(any_real, jnp.take_along_axis(a, last[:, None, None], 1)[:, 0], 0)
  return take(hs), take(cs)


# -------------------------------------------------------------------- deep fusion


def deep_fusion_step(params: dict, const: tuple, x_t: tuple, aux_t: tuple, carry: tuple,
                     tapes: tuple, k: Array, *, memory_span: Optional[int] = None,
                     precision: Any = None):
  """One deep-fusion decoder step, eqs. (4)-(8) and (11)-(16), :func:`rumjax.core.lstmn.tape_scan`
  protocol.

  Args:
    params: recurrent weights (``attn_h, attn_ht, attn_v, gates_h, inter_gt, inter_u,
      gate_r_g``) and the source: ``src_hs`` ``Y`` <[B, M, Nh]>, ``src_cs`` ``A``,
      ``src_proj`` ``W_g Y`` <[B, M, Nb]>.
    const: ``(valid_tape, pos_tape, src_mask <bool>[B, M])``.
    x_t: the input projections ``(W_x x_t, gates, W_x' x_t (eq. 11), W_r x_t + b_r)``.
    aux_t: ``(m_t, pos_t)`` as in :func:`rumjax.core.lstmn.lstmn_step`.
    carry: ``(h~_{t-1}, g~_{t-1})``, kept unchanged over padded target steps.
    tapes: the target tapes ``(H, C, W_h H)``.
    k: the 0-based step index.
    memory_span: of the intra-attention.
    precision: the matmul precision of every product (None: the backend's default).

  Returns:
    ``((h_t, c_t, h_t @ attn_h), (h~_t, g~_t), (s_t, p_t))``.
  """
  xa_t, xg_t, xb_t, xr_t = x_t
  m_t, pos_t = aux_t
  valid_tape, pos_tape, src_mask = const
  ht_prev, gt_prev = carry
  h_tape, c_tape, p_tape = tapes
  precision = resolve_precision(precision)
  mm = functools.partial(jnp.matmul, precision=precision)
  att = functools.partial(lstmn_lib.attention_weights, precision=precision)
  summarize = functools.partial(lstmn_lib.summarize, precision=precision)
  visible = lstmn_lib.visible_positions(k, valid_tape, pos_tape, pos_t, memory_span)
  s = att(p_tape, xa_t + mm(ht_prev, params["attn_ht"]), params["attn_v"],
          visible)                                                             # (4)-(5)
  h_tilde = summarize(s, h_tape)                                               # (6)
  c_tilde = summarize(s, c_tape)
  p = att(params["src_proj"], xb_t + mm(gt_prev, params["inter_gt"]), params["inter_u"],
          src_mask)                                                            # (11)-(12)
  g_tilde = summarize(p, params["src_hs"])                                     # (13)
  a_tilde = summarize(p, params["src_cs"])
  r = jax.nn.sigmoid(mm(g_tilde, params["gate_r_g"]) + xr_t)                   # (14)
  h, c = lstmn_lib.lstmn_update(mm(h_tilde, params["gates_h"]) + xg_t, c_tilde,
                                r * a_tilde)                                   # (15)-(16)
  keep = m_t[:, None]
  new_carry = (jnp.where(keep, h_tilde, ht_prev), jnp.where(keep, g_tilde, gt_prev))
  return (h, c, mm(h, params["attn_h"])), new_carry, (s, p)


@functools.partial(jax.jit, static_argnames=("memory_span", "impl", "return_attention",
                                             "precision"))
def _deep_fusion_scan(params, src_hs, src_cs, src_mask, xs, mask, initial, *, memory_span,
                      impl, return_attention, precision):
  params, xs, mask, initial, dtype = lstmn_lib._prepare(params, xs, mask, initial,
                                                        (src_hs, src_cs))
  src_hs, src_cs = jnp.asarray(src_hs, dtype), jnp.asarray(src_cs, dtype)
  batch, nh = xs.shape[0], params["gates_h"].shape[0]
  names = ("attn_h", "attn_ht", "attn_v", "gates_h", "inter_gt", "inter_u", "gate_r_g")
  w = {k: params[k] for k in names}
  mm = functools.partial(jnp.matmul, precision=precision)
  w.update(src_hs=src_hs, src_cs=src_cs, src_proj=mm(src_hs, params["inter_g"]))  # W_g g_j
  tm = lambda a: jnp.swapaxes(a, 0, 1)
  x_proj = (tm(mm(xs, params["attn_x"])),
            tm(add_bias(mm(xs, params["gates_x"]), params["gates_bias"])),
            tm(mm(xs, params["inter_x"])),
            tm(add_bias(mm(xs, params["gate_r_x"]), params["gate_r_bias"])))
  (valid_tape, pos_tape), aux = lstmn_lib.tape_masks(mask)
  zeros = jnp.zeros((batch, nh), dtype)
  first = lstmn_lib.initial_tape_entries(params, initial, batch, dtype, precision=precision)
  step = functools.partial(deep_fusion_step, memory_span=memory_span, precision=precision)
  out = lstmn_lib.tape_scan(step, w, (valid_tape, pos_tape, src_mask), x_proj, aux,
                            (zeros, zeros), first, impl=impl,
                            return_extras=return_attention)
  (h_tape, c_tape, _), extras = out if return_attention else (out, None)
  hs, cs = h_tape[:, 1:], c_tape[:, 1:]
  if return_attention:
    return hs, cs, tm(extras[0]), tm(extras[1])
  return hs, cs


def deep_fusion_scan(params: dict, src_hs: Array, src_cs: Array, src_mask: Optional[Array],
                     xs: Array, *, mask: Optional[Array] = None,
                     initial: Optional[tuple] = None, memory_span: Optional[int] = None,
                     impl: str = "fast", return_attention: bool = False,
                     precision: Any = None):
  """The deep-fusion decoder (eqs. (4)-(8), (11)-(16)) over a target, given source tapes.

  Args:
    params: :func:`deep_param_shapes` layout: the LSTMN's pinned parameters plus
      ``inter_g (Nh, Nb)`` ``W_g``, ``inter_x (Nx, Nb)`` ``W_x`` of eq. (11),
      ``inter_gt (Nh, Nb)`` ``W_g~``, ``inter_u (Nb,)`` ``u``, ``gate_r_g (Nh, Nh)``,
      ``gate_r_x (Nx, Nh)``, ``gate_r_bias (Nh,)`` (``W_r`` of eq. (14) and its bias).
    src_hs: the source hidden tape ``Y`` <float>[B, M, Nh].
    src_cs: the source memory tape ``A`` <float>[B, M, Nh].
    src_mask: <bool>[B, M] real source tokens (None = all); the others get score -inf.
    xs: the target inputs <float>[B, T, Nx].
    mask: <bool>[B, T] real target tokens (as in :func:`rumjax.lstmn_scan`).
    initial: None or ``(h_0, c_0)`` for the target tape's position 0.
    memory_span: of the intra-attention (None = unlimited).
    impl: ``"fast"`` (O(T N) backward memory) or ``"reference"`` (autodiff).
    return_attention: also return the intra weights <[B, T, T + 1]> and the inter weights
      ``p`` <[B, T, M]> (reference path).
    precision: the matmul precision of every product, forward and backward (as
      :func:`rumjax.lstmn_scan`'s).

  Returns:
    ``(hs, cs)`` <float>[B, T, Nh] (and the two weight arrays with ``return_attention``).
  """
  if jnp.ndim(xs) != 3 or jnp.ndim(src_hs) != 3:
    raise ValueError(f"xs and src_hs must have shape (B, T, N); got {jnp.shape(xs)} and "
                     f"{jnp.shape(src_hs)}.")
  _, nh, na = lstmn_lib.check_params(params, nx=jnp.shape(xs)[-1], what="deep_fusion_scan")
  nb = jnp.shape(params.get("inter_u", ()))[0] if "inter_u" in params else -1
  shapes = deep_param_shapes(jnp.shape(xs)[-1], nh, na, nb)
  _check(params, shapes, "deep_fusion_scan")
  if jnp.shape(src_hs) != jnp.shape(src_cs) or jnp.shape(src_hs)[::2] != (xs.shape[0], nh):
    raise ValueError(
        f"src_hs {jnp.shape(src_hs)} and src_cs {jnp.shape(src_cs)} must both be "
        f"(B, M, Nh) = ({xs.shape[0]}, M, {nh}): a~_t is added to the target memory.")
  src_mask = _source_mask(src_hs, src_mask)
  memory_span = lstmn_lib.check_memory_span(memory_span)
  if impl not in lstmn_lib.IMPLS:
    raise ValueError(f"impl={impl!r} is unknown; accepted values are {list(lstmn_lib.IMPLS)}.")
  params = {k: params[k] for k in shapes}
  return _deep_fusion_scan(params, src_hs, src_cs, src_mask, xs, mask,
                           None if initial is None else tuple(initial),
                           memory_span=memory_span, impl=impl,
                           return_attention=bool(return_attention),
                           precision=resolve_precision(precision))


# ----------------------------------------------------------------- shallow fusion


def shallow_fusion_outputs(params: dict, src_hs: Array, src_mask: Optional[Array],
                           tgt_hs: Array, *, precision: Any = None) -> tuple[Array, Array]:
  """Shallow fusion's inter-attention and output layer (our reading, module docstring).

  ``e_tj = u^T tanh(W_g g_j + W_h h_t)``, ``alpha_t = softmax_j(e_t)`` over the real source
  tokens, ``z_t = sum_j alpha_tj g_j``, ``o_t = tanh(z_t @ out_ctx + h_t @ out_h + b)``.
  All target steps at once: O(B T M Nb) memory.

  Args:
    params: :func:`shallow_param_shapes` layout (``inter_g``, ``inter_h``, ``inter_u``,
      ``out_ctx``, ``out_h``, ``out_bias``).
    src_hs: the encoder's hidden tape <float>[B, M, Nh].
    src_mask: <bool>[B, M] (None = all real).
    tgt_hs: the decoder's hidden tape <float>[B, T, Nh].
    precision: the matmul precision of every product (None: the backend's default).

  Returns:
    ``(o, alpha)``: <float>[B, T, Nh] and the weights <float>[B, T, M].
  """
  nh = jnp.shape(tgt_hs)[-1]
  nb = jnp.shape(params.get("inter_u", (-1,)))[0]
  _check(params, shallow_param_shapes(nh, nb), "shallow_fusion_outputs")
  src_mask = _source_mask(src_hs, src_mask)
  precision = resolve_precision(precision)
  mm = functools.partial(jnp.matmul, precision=precision)
  keys = mm(src_hs, params["inter_g"])                                # [B, M, Nb]
  queries = mm(tgt_hs, params["inter_h"])                             # [B, T, Nb]
  scores = jnp.einsum("btma,a->btm", jnp.tanh(keys[:, None] + queries[:, :, None]),
                      params["inter_u"], precision=precision,
                      preferred_element_type=at_least_float32(keys, queries))
  # Scores and softmax in float32 (the precision policy); the weights in the tapes' dtype.
  alpha = masked_softmax(scores, src_mask[:, None, :]).astype(
      jnp.result_type(src_hs))
  context = jnp.einsum("btm,bmn->btn", alpha, src_hs, precision=precision)
  out = jnp.tanh(add_bias(mm(context, params["out_ctx"]) + mm(tgt_hs, params["out_h"]),
                          params["out_bias"]))
  return out, alpha


# ------------------------------------------------------------------------ modules


class _Fusion(nn.Module):
  """Fields shared by :class:`ShallowFusion` and :class:`DeepFusion`.

  Attributes:
    hidden_size: ``Nh`` of the encoder and the decoder.
    attn_size: ``Na`` of the intra-attentions.
    inter_size: ``Nb`` of the inter-attention (None: ``attn_size``).
    memory_span: of the intra-attentions (None = unlimited).
    condition_on_source: start the decoder's tape (position 0) from the encoder's last
      real ``(h, c)`` instead of zeros.
    impl, dtype, param_dtype, precision: as in :class:`rumjax.models.lstmn.LSTMN`.
  """
  hidden_size: int
  attn_size: int
  inter_size: Optional[int] = None
  memory_span: Optional[int] = None
  condition_on_source: bool = False
  impl: str = "fast"
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  precision: Any = None

  @property
  def nb(self) -> int:
    return self.attn_size if self.inter_size is None else self.inter_size

  def lstmn(self, name: str) -> LSTMN:
    return LSTMN(self.hidden_size, self.attn_size, memory_span=self.memory_span,
                 impl=self.impl, dtype=self.dtype, param_dtype=self.param_dtype,
                 precision=self.precision, name=name)

  def encode(self, src_x, src_mask):
    src_hs, src_cs = self.lstmn("encoder")(src_x, src_mask)
    initial = last_state(src_hs, src_cs, src_mask) if self.condition_on_source else None
    return src_hs, src_cs, initial

  def params_of(self, shapes: dict) -> dict:
    params = {name: self.param(name, INITIALIZERS[name], shape, self.param_dtype)
              for name, shape in shapes.items()}
    if self.dtype is not None:
      params = cast_weights(params, self.dtype, lstmn_lib.BIASES)
    return params


class ShallowFusion(_Fusion):
  """Shallow attention fusion (§4, Figure 3a): LSTMN encoder, LSTMN decoder, and
  inter-attention from each decoder state ``h_t`` over the source hidden tape.

  Submodules ``encoder`` and ``decoder`` (:class:`rumjax.models.lstmn.LSTMN`); own
  parameters ``inter_g``, ``inter_h``, ``inter_u``, ``out_ctx``, ``out_h``, ``out_bias``
  (:func:`shallow_fusion_outputs`). Fields: see ``_Fusion``.
  """

  @nn.compact
  def __call__(self, src_x: Array, src_mask: Optional[Array], tgt_x: Array,
               tgt_mask: Optional[Array] = None) -> FusionOutputs:
    """Reads the source, then the target.

    Args:
      src_x: <float>[B, M, Nx] source inputs (embeddings).
      src_mask: <bool>[B, M] real source tokens (None = all).
      tgt_x: <float>[B, T, Nx] target inputs.
      tgt_mask: <bool>[B, T] real target tokens (None = all).

    Returns:
      :class:`FusionOutputs`; ``outputs`` are the attentional vectors ``o_t``.
    """
    src_hs, src_cs, initial = self.encode(src_x, src_mask)
    tgt_hs, tgt_cs = self.lstmn("decoder")(tgt_x, tgt_mask, initial)
    params = self.params_of(shallow_param_shapes(self.hidden_size, self.nb))
    out, _ = shallow_fusion_outputs(params, src_hs, src_mask, tgt_hs,
                                    precision=self.precision)
    return FusionOutputs(tgt_hs, tgt_cs, src_hs, src_cs, out)


class DeepFusionDecoder(_Fusion):
  """The deep-fusion decoder (eqs. (11)-(16)) with the parameters of
  :func:`deep_fusion_scan` (the LSTMN's pinned names plus ``inter_*`` and ``gate_r_*``)."""

  @nn.compact
  def __call__(self, src_hs: Array, src_cs: Array, src_mask: Optional[Array], xs: Array,
               mask: Optional[Array] = None, initial: Optional[tuple] = None, *,
               return_attention: bool = False):
    """``(hs, cs)`` <float>[B, T, Nh] of the target (see :func:`deep_fusion_scan`)."""
    params = {}
    shapes = deep_param_shapes(xs.shape[-1], self.hidden_size, self.attn_size, self.nb)
    for name, shape in shapes.items():
      init = lstmn_lib.INITIALIZERS.get(name) or INITIALIZERS[name]
      params[name] = self.param(name, init, shape, self.param_dtype)
    if self.dtype is not None:
      cast = lambda a: jnp.asarray(a, self.dtype)
      src_hs, src_cs, xs = jax.tree.map(cast, (src_hs, src_cs, xs))
      params = cast_weights(params, self.dtype, lstmn_lib.BIASES)
    return deep_fusion_scan(params, src_hs, src_cs, src_mask, xs, mask=mask,
                            initial=initial, memory_span=self.memory_span, impl=self.impl,
                            return_attention=return_attention, precision=self.precision)


class DeepFusion(_Fusion):
  """Deep attention fusion (§4, Figure 3b): LSTMN encoder (submodule ``encoder``) and the
  deep-fusion decoder (submodule ``decoder``, :class:`DeepFusionDecoder`). Fields: see
  ``_Fusion``."""

  @nn.compact
  def __call__(self, src_x: Array, src_mask: Optional[Array], tgt_x: Array,
               tgt_mask: Optional[Array] = None) -> FusionOutputs:
    """Reads the source, then the target (arguments as :meth:`ShallowFusion.__call__`).

    Returns:
      :class:`FusionOutputs`; ``outputs`` is ``tgt_hs``.
    """
    src_hs, src_cs, initial = self.encode(src_x, src_mask)
    decoder = DeepFusionDecoder(self.hidden_size, self.attn_size, self.inter_size,
                                memory_span=self.memory_span, impl=self.impl,
                                dtype=self.dtype, param_dtype=self.param_dtype,
                                precision=self.precision, name="decoder")
    tgt_hs, tgt_cs = decoder(src_hs, src_cs, src_mask, tgt_x, tgt_mask, initial)
    return FusionOutputs(tgt_hs, tgt_cs, src_hs, src_cs, tgt_hs)

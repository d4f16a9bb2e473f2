"""The StarSaber layer (ICLR 2021 submission, "StarSaber": RNN -> attention via fixed points).

One layer ``l`` of StarSaber maps ``h^l`` to ``h^{l+1}`` (the model starts from
``h^0 = x``, §3.2, and stacks layers with their own weights)::

    g_ni = h_n^T W h_i / sqrt(d)                       (scaled bilinear score)    eq. (4)
    G_n  = softmax_i(g_n)                              over the real keys i       eq. (4)
    A_n  = sum_{i<n} G_ni U h_i + sum_{i>=n} G_ni Q h_i  (U: the past, Q: the rest) eq. (4)
    h^{l+1}_n = h^l_n + alpha tanh(A_n + V x_n)        (weighted residual)        eq. (5)

and the gated variant of the appendix (§5.1)::

    r_n = sigmoid(W_r A_n + V_r x_n),   i_n = sigmoid(W_i A_n + V_i x_n)         eq. (6)
    h^{l+1}_n = h^l_n + alpha tanh(r_n * A_n + i_n * (V x_n))                    eq. (6)

Two ablations are flags of the same function: ``directional=False`` is the PE variant of
§5.2 (one matrix ``U`` for every ``i``, no ``Q``; the model adds sinusoidal position
encodings to its input instead, which is not this function's business) and
``direct_path=False`` is §5.3 without direct paths (no ``V x_n`` term, no ``V``). The
split of ``A_n`` puts the query's own position ``i = n`` with ``Q`` (eq. (4): ``i >= n``).
As in the paper, there are no bias terms anywhere (§3.1: "we ignore all bias terms").

Parameter layout (kernels act from the right as in Flax: ``h @ U`` is ``U h``; all
``(d, d)``, ``d`` the hidden size, which is also the size of ``x``)::

    params = {"U": (d, d), "Q": (d, d), "V": (d, d), "W": (d, d), "alpha": (),
              # starsaber_gate_layer only:
              "W_r": (d, d), "V_r": (d, d), "W_i": (d, d), "V_i": (d, d)}

``directional=False`` drops ``"Q"``, ``direct_path=False`` drops ``"V"``. Keys that the
flags do not use are ignored.

Shapes: ``h, x`` <float>[B, T, d], ``mask`` <bool>[B, T] (True at real tokens, None = all
real), ``G`` <float>[B, T, T] indexed ``[b, n, i]`` (query n, key i).

Padding: padded keys get exactly zero attention weight (masked softmax; padded ``h_i`` are
also zeroed before use, so whatever they hold, even NaN, reaches no real position, in
values or gradients). A padded *query* row is computed like a real one from its own
``h_n, x_n`` over the real keys of its sequence (finite whenever its inputs are). A row
without any real token has ``G_n = 0`` and so ``A_n = 0``: ``h^{l+1}_n = h^l_n +
alpha tanh(V x_n)`` (eq. (6): ``h^l_n + alpha tanh(i_n * (V x_n))``), finite with finite
gradients.

Usage::

    params = init_starsaber_params(jax.random.key(0), d=64)
    h = x                                          # h^0 = x, <float>[B, T, 64]
    h = starsaber_layer(params, h, x, mask=mask)   # h^1; one params dict per layer
"""

import collections.abc
import math
from typing import Optional

import jax
import jax.numpy as jnp

from rumjax.core import initializers
from rumjax.core.attention import masked_softmax
from rumjax.core.precision import at_least_float32, scale

Array = jax.Array

PLAIN_NAMES = ("U", "Q", "V", "W", "alpha")
GATE_NAMES = ("W_r", "V_r", "W_i", "V_i")


# ------------------------------------------------------------ parameters, checks


def param_names(*, gate: bool = False, directional: bool = True,
                direct_path: bool = True) -> tuple:
  """The parameter names a layer with these flags reads (the order of ``PLAIN_NAMES``)."""
  if gate and not direct_path:
    raise ValueError("gate=True needs the direct path (eq. (6) gates i * (V x)); "
                     "direct_path=False is only defined for the plain layer.")
  names = tuple(n for n in PLAIN_NAMES
                if not (n == "Q" and not directional) and not (n == "V" and not direct_path))
  return names + (GATE_NAMES if gate else ())


def param_shapes(d: int, **flags) -> dict:
  """The pinned shapes ``{name: shape}`` for hidden size ``d`` (flags of ``param_names``)."""
  return {n: (() if n == "alpha" else (d, d)) for n in param_names(**flags)}


def init_starsaber_params(key: Array, d: int, *, gate: bool = False,
                          directional: bool = True, direct_path: bool = True,
                          alpha: float = 1.0, dtype=jnp.float32) -> dict:
  """StarSaber parameters of one layer in the pinned layout.

  Kernels are LeCun-normal (variance scaling 1/fan_in, truncated normal: Flax's default
  ``Dense`` kernel init); ``alpha`` starts at 1.0, as in the paper (§3.3: "we initialize it
  to be one since we find that it speeds up convergence"; ReZero uses 0).

  Args:
    key: a PRNG key.
    d: the hidden size (also the size of ``x``).
    gate: add ``W_r, V_r, W_i, V_i`` for :func:`starsaber_gate_layer` (eq. (6)).
    directional: False: the PE variant of §5.2, no ``"Q"``.
    direct_path: False: §5.3 without direct paths, no ``"V"``.
    alpha: the initial residual weight.
    dtype: parameter dtype.

  Returns:
    ``{name: array}`` with the shapes of :func:`param_shapes`.
  """
  initializers.check_sizes(d=d)
  shapes = param_shapes(d, gate=gate, directional=directional, direct_path=direct_path)
  kernel_init = jax.nn.initializers.lecun_normal()
  keys = jax.random.split(key, len(shapes))
  return {name: (jnp.asarray(alpha, dtype) if name == "alpha"
                 else kernel_init(k, shape, dtype))
          for (name, shape), k in zip(shapes.items(), keys)}


def check_params(params, d: int, names, what: str) -> None:
  """Raises a one-line ValueError if ``params`` lacks one of ``names`` or has a wrong shape."""
  if not isinstance(params, collections.abc.Mapping):
    raise ValueError(f"{what}: params must be a dict with keys {list(names)}; got "
                     f"{type(params).__name__}.")
  missing = [name for name in names if name not in params]
  if missing:
    raise ValueError(
        f"{what}: params lacks key {missing[0]!r} (needed keys: {list(names)}; got "
        f"{sorted(params)}); rumjax.init_starsaber_params(key, d, ...) creates them.")
  for name in names:
    shape = tuple(jnp.shape(params[name]))
    expected = () if name == "alpha" else (d, d)
    if shape != expected:
      raise ValueError(f"{what}: params[{name!r}] has shape {shape}; expected {expected} "
                       f"(d={d}, the last axis of h).")


def _check_inputs(h, x, mask, what: str):
  if jnp.ndim(h) != 3:
    raise ValueError(f"{what}: h must be <float>[B, T, d]; got shape {jnp.shape(h)}.")
  if x is not None and jnp.shape(x) != jnp.shape(h):
    raise ValueError(f"{what}: x has shape {jnp.shape(x)} but h has shape {jnp.shape(h)}; "
                     "they must be equal (<float>[B, T, d]).")
  if mask is not None and jnp.shape(mask) != jnp.shape(h)[:2]:
    raise ValueError(f"{what}: mask has shape {jnp.shape(mask)}; expected <bool>[B, T] = "
                     f"{jnp.shape(h)[:2]}.")


# ------------------------------------------------------------------- the layer


def attention_weights(params: dict, h: Array, *, mask: Optional[Array] = None) -> Array:
  """``G_ni = softmax_i(h_n^T W h_i / sqrt(d))`` over the real keys ``i`` (eq. (4)).

  Args:
    params: at least ``{"W": (d, d)}``.
    h: <float>[B, T, d] the layer's input ``h^l``.
    mask: <bool>[B, T], True at real tokens (None = all real).

  Returns:
    ``G`` <float>[B, T, T] indexed ``[b, n, i]``; each row sums to 1 over the real keys
    and is 0 at padded keys (a row of a sequence without real tokens is all 0).
  """
  _check_inputs(h, None, mask, "attention_weights")
  check_params(params, h.shape[-1], ("W",), "attention_weights")
  return _attention(params["W"], h, mask)[0]


def _attention(w: Array, h: Array, mask: Optional[Array]) -> tuple[Array, Array]:
  """``(G, h_keys)``: the weights and ``h`` with padded positions zeroed (the keys)."""
  d = h.shape[-1]
  if mask is None:
    valid = jnp.ones(h.shape[:2], bool)
    keys = h
  else:
    valid = jnp.asarray(mask).astype(bool)
    keys = jnp.where(valid[..., None], h, jnp.zeros((), h.dtype))
  # The scores and the softmax in float32 (or wider), the weights in h's dtype: the
  # precision policy (rumjax.models.precision).
  acc = at_least_float32(h, w)
  scores = jnp.einsum("bnd,bid->bni", h @ w, keys, preferred_element_type=acc) / math.sqrt(d)
  return masked_softmax(scores, valid[:, None, :]).astype(jnp.result_type(h, w)), keys


def _attention_vector(params: dict, h: Array, mask: Optional[Array],
                      directional: bool) -> Array:
  """``A`` <float>[B, T, d] of eq. (4) (with one matrix ``U`` if not ``directional``)."""
  g, keys = _attention(params["W"], h, mask)
  if not directional:
    return jnp.einsum("bni,bid->bnd", g, keys @ params["U"])
  t = h.shape[1]
  past = jnp.tril(jnp.ones((t, t), g.dtype), k=-1)     # [n, i]: 1 where i < n
  return (jnp.einsum("bni,bid->bnd", g * past, keys @ params["U"])
          + jnp.einsum("bni,bid->bnd", g * (1 - past), keys @ params["Q"]))


def starsaber_layer(params: dict, h: Array, x: Array, *, mask: Optional[Array] = None,
                    directional: bool = True, direct_path: bool = True) -> Array:
  """One StarSaber layer, eqs. (4)-(5): ``h^{l+1} = h^l + alpha tanh(A + V x)``.

  Args:
    params: ``{"U", "Q", "V", "W": (d, d), "alpha": ()}`` (no ``"Q"`` if not
      ``directional``, no ``"V"`` if not ``direct_path``; other keys are ignored).
    h: <float>[B, T, d] the layer's input ``h^l``.
    x: <float>[B, T, d] the model's input sequence (the direct path ``V x``).
    mask: <bool>[B, T], True at real tokens (None = all real). See the module docstring
      for what padded and fully padded rows hold.
    directional: False: the PE variant of §5.2, ``A_n = sum_i G_ni U h_i``.
    direct_path: False: §5.3, ``h^{l+1} = h^l + alpha tanh(A)`` (``x`` is unused).

  Returns:
    ``h^{l+1}`` <float>[B, T, d].
  """
  what = "starsaber_layer"
  _check_inputs(h, x, mask, what)
  check_params(params, h.shape[-1],
               param_names(directional=directional, direct_path=direct_path), what)
  pre = _attention_vector(params, h, mask, directional)
  if direct_path:
    pre = pre + x @ params["V"]
  return h + scale(jnp.tanh(pre), params["alpha"])


def starsaber_gate_layer(params: dict, h: Array, x: Array, *, mask: Optional[Array] = None,
                         directional: bool = True) -> Array:
  """One gated StarSaber layer, appendix eq. (6).

  ``h^{l+1} = h^l + alpha tanh(r * A + i * (V x))`` with ``r = sigmoid(A W_r + x V_r)``,
  ``i = sigmoid(A W_i + x V_i)`` and ``A`` of eq. (4).

  Args:
    params: the keys of :func:`starsaber_layer` plus ``"W_r", "V_r", "W_i", "V_i"``
      (all (d, d)); no ``"Q"`` if not ``directional``.
    h: <float>[B, T, d] the layer's input ``h^l``.
    x: <float>[B, T, d] the model's input sequence.
    mask: <bool>[B, T], True at real tokens (None = all real).
    directional: False: one matrix ``U`` for every key (as in §5.2).

  Returns:
    ``h^{l+1}`` <float>[B, T, d].
  """
  what = "starsaber_gate_layer"
  _check_inputs(h, x, mask, what)
  check_params(params, h.shape[-1], param_names(gate=True, directional=directional), what)
  a = _attention_vector(params, h, mask, directional)
  r = jax.nn.sigmoid(a @ params["W_r"] + x @ params["V_r"])
  i = jax.nn.sigmoid(a @ params["W_i"] + x @ params["V_i"])
  return h + scale(jnp.tanh(r * a + i * (x @ params["V"])), params["alpha"])

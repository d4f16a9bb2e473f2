"""Flax modules of the LSTMN (Cheng, Dong, Lapata, EMNLP 2016): one layer and a stack.

``LSTMN`` owns the pinned parameters of :func:`rumjax.lstmn_scan` (``attn_h``, ``attn_x``,
``attn_ht``, ``attn_v``, ``gates_x``, ``gates_h``, ``gates_bias``), so
``LSTMN(...).apply({"params": p}, xs)`` equals ``rumjax.lstmn_scan(p, xs)``.
``StackedLSTMN`` feeds layer k's hidden tape to layer k + 1 (eq. (10)), optionally with
the input concatenated (skip connections) and dropout between layers.

Not registered as models: the task helpers build classifiers and language models on top
(e.g. mean-pooled ``hs`` under the mask, as in §5.3).
"""

from typing import Any, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from rumjax.core import lstmn as lstmn_lib
from rumjax.core.precision import cast_weights
from rumjax.cells.base import check_probability

Array = jax.Array


class LSTMN(nn.Module):
  """One LSTMN layer over a whole sequence (eqs. (4)-(9)) through :func:`rumjax.lstmn_scan`.

  Attributes:
    hidden_size: ``Nh``, the size of ``h_t`` and of the memory ``c_t``.
    attn_size: ``Na``, the size of the intra-attention's hidden layer (``v`` in eq. (4)).
    memory_span: None (unlimited) or the number of most recent tape positions attended to.
    impl: ``"fast"`` (O(T N) training memory) or ``"reference"`` (plain autodiff).
    dtype: computation dtype (None: promote inputs and parameters).
    param_dtype: parameter dtype.
    precision: the matmul precision of every product, forward and backward (None: the
      backend's default; ``lstmn_scan``'s ``precision``).
  """
  hidden_size: int
  attn_size: int
  memory_span: Optional[int] = None
  impl: str = "fast"
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  precision: Any = None

  @nn.compact
  def __call__(self, xs: Array, mask: Optional[Array] = None,
               initial: Optional[tuple] = None, *, return_attention: bool = False):
    """Runs the layer.

    Args:
      xs: <float>[B, T, Nx].
      mask: <bool>[B, T], True at real tokens (None = all real); see ``lstmn_scan``.
      initial: None or ``(h_0, c_0)`` <float>[B, Nh] for tape position 0 (e.g. the last
        state of the previous window of a language model).
      return_attention: also return the intra-attention weights <float>[B, T, T + 1].

    Returns:
      ``(hs, cs)`` <float>[B, T, Nh] (and the weights with ``return_attention``).
    """
    shapes = lstmn_lib.param_shapes(xs.shape[-1], self.hidden_size, self.attn_size)
    params = {name: self.param(name, lstmn_lib.INITIALIZERS[name], shapes[name],
                               self.param_dtype)
              for name in lstmn_lib.PARAM_NAMES}
    if self.dtype is not None:
      xs = jnp.asarray(xs, self.dtype)
      params = cast_weights(params, self.dtype, lstmn_lib.BIASES)
      initial = None if initial is None else tuple(jnp.asarray(a, self.dtype)
                                                   for a in initial)
    return lstmn_lib.lstmn_scan(params, xs, mask=mask, memory_span=self.memory_span,
                                initial=initial, impl=self.impl,
                                return_attention=return_attention,
                                precision=self.precision)


class StackedLSTMN(nn.Module):
  """``num_layers`` LSTMN layers; layer k + 1 reads layer k's hidden tape (eq. (10)).

  Layer k + 1's input at step t is ``h^k_t`` (so its attention query is
  ``W_l h^k_t + W_h~ h~^{k+1}_{t-1}`` and its gates read ``[h~^{k+1}_t, h^k_t]``), with
  ``skip_input`` the concatenation ``[h^k_t, x_t]`` (skip connections, Graves 2013). The
  layers are submodules ``layer_0`` (bottom) .. ``layer_{L-1}``, each with the parameters
  of :class:`LSTMN`.

  Attributes:
    num_layers: L >= 1.
    hidden_size: ``Nh`` of every layer.
    attn_size: ``Na`` of every layer.
    skip_input: feed ``x_t`` to every upper layer as well.
    dropout_rate: dropout on ``h^k`` before layer k + 1 reads it (not on ``x`` nor on the
      top layer's output; the ``"dropout"`` RNG).
    memory_span, impl, dtype, param_dtype, precision: as in :class:`LSTMN`, for every
      layer.
    deterministic: evaluation mode (no dropout); overridden by the call argument.
  """
  num_layers: int
  hidden_size: int
  attn_size: int
  skip_input: bool = False
  dropout_rate: float = 0.0
  memory_span: Optional[int] = None
  impl: str = "fast"
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  deterministic: bool = True
  precision: Any = None

  @nn.compact
  def __call__(self, xs: Array, mask: Optional[Array] = None,
               initial: Optional[Sequence[Optional[tuple]]] = None, *,
               deterministic: Optional[bool] = None, return_all: bool = False):
    """Runs the stack.

    Args:
      xs: <float>[B, T, Nx].
      mask: <bool>[B, T], True at real tokens (the same for every layer).
      initial: None or one entry per layer, each None or ``(h_0, c_0)`` <float>[B, Nh].
      deterministic: evaluation mode (default: the attribute).
      return_all: return every layer's ``(hs, cs)``, bottom first (a language model
        carries each layer's last state).

    Returns:
      The top layer's ``(hs, cs)`` <float>[B, T, Nh], or with ``return_all`` a list of
      ``num_layers`` such pairs.
    """
    if self.num_layers < 1:
      raise ValueError(f"num_layers={self.num_layers!r} must be >= 1.")
    check_probability("dropout_rate", self.dropout_rate)
    deterministic = self.deterministic if deterministic is None else deterministic
    initial = [None] * self.num_layers if initial is None else list(initial)
    if len(initial) != self.num_layers:
      raise ValueError(f"initial has {len(initial)} entries for {self.num_layers} layers.")
    outputs, inputs = [], xs
    for k in range(self.num_layers):
      if k > 0:
        inputs = nn.Dropout(self.dropout_rate, deterministic=deterministic,
                            name=f"dropout_{k}")(outputs[-1][0])
        if self.skip_input:
          inputs = jnp.concatenate([inputs, jnp.asarray(xs, inputs.dtype)], axis=-1)
      layer = LSTMN(self.hidden_size, self.attn_size, memory_span=self.memory_span,
                    impl=self.impl, dtype=self.dtype, param_dtype=self.param_dtype,
                    precision=self.precision, name=f"layer_{k}")
      outputs.append(layer(inputs, mask, initial[k]))
    return outputs if return_all else outputs[-1]


class LSTMNCore(nn.Module):
  """A :class:`StackedLSTMN` as the recurrent core of a language model (LSTMN §5.1).

  It runs a whole window at once (``whole_sequence``: :func:`rumjax.models.sequence.
  run_recurrence` calls it instead of scanning a cell), and its carry is every layer's
  last ``(h_T, c_T)``: the next window's tapes start with that state at position 0 (see
  ``initial`` of :func:`rumjax.lstmn_scan`). So within a window of T tokens each step
  attends to the window's earlier positions and to the carried state; what lies further
  back reaches it only through that state. (The paper's "memory size 300" is the size of
  ``h`` and ``c``, not a span.)

  Attributes:
    features: ``Nh``, the hidden size of every layer (300 in the paper).
    num_layers: 1 or 3 in the paper's Table 1.
    attn_size: the intra-attention size (default: ``features``).
    dropout_rate: dropout between layers.
    memory_span: None (the whole window) or the most recent positions attended to.
    deterministic: evaluation mode (set by ``run_recurrence`` from ``train``).
    dtype, param_dtype, precision: the precision policy of the stack (:class:`LSTMN`);
      the carry stays float32 (:mod:`rumjax.models.precision`).
  """
  features: int
  num_layers: int = 1
  attn_size: Optional[int] = None
  dropout_rate: float = 0.0
  memory_span: Optional[int] = None
  deterministic: bool = True
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  precision: Any = None
  whole_sequence = True  # a class attribute, not a field

  def initialize_carry(self, rng, input_shape):
    """Zeros ``((h, c),) * num_layers``, each <float32>[batch, features]."""
    del rng
    shape = tuple(input_shape[:-1]) + (self.features,)
    # Distinct arrays: the loop donates the carried state, and a buffer may be donated once.
    return tuple((jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32))
                 for _ in range(self.num_layers))

  @nn.compact
  def __call__(self, xs: Array, initial_carry=None, return_carry: bool = False):
    """``hs`` <float>[B, T, features] of the top layer (and the new carry first with
    ``return_carry``, like ``nn.RNN``)."""
    if initial_carry is None:
      initial_carry = self.initialize_carry(None, xs.shape)
    stack = StackedLSTMN(self.num_layers, self.features, self.attn_size or self.features,
                         dropout_rate=self.dropout_rate, memory_span=self.memory_span,
                         deterministic=self.deterministic, dtype=self.dtype,
                         param_dtype=self.param_dtype, precision=self.precision,
                         name="stack")
    layers = stack(xs, None, list(initial_carry), return_all=True)
    carry = tuple((hs[:, -1], cs[:, -1]) for hs, cs in layers)
    leaves, treedef = jax.tree.flatten(carry)   # in the initial carry's dtype (float32)
    carry = jax.tree.unflatten(treedef, [jnp.asarray(c, jnp.result_type(c0)) for c, c0 in
                                         zip(leaves, jax.tree.leaves(initial_carry))])
    hs = layers[-1][0]
    return (carry, hs) if return_carry else hs

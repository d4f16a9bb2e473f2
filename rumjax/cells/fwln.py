"""``FWLNCell``: fast weights with layer normalisation (Ba et al., 2016a).

Ba, Hinton, Mnih, Leibo, Ionescu (2016), "Using Fast Weights to Attend to the Recent
Past", NeurIPS, section 3. A ReLU RNN whose hidden state also reads a fast associative
memory ``A`` (an outer-product memory of recent hidden states) in an inner loop::

    A_t       = lambda A_{t-1} + eta h_{t-1} h_{t-1}^T            fast weights
    h_0       = f(W h_{t-1} + C x_t + b)                          preliminary vector
    h_{s+1}   = f(LN(W h_{t-1} + C x_t + b + A_t h_s)),  s = 0..S-1
    h_t       = h_S

(Ba et al. write ``A(t) = lambda A(t-1) + eta h(t) h(t)^T`` and compute ``h(t+1)``: the
same recurrence, indexed one step earlier.) The sustained boundary condition
``W h_{t-1} + C x_t`` is computed once per step; ``LN`` has a learned gain and bias.
The carry is ``(A, h)``, A <float>[..., N, N]; ``A_0 = 0``, ``h_0 = 0``.
"""

from typing import Any, Callable, Optional, Union

import flax.linen as nn
import jax.numpy as jnp

from rumjax.core import rum as rum_lib
from rumjax.core.precision import add_bias
from rumjax.cells.base import RecurrentCell, matmul, promote, resolve_precision
from rumjax.cells.registry import register_cell


def scaled_identity(scale: float):
  """Initializer ``scale * I`` (Ba et al. start the slow recurrent matrix at 0.05 I)."""

  def init(key, shape, dtype=jnp.float32):
    del key
    return scale * jnp.eye(shape[0], shape[1], dtype=dtype)

  return init


def check_inner_steps(inner_steps: int) -> int:
  if inner_steps < 1:
    raise ValueError(f"inner_steps={inner_steps!r} must be >= 1.")
  return inner_steps


def fwln_step(params, carry, inputs, *, ln: Callable, decay: float = 0.95,
              fast_lr: float = 0.5, inner_steps: int = 1,
              activation: Union[str, Callable] = "relu", dtype: Optional[object] = None,
              precision: Any = None):
  """One FW-LN step (the module docstring's equations) as a pure function.

  The one source of the equations: :class:`FWLNCell` (Linen) and ``rumjax.nnx.FWLNCell``
  both call it.

  Args:
    params: ``{"kernel_h", "kernel_x", "bias"}`` as :class:`FWLNCell` stores them.
    carry: ``(A_{t-1}, h_{t-1})``, <float>[..., N, N] and <float>[..., N].
    inputs: ``x_t`` <float>[..., N_x].
    ln: the layer norm ``LN`` of the inner loop (the cell's ``ln``), a callable.
    decay, fast_lr, inner_steps, activation: ``lambda``, ``eta``, ``S``, ``f``.
    dtype: the computation dtype (``None``: promotion of the inputs, ``kernel_x`` and
      the carry).
    precision: the matmul precision of ``W h``, ``C x`` and ``A h`` (None: the backend's
      default; a name of :data:`rumjax.core.precision.PRECISIONS` or a ``lax.Precision``).

  Returns:
    ``((A_t, h_t), h_t)``.
  """
  check_inner_steps(inner_steps)
  f = rum_lib.get_activation(activation)
  precision = resolve_precision(precision)
  inputs, (a_prev, h_prev), (kernel_h, kernel_x) = promote(
      dtype, inputs, params["kernel_x"], carry, params["kernel_h"], params["kernel_x"])
  boundary = add_bias(matmul(h_prev, kernel_h, precision)
                      + matmul(inputs, kernel_x, precision), params["bias"])
  a = decay * a_prev + fast_lr * (h_prev[..., :, None] * h_prev[..., None, :])
  h = f(boundary)
  for _ in range(inner_steps):
    h = f(ln(boundary + jnp.einsum("...ij,...j->...i", a, h, precision=precision)))
  return (a, h), h


@register_cell("fwln")
class FWLNCell(RecurrentCell):
  """Fast weights RNN with layer normalisation in the inner loop (FW-LN).

  Parameters: ``kernel_h`` (``W^T``) <float>[N, N], ``kernel_x`` (``C^T``) <float>[N_x, N],
  ``bias`` <float>[N], ``ln`` {``scale``, ``bias``} <float>[N]: ``N^2 + N_x N + 3 N``.
  The fast weights ``A`` are state, not parameters.

  Example::

      rnn = nn.RNN(FWLNCell(50, decay=0.95, fast_lr=0.5))

  Attributes:
    features: the hidden size ``N``.
    decay: ``lambda``, the decay of the fast weights.
    fast_lr: ``eta``, the fast learning rate.
    inner_steps: ``S``, the number of inner-loop iterations (``S = 1`` in the paper).
    activation: ``f``: "relu" (the paper) or "tanh", ... (names of ``rumjax.ACTIVATIONS``)
      or a callable.
  """
  features: int
  decay: float = 0.95
  fast_lr: float = 0.5
  inner_steps: int = 1
  activation: Union[str, Callable] = "relu"
  kernel_h_init: Callable = scaled_identity(0.05)
  kernel_x_init: Callable = nn.initializers.glorot_uniform()
  bias_init: Callable = nn.initializers.zeros_init()

  @nn.compact
  def __call__(self, carry, inputs):
    """One step.

    Args:
      carry: ``(A_{t-1}, h_{t-1})``, <float>[..., N, N] and <float>[..., N].
      inputs: ``x_t`` <float>[..., N_x].

    Returns:
      ``((A_t, h_t), h_t)``.
    """
    check_inner_steps(self.inner_steps)
    rum_lib.get_activation(self.activation)
    n = self.features
    kernel_h = self.param("kernel_h", self.kernel_h_init, (n, n), self.param_dtype)
    kernel_x = self.param("kernel_x", self.kernel_x_init, (inputs.shape[-1], n),
                          self.param_dtype)
    bias = self.param("bias", self.bias_init, (n,), self.param_dtype)
    ln = nn.LayerNorm(dtype=self.dtype, param_dtype=self.param_dtype, name="ln")
    return fwln_step(dict(kernel_h=kernel_h, kernel_x=kernel_x, bias=bias), carry, inputs,
                     ln=ln, decay=self.decay, fast_lr=self.fast_lr,
                     inner_steps=self.inner_steps, activation=self.activation,
                     dtype=self.dtype, precision=self.precision)

  @nn.nowrap
  def initialize_carry(self, rng, input_shape):
    """``(A_0, h_0) = (0, 0)`` for inputs of shape ``(..., N_x)``."""
    a_shape = tuple(input_shape[:-1]) + (self.features, self.features)
    return jnp.zeros(a_shape, self.carry_dtype), self.hidden_carry(rng, input_shape)

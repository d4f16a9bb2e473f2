"""``LNLSTMCell``: LSTM with layer normalisation and zoneout.

The LSTM of the Fast-Slow RNN on character-level Penn Treebank (Mujika, Meier, Steger,
2017; and the RUM authors' FS-RUM-2 / LN-LSTM baseline): layer normalisation (Ba, Kiros,
Hinton, 2016) of each gate's pre-activation and of the cell state, and zoneout (Krueger
et al., 2017) of the hidden and cell states::

    (i, g, f, o) = LN_gates(W_x x_t + W_h h_{t-1})       one LN (gain, bias) per gate
    c_t = sigmoid(f + forget_bias) * c_{t-1} + sigmoid(i) * tanh(g)
    h_t = sigmoid(o) * tanh(LN_c(c_t))

The gate pre-activation (input and recurrent terms summed) is normalised gate by gate,
over the ``N`` units of that gate; the LN bias plays the role of the usual LSTM bias.
Zoneout, training (``deterministic=False``): each unit of ``h`` (``c``) keeps its previous
value with probability ``zoneout`` (``zoneout_c``); evaluation uses the expectation
``p * previous + (1 - p) * new``. The FS-RNN uses ``zoneout=0.1``, ``zoneout_c=0.5``.
"""

import functools
from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from rumjax.cells.base import RecurrentCell, check_probability, matmul, promote, zoneout
from rumjax.cells.registry import register_cell
from rumjax.core.initializers import in_float32


def lnlstm_step(params, carry, inputs, *, ln_gates: Callable, ln_c: Callable,
                forget_bias: float = 1.0, zoneout_h: float = 0.0, zoneout_c: float = 0.0,
                deterministic: bool = True, rng_source: Any = None,
                dtype: Optional[Any] = None, precision: Any = None):
  """One LN-LSTM step (the module docstring's equations, with zoneout) as a pure function.

  The one source of the equations: :class:`LNLSTMCell` (Linen) and
  ``rumjax.nnx.LNLSTMCell`` both call it.

  Args:
    params: ``{"kernel_x", "kernel_h"}`` as :class:`LNLSTMCell` stores them.
    carry: ``(c_{t-1}, h_{t-1})``, each <float>[..., N].
    inputs: ``x_t`` <float>[..., N_x].
    ln_gates: ``LN_gates``, a callable on <float>[..., 4, N] (one gain and bias per gate).
    ln_c: ``LN_c``, a callable on <float>[..., N].
    forget_bias: added to the normalised forget-gate pre-activation.
    zoneout_h, zoneout_c: zoneout probabilities of ``h`` and ``c``.
    deterministic: evaluation mode for zoneout (expectation instead of masks).
    rng_source: an object whose ``make_rng("dropout")`` draws the zoneout masks' keys
      (the Linen cell itself); needed only with zoneout in training.
    dtype: the computation dtype (``None``: promotion of the inputs, ``kernel_x`` and
      the carry).
    precision: the matmul precision of ``W x_t`` and ``U h_{t-1}`` (None: the backend's
      default; a name of :data:`rumjax.core.precision.PRECISIONS` or a ``lax.Precision``).

  Returns:
    ``((c_t, h_t), h_t)``.
  """
  n = params["kernel_h"].shape[0]
  inputs, (c_prev, h_prev), (kernel_x, kernel_h) = promote(
      dtype, inputs, params["kernel_x"], carry, params["kernel_x"], params["kernel_h"])
  z = matmul(inputs, kernel_x, precision) + matmul(h_prev, kernel_h, precision)
  z = ln_gates(z.reshape(z.shape[:-1] + (4, n)))
  i, g, f, o = (z[..., k, :] for k in range(4))
  c = jax.nn.sigmoid(f + forget_bias) * c_prev + jax.nn.sigmoid(i) * jnp.tanh(g)
  h = jax.nn.sigmoid(o) * jnp.tanh(ln_c(c))
  c = zoneout(rng_source, zoneout_c, c_prev, c, deterministic=deterministic)
  h = zoneout(rng_source, zoneout_h, h_prev, h, deterministic=deterministic)
  return (c, h), h


@register_cell("lnlstm")
class LNLSTMCell(RecurrentCell):
  """LSTM with layer-normalised gates and cell state, and zoneout.

  Parameters: ``kernel_x`` <float>[N_x, 4 N], ``kernel_h`` <float>[N, 4 N] (columns
  ``[i | g | f | o]``), ``ln_gates`` {``scale``, ``bias``} <float>[4, N], ``ln_c``
  {``scale``, ``bias``} <float>[N]: ``4 N_x N + 4 N^2 + 10 N`` in all.

  The carry is ``(c, h)`` as for ``nn.LSTMCell``. Under ``nn.RNN`` with zoneout in
  training pass ``split_rngs={"params": False, "dropout": True}`` so the masks differ
  per step.

  Example::

      rnn = nn.RNN(LNLSTMCell(1000, zoneout=0.1, zoneout_c=0.5, deterministic=False),
                   split_rngs={"params": False, "dropout": True})

  Attributes:
    features: the hidden size ``N``.
    forget_bias: added to the normalised forget-gate pre-activation.
    zoneout: zoneout probability of the hidden state ``h``.
    zoneout_c: zoneout probability of the cell state ``c``.
    deterministic: evaluation mode for zoneout (expectation instead of masks).
    epsilon: added to the variance in both layer norms. Flax's 1e-6 by default (every run
      in RESULTS.md); the authors' ``LN_LSTMCell`` uses 1e-3 (``epsilon=1e-3`` gives their
      function; they also add a 4N bias, initialised at 0, before the gates' layer norm,
      which this cell has not: ``ln_gates``' own bias plays that role after the norm).
  """
  features: int
  forget_bias: float = 1.0
  zoneout: float = 0.0
  zoneout_c: float = 0.0
  deterministic: bool = True
  epsilon: float = 1e-6
  kernel_x_init: Callable = in_float32(nn.initializers.orthogonal())
  kernel_h_init: Callable = in_float32(nn.initializers.orthogonal())

  @nn.compact
  def __call__(self, carry, inputs):
    """One step.

    Args:
      carry: ``(c_{t-1}, h_{t-1})``, each <float>[..., N].
      inputs: ``x_t`` <float>[..., N_x].

    Returns:
      ``((c_t, h_t), h_t)``.
    """
    check_probability("zoneout", self.zoneout)
    check_probability("zoneout_c", self.zoneout_c)
    n = self.features
    kernel_x = self.param("kernel_x", self.kernel_x_init, (inputs.shape[-1], 4 * n),
                          self.param_dtype)
    kernel_h = self.param("kernel_h", self.kernel_h_init, (n, 4 * n), self.param_dtype)
    ln = functools.partial(nn.LayerNorm, epsilon=self.epsilon, dtype=self.dtype,
                           param_dtype=self.param_dtype)
    return lnlstm_step(
        dict(kernel_x=kernel_x, kernel_h=kernel_h), carry, inputs,
        ln_gates=ln(reduction_axes=-1, feature_axes=(-2, -1), name="ln_gates"),
        ln_c=ln(name="ln_c"), forget_bias=self.forget_bias, zoneout_h=self.zoneout,
        zoneout_c=self.zoneout_c, deterministic=self.deterministic, rng_source=self,
        dtype=self.dtype, precision=self.precision)

  @nn.nowrap
  def initialize_carry(self, rng, input_shape):
    """``(c_0, h_0) = (0, 0)``, each <float>[..., N], for inputs of shape ``(..., N_x)``."""
    c_key, h_key = jax.random.split(rng)
    return self.hidden_carry(c_key, input_shape), self.hidden_carry(h_key, input_shape)

"""``GORUCell``: the gated orthogonal recurrent unit of Jing et al. (2017a).

Jing, Gulcehre, Peurifoy, Shen, Tegmark, Soljacic, Bengio (2017), "Gated Orthogonal
Recurrent Units: On Learning to Forget" (Neural Computation 2019). A GRU whose candidate
state uses an orthogonal transition ``U`` (EUNN-parametrised, see
:mod:`rumjax.cells.eurnn`) and modReLU, so the reset gate ``r`` can forget while ``U``
keeps the norm::

    r_t  = sigmoid(W_r x_t + U_r h_{t-1} + b_r)          reset gate
    z_t  = sigmoid(W_z x_t + U_z h_{t-1} + b_z)          update gate
    h~_t = modReLU(W_h x_t + r_t * (U h_{t-1}), b_h)     U orthogonal (EUNN layers)
    h_t  = z_t * h_{t-1} + (1 - z_t) * h~_t

The RUM paper (TACL 2019, section 2) describes GORU as "a unitary parametrization with
gates"; this is the cell of its Table 1 and of FS-GORU-2.
"""

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from rumjax.core.precision import add_bias
from rumjax.cells.activations import modrelu
from rumjax.cells.base import RecurrentCell, matmul, precise_state, promote
from rumjax.cells.eurnn import (check_eunn, eunn_apply, eunn_num_angles, symmetric_uniform,
                                uniform_angles)
from rumjax.cells.registry import register_cell


def goru_bias_init(key, shape, dtype=jnp.float32):
  """Gate biases ``[b_r | b_z]`` at ``[2 | 0]``: the reset gate starts open.

  Against the RUM authors' GORU baseline (``baselineModels/GORU.py`` of
  rdangovs/rotational-unit-of-memory, the cell of their Table 1): ``U`` and the gate
  matrices ``U(-0.01, 0.01)``, ``b_r = 2`` and modReLU's ``b_h = 2`` (GORUCell's
  ``mod_bias_init``) as here; their ``b_z`` has no initializer, so TF1's default,
  Glorot uniform ``U(-sqrt(3/N), sqrt(3/N))`` (0.11 at N 256), where this is 0; their
  modReLU adds ``1e-5`` to ``|z|``. (The GORU authors' own code, jingli9111/GORU-tensorflow,
  starts ``b_h`` at 0.01.)
  """
  del key
  n = shape[0] // 2
  return jnp.concatenate([jnp.full((n,), 2.0, dtype), jnp.zeros((n,), dtype)])


def goru_step(params, carry, inputs, *, capacity: int = 2, fft: bool = False, dtype=None,
              precision=None):
  """One GORU step (the module docstring's equations) as a pure function.

  The one source of the equations: :class:`GORUCell` (Linen) and ``rumjax.nnx.GORUCell``
  both call it.

  Args:
    params: ``{"kernel_x", "kernel_h", "bias", "mod_bias", "thetas"}`` as
      :class:`GORUCell` stores them.
    carry: ``h_{t-1}`` <float>[..., N].
    inputs: ``x_t`` <float>[..., N_x].
    capacity, fft: the layers of ``U`` (:func:`~rumjax.cells.eurnn.eunn_apply`).
    dtype: the computation dtype (``None``: promotion of the inputs, ``kernel_x`` and
      the carry).
    precision: the matmul precision of ``W x_t`` and the gates' ``U_r h``, ``U_z h``
      (None: the backend's default; a name of :data:`rumjax.core.precision.PRECISIONS`
      or a ``lax.Precision``); the rotation ``U h_{t-1}`` is elementwise.

  Returns:
    ``(h_t, h_t)``: the carried ``h_t`` in the ``precise`` dtype of the computation, the
    output in the computation dtype.
  """
  n = params["kernel_h"].shape[0]
  inputs, h, (kernel_x, kernel_h) = promote(
      dtype, inputs, params["kernel_x"], carry, params["kernel_x"], params["kernel_h"])
  xp = matmul(inputs, kernel_x, precision)
  gates = jax.nn.sigmoid(add_bias(xp[..., :2 * n] + matmul(h, kernel_h, precision),
                                  params["bias"]))
  h = precise_state(carry, inputs.dtype)                 # the carried state, float32+
  r, z = (g.astype(h.dtype) for g in (gates[..., :n], gates[..., n:]))
  uh = eunn_apply(params["thetas"], h, capacity=capacity, fft=fft)
  h_tilde = modrelu(xp[..., 2 * n:].astype(h.dtype) + r * uh,
                    params["mod_bias"].astype(h.dtype))
  h = z * h + (1.0 - z) * h_tilde
  return h, h.astype(inputs.dtype)


@register_cell("goru")
class GORUCell(RecurrentCell):
  """The gated orthogonal recurrent unit (GORU), real orthogonal version.

  Parameters (kernels act from the right, as in Flax)::

      kernel_x  <float>[N_x, 3 N]   columns [W_r | W_z | W_h]
      kernel_h  <float>[N, 2 N]     columns [U_r | U_z]
      bias      <float>[2 N]        [b_r | b_z]
      mod_bias  <float>[N]          b_h of modReLU
      thetas    <float>[num_angles] the angles of U (``eunn_apply``)

  ``3 N_x N + 2 N^2 + 3 N + num_angles`` in all.

  Precision: a unitary cell (``UNITARY``, :mod:`rumjax.cells.base`): the carry ``h`` is
  float32 under ``dtype=jnp.bfloat16``, the outputs are bfloat16.

  Example::

      rnn = nn.RNN(GORUCell(64, capacity=2))

  Attributes:
    features: the hidden size ``N``.
    capacity: the number of rotation layers of ``U`` (tunable style).
    fft: FFT-style pairing for ``U`` (``ceil(log2 N)`` layers, ``capacity`` ignored).
  """
  features: int
  capacity: int = 2
  fft: bool = False
  kernel_x_init: Callable = symmetric_uniform(0.01)
  kernel_h_init: Callable = symmetric_uniform(0.01)
  theta_init: Callable = uniform_angles
  bias_init: Callable = goru_bias_init
  mod_bias_init: Callable = nn.initializers.constant(2.0)

  UNITARY = True

  @nn.compact
  def __call__(self, carry, inputs):
    """``h_{t-1}`` <float>[..., N], ``x_t`` <float>[..., N_x] -> ``(h_t, h_t)``.

    The matmuls (``W x_t``, the gates' ``U_r h``, ``U_z h``) and the gates run in the
    computation dtype; ``U h_{t-1}`` (:func:`~rumjax.cells.eurnn.eunn_apply`), ``h~_t``
    and the update of the carried ``h_t`` in its ``precise`` dtype (float32 under
    bfloat16); the output ``h_t`` is in the computation dtype.
    """
    n = self.features
    check_eunn(n, self.capacity, self.fft)
    p = self.param_dtype
    kernel_x = self.param("kernel_x", self.kernel_x_init, (inputs.shape[-1], 3 * n), p)
    kernel_h = self.param("kernel_h", self.kernel_h_init, (n, 2 * n), p)
    bias = self.param("bias", self.bias_init, (2 * n,), p)
    mod_bias = self.param("mod_bias", self.mod_bias_init, (n,), p)
    thetas = self.param("thetas", self.theta_init,
                        (eunn_num_angles(n, self.capacity, self.fft),), p)
    params = dict(kernel_x=kernel_x, kernel_h=kernel_h, bias=bias, mod_bias=mod_bias,
                  thetas=thetas)
    return goru_step(params, carry, inputs, capacity=self.capacity, fft=self.fft,
                     dtype=self.dtype, precision=self.precision)

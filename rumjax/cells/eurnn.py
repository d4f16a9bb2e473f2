"""``EURNNCell``: the efficient unitary RNN of Jing et al. (2017b), real orthogonal version.

Jing, Shen, Dubcek, Peurifoy, Skirlo, LeCun, Tegmark, Soljacic (2017), "Tunable
Efficient Unitary Neural Networks (EUNN) and their application to RNNs", ICML. The
transition matrix is a product of ``L`` layers of 2x2 rotations (Givens rotations)::

    W = D_L ... D_2 D_1,       D_l = prod_{(i, j) in P_l} G(i, j, theta)
    G(i, j, theta): y_i = cos(theta) h_i - sin(theta) h_j
                    y_j = sin(theta) h_i + cos(theta) h_j      (others unchanged)

Each layer ``D_l`` acts on disjoint pairs ``P_l``, so it costs O(N): a gather (the
partner of every coordinate) and two multiplies, ``D_l h = c_l * h + s_l * h[perm_l]``.
``W`` is never formed in the recurrence; :func:`eunn_matrix` forms it for checks.

Pairings (``pairs = eunn_pairs(N, capacity, fft)``):

- tunable style (``fft=False``), capacity ``L``: layers alternate between
  ``(0,1), (2,3), ...`` (even ``l``, ``N//2`` pairs) and ``(1,2), (3,4), ...`` (odd ``l``,
  ``(N-1)//2`` pairs); ``L = N`` layers span all of SO(N).
- FFT style (``fft=True``): ``ceil(log2 N)`` layers; layer ``l`` pairs ``(s+j, s+j+d)``
  with ``d = 2^(L-1-l)`` inside blocks of ``2d`` starting at ``s``, ``0 <= j < d``
  (largest distance first, as in the authors' code); pairs past ``N`` are dropped.

The angles of all layers are one flat vector ``thetas``: layer-major, then pairs in the
order listed. Real Givens layers have ``det = +1``, so ``W`` lies in SO(N) (the complex
EUNN's diagonal phase layer has no real counterpart here).
"""

import functools
import math
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rumjax.cells.activations import modrelu
from rumjax.cells.base import RecurrentCell, matmul, precise, precise_state, promote
from rumjax.cells.registry import register_cell

Array = jax.Array


# ------------------------------------------------------------------ the orthogonal W


def check_eunn(n: int, capacity: int, fft: bool):
  if n < 2:
    raise ValueError(f"features={n} must be >= 2 for a layer of 2x2 rotations.")
  if not fft and capacity < 1:
    raise ValueError(f"capacity={capacity!r} must be >= 1 (the number of layers L).")


@functools.lru_cache(maxsize=None)
def eunn_pairs(n: int, capacity: int = 2, fft: bool = False) -> tuple:
  """The pairs ``P_l`` of each layer: a tuple (one entry per layer) of tuples of (i, j)."""
  check_eunn(n, capacity, fft)
  if fft:
    num_layers = math.ceil(math.log2(n))
    layers = []
    for l in range(num_layers):
      d = 2 ** (num_layers - 1 - l)
      layers.append(tuple((s + j, s + j + d) for s in range(0, n, 2 * d) for j in range(d)
                          if s + j + d < n))
    return tuple(layers)
  even = tuple((2 * k, 2 * k + 1) for k in range(n // 2))
  odd = tuple((2 * k + 1, 2 * k + 2) for k in range((n - 1) // 2))
  return tuple(even if l % 2 == 0 else odd for l in range(capacity))


def eunn_num_angles(n: int, capacity: int = 2, fft: bool = False) -> int:
  """The number of angles: ``ceil(L/2) (N//2) + floor(L/2) ((N-1)//2)`` (tunable)."""
  return sum(len(p) for p in eunn_pairs(n, capacity, fft))


@functools.lru_cache(maxsize=None)
def eunn_layout(n: int, capacity: int = 2, fft: bool = False):
  """Static gather tables, NumPy arrays of shape (L, N).

  Returns:
    ``(perm, angle_index, sign)``: ``perm[l, i]`` is the partner of ``i`` in layer ``l``
    (``i`` itself if unpaired); ``angle_index[l, i]`` indexes ``thetas`` (``num_angles``
    for unpaired coordinates, pointing at a padded angle 0); ``sign[l, i]`` is -1 for
    the first coordinate of a pair, +1 for the second, 0 if unpaired.
  """
  pairs = eunn_pairs(n, capacity, fft)
  num_angles = sum(len(p) for p in pairs)
  perm = np.tile(np.arange(n, dtype=np.int32), (len(pairs), 1))
  angle_index = np.full((len(pairs), n), num_angles, dtype=np.int32)
  sign = np.zeros((len(pairs), n), dtype=np.float32)
  a = 0
  for l, layer in enumerate(pairs):
    for i, j in layer:
      perm[l, i], perm[l, j] = j, i
      angle_index[l, i] = angle_index[l, j] = a
      sign[l, i], sign[l, j] = -1.0, 1.0
      a += 1
  for arr in (perm, angle_index, sign):
    arr.flags.writeable = False
  return perm, angle_index, sign


def eunn_apply(thetas: Array, h: Array, *, capacity: int = 2, fft: bool = False) -> Array:
  """``W h`` without forming ``W``: L layers, each an O(N) gather and two multiplies.

  Precision: ``cos``, ``sin`` and every layer ``c_l * h + s_l * h[perm_l]`` are computed in
  :func:`~rumjax.cells.base.precise` of the inputs' dtypes (float32 for bfloat16 angles or
  states), with elementwise products only (no dot, so no backend lowers the path to a
  reduced-precision matmul); the result is cast back to ``h``'s dtype. ``W`` is thus a
  rotation to float32 accuracy for angles of any dtype.

  Args:
    thetas: <float>[num_angles] the rotation angles (see :func:`eunn_num_angles`).
    h: <float>[..., N].
    capacity: the number of layers ``L`` (tunable style; ignored if ``fft``).
    fft: FFT-style pairing (``ceil(log2 N)`` layers).

  Returns:
    <float>[..., N] in ``h``'s dtype, ``W h`` (norm preserving).
  """
  n = h.shape[-1]
  perm, angle_index, sign = eunn_layout(n, capacity, fft)
  num_angles = eunn_num_angles(n, capacity, fft)
  if thetas.shape != (num_angles,):
    raise ValueError(f"thetas has shape {thetas.shape}; expected ({num_angles},) for "
                     f"N={n}, capacity={capacity}, fft={fft}.")
  acc = precise(jnp.promote_types(thetas.dtype, h.dtype))
  padded = jnp.concatenate([thetas.astype(acc), jnp.zeros((1,), acc)])
  cos = jnp.cos(padded)[angle_index]                  # (L, N); 1 where unpaired
  sin = jnp.sin(padded)[angle_index] * sign.astype(acc)  # (L, N); 0 where unpaired

  def layer(h, tables):
    p, c, s = tables
    return c * h + s * jnp.take(h, p, axis=-1), None

  out, _ = jax.lax.scan(layer, h.astype(acc), (jnp.asarray(perm), cos, sin),
                        unroll=min(perm.shape[0], 8))
  return out.astype(h.dtype)


def eunn_matrix(thetas: Array, n: int, *, capacity: int = 2, fft: bool = False) -> Array:
  """The explicit <float>[N, N] matrix ``W`` of :func:`eunn_apply` (for checks only), in
  at least float32 (the dtype :func:`eunn_apply` computes in)."""
  # Row k of eunn_apply(thetas, I) is (W e_k)^T, i.e. column k of W.
  eye = jnp.eye(n, dtype=precise(thetas.dtype))
  return eunn_apply(thetas, eye, capacity=capacity, fft=fft).T


def uniform_angles(key, shape, dtype=jnp.float32):
  """Angles uniform in [-pi, pi), as in the EUNN authors' code."""
  return jax.random.uniform(key, shape, dtype, -jnp.pi, jnp.pi)


def symmetric_uniform(scale: float):
  """Initializer uniform in [-scale, scale)."""

  def init(key, shape, dtype=jnp.float32):
    return jax.random.uniform(key, shape, dtype, -scale, scale)

  return init


# ---------------------------------------------------------------------------- step


def eurnn_step(params, carry: Array, inputs: Array, *, capacity: int = 2, fft: bool = False,
               dtype=None, precision=None):
  """One EURNN step, ``h_t = modReLU(W h_{t-1} + U x_t, b)``, as a pure function.

  The one source of the equations: :class:`EURNNCell` (Linen) and
  ``rumjax.nnx.EURNNCell`` both call it.

  Args:
    params: ``{"thetas", "kernel_x", "bias"}`` as :class:`EURNNCell` stores them.
    carry: ``h_{t-1}`` <float>[..., N].
    inputs: ``x_t`` <float>[..., N_x].
    capacity, fft: the layers of ``W`` (:func:`eunn_apply`).
    dtype: the computation dtype (``None``: promotion of the inputs, ``kernel_x`` and
      the carry).
    precision: the matmul precision of ``U x_t`` (None: the backend's default; a name of
      :data:`rumjax.core.precision.PRECISIONS` or a ``lax.Precision``); ``W h_{t-1}`` is
      elementwise.

  Returns:
    ``(h_t, h_t)``: the carried ``h_t`` in the :func:`precise` dtype of the computation,
    the output in the computation dtype.
  """
  kernel_x = params["kernel_x"]
  inputs, _, (kernel_x,) = promote(dtype, inputs, kernel_x, carry, kernel_x)
  h = precise_state(carry, inputs.dtype)
  wh = eunn_apply(params["thetas"], h, capacity=capacity, fft=fft)
  xp = matmul(inputs, kernel_x, precision).astype(h.dtype)
  h = modrelu(wh + xp, params["bias"].astype(h.dtype))
  return h, h.astype(inputs.dtype)


# ---------------------------------------------------------------------------- cell


@register_cell("eurnn")
class EURNNCell(RecurrentCell):
  """The efficient unitary RNN (EURNN), real orthogonal version (Jing et al., 2017b).

  ``h_t = modReLU(W h_{t-1} + U x_t, b)`` with ``W`` = :func:`eunn_apply` (L layers of
  Givens rotations, never formed as a matrix) and :func:`~rumjax.cells.activations.modrelu`.

  Parameters: ``thetas`` <float>[num_angles], ``kernel_x`` (``U^T``) <float>[N_x, N],
  ``bias`` (the modReLU ``b``) <float>[N]: ``num_angles + N_x N + N`` in all.

  Precision: a unitary cell (``UNITARY``, :mod:`rumjax.cells.base`): the carry ``h`` is
  float32 under ``dtype=jnp.bfloat16``, the outputs are bfloat16.

  Example::

      rnn = nn.RNN(EURNNCell(64, capacity=4))
      variables = rnn.init(jax.random.key(0), xs)   # xs <float>[batch, time, N_x]

  Attributes:
    features: the hidden size ``N``.
    capacity: the number of rotation layers ``L`` (tunable style; default 2 as in the
      RUM authors' baseline).
    fft: FFT-style pairing with ``ceil(log2 N)`` layers (``capacity`` ignored).
  """
  features: int
  capacity: int = 2
  fft: bool = False
  kernel_x_init: Callable = symmetric_uniform(0.01)
  theta_init: Callable = uniform_angles
  bias_init: Callable = nn.initializers.zeros_init()

  UNITARY = True

  @nn.compact
  def __call__(self, carry, inputs):
    """``h_{t-1}`` <float>[..., N], ``x_t`` <float>[..., N_x] -> ``(h_t, h_t)``.

    The input projection ``U x_t`` runs in the computation dtype; ``W h_{t-1}``
    (:func:`eunn_apply`), the modReLU and the carried ``h_t`` in its :func:`precise`
    dtype (float32 under bfloat16); the output ``h_t`` is in the computation dtype.
    """
    n = self.features
    check_eunn(n, self.capacity, self.fft)
    thetas = self.param("thetas", self.theta_init,
                        (eunn_num_angles(n, self.capacity, self.fft),), self.param_dtype)
    kernel_x = self.param("kernel_x", self.kernel_x_init, (inputs.shape[-1], n),
                          self.param_dtype)
    bias = self.param("bias", self.bias_init, (n,), self.param_dtype)
    return eurnn_step(dict(thetas=thetas, kernel_x=kernel_x, bias=bias), carry, inputs,
                      capacity=self.capacity, fft=self.fft, dtype=self.dtype,
                      precision=self.precision)

"""``URNNCell``: the full-capacity uRNN of Wisdom et al. (2016), real orthogonal version,
and its Riemannian (Cayley) optimizer on the Stiefel manifold.

Wisdom, Powers, Hershey, Le Roux, Atlas (2016), "Full-Capacity Unitary Recurrent Neural
Networks", NeurIPS. The recurrence is a plain modReLU RNN with an unconstrained-size
orthogonal matrix ``W`` (N x N, N(N-1)/2 degrees of freedom)::

    h_t = modReLU(W h_{t-1} + V x_t, b)

``W`` stays orthogonal because it is never updated by a gradient step but by the Cayley
transform along the manifold (Wisdom et al., eq. (10); Wen & Yin, 2013)::

    A     = G W^T - W G^T                                   (skew-symmetric, G = dL/dW)
    W_new = (I + lr/2 A)^{-1} (I - lr/2 A) W

Using it in a training loop (every other parameter keeps the configured optimizer)::

    tx = make_urnn_optimizer(optax.rmsprop(1e-3), learning_rate=1e-3)
    # = optax.multi_transform({"stiefel": stiefel_cayley(1e-3), "base": base},
    #                         stiefel_labels)

This module registers ``make_urnn_optimizer`` as the ``"urnn"`` optimizer wrapper
(``rumjax.cells.register_optimizer_wrapper``), so ``rumjax.training.optim.make_optimizer``
wraps every optimizer it builds from a config with it: a model without a parameter named
``recurrent_orthogonal`` is unaffected. Global gradient clipping may be chained before it;
anything that rescales the *update* (weight decay, Adam, ...) must not be applied after
it, or ``W`` leaves the manifold.
"""

import functools
from typing import Callable, NamedTuple, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from rumjax.cells.activations import modrelu
from rumjax.cells.base import (HIGHEST, RecurrentCell, matmul, precise, precise_state,
                               promote)
from rumjax.cells.registry import register_cell, register_optimizer_wrapper

ORTHOGONAL_NAME = "recurrent_orthogonal"


def urnn_step(params, carry, inputs, *, dtype=None, precision=None):
  """One uRNN step, ``h_t = modReLU(W h_{t-1} + V x_t, b)``, as a pure function.

  The one source of the equation: :class:`URNNCell` (Linen) and ``rumjax.nnx.URNNCell``
  both call it.

  Args:
    params: ``{"recurrent_orthogonal", "kernel_x", "bias"}`` as :class:`URNNCell` stores
      them.
    carry: ``h_{t-1}`` <float>[..., N].
    inputs: ``x_t`` <float>[..., N_x].
    dtype: the computation dtype (``None``: promotion of the inputs, ``kernel_x`` and
      the carry).
    precision: the matmul precision of ``V x_t`` (None: the backend's default; a name of
      :data:`rumjax.core.precision.PRECISIONS` or a ``lax.Precision``); ``W h_{t-1}`` is at
      ``HIGHEST`` whatever it says.

  Returns:
    ``(h_t, h_t)``: the carried ``h_t`` in the ``precise`` dtype of the computation, the
    output in the computation dtype.
  """
  w, kernel_x = params[ORTHOGONAL_NAME], params["kernel_x"]
  inputs, _, (kernel_x,) = promote(dtype, inputs, kernel_x, carry, kernel_x)
  h = precise_state(carry, inputs.dtype)
  wh = jnp.matmul(h, w.astype(h.dtype), precision=HIGHEST)
  xp = matmul(inputs, kernel_x, precision).astype(h.dtype)
  h = modrelu(wh + xp, params["bias"].astype(h.dtype))
  return h, h.astype(inputs.dtype)


@register_cell("urnn")
class URNNCell(RecurrentCell):
  """The full-capacity unitary RNN, real version: ``h_t = modReLU(W h_{t-1} + V x_t, b)``.

  Parameters: ``recurrent_orthogonal`` (``W^T``, orthogonal) <float>[N, N], ``kernel_x``
  (``V^T``) <float>[N_x, N], ``bias`` (modReLU ``b``) <float>[N]: ``N^2 + N_x N + N``.
  Train ``recurrent_orthogonal`` with :func:`stiefel_cayley` (see
  :func:`make_urnn_optimizer`) to keep it orthogonal; with a plain optimizer the cell is
  an ordinary modReLU RNN with an orthogonal initialisation.

  Precision: a unitary cell (``UNITARY``, :mod:`rumjax.cells.base`): the carry ``h`` is
  float32 under ``dtype=jnp.bfloat16``, the outputs are bfloat16. ``W`` itself is created
  in at least float32 whatever ``param_dtype`` (a bfloat16 matrix is orthogonal only to
  about 4e-3, and the Cayley step could not keep it on the manifold).

  Attributes:
    features: the hidden size ``N``.
  """
  features: int
  recurrent_init: Callable = nn.initializers.orthogonal()
  kernel_x_init: Callable = nn.initializers.glorot_uniform()
  bias_init: Callable = nn.initializers.zeros_init()

  UNITARY = True

  @nn.compact
  def __call__(self, carry, inputs):
    """``h_{t-1}`` <float>[..., N], ``x_t`` <float>[..., N_x] -> ``(h_t, h_t)``.

    ``V x_t`` runs in the computation dtype; ``W h_{t-1}`` (one dot at
    ``precision=HIGHEST``), the modReLU and the carried ``h_t`` in its ``precise`` dtype
    (float32 under bfloat16); the output ``h_t`` is in the computation dtype.
    """
    n = self.features
    w = self.param(ORTHOGONAL_NAME, self.recurrent_init, (n, n), precise(self.param_dtype))
    kernel_x = self.param("kernel_x", self.kernel_x_init, (inputs.shape[-1], n),
                          self.param_dtype)
    bias = self.param("bias", self.bias_init, (n,), self.param_dtype)
    params = {ORTHOGONAL_NAME: w, "kernel_x": kernel_x, "bias": bias}
    return urnn_step(params, carry, inputs, dtype=self.dtype, precision=self.precision)


# ------------------------------------------------------------ the Stiefel optimizer


class StiefelCayleyState(NamedTuple):
  count: jax.Array  # the step, for a learning-rate schedule


def cayley_step(w: jax.Array, g: jax.Array, lr) -> jax.Array:
  """``W_new = (I + lr/2 A)^{-1} (I - lr/2 A) W`` with ``A = G W^T - W G^T``.

  Args:
    w: <float>[..., n, p] with orthonormal columns (``W^T W = I``; ``n = p`` for square).
    g: <float>[..., n, p] the gradient ``dL/dW``.
    lr: the step size.

  Returns:
    ``W_new`` <float>[..., n, p] in ``w``'s dtype, again with orthonormal columns (up to
    round-off): computed in at least float32, every product at ``precision=HIGHEST``.
  """
  dtype = jnp.promote_types(precise(w.dtype), g.dtype)
  w32, g32 = jnp.asarray(w, dtype), jnp.asarray(g, dtype)
  wt, gt = jnp.swapaxes(w32, -1, -2), jnp.swapaxes(g32, -1, -2)
  mm = functools.partial(jnp.matmul, precision=HIGHEST)
  a = (0.5 * lr) * (mm(g32, wt) - mm(w32, gt))
  eye = jnp.eye(w.shape[-2], dtype=dtype)
  with jax.default_matmul_precision("highest"):
    w_new = jnp.linalg.solve(eye + a, mm(eye - a, w32))
  return w_new.astype(w.dtype)


def stiefel_cayley(learning_rate: Union[float, optax.Schedule]
                   ) -> optax.GradientTransformation:
  """Riemannian gradient descent on the Stiefel manifold by the Cayley transform.

  For every leaf (a matrix ``W`` with ``W^T W = I``, e.g. the uRNN recurrent matrix) the
  update is ``cayley_step(W, G, lr) - W`` (Wisdom et al., 2016, eq. (10)), so that
  ``optax.apply_updates`` lands on the manifold. The incoming updates must be the raw
  gradients ``G`` (sign as returned by ``jax.grad``); ``params`` are required.

  Args:
    learning_rate: a float or an ``optax`` schedule of the step.
  """

  def init_fn(params):
    del params
    return StiefelCayleyState(count=jnp.zeros([], jnp.int32))

  def update_fn(updates, state, params=None):
    if params is None:
      raise ValueError("stiefel_cayley needs params: call update(grads, state, params).")
    lr = learning_rate(state.count) if callable(learning_rate) else learning_rate
    new = jax.tree.map(lambda g, w: cayley_step(w, g.astype(w.dtype), lr) - w,
                       updates, params)
    return new, StiefelCayleyState(count=optax.safe_increment(state.count))

  return optax.GradientTransformation(init_fn, update_fn)


def _key_name(key) -> Optional[str]:
  for attr in ("key", "name", "idx"):
    if hasattr(key, attr):
      return str(getattr(key, attr))
  return None


def _leaf_name(path) -> Optional[str]:
  """The name of the parameter at ``path``: its last key, past an ``nnx.State``'s trailing
  ``.value`` attribute (a Linen path ends at the name)."""
  for key in reversed(path):
    if not (isinstance(key, jax.tree_util.GetAttrKey) and key.name == "value"):
      return _key_name(key)
  return None


def stiefel_labels(params, name: str = ORTHOGONAL_NAME):
  """``"stiefel"`` for every leaf whose own name is ``name``, ``"base"`` for the rest
  (Linen params or an ``nnx.State``)."""
  return jax.tree_util.tree_map_with_path(
      lambda path, _: "stiefel" if _leaf_name(path) == name else "base", params)


@register_optimizer_wrapper("urnn")
def make_urnn_optimizer(base_optimizer: optax.GradientTransformation,
                        learning_rate: Union[float, optax.Schedule],
                        name: str = ORTHOGONAL_NAME) -> optax.GradientTransformation:
  """``base_optimizer`` for every parameter except those named ``name``, which take
  :func:`stiefel_cayley` steps of size ``learning_rate``."""
  return optax.multi_transform(
      {"stiefel": stiefel_cayley(learning_rate), "base": base_optimizer},
      lambda params: stiefel_labels(params, name))

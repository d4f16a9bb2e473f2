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

from typing import Callable, NamedTuple, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from rumjax.cells.activations import modrelu
from rumjax.cells.base import RecurrentCell
from rumjax.cells.registry import register_cell, register_optimizer_wrapper

ORTHOGONAL_NAME = "recurrent_orthogonal"


@register_cell("urnn")
class URNNCell(RecurrentCell):
  """The full-capacity unitary RNN, real version: ``h_t = modReLU(W h_{t-1} + V x_t, b)``.

  Parameters: ``recurrent_orthogonal`` (``W^T``, orthogonal) <float>[N, N], ``kernel_x``
  (``V^T``) <float>[N_x, N], ``bias`` (modReLU ``b``) <float>[N]: ``N^2 + N_x N + N``.
  Train ``recurrent_orthogonal`` with :func:`stiefel_cayley` (see
  :func:`make_urnn_optimizer`) to keep it orthogonal; with a plain optimizer the cell is
  an ordinary modReLU RNN with an orthogonal initialisation.

  Attributes:
    features: the hidden size ``N``.
  """
  features: int
  recurrent_init: Callable = nn.initializers.orthogonal()
  kernel_x_init: Callable = nn.initializers.glorot_uniform()
  bias_init: Callable = nn.initializers.zeros_init()

  @nn.compact
  def __call__(self, carry, inputs):
    """``h_{t-1}`` <float>[..., N], ``x_t`` <float>[..., N_x] -> ``(h_t, h_t)``."""
    n = self.features
    w = self.param(ORTHOGONAL_NAME, self.recurrent_init, (n, n), self.param_dtype)
    kernel_x = self.param("kernel_x", self.kernel_x_init, (inputs.shape[-1], n),
                          self.param_dtype)
    bias = self.param("bias", self.bias_init, (n,), self.param_dtype)
    inputs, h, (w, kernel_x, bias) = self.promote(inputs, kernel_x, carry, w, kernel_x, bias)
    h = modrelu(h @ w + inputs @ kernel_x, bias)
    return h, h


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
    ``W_new`` <float>[..., n, p], again with orthonormal columns (up to round-off).
  """
  wt, gt = jnp.swapaxes(w, -1, -2), jnp.swapaxes(g, -1, -2)
  a = (0.5 * lr) * (g @ wt - w @ gt)
  eye = jnp.eye(w.shape[-2], dtype=w.dtype)
  return jnp.linalg.solve(eye + a, (eye - a) @ w)


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


def stiefel_labels(params, name: str = ORTHOGONAL_NAME):
  """``"stiefel"`` for every leaf whose own name is ``name``, ``"base"`` for the rest."""
  return jax.tree_util.tree_map_with_path(
      lambda path, _: "stiefel" if path and _key_name(path[-1]) == name else "base",
      params)


@register_optimizer_wrapper("urnn")
def make_urnn_optimizer(base_optimizer: optax.GradientTransformation,
                        learning_rate: Union[float, optax.Schedule],
                        name: str = ORTHOGONAL_NAME) -> optax.GradientTransformation:
  """``base_optimizer`` for every parameter except those named ``name``, which take
  :func:`stiefel_cayley` steps of size ``learning_rate``."""
  return optax.multi_transform(
      {"stiefel": stiefel_cayley(learning_rate), "base": base_optimizer},
      lambda params: stiefel_labels(params, name))

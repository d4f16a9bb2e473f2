"""The StarSaber layer as a Flax module, on top of the functional :mod:`rumjax.core.starsaber`.

``StarSaberLayer(d, variant)`` owns parameters with exactly the functional names (``"U"``,
``"Q"``, ``"V"``, ``"W"``, ``"alpha"``, and ``"W_r"``, ``"V_r"``, ``"W_i"``, ``"V_i"`` for
the gate), so ``StarSaberLayer(d).apply({"params": p}, h, x, mask)`` equals
``rumjax.starsaber_layer(p, h, x, mask=mask)``. Variants:

* ``"plain"``: eqs. (4)-(5);
* ``"gate"``: appendix eq. (6) (§5.1);
* ``"pe"``: one matrix ``U`` for every key, no ``Q`` (§5.2; the model adds sinusoidal
  position encodings to its input);
* ``"nodirect"``: no direct path ``V x`` and no ``V`` (§5.3).

A model stacks layers with their own parameters, starting from ``h^0 = x``::

    h = x
    for l in range(num_layers):
      h = StarSaberLayer(d, name=f"layer_{l}")(h, x, mask)
"""

from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from rumjax.core import starsaber as starsaber_lib
from rumjax.core.precision import cast_weights, matmul_precision

Array = jax.Array

VARIANTS = ("plain", "gate", "pe", "nodirect")
VARIANT_FLAGS = {
    "plain": dict(gate=False, directional=True, direct_path=True),
    "gate": dict(gate=True, directional=True, direct_path=True),
    "pe": dict(gate=False, directional=False, direct_path=True),
    "nodirect": dict(gate=False, directional=True, direct_path=False),
}


def variant_flags(variant: str) -> dict:
  """``{gate, directional, direct_path}`` of a variant name; ValueError if unknown."""
  if variant not in VARIANT_FLAGS:
    raise ValueError(f"Unknown StarSaber variant {variant!r}; known variants: "
                     f"{', '.join(VARIANTS)}.")
  return dict(VARIANT_FLAGS[variant])


class StarSaberLayer(nn.Module):
  """One StarSaber layer ``h^l -> h^{l+1}`` (eqs. (4)-(5), or eq. (6) for ``"gate"``).

  Attributes:
    features: ``d``, the hidden size (``h`` and ``x`` both have ``d`` features).
    variant: ``"plain"`` | ``"gate"`` | ``"pe"`` (one matrix, ``directional=False``) |
      ``"nodirect"`` (``direct_path=False``).
    alpha_init: the initial residual weight ``alpha`` (the paper: 1.0).
    kernel_init: initializer of every ``(d, d)`` kernel (LeCun normal, as Flax's Dense).
    param_dtype: parameter dtype.
    dtype: computation dtype (None: the functional layer's promotion of inputs and params).
    precision: the matmul precision of the layer's products (None: the backend's
      default); the functional layer is traced under
      :func:`rumjax.core.precision.matmul_precision` (it has no custom VJP, so its gradient
      is at that precision too).
  """
  features: int
  variant: str = "plain"
  alpha_init: float = 1.0
  kernel_init: Callable = nn.initializers.lecun_normal()
  param_dtype: Any = jnp.float32
  dtype: Optional[Any] = None
  precision: Any = None

  @nn.compact
  def __call__(self, h: Array, x: Array, mask: Optional[Array] = None) -> Array:
    """Runs the layer.

    Args:
      h: <float>[B, T, d] the layer's input ``h^l`` (``h^0 = x``).
      x: <float>[B, T, d] the model's input sequence (the direct path).
      mask: <bool>[B, T], True at real tokens (None = all real).

    Returns:
      ``h^{l+1}`` <float>[B, T, d].
    """
    flags = variant_flags(self.variant)
    if h.shape[-1] != self.features:
      raise ValueError(f"StarSaberLayer(features={self.features}): h has {h.shape[-1]} "
                       f"features in its last axis (shape {h.shape}).")
    shapes = starsaber_lib.param_shapes(self.features, **flags)
    alpha_init = nn.initializers.constant(self.alpha_init)
    params = {name: self.param(name, alpha_init if name == "alpha" else self.kernel_init,
                               shape, self.param_dtype)
              for name, shape in shapes.items()}
    if self.dtype is not None:
      h, x = jnp.asarray(h, self.dtype), jnp.asarray(x, self.dtype)
      params = cast_weights(params, self.dtype, wide=("alpha",))
    with matmul_precision(self.precision):
      if flags["gate"]:
        return starsaber_lib.starsaber_gate_layer(params, h, x, mask=mask,
                                                  directional=flags["directional"])
      return starsaber_lib.starsaber_layer(params, h, x, mask=mask,
                                           directional=flags["directional"],
                                           direct_path=flags["direct_path"])

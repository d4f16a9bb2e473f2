"""The precision policy's rules, in one place for the core, cells and models.

* What must not be rounded to bfloat16 (a rotation path and the memory it carries, the
  state of a unitary cell, attention scores and their softmax, logits and losses) is
  computed in :func:`at_least_float32` of its inputs: bfloat16 -> float32, float32 stays,
  float64 stays float64.
* Every dot product on a rotation or unitary path runs at :data:`HIGHEST` (a TPU runs an
  f32 dot at the default precision as one bfloat16 pass, a recent GPU as TF32).
* A parameter broadcast over the rows of a bfloat16 computation (a bias, a residual
  weight) is applied in float32 and the result rounded back (:func:`add_bias`), so that
  its gradient, a sum over the rows, is accumulated in float32 and not in bfloat16.
* Every other matmul (the gates, the projections) runs at the model's matmul precision,
  Flax's ``precision=`` argument, named in a config by :data:`PRECISIONS`:

  ==========  ======================  =====================  ========================
  name        CPU                     NVIDIA Ampere and on   TPU
  ==========  ======================  =====================  ========================
  "default"   float32                 TF32 (10-bit mantissa) one bfloat16 pass
  "high"      float32                 TF32 (XLA: bf16_3x)    three bfloat16 passes
  "highest"   float32                 float32                float32 (six passes)
  ==========  ======================  =====================  ========================

  (``"default"`` is ``None``: the backend decides, as in Flax.)
"""

import contextlib
from typing import Any, Optional, Union

import jax
import jax.numpy as jnp

HIGHEST = jax.lax.Precision.HIGHEST

PRECISIONS: dict[str, Optional[jax.lax.Precision]] = {
    "default": None,
    "high": jax.lax.Precision.HIGH,
    "highest": jax.lax.Precision.HIGHEST,
}


def at_least_float32(*dtypes_or_arrays: Any) -> jnp.dtype:
  """The float dtype of the arguments (arrays, dtypes or names), promoted to float32 or
  wider; integer and no arguments give float32."""
  return jnp.promote_types(jnp.result_type(*dtypes_or_arrays, float), jnp.float32)


def add_bias(y: jax.Array, bias: jax.Array) -> jax.Array:
  """``y + bias`` in :func:`at_least_float32` of both, rounded to ``y``'s dtype.

  Under the bfloat16 policy ``y`` is bfloat16 and ``bias`` a float32 parameter; the
  gradient of ``bias`` is the sum of the cotangents over ``y``'s leading (row) axes,
  which this accumulates in float32 (a bfloat16 ``bias`` would sum them in bfloat16).
  For float32 ``y`` and ``bias`` it is ``y + bias`` exactly."""
  wide = at_least_float32(y, bias)
  return jnp.asarray(jnp.asarray(y, wide) + jnp.asarray(bias, wide), y.dtype)


def scale(y: jax.Array, weight: jax.Array) -> jax.Array:
  """``weight * y`` in :func:`at_least_float32` of both, rounded to ``y``'s dtype: a
  scalar or vector ``weight`` (a residual weight ``alpha``) whose gradient, the sum of
  ``y`` times the cotangents over the rows, is accumulated in float32 (as
  :func:`add_bias`). For float32 ``y`` and ``weight`` it is ``weight * y`` exactly."""
  wide = at_least_float32(y, weight)
  return jnp.asarray(jnp.asarray(weight, wide) * jnp.asarray(y, wide), y.dtype)


def cast_weights(params: dict, dtype: Any, wide: tuple = ()) -> dict:
  """``params`` cast to the computation ``dtype``, except the names in ``wide`` (the
  biases and residual weights broadcast over the rows, applied by :func:`add_bias` or
  :func:`scale`), which stay in ``at_least_float32(dtype)`` or their own wider dtype."""
  return {k: jnp.asarray(v, at_least_float32(dtype, v) if k in wide else dtype)
          for k, v in params.items()}


def resolve_precision(
    precision: Union[None, str, jax.lax.Precision]) -> Optional[jax.lax.Precision]:
  """A matmul precision from its name (:data:`PRECISIONS`), a ``lax.Precision`` or None.

  None and ``"default"`` give None (the backend's default, Flax's convention).
  """
  if precision is None or isinstance(precision, jax.lax.Precision):
    return precision
  if isinstance(precision, str) and precision.lower() in PRECISIONS:
    return PRECISIONS[precision.lower()]
  raise ValueError(
      f"precision={precision!r} is unknown; accepted values are {list(PRECISIONS)} "
      "(or a jax.lax.Precision, or None for the backend's default).")


def matmul_precision(precision: Union[None, str, jax.lax.Precision]):
  """A context in which every dot product that names no precision of its own runs at
  ``precision`` (``jax.default_matmul_precision``); None/``"default"``: a null context, so
  an enclosing ``jax.default_matmul_precision`` still applies.

  For code without a ``precision`` argument and without a custom VJP (Flax's GRU and LSTM
  cells, :mod:`rumjax.core.starsaber`): the context acts while a function is traced, so a
  custom VJP's backward pass, traced later, would escape it.
  """
  resolved = resolve_precision(precision)
  if resolved is None:
    return contextlib.nullcontext()
  return jax.default_matmul_precision(resolved.name.lower())

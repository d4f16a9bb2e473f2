"""The precision policy's two rules, in one place for the core, cells and models.

* What must not be rounded to bfloat16 (a rotation path and the memory it carries, the
  state of a unitary cell, attention scores and their softmax, logits and losses) is
  computed in :func:`at_least_float32` of its inputs: bfloat16 -> float32, float32 stays,
  float64 stays float64.
* Every dot product on a rotation or unitary path runs at :data:`HIGHEST` (a TPU runs an
  f32 dot at the default precision as one bfloat16 pass, a recent GPU as TF32).
"""

from typing import Any

import jax
import jax.numpy as jnp

HIGHEST = jax.lax.Precision.HIGHEST


def at_least_float32(*dtypes_or_arrays: Any) -> jnp.dtype:
  """The float dtype of the arguments (arrays, dtypes or names), promoted to float32 or
  wider; integer and no arguments give float32."""
  return jnp.promote_types(jnp.result_type(*dtypes_or_arrays, float), jnp.float32)

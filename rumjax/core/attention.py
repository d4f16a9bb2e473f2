"""The softmax over a masked set of positions, shared by every attention of the zoo (the
LSTMN's intra- and inter-attention, StarSaber's, the pointer-generator's, fusion's)."""

import jax
import jax.numpy as jnp

from rumjax.core.precision import at_least_float32

Array = jax.Array


def masked_softmax(scores: Array, valid: Array) -> Array:
  """``softmax(scores)`` over the entries where ``valid``; the others get weight 0.

  Invalid entries are set to ``-inf`` before the softmax (exactly zero weight, zero
  gradient). A row without any valid entry (or ``M = 0``) gets all-zero weights (not NaN).
  Computed and returned in float32 or wider (:func:`at_least_float32`) whatever the dtype of
  ``scores``: under the precision policy a softmax is never bfloat16.

  Args:
    scores: <float>[..., M].
    valid: <bool>[..., M] (broadcastable).
  """
  scores = jnp.asarray(scores, at_least_float32(scores))
  scores = jnp.where(valid, scores, -jnp.inf)
  top = jnp.max(scores, axis=-1, keepdims=True, initial=-jnp.inf)   # M may be 0
  top = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, 0.0))
  e = jnp.where(valid, jnp.exp(scores - top), 0.0)
  total = jnp.sum(e, axis=-1, keepdims=True)
  return e / jnp.where(total > 0, total, 1.0)

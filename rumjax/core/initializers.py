"""Initializers shared by the papers' cells."""

from typing import Callable

import jax
import jax.numpy as jnp


def block_orthogonal(num_blocks: int, scale: float = 1.0) -> Callable:
  """Initializer of ``(n_in, num_blocks * n)`` kernels: an independent orthogonal
  ``(n_in, n)`` block per gate (RUM, Algorithm 1: one per ``W^tau``, ``W^u``, ``W~``, gain
  1.0; the LSTMN's four gates, as the recurrent kernels of Flax's ``LSTMCell``).

  The QR runs in float32 at least (LAPACK has no bfloat16); the result is cast to ``dtype``.
  """
  orthogonal = jax.nn.initializers.orthogonal(scale)

  def init(key, shape, dtype=jnp.float32):
    n_in, n_out = shape
    if n_out % num_blocks:
      raise ValueError(f"kernel shape {shape} does not split into {num_blocks} blocks.")
    keys = jax.random.split(key, num_blocks)
    qr_dtype = jnp.promote_types(dtype, jnp.float32)
    return jnp.concatenate([orthogonal(k, (n_in, n_out // num_blocks), qr_dtype)
                            for k in keys], axis=-1).astype(dtype)

  return init

"""Initializers shared by the papers' cells."""

import numbers
from typing import Callable

import jax
import jax.numpy as jnp


def in_float32(init: Callable) -> Callable:
  """``init`` drawn in (at least) float32 and cast to the requested dtype: the same values
  as ``init`` in float32, and a bfloat16 ``param_dtype`` for initializers with no bfloat16
  kernel (the QR of ``nn.initializers.orthogonal``)."""
  def wrapped(key, shape, dtype=jnp.float32):
    return init(key, shape, jnp.promote_types(dtype, jnp.float32)).astype(dtype)
  return wrapped


def check_sizes(**sizes) -> None:
  """``ValueError`` naming the first of ``sizes`` that is not a positive integer (a
  parameter initializer's layer sizes: a size 0 would give empty arrays or divide by 0)."""
  for name, size in sizes.items():
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
      raise ValueError(f"{name}={size!r} must be a positive integer (a layer size).")


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

"""Sinusoidal position encodings (Vaswani et al., 2017, §3.5).

The Transformer and ReZero baselines of the StarSaber paper, and StarSaber's "pe" ablation
(§5.2: "add a position embedding matrix made of cosines and sines to the input"), add these
to the input vectors before the first layer::

    >>> x = x + sinusoidal_positions(x.shape[1], x.shape[2])   # x <float>[B, T, d]
"""

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


def sinusoidal_positions(length: int, features: int, max_timescale: float = 10_000.0
                         ) -> Array:
  """The position-encoding matrix ``PE`` <float32>[length, features]::

      PE[pos, 2i]     = sin(pos / max_timescale^(2i / features))
      PE[pos, 2i + 1] = cos(pos / max_timescale^(2i / features))

  Sines and cosines interleave (even / odd feature), as in the paper's formula (Flax's
  ``examples/wmt`` puts all sines before all cosines instead: the same set of columns in
  another order). Position 0 is ``[0, 1, 0, 1, ...]``; an odd ``features`` ends with a sine
  column. Every entry is in [-1, 1]; the matrix is a constant (no parameters).

  Args:
    length: ``T``, the number of positions (0, 1, ..., T - 1).
    features: ``d``, the width of the vectors it is added to.
    max_timescale: the longest wavelength / 2 pi (10,000 in the paper).
  """
  if length < 0 or features < 0:
    raise ValueError(f"length={length} and features={features} must be >= 0.")
  pos = np.arange(length, dtype=np.float64)[:, None]
  two_i = np.arange(0, features, 2, dtype=np.float64)[None, :]
  angle = pos / np.power(max_timescale, two_i / max(features, 1))
  pe = np.zeros((length, features), np.float64)
  pe[:, 0::2] = np.sin(angle)
  pe[:, 1::2] = np.cos(angle[:, :features // 2])
  return jnp.asarray(pe, jnp.float32)

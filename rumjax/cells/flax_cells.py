"""Flax's GRU and LSTM cells with the policy's ``precision`` field (registered as "gru"
and "lstm").

``nn.GRUCell`` and ``nn.OptimizedLSTMCell`` have ``dtype`` and ``param_dtype`` but no
``precision`` (flax 0.12). These subclasses add it, keyword only, with the values of every
cell of the zoo (:data:`rumjax.core.precision.PRECISIONS`, a ``lax.Precision`` or None:
the backend's default), and run Flax's own step under
:func:`rumjax.cells.base.matmul_precision`: every dot of the step (the input and hidden
projections, and so their gradients) is at that precision. The parameters, their names
and the equations are Flax's, unchanged.
"""

import dataclasses
from typing import Any

import flax.linen as nn

from rumjax.cells.base import matmul_precision


class GRUCell(nn.GRUCell):
  """``nn.GRUCell`` with ``precision`` (keyword only; None: the backend's default)."""
  precision: Any = dataclasses.field(default=None, kw_only=True)

  def __call__(self, carry, inputs):
    """Flax's GRU step at the matmul precision ``precision``."""
    with matmul_precision(self.precision):
      return super().__call__(carry, inputs)


class OptimizedLSTMCell(nn.OptimizedLSTMCell):
  """``nn.OptimizedLSTMCell`` with ``precision`` (keyword only; None: the backend's
  default)."""
  precision: Any = dataclasses.field(default=None, kw_only=True)

  def __call__(self, carry, inputs):
    """Flax's LSTM step at the matmul precision ``precision``."""
    with matmul_precision(self.precision):
      return super().__call__(carry, inputs)

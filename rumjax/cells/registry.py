"""Recurrent cells by short name, so that a config can say ``cell="rum"``.

Every registered cell is a ``flax.linen`` recurrent cell (``initialize_carry``,
``__call__(carry, x) -> (carry, y)``, ``num_feature_axes``) whose first field is
``features``, the hidden size. Register a new cell with::

    @register_cell("mycell")
    class MyCell(RecurrentCell):    # rumjax.cells.base: dtype fields, carry, zoneout
      features: int
      ...

A cell whose parameters need their own update rule registers it beside the cell with
:func:`register_optimizer_wrapper` (see ``rumjax.cells.urnn``).
"""

import dataclasses
from typing import Any, Callable, Mapping, Optional

import flax.linen as nn
import jax.numpy as jnp

from rumjax.cells import flax_cells
from rumjax.cells.base import resolve_dtype, resolve_precision
from rumjax.core import initializers
from rumjax.registry import Registry, did_you_mean

# The precision policy's fields: every registered cell has them (Flax's cells too).
DTYPE_FIELDS = ("dtype", "param_dtype")
# ... and the matmul precision (names of rumjax.core.precision.PRECISIONS), which every
# registered cell has too (Flax's GRU and LSTM through rumjax.cells.flax_cells).
POLICY_FIELDS = DTYPE_FIELDS + ("precision",)

CELLS = Registry("cell")

# Update rules that some cells need for their own parameters (the uRNN's Cayley steps on
# the Stiefel manifold): ``wrap(optimizer, learning_rate) -> optimizer``, each a no-op for a
# parameter tree without that cell's parameters. ``rumjax.training.optim.make_optimizer``
# applies them all, so a cell module registers its rule beside the cell, at import.
OPTIMIZER_WRAPPERS = Registry("optimizer wrapper")


def register_cell(name: str, cls: Optional[type] = None):
  """Registers ``cls`` under ``name``; usable as a decorator."""
  return CELLS.register(name, cls)


def register_optimizer_wrapper(name: str, wrap: Optional[Callable] = None):
  """Registers ``wrap(optimizer, learning_rate) -> optimizer`` (see ``OPTIMIZER_WRAPPERS``).

  ``optimizer`` is an ``optax.GradientTransformation``, ``learning_rate`` a float or an
  ``optax`` schedule. ``wrap`` must leave every parameter that is not its cell's to
  ``optimizer``; usable as a decorator.
  """
  return OPTIMIZER_WRAPPERS.register(name, wrap)


def optimizer_wrappers() -> list[Callable]:
  """The registered optimizer wrappers, in the order of their sorted names."""
  return [wrap for _, wrap in OPTIMIZER_WRAPPERS.items()]


def cell_names() -> list[str]:
  """The registered cell names, sorted."""
  return CELLS.names()


def get_cell_class(name: str) -> type:
  """The cell class registered as ``name``; ``ValueError`` listing the known and the close
  names if unknown (``unknown cell 'rnm'; known cells are [...]; did you mean 'rum'?``)."""
  return CELLS.get(name)


def cell_fields(name: str) -> list[str]:
  """The constructor fields of the cell ``name`` (besides ``parent`` and ``name``):
  the positional ones first (``features`` leads), then the keyword-only ones."""
  fields = sorted(dataclasses.fields(get_cell_class(name)), key=lambda f: f.kw_only is True)
  return [f.name for f in fields if f.init and f.name not in ("parent", "name")]


def make_cell(name: str, features: int, **kwargs: Any) -> nn.RNNCellBase:
  """Builds the cell ``name`` with hidden size ``features``.

  ``dtype`` and ``param_dtype`` may be given by name (``"bfloat16"``, ``"float32"``;
  ``param_dtype=None``: the cell's default, float32); ``precision`` by a name of
  :data:`rumjax.core.precision.PRECISIONS` (``"default"``, ``"high"``, ``"highest"``).

  Raises ``ValueError`` naming the option and the accepted ones if ``kwargs`` holds an
  option the cell does not have, or naming the dtype choices for an unknown dtype name.
  """
  cls = get_cell_class(name)
  initializers.check_sizes(features=features)
  accepted = cell_fields(name)
  unknown = sorted(set(kwargs) - set(accepted))
  if unknown:
    hint = did_you_mean(unknown[0], accepted)
    raise ValueError(f"cell {name!r} has no option(s) {unknown}; accepted: {accepted}"
                     + (f"; {hint}" if hint else "."))
  return cls(features, **resolve_dtypes(kwargs))


def resolve_dtypes(options: Mapping[str, Any]) -> dict:
  """``options`` with ``dtype``/``param_dtype`` names resolved to dtypes
  (:func:`rumjax.cells.base.resolve_dtype`) and a ``precision`` name to a
  ``lax.Precision`` or None (:func:`rumjax.core.precision.resolve_precision`); a ``None``
  ``param_dtype`` is dropped."""
  out = dict(options)
  for field in DTYPE_FIELDS:
    if field in out:
      out[field] = resolve_dtype(out[field], field)
  if "precision" in out:
    out["precision"] = resolve_precision(out["precision"])
  if "param_dtype" in out and out["param_dtype"] is None:
    del out["param_dtype"]
  param_dtype = out.get("param_dtype", jnp.float32)
  if jnp.dtype(param_dtype) != jnp.float32 and out.get("dtype") is None:
    # The computation then follows the inputs (float32 inputs: float32) while the initial
    # carry follows param_dtype: nn.RNN's scan would see the carry change dtype.
    raise ValueError(f"param_dtype={jnp.dtype(param_dtype).name} needs dtype set too "
                     f"(e.g. dtype='{jnp.dtype(param_dtype).name}'): with dtype=None the "
                     "computation follows the inputs and the initial carry param_dtype.")
  return out


def cell_from_config(name: str, features: int, options: Mapping[str, Any],
                     **overrides: Any) -> nn.RNNCellBase:
  """Builds the cell ``name`` taking from ``options`` (e.g. a task config) the entries
  whose keys are fields of that cell (``lam``, ``eta``, ``activation``, ``dtype``,
  ``param_dtype``, ...); the others are ignored, so one config serves every cell.
  ``overrides`` always apply. Dtypes and the precision may be names (``dtype="bfloat16"``,
  ``precision="highest"``)."""
  accepted = set(cell_fields(name)) - {"features"}
  kwargs = {k: options[k] for k in accepted if k in options}
  kwargs.update(overrides)
  return make_cell(name, features, **kwargs)


register_cell("lstm", flax_cells.OptimizedLSTMCell)
register_cell("gru", flax_cells.GRUCell)

"""``StackedCells``: recurrent cells stacked in depth, as one Flax recurrent cell.

Layer ``k`` reads the output of layer ``k - 1`` at the same time step (layer 1 reads the
input); the carry is the tuple of the layers' carries; the output is the last layer's::

    y^0_t = x_t
    (s^k_t, y^k_t) = cell_k(s^k_{t-1}, dropout(y^{k-1}_t))      k = 1..L (no dropout for k = 1)
    output y_t = y^L_t,  carry (s^1_t, ..., s^L_t)

This is the "2 x RUM" of the character-level Penn Treebank experiments (Dangovski et al.,
TACL 2019, section 4 D; appendix D, Table 5: two RUM layers of 1500 units, ``eta = 0.3``,
``lam = 0``, hidden zoneout 0.1, non-recurrent dropout 0.35). Dropout acts only *between*
layers; a language model adds its own on the embedding and on the output
(:class:`rumjax.models.lm.LanguageModel`).

The cells are given as (unbound) Flax cells; each gets its own parameters, at
``cells_0``, ``cells_1``, ... (also when the same cell object is passed twice). The
stack's ``deterministic`` is propagated to every layer that has that field (zoneout), so
``stack.clone(deterministic=not train)`` switches the whole stack, as
:func:`rumjax.models.sequence.run_recurrence` does.

    >>> stack = StackedCells((RUMCell(1500, eta=0.3, zoneout=0.1),
    ...                       RUMCell(1500, eta=0.3, zoneout=0.1)), dropout_rate=0.35)
    >>> rnn = nn.RNN(stack.clone(deterministic=False),
    ...              split_rngs={"params": False, "dropout": True})

:func:`stacked_from_config` builds one from a config (``cell``, ``hidden_size``,
``num_layers``, ``dropout_rate`` and the cell's options).
"""

import dataclasses
from typing import Any, Mapping, Optional, Sequence, Union

import flax.linen as nn
import jax

from rumjax.cells.base import check_probability, resolve_dtype, resolve_precision
from rumjax.cells.registry import cell_from_config


def has_field(module: nn.Module, field: str) -> bool:
  """Whether the dataclass ``module`` has the constructor field ``field``."""
  return any(f.name == field and f.init for f in dataclasses.fields(module))


def prepare_cells(cells: Sequence[nn.Module], deterministic: bool,
                  dtype: Optional[Any] = None, param_dtype: Optional[Any] = None,
                  precision: Optional[Any] = None) -> tuple:
  """The sub-cells of a composite cell, ready to be adopted by it.

  A cell is replaced by an unbound, unnamed clone when (a) it has a ``deterministic``
  field with another value (the composite's mode wins), or a ``dtype`` / ``param_dtype`` /
  ``precision`` field with another value than one given here (not ``None``, nor
  ``"default"`` for ``precision``: the composite's precision policy wins), (b) it is
  bound to another module (a composite cloned from a bound one,
  ``model.cell.clone(deterministic=...)``, holds the sub-cells of the *old* composite,
  which Flax would not adopt again), or (c) it is the
  same object as an earlier entry (Flax would share its parameters; each entry gets its
  own). Otherwise the cell itself is kept, so Flax's transforms (``nn.RNN``'s scan), which
  re-create the composite with the same sub-cell objects, find them again.
  """
  wanted = {"deterministic": deterministic, "dtype": resolve_dtype(dtype, "dtype"),
            "param_dtype": resolve_dtype(param_dtype, "param_dtype"),
            "precision": resolve_precision(precision)}
  out = []
  for cell in cells:
    updates = {k: v for k, v in wanted.items()
               if v is not None and has_field(cell, k) and getattr(cell, k) != v}
    if updates or isinstance(cell.parent, nn.Module) or any(cell is c for c in out):
      cell = cell.clone(parent=None, name=None, **updates)
    out.append(cell)
  return tuple(out)


class StackedCells(nn.RNNCellBase):
  """Recurrent cells stacked in depth (layer ``k`` reads layer ``k - 1``'s output).

  Attributes:
    cells: the layers, bottom first (a sequence of Flax recurrent cells with a
      ``features`` attribute, e.g. from :func:`rumjax.cells.make_cell`).
    dropout_rate: probability of *dropping* a unit of a layer's output before the next
      layer reads it (non-recurrent dropout, inverted scaling; the ``"dropout"`` RNG). Not
      applied to the input of the first layer nor to the output of the last.
    deterministic: evaluation mode: no dropout, and every layer with a ``deterministic``
      field (zoneout) gets this value (a layer's own setting is overridden).
    dtype: the computation dtype of every layer (``None``: each layer's own); given, it
      overrides the layers' ``dtype`` (the precision policy of :mod:`rumjax.cells.base`).
    param_dtype: the parameter dtype of every layer (``None``: each layer's own, float32
      by default).
    precision: the matmul precision of every layer (``None`` or ``"default"``: each
      layer's own; see :mod:`rumjax.cells.base`); given, it overrides the layers'.
  """
  cells: Sequence[nn.RNNCellBase]
  dropout_rate: float = 0.0
  deterministic: bool = True
  dtype: Optional[Any] = None
  param_dtype: Optional[Any] = None
  precision: Optional[Any] = None

  def __post_init__(self):
    object.__setattr__(self, "cells", prepare_cells(self.cells, self.deterministic,
                                                    self.dtype, self.param_dtype,
                                                    self.precision))
    super().__post_init__()

  @property
  def features(self) -> int:
    """The output size: the last layer's ``features``."""
    return self.cells[-1].features

  @nn.nowrap
  def _validate(self):
    if not self.cells:
      raise ValueError("StackedCells needs at least one cell.")
    check_probability("dropout_rate", self.dropout_rate)

  @nn.compact
  def __call__(self, carry, inputs):
    """One time step through every layer.

    Args:
      carry: ``(s^1, ..., s^L)``, the layers' carries (from :meth:`initialize_carry`).
      inputs: ``x_t`` <float>[..., N_x].

    Returns:
      ``((s^1_t, ..., s^L_t), y^L_t)``, ``y^L_t`` <float>[..., features].
    """
    self._validate()
    if len(carry) != len(self.cells):
      raise ValueError(f"carry has {len(carry)} entries for {len(self.cells)} layers.")
    y, new_carry = inputs, []
    for k, (cell, c) in enumerate(zip(self.cells, carry)):
      if k > 0:
        y = nn.Dropout(self.dropout_rate, deterministic=self.deterministic,
                       name=f"dropout_{k}")(y)
      c, y = cell(c, y)
      new_carry.append(c)
    return tuple(new_carry), y

  @nn.nowrap
  def initialize_carry(self, rng, input_shape):
    """The layers' initial carries for inputs of shape ``(..., N_x)``.

    Layer ``k > 1`` is initialised for inputs of shape ``(..., cells[k-1].features)``.
    """
    self._validate()
    batch = tuple(input_shape[:-1])
    keys = jax.random.split(rng, len(self.cells))
    carry, shape = [], tuple(input_shape)
    for key, cell in zip(keys, self.cells):
      carry.append(cell.initialize_carry(key, shape))
      shape = batch + (cell.features,)
    return tuple(carry)

  @property
  def num_feature_axes(self) -> int:
    return 1


def stacked_from_config(config: Mapping[str, Any], *,
                        dropout_rate: Optional[float] = None) -> StackedCells:
  """A :class:`StackedCells` of ``config["num_layers"]`` cells ``config["cell"]``.

  Fields read from ``config`` (e.g. ``config.model``):

  - ``cell``: the registered cell of every layer (``"rum"``, ``"lnlstm"``, ...);
  - ``hidden_size``: an int (every layer) or a sequence of ints, one per layer;
  - ``num_layers``: the depth ``L >= 1`` (default: the length of ``hidden_size`` if it is
    a sequence, else 2);
  - ``dropout_rate``: the drop probability between layers (default 0; the same field as a
    language model's non-recurrent dropout, as in the papers, which use one rate, 0.35);
  - the cell's own options (``lam``, ``eta``, ``layer_norm``, ``zoneout``, ...), passed to
    every layer by :func:`rumjax.cells.cell_from_config` (entries that are not fields of
    that cell are ignored), among them the precision policy ``dtype`` / ``param_dtype`` /
    ``precision`` (names such as ``"bfloat16"``, ``"highest"``), which every layer gets.

  Args:
    config: a mapping (``ml_collections.ConfigDict`` or dict) with the fields above.
    dropout_rate: overrides ``config["dropout_rate"]``.

  Example (the papers' 2 x RUM)::

      stacked_from_config(dict(cell="rum", hidden_size=1500, num_layers=2, lam=0, eta=0.3,
                               layer_norm=True, zoneout=0.1, dropout_rate=0.35))
  """
  sizes: Union[int, Sequence[int]] = _require(config, "hidden_size", "stacked")
  num_layers = config.get("num_layers")
  if isinstance(sizes, int):
    sizes = [sizes] * (2 if num_layers is None else int(num_layers))
  else:
    sizes = [int(s) for s in sizes]
    if num_layers is not None and int(num_layers) != len(sizes):
      raise ValueError(f"num_layers={num_layers} but hidden_size has {len(sizes)} entries.")
  if not sizes:
    raise ValueError("num_layers must be >= 1.")
  name = _require(config, "cell", "stacked")
  cells = tuple(cell_from_config(name, n, config) for n in sizes)
  if dropout_rate is None:
    dropout_rate = config.get("dropout_rate") or 0.0
  return StackedCells(cells, dropout_rate=float(dropout_rate))


def _require(config: Mapping[str, Any], field: str, what: str) -> Any:
  """``config[field]``; ``ValueError`` naming the field if it is missing or ``None``."""
  value = config.get(field)
  if value is None:
    raise ValueError(f"the {what} cell needs the config field {field!r}.")
  return value

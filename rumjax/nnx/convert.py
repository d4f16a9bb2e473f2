"""Weights between the front ends: a Linen cell's ``params`` into an NNX cell and back.

``from_linen(nnx_cell, params)`` loads ``params`` (the Linen cell's
``variables["params"]``, or under ``nn.RNN`` ``variables["params"]["cell"]``) into an NNX
cell built with the same options and sizes; ``to_linen(nnx_cell)`` returns the Linen
cell's ``params``. The rumjax cells store the same tree in both front ends; Flax's LSTM
and GRU split or join their gate kernels (Linen ``ii, if, ig, io / hi, hf, hg, ho`` ->
NNX ``dense_i, dense_h``; Linen ``ir, iz, in / hr, hz, hn`` -> NNX ``dense_i, dense_h``).
"""

from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rumjax.nnx.cells import Cell

_LSTM_GATES = ("i", "f", "g", "o")
_GRU_GATES = ("r", "z", "n")


def _lstm_to_linen(p: Mapping) -> dict:
  split = lambda a: jnp.split(a, 4, axis=-1)
  out = {}
  for g, k in zip(_LSTM_GATES, split(p["dense_i"]["kernel"])):
    out["i" + g] = {"kernel": k}
  for g, k, b in zip(_LSTM_GATES, split(p["dense_h"]["kernel"]), split(p["dense_h"]["bias"])):
    out["h" + g] = {"kernel": k, "bias": b}
  return out


def _lstm_from_linen(p: Mapping) -> dict:
  cat = lambda prefix, leaf: jnp.concatenate([p[prefix + g][leaf] for g in _LSTM_GATES], -1)
  return {"dense_i": {"kernel": cat("i", "kernel")},
          "dense_h": {"kernel": cat("h", "kernel"), "bias": cat("h", "bias")}}


def _gru_to_linen(p: Mapping) -> dict:
  split = lambda a: jnp.split(a, 3, axis=-1)
  out = {}
  for g, k, b in zip(_GRU_GATES, split(p["dense_i"]["kernel"]), split(p["dense_i"]["bias"])):
    out["i" + g] = {"kernel": k, "bias": b}
  for g, k in zip(_GRU_GATES, split(p["dense_h"]["kernel"])):
    out["h" + g] = {"kernel": k}
  out["hn"]["bias"] = jnp.zeros_like(out["in"]["bias"])
  return out


def _gru_from_linen(p: Mapping) -> dict:
  b_hn = p["hn"]["bias"]
  if not isinstance(b_hn, jax.core.Tracer) and np.any(np.asarray(b_hn) != 0):
    raise ValueError("this Linen GRUCell has a non-zero hn/bias (b_hn inside r * (W_hn h + "
                     "b_hn)), which Flax's nnx.GRUCell does not have; it cannot be "
                     "loaded exactly (train the Linen GRU with hn/bias frozen at 0).")
  cat = lambda prefix, leaf: jnp.concatenate([p[prefix + g][leaf] for g in _GRU_GATES], -1)
  return {"dense_i": {"kernel": cat("i", "kernel"), "bias": cat("i", "bias")},
          "dense_h": {"kernel": cat("h", "kernel")}}


_FLAX_CELLS = {nnx.OptimizedLSTMCell: (_lstm_to_linen, _lstm_from_linen),
               nnx.LSTMCell: (_lstm_to_linen, None),
               nnx.GRUCell: (_gru_to_linen, _gru_from_linen)}


def _nnx_params(cell) -> dict:
  return nnx.to_pure_dict(nnx.state(cell, nnx.Param))


def _converters(cell):
  if isinstance(cell, Cell):
    return (lambda p: p), (lambda p: p)
  # Flax's own cell or rumjax.nnx's subclass of it (which adds only ``precision``).
  for cls in type(cell).__mro__:
    conv = _FLAX_CELLS.get(cls)
    if conv is not None:
      if conv[1] is None:
        raise TypeError("nnx.LSTMCell keeps separate gate layers; use nnx.OptimizedLSTMCell "
                        "(rumjax.nnx.make_cell('lstm', ...)), the cell of Linen's 'lstm'.")
      return conv
  raise TypeError(f"{type(cell).__name__} is not an NNX cell of rumjax.nnx (names: "
                  "rumjax.nnx.cell_names()); build it with rumjax.nnx.make_cell.")


def to_linen(cell: nnx.Module) -> dict:
  """The parameters of the NNX ``cell`` as the Linen cell of the same name stores them.

  Returns:
    a nested dict of arrays: the Linen cell's ``variables["params"]`` (use it as
    ``{"params": to_linen(cell)}``, or ``{"params": {"cell": to_linen(cell)}}`` under
    ``nn.RNN``).
  """
  return _converters(cell)[0](_nnx_params(cell))


def _structure(tree) -> Any:
  return jax.tree.map(jnp.shape, tree)


def from_linen(cell: nnx.Module, params: Mapping) -> nnx.Module:
  """Loads a Linen cell's ``params`` into the NNX ``cell`` (in place) and returns it.

  Args:
    cell: an NNX cell of :mod:`rumjax.nnx` built with the Linen cell's options and sizes
      (``in_features`` = the inputs' size, ``hidden_features`` = the Linen
      ``features``).
    params: the Linen cell's ``variables["params"]`` (a ``{"params": ...}`` dict, and the
      params of an ``nn.RNN`` holding the cell, ``{"cell": ...}``, are accepted too).
      Values are cast to the NNX cell's parameter dtypes.

  Raises:
    ValueError naming the parameters whose names or shapes differ.
  """
  if set(params) == {"params"}:
    params = params["params"]
  if set(params) == {"cell"}:        # nn.RNN(cell)'s params
    params = params["cell"]
  old = _nnx_params(cell)
  try:
    new = _converters(cell)[1](params)
  except KeyError as err:
    raise ValueError(f"the Linen params do not fit this {type(cell).__name__}: they have no "
                     f"{err} (they have {sorted(params)}); pass the Linen cell's "
                     "variables['params'].") from None
  if _structure(new) != _structure(old):
    flat = lambda t: {jax.tree_util.keystr(k): jnp.shape(v)
                      for k, v in jax.tree_util.tree_leaves_with_path(t)}
    got, want = flat(new), flat(old)
    diff = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
    raise ValueError(
        f"the Linen params do not fit this {type(cell).__name__}: "
        + "; ".join(f"{k}: got {got.get(k)}, expected {want.get(k)}" for k in diff[:4])
        + ". Build the NNX cell with the Linen cell's options and sizes.")
  new = jax.tree.map(lambda v, o: jnp.asarray(v, o.dtype), new, old)
  state = nnx.state(cell, nnx.Param)
  nnx.replace_by_pure_dict(state, new)
  nnx.update(cell, state)
  return cell

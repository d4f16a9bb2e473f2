r"""Loss landscapes through the rotation weights: Figure 8 of the RUM paper.

Dangovski et al. (TACL 2019, sec. 5, Figure 8) compare RUM and GORU on associative recall:
with the first training batch fixed, the loss is drawn along a line (1-D) and over a plane
(2-D) through a trained model's weights, varying only the weights that enter the
orthogonal transformation (RUM: the kernels that build ``Rotation(e, tau)``; GORU: the
angles of its phase-coded kernel) and keeping all the others fixed. RUM's angles depend on
the input, so its landscape should have fewer local minima than GORU's, whose angles do
not. Following Li et al. (2018), "Visualizing the loss landscape of neural nets"
(NeurIPS), the directions are random and *filter-normalised*::

    line:   L(a)    = loss(w* + a d1),             a in alphas
    plane:  L(a, b) = loss(w* + a d1 + b d2),      (a, b) in alphas x betas

The weights varied (:func:`rotation_param_paths`), in the parameter layout of
:mod:`rumjax.core.rum` (kernels act from the right, columns are output units):

* RUM (``kernel_x`` columns ``[tau | u | e]``, ``kernel_h`` columns ``[tau | u]``):
  ``W^tau_xh = kernel_x[:, 0:Nh]``, ``W~_xh = kernel_x[:, 2Nh:3Nh]`` and
  ``W^tau_hh = kernel_h[:, 0:Nh]``, since ``tau_t = x W^tau_xh + h W^tau_hh + b^tau`` and
  ``e_t = x W~_xh + b``. The update-gate blocks (``u``), the biases and every other
  parameter (the head) stay fixed. The biases also enter ``tau`` and ``e``; like Li et al.
  (who set the bias components of a direction to zero) they are not varied.
* GORU: ``thetas``, the angles of the EUNN-parametrised orthogonal kernel ``U``
  (:mod:`rumjax.cells.goru`); its gates, ``W_h`` and the head stay fixed.

Filter normalisation (:func:`filter_normalized_direction`): ``d`` is drawn ``N(0, 1)``
with the shape of each weight, zeroed outside the selection, then each *filter* of ``d``
is rescaled to the norm of the same filter of the trained weights (both restricted to the
selection). For a kernel of ndim >= 2 a filter is one output unit, a slice ``[..., j]``
(a column of a dense kernel ``(in, out)``, as Li et al.'s output channel of a conv
kernel); a vector (GORU's ``thetas``) is one filter, normalised as a whole.

Nothing here imports a task: :func:`first_batch_loss` and :func:`landscape_of_run` take the
task (or a name -> task lookup such as ``tasks.get_task``) as an argument.
"""

import time
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rumjax.analysis import runs
from rumjax.registry import Registry



class Block(NamedTuple):
  """A selected block of one parameter leaf.

  Attributes:
    path: the leaf's keys in the parameter tree, e.g. ``("rnn", "cell", "kernel_x")``.
    columns: the selected output units (a ``slice`` of the last axis), or ``None`` for
      the whole leaf.
    name: the paper's name of the block, e.g. ``"W^tau_xh"``.
  """
  path: tuple
  columns: Optional[slice]
  name: str

  def describe(self) -> str:
    """E.g. ``"rnn/cell/kernel_x[:, 0:50] (W^tau_xh)"``."""
    cols = "" if self.columns is None else f"[:, {self.columns.start}:{self.columns.stop}]"
    return f"{'/'.join(map(str, self.path))}{cols} ({self.name})"


# ---------------------------------------------------------------- the rotation weights


def _subtrees(tree: Any, path: tuple = ()):
  """Every dict of ``tree`` with its path, depth first in sorted key order."""
  if isinstance(tree, Mapping):
    yield path, tree
    for key in sorted(tree):
      yield from _subtrees(tree[key], path + (key,))


def _is_rum_cell(node: Mapping) -> bool:
  """``{kernel_x (Nx, 3Nh), kernel_h (Nh, 2Nh), bias (3Nh,), [ln_*]}``: a RUM cell."""
  if not {"kernel_x", "kernel_h", "bias"} <= set(node) or "thetas" in node:
    return False
  kx, kh, b = (np.shape(node[k]) for k in ("kernel_x", "kernel_h", "bias"))
  return (len(kh) == 2 and kh[1] == 2 * kh[0] and len(kx) == 2 and kx[1] == 3 * kh[0]
          and b == (3 * kh[0],))


def _rum_blocks(path: tuple, node: Mapping) -> list[Block]:
  """RUM, hidden size ``Nh``: ``W^tau_xh``, ``W~_xh`` (of ``kernel_x``) and ``W^tau_hh``."""
  if not _is_rum_cell(node):
    return []
  nh = np.shape(node["kernel_h"])[0]
  return [Block(path + ("kernel_x",), slice(0, nh), "W^tau_xh"),
          Block(path + ("kernel_x",), slice(2 * nh, 3 * nh), "W~_xh"),
          Block(path + ("kernel_h",), slice(0, nh), "W^tau_hh")]


def _goru_blocks(path: tuple, node: Mapping) -> list[Block]:
  """GORU: ``thetas``, the angles of its orthogonal ``U``."""
  if "thetas" in node and "kernel_h" in node:
    return [Block(path + ("thetas",), None, "thetas: angles of U")]
  return []


# cell name -> (path, subtree) -> the blocks of that subtree if it is such a cell.
ROTATION_BLOCKS = Registry("cell with rotation weights")
ROTATION_BLOCKS.register("rum", _rum_blocks)
ROTATION_BLOCKS.register("goru", _goru_blocks)


def rotation_param_paths(cell_name: str, params: Any) -> list[Block]:
  """The weights used in the rotation (Figure 8), for every such cell in ``params``.

  Args:
    cell_name: a name of :data:`ROTATION_BLOCKS` (``config.model.cell``: ``"rum"`` or
      ``"goru"``).
    params: a model's parameter tree (nested dicts of arrays), e.g.
      ``{"rnn": {"cell": {...}}, "head": {...}}``.

  Returns:
    The selected blocks. RUM, per cell of hidden size ``Nh``: ``kernel_x[:, 0:Nh]``
    (``W^tau_xh``), ``kernel_x[:, 2Nh:3Nh]`` (``W~_xh``), ``kernel_h[:, 0:Nh]``
    (``W^tau_hh``). GORU, per cell: ``thetas`` (the angles of ``U``).

  Raises:
    ValueError: for another cell, or if ``params`` holds no such cell.
  """
  if cell_name not in ROTATION_BLOCKS:
    raise ValueError(f"the landscape of Figure 8 varies the rotation weights of a cell in "
                     f"{ROTATION_BLOCKS.names()}; cell {cell_name!r} has none.")
  blocks_of = ROTATION_BLOCKS.get(cell_name)
  blocks = [b for path, node in _subtrees(params) for b in blocks_of(path, node)]
  if not blocks:
    raise ValueError(f"no {cell_name!r} cell parameters in this parameter tree (top-level "
                     f"keys {sorted(params) if isinstance(params, Mapping) else params}).")
  return blocks


def rotation_mask(params: Any, blocks: Sequence[Block]) -> Any:
  """A tree like ``params`` of float 0/1 arrays: 1 on the ``blocks``, 0 elsewhere."""
  by_path: dict = {}
  for b in blocks:
    by_path.setdefault(tuple(b.path), []).append(b.columns)

  def build(tree, path):
    if isinstance(tree, Mapping):
      return {k: build(v, path + (k,)) for k, v in tree.items()}
    mask = np.zeros(np.shape(tree), np.float32)
    for cols in by_path.get(path, ()):
      mask[..., slice(None) if cols is None else cols] = 1.0
    return mask

  return build(params, ())


def num_selected(mask_tree: Any) -> int:
  """The number of weights the mask selects."""
  return int(sum(np.sum(m) for m in jax.tree.leaves(mask_tree)))


# ------------------------------------------------------------------------ directions


def normalize_filters(d: jax.Array, w: jax.Array) -> jax.Array:
  """Rescales each filter of ``d`` to the norm of the same filter of ``w`` (Li et al.).

  Args:
    d: <float>[..., out] a direction (or a vector / scalar).
    w: the weights, same shape.

  Returns:
    ``d`` with ``|d[..., j]| = |w[..., j]|`` for every output unit ``j`` (ndim >= 2), or
    ``|d| = |w|`` (ndim <= 1). A filter with ``|d| = 0`` stays 0.
  """
  axes = tuple(range(d.ndim - 1)) if d.ndim >= 2 else None
  d_norm = jnp.sqrt(jnp.sum(jnp.square(d), axis=axes, keepdims=True))
  w_norm = jnp.sqrt(jnp.sum(jnp.square(w), axis=axes, keepdims=True))
  return jnp.where(d_norm > 0, d * w_norm / jnp.where(d_norm > 0, d_norm, 1.0), 0.0)


def filter_normalized_direction(key: jax.Array, params: Any, mask_tree: Any) -> Any:
  """A random filter-normalised direction over the selected weights only (Li et al., 2018).

  Args:
    key: a PRNG key.
    params: the trained weights ``w*`` (a tree of arrays).
    mask_tree: a tree like ``params`` with 1 on the weights to vary, 0 elsewhere
      (:func:`rotation_mask`).

  Returns:
    A tree like ``params``: ``N(0, 1)`` on the selection, 0 elsewhere, each filter rescaled
    to the norm of the selected part of the matching filter of ``params``
    (:func:`normalize_filters`).
  """
  leaves, treedef = jax.tree.flatten(params)
  masks = treedef.flatten_up_to(mask_tree)
  keys = jax.random.split(key, len(leaves))
  out = []
  for k, w, m in zip(keys, leaves, masks):
    w = jnp.asarray(w)
    m = jnp.asarray(m, w.dtype)
    out.append(normalize_filters(jax.random.normal(k, w.shape, w.dtype) * m, w * m))
  return treedef.unflatten(out)


# ----------------------------------------------------------------------- evaluation


def _losses(loss_fn, params, directions, coeffs, batch_size):
  """``loss_fn(params + sum_k coeffs[i, k] directions[k])`` for every row ``i``."""
  def one(c):
    moved = jax.tree.map(lambda w, *ds: w + sum(ci * di for ci, di in zip(c, ds)),
                         params, *directions)
    return loss_fn(moved)
  return jax.lax.map(one, coeffs, batch_size=batch_size)


def losses_at(loss_fn: Callable, params: Any, directions: Sequence[Any],
              coeffs, *, batch_size: Optional[int] = None) -> np.ndarray:
  """The loss at ``params + coeffs[i] . directions`` for every row, compiled once.

  Args:
    loss_fn: ``params -> scalar``.
    params: the centre ``w*``.
    directions: K trees like ``params``.
    coeffs: <float>[M, K].
    batch_size: points evaluated at once (``jax.lax.map``'s ``batch_size``: vmapped
      chunks); ``None`` evaluates one point at a time.

  Returns:
    <float32>[M] (NumPy).
  """
  coeffs = jnp.asarray(coeffs, jnp.float32)
  fn = jax.jit(lambda p, ds, c: _losses(loss_fn, p, ds, c, batch_size))
  return np.asarray(fn(params, list(directions), coeffs), np.float32)


def loss_along_line(loss_fn: Callable, params: Any, d: Any, alphas,
                    *, batch_size: Optional[int] = None) -> np.ndarray:
  """``L(a) = loss_fn(params + a d)`` for ``a`` in ``alphas`` <float>[A] -> <float>[A]."""
  alphas = np.asarray(alphas, np.float32)
  return losses_at(loss_fn, params, [d], alphas[:, None], batch_size=batch_size)


def loss_on_plane(loss_fn: Callable, params: Any, d1: Any, d2: Any, alphas, betas,
                  *, batch_size: Optional[int] = None) -> np.ndarray:
  """``L(a, b) = loss_fn(params + a d1 + b d2)`` on the grid ``alphas x betas``.

  Returns:
    <float>[A, B] with ``[i, j]`` at ``(alphas[i], betas[j])`` (so a contour plot takes
    its transpose).
  """
  a, b = np.meshgrid(np.asarray(alphas, np.float32), np.asarray(betas, np.float32),
                     indexing="ij")
  values = losses_at(loss_fn, params, [d1, d2], np.stack([a.ravel(), b.ravel()], -1),
                     batch_size=batch_size)
  return values.reshape(a.shape)


# -------------------------------------------------------------------- local minima


def count_local_minima(values, tol: float = 0.0) -> int:
  """The strict interior local minima of a 1-D curve.

  Rule: consecutive values that differ by at most ``tol`` form a plateau (one point);
  a point or plateau is a minimum if its left and right neighbours are both strictly
  higher (``v[i-1] > v[i]`` and ``v[j+1] > v[j]`` for the plateau ``v[i..j]``), i.e. the
  curve goes down into it and up out of it. A point or plateau that touches an end of the
  curve never counts (so a monotone curve has 0). Non-finite values count as ``+inf``
  (walls); two neighbouring infinities are a plateau.

  Args:
    values: <float>[N].
    tol: the largest difference still treated as equal (0: exact equality).

  Returns:
    The number of minima.
  """
  v = np.asarray(values, np.float64).ravel()
  v = np.where(np.isfinite(v), v, np.inf)
  with np.errstate(invalid="ignore"):
    diff = np.diff(v)
  diff = np.where(np.isnan(diff), 0.0, diff)            # inf - inf: a plateau
  signs = np.sign(np.where(np.abs(diff) <= tol, 0.0, diff))
  signs = signs[signs != 0]                             # plateaus merge into one point
  return int(np.sum((signs[:-1] < 0) & (signs[1:] > 0)))


def count_local_minima_2d(values) -> int:
  """Interior grid points strictly lower than their 8 neighbours, <float>[A, B] -> int
  (plateau minima do not count; non-finite values are ``+inf``)."""
  v = np.asarray(values, np.float64)
  v = np.where(np.isfinite(v), v, np.inf)
  if v.ndim != 2 or min(v.shape) < 3:
    return 0
  centre = v[1:-1, 1:-1]
  lower = np.ones(centre.shape, bool)
  for di in (-1, 0, 1):
    for dj in (-1, 0, 1):
      if di or dj:
        lower &= centre < v[1 + di:v.shape[0] - 1 + di, 1 + dj:v.shape[1] - 1 + dj]
  return int(lower.sum())


# -------------------------------------------------------------------- a trained run


def first_batch_loss(task, config) -> tuple[Callable, dict]:
  """The loss of Figure 8: ``params -> task loss`` on the first training batch.

  The batch is the first of ``task.train_data(config)`` (fixed); the model is
  ``task.build_model(config)`` in evaluation mode and the loss is the first output of
  ``task.loss_and_metrics`` (for recall the mean cross-entropy over the batch, i.e. the
  paper's sum ``L(W, B) = sum_j F(W, b_j)`` divided by the batch size). A task with a
  carried model state starts from ``task.initial_model_state``.

  Returns:
    ``(loss_fn, batch)``.
  """
  batch = jax.tree.map(jnp.asarray, dict(next(iter(task.train_data(config)))))
  model = task.build_model(config)
  rows = int(np.shape(jax.tree.leaves(batch)[0])[0])
  state = (task.initial_model_state(config, rows)
           if task.initial_model_state is not None else None)

  def loss_fn(params):
    if state is None:
      outputs = model.apply({"params": params}, batch, train=False)
    else:
      outputs, _ = model.apply({"params": params}, batch, train=False, model_state=state)
    return task.loss_and_metrics(outputs, batch)[0]

  return loss_fn, batch


def model_label(config) -> str:
  """E.g. ``"RUM λ=1 (Nh=50)"`` or ``"GORU (Nh=50)"``."""
  m = config.model
  name = str(m.get("cell")).upper()
  if m.get("cell") == "rum":
    name += f" λ={m.get('lam')}"
  return f"{name} (Nh={m.get('hidden_size')})"


def landscape_of_run(workdir: str, get_task: Callable[[str], Any], *,
                     cell: Optional[str] = None, points: int = 51, grid: int = 21,
                     span: float = 1.0, seed: int = 0,
                     batch_size: Optional[int] = None) -> dict:
  """Figure 8 for one trained run: the 1-D line and 2-D plane through its weights.

  Args:
    workdir: a training workdir (``config.json`` and checkpoints).
    get_task: ``name -> task`` (``tasks.get_task``).
    cell: the cell the run must have (``"rum"``, ``"goru"``), or ``None`` for any.
    points: points of the line, ``alphas = linspace(-span, span, points)``.
    grid: points per axis of the plane (``grid x grid``).
    span: the range of ``alpha`` and ``beta``.
    seed: the directions are ``d1, d2 = split(key(seed))`` (``d1`` is the line's and the
      plane's first axis, so the plane at ``beta = 0`` lies on the line).
    batch_size: see :func:`losses_at`.

  Returns:
    A JSON-able dict: ``workdir`` (:func:`rumjax.analysis.runs.recorded_path`: no machine
    path), ``step``, ``cell``, ``label``, ``varied`` (the blocks), ``num_varied``,
    ``loss_at_params``, ``alphas`` / ``line`` / ``local_minima_1d``,
    ``grid_alphas`` / ``grid_betas`` / ``plane`` (``[i][j]`` at ``(alpha_i, beta_j)``) /
    ``local_minima_2d``, ``seconds``.
  """
  for name, value, low in (("points", points, 2), ("grid", grid, 2)):
    if not isinstance(value, int) or value < low:
      raise ValueError(f"{name}={value!r} must be an integer >= {low}.")
  if not span > 0:
    raise ValueError(f"span={span!r} must be > 0.")
  start = time.perf_counter()
  task, config, step, params = runs.load_run(workdir, get_task)
  run_cell = config.model.get("cell")
  if run_cell is None:
    raise ValueError(f"{workdir!r} is a {config.model.get('name')!r} model's run without "
                     "config.model.cell; the landscape needs the run of a model with one "
                     "cell (e.g. copying or recall).")
  if cell is not None and run_cell != cell:
    raise ValueError(f"{workdir!r} is a {run_cell!r} run; expected a {cell!r} run.")
  blocks = rotation_param_paths(run_cell, params)
  mask = rotation_mask(params, blocks)
  params = jax.tree.map(jnp.asarray, params)
  loss_fn, _ = first_batch_loss(task, config)
  k1, k2 = jax.random.split(jax.random.key(seed))
  d1 = filter_normalized_direction(k1, params, mask)
  d2 = filter_normalized_direction(k2, params, mask)
  alphas = np.linspace(-span, span, points)
  axis = np.linspace(-span, span, grid)
  line = loss_along_line(loss_fn, params, d1, alphas, batch_size=batch_size)
  plane = loss_on_plane(loss_fn, params, d1, d2, axis, axis, batch_size=batch_size)
  return {
      "workdir": runs.recorded_path(workdir), "step": step, "cell": run_cell,
      "label": model_label(config),
      "task": config.task, "variant": config.get("variant"),
      "varied": [b.describe() for b in blocks], "num_varied": num_selected(mask),
      "loss_at_params": float(jax.jit(loss_fn)(params)),
      "alphas": alphas.tolist(), "line": line.tolist(),
      "local_minima_1d": count_local_minima(line),
      "grid_alphas": axis.tolist(), "grid_betas": axis.tolist(), "plane": plane.tolist(),
      "local_minima_2d": count_local_minima_2d(plane),
      "seconds": time.perf_counter() - start,
  }

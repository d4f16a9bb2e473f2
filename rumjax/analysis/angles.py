"""Looking inside a trained RUM: the rotation angles and the target-memory kernel.

The RUM paper (Dangovski et al., TACL 2019, Figure 5) shows, for associative recall,

* (a) a heat map of the weight kernel of the target memory ``W^tau_hh`` (here the first
  ``Nh`` columns of ``kernel_h``, see :func:`target_kernel`);
* (b, c) the distribution of ``cos(theta_t)`` over the ``T`` time steps, at several points
  of training, where ``theta_t`` is the angle between the embedded input ``e_t`` and the
  target ``tau_t`` of step ``t``, averaged over the mini-batch (:func:`mean_cos_per_step`).

``cos(theta_t)`` is read from what the RUM modules sow (:class:`rumjax.RUMCell` and
:class:`rumjax.cells.rum.RUM` sow it when the ``"intermediates"`` collection is mutable):
:func:`cos_theta` runs any model on any batch, so the embedding, the inputs and the
parameter paths are the model's own. The kernel helpers work on the parameters of a RUM
cell (``{"kernel_x", "kernel_h", "bias"}``) wherever they sit in a model's parameter tree
(:func:`find_rum_params`); parameters load from a training workdir's orbax checkpoints or a
``.npz`` file (:func:`rumjax.analysis.runs.load_params`, :func:`rumjax.analysis.runs.save_params_npz`); :func:`read_jsonl` and
:func:`metric_curve` read the loop's ``metrics.jsonl``. Nothing here imports a task: the
functions that need one (:func:`fixed_batch`, :func:`cos_from_checkpoints`) take the task
module as an argument.
"""

import json
import os
from typing import Any, Iterable, Mapping, Optional

import jax
import numpy as np

from rumjax import utils
from rumjax.cells.rum import LAM_PARAM
from rumjax.training import checkpoint as checkpoint_lib
from rumjax.training import hooks as hooks_lib

COS_FILE = "cos_theta.jsonl"

_RUM_KEYS = frozenset({"kernel_x", "kernel_h", "bias"})
# A RUM cell with a learned lam has its parameter too.
_OPTIONAL_KEYS = frozenset({LAM_PARAM})


# ----------------------------------------------------------------------- parameters


def is_rum_params(tree: Any) -> bool:
  """Whether ``tree`` is the parameter dict of a RUM cell without layer norm (with or
  without a learned ``lam``)."""
  if not isinstance(tree, Mapping) or not _RUM_KEYS <= set(tree) <= _RUM_KEYS | _OPTIONAL_KEYS:
    return False
  kh = np.shape(tree["kernel_h"])
  return len(kh) == 2 and kh[1] == 2 * kh[0]


def find_rum_params(params: Any) -> tuple[str, Mapping[str, Any]]:
  """The (first, in sorted key order) RUM cell parameters in a model's parameter tree.

  Returns:
    ``(path, cell_params)``, e.g. ``("rnn/cell", {...})`` for the sequence models of
    :mod:`rumjax.models`.

  Raises:
    ValueError: if there is none (e.g. an LSTM model, or a RUM with layer norm, whose
      ``cos(theta)`` is not that of :func:`rumjax.rum_scan`).
  """
  if is_rum_params(params):
    return "", params
  if isinstance(params, Mapping):
    for key in sorted(params):
      try:
        path, found = find_rum_params(params[key])
      except ValueError:
        continue
      return (f"{key}/{path}" if path else str(key)), found
  raise ValueError("no RUM cell parameters ({kernel_x, kernel_h, bias} with kernel_h of "
                   "shape (Nh, 2 Nh)) in this parameter tree.")


def target_kernel(cell_params: Mapping[str, Any]) -> np.ndarray:
  """``W^tau_hh``, <float>[Nh, Nh]: the first ``Nh`` columns of ``kernel_h`` (Figure 5a).

  ``tau_t = x_t W^tau_xh + h_{t-1} W^tau_hh + b^tau`` (kernels act from the right), so
  entry ``[i, j]`` is the weight of ``h_{t-1}[i]`` in ``tau_t[j]``.
  """
  kernel_h = np.asarray(cell_params["kernel_h"])
  nh = kernel_h.shape[0]
  return kernel_h[:, :nh]


def kernel_blocks(cell_params: Mapping[str, Any]) -> dict:
  """Every kernel of a RUM cell by its name in Algorithm 1 (the collection of the RUM
  conference paper's Figures 7 and 8): ``kernel_x`` <Nx, 3Nh> is ``[W^tau_xh | W^u_xh |
  W_xh]`` (target memory, update gate, the embedded input ``e~_t``), ``kernel_h`` <Nh, 2Nh>
  is ``[W^tau_hh | W^u_hh]``; kernels act from the right (entry ``[i, j]``: the weight of
  input component ``i`` in output component ``j``)."""
  kernel_x, kernel_h = np.asarray(cell_params["kernel_x"]), np.asarray(cell_params["kernel_h"])
  nh = kernel_h.shape[0]
  if kernel_x.shape[1] != 3 * nh or kernel_h.shape[1] != 2 * nh:
    raise ValueError(f"not a RUM cell's kernels: kernel_x {kernel_x.shape}, kernel_h "
                     f"{kernel_h.shape} (want <Nx, 3Nh> and <Nh, 2Nh>).")
  return {"W^tau_xh": kernel_x[:, :nh], "W^u_xh": kernel_x[:, nh:2 * nh],
          "W_xh": kernel_x[:, 2 * nh:], "W^tau_hh": kernel_h[:, :nh],
          "W^u_hh": kernel_h[:, nh:]}


# ---------------------------------------------------------------------------- angles


def sown_cos(intermediates: Mapping[str, Any]) -> dict[str, np.ndarray]:
  """Every ``cos_theta`` sown in an ``intermediates`` tree, by module path.

  Args:
    intermediates: the ``"intermediates"`` collection of ``model.apply(...,
      mutable=["intermediates"])`` (with or without the top-level key).

  Returns:
    ``{"rnn": <float>[batch, T], ...}``: the path of the module that sowed it
    (``"rnn"`` for the ``rum_scan`` path, ``"rnn/cell"`` under ``nn.RNN``).
  """
  out = {}

  def walk(tree, path):
    for key, value in tree.items():
      if isinstance(value, Mapping):
        walk(value, path + (str(key),))
      elif key == "cos_theta":
        if len(value) != 1:
          raise ValueError(f"{'/'.join(path)} sowed cos_theta {len(value)} times (it ran "
                           "more than once in this apply).")
        out["/".join(path)] = np.asarray(value[0])

  walk(intermediates.get("intermediates", intermediates), ())
  return out


def cos_theta(model, variables: Mapping[str, Any], batch: Any, *,
              path: Optional[str] = None, **apply_kwargs) -> np.ndarray:
  """``cos(theta_t)`` of every example and step of a model's RUM, <float>[batch, T].

  Runs ``model.apply(variables, batch, mutable=["intermediates"], **apply_kwargs)`` and
  returns what the RUM sowed: the cosine of the angle between the cell's own ``e_t`` and
  ``tau_t``, so it works for any input (one-hot, an embedding, a sentence encoder). The
  values come from the path the model ran: :func:`rumjax.rum_scan` (``return_cos=True``)
  for a RUM without layer norm/zoneout, the per-step :class:`rumjax.RUMCell` under
  ``nn.RNN`` otherwise (there ``tau_t`` is after layer norm and ``h_{t-1}`` after zoneout).

  Args:
    model: a Flax module with a RUM inside (e.g. ``task.build_model(config)``).
    variables: ``{"params": ...}`` or the ``params`` tree alone.
    batch: the model's input (e.g. a task batch ``{"inputs": <int>[batch, T], ...}``).
    path: which RUM (a key of :func:`sown_cos`) if the model has several.
    **apply_kwargs: passed to ``model.apply`` (e.g. ``train=False``).

  Example::

    >>> cos = analysis.cos_theta(model, params, batch, train=False)   # [batch, T]
  """
  if "params" not in variables:
    variables = {"params": variables}
  _, state = model.apply(variables, batch, mutable=["intermediates"], **apply_kwargs)
  found = sown_cos(state)
  if not found:
    raise ValueError(f"{type(model).__name__} sowed no cos_theta: it has no RUM cell "
                     "(rumjax.RUMCell / rumjax.cells.rum.RUM) on its path.")
  if path is None and len(found) > 1:
    raise ValueError(f"several RUMs sowed cos_theta: {sorted(found)}; pick one with path=.")
  if path is not None and path not in found:
    raise ValueError(f"no cos_theta sown at {path!r}; sown at {sorted(found)}.")
  return found[path] if path is not None else next(iter(found.values()))


def step_weights(batch: Mapping[str, Any], shape: tuple[int, int]) -> np.ndarray:
  """Which steps of a batch are real, <float>[batch, T]: rows with ``mask`` > 0 (padded
  evaluation rows have mask 0) and steps ``t < lengths`` (padded sequences)."""
  rows, steps = shape
  weights = np.ones(shape, np.float64)
  if "mask" in batch:
    weights *= np.asarray(batch["mask"], np.float64)[:rows, None]
  if "lengths" in batch:
    weights *= np.arange(steps)[None, :] < np.asarray(batch["lengths"])[:rows, None]
  return weights


def mean_cos_per_step(cos, weights=None) -> np.ndarray:
  """The mini-batch mean of ``cos(theta_t)`` for each step, <float>[T].

  Args:
    cos: <float>[*batch, T].
    weights: optional <float>[*batch, T] (or [*batch, 1]), e.g. :func:`step_weights`;
      a step with no weight is NaN.
  """
  cos = np.asarray(cos, np.float64)
  if weights is None:
    return cos.reshape(-1, cos.shape[-1]).mean(axis=0)
  weights = np.broadcast_to(np.asarray(weights, np.float64), cos.shape)
  weights = weights.reshape(-1, cos.shape[-1])
  total = weights.sum(axis=0)
  sums = (cos.reshape(-1, cos.shape[-1]) * weights).sum(axis=0)
  return np.where(total > 0, sums / np.where(total > 0, total, 1.0), np.nan)


def fixed_batch(task, config, *, split: str = "test", rows: int = 128) -> dict:
  """The first ``rows`` rows of the first ``split`` batch of ``task``: the fixed batch on
  which ``cos(theta)`` is followed through training.

  Args:
    task: a task (``tasks.get_task(name)``).
    config: its config (a ``ConfigDict`` or a mapping, e.g. a workdir's ``config.json``).
  """
  batch = next(iter(task.eval_data(_config_dict(config), split)))
  return {k: np.asarray(v)[:rows] for k, v in batch.items()}


def mean_cos_of_params(task, config, params, batch: Mapping[str, Any]) -> np.ndarray:
  """The mean over ``batch`` of ``cos(theta_t)`` per step, <float>[T], of the model
  ``task.build_model(config)`` with ``params`` (evaluation mode)."""
  model = task.build_model(_config_dict(config))
  cos = cos_theta(model, params, batch, train=False)
  return mean_cos_per_step(cos, step_weights(batch, cos.shape))


def cos_from_checkpoints(workdir: str, task, config,
                         batch: Optional[Mapping[str, Any]] = None) -> dict[int, np.ndarray]:
  """``{step: <float>[T]}``: :func:`mean_cos_of_params` at every checkpoint in ``workdir``
  (on ``batch``, default :func:`fixed_batch`)."""
  batch = fixed_batch(task, config) if batch is None else batch
  return {step: mean_cos_of_params(task, config, checkpoint_lib.read_params(workdir, step)[1],
                                   batch)
          for step in checkpoint_lib.checkpoint_steps(workdir)}


def _config_dict(config):
  import ml_collections
  if isinstance(config, ml_collections.ConfigDict):
    return config
  return ml_collections.ConfigDict(dict(config))


def cos_histograms(cos_by_step: Mapping[int, Any], bins: int = 20,
                   value_range: Optional[tuple[float, float]] = None):
  """Histograms of per-time-step ``cos(theta)`` values at several training steps.

  Args:
    cos_by_step: ``{training_step: <float>[T]}`` (from :func:`mean_cos_per_step`).
    bins: number of bins.
    value_range: ``(low, high)`` of the bins; default: the range of all the values
      (padded by 5%, within [-1, 1]), the same for every step. Non-finite values (a
      step with no weight in :func:`mean_cos_per_step`) are left out.

  Returns:
    ``(steps <int>[S], edges <float>[bins + 1], counts <int>[S, bins])``.
  """
  by_step = {int(s): np.asarray(v) for s, v in cos_by_step.items()}
  steps = sorted(by_step)
  if value_range is None:
    values = np.concatenate([by_step[s].ravel() for s in steps]) if steps else np.zeros(1)
    values = values[np.isfinite(values)] if np.isfinite(values).any() else np.zeros(1)
    low, high = float(values.min()), float(values.max())
    pad = max(0.05 * (high - low), 0.01)
    value_range = (max(-1.0, low - pad), min(1.0, high + pad))
  edges = np.linspace(value_range[0], value_range[1], bins + 1)
  counts = np.stack([np.histogram(by_step[s][np.isfinite(by_step[s])], bins=edges)[0]
                     for s in steps]) if steps else np.zeros((0, bins), np.int64)
  return np.asarray(steps), edges, counts


# --------------------------------------------------------------------------- records


read_jsonl = utils.read_jsonl


def metric_curve(records: Iterable[Mapping[str, Any]],
                 name: str) -> tuple[np.ndarray, np.ndarray]:
  """``(steps <int>[S], values <float>[S])`` of metric ``name`` in ``metrics.jsonl``
  records, one value per step (the last one written wins, e.g. after a resumed run
  re-evaluates a step)."""
  by_step = {int(r["step"]): float(r[name]) for r in records if name in r}
  steps = np.array(sorted(by_step), np.int64)
  return steps, np.array([by_step[s] for s in steps], np.float64)


def training_seconds(records: Iterable[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
  """``(steps, seconds)``: the training time up to each logged step of ``metrics.jsonl``
  records, summed from their ``steps_per_sec`` (each record's rate over the steps since the
  previous one; evaluation and compilation left out, a resumed run continuing the sum)."""
  steps, rates = metric_curve(records, "steps_per_sec")
  gaps = np.diff(np.concatenate([[0], steps]))
  return steps, np.cumsum(gaps / np.maximum(rates, 1e-12))


def metric_over_time(records: Iterable[Mapping[str, Any]],
                     name: str) -> tuple[np.ndarray, np.ndarray]:
  """``(seconds, values)`` of metric ``name`` against :func:`training_seconds` (linear
  between the logged steps)."""
  records = list(records)
  steps, values = metric_curve(records, name)
  at, seconds = training_seconds(records)
  if not len(at):
    return np.zeros(0), np.zeros(0)
  return np.interp(steps, np.concatenate([[0], at]), np.concatenate([[0.0], seconds])), values


def read_cos_records(workdir: str) -> dict[int, np.ndarray]:
  """``{training_step: <float>[T]}`` from ``<workdir>/cos_theta.jsonl`` (the per-step
  means ``launch.reproduce`` records every --eval_every steps)."""
  return {int(r["step"]): np.asarray(r["cos_mean"], np.float64)
          for r in read_jsonl(os.path.join(workdir, COS_FILE))}


# ------------------------------------------------------------- recorded in training


def _has_key(tree: Any, key: str) -> bool:
  if isinstance(tree, Mapping):
    return any(k == key or _has_key(v, key) for k, v in tree.items())
  return False


class CosThetaRecorder:
  """``(step, state) -> None`` for :class:`~rumjax.training.Periodic`: appends the
  mini-batch mean of ``cos(theta_t)`` per time step on a fixed test batch to
  ``<workdir>/cos_theta.jsonl`` as ``{"step": s, "cos_mean": [T floats]}`` (read by
  :func:`rumjax.analysis.read_cos_records`).

  The values are what the model's RUM sows (:func:`rumjax.analysis.sown_cos`, the first
  RUM in path order if there are several), from one jit-compiled apply on
  :func:`rumjax.analysis.fixed_batch`, weighted by :func:`rumjax.analysis.step_weights`.
  A model that sows no ``cos(theta)`` (no RUM) writes nothing; a step already in the file
  (a resumed run) is not written again. The model and batch are built at the first call.
  """

  def __init__(self, task, config, workdir: str, *, rows: int = 128):
    self.task, self.config, self.rows = task, config, rows
    self.path = os.path.join(workdir, COS_FILE)
    self._apply, self._sows, self._batch = None, None, None
    self._done = set(read_cos_records(workdir))

  def _build(self, params) -> None:
    model = self.task.build_model(self.config)
    self._batch = fixed_batch(self.task, self.config, rows=self.rows)
    batch = self._batch
    self._apply = jax.jit(lambda p: model.apply({"params": p}, batch, train=False,
                                                mutable=["intermediates"])[1])
    self._sows = _has_key(jax.eval_shape(self._apply, params), "cos_theta")

  def __call__(self, step: int, state) -> None:
    if self._apply is None:
      self._build(state.params)
    if not self._sows or step in self._done:
      return
    found = sown_cos(self._apply(state.params))
    cos = found[sorted(found)[0]]
    mean = mean_cos_per_step(cos, step_weights(self._batch, cos.shape))
    with open(self.path, "a") as f:
      f.write(json.dumps({"step": int(step),
                          "cos_mean": [round(float(c), 6) for c in mean]}) + "\n")
    self._done.add(int(step))


def recorder_hooks(task, config, workdir: str, every: int) -> list:
  """The RUM paper's recorder as training hooks: :class:`CosThetaRecorder` every ``every``
  steps (an :class:`rumjax.experiments.Experiment`'s ``hooks``)."""
  return [hooks_lib.Periodic(every, CosThetaRecorder(task, config, workdir))]

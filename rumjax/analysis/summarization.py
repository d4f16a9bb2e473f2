r"""Figure 6 of the RUM paper: gradients and hidden-state norms of the summarization models.

Dangovski et al. (TACL 2019, sec. 4 E, Figure 6) compare LEAD (LSTM/LSTM), encRUM, decRUM
and allRUM pointer-generators on CNN / Daily Mail:

* (a) the global norm of the gradients over training: the loop's ``train_grad_norm``
  (``optax.tree.norm`` of the full parameter gradient, before clipping, averaged over each
  logging window);
* (b) the norm of the last hidden state over training: ``train_last_state_norm``, the task
  metric ``last_state_norm`` of :func:`tasks.summarization.loss_and_metrics` (the L2 norm
  of the decoder state ``s`` at each row's last real decoder step, averaged over the rows
  of the window's batches);
* (c) the gradient of the cost w.r.t. the bi-directional encoder output ``h_i``, per
  encoder step (400 in the paper), and (d) w.r.t. the decoder output ``V [o_t, h*_t] + b``
  (See et al.'s decoder output), per decoder step (100), at one fixed batch after training:
  "the norms for each time step are averaged across the batch and the hidden dimension
  altogether", i.e. (:func:`output_gradients`)::

      (c)  G_enc[i] = 1 / (R D) sum_{b real} sum_d |d loss / d h_{b,i,d}|       D = 2H
      (d)  G_dec[t] = 1 / (R D) sum_{b real} sum_d |d loss / d output_{b,t,d}|  D = H

  with ``R`` the number of real rows of the batch (``batch["mask"]``; all rows without
  one). Every real row counts at every step, so an encoder position past a row's article
  or a decoder step past its summary contributes 0 to the mean: both are exactly 0 (the
  attention never reads padding; the loss masks steps ``t >= target_length``, and a step's
  decoder output feeds nothing but that step's distribution). So panel (d) is exactly 0
  from the longest real summary of the batch on, for any decoder cell. A real step whose
  gold word is an article OOV (an extended id ``>= vocab_size``, reachable only by
  copying) also has a zero decoder-output gradient: the decoder output feeds ``P_vocab``,
  which is 0 on the extended slots.

The intermediate gradients come from :meth:`flax.linen.Module.perturb` in
:class:`rumjax.models.pointer_generator.PointerGenerator` (``"encoder_outputs"``,
``"decoder"/"decoder_outputs"``): the gradient of the loss w.r.t. a zero perturbation added
to a value is the gradient w.r.t. the value (:func:`intermediate_gradients`). ``loss`` is
the task's training loss (``loss_and_metrics(outputs, batch)[0]``: the token mean of the
NLL over the batch's real decoder steps plus ``coverage_weight`` x the coverage loss).

Nothing here imports a task: :func:`load_run` and :func:`figure6_of_run` take a
``name -> task`` lookup (``tasks.get_task``). The parameters are read by
:func:`rumjax.training.checkpoint.read_params` (the repository's reader of a checkpoint's
parameters, as :mod:`rumjax.analysis.landscape` uses it): unlike the loop's ``_load_checkpoint`` it
needs neither ``model.init`` (seconds of compilation) nor the training data iterator.
"""

import functools
import math
import os
import time
from typing import Any, Callable, Iterable, Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np

from rumjax import configs, utils
from rumjax.analysis import runs

MODEL = "pointer_generator"
LABELS = {"lead": "LEAD", "encrum": "encRUM", "decrum": "decRUM", "allrum": "allRUM"}
ENCODER, DECODER = "encoder_outputs", "decoder_outputs"


# ------------------------------------------------------------- (c, d) the gradients


def intermediate_gradients(model, params, batch: Mapping[str, Any],
                           loss_fn: Callable) -> dict:
  """``d loss / d (encoder outputs)`` and ``d loss / d (decoder outputs)`` of one batch
  (RUM paper, Figure 6c,d, before averaging).

  Args:
    model: a :class:`~rumjax.models.pointer_generator.PointerGenerator`.
    params: its ``"params"`` collection.
    batch: a summarization batch (``article``, ``article_ext``, ``article_lengths``,
      ``dec_inputs``, ``targets``, ``target_lengths``, ``coverage_weight``, ``mask``?).
    loss_fn: ``(outputs, batch) -> (loss, metrics)``, the task's ``loss_and_metrics``.

  Returns:
    ``{"encoder": <float>[B, S, 2H], "decoder": <float>[B, T, H], "loss": scalar}``:
    the gradients w.r.t. the ``"encoder_outputs"`` and ``"decoder_outputs"``
    perturbations (zero), i.e. w.r.t. the values they are added to; the model runs in
    evaluation mode (``train=False``).
  """
  batch = {k: jnp.asarray(v) for k, v in batch.items()}
  value, grads = _gradient_fn(model, loss_fn)(params, batch)
  return {"encoder": grads[ENCODER], "decoder": grads["decoder"][DECODER], "loss": value}


@functools.lru_cache(maxsize=16)
def _gradient_fn(model, loss_fn: Callable):
  """The jitted ``(params, batch) -> (loss, d loss / d perturbations)`` of ``model`` for
  Figure 6c,d (flax modules compare by value, so equal models share one compiled
  function)."""

  @jax.jit
  def run(params, batch):
    _, zeros = model.apply({"params": params}, batch, train=False,
                           mutable=["perturbations"])

    def loss(perturbations):
      outputs = model.apply({"params": params, "perturbations": perturbations}, batch,
                            train=False)
      return loss_fn(outputs, batch)[0]

    return jax.value_and_grad(loss)(zeros["perturbations"])

  return run


def mean_abs_per_step(grads, rows=None) -> np.ndarray:
  """``G[t] = 1 / (R D) sum_{b: rows_b > 0} sum_d |grads[b, t, d]|`` (Figure 6c,d: "the
  norms for each time step are averaged across the batch and the hidden dimension
  altogether"), ``R`` the number of real rows (all rows if ``rows`` is None).

  Args:
    grads: <float>[B, T, D].
    rows: <float or bool>[B], 1 for a real row (``batch["mask"]``), or None.

  Returns:
    <float64>[T]; zeros when no row is real.
  """
  g = np.abs(np.asarray(grads, np.float64))
  real = (np.ones(g.shape[0]) if rows is None else np.asarray(rows, np.float64) > 0)
  real = real.astype(np.float64)
  per_row = g.mean(axis=-1)                                   # [B, T]
  return (real[:, None] * per_row).sum(axis=0) / max(real.sum(), 1.0)


def output_gradients(model, params, batch: Mapping[str, Any], loss_fn: Callable) -> dict:
  """Figure 6c,d of the RUM paper: per time step, the mean over the batch's real rows and
  the hidden dimension of ``|d loss / d output|`` (:func:`mean_abs_per_step` of
  :func:`intermediate_gradients`).

  Args:
    model, params, batch, loss_fn: as :func:`intermediate_gradients`; the real rows are
      ``batch["mask"] > 0`` (all rows without ``"mask"``).

  Returns:
    ``{"encoder": <float64>[S], "decoder": <float64>[T]}``: (c) over the bi-directional
    encoder outputs (``D = 2H``; zero past every real row's article), (d) over the decoder
    outputs (``D = H``; zero at steps ``>= max target_length`` of the real rows, and at
    steps where every real row's gold word is an article OOV; module docstring).
  """
  grads = intermediate_gradients(model, params, batch, loss_fn)
  rows = batch.get("mask")
  return {"encoder": mean_abs_per_step(grads["encoder"], rows),
          "decoder": mean_abs_per_step(grads["decoder"], rows)}


# -------------------------------------------------------------- (a, b) the curves


def training_curves(metrics_rows: Iterable[Mapping[str, Any]]) -> dict:
  """Figure 6a,b of the RUM paper from a run's ``metrics.jsonl`` records.

  Args:
    metrics_rows: the records of ``<workdir>/metrics.jsonl`` (``{"step": s, ...}``).

  Returns:
    ``{"step": <int>[N], "grad_norm": <float>[N], "state_norm": <float>[N]}`` over the
    steps whose record has ``train_grad_norm`` or ``train_last_state_norm`` (the loop
    writes both every ``log_every`` steps, each the mean over that window: the global
    norm of the gradient before clipping, and the decoder state's L2 norm at the last
    real decoder step, see :func:`tasks.summarization.loss_and_metrics`), sorted by step;
    NaN where a record lacks one (e.g. a run logged before ``last_state_norm`` existed).
    A step logged twice (a resumed run) keeps its last record.
  """
  grad, state = {}, {}
  for r in metrics_rows:
    if "train_grad_norm" in r:
      grad[int(r["step"])] = float(r["train_grad_norm"])
    if "train_last_state_norm" in r:
      state[int(r["step"])] = float(r["train_last_state_norm"])
  steps = sorted(set(grad) | set(state))
  return {"step": np.array(steps, np.int64),
          "grad_norm": np.array([grad.get(s, math.nan) for s in steps], np.float64),
          "state_norm": np.array([state.get(s, math.nan) for s in steps], np.float64)}


# ------------------------------------------------------------------------- runs


def load_config(workdir: str, get_task: Callable[[str], Any]):
  """``(task, config)`` of a summarization training workdir (RUM paper, Figure 6): the
  task's ``get_config(variant)`` updated with ``<workdir>/config.json`` (as
  ``launch.evaluate`` reads it).

  Raises:
    ValueError: one line: no workdir, no ``config.json``, or not a pointer-generator run.
  """
  task, config = configs.load_workdir_config(workdir, get_task)
  name = config.get("model", {}).get("name")
  if name != MODEL:
    raise ValueError(f"{workdir!r} is a {config.task!r} run of model {name!r}; "
                     f"Figure 6 needs a summarization run (model {MODEL!r}).")
  return task, config


def load_run(workdir: str, get_task: Callable[[str], Any], step: Optional[int] = None):
  """The task, config, model and restored parameters of a summarization training workdir
  (RUM paper, Figure 6): :func:`rumjax.analysis.runs.load_run` of a pointer-generator run
  (the checkpoint at ``step``, default the latest) and ``task.build_model(config)``.

  Returns:
    ``(task, config, model, step, params)``.

  Raises:
    ValueError: one line: as :func:`load_config`, or no checkpoint.
  """
  task, config = load_config(workdir, get_task)
  _, _, at, params = runs.load_run(workdir, get_task, step)
  return task, config, task.build_model(config), at, params


def fixed_batch(task, config, batch_index: int = 0, split: str = "dev") -> dict:
  """Batch number ``batch_index`` (from 0) of ``task.eval_data(config, split)``: the same
  examples in the same order for every run of the same data (Figure 6c,d's "specific
  batch"). ``ValueError`` if the split has fewer batches."""
  if batch_index < 0:
    raise ValueError(f"batch_index={batch_index} must be >= 0.")
  count = 0
  for count, batch in enumerate(task.eval_data(config, split), start=1):
    if count - 1 == batch_index:
      return dict(batch)
  raise ValueError(f"batch_index={batch_index}: the {split!r} split has only {count} "
                   f"batch(es) of {config.batch_size}.")


def run_label(config) -> str:
  """``"LEAD"``, ``"encRUM"``, ``"decRUM"``, ``"allRUM"`` (the paper's names, Table 4 and
  Figure 6's legend) from ``config.configuration``, else ``"<encoder>/<decoder>"``."""
  label = LABELS.get(config.get("configuration"))
  if label:
    return label
  return f"{config.model.encoder_cell}/{config.model.decoder_cell}"


def figure6_of_run(workdir: str, get_task: Callable[[str], Any], *, batch_index: int = 0,
                   split: str = "dev", step: Optional[int] = None) -> dict:
  """Figure 6 (a-d) of the RUM paper for one trained summarization run.

  Args:
    workdir: a ``launch.train`` workdir of a summarization task (``config.json``,
      checkpoints, ``metrics.jsonl``).
    get_task: ``name -> task`` (``tasks.get_task``).
    batch_index: which batch of ``split`` (:func:`fixed_batch`) for (c, d).
    split: the split of ``task.eval_data``.
    step: the checkpoint for (c, d) (default: the latest).

  Returns:
    A JSON-able dict: ``workdir`` (:func:`rumjax.analysis.runs.recorded_path`: no machine
    path), ``task``, ``variant``, ``label``, ``encoder_cell``, ``decoder_cell``,
    ``step``, ``split``, ``batch_index``, ``batch_rows`` (real rows),
    ``article_lengths`` / ``target_lengths`` (of the real rows), ``loss`` (at the batch),
    ``curves`` (:func:`training_curves`: ``step``, ``grad_norm``, ``state_norm``; NaN as
    None) and ``gradients`` (:func:`output_gradients`: ``encoder``, ``decoder``),
    ``seconds``.
  """
  start = time.perf_counter()
  task, config, model, at, params = load_run(workdir, get_task, step)
  batch = fixed_batch(task, config, batch_index, split)
  grads = intermediate_gradients(model, params, batch, task.loss_and_metrics)
  rows = np.asarray(batch.get("mask", np.ones(len(batch["targets"]))), np.float64) > 0
  curves = training_curves(utils.read_jsonl(os.path.join(workdir, "metrics.jsonl")))
  return {
      "workdir": runs.recorded_path(workdir), "task": config.task,
      "variant": config.get("variant"),
      "label": run_label(config), "encoder_cell": config.model.encoder_cell,
      "decoder_cell": config.model.decoder_cell, "step": at, "split": split,
      "batch_index": batch_index, "batch_rows": int(rows.sum()),
      "article_lengths": np.asarray(batch["article_lengths"])[rows].tolist(),
      "target_lengths": np.asarray(batch["target_lengths"])[rows].tolist(),
      "loss": float(grads["loss"]),
      "curves": {k: _jsonable(v) for k, v in curves.items()},
      "gradients": {"encoder": mean_abs_per_step(grads["encoder"], rows).tolist(),
                    "decoder": mean_abs_per_step(grads["decoder"], rows).tolist()},
      "seconds": time.perf_counter() - start,
  }


def _jsonable(values) -> list:
  """A 1-D array of Figure 6a,b's curves as a list, NaN as None (JSON has no NaN)."""
  return [None if isinstance(v, float) and math.isnan(v) else v
          for v in np.asarray(values).tolist()]

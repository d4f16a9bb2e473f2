r"""Experiment runner: a paper's set of models, each trained in ONE loop invocation.

An :class:`Experiment` is data (defined next to the tasks, e.g. ``tasks/experiments/recall.py``):
a task (``tasks.base.Task``), a config variant, the models as dotted-field overrides, the paper's numbers
and how to report them. Nothing here knows a task by name.

Per model the generic loop (:func:`rumjax.training.train_and_evaluate`) is entered once and
compiled once; what acts during training is a hook:

* a :class:`~rumjax.training.TimeBudget` for a wall-clock budget;
* the experiment's own recorders (``Experiment.hooks``; the RUM paper's experiments record
  ``cos(theta_t)`` for Figure 5 with :func:`rumjax.analysis.angles.recorder_hooks`);
* an :class:`~rumjax.training.EarlyStopping` (:func:`train_with_early_stopping`).

Evaluation during training is the config's evaluators (``config.evals``). Re-running with
the same workdir resumes (the loop restores the latest checkpoint); a model whose
``result.json`` says it finished with the same config is not run again (:func:`finished`).

Several seeds (``Options.seeds``, e.g. ``(0, 1, 2)``): every model is trained once per
seed, each seed in its own workdir ``<model>/seed<k>/`` (resumed and skipped like a single
run), and the experiment reports per model the mean and the sample standard deviation over
the seeds of every metric (:func:`aggregate_records`; the table shows ``mean ± std`` and
``n``; the figures draw one curve per seed). One seed keeps the single-run layout, and a
seed that ran alone before stays there when seeds are added (:func:`seed_dir`). The results
always report every model that has results in the experiment's folder, however it ran: a
run of some models reports the others as they are on disk (a model with seed folders as
the mean ± std over all of its seeds, :func:`saved_seeds`), so one table may mix a model
of several seeds with one of a single run (``n`` = 1, its plain values).

An experiment's folder ``<workdir>/<experiment>/`` holds

* ``<model>/``: the loop's workdir (checkpoints, ``metrics.jsonl``, ``config.json``),
  ``result.json`` (:func:`run_model`), ``params.npz``, and what the experiment's hooks and
  figures write (the RUM paper's: ``cos_theta.jsonl``, ``kernel_tau.png``, ``cos_theta.png``);
  with several seeds, all of this in ``<model>/seed<k>/`` per seed;
* ``results.json`` (:func:`experiment_summary`), ``results.md``
  (:func:`results_markdown`) and ``<experiment>.png`` (the experiment's ``plot``).

Example::

    summary = experiments.run_experiment(tasks.experiments.EXPERIMENTS["recall_T30"],
                                         "/tmp/repro", ["rum_lam1", "gru"],
                                         experiments.Options(budget_minutes=3))
"""

import ast
import copy
import dataclasses
import datetime
import json
import numbers
import os
import platform
import re
import statistics
import time
from typing import Any, Callable, Mapping, Optional, Sequence

import jax
from absl import logging

from rumjax import analysis, configs, training, utils

RESULT_FILE = "result.json"
# Statuses of a model that needs no more training (with the same config).
FINISHED = ("ok", "early_stopping")
# Summary entries of the loop that are not metrics.
_NOT_METRICS = ("step", "stop_reason", "preempted", "params", "eta_sec")


# -------------------------------------------------------------------- experiments


@dataclasses.dataclass(frozen=True)
class Column:
  """A column of an experiment's Markdown table.

  Attributes:
    header: the column's title.
    value: ``record -> value`` (``None`` shows as ``-``); ``record`` is a model's
      ``result.json`` content with its ``"paper"`` entry (see :func:`experiment_summary`).
    fmt: format spec of numbers.
  """
  header: str
  value: Callable[[dict], Any]
  fmt: str = ".1f"

  def cell(self, record: dict) -> str:
    value = self.value(record)
    if value is None:
      return "-"
    if _is_number(value):
      return format(value, self.fmt)
    return str(value)

  def cell_over_seeds(self, record: dict) -> str:
    """The cell of an :func:`aggregate_records` record: ``mean ± std`` of the column's
    value in each seed's record when they are all numbers (the value itself while one
    seed has run; the paper's numbers, the same for every seed, show once); else
    :meth:`cell` of the aggregate."""
    runs = record.get("runs")
    if runs and not getattr(self.value, "per_model", False):
      values = [self.value(dict(r, paper=record.get("paper"))) for r in runs.values()]
      if all(_is_number(v) for v in values):
        if len(values) == 1:
          return format(values[0], self.fmt)
        mean, std = mean_std(values)
        return f"{format(mean, self.fmt)} ± {format(std, self.fmt)}"
    return self.cell(record)


def _csv(values: Sequence[Any]) -> str:
  """``values`` as a comma-separated flag value, e.g. ``0,1,2``."""
  return ",".join(str(v) for v in values)


def _is_number(value: Any) -> bool:
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def mean_std(values: Sequence[float]) -> tuple[float, Optional[float]]:
  """The mean and the sample standard deviation (``n - 1`` in the denominator; ``None``
  for one value) of ``values``."""
  values = [float(v) for v in values]
  return (statistics.fmean(values),
          statistics.stdev(values) if len(values) > 1 else None)


def metric(name: str, scale: float = 1.0,
           phase: Optional[str] = None) -> Callable[[dict], Optional[float]]:
  """A :class:`Column` value: the final metric ``name`` of a record times ``scale``; with
  ``phase="pretrain"``, of the model's pretraining run (:class:`Pretraining`)."""
  def value(record):
    run = record if phase is None else (record.get(phase) or {})
    v = (run.get("metrics") or {}).get(name)
    return None if v is None else scale * v
  return value


def metric_at(name: str, step: int,
              scale: float = 1.0) -> Callable[[dict], Optional[float]]:
  """A :class:`Column` value: metric ``name`` of the evaluation at training step ``step``
  (the record's ``"evals"``, :func:`eval_history`) times ``scale``; ``None`` before the
  run reached it. How fast a model learns, where every model ends at the same score."""
  def value(record):
    v = ((record.get("evals") or {}).get(str(step)) or {}).get(name)
    return None if v is None else scale * v
  return value


def at_best(name: str, scale: float = 1.0) -> Callable[[dict], Optional[float]]:
  """A :class:`Column` value: metric ``name`` at the checkpoint early stopping kept (e.g.
  ``"test_accuracy"``: test at best dev; :func:`final_at_best`, else the best
  evaluation's ``best_metrics``) times ``scale``."""
  def value(record):
    for field in ("at_best_metrics", "best_metrics"):
      v = (record.get(field) or {}).get(name)
      if v is not None:
        return scale * v
    return None
  return value


def paper(field: str) -> Callable[[dict], Any]:
  """A :class:`Column` value: the paper's ``field`` for the record's model (one value per
  model, not averaged over seeds)."""
  def value(record):
    return (record.get("paper") or {}).get(field)
  value.per_model = True
  return value


@dataclasses.dataclass(frozen=True)
class Pretraining:
  """A first phase for some of an experiment's models (the StarSaber paper's masked-LM
  pretraining before CLUE fine-tuning): for model ``key`` in ``sets``, the config
  ``task.get_config(variant)`` with the model's overrides, then ``sets[key]`` (e.g. a
  learning rate and warm-up per model family), the experiment's ``tiny`` ones and
  ``Options.sets``, trained for ``Options.pretrain_steps`` (default: the variant's) in
  ``<model dir>/pretrain``. The model's own run then starts from those parameters
  (``config.init_from``); models not in ``sets`` start from their initialisation.

  Attributes:
    variant: the pretraining variant, e.g. ``"mlm"``.
    sets: ``{model key: {dotted field: value}}``, the models that pretrain.
  """
  variant: str
  sets: Mapping[str, Mapping[str, Any]]


@dataclasses.dataclass(frozen=True)
class Experiment:
  """A set of models trained on one task variant and compared with a paper.

  Attributes:
    name: the experiment's name and folder, e.g. ``"recall_T30"``.
    task: the task (``tasks.recall.TASK``).
    variant: the config variant, ``task.get_config(variant)``.
    models: ``{key: (label, {dotted field: value})}`` in table order, e.g.
      ``{"gru": ("GRU", {"model.cell": "gru", "model.hidden_size": 50})}``.
    tiny: overrides for smoke tests (``Options.tiny``): a small model, data and batch.
    paper: ``{key: {...}}``, the paper's numbers per model (JSON-able), copied into the
      model's record in ``results.json`` as ``"paper"``.
    paper_source: where the paper's numbers come from, e.g. ``"Table 1"``.
    columns: the table's columns after model, params, steps and wall time.
    notes: ``summary -> [Markdown lines]`` shown above the table.
    plot: ``(summary, exp_dir) -> path``, the experiment's figure.
    hooks: ``(task, config, model_dir, every) -> [hook]``, the paper's own recorders run
      during training (e.g. the RUM paper's ``cos(theta)`` every ``every`` steps,
      :func:`rumjax.analysis.angles.recorder_hooks`).
    figures: ``(model_dir, label, task) -> None``, the paper's figures of one trained
      model (e.g. :func:`rumjax.plotting.angles.rum_figures`); an error there is
      logged, never loses the results.
    model_variants: ``{key: variant}`` for models built on another variant than
      ``variant`` (e.g. an FS-RNN-2 beside a single cell).
    adjust: ``config -> None``, applied last: fields that follow the run's ``num_steps``
      (e.g. a learning-rate decay at fixed fractions of training).
    pretraining: a first phase for some models (:class:`Pretraining`), or ``None``.
  """
  name: str
  task: Any
  variant: Optional[str]
  models: Mapping[str, tuple[str, Mapping[str, Any]]]
  tiny: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  paper: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
  paper_source: str = ""
  columns: Sequence[Column] = ()
  notes: Optional[Callable[[dict], Sequence[str]]] = None
  plot: Optional[Callable[[dict, str], Optional[str]]] = None
  hooks: Optional[Callable[[Any, Any, str, int], Sequence[Any]]] = None
  figures: Optional[Callable[[str, str, Any], Any]] = None
  model_variants: Mapping[str, str] = dataclasses.field(default_factory=dict)
  adjust: Optional[Callable[[Any], None]] = None
  pretraining: Optional[Pretraining] = None


@dataclasses.dataclass
class Options:
  """What a launcher sets for every model of a run.

  Attributes:
    steps: training steps (``config.num_steps``; default: the variant's).
    budget_minutes: wall-clock budget per model and invocation (``None``: none).
    eval_every: steps between periodic evaluations, ``cos(theta)`` records and
      checkpoints (``config.eval_every``; default: the variant's).
    eval_batches_during: at most this many batches for the periodic evaluators (e.g.
      recall's dev; also at the end if they run there too); 0 keeps theirs. The
      final-only evaluators keep the task's setting (whole splits, e.g. recall's test).
    log_every: ``config.log_every``.
    keep_checkpoints: checkpoints kept per model (one per ``eval_every``), so that
      ``launch.plot`` can revisit training.
    sets: ``{dotted field: value}`` for every model, applied after the model's own.
    tiny: apply the experiment's ``tiny`` overrides.
    seed: ``config.seed``.
    seeds: several seeds (``config.seed`` of each run; instead of ``seed``): each model
      is trained once per seed in ``<model>/seed<k>/`` and reported as mean ± std. One
      seed is the same as ``seed``.
    pretrain_steps: steps of the pretraining phase (:class:`Pretraining`; default: the
      pretraining variant's ``num_steps``).
  """
  steps: Optional[int] = None
  budget_minutes: Optional[float] = None
  eval_every: Optional[int] = None
  eval_batches_during: int = 8
  log_every: int = 10
  keep_checkpoints: int = 100
  sets: dict = dataclasses.field(default_factory=dict)
  tiny: bool = False
  seed: Optional[int] = None
  seeds: Optional[Sequence[int]] = None
  pretrain_steps: Optional[int] = None


def check_options(options: Options) -> None:
  """``ValueError`` naming the first bad option."""
  for name, low in (("steps", 1), ("pretrain_steps", 1), ("eval_every", 1),
                    ("eval_batches_during", 0), ("log_every", 1), ("keep_checkpoints", 1)):
    value = getattr(options, name)
    if value is not None and value < low:
      raise ValueError(f"{name}={value} must be >= {low}.")
  training.check_budget_minutes(options.budget_minutes)
  if options.seeds is not None:
    seeds = list(options.seeds)
    if options.seed is not None:
      raise ValueError(f"--seed={options.seed} and --seeds={_csv(seeds)} are both set; give one "
                       "(--seeds=k is --seed=k).")
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
      raise ValueError(f"--seeds={_csv(seeds)} must be one or more integers, e.g. 0,1,2.")
    if len(set(seeds)) != len(seeds):
      raise ValueError(f"--seeds={_csv(seeds)} repeats a seed; give each seed once.")


def run_seeds(options: Options) -> list[Optional[int]]:
  """The seeds to run: ``options.seeds``, else ``[options.seed]`` (``None``: the
  config's)."""
  return list(options.seeds) if options.seeds else [options.seed]


def multi_seed(options: Options) -> bool:
  """Whether ``options`` asks for several seeds (the ``<model>/seed<k>/`` layout)."""
  return len(run_seeds(options)) > 1


def seed_dir(exp_dir: str, key: str, seed: Optional[int] = None) -> str:
  """The workdir of model ``key``: ``<exp_dir>/<key>``, or ``<exp_dir>/<key>/seed<seed>``
  for one seed of several. A seed that ran alone before (``<key>/result.json`` of that
  seed, no ``<key>/seed<seed>/``) keeps its single-run folder: adding seeds to a one-seed
  run trains only the new ones."""
  model_dir = os.path.join(exp_dir, key)
  if seed is None:
    return model_dir
  path = os.path.join(model_dir, f"seed{seed}")
  if not os.path.isdir(path):
    single = utils.read_json(os.path.join(model_dir, RESULT_FILE)) or {}
    if str((single.get("config") or {}).get("seed")) == str(seed):   # seed: int or run key
      return model_dir
  return path


def _check_one_seed(model_dir: str, seed) -> None:
  """One-line :class:`rumjax.training.WorkdirError` if the single-run folder ``model_dir``
  (or its pretraining run) already holds a run of another seed: a new seed goes beside it,
  in ``<model>/seed<k>/``, only when the seeds are given together. Reads only."""
  for workdir in (model_dir, os.path.join(model_dir, PRETRAIN_DIR)):
    saved = (utils.read_json(os.path.join(workdir, "config.json")) or {}).get("seed")
    if saved is not None and seed is not None and str(saved) != str(seed):
      raise training.WorkdirError(
          f"{model_dir!r} holds a run of seed {saved}, not {seed}: to train seed {seed} "
          f"beside it, pass --seeds={saved},{seed} (each seed is then reported, and the new "
          "one trains in its own seed folder), or use another --workdir.")


def _check_no_seed_folders(exp_dir: str, key: str) -> None:
  """One-line :class:`rumjax.training.WorkdirError` if model ``key`` holds the
  ``seed<k>/`` folders of a several-seed run (:func:`saved_seeds`): one seed alone would
  train again in ``<key>/`` and ``results.json`` would lose the seeds' means. Reads only."""
  model_dir = os.path.join(exp_dir, key)
  seeds = [str(s) for s in saved_seeds(exp_dir, key) or ()]
  if seeds:
    raise training.WorkdirError(
        f"{model_dir!r} holds the runs of seeds {', '.join(seeds)} (given together with "
        f"--seeds): pass --seeds={','.join(seeds)} again (finished seeds do not train "
        "again; add a seed to train it beside them), or use another --workdir.")


_SEED_FOLDER = re.compile(r"seed(-?\d+)")


def saved_seeds(exp_dir: str, key: str) -> Optional[list[int]]:
  """The seeds of model ``key``'s several-seed run in ``exp_dir``: the seed that ran alone
  first in ``<key>/`` (the seed of its ``result.json``, :func:`seed_dir`), then those of
  its ``seed<k>/`` folders in numeric order; ``None`` for a model without seed folders (a
  single run, or none). Reads only."""
  model_dir = os.path.join(exp_dir, key)
  names = os.listdir(model_dir) if os.path.isdir(model_dir) else []
  folders = sorted(int(m.group(1)) for m in map(_SEED_FOLDER.fullmatch, names)
                   if m and os.path.isdir(os.path.join(model_dir, m.group(0))))
  if not folders:
    return None
  single = utils.read_json(os.path.join(model_dir, RESULT_FILE)) or {}
  alone = (single.get("config") or {}).get("seed")
  if alone is None or str(alone) in map(str, folders):
    return folders
  return [alone, *folders]


def parse_overrides(items: Sequence[str]) -> dict:
  """``["model.eta=1.0", "seed=3"]`` -> ``{"model.eta": 1.0, "seed": 3}``: values are
  Python literals (``None``, numbers, ...); anything else stays a string."""
  out = {}
  for item in items:
    if "=" not in item:
      raise ValueError(f"--set={item!r} must be FIELD=VALUE, e.g. model.eta=1.0.")
    field, value = (s.strip() for s in item.split("=", 1))
    try:
      out[field] = ast.literal_eval(value)
    except (ValueError, SyntaxError):
      out[field] = value
  return out


def select_models(exp: Experiment, keys: Optional[Sequence[str]] = None) -> list[str]:
  """``keys`` (default: all of the experiment's models); ``ValueError`` for unknown ones."""
  if not keys:
    return list(exp.models)
  unknown = [k for k in keys if k not in exp.models]
  if unknown:
    raise ValueError(f"unknown model(s) {unknown} for {exp.name}; known: "
                     f"{list(exp.models)}.")
  return list(keys)


def limit_periodic_evals(config, batches: int) -> None:
  """At most ``batches`` batches for the periodic evaluators of ``config.evals``
  (``every > 0``; also at the end if they are ``at_end``); the final-only ones keep
  theirs. 0 changes nothing."""
  if not batches:
    return
  with config.unlocked():
    for entry in config.evals.values():
      if entry.get("every"):
        entry.batches = min(entry.batches, batches) if entry.get("batches") else batches


def _configure(exp: Experiment, key: str, config, updates: Mapping[str, Any],
               options: Options, steps: Optional[int], adjust: bool):
  """``config`` with ``updates``, ``options.sets`` and ``seed``, then ``steps`` and the
  run's cadences (``eval_every`` for evaluations and checkpoints), ``exp.adjust`` if
  ``adjust``; validated by the task. A ``--set`` of a field that an option sets here is
  a ``ValueError`` naming the option (it was silently replaced), and so is a ``--set``
  that changes a field of model ``key``'s own entry (its row would keep the label and the
  paper's numbers of the model it no longer is). With ``--tiny`` the sizes are free (the
  label names the hidden size it has, :func:`tiny_label`)."""
  label, own = exp.models[key]
  free = {"model.hidden_size", *exp.tiny} if options.tiny else set()
  for field, value in options.sets.items():
    if field in own and field not in free and value != own[field]:
      raise ValueError(f"--set={field}={value!r} changes what model '{key}' ({label}) is: "
                       f"its entry sets {field}={own[field]!r} and its row is labelled and "
                       "compared with the paper as that; leave it out of --set (or train "
                       "the variant with launch.train).")
  owned = {"checkpoint_every": "--eval_every (checkpoints follow the evaluations)",
           "keep_checkpoints": "--keep_checkpoints", "log_every": "--log_every"}
  if steps is not None:
    owned["num_steps"] = "--steps"
  if options.eval_every is not None:
    owned["eval_every"] = "--eval_every"
  if options.seed is not None:
    owned["seed"] = "--seed / --seeds"
  for field in options.sets:
    if field in owned:
      raise ValueError(f"--set={field}={options.sets[field]!r} would be replaced by the run's "
                       f"{owned[field]}; give that flag instead.")
  updates = {**updates, **options.sets}
  if options.seed is not None:
    updates["seed"] = options.seed
  configs.set_fields(config, updates)
  with config.unlocked():
    if steps is not None:
      config.num_steps = steps
    if options.eval_every is not None:
      config.eval_every = options.eval_every
    config.checkpoint_every = config.eval_every
    config.keep_checkpoints = options.keep_checkpoints
    config.log_every = options.log_every
  limit_periodic_evals(config, options.eval_batches_during)
  if adjust and exp.adjust is not None:
    with config.unlocked():
      exp.adjust(config)
  exp.task.validate_config(config)
  return config


def model_config(exp: Experiment, key: str, options: Optional[Options] = None):
  """The config of model ``key``: the variant's defaults (``exp.model_variants`` or
  ``exp.variant``), the model's overrides, the ``tiny`` ones, ``options.sets`` and
  ``seed``, then the run's steps and cadences (``eval_every`` for evaluations and
  checkpoints) and ``exp.adjust``; validated by the task. (A model that pretrains gets
  its ``init_from`` when it trains, :func:`train_experiment_model`.)

  Raises:
    ValueError: for an unknown field or an invalid config, naming it.
  """
  options = options or Options()
  config = exp.task.get_config(exp.model_variants.get(key, exp.variant))
  updates = {**exp.models[key][1], **(exp.tiny if options.tiny else {})}
  return _configure(exp, key, config, updates, options, options.steps, adjust=True)


def pretrain_config(exp: Experiment, key: str, options: Optional[Options] = None):
  """The pretraining config of model ``key`` (:class:`Pretraining`: the pretraining
  variant, the model's overrides, the phase's ``sets[key]``, the experiment's ``tiny`` ones,
  ``options.sets`` and ``seed``; ``options.pretrain_steps`` steps, the run's cadences),
  or ``None`` for a model that does not pretrain.

  Raises:
    ValueError: for an unknown field or an invalid config, naming it.
  """
  pre = exp.pretraining
  if pre is None or key not in pre.sets:
    return None
  options = options or Options()
  config = exp.task.get_config(pre.variant)
  updates = {**exp.models[key][1], **pre.sets[key],
             **(exp.tiny if options.tiny else {})}
  return _configure(exp, key, config, updates, options, options.pretrain_steps, adjust=False)


# ---------------------------------------------------------------------- cos(theta)


# ------------------------------------------------------------------ one model, one run


def hardware_info() -> dict:
  """The platform, devices, CPU model and versions of this process."""
  devices = jax.devices()
  return {"platform": devices[0].platform, "device_kind": devices[0].device_kind,
          "device_count": len(devices), "cpu_count": os.cpu_count(),
          "cpu_model": utils.host_cpu(), "jax_version": jax.__version__,
          "python": platform.python_version()}


class _StartStep:
  """A hook noting the step the loop (re)started from."""
  step = None

  def begin(self, step, state, ctx):
    del state, ctx
    self.step = int(step)


def _json_config(config) -> dict:
  return json.loads(json.dumps(config.to_dict(), default=float))


def finished(config, workdir: str) -> Optional[dict]:
  """The record of ``<workdir>/result.json`` if that run finished (status in
  :data:`FINISHED`) with the same config up to the fields a resume may change where they do
  not change the run (the data's folders: ``manual_dir``, ``data_dir``), else ``None``.
  (Before session 32 any difference counted: the same finished run, its data folder
  reached through another path, was "resumed" into a record without its best metrics.)"""
  record = utils.read_json(os.path.join(workdir, RESULT_FILE))
  new = _json_config(config)
  if not (record and record.get("status") in FINISHED
          and isinstance(record.get("config"), dict)):
    return None
  saved = configs.fill_added_fields(record["config"], new)
  if not configs.resume_differences(saved, new, may_change=SAME_RUN_FIELDS):
    return record
  return None


# Config fields that name where the data is, not what the run is.
SAME_RUN_FIELDS = ("manual_dir", "data_dir", "ood_manual_dir")


def _evaluate_latest(config, workdir: str, task, start_step: int) -> dict:
  """The final evaluators on the latest checkpoint (after a diverged run)."""
  names = [k for k, e in config.evals.items() if e.get("at_end", True)]
  try:
    return training.evaluate_checkpoint(config, workdir, task, names=names)
  except ValueError as err:
    logging.warning("no checkpoint to evaluate in %s: %s", workdir, err)
    return {"step": start_step}


def summary_metrics(summary: Mapping[str, Any]) -> dict[str, float]:
  """The metrics in a loop summary: the last ``train_*`` ones, ``steps_per_sec`` and the
  final evaluators'; not the bookkeeping nor what hooks add (``best_*``)."""
  return {k: float(v) for k, v in summary.items()
          if k not in _NOT_METRICS and not k.startswith("best_")
          and isinstance(v, numbers.Real)}


def _status(stop_reason: str) -> str:
  """The record's status of a loop's ``stop_reason`` (``"finished"``: the loop found the
  run complete, as ``"num_steps"`` left it)."""
  return "ok" if stop_reason in ("num_steps", "finished") else stop_reason


def run_model(config, workdir: str, task, *, hooks: Sequence[Any] = (),
              info: Optional[Mapping[str, Any]] = None,
              invocation: Optional[Mapping[str, Any]] = None) -> dict:
  """Trains ``config`` in ``workdir`` with one invocation of the loop and records it.

  Args:
    config: the task config.
    workdir: the loop's workdir (resumed if it has checkpoints).
    task: the task.
    hooks: the loop's hooks.
    info: entries for the record, e.g. ``{"model": "gru", "label": "GRU"}``.
    invocation: entries for this invocation's entry, e.g. ``{"budget_minutes": 3}``.

  Returns:
    The record, also written to ``<workdir>/result.json``: ``info``, ``config``,
    ``num_params``, ``steps``, ``target_steps``, ``status`` (``"ok"`` when ``num_steps``
    is reached, else the loop's stop reason: ``"budget"``, ``"early_stopping"``,
    ``"preempted"``; ``"diverged"`` on a non-finite loss, with ``error`` and the final
    evaluators' metrics of the last good checkpoint), the final ``metrics``, what hooks
    add (``best_step``, ``best_metrics``, ...), ``invocations`` (steps from/to, wall and
    CPU seconds, load average), their total wall and CPU time, and the hardware. The
    final parameters go to ``<workdir>/params.npz``.
  """
  os.makedirs(workdir, exist_ok=True)
  start = _StartStep()
  t0, c0, load0 = time.perf_counter(), time.process_time(), os.getloadavg()[0]
  started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
  error = None
  try:
    summary = training.train_and_evaluate(config, workdir, task, [start, *hooks])
    status = _status(summary["stop_reason"])
  except training.NonFiniteError as err:
    logging.error("%s diverged: %s", workdir, err)
    status, error = "diverged", str(err)
    summary = _evaluate_latest(config, workdir, task, start.step or 0)
  params = summary.pop("params", None)
  if params is not None:
    analysis.save_params_npz(os.path.join(workdir, "params.npz"), params)
    num_params = utils.count_params(params)
  else:
    num_params = training.count_model_params(task, config)
  previous = utils.read_json(os.path.join(workdir, RESULT_FILE), {})
  invocations = previous.get("invocations", []) + [{
      "started": started, "steps_from": start.step, "steps_to": int(summary["step"]),
      "wall_sec": round(time.perf_counter() - t0, 1),
      "cpu_sec": round(time.process_time() - c0, 1), "status": status,
      "load_avg_1min_start_end": [round(load0, 2), round(os.getloadavg()[0], 2)],
      **(invocation or {})}]
  # An invocation that trained nothing (a finished run called again, e.g. with another
  # --eval_every) keeps the config the steps were trained with.
  trained = start.step is None or int(summary["step"]) != start.step
  record = {
      **(info or {}),
      "config": _json_config(config) if trained or "config" not in previous
      else previous["config"], "num_params": num_params,
      "steps": int(summary["step"]), "target_steps": int(config.num_steps),
      "status": status, "error": error,
      "metrics": summary_metrics(summary),
      **{k: v for k, v in summary.items() if k.startswith("best_")},
      "wall_sec_total": round(sum(i["wall_sec"] for i in invocations), 1),
      "cpu_sec_total": round(sum(i["cpu_sec"] for i in invocations), 1),
      "invocations": invocations, "hardware": hardware_info(),
  }
  utils.write_json(os.path.join(workdir, RESULT_FILE), record)
  return record


def train_with_early_stopping(config, workdir: str, task, *, metric: str = "eval_accuracy",
                              mode: str = "max", patience: int = 5,
                              budget_seconds: Optional[float] = None,
                              info: Optional[Mapping[str, Any]] = None) -> dict:
  """One loop invocation with :class:`~rumjax.training.EarlyStopping` on ``metric`` (and a
  :class:`~rumjax.training.TimeBudget`); the best checkpoint is kept in
  ``<workdir>/best``. Returns the :func:`run_model` record (``best_step``,
  ``best_<metric>``, ``best_metrics``: every metric of the evaluation at the best step);
  a run that had finished with the same config is not run again."""
  done = finished(config, workdir)
  if done is not None:
    return done
  hooks = [training.EarlyStopping(metric, mode=mode, patience=patience)]
  if budget_seconds:
    hooks.append(training.TimeBudget(budget_seconds))
  record = run_model(config, workdir, task, hooks=hooks, info=info,
                     invocation={"budget_seconds": budget_seconds})
  if record.get("best_metrics") is None:
    # The loop found the run complete (stop reason "finished": no hook ran), e.g. after
    # result.json was lost or written by an older version: the best is early stopping's.
    best = utils.read_json(os.path.join(workdir, training.EarlyStopping.FILE), {})
    if best.get("best_step") is not None:
      record.update(best_step=best["best_step"], best_metrics=best["best_metrics"],
                    **{f"best_{metric}": best["best_value"]})
      utils.write_json(os.path.join(workdir, RESULT_FILE), record)
  return record


# ---------------------------------------------------------------------- experiments


def final_at_best(config, workdir: str, task) -> Optional[dict]:
  """The final-only evaluators of ``config.evals`` (``every`` 0, e.g. a test set) on the
  checkpoint that early stopping kept in ``<workdir>/best``: "test at best dev". ``None``
  without ``config.early_stopping_metric``, a best checkpoint or such evaluators."""
  best = os.path.join(workdir, "best")
  names = [k for k, e in config.evals.items()
           if not e.get("every") and e.get("at_end", True)]
  if not config.get("early_stopping_metric") or not os.path.isdir(best) or not names:
    return None
  return summary_metrics(training.evaluate_checkpoint(config, best, task, names=names))


PRETRAIN_DIR = "pretrain"


def pretrain_summary(record: Mapping[str, Any]) -> dict:
  """What a model's record keeps of its pretraining run's :func:`run_model` record."""
  return {k: record.get(k) for k in ("steps", "target_steps", "status", "metrics",
                                      "num_params", "wall_sec_total", "cpu_sec_total")}


def tiny_label(label: str, paper_size: Optional[int], tiny_size: Optional[int]) -> str:
  """The label of a paper's model trained at ``--tiny`` sizes: the hidden size it names
  (``paper_size``) replaced by the one it has, parameter counts such as ``(0.41M)``
  dropped, and ``(tiny)`` added: ``tiny_label("RUM 100 λ=1", 100, 8) == "RUM 8 λ=1
  (tiny)"``."""
  if paper_size is not None and tiny_size is not None and tiny_size != paper_size:
    label = re.sub(rf"(?<![\d.]){int(paper_size)}(?![\d.])", str(int(tiny_size)), label)
  label = re.sub(r"\s*\(\d+(?:\.\d+)?[kM]\)", "", label)
  return f"{label} (tiny)"


def model_label(exp: Experiment, key: str, options: Options, config) -> str:
  """Model ``key``'s label in tables and figures: the experiment's (the paper's), or with
  ``options.tiny`` its :func:`tiny_label` (never "RUM 100" for a model of hidden size 8)."""
  label = exp.models[key][0]
  if not options.tiny:
    return label
  try:
    paper_size = model_config(exp, key, dataclasses.replace(options, tiny=False)
                              ).model.get("hidden_size")
  except ValueError:   # an option valid only at tiny sizes: no paper size to replace
    paper_size = None
  return tiny_label(label, paper_size, config.model.get("hidden_size"))


def train_experiment_model(exp: Experiment, key: str, config, exp_dir: str,
                           options: Options, seed: Optional[int] = None,
                           pre_config=None) -> dict:
  """Model ``key`` of ``exp`` in ``<exp_dir>/<key>`` (``<exp_dir>/<key>/seed<seed>`` when
  ``seed`` is given: one seed of several): with ``pre_config`` (:func:`pretrain_config`)
  first the pretraining run in ``<model dir>/pretrain`` and ``config.init_from`` set to
  it; then one loop invocation with the experiment's hooks every ``eval_every`` steps
  and the wall-clock budget (per phase), then, with early stopping, the final-only
  evaluators on the best checkpoint (``at_best_metrics``, :func:`final_at_best`) and the
  experiment's figures. The record keeps the pretraining's steps, status, metrics and
  time as ``"pretrain"`` (:func:`pretrain_summary`). A phase that had finished with the
  same config is not run again; a pretraining run that was preempted or diverged is
  returned as it is (the model does not fine-tune from it); one cut short by the budget is
  fine-tuned from, and is not resumed once the fine-tuning has started (the record keeps
  the pretraining the fine-tuning started from).
  """
  model_dir = seed_dir(exp_dir, key, seed)
  if seed is None:
    _check_one_seed(model_dir, config.get("seed"))
  label = model_label(exp, key, options, config)
  info = {"model": key, "label": label, "tiny": options.tiny, "seed": config.get("seed")}
  budget = ([training.TimeBudget(60 * options.budget_minutes)]
            if options.budget_minutes else [])
  pre_record = None
  if pre_config is not None:
    pre_dir = os.path.join(model_dir, PRETRAIN_DIR)
    config = copy.deepcopy(config)
    config.init_from = pre_dir
    pre_record = finished(pre_config, pre_dir)
    # Fine-tuning that has started (from a pretraining cut short by the budget) keeps the
    # pretraining it started from: that run is not resumed, its record not replaced.
    started = utils.read_json(os.path.join(model_dir, RESULT_FILE), {}).get("pretrain")
    if started is not None and started.get("status") not in FINISHED:
      pre_record = started
    elif pre_record is None and finished(config, model_dir) is None:
      logging.info("%s: pretraining %s (%s) in %s", exp.name, key, label, pre_dir)
      pre_record = run_model(pre_config, pre_dir, exp.task, hooks=budget,
                             info={**info, "phase": PRETRAIN_DIR},
                             invocation={"budget_minutes": options.budget_minutes})
      if pre_record["status"] in ("preempted", "diverged"):
        return pre_record
  done = finished(config, model_dir)
  if done is not None:
    logging.info("%s: finished at step %d already.", model_dir, done["steps"])
    return done
  every = config.eval_every or config.num_steps
  hooks = list(exp.hooks(exp.task, config, model_dir, every)) if exp.hooks else []
  logging.info("%s: training %s (%s) in %s", exp.name, key, label, model_dir)
  record = run_model(config, model_dir, exp.task, hooks=hooks + budget, info=info,
                     invocation={"budget_minutes": options.budget_minutes})
  if pre_record is not None:
    record["pretrain"] = pretrain_summary(pre_record)   # (a summary is its own summary)
  if record["status"] not in ("preempted", "diverged"):
    metrics = final_at_best(config, model_dir, exp.task)
    if metrics is not None:
      record["at_best_metrics"] = metrics
  utils.write_json(os.path.join(model_dir, RESULT_FILE), record)
  if record["status"] != "preempted" and exp.figures:
    try:
      exp.figures(model_dir, label, exp.task)
    except Exception as err:  # a plot must not lose the results
      logging.error("figures of %s failed: %s", model_dir, err)
  return record


def plan_runs(exp: Experiment, keys: Optional[Sequence[str]] = None,
              options: Optional[Options] = None) -> list[tuple]:
  """``[(key, seed, config, pretrain config or None), ...]``: every run of
  :func:`run_experiment` in its order (seed by seed), each config built and checked.

  Raises:
    ValueError: for an unknown model, config field or invalid option.
  """
  options = options or Options()
  check_options(options)
  selected = select_models(exp, keys)
  runs = []
  for seed in run_seeds(options):
    for key in selected:
      seed_options = dataclasses.replace(options, seed=seed, seeds=None)
      runs.append((key, seed, model_config(exp, key, seed_options),
                   pretrain_config(exp, key, seed_options)))
  return runs


def run_experiment(exp: Experiment, workdir: str, keys: Optional[Sequence[str]] = None,
                   options: Optional[Options] = None,
                   log: Callable[[str], None] = print) -> dict:
  """Trains the models ``keys`` (default: all) of ``exp`` under ``<workdir>/<exp.name>``
  one after the other, seed by seed (every model's first seed, then every model's second,
  ...: a run cut short still compares all the models), rewriting the experiment's results
  after each run; stops after a preempted run. Every config is built and checked before
  anything trains.

  Returns:
    The ``results.json`` content (:func:`experiment_summary`).

  Raises:
    ValueError: for an unknown model, config field or invalid option.
  """
  options = options or Options()
  seeds = run_seeds(options) if multi_seed(options) else None
  selected = select_models(exp, keys)
  runs = plan_runs(exp, keys, options)
  training.check_not_run(workdir)
  training.check_writable(workdir)
  exp_dir = os.path.join(workdir, exp.name)
  if not seeds:
    for key in selected:
      _check_no_seed_folders(exp_dir, key)
  for key, seed, config, pre_config in runs:
    seed = seed if seeds else None   # one seed: the single-run layout
    record = train_experiment_model(exp, key, config, exp_dir, options, seed, pre_config)
    finish_experiment(exp, exp_dir, seeds, selected)
    log(json.dumps({"experiment": exp.name, "model": key,
                    **({} if seed is None else {"seed": seed}), "steps": record["steps"],
                    "status": record["status"],
                    "wall_sec": record["invocations"][-1]["wall_sec"],
                    **{k: v for k, v in record["metrics"].items() if k.startswith("test_")}}))
    if record["status"] == "preempted":
      break
  return finish_experiment(exp, exp_dir, seeds, selected)


def aggregate_records(records: Sequence[dict]) -> dict:
  """One model's :func:`run_model` records over seeds (in seed order) as one record:
  ``model``, ``label``, ``tiny``, ``config`` and ``num_params`` of the first seed;
  ``seeds``, ``n``; ``steps`` (the common step count, or the list when they differ),
  ``target_steps``; ``status`` (the common one, else the seeds' joined by ``/``) and
  ``statuses``; ``metrics`` and ``metrics_std``: per metric that every seed has, the mean
  and the sample standard deviation (``n - 1``; ``None`` for ``n = 1``), the same for
  ``best_metrics`` and ``at_best_metrics`` when every seed has them; ``evals``: the mean
  of the seeds' periodic evaluations (the steps and metrics every seed has); the wall and
  CPU time summed over the seeds; ``runs``: ``{seed: record}``."""
  first = records[0]
  stats = {field: _field_stats(records, field)
           for field in ("metrics", "best_metrics", "at_best_metrics")
           if all(r.get(field) is not None for r in records)}
  steps = [r["steps"] for r in records]
  statuses = [r["status"] for r in records]
  return {
      "model": first.get("model"), "label": first.get("label"), "tiny": first.get("tiny"),
      "seeds": [r["config"].get("seed") for r in records], "n": len(records),
      "config": first["config"], "num_params": first["num_params"],
      "steps": steps[0] if len(set(steps)) == 1 else steps,
      "target_steps": first["target_steps"],
      "status": statuses[0] if len(set(statuses)) == 1 else "/".join(statuses),
      "statuses": statuses,
      **{field: {k: m for k, (m, _) in st.items()} for field, st in stats.items()},
      **{f"{field}_std": {k: s for k, (_, s) in st.items()} for field, st in stats.items()},
      "evals": _mean_evals(records),
      "wall_sec_total": round(sum(r["wall_sec_total"] for r in records), 1),
      "cpu_sec_total": round(sum(r["cpu_sec_total"] for r in records), 1),
      "runs": {str(r["config"].get("seed")): r for r in records},
  }


def _mean_evals(records: Sequence[dict]) -> dict:
  """The mean over ``records`` of their ``"evals"`` (:func:`eval_history`): the steps and
  metrics that every record has."""
  evals = [r.get("evals") or {} for r in records]
  steps = [s for s in evals[0] if all(s in e for e in evals)]
  return {s: {k: m for k, (m, _) in _field_stats([e[s] for e in evals], None).items()}
          for s in steps}


def _field_stats(records: Sequence[dict], field: Optional[str]) -> dict:
  """``{metric: (mean, std)}`` of ``record[field]`` (``field=None``: of ``record``) over
  ``records`` (the metrics that every record has)."""
  dicts = [r if field is None else r[field] for r in records]
  names = [k for k in dicts[0] if all(k in d for d in dicts)]
  return {k: mean_std([d[k] for d in dicts]) for k in names}


def eval_history(run_dir: str) -> dict[str, dict[str, float]]:
  """``{str(step): {name: value}}``: the periodic evaluations (``eval_*`` metrics) in
  ``<run_dir>/metrics.jsonl``, the last one written winning at a step (a resumed run)."""
  history = {}
  for r in utils.read_jsonl(os.path.join(run_dir, "metrics.jsonl")):
    evals = {k: v for k, v in r.items() if k.startswith("eval_")}
    if evals:
      history.setdefault(str(r["step"]), {}).update(evals)
  return history


def _read_record(run_dir: str) -> Optional[dict]:
  """A run's ``result.json`` with its :func:`eval_history` as ``"evals"``."""
  record = utils.read_json(os.path.join(run_dir, RESULT_FILE))
  return None if record is None else dict(record, evals=eval_history(run_dir))


def _seeds_record(exp_dir: str, key: str, seeds: Sequence[Any]) -> Optional[dict]:
  """The :func:`aggregate_records` record of model ``key``'s runs of ``seeds`` that have a
  ``result.json`` (:func:`seed_dir`), or ``None`` if none has."""
  found = [_read_record(seed_dir(exp_dir, key, s)) for s in seeds]
  found = [r for r in found if r is not None]
  return aggregate_records(found) if found else None


def saved_record(exp_dir: str, key: str) -> Optional[dict]:
  """Model ``key``'s results as they are in ``exp_dir``, however it ran: with seed folders,
  the :func:`aggregate_records` record of all its seeds (:func:`saved_seeds`), else the
  record of its single run (``<key>/result.json``); ``None`` if it has no results."""
  seeds = saved_seeds(exp_dir, key)
  if seeds:
    return _seeds_record(exp_dir, key, seeds)
  return _read_record(os.path.join(exp_dir, key))


def experiment_summary(exp: Experiment, exp_dir: str,
                       seeds: Optional[Sequence[int]] = None,
                       keys: Optional[Sequence[str]] = None) -> dict:
  """``results.json``: the experiment, the hardware, and per model (in the experiment's
  order) that has results in ``exp_dir`` its record with the paper's numbers as
  ``"paper"`` and its periodic evaluations as ``"evals"`` (:func:`eval_history`).

  Every model with results is reported, however it ran (:func:`saved_record`): a single
  run as its own record, several seeds as one :func:`aggregate_records` record of all of
  its seeds. With ``seeds`` (several, the seeds of a run of the models ``keys``, default:
  all of them), those models report the records of just these seeds that exist (a model
  with none of them yet, what it has). ``"seeds"`` (only when some record is of seeds):
  ``seeds``, then the other seeds of the records in numeric order."""
  models = {}
  for key in exp.models:
    record = None
    if seeds and (keys is None or key in keys):
      record = _seeds_record(exp_dir, key, seeds)
    if record is None:
      record = saved_record(exp_dir, key)
    if record is not None:
      models[key] = dict(record, paper=exp.paper.get(key))
  summary = {"experiment": exp.name, "task": exp.task.name, "variant": exp.variant,
             "paper_source": exp.paper_source, "hardware": hardware_info(),
             "models": models}
  found = [s for r in models.values() if "runs" in r for s in r["seeds"]]
  if seeds or found:
    listed = list(seeds or ())
    others = {str(s): s for s in found if str(s) not in map(str, listed)}
    summary["seeds"] = listed + sorted(others.values(), key=_seed_order)
  return summary


def _seed_order(seed) -> tuple:
  """Seeds in numeric order (a seed that is not an integer after them)."""
  try:
    return (0, int(seed), "")
  except (TypeError, ValueError):
    return (1, 0, str(seed))


def _row_seeds(record: dict) -> list:
  """The seeds of a summary record: an aggregate's, or the single run's config seed."""
  if "runs" in record:
    return list(record["seeds"])
  return [(record.get("config") or {}).get("seed")]


def _seeds_line(summary: dict) -> str:
  """The line above a table with seeds: the seeds and what ``mean ± std`` and ``n`` are;
  per model when the models ran different seeds (a model of a single run beside models of
  several, or seeds that are not the ones of a run that some of them have yet to reach)."""
  rows = list(summary["models"].values())
  sets = [set(map(str, _row_seeds(r))) for r in rows]
  nested = all("runs" in r for r in rows) and all(a <= b or b <= a for a in sets for b in sets)
  if nested:
    return (f"Seeds {', '.join(map(str, summary['seeds']))}: mean ± sample standard "
            "deviation (n - 1) over the n seeds run; steps and wall time per seed.")
  per_model = "; ".join(
      f"{r['label']} {', '.join(map(str, _row_seeds(r)))}" + ("" if "runs" in r else " (one run)")
      for r in rows)
  return (f"Seeds per model: {per_model}. Mean ± sample standard deviation (n - 1) over a "
          "model's n seeds; steps and wall time per seed.")


def results_markdown(exp: Experiment, summary: dict) -> str:
  """The experiment's Markdown table: model, params, steps, wall time, the experiment's
  columns and the status, under the hardware and the experiment's notes. With several
  seeds (``summary["seeds"]``): ``mean ± std`` (sample std) over the seeds, a column ``n``
  (the seeds run so far; 1 for a model of a single run, whose values show as they are),
  and steps and wall time per seed (the wall time's mean)."""
  hw = summary["hardware"]
  seeds = summary.get("seeds")
  lines = [f"### {summary['experiment']}", "",
           f"Hardware: {hw['platform']} ({hw['cpu_model']}, {hw['cpu_count']} CPUs), "
           f"jax {hw['jax_version']}.", ""]
  if seeds:
    lines += [_seeds_line(summary), ""]
  if exp.notes is not None and summary["models"]:
    lines += [*exp.notes(summary), ""]
  header = ["model", "params", "steps", "wall (min)", *(["n"] if seeds else []),
            *(c.header for c in exp.columns), "status"]
  lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for r in summary["models"].values():
    steps = r["steps"]
    n = r.get("n", 1)
    cells = [r["label"], str(r["num_params"]),
             "/".join(map(str, steps)) if isinstance(steps, list) else str(steps),
             f"{r['wall_sec_total'] / 60 / n:.1f}", *([str(n)] if seeds else []),
             *(c.cell_over_seeds(r) if seeds else c.cell(r) for c in exp.columns),
             r["status"]]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def metric_curves(exp_dir: str, summary: dict, names: Sequence[str]) -> dict:
  """``{label: {name: (steps, values)}}`` of the models' ``metrics.jsonl``: a model of
  several seeds (an :func:`aggregate_records` record) one curve per seed, labelled
  ``"<label> s<seed>"``, one of a single run one curve labelled ``"<label>"``."""
  out = {}
  for key, r in summary["models"].items():
    if "runs" in r:
      dirs = {f"{r['label']} s{s}": seed_dir(exp_dir, key, s) for s in r["runs"]}
    else:
      dirs = {r["label"]: os.path.join(exp_dir, key)}
    for label, path in dirs.items():
      records = utils.read_jsonl(os.path.join(path, "metrics.jsonl"))
      out[label] = {name: analysis.metric_curve(records, name) for name in names}
  return out


def finish_experiment(exp: Experiment, exp_dir: str,
                      seeds: Optional[Sequence[int]] = None,
                      keys: Optional[Sequence[str]] = None) -> dict:
  """Writes ``results.json``, ``results.md`` and the experiment's plot (``seeds`` and
  ``keys``: as in :func:`experiment_summary`: every model with results); returns the
  summary."""
  os.makedirs(exp_dir, exist_ok=True)
  summary = experiment_summary(exp, exp_dir, seeds, keys)
  utils.write_json(os.path.join(exp_dir, "results.json"), summary)
  utils.write_text(os.path.join(exp_dir, "results.md"), results_markdown(exp, summary))
  if exp.plot is not None and summary["models"]:
    try:
      exp.plot(summary, exp_dir)
    except Exception as err:  # a plot must not lose the results
      logging.error("the plot of %s failed: %s", exp.name, err)
  return summary

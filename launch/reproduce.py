r"""Reproduces the synthetic tasks of the RUM paper: copying (Figure 4) and recall (Table 1).

    python -m launch.reproduce --experiment=recall_T30 --workdir=/tmp/repro \
        --models=rum_lam1,gru --budget_minutes=15
    python -m launch.reproduce --experiment=copying_T200 --workdir=/tmp/repro \
        --models=rum_lam1,gru --steps=2000 --budget_minutes=10
    python -m launch.reproduce --experiment=recall_T30,copying_T200 --workdir=/tmp/t \
        --models=rum_lam1,gru --tiny --steps=3          # a smoke test in seconds

Experiments (``--experiment``, comma-separated):

* ``copying_T200``, ``copying_T500``, ``copying_T1000``: the copying-memory task with
  delay T (``tasks/copying.py``, variant ``T<T>``: batch 128, RMSProp decay 0.9, lr 1e-3):
  RUM ``lam=1`` (hidden 100) with ``eta=None`` and ``eta=1.0``, RUM ``lam=0`` (250),
  LSTM, GRU, EURNN (lr 1e-4, as in the paper) and GORU (250). Plot: cross-entropy vs
  step with the memoryless baseline (Figure 4) and copied-symbol accuracy.
* ``recall_T30``, ``recall_T50``: associative recall (``tasks/recall.py``; hidden 50,
  batch 128, RMSProp lr 1e-3): RUM ``lam=1`` ``eta=None``, RUM ``lam=1`` ``eta=1.0``,
  RUM ``lam=0``, LSTM, GRU, GORU, EURNN, FW-LN. Results: test accuracy and parameter
  count (Table 1) next to the paper's numbers.

Each model trains in-process through the generic loop
(``rumjax.training.train_and_evaluate``) in ``<workdir>/<experiment>/<model>``, in chunks
of ``--chunk_steps`` steps (the loop resumes from the checkpoint of the previous chunk).
After each chunk it is evaluated (``--eval_batches_during`` batches per split; the full
test set at the end) and, for RUM, the mini-batch mean of ``cos(theta_t)`` per step on a
fixed test batch is appended to ``cos_theta.jsonl`` (Figure 5b,c). With
``--budget_minutes`` a model stops at the first chunk boundary past its wall-clock
budget (chunks shrink to fit the remaining budget, from the measured step rate).
Re-running with the same workdir resumes every model where it stopped.

Outputs under ``<workdir>/<experiment>/``:

* ``results.json``: per model the config, parameter count, steps done, wall and CPU time,
  final test (and dev) metrics, the paper's numbers, and the hardware;
* ``results.md``: the same as a Markdown table;
* ``<experiment>.png``: Figure 4 (copying) or Table 1 as bars plus losses (recall);
* ``<model>/``: the loop's workdir (checkpoints, ``metrics.jsonl``), ``config.json``,
  ``params.npz`` (final parameters), ``result.json``, and for RUM ``cos_theta.jsonl``,
  ``kernel_tau.png`` (Figure 5a) and ``cos_theta.png`` (Figure 5b,c).
"""

import ast
import dataclasses
import datetime
import json
import os
import platform
import sys
import time
from typing import Optional

from absl import app, flags, logging

import tasks
from launch import plot as plot_lib


@dataclasses.dataclass
class Options:
  """What the flags set for every model of a run (see ``define_flags`` for the meaning)."""
  steps: Optional[int] = None
  budget_minutes: Optional[float] = None
  chunk_steps: Optional[int] = None
  first_chunk_steps: int = 50
  eval_batches_during: int = 8
  log_every: int = 10
  keep_checkpoints: int = 100
  sets: dict = dataclasses.field(default_factory=dict)
  tiny: bool = False
  seed: Optional[int] = None


# ------------------------------------------------------------------- experiments


@dataclasses.dataclass(frozen=True)
class Model:
  key: str
  label: str
  overrides: dict


@dataclasses.dataclass(frozen=True)
class Experiment:
  name: str
  task: str
  variant: str
  models: tuple
  paper: dict


def _copying_models():
  rum = dict(cell="rum", lam=1, eta=None, hidden_size=100)
  return (
      Model("rum_lam1", "RUM 100 λ=1 η=N/A", rum),
      Model("rum_lam1_eta1", "RUM 100 λ=1 η=1.0", dict(rum, eta=1.0)),
      Model("rum_lam0", "RUM 250 λ=0 η=N/A", dict(rum, lam=0, hidden_size=250)),
      Model("lstm", "LSTM 250", dict(cell="lstm", hidden_size=250)),
      Model("gru", "GRU 250", dict(cell="gru", hidden_size=250)),
      Model("eurnn", "EURNN 250 (lr 1e-4)", dict(cell="eurnn", hidden_size=250,
                                                 learning_rate=1e-4)),
      Model("goru", "GORU 250", dict(cell="goru", hidden_size=250)),
  )


def _recall_models():
  rum = dict(cell="rum", lam=1, eta=None, hidden_size=50)
  return (
      Model("rum_lam1", "RUM λ=1 η=N/A", rum),
      Model("rum_lam1_eta1", "RUM λ=1 η=1.0", dict(rum, eta=1.0)),
      Model("rum_lam0", "RUM λ=0 η=N/A", dict(rum, lam=0)),
      Model("lstm", "LSTM", dict(cell="lstm", hidden_size=50)),
      Model("gru", "GRU", dict(cell="gru", hidden_size=50)),
      Model("goru", "GORU", dict(cell="goru", hidden_size=50)),
      Model("eurnn", "EURNN", dict(cell="eurnn", hidden_size=50)),
      Model("fwln", "FW-LN", dict(cell="fwln", hidden_size=50)),
  )


# Table 1 of the paper: test accuracy (%) for T = 30 / 50 and the parameter count.
PAPER_RECALL = {
    "gru": (21.5, 17.6, "14k"),
    "goru": (21.8, 18.9, "13k"),
    "eurnn": (24.5, 18.5, "4k"),
    "lstm": (25.6, 20.5, "17k"),
    "fwln": (100.0, 20.8, "9k"),
    "rum_lam0": (25.0, 18.5, "13k"),
    "rum_lam1_eta1": (100.0, 83.7, "13k"),
    "rum_lam1": (100.0, 100.0, "13k"),
}
# Figure 4 of the paper (T = 500 only; no numbers, read from the text of section 4.1).
PAPER_COPYING = {
    "rum_lam1": "converges to 100% accuracy (loss -> 0); faster than eta=1.0",
    "rum_lam1_eta1": "converges to 100% accuracy, slower than eta=N/A",
    "rum_lam0": "learns, much slower than lam=1",
    "lstm": "stays at the memoryless baseline",
    "gru": "stays at the memoryless baseline",
    "eurnn": "solves the task in a few steps (lr 1e-4; unstable at larger lr)",
    "goru": "converges slightly faster than RUM",
}


def _experiments() -> dict:
  out = {}
  for t in (200, 500, 1000):
    out[f"copying_T{t}"] = Experiment(
        f"copying_T{t}", "copying", f"T{t}", _copying_models(),
        {"source": "Figure 4 (T=500 only) and section 4.1", "models": PAPER_COPYING})
  for i, t in enumerate((30, 50)):
    out[f"recall_T{t}"] = Experiment(
        f"recall_T{t}", "recall", f"T{t}", _recall_models(),
        {"source": "Table 1", "models": {k: {"test_accuracy_pct": v[i], "params": v[2]}
                                         for k, v in PAPER_RECALL.items()}})
  return out


EXPERIMENTS = _experiments()

TINY = {
    "copying": dict(hidden_size=8, batch_size=8, delay=10, num_train=64, num_test=16,
                    eval_batches=2),
    "recall": dict(hidden_size=8, batch_size=8, length=6, num_train=64, num_dev=16,
                   num_test=16, eval_batches=2),
}


def parse_sets(items) -> dict:
  """``["field=value", ...]`` -> ``{field: literal}`` (a non-literal stays a string)."""
  out = {}
  for item in items:
    if "=" not in item:
      raise ValueError(f"--set={item!r} must be FIELD=VALUE.")
    field, value = item.split("=", 1)
    try:
      out[field.strip()] = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError):
      out[field.strip()] = value.strip()
  return out


def make_config(exp: Experiment, model: Model, *, tiny: bool = False,
                sets: Optional[dict] = None, seed: Optional[int] = None):
  """The config of one model: variant defaults, the model's settings, ``--tiny``, ``--set``."""
  task = tasks.get_task(exp.task)
  config = task.default_config(exp.variant)
  with config.unlocked():
    updates = dict(model.overrides)
    if tiny:
      updates.update(TINY[exp.task])
    updates.update(sets or {})
    if seed is not None:
      updates["seed"] = seed
    for field, value in updates.items():
      if field not in config:
        raise ValueError(f"config has no field {field!r} (task {exp.task}).")
      config[field] = value
  task.validate_config(config)
  return config


def select_models(exp: Experiment, keys) -> list:
  if not keys:
    return list(exp.models)
  known = {m.key: m for m in exp.models}
  unknown = [k for k in keys if k not in known]
  if unknown:
    raise ValueError(f"unknown model(s) {unknown} for {exp.name}; known: {list(known)}.")
  return [known[k] for k in keys]


# ------------------------------------------------------------------------- records


def hardware_info() -> dict:
  import jax
  cpu_model = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          cpu_model = line.split(":", 1)[1].strip()
          break
  except OSError:
    pass
  devices = jax.devices()
  return {
      "platform": devices[0].platform,
      "device_kind": devices[0].device_kind,
      "device_count": len(devices),
      "cpu_count": os.cpu_count(),
      "cpu_model": cpu_model,
      "jax_version": jax.__version__,
      "python": platform.python_version(),
  }


def _read_json(path: str, default=None):
  if not os.path.exists(path):
    return default
  with open(path) as f:
    return json.load(f)


def _write_json(path: str, data) -> None:
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(data, f, indent=1, default=float)
  os.replace(tmp, path)


def _num_params(params) -> int:
  import jax
  return int(sum(x.size for x in jax.tree.leaves(params)))


# -------------------------------------------------------------------------- training


class _Run:
  """One model of one experiment: chunks of training under a wall-clock budget."""

  def __init__(self, exp: Experiment, model: Model, root: str, options: Options):
    self.exp, self.model, self.options = exp, model, options
    self.task = tasks.get_task(exp.task)
    self.dir = os.path.join(root, exp.name, model.key)
    os.makedirs(self.dir, exist_ok=True)
    self.config = make_config(exp, model, tiny=options.tiny, sets=options.sets,
                              seed=options.seed)
    self.full_eval_batches = int(self.config.eval_batches)
    self.target = int(options.steps if options.steps is not None else self.config.num_steps)
    self.chunk = int(options.chunk_steps or self.config.eval_every or 1000)
    with self.config.unlocked():
      self.config.eval_every = 0          # we evaluate between chunks
      self.config.checkpoint_every = 0    # the loop saves at the end of each chunk
      self.config.keep_checkpoints = options.keep_checkpoints
      self.config.log_every = options.log_every
      self.config.label = model.label
      self.config.num_steps = self.target
    self.is_rum = self.config.cell == "rum" and not self.config.layer_norm
    self._cos_inputs = None
    _write_json(os.path.join(self.dir, "config.json"), self.config.to_dict())

  def _train(self, num_steps: int, eval_batches: int) -> dict:
    from rumjax import training
    config = self.config.copy_and_resolve_references()
    with config.unlocked():
      config.num_steps = int(num_steps)
      config.eval_batches = int(eval_batches)
    return training.train_and_evaluate(config, self.dir, self.task)

  def _record_cos(self, step: int, params) -> None:
    if not self.is_rum:
      return
    if self._cos_inputs is None:
      self._cos_inputs = plot_lib.fixed_batch_inputs(self.task, self.config)
    cos = plot_lib.cos_of_params(self.task, self.config, params, self._cos_inputs)
    with open(os.path.join(self.dir, "cos_theta.jsonl"), "a") as f:
      f.write(json.dumps({"step": int(step), "cos_mean": [round(float(c), 6) for c in cos]})
              + "\n")

  def _rate(self, since_step: int) -> Optional[float]:
    """Training steps per second in the metrics records after ``since_step`` (median of
    the logging windows, the first one excluded: it holds the compilation)."""
    records = [r for r in plot_lib.read_jsonl(os.path.join(self.dir, "metrics.jsonl"))
               if "steps_per_sec" in r and r["step"] > since_step]
    rates = sorted(r["steps_per_sec"] for r in records[1:] or records)
    return rates[len(rates) // 2] if rates else None

  def run(self) -> dict:
    from rumjax import analysis, training
    budget = self.options.budget_minutes
    budget_sec = None if budget is None else 60.0 * budget
    t0, c0 = time.perf_counter(), time.process_time()
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    load0 = os.getloadavg()
    during = min(self.full_eval_batches, self.options.eval_batches_during)
    status, error, summary = "ok", None, None
    done = analysis.checkpoint_steps(self.dir)
    start_step = done[-1] if done else 0
    step = start_step
    try:
      if not done:  # step 0: the initial evaluation and cos(theta)
        summary = self._train(0, during)
        self._record_cos(0, summary["params"])
      rate, overhead, first = None, 0.0, True
      while step < self.target:
        elapsed = time.perf_counter() - t0
        if budget_sec is not None and elapsed >= budget_sec:
          status = "budget"
          break
        n = min(self.chunk - step % self.chunk, self.target - step)  # to a multiple
        if first:
          n = min(n, max(1, self.options.first_chunk_steps))
        elif budget_sec is not None and rate:
          fit = int((budget_sec - elapsed - overhead) * rate)
          if fit < min(n, max(1, self.options.first_chunk_steps)):  # no tiny tail chunks
            status = "budget"
            break
          n = min(n, fit)
        chunk_t0, before = time.perf_counter(), step
        summary = self._train(step + n, during)
        step = int(summary["step"])
        if summary.get("preempted"):
          status = "preempted"
          break
        self._record_cos(step, summary["params"])
        chunk_sec = time.perf_counter() - chunk_t0
        rate = self._rate(before) or (step - before) / max(chunk_sec, 1e-9)
        overhead = max(0.0, chunk_sec - (step - before) / rate)
        first = False
        logging.info("%s/%s: step %d/%d, %.0f s", self.exp.name, self.model.key, step,
                     self.target, time.perf_counter() - t0)
    except training.NonFiniteError as err:
      status, error = "diverged", str(err)
      logging.error("%s/%s diverged: %s", self.exp.name, self.model.key, err)
    train_sec = time.perf_counter() - t0
    if status != "preempted" and (summary is None or during < self.full_eval_batches
                                  or status == "diverged"):
      # The final evaluation, on the whole test set, of the latest checkpoint.
      summary = self._train(0, self.full_eval_batches)
    step = int(summary["step"])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    params = summary.pop("params")
    analysis.save_params_npz(os.path.join(self.dir, "params.npz"), params)
    previous = _read_json(os.path.join(self.dir, "result.json"), {})
    invocations = previous.get("invocations", []) + [{
        "started": started,
        "steps_from": start_step, "steps_to": step, "wall_sec": round(wall, 1),
        "train_wall_sec": round(train_sec, 1), "cpu_sec": round(cpu, 1),
        "budget_minutes": budget, "status": status,
        "load_avg_1min_start_end": [round(load0[0], 2), round(os.getloadavg()[0], 2)]}]
    metrics = {k: v for k, v in summary.items()
               if k.startswith(("test_", "eval_", "train_"))}
    result = {
        "model": self.model.key, "label": self.model.label, "cell": self.config.cell,
        "hidden_size": self.config.hidden_size, "lam": self.config.lam,
        "eta": self.config.eta, "learning_rate": self.config.learning_rate,
        "batch_size": self.config.batch_size, "num_params": _num_params(params),
        "steps": step, "target_steps": self.target, "status": status, "error": error,
        "wall_sec_total": round(sum(i["wall_sec"] for i in invocations), 1),
        "cpu_sec_total": round(sum(i["cpu_sec"] for i in invocations), 1),
        "invocations": invocations, "metrics": metrics, "tiny": self.options.tiny,
        "hardware": hardware_info(),
    }
    _write_json(os.path.join(self.dir, "result.json"), result)
    if self.is_rum:
      try:
        plot_lib.plot_rum_model(self.dir, title=self.model.label)
      except Exception as err:  # a plot must not lose the results
        logging.error("plots of %s failed: %s", self.dir, err)
    return result


# ---------------------------------------------------------------------- summaries


def _pct(v):
  return None if v is None else 100.0 * float(v)


def experiment_summary(exp: Experiment, exp_dir: str) -> dict:
  """``results.json`` of an experiment from the models' ``result.json`` files."""
  models = {}
  for m in exp.models:
    r = _read_json(os.path.join(exp_dir, m.key, "result.json"))
    if r is None:
      continue
    met = r["metrics"]
    if exp.task == "copying":
      base = met.get("test_memoryless_baseline")
      r["test_loss_over_baseline"] = (met["test_loss"] / base
                                      if base and "test_loss" in met else None)
      r["paper"] = exp.paper["models"].get(m.key)
    else:
      paper = exp.paper["models"].get(m.key, {})
      r["paper_test_accuracy_pct"] = paper.get("test_accuracy_pct")
      r["paper_params"] = paper.get("params")
    r["test_accuracy_pct"] = _pct(met.get("test_accuracy"))
    models[m.key] = r
  out = {"experiment": exp.name, "task": exp.task, "variant": exp.variant,
         "paper_source": exp.paper["source"], "hardware": hardware_info(), "models": models}
  if exp.task == "copying":
    task = tasks.get_task("copying")
    delay = next((_read_json(os.path.join(exp_dir, k, "config.json"), {}).get("delay")
                  for k in models), None) or int(exp.variant[1:])
    out["memoryless_baseline"] = task.memoryless_baseline(delay)
  return out


def _fmt(v, spec=".1f"):
  return "-" if v is None else format(v, spec)


def results_markdown(summary: dict) -> str:
  hw = summary["hardware"]
  lines = [f"### {summary['experiment']}", "",
           f"Hardware: {hw['platform']} ({hw['cpu_model']}, {hw['cpu_count']} CPUs), "
           f"jax {hw['jax_version']}.", ""]
  copying = summary["task"] == "copying"
  if copying:
    lines += [f"Memoryless baseline: {summary['memoryless_baseline']:.4f}.", "",
              "| model | params | steps | wall (min) | test CE | CE / baseline | "
              "copied acc. (%) | status | paper (Fig. 4, T=500) |",
              "|---|---|---|---|---|---|---|---|---|"]
  else:
    lines += ["| model | params (ours) | params (paper) | steps | wall (min) | "
              "test acc. (%) | paper acc. (%) | status |",
              "|---|---|---|---|---|---|---|---|"]
  for r in summary["models"].values():
    wall = r["wall_sec_total"] / 60
    if copying:
      lines.append(f"| {r['label']} | {r['num_params']} | {r['steps']} | {wall:.1f} | "
                   f"{_fmt(r['metrics'].get('test_loss'), '.4f')} | "
                   f"{_fmt(r.get('test_loss_over_baseline'), '.3f')} | "
                   f"{_fmt(r['test_accuracy_pct'])} | {r['status']} | {r.get('paper')} |")
    else:
      lines.append(f"| {r['label']} | {r['num_params']} | {r.get('paper_params')} | "
                   f"{r['steps']} | {wall:.1f} | {_fmt(r['test_accuracy_pct'])} | "
                   f"{_fmt(r.get('paper_test_accuracy_pct'))} | {r['status']} |")
  return "\n".join(lines) + "\n"


def plot_experiment(exp: Experiment, exp_dir: str, summary: dict) -> Optional[str]:
  path = os.path.join(exp_dir, f"{exp.name}.png")
  if not summary["models"]:
    return None
  curves = {}
  for key, r in summary["models"].items():
    records = plot_lib.read_jsonl(os.path.join(exp_dir, key, "metrics.jsonl"))
    curves[r["label"]] = {name: plot_lib.metric_curve(records, name)
                          for name in ("train_loss", "test_loss", "test_accuracy")}
  if exp.task == "copying":
    return plot_lib.save_copying(curves, summary["memoryless_baseline"], path,
                                 title=f"copying T={exp.variant[1:]}: training cross-entropy")
  models = summary["models"].values()
  return plot_lib.save_recall(
      [f"{r['label']}\n({r['num_params']} params)" for r in models],
      [r["test_accuracy_pct"] for r in models],
      [r.get("paper_test_accuracy_pct") for r in models],
      {k: v["train_loss"] for k, v in curves.items()}, path,
      title=f"associative recall T={exp.variant[1:]}: ours vs Table 1",
      accuracy_curves={k: v["test_accuracy"] for k, v in curves.items()})


def finish_experiment(exp: Experiment, exp_dir: str) -> dict:
  summary = experiment_summary(exp, exp_dir)
  _write_json(os.path.join(exp_dir, "results.json"), summary)
  with open(os.path.join(exp_dir, "results.md"), "w") as f:
    f.write(results_markdown(summary))
  plot_experiment(exp, exp_dir, summary)
  return summary


# ---------------------------------------------------------------------------- main


def define_flags() -> None:
  """The command-line flags (defined only when run as a script, so that importing this
  module, e.g. from a test, leaves the global absl flags alone)."""
  flags.DEFINE_list("experiment", None, "Experiment(s) to run, comma-separated; one of "
                    "copying_T200, copying_T500, copying_T1000, recall_T30, recall_T50.",
                    required=True)
  flags.DEFINE_string("workdir", None, "Root directory; each experiment writes to "
                      "<workdir>/<experiment>. Re-using it resumes the runs.", required=True)
  flags.DEFINE_list("models", None, "Subset of the experiment's models (default: all), "
                    "e.g. rum_lam1,gru.")
  flags.DEFINE_integer("steps", None, "Training steps per model (default: the task "
                       "variant's num_steps: 10k for copying, 100k for recall).")
  flags.DEFINE_float("budget_minutes", None, "Wall-clock budget per model and invocation "
                     "(training, evaluation and compilation); the model stops at the first "
                     "chunk boundary past it. Default: no budget.")
  flags.DEFINE_integer("chunk_steps", None, "Steps between evaluations / cos(theta) records "
                       "(default: the variant's eval_every: 250 copying, 1000 recall).")
  flags.DEFINE_integer("first_chunk_steps", 50, "Length of the first chunk of a fresh "
                       "invocation (measures the step rate for the budget).")
  flags.DEFINE_integer("eval_batches_during", 8, "Eval batches per split after each chunk; "
                       "the final evaluation uses the variant's full test set.")
  flags.DEFINE_integer("log_every", 10, "Training metrics are logged every N steps.")
  flags.DEFINE_integer("keep_checkpoints", 100, "Checkpoints kept per model (one per chunk), "
                       "so launch.plot can revisit training.")
  flags.DEFINE_multi_string("set", [], "Config override for every model, FIELD=VALUE (a "
                            "Python literal), e.g. --set=learning_rate=3e-3; repeatable.")
  flags.DEFINE_bool("tiny", False, "Tiny sizes for smoke tests (hidden 8, batch 8, short "
                    "sequences, small data sets): checks the plumbing, not the paper.")
  flags.DEFINE_integer("seed", None, "Seed of every model (config.seed).")
  flags.DEFINE_string("cpu_devices", None, "CPU only: CPU devices for the data-parallel "
                      "loop, or 'auto' (one per core); see launch.train. Default: one.")
  flags.DEFINE_string("compilation_cache", "auto", "JAX persistent compilation cache "
                      "directory ('auto': <workdir>/.jax_cache; '' switches it off): the "
                      "chunks recompile the same programs.")


def options_from_flags(flags_) -> Options:
  return Options(steps=flags_.steps, budget_minutes=flags_.budget_minutes,
                 chunk_steps=flags_.chunk_steps, first_chunk_steps=flags_.first_chunk_steps,
                 eval_batches_during=flags_.eval_batches_during, log_every=flags_.log_every,
                 keep_checkpoints=flags_.keep_checkpoints, sets=parse_sets(flags_.set),
                 tiny=flags_.tiny, seed=flags_.seed)


class _QuietLibraries:
  def filter(self, record) -> bool:
    return record.levelno >= 30 or "/orbax/" not in record.pathname


def run_experiment(name: str, workdir: str, models=None, options: Optional[Options] = None,
                   log=print) -> dict:
  """Trains the ``models`` (keys; default all) of experiment ``name`` under
  ``<workdir>/<name>`` and returns its ``results.json`` content. Raises ``ValueError`` for
  an unknown experiment, model or config field before anything trains."""
  if name not in EXPERIMENTS:
    raise ValueError(f"unknown experiment {name!r}; known: {sorted(EXPERIMENTS)}.")
  exp = EXPERIMENTS[name]
  options = options or Options()
  runs = [_Run(exp, m, workdir, options) for m in select_models(exp, models)]
  exp_dir = os.path.join(workdir, exp.name)
  summary = None
  for run in runs:
    logging.info("%s: training %s (%s) in %s", exp.name, run.model.key, run.model.label,
                 run.dir)
    result = run.run()
    summary = finish_experiment(exp, exp_dir)
    log(json.dumps({"experiment": exp.name, "model": run.model.key, "steps": result["steps"],
                    "status": result["status"],
                    "wall_sec": result["invocations"][-1]["wall_sec"],
                    "test_accuracy": result["metrics"].get("test_accuracy"),
                    "test_loss": result["metrics"].get("test_loss")}))
    if result["status"] == "preempted":
      break
  return summary if summary is not None else finish_experiment(exp, exp_dir)


def main(argv):
  del argv
  import matplotlib
  matplotlib.use("Agg")
  logging.get_absl_handler().addFilter(_QuietLibraries())
  FLAGS = flags.FLAGS
  try:
    options = options_from_flags(FLAGS)
  except ValueError as err:
    sys.exit(f"error: {err}")
  unknown = [e for e in FLAGS.experiment if e not in EXPERIMENTS]
  if unknown:
    sys.exit(f"error: unknown experiment(s) {unknown}; known: {sorted(EXPERIMENTS)}.")
  from rumjax.training import sharding
  try:
    sharding.use_cpu_devices(FLAGS.cpu_devices)
  except ValueError as err:
    sys.exit(f"error: {err}")
  import jax
  cache = FLAGS.compilation_cache
  if cache == "auto":
    cache = os.path.join(FLAGS.workdir, ".jax_cache")
  if cache:
    jax.config.update("jax_compilation_cache_dir", os.path.abspath(cache))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
  for name in FLAGS.experiment:
    try:
      summary = run_experiment(name, FLAGS.workdir, FLAGS.models, options,
                               log=lambda line: print(line, flush=True))
    except ValueError as err:
      sys.exit(f"error: {err}")
    print(results_markdown(summary), flush=True)
    if any(r["status"] == "preempted" for r in summary["models"].values()):
      return


if __name__ == "__main__":
  define_flags()
  app.run(main)

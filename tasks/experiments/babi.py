"""bAbI in the RUM paper (TACL 2019, sec. 4.2, Table 2; ICLR-workshop version, Table 4):
one model per sub-task with early stopping on dev, for ``launch.babi_all``.

"Train until convergence on the dev set": each sub-task is one loop invocation with an
:class:`~rumjax.training.EarlyStopping` on ``eval_accuracy`` (dev, every epoch); test is
evaluated at the same steps, so the test accuracy of the best dev checkpoint is in the
record's ``best_metrics`` (the checkpoint itself in ``<workdir>/qa<k>/best``).

A sub-task whose files are missing in ``version`` trains on ``fallback_version`` (here:
en-10k has no qa3 train file, so qa3 trains on en, the 1k version with the same test
file) and its row is marked "(1k)". :func:`comparison_markdown` puts several runs (RUM
lambda=0 and LSTM) side by side with the paper's per-task numbers; :func:`run_cells`
trains several cells sub-task by sub-task and writes that comparison.

A results JSON holds the rows of one set of :class:`Settings` (but where the data lives):
a run with other settings into it is refused before anything trains
(:func:`settings_differences`), so no row is dropped.
"""

import dataclasses
import json
import math
import os
from typing import Callable, Optional, Sequence

from absl import logging

from rumjax import configs, experiments, training, utils
from tasks import babi as babi_task
from tasks.configs import babi as babi_config

# The sub-tasks as named in the paper's table (workshop version, Table 4); the files use
# tasks.datasets.babi.TASK_NAMES ("single-supporting-fact", ...).
PAPER_TASK_NAMES = {
    1: "Single Supporting Fact", 2: "Two Supporting Facts", 3: "Three Supporting Facts",
    4: "Two Arg. Relations", 5: "Three Arg. Relations", 6: "Yes/No Questions",
    7: "Counting", 8: "Lists/Sets", 9: "Simple Negation", 10: "Indefinite Knowledge",
    11: "Basic Coreference", 12: "Conjunction", 13: "Compound Coref.",
    14: "Time Reasoning", 15: "Basic Deduction", 16: "Basic Induction",
    17: "Positional Reasoning", 18: "Size Reasoning", 19: "Path Finding",
    20: "Agent's Motivations"}
# Test accuracy (%) per sub-task: Dangovski et al., ICLR 2018 workshop version,
# appendix C, Table 4 (word level). RUM: lam=0, N_h=256 (mean 73.2 = TACL Table 2, line 7).
PAPER_RUM_WORD = {1: 79.7, 2: 39.4, 3: 46.6, 4: 100.0, 5: 96.8, 6: 84.7, 7: 89.1, 8: 74.0,
                  9: 84.0, 10: 75.7, 11: 90.6, 12: 95.0, 13: 91.5, 14: 43.9, 15: 58.8,
                  16: 47.1, 17: 60.3, 18: 98.5, 19: 10.2, 20: 98.0}
# The same table's baselines, quoted there from their papers: "LSTM (Weston et al.)",
# "GORU (Jing et al.)", "MemN2N (Sukhbaatar et al.)".
PAPER_LSTM_WESTON = {1: 50, 2: 20, 3: 20, 4: 61, 5: 70, 6: 48, 7: 49, 8: 45, 9: 64,
                     10: 44, 11: 72, 12: 74, 13: 94, 14: 27, 15: 21, 16: 23, 17: 51,
                     18: 52, 19: 8, 20: 91}
PAPER_GORU = {1: 46, 2: 40, 3: 34, 4: 63, 5: 87, 6: 54, 7: 78, 8: 75, 9: 63, 10: 45,
              11: 69, 12: 70, 13: 93, 14: 38, 15: 55, 16: 44, 17: 60, 18: 91, 19: 9,
              20: 98}
PAPER_MEMN2N = {1: 100, 2: 92, 3: 60, 4: 97, 5: 87, 6: 94, 7: 83, 8: 90, 9: 87, 10: 85,
                11: 99, 12: 99, 13: 99, 14: 98, 15: 100, 16: 99, 17: 49, 18: 89, 19: 17,
                20: 100}
# Table 4's printed "Mean Performance" row. The per-task means are 73.2, 49.2, 60.6 and
# 86.2: GORU's printed 60 (TACL Table 2, line 6: 60.4) is not its column's mean.
PAPER_TABLE4_MEAN = {"rum": 73.2, "lstm": 49, "goru": 60, "memn2n": 86}
# Table 4's per-task columns by key: (label, numbers).
PAPER_PER_TASK = {"rum": ("RUM", PAPER_RUM_WORD),
                  "lstm": ("LSTM (Weston et al.)", PAPER_LSTM_WESTON),
                  "goru": ("GORU (Jing et al.)", PAPER_GORU),
                  "memn2n": ("MemN2N (Sukhbaatar et al.)", PAPER_MEMN2N)}
# Mean test accuracy (%) over the 20 sub-tasks, TACL Table 2: (level, cell, lam, attention).
# Word-level LSTM: line 4, the authors' own LSTM (56.0, no per-task numbers); line 1,
# Weston et al.'s LSTM (49.2), is the per-task column PAPER_LSTM_WESTON.
PAPER_MEAN = {("word", "urnn", None, False): 51.6, ("word", "eurnn", None, False): 52.9,
              ("word", "lstm", None, False): 56.0, ("word", "gru", None, False): 58.2,
              ("word", "goru", None, False): 60.4, ("word", "rum", 0, False): 73.2,
              ("sentence", "eurnn", None, False): 66.7, ("sentence", "eurnn", None, True): 69.5,
              ("sentence", "lstm", None, False): 67.2, ("sentence", "lstm", None, True): 80.1,
              ("sentence", "gru", None, False): 70.4, ("sentence", "gru", None, True): 77.3,
              ("sentence", "goru", None, False): 71.3, ("sentence", "goru", None, True): 76.4,
              ("sentence", "rum", 0, False): 75.1, ("sentence", "rum", 0, True): 74.3,
              ("sentence", "rum", 1, False): 79.0, ("sentence", "rum", 1, True): 80.1,
              # line 15: RUM lam=0 with tanh (the other RUM lines: ReLU, Table 5)
              ("sentence", "rum_tanh", 0, False): 70.5, ("sentence", "rum_tanh", 0, True): 72.9}
TABLE2_LSTM_WESTON_MEAN = 49.2  # TACL Table 2, line 1
EPOCHS = babi_config.EPOCHS  # the default training epochs per sub-task (appendix C)
PASS_ACCURACY = 0.95  # a sub-task is "passed" at >= 95% test accuracy (Weston et al.)
VERSION_LABELS = {"en-10k": "10k", "en": "1k"}


def paper_mean(level: str, cell: str, lam: int, attention: bool,
               activation: Optional[str] = None) -> Optional[float]:
  """Table 2's mean accuracy for this set-up, or ``None`` if the paper has none.
  ``activation``: RUM's ``model.activation`` when not the config's default (ReLU); the
  paper has ``"tanh"`` (line 15) only."""
  if cell == "rum" and activation is not None:
    if activation != "tanh":
      return None
    cell = "rum_tanh"
  return PAPER_MEAN.get((level, cell, lam if cell.startswith("rum") else None, attention))


def activation_set(settings: dict) -> Optional[str]:
  """The activation a run's ``sets`` override (``None``: the config's default)."""
  return (settings.get("sets") or {}).get("model.activation")


def table2_mean(settings: dict) -> Optional[float]:
  """:func:`paper_mean` of a run's settings (a :class:`Settings` as a dict)."""
  return paper_mean(settings["level"], settings["cell"], settings["lam"],
                    settings.get("attention", False), activation_set(settings))


def paper_per_task(level: str, cell: str, lam: int, attention: bool) -> Optional[str]:
  """The key of :data:`PAPER_PER_TASK` for this set-up (word level without attention:
  RUM lam=0, LSTM, GORU), or ``None``."""
  if level != "word" or attention or (cell == "rum" and lam != 0):
    return None
  return cell if cell in ("rum", "lstm", "goru") else None


@dataclasses.dataclass
class Settings:
  """A bAbI set-up (the same for every sub-task).

  Attributes:
    version, level, attention, cell, lam, hidden_size, seed: the config's fields.
    manual_dir: the bAbI files (``None``: the task's default).
    data_dir: the TFDS data dir.
    eval_every: steps between dev (and test) evaluations and checkpoints; default one
      epoch.
    max_steps: ``num_steps``; default :data:`EPOCHS` epochs.
    patience: evaluations without a better dev accuracy before stopping.
    budget_minutes: wall-clock budget per sub-task, over all invocations (a resumed
      sub-task gets what is left; ``None``: none).
    fallback_version: the data version of a sub-task whose ``version`` files are missing
      (``None``: none, the sub-task is then missing).
    sets: more ``{dotted field: value}`` overrides.
  """
  version: str = "en-10k"
  level: str = "word"
  attention: bool = False
  cell: str = "rum"
  lam: int = 0
  hidden_size: int = 256
  seed: int = 0
  manual_dir: Optional[str] = None
  data_dir: str = ""
  eval_every: Optional[int] = None
  max_steps: Optional[int] = None
  patience: int = 5
  budget_minutes: Optional[float] = None
  fallback_version: Optional[str] = "en"
  sets: dict = dataclasses.field(default_factory=dict)

  def header(self) -> str:
    lam = f" lam={self.lam}" if self.cell == "rum" else ""
    return (f"bAbI {self.version}, {self.level} level"
            f"{' + attention' if self.attention else ''}, {self.cell}{lam} "
            f"hidden {self.hidden_size}")

  def paper_mean(self) -> Optional[float]:
    return table2_mean(dataclasses.asdict(self))


def _has_files(manual_dir: str, version: str, k: int) -> bool:
  from tasks.datasets import babi as babi_builder  # TFDS: only when needed
  return all(os.path.isfile(os.path.join(manual_dir, p))
             for p in babi_builder.relative_paths(version, k).values())


def data_version(k: int, settings: Settings) -> str:
  """The data version sub-task ``k`` trains on: ``settings.version``, or
  ``settings.fallback_version`` when a file of the former is missing from the manual
  dir and the latter's are all there (with no manual dir: the download has them all)."""
  manual_dir = (settings.manual_dir if settings.manual_dir is not None
                else babi_config.default_manual_dir())
  fallback = settings.fallback_version
  if not manual_dir or not fallback or fallback == settings.version:
    return settings.version
  manual_dir = os.path.expanduser(manual_dir)
  if _has_files(manual_dir, settings.version, k) or not _has_files(manual_dir, fallback, k):
    return settings.version
  return fallback


def subtask_config(k: int, settings: Settings):
  """The config of sub-task ``k`` on its :func:`data_version`: the level's variant, the
  settings, dev and test evaluated (and a checkpoint saved, one kept; the best one is
  kept apart by early stopping) every ``eval_every`` steps and at the end (which
  counts for early stopping too); validated."""
  variant = ("word" if settings.level == "word" else
             "sentence_attention" if settings.attention else "sentence")
  config = babi_task.TASK.get_config(variant)
  updates = {"babi_task": k, "version": data_version(k, settings),
             "model.cell": settings.cell, "model.lam": settings.lam,
             "model.hidden_size": settings.hidden_size, "seed": settings.seed,
             "data_dir": settings.data_dir, "keep_checkpoints": 1}
  if settings.manual_dir is not None:
    updates["manual_dir"] = settings.manual_dir
  configs.set_fields(config, {**updates, **settings.sets})
  epoch = math.ceil(babi_config.PAPER_TRAIN_QUESTIONS[config.version] / config.batch_size)
  with config.unlocked():
    config.eval_every = settings.eval_every or epoch
    config.checkpoint_every = config.get_ref("eval_every")
    config.num_steps = settings.max_steps or EPOCHS * epoch
    config.evals.test.every = config.get_ref("eval_every")
  babi_task.validate_config(config)
  return config


def row(record: dict, config) -> dict:
  """A sub-task's line of the results: the data version, the best dev accuracy, the test
  accuracy at that step, the steps (trained, at most, best), the wall time, the last
  training speed and why it stopped."""
  best = record.get("best_metrics") or {}
  return {"version": config.version, "best_dev_accuracy": record.get("best_eval_accuracy"),
          "test_accuracy": best.get("test_accuracy"), "steps": record["steps"],
          "max_steps": config.num_steps, "eval_every": config.eval_every,
          "best_step": record.get("best_step"), "wall_seconds": record["wall_sec_total"],
          "steps_per_sec": record.get("metrics", {}).get("steps_per_sec"),
          "stop_reason": record["status"]}


def check_settings(task_ids: Sequence[int], settings: Settings) -> None:
  """``ValueError`` naming the first bad sub-task number or setting."""
  bad = [k for k in task_ids if not 1 <= k <= babi_task.NUM_TASKS]
  if bad:
    raise ValueError(f"--tasks: sub-tasks {bad} are not in 1..{babi_task.NUM_TASKS}.")
  if settings.patience < 1:
    raise ValueError(f"--patience={settings.patience} must be >= 1.")
  if settings.attention and settings.level != "sentence":
    raise ValueError(f"--attention is the sentence level's (Table 2 lines 9-15); the "
                     f"{settings.level} level has none: add --level=sentence or leave "
                     "--attention out.")
  if settings.cell == "rum" and settings.lam not in (0, 1):
    raise ValueError(f"--lam={settings.lam} must be 0 or 1 (Table 2's RUM lines); a real lam "
                     "trains one sub-task with launch.train --task=babi "
                     "--config.model.lam=VALUE.")
  training.check_budget_minutes(settings.budget_minutes)
  for name in ("max_steps", "eval_every"):
    value = getattr(settings, name)
    if value is not None and value < 1:
      raise ValueError(f"--{name}={value} must be >= 1 (or unset for the default).")
  versions = (None, *babi_task.DATA_VERSIONS)
  if settings.fallback_version not in versions:
    raise ValueError(f"fallback_version={settings.fallback_version!r} must be one of "
                     f"{list(versions)}.")


def _budget_left(subdir: str, budget: Optional[float]) -> Optional[float]:
  """Seconds of ``budget`` the sub-task in ``subdir`` has not used yet (``None``: none)."""
  if budget is None:
    return None
  record = utils.read_json(os.path.join(subdir, experiments.RESULT_FILE), {})
  return budget - record.get("wall_sec_total", 0.0)


def run_subtask(k: int, config, subdir: str, settings: Settings) -> dict:
  """Sub-task ``k`` in ``subdir`` with early stopping (and what is left of the budget);
  its :func:`row`. A sub-task that finished, or used up its budget, is not run again."""
  budget = 60 * settings.budget_minutes if settings.budget_minutes else None
  left = _budget_left(subdir, budget)
  record = experiments.finished(config, subdir)
  if record is None and left is not None and left <= 0:
    record = utils.read_json(os.path.join(subdir, experiments.RESULT_FILE))
  if record is None:
    record = experiments.train_with_early_stopping(
        config, subdir, babi_task.TASK, metric="eval_accuracy", patience=settings.patience,
        budget_seconds=left, info={"babi_task": k})
  return row(record, config)


def _json(value):
  return json.loads(json.dumps(value))


def run_subtasks(task_ids: Sequence[int], workdir: str, settings: Settings,
                 results_path: Optional[str] = None,
                 log: Callable[[str], None] = logging.info) -> dict:
  """Trains sub-task ``k`` in ``<workdir>/qa<k>`` for every ``k`` of ``task_ids`` with
  early stopping; rewrites ``results_path`` (default ``<workdir>/results.json``) after
  each, keeping the rows of other sub-tasks it holds for the same settings at that moment
  (so several processes with different ``task_ids``, one per core, may share a workdir). A sub-task
  whose files are missing (in ``version`` and ``fallback_version``) is recorded with its
  ``error``. A preempted sub-task (SIGTERM) ends the run. Re-running resumes a sub-task
  from its checkpoint; one that had finished (or used up its budget) is not run again.

  Returns:
    The results: ``{"settings", "tasks": {k: row or {"version", "error"}},
    "mean_test_accuracy", "paper_rum_word", "paper_table2_mean", "hardware"}``.

  Raises:
    ValueError: for a bad sub-task number, setting or config, or a ``results_path`` that
      holds another run's results (other settings, or not bAbI results), before anything
      trains or is written.
  """
  check_settings(task_ids, settings)
  cfgs = {k: subtask_config(k, settings) for k in task_ids}
  results_path = results_path or os.path.join(workdir, "results.json")
  ours, rows = {}, _rows_in(results_path, settings)   # refuses other settings' results
  training.check_not_run(workdir)
  training.check_writable(workdir)
  for k, config in cfgs.items():
    log(f"bAbI qa{k}: {settings.header()}, data {config.version}, {config.num_steps} "
        f"steps at most, dev every {config.eval_every}")
    try:
      ours[k] = run_subtask(k, config, os.path.join(workdir, f"qa{k}"), settings)
    except FileNotFoundError as err:
      logging.error("bAbI qa%d skipped: %s", k, err)
      ours[k] = {"version": config.version, "error": str(err)}
    # The file as it is now: another process may have run other sub-tasks of the same
    # settings into it (e.g. one per core with different --tasks) since this one started
    # (one of other settings that started with this one, before either wrote the file,
    # is refused here: this sub-task's row stays in its qa<k>/result.json).
    rows = {**_rows_in(results_path, settings), **ours}
    utils.write_json(results_path, results(rows, settings))
    if ours[k].get("stop_reason") == "preempted":
      break  # SIGTERM/SIGINT: the sub-task saved its checkpoint; resume later
  return results(rows, settings)


# Settings that do not change what a row means, so a results JSON written with other
# values of them is still this run's: where the data lives (manual_dir, data_dir: the
# same files reached through another path, e.g. a worktree's ../shared). Every other
# field does: the data and model (version, level, attention, cell, lam, hidden_size,
# sets), the training (seed, eval_every: the steps where dev picks the best, max_steps,
# patience), fallback_version (which data a sub-task with missing files trains on, or
# whether it is missing) and budget_minutes (a row stopped by the budget is a row of that
# budget, and the comparison's footnote states one budget per results JSON).
LOCATION_FIELDS = ("manual_dir", "data_dir")


def settings_differences(saved: dict, settings: Settings) -> list[str]:
  """``"name THERE there, HERE here"`` for each field of ``settings`` (but
  :data:`LOCATION_FIELDS`) whose value differs in ``saved`` (a results JSON's settings; a
  field it lacks, from an older version, counts as the field's default)."""
  here = _json(dataclasses.asdict(settings))
  defaults = _json(dataclasses.asdict(Settings()))
  there = {name: saved.get(name, defaults[name]) for name in here}
  return [f"{name} {_show(there[name])} there, {_show(here[name])} here"
          for name in here if name not in LOCATION_FIELDS and there[name] != here[name]]


def _show(value) -> str:
  if isinstance(value, float):
    return f"{value:g}"
  return "unset" if value is None else json.dumps(value)


def _rows_in(results_path: str, settings: Settings) -> dict:
  """The per-sub-task rows of the results JSON ``results_path`` (none if it does not
  exist yet).

  Raises:
    ValueError: one line if the file is not bAbI results, or naming each setting that
      differs there (:func:`settings_differences`): its rows would be dropped.
  """
  if not os.path.exists(results_path):
    return {}
  previous = read_results(results_path)
  differences = settings_differences(previous["settings"], settings)
  if differences:
    raise ValueError(f"the settings differ from the results in {results_path} "
                     f"({'; '.join(differences)}): use the same settings or another "
                     "--workdir/--results.")
  return {int(k): r for k, r in previous["tasks"].items()}


def check_results(results_path: str, settings: Settings) -> None:
  """``ValueError`` (one line) unless ``results_path`` is missing or holds bAbI results
  of the same settings (:func:`_rows_in`): checked before anything trains."""
  _rows_in(results_path, settings)


def results(rows: dict, settings: Settings) -> dict:
  done = [r["test_accuracy"] for r in rows.values() if r.get("test_accuracy") is not None]
  return {"settings": dataclasses.asdict(settings),
          "tasks": {str(k): rows[k] for k in sorted(rows)},
          "mean_test_accuracy": sum(done) / len(done) if done else None,
          "paper_rum_word": PAPER_RUM_WORD, "paper_table2_mean": settings.paper_mean(),
          "hardware": experiments.hardware_info()}


def task_name(k: int, row_: dict, version: str) -> str:
  """``"3 Three Supporting Facts (1k)"``: the paper's name, and the data version when it
  is not the run's ``version`` (a fallback)."""
  name = f"{k} {PAPER_TASK_NAMES[k]}"
  used = row_.get("version", version)
  return name if used == version else f"{name} ({VERSION_LABELS.get(used, used)})"


def format_table(rows: dict, header: str, table2_mean: Optional[float] = None,
                 version: str = "en-10k") -> str:
  """The per-task table and the means (over the sub-tasks with a result). The "paper"
  column is always the published per-task RUM numbers (word level, lam=0, Table 4);
  ``table2_mean`` is the paper's 20-task mean for the set-up actually run."""
  lines = [header, f"{'task':<32} {'dev %':>6} {'test %':>6} {'paper*':>7} {'steps':>6} "
           f"{'best':>6} {'min':>6}  stop"]
  rows = {int(k): r for k, r in rows.items()}
  done = {k: r for k, r in rows.items() if r.get("test_accuracy") is not None}
  for k in sorted(rows):
    r, name = rows[k], task_name(k, rows[k], version)
    if r.get("error"):
      lines.append(f"{name:<32} {'-':>6} {'-':>6} {PAPER_RUM_WORD[k]:>7.1f}  missing data "
                   "(skipped; the error is in the results JSON)")
      continue
    pct = lambda v: f"{'-':>6}" if v is None else f"{100 * v:>6.1f}"   # - : not evaluated
    lines.append(f"{name:<32} {pct(r.get('best_dev_accuracy'))} {pct(r.get('test_accuracy'))} "
                 f"{PAPER_RUM_WORD[k]:>7.1f} {r['steps']:>6} {r['best_step'] or 0:>6} "
                 f"{r['wall_seconds'] / 60:>6.1f}  {r['stop_reason']}")
  if done:
    mean = 100 * sum(r["test_accuracy"] for r in done.values()) / len(done)
    paper = sum(PAPER_RUM_WORD[k] for k in done) / len(done)
    lines.append(f"mean test accuracy over {len(done)} sub-task(s): {mean:.1f}% (paper*, "
                 f"same sub-tasks: {paper:.1f}%)")
  lines.append("* paper: RUM word level lam=0, per sub-task (workshop version, Table 4; "
               "mean over all 20: 73.2%).")
  if table2_mean is not None:
    lines.append(f"Table 2 mean over all 20 sub-tasks for this set-up: {table2_mean:.1f}%.")
  return "\n".join(lines)


# ------------------------------------------------------------------- the comparison


CELL_LABELS = {"rum": "RUM", "lstm": "LSTM", "gru": "GRU", "goru": "GORU", "eurnn": "EURNN",
               "urnn": "uRNN"}


def model_label(settings: dict) -> str:
  """``"RUM λ=0"``, ``"LSTM"``, ``"attnRUM λ=1"``, ``"RUM λ=0 tanh"`` ... for a run's
  settings (an activation appears when the run's ``sets`` override it)."""
  cell = settings["cell"]
  label = CELL_LABELS.get(cell, cell)
  if cell == "rum":
    activation = activation_set(settings)
    label += f" λ={settings['lam']}" + (f" {activation}" if activation else "")
  return ("attn" if settings.get("attention") else "") + label


def _paper_key(settings: dict) -> Optional[str]:
  return paper_per_task(settings["level"], settings["cell"], settings["lam"],
                        settings.get("attention", False))


def _accuracy_cell(r: Optional[dict]) -> str:
  if r is None:
    return "-"
  if r.get("error"):
    return "missing"
  acc = r.get("test_accuracy")
  if acc is None:
    return "-"
  return f"{100 * acc:.1f}" + (" ✓" if acc >= PASS_ACCURACY else "")


_STOPS = {"early_stopping": "", "ok": " (max)", "budget": " (budget)"}


def _steps_cell(r: Optional[dict]) -> str:
  if not r or r.get("error"):
    return "-"
  return f"{r['steps']}{_STOPS.get(r['stop_reason'], ' (' + r['stop_reason'] + ')')}"


def _wall_cell(r: Optional[dict]) -> str:
  return "-" if not r or r.get("error") else f"{r['wall_seconds'] / 60:.1f}"


def _budget_note(label: str, res: dict) -> str:
  s = res["settings"]
  rows = [r for r in res["tasks"].values() if not r.get("error")]
  per_version = {}
  for r in rows:
    per_version.setdefault(r["version"], (r["max_steps"], r["eval_every"]))
  steps = ", ".join(f"{m} on {VERSION_LABELS.get(v, v)} (dev every {e})"
                    for v, (m, e) in sorted(per_version.items()))
  budget = (f"{s['budget_minutes']:g} min of wall time" if s.get("budget_minutes")
            else "no wall-clock limit")
  sets = dict(s.get("sets") or {})
  batch = sets.pop("batch_size", 32)
  more = "".join(f", {k}={v}" for k, v in sorted(sets.items()))
  return (f"{label}: {s['level']} level, hidden {s['hidden_size']}, batch {batch}, Adam "
          f"1e-3, seed {s['seed']}{more}; per sub-task at most {steps or '-'} steps, early "
          f"stopping after {s['patience']} dev evaluations without improvement, "
          f"{budget}.")


def comparison_markdown(runs: Sequence[dict],
                        labels: Optional[Sequence[str]] = None) -> str:
  """ONE Markdown table of several :func:`run_subtasks` results (e.g. RUM lambda=0 and
  LSTM): a row per sub-task (the paper's names; a fallback's data marked "(1k)") with
  each model's test accuracy at its best dev step, the paper's per-task number for that
  model (Table 4), its steps and wall minutes; the mean and the count of passed sub-tasks
  (>= 95%, marked ✓) over the sub-tasks every model has a result for; footnotes with the
  budgets and the sources."""
  labels = list(labels or [model_label(r["settings"]) for r in runs])
  seeds = [r["settings"].get("seed", 0) for r in runs]
  if len(set(seeds)) > 1 and not any("seed" in label for label in labels):
    labels = [f"{label} seed {seed}" for label, seed in zip(labels, seeds)]
  version = runs[0]["settings"]["version"]
  tasks = [{int(k): r for k, r in res["tasks"].items()} for res in runs]
  ids = sorted(set().union(*tasks))
  papers = [PAPER_PER_TASK.get(_paper_key(res["settings"])) for res in runs]
  # The paper's per-task columns only where the paper has per-task numbers (word level).
  shown = [(m, p) for m, p in zip(labels, papers) if p]
  head = ([f"{m} ours" for m in labels] + [f"{m} paper" for m, _ in shown]
          + [f"{m} steps" for m in labels] + [f"{m} min" for m in labels])
  lines = [f"| task | {' | '.join(head)} |", "|---" * (len(head) + 1) + "|"]
  for k in ids:
    rs = [t.get(k) for t in tasks]
    used = next((r for r in rs if r and r.get("version", version) != version), {})
    cells = ([_accuracy_cell(r) for r in rs]
             + [f"{p[1][k]:g}" + (" ✓" if p[1][k] >= 100 * PASS_ACCURACY else "")
                for _, p in shown]
             + [_steps_cell(r) for r in rs] + [_wall_cell(r) for r in rs])
    lines.append(f"| {task_name(k, used, version)} | {' | '.join(cells)} |")
  common = [k for k in ids if all(t.get(k, {}).get("test_accuracy") is not None
                                  for t in tasks)]
  lines += _summary_rows(common, tasks, [p for _, p in shown])
  table2 = [table2_mean(res["settings"]) for res in runs]
  if any(m is not None for m in table2):
    cells = ["-" if m is None else f"{m:.1f}" for m in table2]
    lines.append(f"| paper, TACL Table 2 (mean over all 20) | {' | '.join(cells)} |"
                 + " |" * (len(head) - len(cells)))
  lines += ["", *_footnotes(runs, labels, papers, common, version)]
  return "\n".join(lines) + "\n"


def _summary_rows(common, tasks, papers) -> list[str]:
  """The mean and passed rows over the sub-tasks ``common`` to every model (``papers``:
  the per-task columns shown)."""
  n = len(common)
  if not n:
    return []
  ours = [[t[k]["test_accuracy"] * 100 for k in common] for t in tasks]
  paper = [[p[1][k] for k in common] for p in papers]
  fmt = lambda v: f"{v:.1f}"
  mean = ([fmt(sum(o) / n) for o in ours] + [fmt(sum(p) / n) for p in paper]
          + [str(sum(t[k]["steps"] for k in common)) for t in tasks]
          + [f"{sum(t[k]['wall_seconds'] for k in common) / 60:.1f}" for t in tasks])
  passed = lambda vs: f"{sum(v >= 100 * PASS_ACCURACY for v in vs)}/{n}"
  count = ([passed(o) for o in ours] + [passed(p) for p in paper]
           + [""] * (2 * len(tasks)))
  # The best dev accuracy at the last evaluation: a run that may still have been rising.
  last = ([f"{sum(t[k]['best_step'] == t[k]['steps'] for k in common)}/{n}" for t in tasks]
          + [""] * (len(papers) + 2 * len(tasks)))
  return [f"| **mean over {n} sub-task(s)** (steps, min: total) | {' | '.join(mean)} |",
          f"| passed (≥ 95%) | {' | '.join(count)} |",
          f"| best dev at the last evaluation | {' | '.join(last)} |"]


def _footnotes(runs, labels, papers, common, version) -> list[str]:
  lines = ["Ours: test accuracy (%) at the step of the best dev accuracy (dev: 10% of the "
           "train file), one model per sub-task; ✓: passed (≥ 95%). Steps: trained steps "
           "(early stopping unless marked: (max) = step limit, (budget) = wall-clock "
           "limit); min: wall minutes (training and evaluation). Best dev at the last "
           "evaluation: the sub-tasks whose dev accuracy peaked at the run's last step "
           "(they may have been still rising)."]
  if len(common) < babi_task.NUM_TASKS:
    lines.append(f"The mean and passed rows cover the {len(common)} sub-task(s) every "
                 "model has a result for, the paper's numbers the same sub-tasks.")
  if any(table2_mean(res["settings"]) is not None for res in runs):
    lines.append("paper, TACL Table 2: the published mean of each set-up over all 20 "
                 "sub-tasks (the paper has per-task numbers for the word level only); ours "
                 "is the mean over the sub-tasks above.")
  if any(r.get("error") for res in runs for r in res["tasks"].values()):
    lines.append("missing: the sub-task's data files are not there (the error is in the "
                 "results JSON).")
  lines += [f"Budget, {_budget_note(label, res)}" for label, res in zip(labels, runs)]
  fallback = sorted({r["version"] for res in runs for r in res["tasks"].values()
                     if r.get("version", version) != version})
  for v in fallback:
    lines.append(f"({VERSION_LABELS.get(v, v)}): the {version} train file of this "
                 f"sub-task is missing here; trained on {v} (bAbI's "
                 f"{VERSION_LABELS.get(v, v)} version: 90/10 train/dev of its train file, "
                 "the same 1,000 test questions).")
  keys = {_paper_key(res["settings"]) for res in runs}
  if "rum" in keys:
    lines.append("RUM paper: Dangovski et al., ICLR 2018 workshop version, appendix "
                 "Table 4 (word level, λ=0, N_h=256); mean over the 20 sub-tasks 73.2 "
                 "(= TACL 2019 Table 2, line 7).")
  if "lstm" in keys:
    lines.append("LSTM paper: Weston et al. (2016), per sub-task as quoted in the same "
                 "Table 4 (printed mean 49; TACL Table 2, line 1: 49.2). The RUM "
                 "paper's own word-level LSTM (TACL Table 2, line 4) has mean 56.0 and no "
                 "per-task numbers; Weston et al. trained on bAbI's 1k version (as far as "
                 "we know), the RUM paper and we on 10k.")
  if "goru" in keys:
    lines.append("GORU paper: Jing et al., per sub-task as quoted in Table 4 (printed "
                 "mean 60, column mean 60.6; TACL Table 2, line 6: 60.4).")
  hw = runs[0].get("hardware")
  if hw:
    lines.append(f"Hardware: {hw['cpu_model']} ({hw['cpu_count']} CPUs), jax "
                 f"{hw['jax_version']}.")
  return lines


def read_results(path: str) -> dict:
  """The results JSON of a run: ``path`` itself or ``<path>/results.json``.

  Raises:
    ValueError: one line naming the file if it is missing, not JSON, or not the results
      of :func:`run_subtasks` (a JSON object with ``settings`` and ``tasks`` objects).
  """
  file = os.path.join(path, "results.json") if os.path.isdir(path) else path
  out = utils.read_json(file)
  if out is None:
    raise ValueError(f"no bAbI results in {path!r} (expected {file}); run launch.babi_all "
                     "with that --workdir first.")
  if not _is_babi_results(out):
    raise ValueError(f"{file} is not the results of launch.babi_all (no 'settings' and "
                     "'tasks' of a bAbI run); pass a launch.babi_all --workdir or its "
                     "results.json.")
  return out


def _is_babi_results(out) -> bool:
  return (isinstance(out, dict) and isinstance(out.get("settings"), dict)
          and isinstance(out.get("tasks"), dict)
          and all(name in out["settings"] for name in ("version", "level", "cell", "lam")))


def write_comparison(paths: Sequence[str], out_path: str) -> str:
  """:func:`comparison_markdown` of the runs in ``paths`` (workdirs or results JSONs),
  written to ``out_path``; returns the Markdown."""
  text = comparison_markdown([read_results(p) for p in paths])
  os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
  utils.write_text(out_path, text)
  return text


def run_cells(cells: Sequence[str], task_ids: Sequence[int], workdir: str,
              settings: Settings, compare_out: Optional[str] = None,
              log: Callable[[str], None] = logging.info) -> Optional[str]:
  """Every cell of ``cells`` (``settings`` with that ``cell``) on each sub-task in turn,
  each in ``<workdir>/<cell>`` (its results in ``<workdir>/<cell>/results.json``), then
  their comparison (:func:`write_comparison`) in ``compare_out`` (default
  ``<workdir>/comparison.md``). A preempted sub-task ends the run before the comparison.

  Returns:
    The comparison's Markdown, or ``None`` if preempted.

  Raises:
    ValueError: for a bad sub-task number or setting of any cell, or a cell's results
      of other settings, before anything trains.
  """
  runs = [(dataclasses.replace(settings, cell=c), os.path.join(workdir, c)) for c in cells]
  training.check_not_run(workdir)
  for s, d in runs:
    check_settings(task_ids, s)
    for k in task_ids:
      subtask_config(k, s)                  # validated: e.g. a cell the registry lacks
    check_results(os.path.join(d, "results.json"), s)
  for k in task_ids:
    for s, d in runs:
      out = run_subtasks([k], d, s, log=log)
      if out["tasks"][str(k)].get("stop_reason") == "preempted":
        return None
  return write_comparison([d for _, d in runs],
                          compare_out or os.path.join(workdir, "comparison.md"))

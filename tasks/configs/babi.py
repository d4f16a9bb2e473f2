"""bAbI in the RUM paper (TACL 2019, sec. 4.2, Table 2; ICLR-workshop version, Table 4):
one model per sub-task with early stopping on dev, for ``launch.babi_all``.

"Train until convergence on the dev set": each sub-task is one loop invocation with an
:class:`~rumjax.training.EarlyStopping` on ``eval_accuracy`` (dev, every epoch); test is
evaluated at the same steps, so the test accuracy of the best dev checkpoint is in the
record's ``best_metrics`` (the checkpoint itself in ``<workdir>/qa<k>/best``).
"""

import dataclasses
import math
import os
from typing import Callable, Optional, Sequence

from absl import logging

from rumjax import configs, experiments, utils
from tasks import babi as babi_task

# RUM test accuracy (%) per sub-task: Dangovski et al., ICLR 2018 workshop version,
# appendix C, Table 4 (word level, lam=0, N_h=256; mean 73.2 = TACL Table 2, line 7).
PAPER_RUM_WORD = {1: 79.7, 2: 39.4, 3: 46.6, 4: 100.0, 5: 96.8, 6: 84.7, 7: 89.1, 8: 74.0,
                  9: 84.0, 10: 75.7, 11: 90.6, 12: 95.0, 13: 91.5, 14: 43.9, 15: 58.8,
                  16: 47.1, 17: 60.3, 18: 98.5, 19: 10.2, 20: 98.0}
# Mean test accuracy (%) over the 20 sub-tasks, TACL Table 2: (level, cell, lam, attention).
PAPER_MEAN = {("word", "urnn", None, False): 51.6, ("word", "eurnn", None, False): 52.9,
              ("word", "lstm", None, False): 56.0, ("word", "gru", None, False): 58.2,
              ("word", "goru", None, False): 60.4, ("word", "rum", 0, False): 73.2,
              ("sentence", "eurnn", None, False): 66.7, ("sentence", "eurnn", None, True): 69.5,
              ("sentence", "lstm", None, False): 67.2, ("sentence", "lstm", None, True): 80.1,
              ("sentence", "gru", None, False): 70.4, ("sentence", "gru", None, True): 77.3,
              ("sentence", "goru", None, False): 71.3, ("sentence", "goru", None, True): 76.4,
              ("sentence", "rum", 0, False): 75.1, ("sentence", "rum", 0, True): 74.3,
              ("sentence", "rum", 1, False): 79.0, ("sentence", "rum", 1, True): 80.1}
EPOCHS = 20  # the default number of training epochs per sub-task (appendix C)


def paper_mean(level: str, cell: str, lam: int, attention: bool) -> Optional[float]:
  """Table 2's mean accuracy for this set-up, or ``None`` if the paper has none."""
  return PAPER_MEAN.get((level, cell, lam if cell == "rum" else None, attention))


@dataclasses.dataclass
class Settings:
  """A bAbI set-up (the same for every sub-task).

  Attributes:
    version, level, attention, cell, lam, hidden_size, seed: the config's fields.
    manual_dir: the bAbI files (``None``: the task's default).
    data_dir: the TFDS data dir.
    eval_every: steps between dev (and test) evaluations; default one epoch.
    max_steps: ``num_steps``; default :data:`EPOCHS` epochs.
    patience: evaluations without a better dev accuracy before stopping.
    budget_minutes: wall-clock budget per sub-task and invocation (``None``: none).
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
  sets: dict = dataclasses.field(default_factory=dict)

  def header(self) -> str:
    return (f"bAbI {self.version}, {self.level} level"
            f"{' + attention' if self.attention else ''}, {self.cell} lam={self.lam} "
            f"hidden {self.hidden_size}")

  def paper_mean(self) -> Optional[float]:
    return paper_mean(self.level, self.cell, self.lam, self.attention)


def subtask_config(k: int, settings: Settings):
  """The config of sub-task ``k``: the level's variant, the settings, dev and test
  evaluated every ``eval_every`` steps (and at the end), one checkpoint kept (the best
  one is kept apart by early stopping); validated."""
  variant = ("word" if settings.level == "word" else
             "sentence_attention" if settings.attention else "sentence")
  config = babi_task.default_config(variant)
  updates = {"babi_task": k, "version": settings.version, "model.cell": settings.cell,
             "model.lam": settings.lam, "model.hidden_size": settings.hidden_size,
             "seed": settings.seed, "data_dir": settings.data_dir,
             "keep_checkpoints": 1, "checkpoint_every": 0}
  if settings.manual_dir is not None:
    updates["manual_dir"] = settings.manual_dir
  configs.set_fields(config, {**updates, **settings.sets})
  epoch = math.ceil(babi_task.PAPER_TRAIN_QUESTIONS[config.version] / config.batch_size)
  with config.unlocked():
    config.eval_every = settings.eval_every or epoch
    config.num_steps = settings.max_steps or EPOCHS * epoch
    config.evals.test.every = config.get_ref("eval_every")
  babi_task.validate_config(config)
  return config


def row(record: dict) -> dict:
  """A sub-task's line of the results: the best dev accuracy, the test accuracy at that
  step, the steps, the best step, the wall time and why it stopped."""
  best = record.get("best_metrics") or {}
  return {"best_dev_accuracy": record.get("best_eval_accuracy"),
          "test_accuracy": best.get("test_accuracy"), "steps": record["steps"],
          "best_step": record.get("best_step"), "wall_seconds": record["wall_sec_total"],
          "stop_reason": record["status"]}


def run_subtasks(task_ids: Sequence[int], workdir: str, settings: Settings,
                 results_path: Optional[str] = None,
                 log: Callable[[str], None] = logging.info) -> dict:
  """Trains sub-task ``k`` in ``<workdir>/qa<k>`` for every ``k`` of ``task_ids`` with
  early stopping; rewrites ``results_path`` (default ``<workdir>/results.json``) after
  each. A sub-task whose files are missing is recorded with its ``error``. Re-running
  resumes; a sub-task that had finished is not run again.

  Returns:
    The results: ``{"settings", "tasks": {k: row or {"error"}}, "mean_test_accuracy",
    "paper_rum_word", "paper_table2_mean"}``.

  Raises:
    ValueError: for a bad sub-task number or config, before anything trains.
  """
  bad = [k for k in task_ids if not 1 <= k <= babi_task.NUM_TASKS]
  if bad:
    raise ValueError(f"sub-tasks {bad} are not in 1..{babi_task.NUM_TASKS}.")
  if settings.patience < 1:
    raise ValueError(f"patience={settings.patience} must be >= 1.")
  if settings.budget_minutes is not None and not settings.budget_minutes > 0:
    raise ValueError(f"budget_minutes={settings.budget_minutes} must be > 0 (or unset).")
  cfgs = {k: subtask_config(k, settings) for k in task_ids}
  results_path = results_path or os.path.join(workdir, "results.json")
  os.makedirs(workdir, exist_ok=True)
  rows = {}
  budget = 60 * settings.budget_minutes if settings.budget_minutes else None
  for k, config in cfgs.items():
    log(f"bAbI qa{k}: {settings.header()}, {config.num_steps} steps at most, dev every "
        f"{config.eval_every}")
    try:
      record = experiments.train_with_early_stopping(
          config, os.path.join(workdir, f"qa{k}"), babi_task, metric="eval_accuracy",
          patience=settings.patience, budget_seconds=budget, info={"babi_task": k})
      rows[k] = row(record)
    except FileNotFoundError as err:
      logging.error("bAbI qa%d skipped: %s", k, err)
      rows[k] = {"error": str(err)}
    utils.write_json(results_path, results(rows, settings))
  return results(rows, settings)


def results(rows: dict, settings: Settings) -> dict:
  done = [r["test_accuracy"] for r in rows.values() if r.get("test_accuracy") is not None]
  return {"settings": dataclasses.asdict(settings),
          "tasks": {str(k): r for k, r in rows.items()},
          "mean_test_accuracy": sum(done) / len(done) if done else None,
          "paper_rum_word": PAPER_RUM_WORD, "paper_table2_mean": settings.paper_mean()}


def format_table(rows: dict, header: str, table2_mean: Optional[float] = None) -> str:
  """The per-task table and the means (over the sub-tasks with a result). The "paper"
  column is always the published per-task RUM numbers (word level, lam=0, Table 4);
  ``table2_mean`` is the paper's 20-task mean for the set-up actually run."""
  from tasks.datasets.babi import TASK_NAMES
  lines = [header, f"{'task':<28} {'dev %':>6} {'test %':>6} {'paper*':>7} {'steps':>6} "
           f"{'best':>6} {'min':>6}  stop"]
  rows = {int(k): r for k, r in rows.items()}
  done = {k: r for k, r in rows.items() if r.get("test_accuracy") is not None}
  for k in sorted(rows):
    r, name = rows[k], f"{k:>2} {TASK_NAMES[k]}"
    if r.get("error"):
      lines.append(f"{name:<28} {'-':>6} {'-':>6} {PAPER_RUM_WORD[k]:>7.1f}  missing data "
                   "(skipped; the error is in the results JSON)")
      continue
    dev, test = r.get("best_dev_accuracy") or 0, r.get("test_accuracy") or 0
    lines.append(f"{name:<28} {100 * dev:>6.1f} {100 * test:>6.1f} "
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

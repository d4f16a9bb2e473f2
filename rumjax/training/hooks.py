"""Hooks: what acts during training without re-entering the loop (compiled once per run).

A hook has any of these methods; the loop calls them in the order the hooks are given::

    begin(step, state, ctx)                 before the first step (after restoring)
    after_step(step, state, ctx)            after every optimizer step
    after_eval(step, state, metrics, ctx)   after the evaluators that ran at ``step``; may
                                            return a new state (None keeps it)
    end(step, state, summary, ctx)          after the final evaluation (may add to summary);
                                            for a run that had ended already (nothing to
                                            do), with its recorded final evaluation

``ctx`` (:class:`LoopContext`) gives the workdir, the config, the number of steps, and
``ctx.request_stop(reason)``: the loop then saves a checkpoint, runs the final evaluation
and returns with ``summary["stop_reason"] = reason``.

Provided: :class:`Periodic` (a function of ``(step, state)`` every N steps, e.g. the
``cos(theta)`` recorder of the RUM paper's Figure 5), :class:`EarlyStopping` (on an
evaluator's metric, keeping the best checkpoint) and :class:`TimeBudget` (a wall-clock
limit); the loop adds :class:`LearningRateOnPlateau` itself when the config asks for it.
"""

import dataclasses
import numbers
import os
import time
from typing import Any, Callable, Optional, Sequence

from absl import logging

from rumjax import utils
from rumjax.training import optim


@dataclasses.dataclass
class LoopContext:
  """What a hook may read or ask of the loop.

  Attributes:
    workdir: the run's folder.
    config: the run's config.
    num_steps: the step the run trains to.
    start_step: the step the run (re)started from.
    save: ``(directory, step, state) -> None`` saves a checkpoint (state and the data
      iterator position) under ``<directory>/checkpoints/<step>``.
    stop_reason: ``None``, or why a hook asked to stop.
  """
  workdir: str
  config: Any
  num_steps: int
  start_step: int
  save: Callable[[str, int, Any], None]
  stop_reason: Optional[str] = None

  def request_stop(self, reason: str) -> None:
    if self.stop_reason is None:
      self.stop_reason = reason


# Summary entries that are not evaluator metrics (EarlyStopping's final best_metrics).
_NOT_EVAL_METRICS = ("step", "steps_per_sec", "eta_sec", "preempted")


def call(hooks, method: str, *args) -> None:
  """Calls ``hook.method(*args)`` on every hook that has it."""
  for hook in hooks:
    fn = getattr(hook, method, None)
    if fn is not None:
      fn(*args)


def call_after_eval(hooks, step: int, state, metrics: dict, ctx: "LoopContext"):
  """Calls every hook's ``after_eval`` in order, each seeing the state the previous one
  returned; returns the final state."""
  for hook in hooks:
    fn = getattr(hook, "after_eval", None)
    if fn is not None:
      new_state = fn(step, state, metrics, ctx)
      state = state if new_state is None else new_state
  return state


class Periodic:
  """Calls ``fn(step, state)`` every ``every`` steps (and at the start and the end).

  Args:
    every: steps between calls (> 0).
    fn: ``(step, state) -> None``.
    at_start: also call before the first step of a fresh run (step 0).
    at_end: also call after the last step of this invocation (if it trained at all and
      the step is not a multiple of ``every``).
  """

  def __init__(self, every: int, fn: Callable[[int, Any], None], *, at_start: bool = True,
               at_end: bool = True):
    if every < 1:
      raise ValueError(f"Periodic(every={every}) must be >= 1.")
    self.every, self.fn, self.at_start, self.at_end = every, fn, at_start, at_end
    self._last = None

  def begin(self, step: int, state, ctx: LoopContext) -> None:
    del ctx
    if self.at_start and step == 0:
      self.fn(step, state)
      self._last = step

  def after_step(self, step: int, state, ctx: LoopContext) -> None:
    del ctx
    if step % self.every == 0:
      self.fn(step, state)
      self._last = step

  def end(self, step: int, state, summary: dict, ctx: LoopContext) -> None:
    del summary
    if self.at_end and self._last != step and step != ctx.start_step:
      self.fn(step, state)
      self._last = step


def check_budget_minutes(minutes: Optional[float]) -> None:
  """``ValueError`` unless ``minutes`` is ``None`` (no time limit) or > 0: the one check
  of a user's ``budget_minutes`` (``launch.train``, the experiment runners), made before
  anything is written."""
  if minutes is not None and not minutes > 0:
    raise ValueError(f"--budget_minutes={minutes:g} must be > 0 (leave it out for no time "
                     "limit).")


class TimeBudget:
  """Stops the run once ``seconds`` of wall-clock time have passed in this invocation
  (counted from ``begin``, so a resumed run gets a new budget; compilation counts).

  Args:
    seconds: the budget (> 0).
    clock: the clock in seconds (default ``time.monotonic``; tests pass a fake one).
  """

  def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
    if not seconds > 0:
      raise ValueError(f"TimeBudget(seconds={seconds}) must be > 0.")
    self.seconds, self.clock = float(seconds), clock
    self.start = None

  def begin(self, step: int, state, ctx: LoopContext) -> None:
    del step, state, ctx
    self.start = self.clock()

  def after_step(self, step: int, state, ctx: LoopContext) -> None:
    del state
    if self.clock() - self.start >= self.seconds:
      logging.info("Wall-clock budget of %.0f s reached at step %d.", self.seconds, step)
      ctx.request_stop("budget")


def metric_missing(metric: str, evaluator: Optional[str], metrics: dict,
                   others: Sequence[str] = ()) -> None:
  """``ValueError`` if ``evaluator`` reported at this evaluation (``metrics`` has its
  ``<evaluator>_`` keys, not counting those of the evaluators ``others`` whose names
  extend it, e.g. ``eval_dev10`` of ``eval``) but not ``metric``: a misspelt metric would
  otherwise be ignored for the whole run."""
  if evaluator is None or metric in metrics:
    return
  found = sorted(k for k in metrics if k.startswith(evaluator + "_")
                 and not k.startswith(tuple(o + "_" for o in others)))
  if found:
    raise ValueError(f"{metric!r} is not a metric of evaluator {evaluator!r}; it reports "
                     f"{found}.")


class EarlyStopping:
  """Stops when ``metric`` has not improved for ``patience`` evaluations; keeps the best.

  After every evaluation that reports ``metric``: if it beats the best so far (by more
  than ``min_delta``), the state is saved under ``<workdir>/best/checkpoints/<step>``
  (the previous best is replaced) and every metric of that evaluation is recorded (e.g.
  the test accuracy measured at the best dev accuracy); otherwise a counter grows, and
  the run stops when it reaches ``patience``. The record is kept in
  ``<workdir>/early_stopping.json``, so a resumed run continues it (and a run that had
  stopped stops again at once). Each evaluation step counts once: a run killed after an
  evaluation but before the next checkpoint resumes from an earlier step and evaluates
  that step again (with the same result: resume is exact), and the record already has it;
  if that evaluation stopped the run, the resumed run trains up to it and stops there. A
  run that starts at step 0 (no checkpoint) starts a new record: an earlier start's record
  (another config, or a run killed before its first checkpoint) is not its own, and it
  evaluates every step again anyway.
  The loop's final evaluation (after the last step, a budget
  stop or early stopping) counts as well: if it is strictly better, ``end`` saves the final
  state as the best. ``end`` adds ``best_step``, ``best_<metric>`` and ``best_metrics`` to
  the loop's summary.

  Args:
    metric: the metric name, e.g. ``"eval_accuracy"``.
    mode: ``"max"`` or ``"min"``.
    patience: evaluations without improvement before stopping (>= 1).
    min_delta: the least change that counts as an improvement.
    evaluator: the evaluator that reports ``metric`` (if given, an evaluation of it without
      ``metric`` is a ``ValueError``: :func:`metric_missing`), ``others`` the evaluators
      whose names extend its name.
  """
  FILE = "early_stopping.json"

  def __init__(self, metric: str, *, mode: str = "max", patience: int = 5,
               min_delta: float = 0.0, evaluator: Optional[str] = None,
               others: Sequence[str] = ()):
    if mode not in ("max", "min"):
      raise ValueError(f"EarlyStopping(mode={mode!r}) must be 'max' or 'min'.")
    if patience < 1:
      raise ValueError(f"EarlyStopping(patience={patience}) must be >= 1.")
    self.metric, self.mode, self.patience, self.min_delta = metric, mode, patience, min_delta
    self.evaluator, self.others = evaluator, tuple(others)
    self.record = {"best_step": None, "best_value": None, "best_metrics": {},
                   "bad_evals": 0, "stopped": False, "last_step": None}

  def _path(self, ctx: LoopContext) -> str:
    return os.path.join(ctx.workdir, self.FILE)

  def best_dir(self, workdir: str) -> str:
    return os.path.join(workdir, "best")

  def begin(self, step: int, state, ctx: LoopContext) -> None:
    del state
    if step:     # at step 0 the file (if any) is an earlier start's; it is rewritten
      self.record.update(utils.read_json(self._path(ctx), {}))
    # The patience may change on resume (configs.RESUME_MAY_CHANGE): a larger one lets a
    # stopped run continue.
    self.record["stopped"] = self.record["bad_evals"] >= self.patience
    last = self.record["last_step"]
    if self.record["stopped"] and (last is None or last <= step):
      ctx.request_stop("early_stopping")

  def _better(self, value: float) -> bool:
    best = self.record["best_value"]
    if best is None:
      return True
    return (value > best + self.min_delta if self.mode == "max"
            else value < best - self.min_delta)

  def after_eval(self, step: int, state, metrics: dict, ctx: LoopContext) -> None:
    metric_missing(self.metric, self.evaluator, metrics, self.others)
    if self.metric not in metrics:
      return
    last = self.record.get("last_step")
    if last is not None and step <= last:
      logging.info("early stopping: step %d was counted before the resume (up to step %d)",
                   step, last)
      if step == last and self.record["stopped"]:   # the evaluation that stopped the run
        ctx.request_stop("early_stopping")
      return
    value = float(metrics[self.metric])
    self.record["last_step"] = step
    if self._better(value):
      ctx.save(self.best_dir(ctx.workdir), step, state)
      self.record.update(best_step=step, best_value=value, bad_evals=0,
                         best_metrics={k: float(v) for k, v in metrics.items()})
    else:
      self.record["bad_evals"] += 1
    logging.info("early stopping: step %d %s=%.4f (best %.4f at step %d), %d/%d "
                 "evaluations without improvement", step, self.metric, value,
                 self.record["best_value"], self.record["best_step"],
                 self.record["bad_evals"], self.patience)
    if self.record["bad_evals"] >= self.patience:
      self.record["stopped"] = True
      ctx.request_stop("early_stopping")
    utils.write_json(self._path(ctx), self.record)

  def end(self, step: int, state, summary: dict, ctx: LoopContext) -> None:
    # The final evaluation counts too (the loop calls after_eval for the periodic ones
    # only, the last step's included): a budget stop's, or the last step's off the
    # evaluation steps, may be the best. Strictly better only,
    # so a final evaluation at the step of the last periodic one changes nothing.
    value = summary.get(self.metric)
    if value is not None and self._better(float(value)):
      ctx.save(self.best_dir(ctx.workdir), step, state)
      self.record.update(best_step=step, best_value=float(value), best_metrics={
          k: float(v) for k, v in summary.items()
          if isinstance(v, numbers.Real) and not isinstance(v, bool)
          and not k.startswith(("train_", "best_")) and k not in _NOT_EVAL_METRICS})
      utils.write_json(self._path(ctx), self.record)
    summary.update(best_step=self.record["best_step"],
                   best_metrics=dict(self.record["best_metrics"]))
    summary[f"best_{self.metric}"] = self.record["best_value"]


class LearningRateOnPlateau:
  """Reports ``config.lr_plateau_metric`` after every evaluation that has it to the
  optimizer's plateau scale (:func:`rumjax.training.optim.report_plateau`) and returns the
  state with the new optimizer state. The scale, the best value and the count are part
  of the optimizer state, so a resumed run continues exactly; ``end`` adds ``lr_scale``.
  The last step's periodic evaluation is reported too, so a run extended to more steps
  on resume continues as the longer run; a final evaluation off the evaluation steps is
  not (no step follows it).
  """

  def __init__(self, config, evaluator: Optional[str] = None, others: Sequence[str] = ()):
    self.config, self.metric = config, config["lr_plateau_metric"]
    self.evaluator, self.others = evaluator, tuple(others)   # see metric_missing

  def after_eval(self, step: int, state, metrics: dict, ctx: LoopContext):
    del ctx
    metric_missing(self.metric, self.evaluator, metrics, self.others)
    if self.metric not in metrics:
      return None
    before = optim.plateau_scale(state.opt_state)
    opt_state = optim.report_plateau(state.opt_state, float(metrics[self.metric]),
                                     self.config)
    after = optim.plateau_scale(opt_state)
    if after != before:
      logging.info("step %d: %s=%.4f did not improve; learning rate x%.4g (now x%.4g of "
                   "the schedule)", step, self.metric, float(metrics[self.metric]),
                   after / before, after)
    return state.replace(opt_state=opt_state)

  def end(self, step: int, state, summary: dict, ctx: LoopContext) -> None:
    del step, ctx
    summary["lr_scale"] = optim.plateau_scale(state.opt_state)

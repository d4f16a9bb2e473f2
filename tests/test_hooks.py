"""Hooks in the loop: periodic callbacks, a wall-clock budget, early stopping with the best
checkpoint kept (and resumed), evaluation of a checkpoint, and one compilation per run."""

import json
import os
import shutil

import numpy as np
import optax
import pytest

from rumjax import training
from rumjax.training import hooks
from tests import toy_task


def _config(**overrides):
  config = toy_task.default_config()
  config.update(overrides)
  return config


def test_periodic_is_called_at_start_every_n_steps_and_at_the_end(tmp_path):
  calls = []
  hook = hooks.Periodic(4, lambda step, state: calls.append((step, int(state.step))))
  summary = training.train_and_evaluate(_config(num_steps=10), str(tmp_path), toy_task.TASK,
                                        hooks=[hook])
  assert summary["stop_reason"] == "num_steps"
  assert calls == [(0, 0), (4, 4), (8, 8), (10, 10)]  # the state is that of the step
  # Resumed at the end: nothing trains, nothing is called; resumed to 14: 12 and the end.
  calls.clear()
  training.train_and_evaluate(_config(num_steps=10), str(tmp_path), toy_task.TASK, hooks=[hook])
  assert calls == []
  training.train_and_evaluate(_config(num_steps=14), str(tmp_path), toy_task.TASK, hooks=[hook])
  assert calls == [(12, 12), (14, 14)]


def test_time_budget_stops_saves_and_evaluates(tmp_path):
  ticks = iter(range(1000))  # one second per reading: begin, then one after each step
  budget = hooks.TimeBudget(3.5, clock=lambda: float(next(ticks)))
  summary = training.train_and_evaluate(_config(num_steps=100), str(tmp_path), toy_task.TASK,
                                        hooks=[budget])
  assert summary["stop_reason"] == "budget" and not summary["preempted"]
  assert summary["step"] == 4 and "eval_loss" in summary  # 4 s >= 3.5 s; final eval ran
  assert os.path.isdir(tmp_path / "checkpoints" / "4")
  with pytest.raises(ValueError, match="seconds"):
    hooks.TimeBudget(0)


@pytest.mark.parametrize("minutes", [0, -1.5, float("nan")])
def test_check_budget_minutes_refuses_what_is_not_a_time(minutes):
  with pytest.raises(ValueError, match=r"--budget_minutes=.* must be > 0 \(leave it out"):
    hooks.check_budget_minutes(minutes)


@pytest.mark.parametrize("minutes", [None, 1e-5, 30])
def test_check_budget_minutes_accepts_none_and_positive(minutes):
  assert hooks.check_budget_minutes(minutes) is None


def test_early_stopping_keeps_the_best_and_resumes(tmp_path):
  # The toy loss falls at every evaluation: "max" of eval_loss never improves after the
  # first evaluation, so the run stops after `patience` more evaluations.
  workdir = str(tmp_path)
  stop = hooks.EarlyStopping("eval_loss", mode="max", patience=2)
  summary = training.train_and_evaluate(_config(num_steps=100, eval_every=2,
                                                checkpoint_every=0), workdir, toy_task.TASK,
                                        hooks=[stop])
  assert summary["stop_reason"] == "early_stopping" and summary["step"] == 6
  assert summary["best_step"] == 2
  first_eval = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))
                if "eval_loss" in l][0]
  assert first_eval["step"] == 2
  assert summary["best_eval_loss"] == pytest.approx(first_eval["eval_loss"])
  assert summary["best_metrics"]["eval_loss"] == pytest.approx(first_eval["eval_loss"])
  # The best checkpoint is a complete one: evaluating it gives the best metrics again.
  assert os.listdir(os.path.join(workdir, "best", "checkpoints")) == ["2"]
  again = training.evaluate_checkpoint(_config(), os.path.join(workdir, "best"), toy_task.TASK)
  assert again["step"] == 2 and again["eval_loss"] == pytest.approx(first_eval["eval_loss"])
  # A second invocation reads early_stopping.json and stops at once.
  resumed = training.train_and_evaluate(_config(num_steps=100, eval_every=2), workdir,
                                        toy_task.TASK,
                                        hooks=[hooks.EarlyStopping("eval_loss", mode="max",
                                                                   patience=2)])
  assert resumed["step"] == 6 and resumed["stop_reason"] == "early_stopping"
  assert resumed["best_step"] == 2
  with pytest.raises(ValueError, match="mode"):
    hooks.EarlyStopping("eval_loss", mode="up")


def test_early_stopping_counts_an_evaluation_replayed_after_a_kill_once(tmp_path):
  # A kill -9 after the evaluation at step 6 and before the next checkpoint (step 8): the
  # record has counted step 6, the resumed run restores step 4 and evaluates step 6 again.
  def run(workdir):
    return training.train_and_evaluate(
        _config(num_steps=8, eval_every=2, checkpoint_every=4, keep_checkpoints=3),
        workdir, toy_task.TASK,
        hooks=[hooks.EarlyStopping("eval_loss", mode="max", patience=10)])

  whole, killed = str(tmp_path / "whole"), str(tmp_path / "killed")
  run(whole)
  run(killed)
  shutil.rmtree(os.path.join(killed, "checkpoints", "8"))   # what the kill left unsaved
  resumed = run(killed)
  assert resumed["step"] == 8 and resumed["best_step"] == 2
  record = lambda d: json.load(open(os.path.join(d, "early_stopping.json")))
  assert record(killed) == record(whole)
  assert record(whole)["bad_evals"] == 3   # steps 4, 6 and 8 (the last step counts too)


def test_early_stopping_of_a_finished_run_extended_on_resume_is_the_longer_runs(tmp_path):
  # Finished at step 4 (an evaluation step), then extended to 8 (num_steps may change on
  # resume): the record counts step 4 as the uninterrupted 8-step run does, and a
  # patience of 2 stops both at step 6.
  def run(workdir, num_steps):
    return training.train_and_evaluate(
        _config(num_steps=num_steps, eval_every=2), workdir, toy_task.TASK,
        hooks=[hooks.EarlyStopping("eval_loss", mode="max", patience=2)])

  whole, extended = str(tmp_path / "whole"), str(tmp_path / "extended")
  straight = run(whole, 8)
  assert run(extended, 4)["best_step"] == 2
  resumed = run(extended, 8)
  assert straight["stop_reason"] == resumed["stop_reason"] == "early_stopping"
  assert straight["step"] == resumed["step"] == 6
  record = lambda d: json.load(open(os.path.join(d, "early_stopping.json")))
  assert record(extended) == record(whole)


def test_a_kill_before_the_checkpoint_of_the_stopping_step_stops_at_that_step(tmp_path):
  # Evaluations at 2 (best), 4 and 6 (patience 2: the stop); the checkpoint of step 6 is
  # lost to the kill. The resumed run restored step 4 and stopped there at once; it must
  # train to step 6, count its evaluation once and stop as the uninterrupted run did.
  def run(workdir):
    return training.train_and_evaluate(
        _config(num_steps=100, eval_every=2, checkpoint_every=4, keep_checkpoints=3),
        workdir, toy_task.TASK, hooks=[hooks.EarlyStopping("eval_loss", mode="max",
                                                           patience=2)])

  whole, killed = str(tmp_path / "whole"), str(tmp_path / "killed")
  want = run(whole)
  run(killed)
  shutil.rmtree(os.path.join(killed, "checkpoints", "6"))
  got = run(killed)
  assert (want["step"], want["stop_reason"], want["best_step"]) == (6, "early_stopping", 2)
  assert (got["step"], got["stop_reason"], got["best_step"]) == (6, "early_stopping", 2)
  assert got["eval_loss"] == want["eval_loss"]


def test_a_start_without_checkpoints_keeps_no_early_stopping_record(tmp_path):
  # A first start left early_stopping.json and best/ but no checkpoint (it diverged, or was
  # killed, before the first one). Started again it must run as in a fresh workdir: the
  # old record (here: stopped) made it stop at step 0 without training, and in general
  # skip evaluations and compare with another run's best.
  def run(workdir):
    return training.train_and_evaluate(
        _config(num_steps=100, eval_every=2, checkpoint_every=50), workdir, toy_task.TASK,
        hooks=[hooks.EarlyStopping("eval_loss", mode="max", patience=1)])

  fresh, reused = str(tmp_path / "fresh"), str(tmp_path / "reused")
  want = run(fresh)
  run(reused)                                                # stops at step 4
  shutil.rmtree(os.path.join(reused, "checkpoints"))         # no checkpoint left
  got = run(reused)
  assert (got["step"], got["best_step"]) == (want["step"], want["best_step"]) == (4, 2)
  assert got["eval_loss"] == want["eval_loss"]


def test_early_stopping_counts_the_final_evaluation(tmp_path):
  # No periodic evaluation: the final one is the only one, so it is the best (the config
  # fields' early stopping of a budget-bound run used to report best_step None here).
  workdir = str(tmp_path)
  summary = training.train_and_evaluate(
      _config(num_steps=5, eval_every=0, checkpoint_every=0), workdir, toy_task.TASK,
      hooks=[hooks.EarlyStopping("eval_loss", mode="min", patience=2)])
  assert summary["best_step"] == 5
  assert summary["best_eval_loss"] == pytest.approx(summary["eval_loss"])
  assert summary["best_metrics"] == {"eval_loss": pytest.approx(summary["eval_loss"])}
  assert os.listdir(os.path.join(workdir, "best", "checkpoints")) == ["5"]
  record = json.load(open(os.path.join(workdir, "early_stopping.json")))
  assert record["best_step"] == 5
  # A final evaluation that is not better (mode max of a falling loss) changes nothing.
  other = str(tmp_path / "other")
  summary = training.train_and_evaluate(
      _config(num_steps=6, eval_every=2, checkpoint_every=0), other, toy_task.TASK,
      hooks=[hooks.EarlyStopping("eval_loss", mode="max", patience=10)])
  assert summary["step"] == 6 and summary["best_step"] == 2


def test_evaluate_checkpoint_errors(tmp_path):
  with pytest.raises(ValueError, match="no checkpoints in"):
    training.evaluate_checkpoint(_config(), str(tmp_path / "none"), toy_task.TASK)
  training.train_and_evaluate(_config(num_steps=5), str(tmp_path / "run"), toy_task.TASK)
  with pytest.raises(ValueError, match="at step 3"):
    training.evaluate_checkpoint(_config(), str(tmp_path / "run"), toy_task.TASK, step=3)
  with pytest.raises(ValueError, match=r"unknown evaluator\(s\) \['test'\]"):
    training.evaluate_checkpoint(_config(), str(tmp_path / "run"), toy_task.TASK, names=["test"])


def test_one_run_compiles_the_train_step_once(tmp_path, monkeypatch):
  """Hooks and evaluators act inside one invocation: the loss is traced once for the train
  step and once for the evaluation, however many evaluations and callbacks run."""
  traces = []
  original = toy_task.loss_and_metrics

  def counted(pred, batch):
    traces.append(1)
    return original(pred, batch)

  monkeypatch.setattr(toy_task, "TASK", toy_task.with_parts(loss_and_metrics=counted))
  training.train_and_evaluate(_config(num_steps=12, eval_every=2), str(tmp_path), toy_task.TASK,
                              hooks=[hooks.Periodic(3, lambda step, state: None)])
  assert len(traces) == 2


def test_config_fields_ask_for_early_stopping(tmp_path):
  """``config.early_stopping_metric`` adds the hook (same run as the hook passed by hand);
  a metric no evaluator reports is a one-line error."""
  fields = dict(num_steps=100, eval_every=2, checkpoint_every=0,
                early_stopping_metric="eval_loss", early_stopping_mode="max",
                early_stopping_patience=2)
  summary = training.train_and_evaluate(_config(**fields), str(tmp_path / "a"), toy_task.TASK)
  assert summary["stop_reason"] == "early_stopping" and summary["step"] == 6
  assert summary["best_step"] == 2
  assert os.path.isdir(os.path.join(str(tmp_path / "a"), "best"))
  with pytest.raises(ValueError, match=r"config\.early_stopping_metric='dev_accuracy' "
                                       r"comes from no evaluator"):
    training.train_and_evaluate(_config(**{**fields, "early_stopping_metric": "dev_accuracy"}),
                                str(tmp_path / "b"), toy_task.TASK)


def test_learning_rate_decays_on_a_plateau_and_resumes_exactly(tmp_path, monkeypatch):
  # "max" of the falling toy eval loss never improves after the first evaluation: every
  # later evaluation (steps 4, 6, 8 and 10: the last step's periodic evaluation is
  # reported too, and the final evaluation reuses it) multiplies the rate by 0.5.
  plateau = dict(lr_plateau_factor=0.5, lr_plateau_metric="eval_loss",
                 lr_plateau_mode="max", lr_plateau_patience=1, eval_every=2,
                 checkpoint_every=2)
  traces = []
  original = toy_task.loss_and_metrics
  monkeypatch.setattr(toy_task, "TASK", toy_task.with_parts(
      loss_and_metrics=lambda pred, batch: traces.append(1) or original(pred, batch)))
  full = training.train_and_evaluate(_config(num_steps=10, **plateau), str(tmp_path / "a"),
                                     toy_task.TASK)
  assert full["lr_scale"] == 0.5 ** 4
  assert len(traces) == 2  # replacing the optimizer state does not recompile the step
  # The decay changes training: the same run without it ends elsewhere.
  plain = training.train_and_evaluate(_config(num_steps=10, eval_every=2),
                                      str(tmp_path / "b"), toy_task.TASK)
  assert not np.allclose(plain["params"]["Dense_0"]["kernel"],
                         full["params"]["Dense_0"]["kernel"])
  # Stopped at step 5 and resumed: the scale, best value and count come back from the
  # checkpoint, and the final parameters equal the uninterrupted run's.
  workdir = str(tmp_path / "c")
  half = training.train_and_evaluate(_config(num_steps=5, **plateau), workdir, toy_task.TASK)
  assert half["lr_scale"] == 0.5
  resumed = training.train_and_evaluate(_config(num_steps=10, **plateau), workdir, toy_task.TASK)
  assert resumed["lr_scale"] == full["lr_scale"]
  np.testing.assert_array_equal(resumed["params"]["Dense_0"]["kernel"],
                                full["params"]["Dense_0"]["kernel"])
  # Finished at step 6, an evaluation step, then extended to 10 (num_steps may change on
  # resume): step 6's report is in the finished run's state, as in the longer run.
  workdir = str(tmp_path / "e")
  short = training.train_and_evaluate(_config(num_steps=6, **plateau), workdir, toy_task.TASK)
  assert short["lr_scale"] == 0.5 ** 2
  extended = training.train_and_evaluate(_config(num_steps=10, **plateau), workdir,
                                         toy_task.TASK)
  assert extended["lr_scale"] == full["lr_scale"]
  np.testing.assert_array_equal(extended["params"]["Dense_0"]["kernel"],
                                full["params"]["Dense_0"]["kernel"])
  with pytest.raises(ValueError, match=r"config\.lr_plateau_metric='dev_ppl' comes from no "
                                       r"evaluator; config\.evals has \['eval'\]"):
    training.train_and_evaluate(_config(num_steps=2, **{**plateau,
                                                        "lr_plateau_metric": "dev_ppl"}),
                                str(tmp_path / "d"), toy_task.TASK)


def test_a_task_may_wrap_the_optimizer(tmp_path, monkeypatch):
  # A wrapper that zeroes every update: the parameters stay at their initial values.
  frozen = lambda config, tx: optax.chain(tx, optax.scale(0.0))
  monkeypatch.setattr(toy_task, "TASK", toy_task.with_parts(wrap_optimizer=frozen))
  summary = training.train_and_evaluate(_config(num_steps=3), str(tmp_path / "a"), toy_task.TASK)
  monkeypatch.setattr(toy_task, "TASK", toy_task.with_parts(wrap_optimizer=None))
  init = training.train_and_evaluate(_config(num_steps=0), str(tmp_path / "b"), toy_task.TASK)
  np.testing.assert_array_equal(summary["params"]["Dense_0"]["kernel"],
                                init["params"]["Dense_0"]["kernel"])


def test_a_larger_patience_on_resume_lets_a_stopped_run_continue(tmp_path):
  """early_stopping_patience may change on resume (configs.RESUME_MAY_CHANGE)."""
  run = lambda patience: training.train_and_evaluate(
      _config(num_steps=12, eval_every=2), str(tmp_path), toy_task.TASK,
      hooks=[hooks.EarlyStopping("eval_loss", mode="max", patience=patience)])
  assert run(1)["step"] == 4
  assert run(1)["step"] == 4                     # the same patience: stopped at once
  resumed = run(3)
  assert resumed["step"] == 8 and resumed["stop_reason"] == "early_stopping"


def test_a_misspelt_or_final_only_hook_metric_is_an_error(tmp_path):
  with pytest.raises(ValueError, match=r"'eval_los' is not a metric of evaluator 'eval'; "
                     r"it reports \['eval_loss'"):
    training.train_and_evaluate(
        _config(num_steps=4, eval_every=2, early_stopping_metric="eval_los",
                early_stopping_mode="min", early_stopping_patience=5),
        str(tmp_path / "typo"), toy_task.TASK)
  config = _config(num_steps=4, eval_every=2, early_stopping_metric="eval_loss",
                   early_stopping_mode="min", early_stopping_patience=5)
  config.evals.eval.every = 0
  with pytest.raises(ValueError, match="runs only at the end"):
    training.train_and_evaluate(config, str(tmp_path / "final"), toy_task.TASK)


def test_keep_checkpoints_below_one_is_refused(tmp_path):
  with pytest.raises(ValueError, match=r"config.keep_checkpoints=0 must be an integer >= 1"):
    training.train_and_evaluate(_config(num_steps=2, keep_checkpoints=0), str(tmp_path),
                                toy_task.TASK)
  assert not (tmp_path / "checkpoints").exists() or not os.listdir(tmp_path / "checkpoints")


def test_a_stop_between_two_training_records_writes_the_steps_since_the_last(tmp_path):
  """A budget stop at step 4 with log_every 100: the training metrics of steps 1-4 are
  written (and in the summary), not lost."""
  ticks = iter(range(1000))
  budget = hooks.TimeBudget(3.5, clock=lambda: float(next(ticks)))
  summary = training.train_and_evaluate(_config(num_steps=100, log_every=100), str(tmp_path),
                                        toy_task.TASK, hooks=[budget])
  assert summary["step"] == 4 and "train_loss" in summary
  records = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
  assert [r["step"] for r in records if "train_loss" in r] == [4]


def test_an_early_stopped_run_writes_each_evaluation_once_and_a_rerun_writes_nothing(tmp_path):
  """The stop lands on an evaluation step (6): the final evaluation reuses it and is not
  written again; a second invocation stops at once and leaves the workdir as it was."""
  run = lambda: training.train_and_evaluate(
      _config(num_steps=100, eval_every=2), str(tmp_path), toy_task.TASK,
      hooks=[hooks.EarlyStopping("eval_loss", mode="max", patience=2)])
  first = run()
  assert first["step"] == 6 and first["stop_reason"] == "early_stopping"
  records = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
  assert [r["step"] for r in records if "eval_loss" in r] == [2, 4, 6]
  files = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in tmp_path.rglob("*")
           if p.is_file() and p.name != "run.lock"}
  again = run()
  assert again["step"] == 6 and again["stop_reason"] == "early_stopping"
  assert again["eval_loss"] == first["eval_loss"] and again["best_step"] == 2
  after = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in tmp_path.rglob("*")
           if p.is_file() and p.name != "run.lock"}
  assert after == files


def test_a_kill_during_the_final_evaluation_of_an_early_stopped_run_evaluates_again(
    tmp_path):
  """The stop lands on an evaluation step whose periodic run reads 1 batch and whose final
  run the whole split (batches_at_end=0). Killed before the final record, the rerun
  (stopped again at once) took the 1-batch record for the final evaluation."""
  def run():
    c = _config(num_steps=100, eval_every=2)
    c.evals.eval.batches, c.evals.eval.batches_at_end = 1, 0
    return training.train_and_evaluate(
        c, str(tmp_path), toy_task.TASK,
        hooks=[hooks.EarlyStopping("eval_loss", mode="max", patience=1)])
  first = run()
  path = tmp_path / "metrics.jsonl"
  records = [json.loads(line) for line in open(path)]
  evals = [(r["step"], r["eval_loss"]) for r in records if "eval_loss" in r]
  assert [s for s, _ in evals] == [2, 4, 4] and evals[1][1] != evals[2][1]
  last = max(i for i, r in enumerate(records) if "eval_loss" in r)   # the kill
  path.write_text("".join(json.dumps(r) + "\n" for i, r in enumerate(records) if i != last))
  again = run()
  assert again["step"] == 4 and again["eval_loss"] == first["eval_loss"]
  assert [(r["step"], r["eval_loss"]) for r in map(json.loads, open(path))
          if "eval_loss" in r] == evals


class _StopAt:
  def __init__(self, step):
    self.step = step

  def after_step(self, step, state, ctx):
    if step == self.step:
      ctx.request_stop("budget")


def test_a_stop_on_a_checkpoint_step_does_not_count_its_window_twice(tmp_path):
  """A stop at step 6 writes the training record of steps 6 (5 was the last log step); the
  checkpoint at 6 was saved before it with those steps as its window, which the resumed
  run counted again at step 10. With or without a checkpoint at the stop, the resumed
  run's record at 10 covers steps 7-10."""
  def train(name, checkpoint_every):
    c = _config(num_steps=12, log_every=5, checkpoint_every=checkpoint_every,
                keep_checkpoints=10)
    workdir = str(tmp_path / name)
    training.train_and_evaluate(c, workdir, toy_task.TASK, hooks=[_StopAt(6)])
    training.train_and_evaluate(c, workdir, toy_task.TASK)
    return {r["step"]: r["train_loss"] for r in map(json.loads, open(
        os.path.join(workdir, "metrics.jsonl"))) if "train_loss" in r}
  on_checkpoint, between = train("on", 3), train("between", 4)
  assert sorted(on_checkpoint) == sorted(between) == [5, 6, 10, 12]
  assert on_checkpoint == between


def _ctx(tmp_path, start_step=0):
  saved = []
  ctx = hooks.LoopContext(workdir=str(tmp_path), config=None, num_steps=100,
                          start_step=start_step, save=lambda d, s, st: saved.append(s))
  return ctx, saved


def test_early_stopping_a_tie_is_no_improvement(tmp_path):
  ctx, saved = _ctx(tmp_path)
  stop = hooks.EarlyStopping("eval_accuracy", mode="max", patience=2)
  stop.begin(0, None, ctx)
  for step in (1, 2, 3):
    stop.after_eval(step, None, {"eval_accuracy": 0.5}, ctx)
  assert saved == [1] and stop.record["best_step"] == 1
  assert ctx.stop_reason == "early_stopping" and stop.record["bad_evals"] == 2


def test_early_stopping_min_delta_in_min_mode(tmp_path):
  ctx, saved = _ctx(tmp_path)
  stop = hooks.EarlyStopping("eval_loss", mode="min", patience=5, min_delta=0.1)
  stop.begin(0, None, ctx)
  stop.after_eval(1, None, {"eval_loss": 1.0}, ctx)
  stop.after_eval(2, None, {"eval_loss": 0.95}, ctx)    # better by less than min_delta
  assert saved == [1] and stop.record["bad_evals"] == 1
  stop.after_eval(3, None, {"eval_loss": 0.85}, ctx)    # better by more
  assert saved == [1, 3]


def test_early_stopping_counts_consecutive_evaluations_without_improvement(tmp_path):
  ctx, _ = _ctx(tmp_path)
  stop = hooks.EarlyStopping("eval_accuracy", mode="max", patience=2)
  stop.begin(0, None, ctx)
  for step, value in enumerate([0.5, 0.4, 0.6, 0.5], start=1):  # bad, best, bad
    stop.after_eval(step, None, {"eval_accuracy": value}, ctx)
  assert stop.record["bad_evals"] == 1 and ctx.stop_reason is None


def test_early_stopping_from_step_0_ignores_an_old_record(tmp_path):
  with open(os.path.join(tmp_path, hooks.EarlyStopping.FILE), "w") as f:
    json.dump({"best_step": 50, "best_value": 0.99, "best_metrics": {}, "bad_evals": 1,
               "stopped": False, "last_step": None}, f)
  ctx, saved = _ctx(tmp_path)
  stop = hooks.EarlyStopping("eval_accuracy", mode="max", patience=2)
  stop.begin(0, None, ctx)
  stop.after_eval(1, None, {"eval_accuracy": 0.5}, ctx)
  assert saved == [1] and stop.record["best_step"] == 1


def test_a_fresh_periodic_hook_is_not_called_on_a_finished_run(tmp_path):
  config = toy_task.default_config()
  config.update(num_steps=4)
  training.train_and_evaluate(config, str(tmp_path), toy_task.TASK)
  calls = []
  hook = hooks.Periodic(3, lambda step, state: calls.append(step))
  training.train_and_evaluate(config, str(tmp_path), toy_task.TASK, hooks=[hook])
  assert calls == []

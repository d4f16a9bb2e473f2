"""A workdir belongs to one run (in-process, on the toy task): a resume with another config or
another state is a one-line error that leaves the workdir as it was; a busy workdir is refused
and a dead holder's lock taken over; a stop request from the first moment; metrics written
after the last checkpoint are set aside on resume; true messages."""

import errno
import hashlib
import json
import os
import re
import socket
import subprocess
import sys

import pytest

from rumjax import configs, training
from rumjax.training import writer as writer_lib
from rumjax.training import workdir as workdir_lib
from tests import toy_task


def _config(**overrides):
  config = toy_task.default_config()
  config.update(overrides)
  return config


def _snapshot(workdir):
  """Every file under ``workdir`` with its content hash (what "untouched" means)."""
  out = {}
  for root, _, files in os.walk(workdir):
    for name in files:
      path = os.path.join(root, name)
      with open(path, "rb") as f:
        out[os.path.relpath(path, workdir)] = hashlib.sha256(f.read()).hexdigest()
  return out


def test_resume_differences_leave_out_the_fields_that_may_change():
  saved = {"num_steps": 10, "seed": 0, "model": {"hidden_size": 8, "cell": "rum"},
           "evals": {"eval": {"every": 5}}, "old_field": 1}
  new = {"num_steps": 20, "seed": 0, "model": {"hidden_size": 16, "cell": "rum"},
         "evals": {"eval": {"every": 7}, "test": {"every": 0}}}
  diffs = configs.resume_differences(saved, new)
  assert diffs == [("model.hidden_size", 8, 16), ("old_field", 1, "<absent>")]
  assert configs.format_differences(diffs[:1]) == (
      "config.model.hidden_size: 8 in the workdir, 16 now")


def test_a_field_added_since_the_run_resumes_at_its_old_behaviour_value():
  """A workdir saved before configs.ADDED_FIELDS' fields existed (model.learn_lam) resumes
  when the new config keeps the old behaviour (False), not when it changes it; the
  experiment runner's finished() agrees."""
  saved = {"seed": 0, "model": {"cell": "rum", "lam": 1.0}}
  assert configs.resume_differences(
      saved, {"seed": 0, "model": {"cell": "rum", "lam": 1.0, "learn_lam": False}}) == []
  assert configs.resume_differences(
      saved, {"seed": 0, "model": {"cell": "rum", "lam": 1.0, "learn_lam": True}}) == [
          ("model.learn_lam", "<absent>", True)]
  assert configs.fill_added_fields(saved, {"model": {}}) == saved   # nothing to fill


def test_a_finished_run_saved_before_batches_at_end_is_still_finished(tmp_path):
  """Every evaluator entry gained batches_at_end (None) on 2026-11-29: a result.json saved
  before counted as another config, so launch.reproduce and babi_all entered every
  finished run again."""
  import tasks
  from rumjax import experiments, utils
  config = tasks.get_task("recall").get_config()
  old = configs.as_json(config)
  for entry in old["evals"].values():
    del entry["batches_at_end"]
  del old["imports"]
  utils.write_json(str(tmp_path / "result.json"), {"status": "ok", "config": old})
  assert experiments.finished(config, str(tmp_path))["status"] == "ok"
  config.evals.test.batches_at_end = 0   # a real change of the final evaluation
  assert experiments.finished(config, str(tmp_path)) is None


def test_resume_with_another_config_is_refused_and_nothing_is_touched(tmp_path):
  workdir = str(tmp_path / "run")
  training.train_and_evaluate(_config(num_steps=5), workdir, toy_task.TASK)
  before = _snapshot(workdir)
  with pytest.raises(training.WorkdirError) as err:
    training.train_and_evaluate(_config(num_steps=10, features=5, learning_rate=0.1),
                                workdir, toy_task.TASK)
  message = str(err.value)
  assert "\n" not in message
  assert "config.features: 4 in the workdir, 5 now" in message
  assert "config.learning_rate: 0.5 in the workdir, 0.1 now" in message
  assert f"--config.init_from={workdir}" in message and "new --workdir" in message
  assert _snapshot(workdir) == before
  # num_steps and the evaluation cadence may change: the run resumes.
  summary = training.train_and_evaluate(_config(num_steps=7, eval_every=1, log_every=1),
                                        workdir, toy_task.TASK)
  assert summary["step"] == 7


def test_an_experiment_folder_is_not_a_run_workdir(tmp_path):
  # launch.train into launch.reproduce's experiment folder wrote a run beside its models'
  # folders (review); launch.plot then drew that run instead of the models.
  experiment = tmp_path / "recall_T30"
  (experiment / "rum_lam1").mkdir(parents=True)
  (experiment / "results.json").write_text('{"rum_lam1": {}}')
  before = _snapshot(str(experiment))
  with pytest.raises(training.WorkdirError, match=r"holds results.json: it is the folder of "
                                                  r"an experiment .* pass a new --workdir"):
    training.train_and_evaluate(_config(num_steps=1), str(experiment), toy_task.TASK)
  assert _snapshot(str(experiment)) == before
  assert training.train_and_evaluate(_config(num_steps=1), str(experiment / "rum_lam1"),
                                     toy_task.TASK)["step"] == 1


def test_experiment_roots_and_runs_do_not_nest(tmp_path):
  """launch.train into launch.reproduce's root (experiments one level down) or a
  ``babi_all --cells`` root (comparison.md) mixed a run into them, and the experiment
  launchers wrote their runs into a training run's workdir (review)."""
  root = tmp_path / "repro"
  (root / "recall_T30" / "gru").mkdir(parents=True)
  (root / "recall_T30" / "results.json").write_text("{}")
  cells = tmp_path / "babi"
  (cells / "rum").mkdir(parents=True)
  (cells / "comparison.md").write_text("| table |")
  for folder, mark in [(root, "recall_T30/results.json"), (cells, "comparison.md")]:
    before = _snapshot(str(folder))
    with pytest.raises(training.WorkdirError, match=rf"holds {mark}: it is the folder of an "):
      training.train_and_evaluate(_config(num_steps=1), str(folder), toy_task.TASK)
    assert _snapshot(str(folder)) == before
  run = tmp_path / "run"
  training.train_and_evaluate(_config(num_steps=1), str(run), toy_task.TASK)
  lost = tmp_path / "lost" / "checkpoints"   # checkpoints/ alone (config.json lost)
  lost.mkdir(parents=True)
  for folder, name in [(run, "config.json"), (lost.parent, "checkpoints")]:
    with pytest.raises(training.WorkdirError, match=rf"holds {name}: it is a training run's"):
      training.check_not_run(str(folder))
  training.check_not_run(str(tmp_path / "new"))   # a new folder is fine


def test_a_checkpoint_that_does_not_fit_is_an_error_not_corruption(tmp_path):
  """The second guard (no config.json to compare, e.g. a workdir copied without it): the
  checkpoint's tree (orbax metadata) against the new state; nothing is moved."""
  workdir = str(tmp_path / "run")
  training.train_and_evaluate(_config(num_steps=5), workdir, toy_task.TASK)
  os.remove(os.path.join(workdir, "config.json"))
  before = _snapshot(workdir)
  with pytest.raises(training.StateMismatchError) as err:
    training.train_and_evaluate(_config(num_steps=10, features=5), workdir, toy_task.TASK)
  message = str(err.value)
  assert "\n" not in message
  assert "params/Dense_0/kernel: (4, 1) in the checkpoint, (5, 1) now" in message
  assert "init_from" in message
  assert _snapshot(workdir) == before
  assert not os.path.exists(os.path.join(workdir, "corrupt_checkpoints"))


def test_a_busy_workdir_is_refused_naming_the_holder(tmp_path):
  workdir = str(tmp_path / "run")
  os.makedirs(workdir)
  with training.WorkdirLock(workdir):
    holder = workdir_lib.holder(workdir)
    assert holder["pid"] == os.getpid()
    with pytest.raises(training.WorkdirError) as err:
      training.train_and_evaluate(_config(num_steps=2), workdir, toy_task.TASK)
    assert f"pid {os.getpid()}" in str(err.value) and "in use by another run" in str(err.value)
    assert os.listdir(workdir) == [workdir_lib.LOCK_FILE]    # nothing written
  assert workdir_lib.holder(workdir) is None                 # released, emptied
  assert training.train_and_evaluate(_config(num_steps=2), workdir, toy_task.TASK)["step"] == 2
  assert workdir_lib.holder(workdir) is None


def test_a_dead_holders_lock_is_taken_over_with_a_warning(tmp_path, caplog):
  workdir = str(tmp_path / "run")
  os.makedirs(workdir)
  dead = subprocess.Popen([sys.executable, "-c", "pass"])
  dead.wait()                                   # a pid that no longer runs
  record = {"host": "somewhere", "pid": dead.pid, "start": "2026-01-01T00:00:00+00:00"}
  with open(os.path.join(workdir, workdir_lib.LOCK_FILE), "w") as f:
    json.dump(record, f)
  assert training.train_and_evaluate(_config(num_steps=2), workdir, toy_task.TASK)["step"] == 2
  assert "Taking over the lock" in caplog.text and f"pid {dead.pid}" in caplog.text


class _StopAt:
  """A hook that requests a stop (as the signal handler does) at a given moment."""

  def __init__(self, stop, method, step=None):
    self.stop, self.method, self.step = stop, method, step

  def begin(self, step, state, ctx):
    if self.method == "begin":
      self.stop.request()

  def after_step(self, step, state, ctx):
    if self.method == "after_step" and step == self.step:
      self.stop.request()


def test_a_stop_requested_before_the_start_saves_nothing(tmp_path):
  workdir = str(tmp_path / "run")
  stop = training.StopRequest()
  stop.request()
  summary = training.train_and_evaluate(_config(), workdir, toy_task.TASK, stop=stop)
  assert summary["preempted"] and summary["step"] == 0 and summary["params"] is None
  assert not os.path.exists(os.path.join(workdir, "checkpoints"))


def test_a_stop_before_the_first_step_or_after_a_step(tmp_path):
  workdir = str(tmp_path / "run")
  with training.StopRequest() as stop:
    summary = training.train_and_evaluate(_config(), workdir, toy_task.TASK,
                                          hooks=[_StopAt(stop, "begin")], stop=stop)
  assert summary["preempted"] and summary["step"] == 0
  assert training.checkpoint.checkpoint_steps(workdir) == []   # nothing trained, nothing saved
  with training.StopRequest() as stop:
    summary = training.train_and_evaluate(_config(), workdir, toy_task.TASK,
                                          hooks=[_StopAt(stop, "after_step", 3)], stop=stop)
  assert summary["preempted"] and summary["step"] == 3
  assert training.checkpoint.checkpoint_steps(workdir) == [3]


class _LateStop(training.StopRequest):
  """A signal that arrives after the last step: from the ``n``-th check after the loop
  (``agreed(..., every=1)``) on, as if it came during the last step's evaluations."""

  def __init__(self, n):
    super().__init__()
    self.n, self.calls = n, 0

  def agreed(self, step, also=False, every=10):
    if every == 1:
      self.calls += 1
      self.requested = self.requested or self.calls >= self.n
    return super().agreed(step, also=also, every=every)


@pytest.mark.parametrize("n", [1, 3])   # 1: before the final evaluation; 3: between two
def test_a_signal_during_the_last_steps_evaluations_stops_and_resume_finishes(tmp_path, n):
  """A signal during the last step's periodic evaluation (n=1) or between the final
  evaluators (n=3) stops the run (preempted, the last checkpoint saved, no final record);
  it used to evaluate on and report preempted False. The same command then finishes."""
  from rumjax import evaluators
  workdir = str(tmp_path / "run")
  config = _config()
  config.evals.final = evaluators.eval_entry("loss", "dev", every=0, batches=1)
  config.evals.last = evaluators.eval_entry("loss", "dev", every=0, batches=2)
  summary = training.train_and_evaluate(config, workdir, toy_task.TASK, stop=_LateStop(n))
  assert summary["preempted"] and summary["stop_reason"] == "preempted"
  assert summary["step"] == 10 and training.checkpoint.checkpoint_steps(workdir)[-1] == 10
  records = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
  assert not any(k.startswith(("final_", "last_")) for r in records for k in r)
  summary = training.train_and_evaluate(config, workdir, toy_task.TASK)
  assert not summary["preempted"] and summary["stop_reason"] == "num_steps"
  assert "final_loss" in summary and "last_loss" in summary


def test_metrics_after_the_last_checkpoint_are_set_aside_on_resume(tmp_path):
  """A run killed after its checkpoint at step 5 had written records for steps 6-7: the
  resumed run computes them again, so they go to metrics.discarded.jsonl, not twice."""
  workdir = str(tmp_path / "run")
  training.train_and_evaluate(_config(num_steps=5, log_every=1), workdir, toy_task.TASK)
  path = os.path.join(workdir, "metrics.jsonl")
  with open(path, "a") as f:
    f.write('{"step": 6, "train_loss": 1.0}\n{"step": 7, "train_loss": 1.0}\n{"step": 8, "tr')
  training.train_and_evaluate(_config(num_steps=8, log_every=1), workdir, toy_task.TASK)
  steps = [json.loads(line)["step"] for line in open(path)]
  assert steps == sorted(steps) and [s for s in steps if s > 5] == [6, 7, 8, 8]  # 8: final eval
  discarded = open(os.path.join(workdir, "metrics.discarded.jsonl")).read().splitlines()
  assert len(discarded) == 3 and discarded[-1] == '{"step": 8, "tr'


def test_drop_after_keeps_order_and_appends():
  import tempfile
  with tempfile.TemporaryDirectory() as d:
    path, aside = os.path.join(d, "m.jsonl"), os.path.join(d, "aside.jsonl")
    with open(path, "w") as f:
      f.write("".join(f'{{"step": {s}}}\n' for s in (1, 2, 3, 4)))
    assert writer_lib.drop_after(path, 2, aside) == 2
    assert writer_lib.drop_after(path, 2, aside) == 0
    assert [json.loads(x)["step"] for x in open(path)] == [1, 2]
    assert [json.loads(x)["step"] for x in open(aside)] == [3, 4]


def test_non_finite_without_a_checkpoint_says_so(tmp_path):
  with pytest.raises(training.NonFiniteError) as err:
    training.train_and_evaluate(_config(num_steps=12, nan_at_step=2), str(tmp_path / "n"),
                                toy_task.TASK)
  assert "step 2" in str(err.value) and "there is no checkpoint yet" in str(err.value)
  assert "None" not in str(err.value)


def test_without_flock_the_holder_record_decides(tmp_path, monkeypatch):
  """On a file system without flock (no fcntl, or flock failing with ENOLCK as on NFS without
  a lock daemon) the lock file's record decides: a dead pid on this host is taken over; a
  live pid, or any pid on another host, is refused naming the file to delete, and the
  record is kept."""
  dead = subprocess.Popen([sys.executable, "-c", "pass"])
  dead.wait()                                   # a pid that no longer runs
  here = socket.gethostname()

  class NoLocks:   # fcntl of a file system whose flock is not supported
    LOCK_EX, LOCK_NB = 2, 4

    @staticmethod
    def flock(fd, operation):
      raise OSError(errno.ENOLCK, "No locks available")

  for name, fcntl in (("none", None), ("enolck", NoLocks)):
    monkeypatch.setattr(workdir_lib, "fcntl", fcntl)
    for host, pid, busy in ((here, dead.pid, False), (here, os.getpid(), True),
                            ("elsewhere", dead.pid, True)):
      workdir = tmp_path / f"{name}_{host}_{pid}"
      workdir.mkdir()
      path = workdir / workdir_lib.LOCK_FILE
      path.write_text(json.dumps({"host": host, "pid": pid, "start": "2026-01-01"}))
      lock = training.WorkdirLock(str(workdir))
      if busy:
        with pytest.raises(training.WorkdirError, match=(
            rf"in use by another run \(host {host}, pid {pid}, .*no flock, so if that run "
            rf"is gone delete {re.escape(str(path))}")):
          lock.acquire()
        assert workdir_lib.holder(str(workdir))["pid"] == pid     # the record is kept
      else:
        with lock:
          assert workdir_lib.holder(str(workdir))["pid"] == os.getpid()
        assert workdir_lib.holder(str(workdir)) is None


def test_a_run_past_num_steps_is_refused_at_its_latest_checkpoint(tmp_path):
  """--steps below the latest checkpoint (checkpoints at 5 and 10, num_steps 7): a run does
  not go back; a one-line error naming step 10, and the workdir untouched."""
  workdir = str(tmp_path / "run")
  training.train_and_evaluate(_config(num_steps=10), workdir, toy_task.TASK)
  assert training.checkpoint.checkpoint_steps(workdir) == [5, 10]
  before = _snapshot(workdir)
  with pytest.raises(training.WorkdirError, match=r"holds a run at step 10, past num_steps=7 "
                                                  r"\(--steps\).* pass --steps=10 or more") as err:
    training.train_and_evaluate(_config(num_steps=7), workdir, toy_task.TASK)
  assert "\n" not in str(err.value)
  assert _snapshot(workdir) == before


def test_remove_unused_removes_only_what_a_refused_start_left(tmp_path):
  """What a refused start left in a workdir that was empty or new goes (an empty run.lock,
  empty folders; the folder itself only when it was new); nothing goes while run.lock names
  a holder (another run took the folder meanwhile), and a file with content stays."""
  taken = tmp_path / "taken"
  (taken / "checkpoints").mkdir(parents=True)
  (taken / workdir_lib.LOCK_FILE).write_text('{"host": "h", "pid": 1, "start": "s"}')
  assert workdir_lib.remove_unused(str(taken), remove_folder=True) == []
  assert sorted(os.listdir(taken)) == ["checkpoints", workdir_lib.LOCK_FILE]
  for was_new in (False, True):
    left = tmp_path / f"left_{was_new}"
    (left / "checkpoints" / "tmp").mkdir(parents=True)
    (left / workdir_lib.LOCK_FILE).write_text("")
    removed = workdir_lib.remove_unused(str(left), remove_folder=was_new)
    assert str(left / workdir_lib.LOCK_FILE) in removed and str(left / "checkpoints") in removed
    assert left.exists() != was_new and (was_new or not os.listdir(left))
  kept = tmp_path / "kept"
  (kept / "checkpoints").mkdir(parents=True)
  (kept / workdir_lib.LOCK_FILE).write_text("")
  (kept / "notes.txt").write_text("mine")
  workdir_lib.remove_unused(str(kept), remove_folder=True)
  assert os.listdir(kept) == ["notes.txt"] and (kept / "notes.txt").read_text() == "mine"


def test_a_workdir_without_checkpoints_takes_another_config(tmp_path):
  """config.json without a checkpoint (a run stopped before its first one) holds nothing to
  resume: a run with another config starts there, and its config.json replaces the old."""
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / "config.json").write_text(json.dumps(configs.as_json(_config(features=4))))
  summary = training.train_and_evaluate(_config(num_steps=2, features=5), str(workdir),
                                        toy_task.TASK)
  assert summary["step"] == 2
  assert json.loads((workdir / "config.json").read_text())["features"] == 5


def test_a_saved_value_of_an_added_field_is_never_replaced():
  """configs.fill_added_fields fills only what a saved config lacks: a saved learn_lam True
  against a new False, or an evaluator's saved batches_at_end 5 against a new None, stays a
  difference (a run that learned lam is not another run's resume)."""
  saved = {"seed": 0, "model": {"lam": 1.0, "learn_lam": True},
           "evals": {"eval": {"every": 5, "batches_at_end": 5}}}
  new = {"seed": 0, "model": {"lam": 1.0, "learn_lam": False},
         "evals": {"eval": {"every": 5, "batches_at_end": None}}}
  assert configs.fill_added_fields(saved, new) == saved
  assert configs.resume_differences(saved, new, may_change=()) == [
      ("evals.eval.batches_at_end", 5, None), ("model.learn_lam", True, False)]


def test_added_fields_hold_the_defaults_that_kept_the_old_behaviour():
  """configs.ADDED_FIELDS' values are what the tasks' configs hold by default (learn_lam off,
  no warm-up, default precision, ...): a saved run without the field resumes only when the
  new config keeps that value, so a wrong value there would refuse every old run."""
  import tasks
  seen = {}
  for name, variant in (("recall", None), ("ptb", None), ("ptb", "fs_rum2"),
                        ("summ_synthetic", None)):
    flat = configs._flat(configs.as_json(tasks.get_task(name).get_config(variant)))
    for path in configs.ADDED_FIELDS:
      if path in flat:
        seen.setdefault(path, set()).add(json.dumps(flat[path]))
  assert seen == {path: {json.dumps(value)} for path, value in configs.ADDED_FIELDS.items()}

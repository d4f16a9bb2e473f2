"""``python -m launch.evaluate`` end to end: a checkpoint's metrics equal the ones the
training run logged at that step, and bad input is a one-line error."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.test_launch import REPO, _env, _run


def _evaluate(*args):
  return subprocess.run([sys.executable, "-m", "launch.evaluate", *args], cwd=REPO,
                        env=_env(), capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("recall") / "run"
  _run(str(workdir), "--steps=2")
  return workdir


def test_metrics_equal_the_logged_final_evaluation(run):
  proc = _evaluate(f"--workdir={run}")
  assert proc.returncode == 0, proc.stderr[-3000:]
  metrics = json.loads(proc.stdout.strip().splitlines()[-1])
  logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
  final = [r for r in logged if r["step"] == 2 and "test_accuracy" in r][-1]
  assert metrics["step"] == 2
  for key in ("test_accuracy", "test_loss", "eval_accuracy"):
    assert metrics[key] == pytest.approx(final[key], rel=1e-6), key
  only_test = json.loads(_evaluate(f"--workdir={run}", "--evals=test").stdout.splitlines()[-1])
  assert "test_accuracy" in only_test and "eval_accuracy" not in only_test


@pytest.mark.parametrize("args,message", [
    (["--evals=tset"], "error: unknown evaluator(s) ['tset']; config.evals has"),
    (["--best"], "kept no best checkpoint"),
    (["--step=7"], "error: no checkpoint at step 7 in"),
    (["--config.learning_rat=1"], "unknown config field 'learning_rat'"),
    # The saved config replaced them silently (review: T50 gave T30's numbers).
    (["--variant=T50"], "error: --variant=T50, but the run in"),
    (["--task=copying"], "was trained with task 'recall' (its config.json); leave --task out."),
    # --config.task chose another task's code for the run's config: a raw KeyError.
    (["--config.task=copying"], "error: --config.task: the task chooses the config itself"),
])
def test_bad_input_is_one_line(run, args, message):
  proc = _evaluate(f"--workdir={run}", *args)
  assert proc.returncode != 0 and "Traceback" not in proc.stderr
  assert message in proc.stderr.strip().splitlines()[-1], proc.stderr[-2000:]


def test_a_workdir_without_config_says_the_real_problem_first(run, tmp_path):
  """Issue 46, item 5: an empty folder is no training run (passing --task would only lead
  to 'no checkpoints'); a missing folder is named; only checkpoints without config.json
  need --task (and --variant)."""
  (tmp_path / "empty").mkdir()
  (tmp_path / "a_file").write_text("x")
  shutil.copytree(run, tmp_path / "no_config")
  os.remove(tmp_path / "no_config" / "config.json")
  for folder, message in [
      ("empty", f"error: no training run in '{tmp_path / 'empty'}' (no checkpoints/ and no "
                "config.json); pass the --workdir of a training run."),
      ("missing", f"error: workdir '{tmp_path / 'missing'}' does not exist"),
      ("a_file", f"error: workdir '{tmp_path / 'a_file'}' is a file; pass the --workdir"),
      ("no_config", f"error: no {tmp_path / 'no_config' / 'config.json'}; pass --task")]:
    proc = _evaluate(f"--workdir={tmp_path / folder}")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(message), proc.stderr[-2000:]


def test_evaluation_reads_a_workdir_in_use_and_writes_nothing(run):
  """launch.evaluate is read-only: it does not need the run lock, works while a training
  run holds it, and leaves the workdir as it was."""
  from rumjax import training
  from tests.test_launch import _snapshot
  before = _snapshot(str(run))
  with training.WorkdirLock(str(run)):
    proc = _evaluate(f"--workdir={run}", "--evals=test")
    holding = _snapshot(str(run))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "test_accuracy" in json.loads(proc.stdout.strip().splitlines()[-1])
  assert {k: v for k, v in holding.items() if k != "run.lock"} == {
      k: v for k, v in before.items() if k != "run.lock"}


def test_a_cut_short_config_is_one_line_naming_the_file(run, tmp_path):
  """A truncated config.json gave json's traceback (launch.evaluate read it outside its
  try)."""
  shutil.copytree(run, tmp_path / "cut")
  path = tmp_path / "cut" / "config.json"
  path.write_text(path.read_text()[:40])
  proc = _evaluate(f"--workdir={tmp_path / 'cut'}")
  assert proc.returncode != 0 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1].startswith(
      f"error: {path} is not valid JSON ("), proc.stderr[-2000:]

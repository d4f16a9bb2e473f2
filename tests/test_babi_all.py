"""``launch.babi_all`` (:mod:`tasks.configs.babi` on :mod:`rumjax.experiments`) on the tiny
bAbI fixture of ``tests/test_task_babi.py``: one loop invocation per sub-task that stops
early by patience and keeps the best checkpoint, the test accuracy at the best dev step,
a missing sub-task, resuming, the wall-clock budget, and the table."""

import json
import os
import subprocess
import sys

import pytest

from rumjax import training, utils
from tasks import babi
from tasks.configs import babi as babi_configs
from tests.test_task_babi import _write_fixture

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
  base = tmp_path_factory.mktemp("babi_all")
  return babi_configs.Settings(
      cell="rum", lam=0, hidden_size=8, manual_dir=_write_fixture(base / "manual"),
      data_dir=str(base / "tfds"), eval_every=1, max_steps=40, patience=2,
      sets={"batch_size": 2, "model.embed_dim": 4, "log_every": 1})


@pytest.fixture(scope="module")
def run(settings, tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("run"))
  # Sub-task 2 has no files in the fixture: it is recorded as missing.
  return workdir, babi_configs.run_subtasks([1, 2], workdir, settings)


def test_early_stopping_by_patience_keeps_the_best(run, settings):
  workdir, out = run
  row = out["tasks"]["1"]
  # Dev (one question) has accuracy 0 or 1: it stops after 2 evaluations without a gain.
  assert row["stop_reason"] == "early_stopping" and row["steps"] < 40
  assert row["steps"] - row["best_step"] == 2 * settings.eval_every
  assert row["best_dev_accuracy"] in (0.0, 1.0) and 0.0 <= row["test_accuracy"] <= 1.0
  qa1 = os.path.join(workdir, "qa1")
  record = utils.read_json(os.path.join(qa1, "result.json"))
  assert record["status"] == "early_stopping" and len(record["invocations"]) == 1
  assert record["best_metrics"]["eval_accuracy"] == row["best_dev_accuracy"]
  state = utils.read_json(os.path.join(qa1, "early_stopping.json"))
  assert state["stopped"] and state["best_step"] == row["best_step"]
  # The best checkpoint, evaluated again, gives the test accuracy reported at that step.
  assert os.listdir(os.path.join(qa1, "best", "checkpoints")) == [str(row["best_step"])]
  config = babi_configs.subtask_config(1, settings)
  best = training.evaluate_checkpoint(config, os.path.join(qa1, "best"), babi,
                                      names=["eval", "test"])
  assert best["step"] == row["best_step"]
  assert best["test_accuracy"] == pytest.approx(row["test_accuracy"])
  assert best["eval_accuracy"] == pytest.approx(row["best_dev_accuracy"])
  # Dev and test were evaluated at every step up to the stop.
  records = utils.read_jsonl(os.path.join(qa1, "metrics.jsonl"))
  steps = list(range(1, row["steps"] + 1))
  assert sorted({r["step"] for r in records if "test_accuracy" in r}) == steps


def test_results_and_table(run, settings):
  workdir, out = run
  error = out["tasks"]["2"]["error"]
  assert "missing file(s)" in error and "qa2_two-supporting-facts_train.txt" in error
  assert out["mean_test_accuracy"] == out["tasks"]["1"]["test_accuracy"]
  assert out["paper_table2_mean"] == 73.2 and out["settings"]["patience"] == 2
  assert utils.read_json(os.path.join(workdir, "results.json")) == json.loads(
      json.dumps(out))
  table = babi_configs.format_table(out["tasks"], settings.header(), settings.paper_mean())
  assert table.splitlines()[0] == "bAbI en-10k, word level, rum lam=0 hidden 8"
  assert "missing data" in table and "early_stopping" in table
  assert "mean test accuracy over 1 sub-task(s)" in table
  assert "Table 2 mean over all 20 sub-tasks for this set-up: 73.2%." in table


def test_resume_does_not_train_again(run, settings):
  workdir, out = run
  metrics = os.path.join(workdir, "qa1", "metrics.jsonl")
  lines = len(utils.read_jsonl(metrics))
  again = babi_configs.run_subtasks([1], workdir, settings)
  assert again["tasks"]["1"] == out["tasks"]["1"]
  assert len(utils.read_jsonl(metrics)) == lines
  record = utils.read_json(os.path.join(workdir, "qa1", "result.json"))
  assert len(record["invocations"]) == 1


def test_budget(settings, tmp_path):
  tight = babi_configs.Settings(**{**settings.__dict__, "budget_minutes": 1e-5,
                                   "patience": 100})
  row = babi_configs.run_subtasks([1], str(tmp_path), tight)["tasks"]["1"]
  assert row["stop_reason"] == "budget" and row["steps"] == 1 and row["best_step"] == 1
  with pytest.raises(ValueError, match="patience=0"):
    babi_configs.run_subtasks([1], str(tmp_path), babi_configs.Settings(patience=0))
  with pytest.raises(ValueError, match=r"sub-tasks \[21\]"):
    babi_configs.run_subtasks([21], str(tmp_path), settings)


def test_paper_numbers():
  assert babi_configs.paper_mean("word", "rum", 0, False) == 73.2
  assert babi_configs.paper_mean("sentence", "lstm", 1, True) == 80.1   # lam ignored
  assert babi_configs.paper_mean("word", "rum", 1, False) is None
  assert len(babi_configs.PAPER_RUM_WORD) == 20
  config = babi_configs.subtask_config(4, babi_configs.Settings(
      level="sentence", attention=True, lam=1))
  assert config.model.name == "sentence_qa" and config.model.attention
  assert (config.babi_task, config.model.lam, config.eval_every) == (4, 1, 282)
  assert config.num_steps == 20 * 282 and config.evals.test.every == 282


def test_command_line_error(tmp_path):
  proc = subprocess.run(
      [sys.executable, "-m", "launch.babi_all", f"--workdir={tmp_path}", "--tasks=0"],
      cwd=REPO, env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True,
      text=True, timeout=300)
  assert proc.returncode != 0 and "sub-tasks [0] are not in 1..20" in proc.stderr

"""``launch.reproduce`` (:mod:`rumjax.experiments` with the experiments of
:mod:`tasks.experiments`) with tiny settings: one copying and one recall experiment with two
models each, in-process (the code path of the CLI); resuming, the wall-clock budget, the
plots from checkpoints, and the command lines."""

import dataclasses
import glob
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import tasks
from tasks import clue as clue_task
from tasks import copying as copying_task
from rumjax import analysis, experiments, plotting, training, utils
from tasks.experiments import EXPERIMENTS
from tasks.experiments import ptb as ptb_experiments
from tasks.experiments import recall as recall_configs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MODELS = ["rum_lam1", "gru"]
TINY = experiments.Options(tiny=True, steps=3, eval_every=2, log_every=1)


def _assert_png(path):
  assert os.path.exists(path), path
  with open(path, "rb") as f:
    head = f.read(8)
  assert head == PNG_MAGIC, path
  assert os.path.getsize(path) > 5000, path   # a drawn figure, not an empty canvas


def _lines(path):
  with open(path) as f:
    return f.read().splitlines()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("repro"))
  lines = []
  out = {name: experiments.run_experiment(EXPERIMENTS[name], root, MODELS, TINY,
                                          log=lines.append)
         for name in ("copying_T200", "recall_T30")}
  return root, out, lines


def _check_common(root, summary, name):
  assert summary["experiment"] == name and summary["variant"] == name.split("_")[1]
  assert list(summary["models"]) == MODELS
  hw = summary["hardware"]
  assert hw["platform"] == "cpu" and hw["cpu_count"] >= 1
  for key, r in summary["models"].items():
    assert r["model"] == key and r["label"] == experiments.tiny_label(
        EXPERIMENTS[name].models[key][0], experiments.model_config(
            EXPERIMENTS[name], key).model.hidden_size, 8)
    assert (r["steps"], r["target_steps"], r["status"], r["error"]) == (3, 3, "ok", None)
    assert r["tiny"] and r["config"]["model"]["hidden_size"] == 8 and r["num_params"] > 0
    assert r["config"]["num_steps"] == 3 and r["config"]["eval_every"] == 2
    assert r["wall_sec_total"] > 0 and r["cpu_sec_total"] > 0
    assert [(i["steps_from"], i["steps_to"], i["status"]) for i in r["invocations"]] == [
        (0, 3, "ok")]
    assert r["hardware"]["cpu_count"] == hw["cpu_count"]
    assert 0.0 <= r["metrics"]["test_accuracy"] <= 1.0
    assert np.isfinite(r["metrics"]["test_loss"]) and r["metrics"]["test_loss"] > 0
    assert np.isfinite(r["metrics"]["train_loss"])
    model_dir = os.path.join(root, name, key)
    for f in ("config.json", "metrics.jsonl", "params.npz", "result.json"):
      assert os.path.exists(os.path.join(model_dir, f)), f
    # One loop invocation, compiled once: checkpoints every eval_every steps and at the end.
    assert analysis.checkpoint_steps(model_dir) == [2, 3]
  with open(os.path.join(root, name, "results.json")) as f:
    on_disk = json.load(f)
  assert on_disk["models"].keys() == summary["models"].keys()
  assert on_disk["models"]["gru"]["metrics"] == summary["models"]["gru"]["metrics"]
  _assert_png(os.path.join(root, name, f"{name}.png"))
  with open(os.path.join(root, name, "results.md")) as f:
    table = f.read()
  assert f"### {name}" in table and "| ok |" in table
  for r in summary["models"].values():
    assert f"| {r['label']} | {r['num_params']} | 3 |" in table


def test_copying(runs):
  root, out, lines = runs
  summary = out["copying_T200"]
  _check_common(root, summary, "copying_T200")
  baseline = copying_task.memoryless_baseline(10)   # --tiny: delay 10
  for r in summary["models"].values():
    assert r["metrics"]["test_memoryless_baseline"] == pytest.approx(baseline)
    assert r["paper"]["note"]
    # The test set (the periodic evaluator) at step 2 and at the end.
    records = analysis.read_jsonl(os.path.join(root, "copying_T200", r["model"],
                                               "metrics.jsonl"))
    assert [x["step"] for x in records if "test_accuracy" in x] == [2, 3]
  assert summary["models"]["gru"]["config"]["model"]["cell"] == "gru"
  with open(os.path.join(root, "copying_T200", "results.md")) as f:
    table = f.read()
  assert f"Memoryless baseline: {baseline:.4f}." in table
  # Issue 46, item 8: the tiny model (hidden 8) is not labelled with the paper's size.
  assert "| RUM 8 λ=1 η=N/A (tiny) |" in table and "RUM 100" not in table
  assert "| GRU 8 (tiny) |" in table
  assert "stays at the memoryless baseline" in table
  logged = [json.loads(line) for line in lines]
  assert [(x["experiment"], x["model"], x["status"]) for x in logged] == [
      ("copying_T200", "rum_lam1", "ok"), ("copying_T200", "gru", "ok"),
      ("recall_T30", "rum_lam1", "ok"), ("recall_T30", "gru", "ok")]
  assert all("test_accuracy" in x for x in logged)


def test_recall(runs):
  root, out, _ = runs
  summary = out["recall_T30"]
  _check_common(root, summary, "recall_T30")
  rum, gru = summary["models"]["rum_lam1"], summary["models"]["gru"]
  assert rum["paper"] == {"test_accuracy_pct": 100.0, "params": "13k"}
  assert gru["paper"]["test_accuracy_pct"] == 21.5
  assert rum["config"]["model"]["lam"] == 1 and rum["config"]["model"]["eta"] is None
  # Dev on at most --eval_batches_during batches every eval_every steps; test at the end.
  assert rum["config"]["evals"]["eval"]["batches"] == 8
  assert rum["config"]["evals"]["test"] == {**rum["config"]["evals"]["test"], "every": 0,
                                            "batches": 0}
  assert {"eval_accuracy", "test_accuracy", "test_loss"} <= set(rum["metrics"])
  records = analysis.read_jsonl(os.path.join(root, "recall_T30", "rum_lam1",
                                             "metrics.jsonl"))
  assert [x["step"] for x in records if "eval_accuracy" in x] == [2, 3]
  assert [x["step"] for x in records if "test_accuracy" in x] == [3]


@pytest.mark.parametrize("name,length", [("copying_T200", 30), ("recall_T30", 9)])
def test_rum_outputs_and_plot(runs, tmp_path, name, length):
  root, _, _ = runs
  model_dir = os.path.join(root, name, "rum_lam1")
  _assert_png(os.path.join(model_dir, "kernel_tau.png"))
  _assert_png(os.path.join(model_dir, "cos_theta.png"))
  # cos(theta) per time step: at the start, every eval_every steps and at the end.
  rows = [json.loads(line) for line in _lines(os.path.join(model_dir, "cos_theta.jsonl"))]
  assert [r["step"] for r in rows] == [0, 2, 3]
  for r in rows:
    cos = np.asarray(r["cos_mean"])
    assert cos.shape == (length,) and np.all(np.abs(cos) <= 1.0 + 1e-6)
  assert not np.allclose(rows[0]["cos_mean"], rows[2]["cos_mean"])   # training moved it
  assert not os.path.exists(os.path.join(root, name, "gru", "cos_theta.jsonl"))
  # The checkpoints give the same cos(theta) as recorded during training.
  recorded = analysis.read_cos_records(model_dir)
  with open(os.path.join(model_dir, "config.json")) as f:
    config = json.load(f)
  from_ckpt = analysis.cos_from_checkpoints(model_dir, tasks.get_task(config["task"]),
                                            config)
  assert sorted(from_ckpt) == [2, 3]
  for step in (2, 3):
    np.testing.assert_allclose(from_ckpt[step], recorded[step], atol=1e-5)
  step, params = analysis.load_checkpoint_params(model_dir)
  _, npz = analysis.load_params(os.path.join(model_dir, "params.npz"))
  assert step == 3
  kernel = analysis.target_kernel(analysis.find_rum_params(params)[1])
  assert kernel.shape == (8, 8)
  np.testing.assert_array_equal(kernel, npz["rnn"]["cell"]["kernel_h"][:, :8])
  # launch.plot's function on a chosen checkpoint (instead of params.npz), elsewhere.
  paths = plotting.plot_rum_model(model_dir, out_dir=str(tmp_path), step=2)
  assert [os.path.basename(p) for p in paths] == ["kernel_tau.png", "cos_theta.png"]
  for p in paths:
    _assert_png(p)


def test_resume_when_finished_does_nothing(runs):
  root, out, _ = runs
  model_dir = os.path.join(root, "recall_T30", "rum_lam1")
  files = ("result.json", "metrics.jsonl", "cos_theta.jsonl")
  before = {f: _lines(os.path.join(model_dir, f)) for f in files}
  lines = []
  again = experiments.run_experiment(EXPERIMENTS["recall_T30"], root, MODELS, TINY,
                                     log=lines.append)
  for f in files:
    assert _lines(os.path.join(model_dir, f)) == before[f], f
  for key in MODELS:
    assert again["models"][key]["invocations"] == out["recall_T30"]["models"][key][
        "invocations"]
  assert analysis.checkpoint_steps(model_dir) == [2, 3]
  assert [json.loads(line)["steps"] for line in lines] == [3, 3]


def test_a_file_as_workdir_is_a_one_line_error(tmp_path):
  (tmp_path / "a_file").write_text("keep")
  with pytest.raises(ValueError, match="is a file, not a folder"):
    experiments.run_experiment(EXPERIMENTS["recall_T30"], str(tmp_path / "a_file"), ["gru"],
                               experiments.Options(tiny=True), log=lambda _: None)
  assert (tmp_path / "a_file").read_text() == "keep"


def test_resume_budget_and_divergence(tmp_path, monkeypatch):
  root, exp = str(tmp_path), EXPERIMENTS["recall_T30"]
  run = lambda **kw: experiments.run_experiment(
      exp, root, ["gru"], experiments.Options(tiny=True, eval_every=2, **kw),
      log=lambda _: None)["models"]["gru"]
  r = run(steps=2)
  assert (r["steps"], r["status"]) == (2, "ok")
  # A tiny budget: one more step, then the final evaluation, status "budget".
  r = run(steps=50, budget_minutes=1e-5)
  assert (r["steps"], r["target_steps"], r["status"]) == (3, 50, "budget")
  assert [(i["steps_from"], i["steps_to"], i["status"], i["budget_minutes"])
          for i in r["invocations"]] == [(0, 2, "ok", None), (2, 3, "budget", 1e-5)]
  assert 0.0 <= r["metrics"]["test_accuracy"] <= 1.0
  assert r["wall_sec_total"] == pytest.approx(sum(i["wall_sec"] for i in r["invocations"]))
  # A budget stop is resumed: on to the target.
  r = run(steps=4)
  assert (r["steps"], r["status"], len(r["invocations"])) == (4, "ok", 3)
  with open(os.path.join(root, "recall_T30", "results.md")) as f:
    assert "| GRU (tiny) |" in f.read()
  # A non-finite loss: status "diverged", the error, and the final evaluators' metrics of
  # the last good checkpoint.
  def diverge(*args, **kwargs):
    raise training.NonFiniteError("non-finite loss or gradient at step 5")
  monkeypatch.setattr(training, "train_and_evaluate", diverge)
  r = run(steps=8)
  assert (r["steps"], r["status"]) == (4, "diverged") and "step 5" in r["error"]
  assert {"eval_accuracy", "test_accuracy"} <= set(r["metrics"])


def test_clue_tnews_ablations_are_starsabers_set_up():
  """Tables 5-7's variants: clue_tnews's StarSaber config but for the model's name, the
  same pretraining, and the paper's dev accuracies (Test acc(Dev acc) in the paper)."""
  abl, base = EXPERIMENTS["clue_tnews_ablations"], EXPERIMENTS["clue_tnews"]
  ref = experiments.model_config(base, "starsaber").to_dict()
  for key in ("starsaber_gate", "starsaber_pe", "starsaber_nodirect"):
    cfg = experiments.model_config(abl, key).to_dict()
    assert cfg["model"].pop("name") == key and ref["model"]["name"] == "starsaber"
    assert cfg["model"] == {k: v for k, v in ref["model"].items() if k != "name"}
    assert {k: v for k, v in cfg.items() if k != "model"} == {
        k: v for k, v in ref.items() if k != "model"}
    assert abl.pretraining.sets[key] == base.pretraining.sets["starsaber"]
  assert [abl.paper[k]["dev_accuracy"] for k in abl.models] == [53.04, 52.13, 52.31]


def test_clue_afqmc_balanced_is_clue_afqmc_with_the_class_weighted_loss():
  """Issue 47: the same models, phases and pretraining as ``clue_afqmc``; fine-tuning
  differs only in ``class_weights``; the table adds the balanced accuracy (the mean of
  the two recalls at the best checkpoint)."""
  from tasks.experiments import clue as clue_exp
  base, bal = EXPERIMENTS["clue_afqmc"], EXPERIMENTS["clue_afqmc_balanced"]
  assert list(bal.models) == list(base.models) and bal.paper == base.paper
  for key in base.models:
    cfg, ref = (experiments.model_config(e, key).to_dict() for e in (bal, base))
    assert (cfg.pop("class_weights"), ref.pop("class_weights")) == ("balanced", "none")
    assert cfg == ref
    pre, pre_ref = (experiments.pretrain_config(e, key) for e in (bal, base))
    assert (pre is None) == (pre_ref is None)
    if pre is not None:   # the MLM phase ignores class_weights
      assert pre.objective == "mlm" and pre.learning_rate == pre_ref.learning_rate
  record = {"best_metrics": {"eval_recall": 0.25, "eval_recall_0": 0.75}}
  assert clue_exp._balanced_accuracy(record) == 50.0
  assert clue_exp._balanced_accuracy({"best_metrics": {"eval_recall": 0.2}}) is None
  assert [c.header for c in bal.columns][-2:] == ["balanced acc. (%)", "paper dev (%)"]
  assert any("Not the paper's set-up" in line for line in bal.notes({"models": {}}))


def test_configs_of_the_paper():
  assert sorted(EXPERIMENTS) == ["char_ptb_ablations", "char_ptb_equal_params", "clue_afqmc",
                                 "clue_afqmc_balanced", "clue_tnews", "clue_tnews_ablations",
                                 "copying_T1000", "copying_T200", "copying_T500",
                                 "lam_copying", "lam_recall_T30", "recall_T30", "recall_T50",
                                 "sst_binary", "sst_fine", "summ_synthetic",
                                 "summ_synthetic_hard"]
  copying = EXPERIMENTS["copying_T500"]
  assert list(copying.models) == ["rum_lam1", "rum_lam1_eta1", "rum_lam0", "lstm", "gru",
                                  "urnn", "eurnn", "goru"]   # sec. 4.1's models
  cfg = {k: experiments.model_config(copying, k) for k in copying.models}
  assert cfg["urnn"].model.cell == "urnn" and cfg["urnn"].model.hidden_size == 250
  assert cfg["rum_lam1"].model.hidden_size == 100 and cfg["rum_lam0"].model.hidden_size == 250
  assert cfg["rum_lam1_eta1"].model.eta == 1.0 and cfg["rum_lam1"].model.eta is None
  assert cfg["eurnn"].learning_rate == 1e-4 and cfg["gru"].learning_rate == 1e-3
  assert all(c.delay == 500 and c.batch_size == 128 and c.num_steps == 10_000
             and c.checkpoint_every == c.eval_every == 250 for c in cfg.values())
  recall = EXPERIMENTS["recall_T50"]
  cfg = {k: experiments.model_config(recall, k) for k in recall.models}
  assert set(cfg) == set(recall_configs.TABLE1)
  assert all(c.model.hidden_size == 50 and c.length == 50 for c in cfg.values())
  assert cfg["fwln"].model.cell == "fwln" and cfg["rum_lam0"].model.lam == 0
  assert recall.paper["rum_lam1_eta1"] == {"test_accuracy_pct": 83.7, "params": "13k"}
  options = experiments.Options(steps=7, eval_every=5, seed=3, eval_batches_during=2,
                                sets=experiments.parse_overrides(["model.eta=1.0"]))
  c = experiments.model_config(recall, "gru", options)
  assert (c.num_steps, c.eval_every, c.checkpoint_every, c.seed) == (7, 5, 5, 3)
  assert c.model.eta == 1.0 and c.evals.eval.every == 5 and c.evals.eval.batches == 2
  assert experiments.parse_overrides(["learning_rate=3e-3", "model.eta=None",
                                      "model.cell=gru"]) == {
      "learning_rate": 3e-3, "model.eta": None, "model.cell": "gru"}
  with pytest.raises(ValueError, match="unknown config field 'nope'"):
    experiments.model_config(recall, "gru", experiments.Options(sets={"nope": 1}))
  # A value of another type was a TypeError traceback from ml_collections (review).
  with pytest.raises(ValueError, match=r"^model.eta='abc' is not of the field's type "
                                       r"\(float; now None\)\.$"):
    experiments.model_config(recall, "gru", experiments.Options(
        sets=experiments.parse_overrides(["model.eta=abc"])))
  # A --set of a field the run's options set was silently replaced (log_every 100 -> 10).
  for sets, flag in [({"log_every": 100}, "--log_every"), ({"checkpoint_every": 7},
                     "--eval_every"), ({"keep_checkpoints": 5}, "--keep_checkpoints"),
                     ({"num_steps": 9}, "--steps"), ({"seed": 1}, "--seed")]:
    with pytest.raises(ValueError, match=rf"^--set={list(sets)[0]}=\d+ would be replaced by "
                       rf"the run's {flag}"):
      experiments.model_config(recall, "gru", dataclasses.replace(options, sets=sets))
  # A --set that changes a model's own field: its row kept the label (review: the docstring's
  # --set=model.eta=1.0 trained "RUM λ=1 η=N/A" with η=1.0); the same value, or another
  # model without that field, is fine.
  with pytest.raises(ValueError, match=r"^--set=model.eta=1.0 changes what model 'rum_lam1' "
                                       r"\(RUM .*\) is: its entry sets model.eta=None"):
    experiments.model_config(recall, "rum_lam1", experiments.Options(sets={"model.eta": 1.0}))
  assert experiments.model_config(recall, "rum_lam1", experiments.Options(
      sets={"model.eta": None})).model.eta is None
  assert experiments.model_config(recall, "gru", experiments.Options(
      sets={"model.eta": 1.0})).model.eta == 1.0
  assert experiments.model_config(recall, "rum_lam1", experiments.Options(   # a smoke test
      tiny=True, sets={"model.hidden_size": 6})).model.hidden_size == 6
  with pytest.raises(ValueError, match=r"^--set=model.eta=1.0 changes what model"):
    experiments.model_config(recall, "rum_lam1", experiments.Options(
        tiny=True, sets={"model.eta": 1.0}))   # the review's command: --tiny kept the label
  # Without its option a field may be set (the config's num_steps and seed are kept).
  c = experiments.model_config(recall, "gru", experiments.Options(sets={"num_steps": 9,
                                                                         "seed": 4}))
  assert (c.num_steps, c.seed) == (9, 4)
  with pytest.raises(ValueError, match="unknown model"):
    experiments.select_models(recall, ["rum_lam7"])
  with pytest.raises(ValueError, match="budget_minutes=0"):
    experiments.check_options(experiments.Options(budget_minutes=0))


@pytest.mark.slow   # ~95 s: four real-lam models end to end
def test_lam_sweep_reports_the_learned_lam_and_draws_it(tmp_path):
  """The real-lam sweep (issue 29): the fixed lams and the learned one train through the
  runner; the learned lam's final value is a column and its trajectory is in the figure."""
  exp = EXPERIMENTS["lam_copying"]
  assert list(exp.models) == ["rum_lam0", "rum_lam025", "rum_lam05", "rum_lam075", "rum_lam1",
                              "rum_learn_lam"]
  assert experiments.model_config(exp, "rum_lam025").model.lam == 0.25
  learned = experiments.model_config(exp, "rum_learn_lam").model
  assert learned.learn_lam and learned.lam == 0.5 and learned.hidden_size == 50
  summary = experiments.run_experiment(
      exp, str(tmp_path), ["rum_lam05", "rum_lam1", "rum_learn_lam"],
      experiments.Options(tiny=True, steps=3, eval_every=2, log_every=1), log=lambda _: None)
  records = summary["models"]
  lam = records["rum_learn_lam"]["metrics"]["params/rnn/cell/lam"]
  assert lam >= 0 and lam != 0.5
  assert "params/rnn/cell/lam" not in records["rum_lam05"]["metrics"]
  table = open(tmp_path / "lam_copying" / "results.md").read()
  assert f"{lam:.3f}" in table
  _assert_png(tmp_path / "lam_copying" / "lam_copying.png")
  recall = experiments.run_experiment(
      EXPERIMENTS["lam_recall_T30"], str(tmp_path), ["rum_lam05"],
      experiments.Options(tiny=True, steps=2, eval_every=2, log_every=1), log=lambda _: None)
  assert recall["models"]["rum_lam05"]["config"]["model"]["lam"] == 0.5
  assert "test_accuracy" in recall["models"]["rum_lam05"]["metrics"]


def test_command_lines(runs, tmp_path):
  root, _, _ = runs
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run(
      [sys.executable, "-m", "launch.plot", f"--workdir={root}/recall_T30",
       f"--out_dir={tmp_path}"], cwd=REPO, env=env, capture_output=True, text=True,
      timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  _assert_png(os.path.join(tmp_path, "kernel_tau.png"))   # one RUM model in the folder
  # Another model's folder: its figures were replaced (review); an existing PNG elsewhere
  # needs --overwrite.
  for out, message in [(f"{root}/recall_T30/gru", "the folder of a run (it holds "),
                       (str(tmp_path), "kernel_tau.png already exists; pass --overwrite")]:
    proc = subprocess.run(
        [sys.executable, "-m", "launch.plot", f"--workdir={root}/recall_T30",
         f"--out_dir={out}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and message in proc.stderr.strip().splitlines()[-1], (
        proc.stderr[-2000:])
  assert not os.path.exists(f"{root}/recall_T30/gru/kernel_tau.png")
  proc = subprocess.run(
      [sys.executable, "-m", "launch.plot", f"--workdir={root}/recall_T30",
       f"--out_dir={tmp_path}", "--overwrite"], cwd=REPO, env=env, capture_output=True,
      text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  proc = subprocess.run(
      [sys.executable, "-m", "launch.plot", f"--workdir={root}/recall_T30",
       f"--out_dir={tmp_path / 'step'}", "--step=99999"], cwd=REPO, env=env,
      capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1].startswith(
      "error: no checkpoint found at step 99999"), proc.stderr[-2000:]
  proc = subprocess.run(
      [sys.executable, "-m", "launch.reproduce", "--experiment=recall_T30",
       f"--workdir={tmp_path}", "--models=rum_lam9"], cwd=REPO, env=env,
      capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0 and "unknown model(s) ['rum_lam9']" in proc.stderr
  proc = subprocess.run(   # the second experiment's --models: before the first trains
      [sys.executable, "-m", "launch.reproduce", "--experiment=recall_T30,sst_binary",
       f"--workdir={tmp_path / 'two'}", "--models=gru", "--tiny", "--steps=3"], cwd=REPO,
      env=env, capture_output=True, text=True, timeout=300)
  assert proc.stderr.strip().splitlines()[-1].startswith(
      "error: unknown model(s) ['gru'] for sst_binary"), proc.stderr[-2000:]
  assert not (tmp_path / "two").exists()
  for flag, message in [   # a --set only the second lacks; a --pretrain_steps nobody uses
      ("--set=length=12", "error: unknown config field 'length'"),
      ("--pretrain_steps=5", "error: --pretrain_steps=5: no selected model of "
                             "recall_T30,copying_T200 pretrains")]:
    proc = subprocess.run(
        [sys.executable, "-m", "launch.reproduce", "--experiment=recall_T30,copying_T200",
         f"--workdir={tmp_path / 'two'}", "--models=gru", "--tiny", "--steps=3", flag],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.stderr.strip().splitlines()[-1].startswith(message), proc.stderr[-2000:]
    assert not (tmp_path / "two").exists()
  proc = subprocess.run(   # an empty --experiment (an unset shell variable) did nothing
      [sys.executable, "-m", "launch.reproduce", "--experiment=", f"--workdir={tmp_path}"],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1].startswith(
      "error: --experiment is empty; name one or more of ["), proc.stderr[-2000:]


# ------------------------------------------------------------------------- seeds


def test_seeds_mean_std_and_resume(tmp_path):
  """``Options.seeds``: every model once per seed in ``<model>/seed<k>/``; the summary and
  the table give mean ± sample std over the seeds; re-running trains nothing. (Two seeds
  keep the test short; :func:`test_seed_options_and_aggregation` checks the statistics.)"""
  root, exp = str(tmp_path), EXPERIMENTS["recall_T30"]
  options = experiments.Options(tiny=True, steps=2, eval_every=2, log_every=1,
                                seeds=(3, 0))
  lines = []
  summary = experiments.run_experiment(exp, root, ["gru"], options, log=lines.append)
  assert summary["seeds"] == [3, 0] and list(summary["models"]) == ["gru"]
  r = summary["models"]["gru"]
  assert (r["seeds"], r["n"], r["steps"], r["status"]) == ([3, 0], 2, 2, "ok")
  assert r["paper"]["test_accuracy_pct"] == 21.5 and r["label"] == "GRU (tiny)"
  exp_dir = os.path.join(root, "recall_T30")
  assert not os.path.exists(os.path.join(exp_dir, "gru", "result.json"))
  runs = [r["runs"][str(s)] for s in (3, 0)]
  for seed, run in zip((3, 0), runs):
    assert run["config"]["seed"] == seed and run["seed"] == seed
    on_disk = os.path.join(exp_dir, "gru", f"seed{seed}")
    assert analysis.checkpoint_steps(on_disk) == [2]
    with open(os.path.join(on_disk, "result.json")) as f:
      assert json.load(f)["metrics"] == run["metrics"]
    assert run["evals"] == experiments.eval_history(on_disk) and "2" in run["evals"]
  assert runs[0]["metrics"]["train_loss"] != runs[1]["metrics"]["train_loss"]
  for name in ("train_loss", "test_loss", "test_accuracy"):
    values = [run["metrics"][name] for run in runs]
    assert r["metrics"][name] == pytest.approx(np.mean(values))
    assert r["metrics_std"][name] == pytest.approx(np.std(values, ddof=1))
  assert r["wall_sec_total"] == pytest.approx(sum(x["wall_sec_total"] for x in runs),
                                              abs=0.2)
  assert [(x["model"], x["seed"]) for x in map(json.loads, lines)] == [
      ("gru", 3), ("gru", 0)]
  with open(os.path.join(exp_dir, "results.md")) as f:
    table = f.read()
  acc = 100 * np.array([run["metrics"]["test_accuracy"] for run in runs])
  assert "Seeds 3, 0: mean ± sample standard deviation" in table
  assert "| model | params | steps | wall (min) | n |" in table
  row = next(line for line in table.splitlines() if line.startswith("| GRU (tiny) |"))
  assert f"| 2 | {r['wall_sec_total'] / 120:.1f} | 2 |" in row
  assert f"| {acc.mean():.1f} ± {acc.std(ddof=1):.1f} | 21.5 | ok |" in row
  with open(os.path.join(exp_dir, "results.json")) as f:
    assert json.load(f)["models"]["gru"]["metrics_std"] == r["metrics_std"]
  _assert_png(os.path.join(exp_dir, "recall_T30.png"))
  curves = experiments.metric_curves(exp_dir, summary, ("train_loss",))
  assert list(curves) == ["GRU (tiny) s3", "GRU (tiny) s0"]
  # Re-running the same command trains nothing; a subset of the seeds reports n = 1.
  before = {s: _lines(os.path.join(exp_dir, "gru", f"seed{s}", "metrics.jsonl"))
            for s in (3, 0)}
  again = experiments.run_experiment(exp, root, ["gru"], options, log=lambda _: None)
  assert again["models"]["gru"]["runs"] == r["runs"]
  for s in (3, 0):
    assert _lines(os.path.join(exp_dir, "gru", f"seed{s}", "metrics.jsonl")) == before[s]
  summary = experiments.experiment_summary(exp, exp_dir, seeds=[0, 7])
  assert summary["models"]["gru"]["n"] == 1
  assert summary["models"]["gru"]["metrics_std"]["test_loss"] is None


def test_one_seed_keeps_the_single_run_layout(tmp_path):
  root, exp = str(tmp_path), EXPERIMENTS["recall_T30"]
  options = experiments.Options(tiny=True, steps=1, eval_every=1, log_every=1, seeds=[5])
  summary = experiments.run_experiment(exp, root, ["gru"], options, log=lambda _: None)
  r = summary["models"]["gru"]
  assert "seeds" not in summary and "runs" not in r and "metrics_std" not in r
  assert r["config"]["seed"] == 5 and r["seed"] == 5 and r["steps"] == 1
  assert os.path.exists(os.path.join(root, "recall_T30", "gru", "result.json"))
  assert not os.path.exists(os.path.join(root, "recall_T30", "gru", "seed5"))
  with open(os.path.join(root, "recall_T30", "results.md")) as f:
    table = f.read()
  assert "| model | params | steps | wall (min) | params (paper) |" in table
  assert "±" not in table
  # A finished run called again with another --eval_every trains nothing and keeps the
  # config its steps were trained with (review: result.json said eval_every 2).
  again = experiments.run_experiment(exp, root, ["gru"], dataclasses.replace(
      options, eval_every=2), log=lambda _: None)["models"]["gru"]
  assert again["config"]["eval_every"] == 1 and len(again["invocations"]) == 2
  assert again["invocations"][1]["steps_from"] == again["invocations"][1]["steps_to"] == 1
  # Adding seeds later trains only the new ones: seed 5 stays in the single-run folder.
  single = os.path.join(root, "recall_T30", "gru")
  before = _lines(os.path.join(single, "metrics.jsonl"))
  # Another seed alone would be a second run in that folder: refused, saying how to add it.
  with pytest.raises(training.WorkdirError, match="holds a run of seed 5, not 6: .*--seeds=5,6"):
    experiments.run_experiment(exp, root, ["gru"], dataclasses.replace(options, seeds=[6]),
                               log=lambda _: None)
  assert _lines(os.path.join(single, "metrics.jsonl")) == before
  options = dataclasses.replace(options, seeds=[5, 6])
  summary = experiments.run_experiment(exp, root, ["gru"], options, log=lambda _: None)
  r = summary["models"]["gru"]
  assert r["n"] == 2 and sorted(r["runs"]) == ["5", "6"]
  assert _lines(os.path.join(single, "metrics.jsonl")) == before
  assert experiments.seed_dir(os.path.join(root, "recall_T30"), "gru", 5) == single
  curves = experiments.metric_curves(os.path.join(root, "recall_T30"), summary, ("train_loss",))
  assert [len(c["train_loss"][0]) for c in curves.values()] == [1, 1]   # both seeds' logs
  assert r["runs"]["6"]["config"]["seed"] == 6
  assert os.path.exists(os.path.join(single, "seed6", "result.json"))
  assert not os.path.exists(os.path.join(single, "seed5"))
  # One seed again (5, or 6): refused before anything trains or results.json loses the
  # means (seed 6 was trained again into gru/ and the table lost its n and ±).
  results = _lines(os.path.join(root, "recall_T30", "results.json"))
  for seed in (5, 6):
    with pytest.raises(training.WorkdirError, match=r"holds the runs of seeds 5, 6 .*"
                       r"pass --seeds=5,6 again"):
      experiments.run_experiment(exp, root, ["gru"], dataclasses.replace(options, seeds=None,
                                                                         seed=seed),
                                 log=lambda _: None)
  assert _lines(os.path.join(root, "recall_T30", "results.json")) == results
  assert _lines(os.path.join(single, "metrics.jsonl")) == before


@pytest.mark.slow   # ~20 s: trains; test_the_summary_reports_every_model_on_disk is the fast one
def test_a_run_of_some_models_keeps_the_others_however_they_ran(tmp_path):
  """Running a further model never drops another's rows from ``results.json``,
  ``results.md`` or the figure: a model of several seeds beside one of a single run (the
  reviewer's ``--models=gru --seeds=1,2`` then ``--models=rum_lam1``), in either order."""
  root, exp = str(tmp_path), EXPERIMENTS["recall_T30"]
  exp_dir = os.path.join(root, "recall_T30")
  options = experiments.Options(tiny=True, steps=1, eval_every=1, log_every=1, seeds=(1, 2))
  experiments.run_experiment(exp, root, ["gru"], options, log=lambda _: None)
  gru_runs = {s: _lines(os.path.join(exp_dir, "gru", f"seed{s}", "result.json"))
              for s in (1, 2)}
  single = dataclasses.replace(options, seeds=None)          # rum_lam1: config seed 0
  summary = experiments.run_experiment(exp, root, ["rum_lam1"], single, log=lambda _: None)
  with open(os.path.join(exp_dir, "results.json")) as f:
    on_disk = json.load(f)
  assert list(on_disk["models"]) == list(summary["models"]) == ["rum_lam1", "gru"]
  gru, rum = summary["models"]["gru"], summary["models"]["rum_lam1"]
  assert (gru["seeds"], gru["n"], sorted(gru["runs"])) == ([1, 2], 2, ["1", "2"])
  assert gru["metrics_std"]["test_loss"] is not None and gru["paper"] is not None
  assert "runs" not in rum and rum["config"]["seed"] == 0 and rum["steps"] == 1
  assert summary["seeds"] == [1, 2]
  with open(os.path.join(exp_dir, "results.md")) as f:
    table = f.read()
  assert ("Seeds per model: RUM λ=1 η=N/A (tiny) 0 (one run); GRU (tiny) 1, 2. Mean ± "
          "sample standard deviation (n - 1) over a model's n seeds") in table
  assert "| model | params | steps | wall (min) | n |" in table
  acc = 100 * np.array([gru["runs"][s]["metrics"]["test_accuracy"] for s in ("1", "2")])
  rows = {line.split(" | ")[0][2:]: line for line in table.splitlines()
          if line.startswith("| ") and "(tiny)" in line}
  assert list(rows) == ["RUM λ=1 η=N/A (tiny)", "GRU (tiny)"]
  assert f"| 1 | 13k | {100 * rum['metrics']['test_accuracy']:.1f} | 100.0 | ok |" in (
      rows["RUM λ=1 η=N/A (tiny)"])
  assert f"| 2 | 14k | {acc.mean():.1f} ± {acc.std(ddof=1):.1f} | 21.5 | ok |" in (
      rows["GRU (tiny)"])
  curves = experiments.metric_curves(exp_dir, summary, ("train_loss",))
  assert list(curves) == ["RUM λ=1 η=N/A (tiny)", "GRU (tiny) s1", "GRU (tiny) s2"]
  assert all(len(c["train_loss"][0]) == 1 for c in curves.values())
  _assert_png(os.path.join(exp_dir, "recall_T30.png"))
  # The other order: a several-seed run (nothing left to train) keeps the single run, whose
  # seed 0 is not among the run's.
  summary = experiments.run_experiment(exp, root, ["gru"], options, log=lambda _: None)
  assert list(summary["models"]) == ["rum_lam1", "gru"]
  assert summary["models"]["rum_lam1"]["metrics"] == rum["metrics"]
  assert summary["models"]["gru"]["runs"].keys() == gru["runs"].keys()
  assert "RUM λ=1 η=N/A (tiny) 0 (one run)" in _lines(os.path.join(exp_dir, "results.md"))[4]
  # One seed of gru alone stays refused, and nothing saved changed.
  results = _lines(os.path.join(exp_dir, "results.json"))
  with pytest.raises(training.WorkdirError, match=r"holds the runs of seeds 1, 2 "):
    experiments.run_experiment(exp, root, ["gru"], single, log=lambda _: None)
  assert _lines(os.path.join(exp_dir, "results.json")) == results
  assert {s: _lines(os.path.join(exp_dir, "gru", f"seed{s}", "result.json"))
          for s in (1, 2)} == gru_runs


def test_the_summary_reports_every_model_on_disk(tmp_path):
  """:func:`experiment_summary` of records on disk: a model of several seeds reports all of
  its seeds (the one run alone first in its folder included) unless it is one of the run's
  models, which report the run's seeds; the table's seeds line."""
  exp, exp_dir = EXPERIMENTS["recall_T30"], str(tmp_path)

  def save(path, seed, acc):
    record = {"model": path.split("/")[0], "label": path.split("/")[0].upper(),
              "config": {"seed": seed}, "num_params": 7, "steps": 2, "target_steps": 2,
              "status": "ok", "metrics": {"test_accuracy": acc}, "wall_sec_total": 60.0,
              "cpu_sec_total": 60.0}
    utils.write_json(os.path.join(exp_dir, path, "result.json"), record)

  save("gru/seed0", 0, 0.1), save("gru/seed1", 1, 0.3)            # run with --seeds=0,1
  save("lstm", 5, 0.2), save("lstm/seed10", 10, 0.4)              # seed 5 alone, then 5,10
  save("lstm/seed2", 2, 0.6)                                      # and later 5,2
  save("rum_lam1", 0, 0.5)                                        # a single run
  os.makedirs(os.path.join(exp_dir, "rum_lam0", "seed3"))         # a seed not finished yet
  save("rum_lam0", 7, 0.9)
  os.makedirs(os.path.join(exp_dir, "fwln", "seedling", "x"))     # not a seed folder
  save("fwln", 4, 0.8)
  summary = experiments.experiment_summary(exp, exp_dir)
  models = summary["models"]
  assert list(models) == ["rum_lam1", "rum_lam0", "lstm", "gru", "fwln"]
  assert experiments.saved_seeds(exp_dir, "lstm") == [5, 2, 10]
  assert experiments.saved_seeds(exp_dir, "rum_lam1") is None
  assert experiments.saved_seeds(exp_dir, "rum_lam0") == [7, 3]
  assert experiments.saved_seeds(exp_dir, "fwln") is None
  assert experiments.saved_seeds(exp_dir, "goru") is None
  assert (models["lstm"]["seeds"], models["lstm"]["metrics"]["test_accuracy"]) == (
      [5, 2, 10], pytest.approx(0.4))
  assert models["gru"]["seeds"] == [0, 1] and models["rum_lam0"]["seeds"] == [7]
  assert "runs" not in models["rum_lam1"] and "runs" not in models["fwln"]
  assert summary["seeds"] == [0, 1, 2, 5, 7, 10]
  table = experiments.results_markdown(exp, summary)
  assert ("Seeds per model: RUM_LAM1 0 (one run); RUM_LAM0 7; LSTM 5, 2, 10; GRU 0, 1; "
          "FWLN 4 (one run). Mean ± sample standard deviation (n - 1)") in table
  assert "| LSTM | 7 | 2 | 1.0 | 3 |" in table and "| FWLN | 7 | 2 | 1.0 | 1 |" in table
  # A run of gru with seeds 1, 2: gru reports those (seed 2 not run yet), lstm all of its.
  summary = experiments.experiment_summary(exp, exp_dir, seeds=[1, 2], keys=["gru"])
  assert summary["models"]["gru"]["seeds"] == [1]
  assert summary["models"]["lstm"]["seeds"] == [5, 2, 10]
  assert summary["seeds"] == [1, 2, 5, 7, 10]
  # Without keys, the seeds apply to every model that has any of them (the others: as saved).
  summary = experiments.experiment_summary(exp, exp_dir, seeds=[0, 2])
  assert summary["models"]["gru"]["seeds"] == [0] and summary["models"]["lstm"]["seeds"] == [2]
  assert summary["models"]["rum_lam1"]["seeds"] == [0]   # seed 0, run alone first
  assert summary["models"]["lstm"]["n"] == 1 and "runs" not in summary["models"]["fwln"]
  # Models of the same seeds (or of a run's seeds, some not reached yet): one seeds line.
  for key in ("lstm", "rum_lam1", "rum_lam0", "fwln"):
    del summary["models"][key]
  summary["seeds"] = [0, 1]
  assert "Seeds 0, 1: mean ± sample standard deviation (n - 1) over the n seeds run" in (
      experiments.results_markdown(exp, summary))


def test_eval_history_reads_the_periodic_evaluations(tmp_path):
  """The evaluations of ``metrics.jsonl`` by step; a resumed run's re-evaluation wins."""
  rows = [{"step": 10, "train_loss": 2.0}, {"step": 20, "eval_loss": 1.5, "eval_acc": 0.1},
          {"step": 20, "eval_loss": 1.4}, {"step": 40, "eval_loss": 1.0}]
  with open(tmp_path / "metrics.jsonl", "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in rows)
  assert experiments.eval_history(str(tmp_path)) == {
      "20": {"eval_loss": 1.4, "eval_acc": 0.1}, "40": {"eval_loss": 1.0}}
  assert experiments.eval_history(str(tmp_path / "none")) == {}


def test_seed_options_and_aggregation():
  assert experiments.run_seeds(experiments.Options()) == [None]
  assert experiments.run_seeds(experiments.Options(seed=4)) == [4]
  assert experiments.run_seeds(experiments.Options(seeds=[3, 1])) == [3, 1]
  assert not experiments.multi_seed(experiments.Options(seeds=[3]))
  for bad, match in (({"seeds": []}, "one or more integers"),
                     ({"seeds": [0, "1"]}, "one or more integers"),
                     ({"seeds": [0, 0]}, "--seeds=0,0 repeats a seed"),
                     ({"seeds": [0, 1], "seed": 2}, "--seed=2 and --seeds=0,1 are both set")):
    with pytest.raises(ValueError, match=match):
      experiments.check_options(experiments.Options(**bad))
  mean, std = experiments.mean_std([1.0, 2.0, 6.0])
  assert (mean, std) == (3.0, pytest.approx(np.sqrt(7.0)))   # sample std: sum sq 14 / 2
  assert experiments.mean_std([2.5]) == (2.5, None)
  records = [{"model": "m", "label": "M", "config": {"seed": s}, "num_params": 7,
              "steps": steps, "target_steps": 9, "status": status,
              "metrics": {"test_accuracy": acc, **extra}, "wall_sec_total": 60.0,
              "cpu_sec_total": 30.0, "at_best_metrics": {"test_accuracy": acc + 0.1},
              **({"best_metrics": {"eval_accuracy": 0.4}} if s else {})}
             for s, steps, status, acc, extra in ((0, 9, "ok", 0.5, {"x": 1.0}),
                                                  (1, 4, "budget", 0.7, {}))]
  agg = experiments.aggregate_records(records)
  assert (agg["seeds"], agg["n"], agg["steps"], agg["status"]) == (
      [0, 1], 2, [9, 4], "ok/budget")
  assert agg["metrics"] == {"test_accuracy": pytest.approx(0.6)}   # x: not in every seed
  assert agg["metrics_std"]["test_accuracy"] == pytest.approx(np.std([0.5, 0.7], ddof=1))
  assert (agg["wall_sec_total"], agg["runs"]["1"]) == (120.0, records[1])
  assert agg["at_best_metrics"] == {"test_accuracy": pytest.approx(0.7)}
  assert agg["at_best_metrics_std"]["test_accuracy"] == pytest.approx(
      agg["metrics_std"]["test_accuracy"])
  assert "best_metrics" not in agg                    # not in every seed's record
  at_best = experiments.Column("acc", experiments.at_best("test_accuracy", 100.0))
  assert at_best.cell_over_seeds(agg) == f"70.0 ± {100 * np.std([0.5, 0.7], ddof=1):.1f}"
  agg["paper"] = {"acc": 40.0}
  acc = experiments.Column("acc", experiments.metric("test_accuracy", 100.0))
  assert acc.cell_over_seeds(agg) == f"60.0 ± {100 * np.std([0.5, 0.7], ddof=1):.1f}"
  paper_column = experiments.Column("paper", experiments.paper("acc"))
  assert paper_column.cell_over_seeds(agg) == "40.0"
  # metric_at: a metric of the evaluation at one step, mean ± std over the seeds that have it.
  records[0]["evals"] = {"500": {"eval_nll": 0.02}, "1000": {"eval_nll": 0.001}}
  records[1]["evals"] = {"500": {"eval_nll": 0.04}}
  agg = experiments.aggregate_records(records)
  assert agg["evals"] == {"500": {"eval_nll": pytest.approx(0.03)}}
  at_500 = experiments.Column("nll", experiments.metric_at("eval_nll", 500), ".3f")
  assert at_500.cell_over_seeds(agg) == f"0.030 ± {np.std([0.02, 0.04], ddof=1):.3f}"
  at_1000 = experiments.Column("nll", experiments.metric_at("eval_nll", 1000), ".3f")
  assert at_1000.cell(records[0]) == "0.001" and at_1000.cell(agg) == "-"
  assert at_1000.cell_over_seeds(agg) == "-"          # seed 1 has not reached step 1,000
  # One seed run so far: a column read from the seed's own record (here its pretraining,
  # which the aggregate does not carry) shows that seed's value, not "-".
  records[0]["pretrain"] = {"metrics": {"eval_masked_accuracy": 0.122}}
  one = experiments.aggregate_records(records[:1])
  masked = experiments.Column("masked", experiments.metric("eval_masked_accuracy", 100.0,
                                                           phase="pretrain"))
  assert masked.cell(one) == "-" and masked.cell_over_seeds(one) == "12.2"
  from launch import reproduce
  assert reproduce.parse_seeds(["0", "1", "2"]) == [0, 1, 2]
  assert reproduce.parse_seeds(None) is None
  with pytest.raises(ValueError, match=r"--seeds=0,a must be comma-separated integers"):
    reproduce.parse_seeds(["0", "a"])


def test_sst_tests_at_the_best_dev_checkpoint(tmp_path):
  """An experiment with early stopping (SST): the final-only evaluator (test) also runs on
  the best dev checkpoint (``at_best_metrics``), shown as "test at best dev"."""
  from tests.test_task_sst import write_trees
  exp = EXPERIMENTS["sst_binary"]
  sets = {"manual_dir": write_trees(tmp_path / "manual"),
          "data_dir": str(tmp_path / "tfds"), "batch_size": 2, "eval_batch_size": 2}
  options = experiments.Options(tiny=True, steps=4, eval_every=2, log_every=1, sets=sets)
  summary = experiments.run_experiment(exp, str(tmp_path / "w"), ["lstm"], options,
                                       log=lambda _: None)
  r = summary["models"]["lstm"]
  assert r["config"]["early_stopping_metric"] == "eval_accuracy" and r["steps"] == 4
  assert r["best_step"] in (2, 4) and set(r["at_best_metrics"]) >= {"test_accuracy"}
  at_best = experiments.final_at_best(
      experiments.model_config(exp, "lstm", options),
      os.path.join(str(tmp_path / "w"), "sst_binary", "lstm"), exp.task)
  assert at_best == r["at_best_metrics"]
  with open(os.path.join(str(tmp_path / "w"), "sst_binary", "results.md")) as f:
    row = next(line for line in f.read().splitlines() if line.startswith("| LSTM 8 (tiny) |"))
  acc = 100 * r["at_best_metrics"]["test_accuracy"]
  assert f"| {acc:.1f} | {100 * r['metrics']['test_accuracy']:.1f} | 84.9 | ok |" in row
  cfg = {k: experiments.model_config(EXPERIMENTS["sst_fine"], k) for k in ("lstm", "lstmn")}
  assert cfg["lstm"].model.name == "lstm" and cfg["lstmn"].model.name == "lstmn"
  assert all(c.model.hidden_size == 168 and c.early_stopping_patience > 10
             and c.num_steps == 10 * c.eval_every for c in cfg.values())


def test_summarization_configs():
  """The four configurations differ only in their cells (equal steps and sizes); a tiny
  run of them takes minutes (beam search), so only the configs are checked here."""
  exp = EXPERIMENTS["summ_synthetic"]
  cfg = {k: experiments.model_config(exp, k) for k in exp.models}
  assert {k: (c.configuration, c.model.encoder_cell, c.model.decoder_cell)
          for k, c in cfg.items()} == {"lead": ("lead", "lstm", "lstm"),
                                       "encrum": ("encrum", "rum", "lstm"),
                                       "decrum": ("decrum", "lstm", "rum"),
                                       "allrum": ("allrum", "rum", "rum")}
  plain = {k: c.to_dict() for k, c in cfg.items()}
  for c in plain.values():
    c.pop("configuration")
    c["model"].pop("encoder_cell")
    c["model"].pop("decoder_cell")
  assert all(c == plain["lead"] for c in plain.values())
  assert cfg["decrum"].loss_normalization == "example"
  assert cfg["decrum"].evals.test.type == "rouge"
  assert exp.paper["decrum"]["rouge"].startswith("37.07 / 16.17 / 34.07")
  hard = EXPERIMENTS["summ_synthetic_hard"]
  for k in hard.models:
    c = experiments.model_config(hard, k)
    want = cfg[k].to_dict()
    want.update(variant="lead_hard", difficulty="hard", max_enc_steps=160, max_dec_steps=40,
                max_decode_steps=40, max_oovs=40)
    assert c.to_dict() == want


@pytest.fixture(scope="module")
def ptb_char_corpus(tmp_path_factory):
  """``sets`` that read a small corpus with character-level PTB's 50-token vocabulary, so that
  the parameter counts below are the real task's without ../shared/data/ptb or a download."""
  from tests.test_task_ptb import PTB_CHAR_WORDS, _write_corpus
  base = tmp_path_factory.mktemp("ptb_chars")
  return {"manual_dir": _write_corpus(base / "manual", words=PTB_CHAR_WORDS),
          "data_dir": str(base / "tfds")}


def test_char_ptb_equal_params_configs(ptb_char_corpus):
  """The pairs are matched in parameters (within 2%), built on their own variants, and the
  decay sits in the last quarter of whatever --steps says."""
  from rumjax.training import loop
  exp = EXPERIMENTS["char_ptb_equal_params"]
  options = experiments.Options(steps=4000, eval_every=250, sets=ptb_char_corpus)
  cfg = {k: experiments.model_config(exp, k, options) for k in exp.models}
  assert {k: c.variant for k, c in cfg.items()} == {
      "rum350": "rum1000", "lnlstm250": "lstm1000", "fs_rum2": "fs_rum2",
      "fs_lstm2": "fs_lstm2"}
  for c in cfg.values():
    assert (c.batch_size, c.seq_len, c.num_steps) == (32, 150, 4000)
    assert list(c.lr_boundaries) == [3000, 3333] and list(c.lr_values) == [2e-3, 1e-4, 1e-5]
  params = {}
  for k, c in cfg.items():
    c.batch_size = 2   # counting reads one batch
    params[k] = loop.count_model_params(exp.task, c)
  assert params == {"rum350": 406_500, "lnlstm250": 399_450, "fs_rum2": 786_800,
                    "fs_lstm2": 795_300}
  short = experiments.model_config(exp, "rum350", experiments.Options(steps=120))
  assert list(short.lr_boundaries) == [90, 100]


def test_char_ptb_ablations_configs(ptb_char_corpus):
  """Table 3's lines 1-3 (issue 47) in RUM 350's set-up: the reference is
  char_ptb_equal_params's RUM 350 field for field, tanh changes only the activation, and
  RUM 495 without the gate has RUM 350's used parameters (within 0.2%)."""
  from rumjax.training import loop
  exp = EXPERIMENTS["char_ptb_ablations"]
  options = experiments.Options(steps=3000, eval_every=250, eval_batches_during=20, seed=0,
                                sets=ptb_char_corpus)
  cfg = {k: experiments.model_config(exp, k, options) for k in exp.models}
  reference = experiments.model_config(EXPERIMENTS["char_ptb_equal_params"], "rum350",
                                       options).to_dict()
  assert cfg["rum350"].to_dict() == reference
  tanh = cfg["rum350_tanh"].to_dict()
  assert tanh.pop("variant") == "rum1000_tanh" and tanh["model"].pop("activation") == "tanh"
  reference.pop("variant"), reference["model"].pop("activation")
  assert tanh == reference
  nogate = cfg["rum495_nogate"]
  assert (nogate.variant, nogate.model.hidden_size, nogate.model.update_gate,
          nogate.model.activation) == ("rum1400_nogate", 495, False, "relu")
  assert (nogate.batch_size, nogate.seq_len, list(nogate.lr_boundaries)) == (32, 150,
                                                                              [2250, 2500])
  nogate.batch_size = 2   # counting reads one batch
  declared = loop.count_model_params(exp.task, nogate)
  nh, nx = 495, nogate.model.embed_dim
  unused = nx * nh + nh * nh + nh   # the gate's columns of kernel_x, kernel_h and bias
  assert declared - unused == ptb_experiments.NOGATE_USED_PARAMS
  assert abs(ptb_experiments.NOGATE_USED_PARAMS / 406_500 - 1) < 0.002


@pytest.mark.slow   # ~50 s: an end-to-end reproduction
def test_char_ptb_equal_params_runs_and_plots(tmp_path):
  from tests.test_task_ptb import _write_corpus
  exp = EXPERIMENTS["char_ptb_equal_params"]
  sets = {"manual_dir": _write_corpus(tmp_path / "manual"),
          "data_dir": str(tmp_path / "tfds"), "model.hidden_size": 6}
  options = experiments.Options(tiny=True, steps=4, eval_every=2, log_every=1, sets=sets,
                                seeds=(0, 1))
  summary = experiments.run_experiment(exp, str(tmp_path / "w"), ["rum350"], options,
                                       log=lambda _: None)
  r = summary["models"]["rum350"]
  assert r["n"] == 2 and np.isfinite(r["metrics"]["test_bpc"])
  _assert_png(str(tmp_path / "w" / "char_ptb_equal_params" / "char_ptb_equal_params.png"))
  records = analysis.read_jsonl(str(tmp_path / "w" / "char_ptb_equal_params" / "rum350" /
                                    "seed0" / "metrics.jsonl"))
  steps, seconds = analysis.training_seconds(records)
  assert list(steps) == [1, 2, 3, 4] and np.all(np.diff(seconds) > 0)
  at, values = analysis.metric_over_time(records, "eval_bpc")
  assert len(at) == len(values) >= 2 and np.all(np.diff(at) > 0)


def test_training_seconds_sums_the_logged_rates():
  records = [{"step": 10, "steps_per_sec": 2.0}, {"step": 30, "steps_per_sec": 4.0},
             {"step": 30, "eval_bpc": 3.0}, {"step": 40, "steps_per_sec": 1.0},
             {"step": 40, "eval_bpc": 2.0}]
  steps, seconds = analysis.training_seconds(records)
  np.testing.assert_allclose(seconds, [5.0, 10.0, 20.0])
  at, values = analysis.metric_over_time(records, "eval_bpc")
  np.testing.assert_allclose(at, [10.0, 20.0])
  np.testing.assert_allclose(values, [3.0, 2.0])


@pytest.mark.slow   # ~60 s: pretraining then fine-tuning, end to end
def test_clue_pretrains_then_fine_tunes_from_it_and_resumes(tmp_path):
  """The CLUE experiments' two phases: a pretrained model's run starts from its own
  pretraining run (``init_from`` = ``<model>/pretrain``; the encoder arrives unchanged at a
  rate of ~0), the BiLSTM from scratch; each seed pretrains on its own; the table reports
  the pretraining; re-running does nothing; an interrupted pretraining is not
  fine-tuned from."""
  from tests.test_task_clue import afqmc_dir
  real = EXPERIMENTS["clue_afqmc"]
  whole_dev = experiments.Options(eval_batches_during=0)   # the command in RESULTS.md
  pre_configs = {k: experiments.pretrain_config(real, k, whole_dev) for k in real.models}
  assert pre_configs["bilstm"] is None and all(
      (c.objective, c.learning_rate, c.warmup_steps, c.evals.eval.batches)
      == ("mlm", 1e-3, 500, 20) for k, c in pre_configs.items() if k != "bilstm")
  # Fine-tuning selects its checkpoint on the whole dev split.
  assert not experiments.model_config(real, "starsaber", whole_dev).evals.eval.get("batches")
  # Pretraining that moves the parameters (1e-2, no warm-up), fine-tuning at a rate of ~0:
  # the fine-tuned encoder equals the pretrained one only if it started from it.
  exp = dataclasses.replace(
      real, models={k: (label, {**fields, "learning_rate": 1e-12})
                    for k, (label, fields) in real.models.items()},
      pretraining=experiments.Pretraining("mlm", {"starsaber": {"learning_rate": 1e-2}}))
  sets = {"manual_dir": afqmc_dir(tmp_path), "data_dir": str(tmp_path / "tfds")}
  options = experiments.Options(tiny=True, steps=2, pretrain_steps=3, eval_every=1,
                                log_every=1, sets=sets, seeds=(0, 1))
  root = str(tmp_path / "w")
  lines = []
  summary = experiments.run_experiment(exp, root, ["starsaber", "bilstm"], options,
                                       log=lines.append)
  # Seed by seed: a run cut short after the first seed still compares every model.
  assert [(x["model"], x["seed"]) for x in map(json.loads, lines)] == [
      ("starsaber", 0), ("bilstm", 0), ("starsaber", 1), ("bilstm", 1)]
  exp_dir = os.path.join(root, "clue_afqmc")
  for seed in (0, 1):
    model_dir = os.path.join(exp_dir, "starsaber", f"seed{seed}")
    pre = json.load(open(os.path.join(model_dir, "pretrain", "result.json")))
    assert pre["steps"] == 3 and pre["config"]["objective"] == "mlm"
    assert pre["config"]["seed"] == seed and pre["config"]["learning_rate"] == 1e-2
    fine = json.load(open(os.path.join(model_dir, "result.json")))
    assert fine["config"]["init_from"] == os.path.join(model_dir, "pretrain")
    assert fine["config"]["objective"] == "classify" and fine["steps"] == 2
    assert fine["pretrain"]["steps"] == 3
    assert "eval_masked_accuracy" in fine["pretrain"]["metrics"]
    tuned, pretrained = (np.load(os.path.join(d, "params.npz"))
                         for d in (model_dir, os.path.join(model_dir, "pretrain")))
    shared = [k for k in tuned.files if "encoder" in k and k in pretrained.files]
    assert shared
    for k in shared:
      np.testing.assert_allclose(tuned[k], pretrained[k], atol=1e-6)
  assert not os.path.exists(os.path.join(exp_dir, "bilstm", "seed0", "pretrain"))
  assert json.load(open(os.path.join(exp_dir, "bilstm", "seed0", "result.json")))[
      "config"]["init_from"] == ""
  r = summary["models"]["starsaber"]
  assert r["n"] == 2 and "pretrain" not in summary["models"]["bilstm"]["runs"]["0"]
  with open(os.path.join(exp_dir, "results.md")) as f:
    table = f.read()
  floor = clue_task.context_free_floor(clue_task.data(fine["config"]), "dev")
  assert f"on dev: {100 * floor['accuracy']:.1f}% (always the most frequent" in table
  row = next(line for line in table.splitlines() if line.startswith("| StarSaber"))
  masked = experiments.mean_std(
      [100 * json.load(open(os.path.join(exp_dir, "starsaber", f"seed{seed}", "pretrain",
                                         "result.json")))["metrics"]["eval_masked_accuracy"]
       for seed in (0, 1)])
  assert f"| 3 ± 0 | {masked[0]:.1f} ± {masked[1]:.1f} |" in row and "| 70.18 |" in row
  before = os.path.getmtime(os.path.join(exp_dir, "starsaber", "seed0", "pretrain",
                                         "result.json"))
  again = experiments.run_experiment(exp, root, ["starsaber"], options, log=lambda _: None)
  assert again["models"]["starsaber"]["steps"] == 2
  assert os.path.getmtime(os.path.join(exp_dir, "starsaber", "seed0", "pretrain",
                                       "result.json")) == before


def test_a_diverged_pretraining_is_not_fine_tuned_from(tmp_path, monkeypatch):
  from tests.test_task_clue import afqmc_dir
  exp = EXPERIMENTS["clue_afqmc"]
  sets = {"manual_dir": afqmc_dir(tmp_path), "data_dir": str(tmp_path / "tfds")}
  options = experiments.Options(tiny=True, steps=2, pretrain_steps=3, eval_every=1,
                                log_every=1, sets=sets)
  def diverge(*args, **kwargs):
    raise training.NonFiniteError("non-finite loss or gradient at step 2")
  monkeypatch.setattr(training, "train_and_evaluate", diverge)
  monkeypatch.setattr(training, "evaluate_checkpoint", lambda *a, **k: {"step": 0})
  summary = experiments.run_experiment(exp, str(tmp_path), ["transformer"], options,
                                       log=lambda _: None)
  model_dir = os.path.join(str(tmp_path), "clue_afqmc", "transformer")
  pre = json.load(open(os.path.join(model_dir, "pretrain", "result.json")))
  assert (pre["status"], pre["phase"]) == ("diverged", "pretrain")
  assert not os.path.exists(os.path.join(model_dir, "result.json"))
  assert summary["models"] == {}


def test_tiny_labels_name_the_size_trained():
  """Issue 46, item 8: a --tiny model's label names its own hidden size (never the
  paper's), drops the paper's parameter count and says it is tiny."""
  assert experiments.tiny_label("RUM 100 λ=1 η=N/A", 100, 8) == "RUM 8 λ=1 η=N/A (tiny)"
  assert experiments.tiny_label("RUM 350 (0.41M)", 350, 8) == "RUM 8 (tiny)"
  assert experiments.tiny_label("StarSaber 4x256", 256, 16) == "StarSaber 4x16 (tiny)"
  assert experiments.tiny_label("EURNN 250 (lr 1e-4)", 250, 8) == "EURNN 8 (lr 1e-4) (tiny)"
  assert experiments.tiny_label("RUM λ=1", 50, 8) == "RUM λ=1 (tiny)"


def test_finished_ignores_where_the_data_is_but_not_what_the_run_is(tmp_path):
  """experiments.finished: the same finished run with its data folder reached through
  another path (a worktree's ../shared) is finished; another learning rate is not."""
  import ml_collections
  config = ml_collections.ConfigDict({"manual_dir": "/a/shared/data", "data_dir": "",
                                      "learning_rate": 1e-3, "seed": 0})
  utils.write_json(str(tmp_path / experiments.RESULT_FILE),
                   {"status": "ok", "config": config.to_dict(), "steps": 3})
  moved = config.copy_and_resolve_references()
  moved.manual_dir, moved.data_dir = "/b/shared/data", "/tmp/tfds"
  assert experiments.finished(moved, str(tmp_path))["steps"] == 3
  other = config.copy_and_resolve_references()
  other.learning_rate = 1e-2
  assert experiments.finished(other, str(tmp_path)) is None


@pytest.mark.slow   # ~10 s: two phases, twice
def test_fine_tuning_keeps_the_budget_cut_pretraining_it_started_from(tmp_path, monkeypatch):
  """--budget_minutes cuts the pretraining short and the model fine-tunes from it; a later
  invocation (no budget) finishes the fine-tuning without resuming the pretraining, and
  the record keeps that pretraining (it reported the completed one). The budget's clock
  is a counter (one second per reading), so the stops are deterministic."""
  ticks, budget = iter(range(10**6)), training.TimeBudget
  monkeypatch.setattr(experiments.training, "TimeBudget",
                      lambda seconds: budget(seconds, clock=lambda: float(next(ticks))))
  exp = experiments.Experiment(
      name="pre", task=recall_configs.recall_task.TASK, variant="T30",
      models={"gru": ("GRU", {"model.cell": "gru"})}, tiny=recall_configs.TINY,
      pretraining=experiments.Pretraining("T30", {"gru": {}}))
  options = dict(tiny=True, steps=6, pretrain_steps=6, eval_every=3, log_every=1)
  first = experiments.run_experiment(exp, str(tmp_path), options=experiments.Options(
      budget_minutes=2.5 / 60, **options), log=lambda _: None)["models"]["gru"]
  assert first["pretrain"]["status"] == "budget" and first["pretrain"]["steps"] < 6
  assert first["status"] == "budget"
  pre_dir = tmp_path / "pre" / "gru" / "pretrain"
  before = _lines(str(pre_dir / "metrics.jsonl"))
  second = experiments.run_experiment(exp, str(tmp_path), options=experiments.Options(
      **options), log=lambda _: None)["models"]["gru"]
  assert second["status"] == "ok" and second["steps"] == 6
  assert second["pretrain"] == first["pretrain"]
  assert _lines(str(pre_dir / "metrics.jsonl")) == before


# ------------------------------------------------- the runner's decisions, without training


def _fake_run_model(calls, statuses):
  """A stand-in for experiments.run_model that trains nothing: it records (folder, steps,
  init_from, TimeBudget seconds) and writes a result.json of ``statuses[folder name]``."""
  def run_model(config, workdir, task, *, hooks=(), info=None, invocation=None):
    del task, invocation
    name = os.path.basename(workdir)
    calls.append((name, config.num_steps, config.get("init_from"),
                  [h.seconds for h in hooks if isinstance(h, training.TimeBudget)]))
    record = {**(info or {}), "config": experiments._json_config(config), "num_params": 1,
              "steps": config.num_steps, "target_steps": config.num_steps,
              "status": statuses[name], "error": None, "metrics": {"eval_loss": 1.0},
              "wall_sec_total": 1.0, "cpu_sec_total": 1.0, "invocations": [{"wall_sec": 1.0}]}
    utils.write_json(os.path.join(workdir, experiments.RESULT_FILE), record)
    return record
  return run_model


def test_pretraining_then_the_model_from_it_with_the_budget_in_minutes(tmp_path, monkeypatch):
  """Each phase gets --budget_minutes x 60 s and its own steps; the model starts from its
  pretraining (init_from) and its record keeps the pretraining's summary. A pretraining cut
  by the budget is fine-tuned from and, once the fine-tuning started, not resumed; a
  fine-tuning cut by the budget is resumed (it is not finished)."""
  calls = []
  monkeypatch.setattr(experiments, "run_model",
                      _fake_run_model(calls, {"pretrain": "budget", "gru": "budget"}))
  exp = experiments.Experiment(
      name="pre", task=recall_configs.recall_task.TASK, variant="T30",
      models={"gru": ("GRU", {"model.cell": "gru"})}, tiny=recall_configs.TINY,
      pretraining=experiments.Pretraining("T30", {"gru": {}}))
  options = dict(tiny=True, steps=6, pretrain_steps=4, eval_every=3, log_every=1)
  model_dir = str(tmp_path / "pre" / "gru")
  pre_dir = os.path.join(model_dir, experiments.PRETRAIN_DIR)
  summary = experiments.run_experiment(exp, str(tmp_path), options=experiments.Options(
      budget_minutes=2.5, **options), log=lambda _: None)
  assert calls == [("pretrain", 4, "", [150.0]), ("gru", 6, pre_dir, [150.0])]
  record = summary["models"]["gru"]
  assert record["pretrain"] == experiments.pretrain_summary(utils.read_json(
      os.path.join(pre_dir, experiments.RESULT_FILE)))
  assert record["pretrain"]["metrics"] == {"eval_loss": 1.0}
  assert record["pretrain"]["status"] == "budget" and record["pretrain"]["steps"] == 4
  experiments.run_experiment(exp, str(tmp_path), options=experiments.Options(**options),
                             log=lambda _: None)
  assert calls[2:] == [("gru", 6, pre_dir, [])]


def test_a_preempted_run_stops_the_experiment_and_other_seeds_are_refused(tmp_path,
                                                                          monkeypatch):
  """After a preempted model nothing else trains; a single-run folder of another seed, or a
  model with seed folders run with one seed, is refused before anything trains."""
  calls = []
  monkeypatch.setattr(experiments, "run_model",
                      _fake_run_model(calls, {"gru": "preempted", "lstm": "ok"}))
  exp, root = dataclasses.replace(EXPERIMENTS["recall_T30"], plot=None), str(tmp_path)
  options = experiments.Options(tiny=True, steps=2, eval_every=2, log_every=1)
  summary = experiments.run_experiment(exp, root, ["gru", "lstm"], options, log=lambda _: None)
  assert [c[0] for c in calls] == ["gru"] and list(summary["models"]) == ["gru"]
  exp_dir = os.path.join(root, "recall_T30")
  utils.write_json(os.path.join(exp_dir, "lstm", "config.json"), {"seed": 5})
  with pytest.raises(training.WorkdirError, match=r"holds a run of seed 5, not 6: .*"
                                                  r"--seeds=5,6"):
    experiments.run_experiment(exp, root, ["lstm"], dataclasses.replace(options, seed=6),
                               log=lambda _: None)
  utils.write_json(os.path.join(exp_dir, "goru", "seed1", experiments.RESULT_FILE), {})
  with pytest.raises(training.WorkdirError, match=r"holds the runs of seeds 1 .*--seeds=1 "):
    experiments.run_experiment(exp, root, ["goru"], dataclasses.replace(options, seed=1),
                               log=lambda _: None)
  assert [c[0] for c in calls] == ["gru"]


def test_run_model_records_a_finished_run_called_again(tmp_path, monkeypatch):
  """The loop found the run complete (stop reason "finished"): status ok, the config the
  steps were trained with kept, the invocations appended; best_* are the hooks' entries,
  not metrics."""
  config = experiments.model_config(EXPERIMENTS["recall_T30"], "gru", experiments.Options(
      tiny=True, steps=3, eval_every=1))
  previous = {"config": {"eval_every": 1, "num_steps": 3}, "invocations": [
      {"steps_from": 0, "steps_to": 3, "wall_sec": 2.0, "cpu_sec": 1.0}]}
  utils.write_json(str(tmp_path / experiments.RESULT_FILE), previous)

  def finished_run(config, workdir, task, hooks):
    for hook in hooks:
      if hasattr(hook, "begin"):
        hook.begin(3, None, None)
    return {"step": 3, "stop_reason": "finished", "preempted": False, "params": None,
            "eval_accuracy": 0.5, "best_step": 2, "best_eval_accuracy": 0.6}

  monkeypatch.setattr(training, "train_and_evaluate", finished_run)
  monkeypatch.setattr(training, "count_model_params", lambda task, config: 7)
  config.eval_every = 2
  record = experiments.run_model(config, str(tmp_path), recall_configs.recall_task.TASK)
  assert (record["status"], record["steps"], record["num_params"]) == ("ok", 3, 7)
  assert record["config"] == previous["config"]
  assert record["metrics"] == {"eval_accuracy": 0.5}
  assert (record["best_step"], record["best_eval_accuracy"]) == (2, 0.6)
  assert [i["steps_from"] for i in record["invocations"]] == [0, 3]


def test_at_best_is_the_final_evaluators_on_the_best_checkpoint(tmp_path, monkeypatch):
  """final_at_best runs the final-only evaluators (every 0, at_end) on <workdir>/best; the
  at_best column prefers those (whole splits) to the periodic evaluation's best_metrics."""
  import ml_collections
  config = ml_collections.ConfigDict({"early_stopping_metric": "eval_accuracy", "evals": {
      "eval": {"every": 5}, "test": {"every": 0}, "silent": {"every": 0, "at_end": False}}})
  (tmp_path / "best").mkdir()
  seen = []

  def evaluate(config, workdir, task, names):
    seen.append((workdir, names))
    return {"step": 4, "test_accuracy": 0.75, "best_step": 4}

  monkeypatch.setattr(training, "evaluate_checkpoint", evaluate)
  assert experiments.final_at_best(config, str(tmp_path), None) == {"test_accuracy": 0.75}
  assert seen == [(str(tmp_path / "best"), ["test"])]
  record = {"at_best_metrics": {"test_accuracy": 0.75},
            "best_metrics": {"test_accuracy": 0.5, "eval_accuracy": 0.8}}
  assert experiments.at_best("test_accuracy", 100.0)(record) == 75.0
  assert experiments.at_best("eval_accuracy", 100.0)(record) == 80.0


PAPERS = os.path.join(REPO, "..", "shared", "papers")


def _paper_lines(prefix):
  found = glob.glob(os.path.join(PAPERS, f"{prefix}_*.txt"))
  if not found:
    pytest.skip("the papers' text (../shared/papers) is absent")
  with open(found[0], encoding="utf-8") as f:
    return f.read().splitlines()


def _rows(lines, names):
  """``{name: [the tab-separated cells after it]}`` of the table rows that hold ``name``
  as a cell (the first such row)."""
  out = {}
  for line in lines:
    cells = [c.strip() for c in line.split("\t")]
    for name in names:
      if name in cells and name not in out:
        out[name] = cells[cells.index(name) + 1:]
  assert sorted(out) == sorted(names), sorted(set(names) - set(out))
  return out


def test_the_experiments_paper_numbers_are_the_papers():
  """Every number an experiment reports as the paper's, read from the papers' text: the RUM
  paper's Tables 1, 3 and 4 (TACL, 001), the LSTMN paper's Table 2 (003), the StarSaber
  paper's Tables 3 and 5-7 (004)."""
  from tasks.experiments import clue as clue_exp
  from tasks.experiments import sst as sst_exp
  from tasks.experiments import summarization as summ_exp
  rum = _paper_lines("001")
  names = {"gru": "GRU (ours)", "goru": "GORU (ours)", "eurnn": "EURNN (ours)",
           "lstm": "LSTM (ours)", "fwln": "FW-LN (Ba et al., 2016a)",
           "rum_lam0": r"RUM $\lambda = 0 \eta = N/A$ (ours)",
           "rum_lam1_eta1": r"RUM $\lambda = 1 \eta = 1.0$ (ours)",
           "rum_lam1": r"RUM $\lambda = 1 \eta = N/A$ (ours)"}
  table1 = _rows(rum, list(names.values()))
  assert recall_configs.TABLE1 == {
      k: (*map(float, table1[n][0].split("/")), table1[n][1]) for k, n in names.items()}
  names = {"rum350": "RUM 1000 (ours)", "lnlstm250": "LSTM 1000 (ours)",
           "fs_rum2": "FS-RUM-2 (ours)", "fs_lstm2": "FS-LSTM-2 (Mujika et al., 2017)",
           "rum350_tanh": "RUM 1000 w/ tanh (ours)",
           "rum495_nogate": "RUM 1400 w/o upd. gate. (ours)"}
  table3 = _rows(rum, list(names.values()))
  ours = {**ptb_experiments.TABLE3, **{k: v[3] for k, v in ptb_experiments.ABLATIONS.items()}}
  for key, text in ours.items():
    bpc, params = table3[names[key]]
    assert text.startswith(f"{bpc} (") and text.endswith(f"{params})"), (key, text)
  names = {"lead": "LEAD (ours)", "encrum": "encRUM 360 cov. (ours)",
           "decrum": "decRUM 256 (ours)", "allrum": "allRUM 360 cov. (ours)"}
  table4 = _rows(rum, list(names.values()))
  for key, text in summ_exp.TABLE4.items():
    assert text.startswith(" / ".join(table4[names[key]]) + " ("), (key, text)
  lstmn = " ".join(_paper_lines("003"))
  table2 = {name: re.search(rf"(?:^| ){re.escape(name)} (\d+\.\d) (\d+\.\d) ", lstmn).groups()
            for name in ("LSTM (Tai et al., 2015)", "LSTMN")}
  assert sst_exp.TABLE2 == {
      variant: {k: float(table2[n][i]) for k, n in (("lstm", "LSTM (Tai et al., 2015)"),
                                                    ("lstmn", "LSTMN"))}
      for i, variant in enumerate(("fine", "binary"))}
  star = _paper_lines("004")
  start = next(i for i, line in enumerate(star) if line.startswith("Table 3: "))
  rows = [tuple(map(float, re.findall(r"\d+\.\d+", line))) for line in star[start:start + 12]]
  rows = [r for r in rows if len(r) == 6]
  assert rows == [tuple(x for pair in v for x in pair) for v in clue_exp.TABLE3.values()]
  # The paper's column of clue_<task>: StarSaber-2, the pretrained Transformer and ReZero,
  # the Word2Vec BiLSTM (rows 8, 6, 5, 1), dev.
  for name, dev in (("clue_afqmc", 0), ("clue_tnews", 2)):
    assert EXPERIMENTS[name].paper == {
        k: {"dev_accuracy": rows[i][dev]}
        for k, i in (("starsaber", 7), ("transformer", 5), ("rezero", 4), ("bilstm", 0))}
  ablations = []
  for table in ("Table 5:", "Table 6:", "Table 7:"):
    start = next(i for i, line in enumerate(star) if line.startswith(table))
    params = next(line for line in star[start:] if line.startswith("#Parameter"))
    accuracy = next(line for line in star[start:] if line.lower().startswith("accuracy(%)"))
    pairs = re.findall(r"(\d+\.\d+)\((\d+\.\d+)\)", accuracy)
    ablations.append(tuple((p, float(t), float(d)) for p, (t, d) in zip(
        map(float, re.findall(r"\d+\.\d+", params)), pairs)))
  assert ablations == [clue_exp.ABLATIONS[k] for k in ("starsaber_gate", "starsaber_pe",
                                                       "starsaber_nodirect")]


def test_eval_batches_during_is_an_upper_bound():
  """--eval_batches_during caps the periodic evaluators' batches (an evaluator of fewer
  keeps its own, one of all its split gets the cap); the final-only ones keep theirs."""
  import ml_collections
  config = ml_collections.ConfigDict({"evals": {
      "few": {"every": 5, "batches": 3}, "many": {"every": 5, "batches": 20},
      "whole": {"every": 5, "batches": 0}, "test": {"every": 0, "batches": 0}}})
  experiments.limit_periodic_evals(config, 8)
  assert {k: e.batches for k, e in config.evals.items()} == {
      "few": 3, "many": 8, "whole": 8, "test": 0}
  experiments.limit_periodic_evals(config, 0)   # 0: the evaluators' own
  assert config.evals.many.batches == 8


def test_the_rum_papers_labels_say_what_the_models_are():
  """A row's label is the config it trains: "λ=k" is model.lam (learned from k), "η=N/A" no
  eta and "η=1.0" eta 1.0, a size after the cell's name the hidden size, "lr" a learning
  rate other than the variant's (recall, copying, the λ sweeps)."""
  for name in ("recall_T30", "copying_T500", "lam_copying"):
    exp = EXPERIMENTS[name]
    for key, (label, _) in exp.models.items():
      config = experiments.model_config(exp, key)
      model = config.model
      assert label.split()[0].lower().replace("-", "") == model.cell, label
      size = re.match(r"\S+ (\d+)\b", label)
      assert size is None or int(size.group(1)) == model.hidden_size, label
      lam = re.search(r"λ(?:=| learned from )(\d+(?:\.\d+)?)", label)
      assert (lam is not None) == (model.cell == "rum"), label
      if lam:
        assert (model.lam, model.learn_lam) == (float(lam.group(1)), "learned" in label), label
      eta = re.search(r"η=(\S+)", label)
      if eta:
        assert model.eta == (None if eta.group(1) == "N/A" else float(eta.group(1))), label
      lr = re.search(r"\(lr (\S+)\)", label)
      default = exp.task.get_config(exp.variant).learning_rate
      assert config.learning_rate == (float(lr.group(1)) if lr else default), label


def test_bad_options_are_one_line_errors():
  """Every option below its least value is refused by name; the least value is fine."""
  for name, low in (("steps", 1), ("pretrain_steps", 1), ("eval_every", 1),
                    ("eval_batches_during", 0), ("log_every", 1), ("keep_checkpoints", 1)):
    with pytest.raises(ValueError, match=rf"^{name}={low - 1} must be >= {low}\.$"):
      experiments.check_options(experiments.Options(**{name: low - 1}))
    experiments.check_options(experiments.Options(**{name: low}))


def test_the_best_dev_set_ups():
  """SST selects on dev accuracy with a patience that never stops its 10 evaluations
  (LSTMN paper); CLUE pretrains every family at 1e-3 with a 500-step warm-up, its dev
  masked accuracy on 20 batches, and fine-tunes with a patience of 10 evaluations. (The
  slow end-to-end tests train these; here only the configs.)"""
  for name in ("sst_binary", "sst_fine"):
    exp = EXPERIMENTS[name]
    for key in exp.models:
      c = experiments.model_config(exp, key)
      assert (c.early_stopping_metric, c.early_stopping_mode) == ("eval_accuracy", "max")
      assert c.early_stopping_patience > c.num_steps // c.eval_every == 10
  exp = EXPERIMENTS["clue_afqmc"]
  whole_dev = experiments.Options(eval_batches_during=0)
  for key in exp.models:
    assert experiments.model_config(exp, key, whole_dev).early_stopping_patience == 10
    pre = experiments.pretrain_config(exp, key, whole_dev)
    assert (pre is None) == (key == "bilstm")
    if pre is not None:
      assert (pre.objective, pre.learning_rate, pre.warmup_steps, pre.evals.eval.batches) == (
          "mlm", 1e-3, 500, 20)


def test_summ_synthetic_columns_read_the_steps_they_name():
  """The dev NLL columns of summ_synthetic are the evaluations at steps 500 and 1,000."""
  from tasks.experiments import summarization as summ_exp
  record = {"evals": {"500": {"eval_nll": 0.5}, "1000": {"eval_nll": 0.25}}}
  cells = {c.header: c.cell(record) for c in summ_exp.COLUMNS[:2]}
  assert cells == {"dev NLL, step 500": "0.5", "step 1,000": "0.25"}

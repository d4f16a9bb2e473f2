"""``python -m launch.train`` end to end in subprocesses: preemption, resume, sharding over
4 devices and 2 processes, and clear errors for bad input."""

import json
import os
import signal
import socket
import subprocess
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from tests import launch_paused

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A tiny associative-recall run: fast to compile, same code path as the paper's.
TINY = ["--task=recall", "--batch_size=8", "--config.length=6",
        "--config.model.hidden_size=8", "--config.num_train=256", "--config.num_dev=16",
        "--config.num_test=16", "--config.evals.eval.batches=1", "--eval_every=0",
        "--checkpoint_every=1000"]


def _env(devices=1):
  env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
             JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
  return env


def _cmd(workdir, *extra, launcher="launch.train"):
  return [sys.executable, "-m", launcher, f"--workdir={workdir}", *TINY, *extra]


def _run(workdir, *extra, devices=1, check=True):
  proc = subprocess.run(_cmd(workdir, *extra), cwd=REPO, env=_env(devices),
                        capture_output=True, text=True, timeout=600)
  if check and proc.returncode != 0:
    raise AssertionError(f"exit {proc.returncode}\n{proc.stderr[-3000:]}")
  return proc


def _checkpoint_steps(workdir):
  path = os.path.join(workdir, "checkpoints")
  return sorted(int(d) for d in os.listdir(path) if d.isdigit())


def _params(workdir):
  """The latest checkpoint's step and parameters, as NumPy arrays (any saving topology)."""
  step = _checkpoint_steps(workdir)[-1]
  path = os.path.join(workdir, "checkpoints", str(step), "state")
  checkpointer = ocp.PyTreeCheckpointer()
  tree = checkpointer.metadata(path).item_metadata.tree
  as_numpy = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
  return step, checkpointer.restore(path, restore_args=as_numpy)["params"]


def _assert_params_close(a, b, atol=0.0):
  flat_a = sorted(_flatten(a).items())
  flat_b = sorted(_flatten(b).items())
  assert [k for k, _ in flat_a] == [k for k, _ in flat_b]
  for (k, x), (_, y) in zip(flat_a, flat_b):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0, err_msg=k)


def _flatten(tree, prefix=""):
  if isinstance(tree, dict):
    out = {}
    for k, v in tree.items():
      out.update(_flatten(v, f"{prefix}/{k}"))
    return out
  return {prefix: tree}


def test_help_and_helpfull_exit_0_and_show_the_config_nesting():
  """Issue 46, item 4: --help and --helpfull exit 0 (absl's exit 1); --helpfull lists every
  flag and each config field as the flag that sets it, so the nesting under
  --config.model. shows (absl printed the nested config without its indentation)."""
  outputs = {}
  for flag in ("--help", "--helpfull"):
    proc = subprocess.run([sys.executable, "-m", "launch.train", flag], cwd=REPO,
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    outputs[flag] = proc.stdout
  for flag in ("--task", "--cell", "--workdir", "--steps", "--batch_size", "--seed",
               "--eval_every", "--checkpoint_every", "--distributed", "--config"):
    assert flag in outputs["--helpfull"] and flag in outputs["--help"], flag
  lines = outputs["--helpfull"].splitlines()
  assert "  --config.model.hidden_size=100" in lines and "  --config.batch_size=32" in lines
  assert "  --config.evals.test.every=250" in lines
  assert "--[no]only_check_args" in outputs["--helpfull"]   # absl's flags: full help only
  assert "--[no]only_check_args" not in outputs["--help"]
  evaluate = subprocess.run([sys.executable, "-m", "launch.evaluate", "--help"], cwd=REPO,
                            env=_env(), capture_output=True, text=True, timeout=300)
  assert evaluate.returncode == 0 and "--workdir" in evaluate.stdout, evaluate.stderr[-2000:]


def test_help_text_lists_nested_fields_by_their_flag():
  import ml_collections
  import launch
  config = ml_collections.ConfigDict({"b": 1, "model": {"lam": 0.5, "cell": "rum"},
                                      "evals": {"test": {"every": 0}}})
  assert list(launch.config_lines(config)) == [
      "--config.b=1", "--config.evals.test.every=0", "--config.model.cell='rum'",
      "--config.model.lam=0.5"]
  assert launch.help_requested(["x", "--task=a", "--helpfull"]) is False
  assert launch.help_requested(["x", "-?"]) is True
  assert launch.help_requested(["x", "--", "--help"]) is None
  assert launch.help_requested(["x", "--task=help"]) is None


def test_cpu_devices_beyond_the_cores_warn():
  import launch
  assert launch.cpu_devices_warning("3", 2).startswith(
      "--cpu_devices=3 is more than the 2 core(s) of this machine")
  assert [launch.cpu_devices_warning(v, 2) for v in ("2", "1", "auto", None)] == [None] * 4


def test_output_problems_are_found_before_the_work(tmp_path):
  """launch.output_problem: the paths a launcher would fail to write after its work."""
  import launch
  a_file = tmp_path / "a_file"
  a_file.write_text("keep")
  problem = launch.output_problem
  assert problem("out_dir", str(a_file), folder=True) == (
      f"--out_dir={a_file} is a file; pass a folder (it is created if missing).")
  assert "is a file, so no folder can be made there" in problem(
      "out_dir", str(a_file / "sub"), folder=True)
  assert "is a folder; pass the path" in problem("out", str(tmp_path), suffix=".png")
  assert problem("out", str(tmp_path / "x.pdf"), suffix=".png").endswith("must end in .png.")
  assert "is a file, so no folder" in problem("output", str(a_file / "x.json"))
  for fine in (problem("out_dir", str(tmp_path / "new" / "deeper"), folder=True),
               problem("out", str(tmp_path / "new" / "x.png"), suffix=".png"),
               problem("output", None), problem("out_dir", str(tmp_path), folder=True)):
    assert fine is None
  assert a_file.read_text() == "keep" and not (tmp_path / "new").exists()


def test_outputs_never_land_in_a_run_nor_replace_a_file_without_overwrite(tmp_path):
  """launch.output_problem's policy: no output (nor a file written beside it) inside a run
  the command reads or in any run's folder, even with --overwrite; an existing output only
  with --overwrite; launch.list_problem: an empty --workdirs (an unset shell variable)."""
  import launch
  problem = launch.output_problem
  run = tmp_path / "exp" / "run"
  run.mkdir(parents=True)
  (run / "config.json").write_text("{}")
  (tmp_path / "exp" / "results.json").write_text("{}")
  (tmp_path / "figs").mkdir()
  (tmp_path / "figs" / "a.json").write_text("keep")
  assert problem("output", str(run / "config.json"), runs=[str(run)], overwrite=True) == (
      f"--output={run / 'config.json'} lies inside {run}, a run this command reads; write "
      "its output outside the run.")
  assert "lies inside" in problem("out_dir", str(run / "sub"), folder=True, runs=[str(run)])
  png = str(tmp_path / "exp" / "results.png")
  assert problem("out", png, files=[str(tmp_path / "exp" / "results.json")],
                 runs=[str(run)], overwrite=True) == (
      f"--out={png} would write into {tmp_path / 'exp'}, the folder of a run (it holds "
      "results.json); write its output outside the run.")
  a_png = str(tmp_path / "figs" / "a.png")
  assert problem("out", a_png, files=[str(tmp_path / "figs" / "a.json")], runs=[],
                 overwrite=False) == (
      f"--out={a_png}: {tmp_path / 'figs' / 'a.json'} already exists; pass --overwrite to "
      "replace it, or another --out.")
  assert "already exists" in problem("out_dir", str(tmp_path / "figs"), folder=True,
                                     files=[str(tmp_path / "figs" / "a.json")],
                                     overwrite=False)
  for fine in (problem("out", a_png, files=[str(tmp_path / "figs" / "a.json")], runs=[],
                       overwrite=True),
               problem("out", str(tmp_path / "figs" / "b.png"), runs=[str(run)],
                       overwrite=False),
               # Launchers that write into their run on purpose (launch.plot) pass no runs.
               problem("out_dir", str(run), folder=True)):
    assert fine is None
  assert launch.list_problem("workdirs", []) == (
      "--workdirs= is empty or has an empty entry; pass the folders, comma separated (is a "
      "shell variable unset?).")
  assert "empty entry" in launch.list_problem("workdirs", ["a", ""])
  assert launch.list_problem("workdirs", ["a"]) is None
  assert (run / "config.json").read_text() == "{}"
  assert (tmp_path / "figs" / "a.json").read_text() == "keep"


def _flag_values(module, *argv):
  from absl import flags
  values = flags.FlagValues()
  module.define_flags(values)
  values([module.__name__, *argv])
  return values


def test_figure_launchers_keep_runs_and_existing_figures(tmp_path):
  """launch.curves, summ_analysis and orthogonality: --out in an experiment's folder
  replaced its results.json (the curves' JSON), an empty --workdirs drew an empty figure
  over a committed one, and a second run replaced the first's files; now each is a
  one-line error before any work, and --overwrite replaces a figure."""
  from launch import curves, orthogonality, summ_analysis
  exp = tmp_path / "recall_T30"
  (exp / "rum").mkdir(parents=True)
  (exp / "rum" / "metrics.jsonl").write_text(
      json.dumps({"step": 1, "steps_per_sec": 1.0}) + "\n"
      + json.dumps({"step": 1, "eval_loss": 2.0}) + "\n")
  (exp / "results.json").write_text("saved")
  figs = tmp_path / "figs"
  figs.mkdir()
  for name in ("curves.json", "summ_figure6.json", "orthogonality_drift.png"):
    (figs / name).write_text("saved")

  def refused(module, *argv):
    with pytest.raises(SystemExit) as err:
      module.run(_flag_values(module, *argv))
    assert str(err.value).startswith("error: ") and "\n" not in str(err.value)
    return str(err.value)

  work = f"--workdirs={exp / 'rum'}"
  assert "the folder of a run (it holds results.json)" in refused(
      curves, work, f"--out={exp / 'results.png'}", "--overwrite")
  assert "lies inside" in refused(curves, work, f"--out={exp / 'rum' / 'c.png'}")
  assert "--workdirs= is empty" in refused(curves, "--workdirs=", f"--out={figs / 'x.png'}")
  assert "curves.json already exists; pass --overwrite" in refused(
      curves, work, f"--out={figs / 'curves.png'}")
  assert "--workdirs= is empty" in refused(summ_analysis, "--workdirs=",
                                           f"--out_dir={figs}")
  assert "summ_figure6.json already exists" in refused(summ_analysis, work,
                                                       f"--out_dir={figs}")
  assert "lies inside" in refused(summ_analysis, work, f"--out_dir={exp / 'rum'}")
  assert "orthogonality_drift.png already exists" in refused(
      orthogonality, "--ts=3", "--nh=2", "--nx=2", "--batch=1", f"--out_dir={figs}")
  assert all((figs / n).read_text() == "saved" for n in os.listdir(figs))
  assert (exp / "results.json").read_text() == "saved"
  assert not os.path.exists(figs / "curves.png")
  assert curves.run(_flag_values(curves, work, f"--out={figs / 'curves.png'}",
                                 "--overwrite")) == str(figs / "curves.png")
  assert json.loads((figs / "curves.json").read_text())["metric"] == "eval_loss"


def test_predict_and_orthogonality_refuse_in_one_line_from_the_command_line(tmp_path):
  """launch.predict --output=<workdir>/config.json replaced the run's config with JSONL;
  launch.orthogonality's quick try replaced the committed docs/figures/orthogonality_drift.*
  (its default --out_dir, here under a scratch folder as the working directory) and
  --ts=abc printed the whole usage before its message."""
  run = tmp_path / "run"
  run.mkdir()
  (run / "config.json").write_text(json.dumps({"task": "recall"}))
  figures = tmp_path / "docs" / "figures"
  figures.mkdir(parents=True)
  (figures / "orthogonality_drift.json").write_text("committed")
  env = dict(_env(), PYTHONPATH=REPO)
  commands = {
      "lies inside": ["launch.predict", f"--workdir={run}", f"--output={run}/config.json",
                      "--overwrite"],
      "already exists; pass --overwrite": ["launch.predict", f"--workdir={run}",
                                           f"--output={figures}/orthogonality_drift.json"],
      "orthogonality_drift.json already exists": [
          "launch.orthogonality", "--ts=10", "--nh=4", "--nx=4", "--batch=1"],
      "--ts=abc: give positive integers": ["launch.orthogonality", "--ts=abc"]}
  for message, argv in commands.items():
    proc = subprocess.run([sys.executable, "-m", *argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert lines[-1].startswith("error: ") and message in lines[-1], proc.stderr[-2000:]
    assert not any("flags:" in line or "--helpfull" in line for line in lines), lines
  assert json.loads((run / "config.json").read_text()) == {"task": "recall"}
  assert (figures / "orthogonality_drift.json").read_text() == "committed"
  assert os.listdir(figures) == ["orthogonality_drift.json"]


@pytest.mark.parametrize("args,message", [
    (["--task=copyng"], "unknown task 'copyng'; known tasks are ['afqmc', 'babi', 'cmnli', "
                        "'cnn_dailymail', 'copying', 'ptb', 'recall', 'snli', 'sst', "
                        "'stories', 'summ_synthetic', 'tnews']; did you mean 'copying'?"),
    (["--cell=rnm"], "config.model.cell: unknown cell 'rnm'; known cells are ['eurnn'"),
    (["--config.model.lam=-1"], "config.model.lam"),
    (["--config.nosuchfield=3"], "unknown config field 'nosuchfield' (top-level fields: "),
    (["--config.learning_rat=3"], "unknown config field 'learning_rat' (closest: "
                                  "learning_rate"),
    (["--config.evals.eval.type=beam"], "config.evals.eval.type: unknown evaluator 'beam'"),
    # recorded as variant T200 while the default config trained (review)
    (["--config.variant=T200"], "--config.variant: the variant chooses the config itself, "
                                "it is not a field to override; use --variant instead."),
    (["--budget_minutes=0"], "--budget_minutes=0 must be > 0 (leave it out for no time "
                             "limit)."),
    (["--num_processes=2", "--process_id=1"], "--num_processes, --process_id only apply "
                                             "with --distributed; add it"),
])
def test_bad_input_exits_nonzero_with_a_clear_message(tmp_path, args, message):
  proc = _run(str(tmp_path / "bad"), *args, "--steps=2", check=False)
  assert proc.returncode != 0
  assert message in proc.stderr, proc.stderr[-2000:]
  assert "Traceback" not in proc.stderr
  assert not os.path.exists(tmp_path / "bad" / "checkpoints")


def test_cell_for_a_model_without_a_cell_is_refused(tmp_path):
  """--cell=gru on tnews trained StarSaber and recorded "cell": "gru" (review), so the run
  could neither resume without --cell nor be evaluated."""
  proc = subprocess.run([sys.executable, "-m", "launch.train", "--task=tnews", "--cell=gru",
                         f"--workdir={tmp_path / 'run'}", "--steps=2"], cwd=REPO, env=_env(),
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == (
      "error: --cell=gru: the tnews model (starsaber) has no recurrent cell to choose; "
      "leave --cell out (--variant chooses its configuration).")
  assert not (tmp_path / "run").exists()


def test_a_real_and_a_learned_lam_train_from_the_command_line(tmp_path):
  """--config.model.lam=0.5 trains; --config.model.learn_lam=True makes lam a parameter
  (in the checkpoint, kept >= 0), logged with every evaluation as params/.../lam."""
  _run(tmp_path / "real", "--steps=3", "--config.model.lam=0.5")
  _run(tmp_path / "learned", "--steps=4", "--eval_every=2", "--config.model.lam=0.5",
       "--config.model.learn_lam=True", "--config.learning_rate=0.1")
  step, params = _params(tmp_path / "learned")
  lam = float(np.asarray(params["rnn"]["cell"]["lam"]))
  assert step == 4 and lam >= 0 and lam != 0.5
  records = [json.loads(line) for line in open(tmp_path / "learned" / "metrics.jsonl")]
  logged = [(r["step"], r["params/rnn/cell/lam"]) for r in records
            if "params/rnn/cell/lam" in r]
  assert [s for s, _ in logged] == [2, 4] and logged[-1][1] == pytest.approx(lam)


def test_steps_zero_prints_the_parameter_count(tmp_path):
  """--steps=0 prints the count; also (issue 46, item 8) --cpu_devices above the core
  count warns, and no launch prints JAX's libtpu.so INFO line."""
  too_many = (os.cpu_count() or 1) + 1
  proc = _run(str(tmp_path / "count"), "--steps=0", "--cell=gru",
              f"--cpu_devices={too_many}")
  record = json.loads(proc.stdout.strip().splitlines()[-1])
  assert record["cell"] == "gru" and record["num_params"] > 0
  assert f"--cpu_devices={too_many} is more than the {os.cpu_count()} core(s)" in proc.stderr
  assert "libtpu.so" not in proc.stderr


@pytest.mark.slow   # ~35 s; resume exactness is also checked by test_task_ptb (in-process)
def test_sigterm_then_restart_equals_an_uninterrupted_run(tmp_path):
  steps = "--steps=24"
  full = str(tmp_path / "full")
  _run(full, steps)
  # Stop at step 12, restart to 24.
  split = str(tmp_path / "split")
  _run(split, "--steps=12")
  _run(split, steps)
  # A real SIGTERM to the launcher while it is provably mid-run: tests.launch_paused holds
  # the loop after step 7 until the launcher's handler has run, so it stops exactly there.
  term = str(tmp_path / "term")
  proc = _start_until(term, "paused after step 7", steps, launcher="tests.launch_paused",
                      env={launch_paused.ENV: "7"})
  try:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == 0, err[-3000:]
  summary = json.loads(out.strip().splitlines()[-1])
  assert summary["preempted"] is True and summary["step"] == 7, summary
  assert f"Received signal {int(signal.SIGTERM)}" in err
  assert _checkpoint_steps(term) == [7]
  _run(term, steps)
  reference_step, reference = _params(full)
  assert reference_step == 24
  for workdir in (split, term):
    step, params = _params(workdir)
    assert step == 24
    _assert_params_close(params, reference)


def test_four_devices_equal_one_device_and_resume_on_one(tmp_path):
  _run(str(tmp_path / "one"), "--steps=3", devices=1)
  _run(str(tmp_path / "four"), "--steps=3", devices=4)
  _assert_params_close(_params(str(tmp_path / "four"))[1], _params(str(tmp_path / "one"))[1],
                       atol=1e-6)
  # A run saved on 4 devices resumes on 1 (another topology) and continues.
  _run(str(tmp_path / "four"), "--steps=4", devices=1)
  assert _params(str(tmp_path / "four"))[0] == 4


def _free_port():
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


@pytest.mark.slow   # ~50 s: three processes; four devices in one is tested by default
def test_two_processes_equal_one_process(tmp_path):
  _run(str(tmp_path / "single"), "--steps=3")
  workdir = str(tmp_path / "multi")
  address = f"localhost:{_free_port()}"
  procs = [subprocess.Popen(
      _cmd(workdir, "--steps=3", "--distributed", f"--coordinator_address={address}",
           "--num_processes=2", f"--process_id={i}"),
      cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for i in range(2)]
  for p in procs:
    _, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-3000:]
  _assert_params_close(_params(workdir)[1], _params(str(tmp_path / "single"))[1], atol=1e-6)


def test_cpu_devices_flag(tmp_path):
  """--cpu_devices=2 gives the loop two CPU devices (data parallel over the cores)."""
  proc = _run(str(tmp_path / "w"), "--steps=2", "--cpu_devices=2")
  assert "2 device(s)" in proc.stderr
  bad = _run(str(tmp_path / "b"), "--steps=2", "--cpu_devices=0", check=False)
  assert bad.returncode != 0 and "cpu_devices must be a positive number" in bad.stderr


@pytest.mark.slow   # ~30 s; test_benchmark_encoders smoke-tests the benchmark
def test_benchmark_runs_both_device_modes(tmp_path):
  """The benchmark's table at a tiny shape: one-device and ':dp' candidates, ratios to GRU."""
  out = tmp_path / "bench.json"
  proc = subprocess.run(
      [sys.executable, "-m", "launch.benchmark", "--shapes=4x5x3x4", "--repeats=1",
       "--matmul_size=64", "--cpu_devices=2",
       "--candidates=gru,rum1,gru:dp,rum1:dp,lstm,lstmn,rum05",
       f"--output={out}"], cwd=REPO, env=_env(), capture_output=True, text=True,
      timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads(out.read_text())
  assert result["devices"] == 2
  rows = result["shapes"]["4x5x3x4"]["candidates"]
  assert set(rows) == {"gru", "rum1", "gru:dp", "rum1:dp", "lstm", "lstmn", "rum05"}
  assert rows["gru"]["ratio_gru"] == rows["gru:dp"]["ratio_gru"] == 1.0
  assert rows["lstm"]["ratio_lstm"] == 1.0 and rows["lstmn"]["ratio_lstm"] > 0
  assert min(rows["gru"]["ratio_best_gru"], rows["gru:dp"]["ratio_best_gru"]) == 1.0
  assert all(r["ms"] > 0 for r in rows.values())


@pytest.mark.slow   # ~25 s; a measurement tool, its decoders are tested in test_decoding
def test_benchmark_decoding(tmp_path):
  """--decoding at a tiny shape: greedy and beam per cell, all run to max_len, ratios."""
  out = tmp_path / "decode.json"
  proc = subprocess.run(
      [sys.executable, "-m", "launch.benchmark", "--decoding", "--decode_shape=2x8x32x6",
       "--beam_sizes=2", "--repeats=1", "--matmul_size=64", f"--output={out}"],
      cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "x greedy" in proc.stdout and "beam2" in proc.stdout
  rows = json.loads(out.read_text())["decoding"]["candidates"]
  assert set(rows) == {f"{c}/{s}" for c in ("gru", "rum0", "rum1") for s in ("greedy", "beam2")}
  assert all(r["ms"] > 0 and r["compile_s"] > 0 and r["tokens"] == 2 * 6 for r in rows.values())
  assert rows["rum1/greedy"]["ratio_greedy"] == rows["gru/beam2"]["ratio_gru"] == 1.0


@pytest.mark.slow   # ~1.5 min of compiling the PTB cores
def test_benchmark_lm(tmp_path):
  """--lm at a tiny shape and scale: every PTB core and Flax's LSTM, ratios to baselines."""
  out = tmp_path / "lm.json"
  names = ["fs_rum2", "fs_lstm2", "rum1000", "lstm1000", "flax_lstm1000"]
  proc = subprocess.run(
      [sys.executable, "-m", "launch.benchmark", f"--lm={','.join(names)}", "--lm_shape=2x5",
       "--lm_scale=100", "--repeats=1", "--matmul_size=64", f"--output={out}"],
      cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "x fs_lstm2" in proc.stdout and "tokens/s" in proc.stdout
  rows = json.loads(out.read_text())["lm"]["candidates"]
  assert list(rows) == names
  assert all(r["ms"] > 0 and r["compile_s"] > 0 and r["tokens_per_s"] > 0 and r["params"] > 0
             for r in rows.values())
  assert rows["fs_lstm2"]["ratio_fs_lstm2"] == rows["lstm1000"]["ratio_lstm1000"] == 1.0
  assert "ratio_fs_lstm2" in rows["fs_rum2"] and "ratio_lstm1000" in rows["flax_lstm1000"]


@pytest.mark.slow   # ~40 s: a measurement tool; tests/test_benchmarks tests its parts
def test_benchmark_encoders(tmp_path):
  """--encoders at a tiny size: StarSaber, Transformer and ReZero steps side by side, with
  parameter counts and the ratio to the Transformer."""
  out = tmp_path / "enc.json"
  proc = subprocess.run(
      [sys.executable, "-m", "launch.benchmark", "--encoders=starsaber,transformer,rezero",
       "--encoder_shapes=2x8", "--encoder_size=1x16", "--repeats=1", "--matmul_size=64",
       f"--output={out}"], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "x transformer" in proc.stdout
  rows = json.loads(out.read_text())["encoders"]["shapes"]["2x8"]
  assert list(rows) == ["starsaber", "transformer", "rezero"]
  assert rows["transformer"]["ratio_transformer"] == 1.0
  # One StarSaber layer of width d: U, Q, V, W (4 d^2) and alpha.
  assert rows["starsaber"]["encoder_params"] == 4 * 16 * 16 + 1
  assert all(r["ms"] > 0 and r["params"] > r["encoder_params"] for r in rows.values())


def test_predict_writes_a_clue_submission(tmp_path):
  """launch.predict on a fine-tuned afqmc run: one jsonl row per test pair, CLUE's ids and
  label strings; a task without submissions and a missing workdir are one-line errors."""
  from tests import test_task_clue
  folder = test_task_clue.afqmc_dir(tmp_path)
  data = ["--task=afqmc", f"--config.manual_dir={folder}",
          f"--config.data_dir={tmp_path / 'tfds'}"]
  small = ["--batch_size=4", "--config.eval_batch_size=4", "--config.model.num_layers=1",
           "--config.model.hidden_size=8", "--config.model.embed_dim=8",
           "--config.model.num_heads=2", "--eval_every=2", "--checkpoint_every=2"]
  wd = tmp_path / "run"
  train = subprocess.run([sys.executable, "-m", "launch.train", f"--workdir={wd}", "--steps=2",
                          *data, *small], cwd=REPO, env=_env(), capture_output=True,
                         text=True, timeout=600)
  assert train.returncode == 0, train.stderr[-3000:]
  out = tmp_path / "afqmc_predict.json"
  proc = subprocess.run([sys.executable, "-m", "launch.predict", f"--workdir={wd}",
                         f"--output={out}", f"--config.manual_dir={folder}",
                         f"--config.data_dir={tmp_path / 'tfds'}"],
                        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = [json.loads(line) for line in out.read_text().splitlines()]
  assert [r["id"] for r in rows] == list(range(100, 107))
  assert all(set(r) == {"id", "label"} and r["label"] in ("0", "1") for r in rows)
  assert json.loads(proc.stdout.strip().splitlines()[-1])["rows"] == 7
  missing = subprocess.run([sys.executable, "-m", "launch.predict", "--task=afqmc",
                            f"--workdir={tmp_path / 'nothing'}",
                            f"--output={tmp_path / 'none.json'}",
                            f"--config.manual_dir={folder}"],
                           cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
  assert missing.returncode != 0
  assert "error: no checkpoints in" in missing.stderr.strip().splitlines()[-1]
  folder_out = subprocess.run([sys.executable, "-m", "launch.predict", f"--workdir={wd}",
                               f"--output={tmp_path}", f"--config.manual_dir={folder}"],
                              cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
  assert folder_out.returncode != 0 and "is a folder" in folder_out.stderr.splitlines()[-1]
  # --pred=metrics is a predict function of the task, but the submission cannot read it
  # (review: an IndexError after predicting the whole split).
  metrics = subprocess.run([sys.executable, "-m", "launch.predict", f"--workdir={wd}",
                            f"--output={tmp_path / 'm.json'}", "--pred=metrics",
                            f"--config.manual_dir={folder}"],
                           cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
  assert metrics.returncode != 0 and "Traceback" not in metrics.stderr
  assert metrics.stderr.strip().splitlines()[-1] == (
      "error: --pred=metrics: the afqmc submission is written from the output of 'predict'; "
      "pass one of them (or leave --pred out), or use launch.evaluate for metrics.")
  assert not (tmp_path / "m.json").exists()
  evals = subprocess.run([sys.executable, "-m", "launch.predict", f"--workdir={wd}",
                          f"--output={tmp_path / 'e.json'}", "--evals=nonexistent"],
                         cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
  assert evals.stderr.strip().splitlines()[-1].startswith(   # accepted and ignored (review)
      "error: --evals is launch.evaluate's"), evals.stderr[-2000:]
  # --help lists the flags predict takes from launch.evaluate (--workdir, --best, ...).
  usage = subprocess.run([sys.executable, "-m", "launch.predict", "--help"], cwd=REPO,
                         env=_env(), capture_output=True, text=True, timeout=600)
  assert usage.returncode == 0 and "--workdir" in usage.stdout and "--best" in usage.stdout


def _start_until(workdir, marker, *extra, launcher="launch.train", env=None):
  """Starts a training run (``launcher``, with ``env`` added to the environment) and reads
  its log until the line containing ``marker``: the run has provably reached that point (no
  sleeps). Returns the process (its stderr still open)."""
  proc = subprocess.Popen(_cmd(workdir, *extra, launcher=launcher), cwd=REPO,
                          env={**_env(), **(env or {})}, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  lines = []
  for line in proc.stderr:
    if marker in line:
      return proc
    lines.append(line)
  proc.wait()
  raise AssertionError(f"the run ended (exit {proc.returncode}) before logging {marker!r}:\n"
                       + "".join(lines[-30:]))


def _snapshot(workdir):
  out = {}
  for root, _, files in os.walk(workdir):
    for name in files:
      with open(os.path.join(root, name), "rb") as f:
        out[os.path.relpath(os.path.join(root, name), workdir)] = f.read()
  return out


# A line of the config dump (every task's config has this field): printed once a run
# really starts, never before a refused start's one-line error.
CONFIG_LINE = "adagrad_init: "


def test_resume_with_another_model_is_a_one_line_error_and_touches_nothing(tmp_path):
  """Issue 27, rows 1 and 5: --config.model.hidden_size=16 or --cell=gru over a run of
  hidden size 8 with RUM: exit 1, one line naming the field with both values, no
  traceback, and the workdir (config.json, metrics.jsonl, events, checkpoints) unchanged.
  Issue 46, item 3: nothing of the config is printed before that line (it is printed
  when a run starts). Item 6: the finished run again with --steps=1 is a one-line error,
  with --steps=2 a no-op that says so; the workdir stays byte-identical (config.json not
  rewritten, no second final record in metrics.jsonl)."""
  workdir = str(tmp_path / "run")
  first = _run(workdir, "--steps=2", "--checkpoint_every=1")
  assert "Traceback" not in first.stderr and "Event loop is closed" not in first.stderr
  assert "Starting at step 0 of 2 on 1 device(s); config:" in first.stderr
  assert CONFIG_LINE in first.stderr
  before = _snapshot(workdir)
  for args, field in [(["--config.model.hidden_size=16"],
                       "config.model.hidden_size: 8 in the workdir, 16 now"),
                      (["--cell=gru"], "config.model.cell: 'rum' in the workdir, 'gru' now"),
                      (["--steps=1"], "holds a run at step 2, past num_steps=1 (--steps)")]:
    proc = _run(workdir, "--steps=4", *args, check=False)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "Event loop is closed" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: workdir ") and field in last, last
    assert "--workdir" in last and CONFIG_LINE not in proc.stderr
    assert _snapshot(workdir) == before
  again = _run(workdir, "--steps=2", "--checkpoint_every=1")
  assert "the run finished at step 2 already" in again.stderr
  assert json.loads(again.stdout.strip().splitlines()[-1])["stop_reason"] == "finished"
  assert _snapshot(workdir) == before


def test_refused_starts_print_the_error_last_and_leave_no_workdir(tmp_path):
  """Issue 46, items 3 and 8: a batch that does not divide over the devices and a bAbI
  folder without the bAbI files end with their one-line error, print nothing of the
  config, and leave no new workdir behind (it held only an empty run.lock)."""
  odd = tmp_path / "odd"
  proc = _run(str(odd), "--steps=3", "--batch_size=6", devices=4, check=False)
  assert proc.returncode != 0
  assert "batch_size=6 is not divisible by the number of devices (4)" in (
      proc.stderr.strip().splitlines()[-1])
  assert CONFIG_LINE not in proc.stderr and not odd.exists()
  empty = tmp_path / "empty"
  empty.mkdir()
  wrong = tmp_path / "ptb"
  wrong.mkdir()
  (wrong / "ptb.train.txt").write_text(" the cat \n")
  proc = subprocess.run(
      [sys.executable, "-m", "launch.train", "--task=babi", f"--workdir={empty}",
       f"--config.manual_dir={wrong}", f"--config.data_dir={tmp_path / 'tfds'}",
       "--config.version=en", "--steps=2"], cwd=REPO, env=_env(), capture_output=True,
      text=True, timeout=600)
  assert proc.returncode == 1 and "Traceback" not in proc.stderr
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("error: bAbI en_qa1: ") and str(wrong / "en") in last, last
  assert CONFIG_LINE not in proc.stderr
  assert empty.is_dir() and not os.listdir(empty)            # as it was: empty
  assert set(os.listdir(tmp_path / "tfds" / "babi")) <= {".config"}   # no empty data folder


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_first_step_compiles_stops_cleanly(tmp_path, sig):
  """Issue 27, row 5: Ctrl-C or SIGTERM sent once the run logs that it compiles the first
  step: exit 0, preempted, no traceback; it never trains on to the end."""
  workdir = str(tmp_path / "run")
  proc = _start_until(workdir, "Compiling the train step", "--steps=500")
  proc.send_signal(sig)
  out, err = proc.communicate(timeout=300)
  assert proc.returncode == 0, err[-3000:]
  summary = json.loads(out.strip().splitlines()[-1])
  assert summary["preempted"] is True and summary["stop_reason"] == "preempted"
  assert summary["step"] < 500
  assert "Traceback" not in err


@pytest.mark.slow   # ~30 s: two runs side by side
def test_a_second_run_into_a_busy_workdir_is_refused(tmp_path):
  """Issue 27, row 2: while a run trains, a second one (another seed) into its workdir is
  refused at once, naming the holder, and writes nothing; the first goes on."""
  workdir = str(tmp_path / "run")
  never = "--steps=1000000000"                               # stopped by SIGTERM below
  first = _start_until(workdir, "Compiling the train step", never)
  try:
    second = _run(workdir, never, "--seed=3", check=False)
    assert second.returncode == 1
    assert "Traceback" not in second.stderr
    last = second.stderr.strip().splitlines()[-1]
    assert "is in use by another run" in last and f"pid {first.pid}" in last, last
  finally:
    first.send_signal(signal.SIGTERM)
    out, err = first.communicate(timeout=300)
  assert first.returncode == 0, err[-3000:]
  assert json.loads(out.strip().splitlines()[-1])["preempted"] is True
  steps = [json.loads(line)["step"] for line in open(os.path.join(workdir, "metrics.jsonl"))]
  assert len(steps) == len(set(steps))                       # one run's records only
  assert len(os.listdir(os.path.join(workdir, "tensorboard"))) == 1


# A tiny synthetic summarization run whose beam-search ROUGE evaluator runs every 2 steps.
SUMM = ["--task=summ_synthetic", "--batch_size=4", "--config.num_train=64",
        "--config.num_eval=8", "--config.num_rare=200", "--config.model.hidden_size=8",
        "--config.model.embed_dim=8", "--config.max_enc_steps=40", "--config.max_dec_steps=6",
        "--config.max_decode_steps=6", "--config.beam_size=2", "--config.evals.eval.batches=1",
        "--config.evals.test.every=2", "--config.evals.test.batches=1",
        "--config.evals.lead3.batches=1", "--eval_every=2", "--checkpoint_every=2",
        "--config.log_every=1", "--steps=6"]


def _records(workdir):
  """metrics.jsonl without the timing fields."""
  return [{k: v for k, v in json.loads(line).items() if k not in ("steps_per_sec", "eta_sec")}
          for line in open(os.path.join(workdir, "metrics.jsonl"))]


@pytest.mark.slow   # ~2.5 min: three summarization runs with beam search
def test_kill_9_during_a_beam_rouge_evaluation_then_rerun_equals_a_straight_run(tmp_path):
  """Issue 27, item 7: kill -9 once the run has entered the beam-search ROUGE evaluation at
  step 4 (after the checkpoint of step 2, before that of step 4); the same command again
  resumes from step 2 and ends with the same final metrics and the same metrics.jsonl as a
  straight run (the killed run's records after step 2 are set aside, not doubled)."""
  straight = str(tmp_path / "straight")
  done = subprocess.run([sys.executable, "-m", "launch.train", f"--workdir={straight}",
                         *SUMM], cwd=REPO, env=_env(), capture_output=True, text=True,
                        timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  killed = str(tmp_path / "killed")
  cmd = [sys.executable, "-m", "launch.train", f"--workdir={killed}", *SUMM]
  proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  for line in proc.stderr:
    if "step 4: running evaluator test." in line:
      proc.kill()
      break
  proc.communicate(timeout=300)
  assert proc.returncode == -signal.SIGKILL
  assert _checkpoint_steps(killed) == [2]
  assert {r["step"] for r in _records(killed)} == {1, 2, 3, 4}    # written after step 2
  again = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True,
                         timeout=600)
  assert again.returncode == 0, again.stderr[-3000:]
  assert "Resumed from the checkpoint at step 2" in again.stderr
  assert "Traceback" not in again.stderr and "Traceback" not in done.stderr
  final = lambda out: {k: v for k, v in json.loads(out.strip().splitlines()[-1]).items()
                       if k not in ("steps_per_sec", "eta_sec")}
  assert final(again.stdout) == final(done.stdout)
  assert _records(killed) == _records(straight)
  discarded = [json.loads(line)["step"]
               for line in open(os.path.join(killed, "metrics.discarded.jsonl"))]
  assert discarded and min(discarded) == 3

"""``rumjax.analysis``: cos(theta) sown by the RUM modules of any model (both the rum_scan
path and the per-step RUMCell under nn.RNN) equals ``rum_scan(..., return_cos=True)``;
nothing is sown (nor computed) without a mutable ``"intermediates"``; the readers."""

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tasks
from tasks import copying, recall
from rumjax import RUMCell, analysis, make_cell, rum_scan
from rumjax.cells import rum as rum_cell
from rumjax.models.sequence import SequenceClassifier, run_recurrence


VOCAB_SIZE = {"copying": copying.VOCAB_SIZE, "recall": recall.VOCAB_SIZE}


def _small_config(name, **fields):
  """The task's default config with ``fields`` set (in ``config.model`` if it is there)."""
  task = tasks.get_task(name)
  config = task.get_config()
  with config.unlocked():
    for key, value in fields.items():
      model = config.get("model")
      (model if model is not None and key in model else config)[key] = value
  return task, config


def _copying():
  task, config = _small_config("copying", hidden_size=8, delay=4, batch_size=4, num_test=4)
  return task.build_model(config), analysis.fixed_batch(task, config), VOCAB_SIZE[task.name]


def _recall():
  task, config = _small_config("recall", hidden_size=8, length=6, batch_size=4, num_test=4,
                               lam=0, eta=1.0)
  return task.build_model(config), analysis.fixed_batch(task, config), VOCAB_SIZE[task.name]


def _embedded():
  """bAbI-style: a learned embedding and padded sequences with lengths."""
  model = SequenceClassifier(cell=make_cell("rum", 8, lam=1), vocab_size=11, num_classes=3,
                             embed_dim=5)
  rng = np.random.default_rng(0)
  batch = {"inputs": rng.integers(1, 11, (3, 7)).astype(np.int32),
           "lengths": np.array([7, 4, 2], np.int32), "mask": np.ones(3, np.float32)}
  return model, batch, None


def _cell_inputs(params, inputs, vocab_size):
  if vocab_size is None:
    return np.asarray(params["input"]["embed"]["embedding"])[inputs]
  return np.eye(vocab_size, dtype=np.float32)[inputs]


@pytest.mark.parametrize("scan", [True, False], ids=["rum_scan", "nn.RNN"])
@pytest.mark.parametrize("make", [_copying, _recall, _embedded],
                         ids=["copying", "recall", "embedded"])
def test_sown_cos_equals_rum_scan(monkeypatch, make, scan):
  if not scan:   # the same cell and parameters, stepped by RUMCell under nn.RNN
    monkeypatch.setattr(rum_cell, "supports_scan", lambda cell: False)
  model, batch, vocab_size = make()
  variables = model.init(jax.random.key(0), batch)
  assert "intermediates" not in variables
  _, state = model.apply(variables, batch, mutable=["intermediates"])
  assert list(analysis.sown_cos(state)) == ["rnn" if scan else "rnn/cell"]
  cos = analysis.cos_theta(model, variables["params"], batch, train=False)
  params = variables["params"]
  cell = model.cell
  _, _, expected = rum_scan(params["rnn"]["cell"],
                            _cell_inputs(params, batch["inputs"], vocab_size),
                            lam=cell.lam, eta=cell.eta, activation=cell.activation,
                            update_gate=cell.update_gate, return_cos=True, impl="reference")
  assert cos.shape == batch["inputs"].shape
  np.testing.assert_allclose(cos, expected, atol=2e-6)


class _Recurrence(nn.Module):
  cell: nn.RNNCellBase

  @nn.compact
  def __call__(self, xs):
    return run_recurrence(self.cell, xs)


def _cos_from_outputs(params, xs, hs, norm_tau):
  """cos of the angle between e_t and tau_t, from the cell's outputs h_{t-1}."""
  nh = hs.shape[-1]
  h_prev = np.concatenate([np.zeros_like(hs[:, :1]), hs[:, :-1]], axis=1)
  x_proj = xs @ params["kernel_x"] + params["bias"]
  tau = norm_tau(x_proj[..., :nh] + h_prev @ params["kernel_h"][:, :nh])
  e = x_proj[..., 2 * nh:]
  return np.sum(e * tau, -1) / (np.linalg.norm(e, axis=-1) * np.linalg.norm(tau, axis=-1))


@pytest.mark.parametrize("options", [dict(layer_norm=True), dict(zoneout=0.3, eta=1.0)],
                         ids=["layer_norm", "zoneout"])
def test_sown_cos_of_cells_that_need_nn_rnn(options):
  """layer_norm / zoneout run under nn.RNN; cos is the angle of the cell's own e and tau
  (tau after layer norm; h_{t-1} after zoneout)."""
  model = _Recurrence(RUMCell(6, lam=1, **options))
  xs = jax.random.normal(jax.random.key(1), (3, 5, 4))
  variables = model.init(jax.random.key(0), xs)
  cell_params = variables["params"]["rnn"]["cell"]
  hs = np.asarray(model.apply(variables, xs))
  if options.get("layer_norm"):
    ln = nn.LayerNorm()
    norm_tau = lambda a: np.asarray(ln.apply({"params": cell_params["ln_tau"]}, a))
  else:
    norm_tau = lambda a: a
  cos = analysis.cos_theta(model, variables, xs)
  expected = _cos_from_outputs(jax.tree.map(np.asarray, cell_params), np.asarray(xs), hs,
                               norm_tau)
  assert cos.shape == (3, 5)
  np.testing.assert_allclose(cos, expected, atol=1e-5)


@pytest.mark.parametrize("scan", [True, False], ids=["rum_scan", "nn.RNN"])
def test_nothing_sown_or_computed_without_mutable_intermediates(monkeypatch, scan):
  if not scan:
    monkeypatch.setattr(rum_cell, "supports_scan", lambda cell: False)
  calls = []
  real_scan = rum_cell.rum_lib.rum_scan

  def spy(*args, **kwargs):
    calls.append(kwargs.get("return_cos"))
    return real_scan(*args, **kwargs)

  monkeypatch.setattr(rum_cell.rum_lib, "rum_scan", spy)
  model, batch, _ = _recall()
  variables = model.init(jax.random.key(0), batch)
  logits = model.apply(variables, batch)
  assert logits.shape == (4, 10)
  _, state = model.apply(variables, batch, mutable=["batch_stats"])
  assert not state
  assert calls == ([False] * 3 if scan else [])   # init, apply, apply
  _, state = model.apply(variables, batch, mutable=["intermediates"])
  assert analysis.sown_cos(state)
  assert calls == ([False] * 3 + [True] if scan else [])


def test_rum_cell_step_sows_per_step():
  cell = RUMCell(6)
  x = jnp.ones((2, 3))
  variables = cell.init(jax.random.key(0), cell.initialize_carry(jax.random.key(0), x.shape), x)
  _, state = cell.apply(variables, jnp.zeros((2, 6)), x, mutable=["intermediates"])
  assert state["intermediates"]["cos_theta"][0].shape == (2,)


def test_cos_theta_errors():
  model = SequenceClassifier(cell=make_cell("gru", 4), vocab_size=5, num_classes=2)
  batch = {"inputs": np.zeros((2, 3), np.int32)}
  variables = model.init(jax.random.key(0), batch)
  with pytest.raises(ValueError, match="sowed no cos_theta"):
    analysis.cos_theta(model, variables, batch)
  with pytest.raises(ValueError, match="sowed cos_theta 2 times"):
    analysis.sown_cos({"rnn": {"cos_theta": (np.zeros(2), np.zeros(2))}})


def test_mean_cos_per_step_weights():
  cos = np.array([[0.1, 0.2, 0.3], [0.5, 0.6, 0.7]])
  np.testing.assert_allclose(analysis.mean_cos_per_step(cos), [0.3, 0.4, 0.5])
  batch = {"lengths": np.array([3, 1]), "mask": np.array([1.0, 1.0])}
  weights = analysis.step_weights(batch, cos.shape)
  np.testing.assert_allclose(analysis.mean_cos_per_step(cos, weights), [0.3, 0.2, 0.3])
  padded = analysis.step_weights({"mask": np.array([1.0, 0.0])}, cos.shape)
  np.testing.assert_allclose(analysis.mean_cos_per_step(cos, padded), cos[0])
  none = analysis.mean_cos_per_step(cos, np.zeros_like(cos))
  assert np.all(np.isnan(none))
  steps, _, counts = analysis.cos_histograms({0: none, 5: cos[0]}, bins=4)
  assert list(steps) == [0, 5] and counts.sum(axis=1).tolist() == [0, 3]


def test_mean_cos_of_params_on_a_task_batch():
  task, config = _small_config("recall", hidden_size=8, length=6, batch_size=4, num_test=4)
  batch = analysis.fixed_batch(task, config.to_dict(), rows=3)
  assert batch["inputs"].shape == (3, 9)
  params = task.build_model(config).init(jax.random.key(0), batch)["params"]
  cos = analysis.mean_cos_of_params(task, config.to_dict(), params, batch)
  assert cos.shape == (9,) and np.all(np.abs(cos) <= 1.0)


def test_readers(tmp_path):
  records = [{"step": 1, "train_loss": 2.0}, {"step": 2, "eval_accuracy": 0.5},
             {"step": 1, "train_loss": 1.5}]
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
  read = analysis.read_jsonl(str(tmp_path / "metrics.jsonl"))
  assert read == records and analysis.read_jsonl(str(tmp_path / "none.jsonl")) == []
  steps, values = analysis.metric_curve(read, "train_loss")
  assert steps.tolist() == [1] and values.tolist() == [1.5]
  (tmp_path / "cos_theta.jsonl").write_text(
      json.dumps({"step": 0, "cos_mean": [0.1, -0.2]}) + "\n")
  cos = analysis.read_cos_records(str(tmp_path))
  assert list(cos) == [0] and cos[0].tolist() == [0.1, -0.2]


def test_curves_launcher_draws_steps_and_time(tmp_path):
  """launch.curves: a metric of two workdirs against steps and training time, PNG + JSON
  with folder names only; a missing metric is a one-line error."""
  import json
  from absl import flags
  from launch import curves as launch_curves
  from rumjax import utils
  dirs = []
  for name, rate in (("a", 2.0), ("b", 4.0)):
    d = tmp_path / name
    d.mkdir()
    utils.write_jsonl(str(d / "metrics.jsonl"), [
        {"step": 10, "steps_per_sec": rate}, {"step": 10, "eval_ppl": 300.0},
        {"step": 20, "steps_per_sec": rate}, {"step": 20, "eval_ppl": 200.0}])
    dirs.append(str(d))
  values = flags.FlagValues()
  launch_curves.define_flags(values)
  out = str(tmp_path / "fig" / "curves.png")
  values(["curves", f"--workdirs={','.join(dirs)}", "--labels=A,B", "--metric=eval_ppl",
          f"--out={out}"])
  assert launch_curves.run(values) == out
  with open(out, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  with open(str(tmp_path / "fig" / "curves.json")) as f:
    record = json.load(f)
  assert record["workdirs"] == ["a", "b"]
  assert record["curves"]["A"] == {"steps": [10, 20], "values": [300.0, 200.0],
                                   "seconds": [5.0, 10.0]}
  assert record["curves"]["B"]["seconds"] == [2.5, 5.0]
  values = flags.FlagValues()
  launch_curves.define_flags(values)
  values(["curves", f"--workdirs={dirs[0]}", "--metric=eval_loss", f"--out={out}",
          "--overwrite"])
  with pytest.raises(SystemExit, match="records no 'eval_loss'"):
    launch_curves.run(values)
  # Two workdirs of one name (<models>/qa1): one curve replaced the other; now an error.
  for d in ("x/qa1", "y/qa1"):
    (tmp_path / d).mkdir(parents=True)
    (tmp_path / d / "metrics.jsonl").write_text((tmp_path / "a" / "metrics.jsonl").read_text())
  values = flags.FlagValues()
  launch_curves.define_flags(values)
  values(["curves", f"--workdirs={tmp_path / 'x/qa1'},{tmp_path / 'y/qa1'}",
          "--metric=eval_ppl", f"--out={tmp_path / 'two.png'}"])
  with pytest.raises(SystemExit, match=r"the label\(s\) \['qa1'\] name several workdirs"):
    launch_curves.run(values)
  assert not (tmp_path / "two.png").exists()


def test_load_params_of_a_missing_or_foreign_file_is_a_one_line_error(tmp_path):
  """launch.plot --params=missing.npz said 'no checkpoint found' (steps there: []); a file
  that is not a .npz got numpy's pickle message."""
  from rumjax import analysis
  with pytest.raises(ValueError, match=r"^no parameter file '.*missing\.npz'\.$"):
    analysis.load_params(str(tmp_path / "missing.npz"))
  (tmp_path / "notes.txt").write_text("hello")
  with pytest.raises(ValueError, match=r"notes\.txt' is not a \.npz of parameters"):
    analysis.load_params(str(tmp_path / "notes.txt"))
  np.savez(tmp_path / "p.npz", **{"rnn/cell/b": np.ones(2)})
  assert analysis.load_params(str(tmp_path / "p.npz"))[0] is None


class _Sows(nn.Module):
  """Sows its input as cos_theta, as a RUM does."""

  @nn.compact
  def __call__(self, x):
    self.sow("intermediates", "cos_theta", x)
    return x


class _TwoRums(nn.Module):
  @nn.compact
  def __call__(self, x):
    return _Sows(name="second")(_Sows(name="first")(x))


def test_cos_theta_of_a_model_with_several_rums_needs_a_path():
  x = jnp.arange(6.0).reshape(2, 3)
  with pytest.raises(ValueError, match=r"several RUMs sowed cos_theta: \['first', 'second'\]; "
                                       r"pick one with path="):
    analysis.cos_theta(_TwoRums(), {}, x)
  np.testing.assert_array_equal(analysis.cos_theta(_TwoRums(), {}, x, path="second"), x)
  with pytest.raises(ValueError, match=r"no cos_theta sown at 'third'"):
    analysis.cos_theta(_TwoRums(), {}, x, path="third")


def test_cos_recorder_writes_a_step_once_and_matches_the_checkpoint_reader(tmp_path):
  """CosThetaRecorder appends mean_cos_of_params on the fixed test batch; a step already in
  cos_theta.jsonl (called again, or a resumed run's new recorder) is not written again."""
  import types
  from rumjax.analysis import angles
  task, config = _small_config("recall", hidden_size=8, length=6, batch_size=4, num_test=4)
  batch = analysis.fixed_batch(task, config, rows=4)
  params = task.build_model(config).init(jax.random.key(0), batch)["params"]
  state = types.SimpleNamespace(params=params)
  recorder = angles.CosThetaRecorder(task, config, str(tmp_path), rows=4)
  recorder(0, state)
  recorder(0, state)
  angles.CosThetaRecorder(task, config, str(tmp_path), rows=4)(0, state)   # resumed
  rows = analysis.read_jsonl(str(tmp_path / angles.COS_FILE))
  assert [r["step"] for r in rows] == [0]
  np.testing.assert_allclose(rows[0]["cos_mean"],
                             analysis.mean_cos_of_params(task, config, params, batch), atol=1e-5)


def test_metric_over_time_is_linear_from_the_start_of_training():
  """An evaluation before the first logged rate (step 5, first log at step 10 after 5 s)
  is placed between step 0 (0 s) and that log: 2.5 s."""
  records = [{"step": 5, "eval_x": 1.0}, {"step": 10, "steps_per_sec": 2.0},
             {"step": 10, "eval_x": 0.5}, {"step": 30, "steps_per_sec": 4.0},
             {"step": 20, "eval_x": 0.25}]
  seconds, values = analysis.metric_over_time(records, "eval_x")
  np.testing.assert_allclose(seconds, [2.5, 5.0, 7.5])
  np.testing.assert_allclose(values, [1.0, 0.5, 0.25])


def test_recorded_paths_name_no_machine():
  from rumjax.analysis import runs
  assert runs.recorded_path("/work/repo/runs/lead", root="/work/repo") == "runs/lead"
  assert runs.recorded_path("/tmp/runs/lead/", root="/work/repo") == "lead"


def test_cos_histograms_leave_out_steps_without_weight():
  """A step with no weight (NaN in mean_cos_per_step) is in no bin, not in the bin of 0."""
  steps, edges, counts = analysis.cos_histograms({3: [np.nan, -0.5, 0.25, 0.75]}, bins=2,
                                                 value_range=(-1.0, 1.0))
  assert steps.tolist() == [3] and edges.tolist() == [-1.0, 0.0, 1.0]
  assert counts.tolist() == [[1, 2]]

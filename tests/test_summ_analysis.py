"""Figure 6 of the RUM paper for the pointer-generator (rumjax/summ_analysis.py): the
perturbation gradients against a hand-run decoder loop, the no-op without perturbations,
the state-norm metric against a direct computation, the training curves, the plot, and
``launch.summ_analysis`` end to end.

Everything runs on ONE tiny trained LEAD summ_synthetic run (3 steps; the model and the
fixed dev batch are shared, so each function compiles once: the gradients that the launch
command computes are the ones the unit tests check)."""

import functools
import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from absl import flags

import tasks
from launch import summ_analysis as launch_summ
from rumjax.plotting import summarization as plotting_summ
from rumjax.analysis import summarization as summ_analysis
from rumjax.models import pointer_generator as pg
from rumjax.training import loop
from tasks import summ_synthetic
from tasks import summarization as summ
from tasks.configs import summ_synthetic as summ_synthetic_config

T, H = 8, 16                     # decoder steps (max_dec_steps), hidden size
BATCH_INDEX = 1                  # dev batch 1: examples 4-6 and a padding row (mask 0)
ROWS = np.array([1, 1, 1, 0], np.float32)


def _config(variant="lead"):
  c = summ_synthetic_config.get_config(variant)
  with c.unlocked():
    c.update(num_train=64, num_eval=7, batch_size=4, num_steps=3, log_every=1,
             checkpoint_every=3, max_enc_steps=60, max_dec_steps=T, max_decode_steps=T)
    c.model.hidden_size, c.model.embed_dim = H, 8
    c.evals = ml_collections.ConfigDict()
  summ_synthetic.validate_config(c)
  return c


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  """The tiny LEAD summ_synthetic run (3 steps)."""
  out = str(tmp_path_factory.mktemp("lead"))
  loop.train_and_evaluate(_config(), out, summ_synthetic.TASK)
  return out


@functools.lru_cache(maxsize=None)
def _loaded(workdir):
  """(model, trained params, the fixed dev batch) of the run."""
  task, config, model, step, params = summ_analysis.load_run(workdir, tasks.get_task)
  assert step == 3
  batch = summ_analysis.fixed_batch(task, config, BATCH_INDEX)
  np.testing.assert_array_equal(batch["mask"], ROWS)
  return model, params, batch


def _short(batch):
  """The batch with its real summaries cut to 6, 4 and 2 steps (same shapes): decoder
  steps 6 and 7 are past every real row's summary."""
  lengths = np.minimum(batch["target_lengths"], [6, 4, 2, T]).astype(np.int32)
  return dict(batch, target_lengths=lengths)


@functools.lru_cache(maxsize=None)
def _hand_route(workdir):
  """The separate route of Figure 6c,d: ``encode``; substitute the encoder outputs ``h``
  into the state (recomputing ``W_h h`` with the ``attn_encoder`` kernel); run
  ``decode_step`` in a ``lax.scan`` by hand (no ``nn.scan``, no ``variable_axes``), each
  step with its own <[B, H]> ``"decoder_outputs"`` perturbation. Returns the task loss,
  its gradients w.r.t. ``h`` <[B, S, 2H]> and the perturbations <[B, T, H]>, and the
  decoder carry after each step (leaves <[T, B, H]>)."""
  model, params, batch = _loaded(workdir)
  batch = _short(batch)
  loss_fn = summ.loss_and_metrics

  @jax.jit
  def run(params, batch):
    state = model.apply({"params": params}, batch, method=pg.PointerGenerator.encode)
    kernel = params["attn_encoder"]["kernel"]

    def loss_of(enc_outputs, perturbations):
      st = dict(state, enc_outputs=enc_outputs, enc_features=enc_outputs @ kernel)

      def body(st, xs):
        tokens, d = xs
        variables = {"params": params,
                     "perturbations": {"decoder": {"decoder_outputs": d}}}
        out, st = model.apply(variables, tokens, st, method=pg.PointerGenerator.decode_step)
        return st, (out, st["carry"])

      _, (outs, carries) = jax.lax.scan(body, st, (batch["dec_inputs"].T, perturbations))
      outputs = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), outs)
      return loss_fn(outputs, batch)[0], carries

    zeros = jnp.zeros((T,) + state["context"].shape[:1] + (H,))
    (loss, carries), (g_enc, g_dec) = jax.value_and_grad(
        loss_of, argnums=(0, 1), has_aux=True)(state["enc_outputs"], zeros)
    return loss, g_enc, jnp.swapaxes(g_dec, 0, 1), carries

  return jax.tree.map(np.asarray, run(params, {k: jnp.asarray(v) for k, v in batch.items()}))


@functools.lru_cache(maxsize=None)
def _outputs(workdir):
  model, params, batch = _loaded(workdir)
  return jax.tree.map(np.asarray,
                      jax.jit(lambda p, b: model.apply({"params": p}, b))(params, batch))


# ------------------------------------------------------------- perturbations


def test_without_perturbations_nothing_changes(workdir):
  model, params, batch = _loaded(workdir)
  plain = _outputs(workdir)
  assert set(plain) == {"probs", "attention", "coverage", "p_gen", "state_norm"}
  shapes = jax.eval_shape(lambda: model.apply({"params": params}, batch,
                                              mutable=["perturbations"])[1])
  zeros = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes["perturbations"])
  s = batch["article"].shape[1]
  assert zeros[summ_analysis.ENCODER].shape == (4, s, 2 * H)
  assert zeros["decoder"][summ_analysis.DECODER].shape == (4, T, H)
  apply = jax.jit(lambda v, b: model.apply(v, b))
  with_zeros = apply({"params": params, "perturbations": zeros}, batch)
  for key in plain:
    np.testing.assert_array_equal(with_zeros[key], plain[key], err_msg=key)
  moved = jax.tree.map(lambda z: z + 0.5, zeros)        # a perturbation does act
  assert np.max(np.abs(apply({"params": params, "perturbations": moved}, batch)["probs"]
                       - plain["probs"])) > 1e-4
  # The beam decoder drops a perturbations collection it is handed (its <[B, T, H]>
  # variable would not broadcast against one step's <[B, H]>).
  for variables in ({"params": params}, {"params": params, "perturbations": zeros}):
    logits = jax.eval_shape(lambda v: (lambda fn, init: fn(
        jnp.zeros((4,), jnp.int32), init)[0])(*pg.make_tokens_to_logits(model, v, batch)),
        variables)
    assert logits.shape == plain["probs"].shape[:1] + plain["probs"].shape[2:]


def test_encoder_gradient_equals_substituting_the_encoder_outputs(workdir):
  """d loss / d h_i equals the hand route's; zero at padding and in the padding row."""
  model, params, batch = _loaded(workdir)
  batch = _short(batch)
  got = summ_analysis.intermediate_gradients(model, params, batch, summ.loss_and_metrics)
  loss, want, _, _ = _hand_route(workdir)
  np.testing.assert_allclose(got["loss"], loss, rtol=1e-5)
  np.testing.assert_allclose(got["encoder"], want, rtol=1e-4, atol=1e-8)
  g = np.asarray(got["encoder"])
  pad = np.arange(g.shape[1])[None, :] >= batch["article_lengths"][:, None]
  assert pad[:3].any()                                     # shorter articles are padded
  np.testing.assert_array_equal(g[pad], 0.0)
  np.testing.assert_array_equal(g[3], 0.0)                 # mask 0: not in the loss
  assert np.all(np.abs(g[:3]).sum(-1)[~pad[:3]] > 0)


def test_decoder_gradient_equals_the_per_step_loop(workdir):
  """d loss / d output_t equals the hand route's per-step perturbation gradients: the
  scan's stacked variable is on the time axis; zero at t >= target_length."""
  model, params, batch = _loaded(workdir)
  batch = _short(batch)
  got = summ_analysis.intermediate_gradients(model, params, batch, summ.loss_and_metrics)
  _, _, want, _ = _hand_route(workdir)
  np.testing.assert_allclose(got["decoder"], want, rtol=1e-4, atol=1e-8)
  g = np.asarray(got["decoder"])
  dead = np.arange(T)[None, :] >= batch["target_lengths"][:, None]
  np.testing.assert_array_equal(g[dead], 0.0)
  np.testing.assert_array_equal(g[3], 0.0)
  # The decoder output feeds P_vocab only, which is 0 on the extended slots: a step whose
  # gold word is an article OOV (copied, through p_gen and the attention) has no gradient
  # either. Every other real step has one.
  oov = batch["targets"] >= model.vocab_size
  assert oov[:3][~dead[:3]].any() and (~oov[:3][~dead[:3]]).any()
  np.testing.assert_array_equal(g[oov], 0.0)
  assert np.all(np.abs(g[:3]).sum(-1)[~dead[:3] & ~oov[:3]] > 0)


def test_output_gradients_average_real_rows_and_hidden_units(workdir):
  model, params, batch = _loaded(workdir)
  batch = _short(batch)
  grads = summ_analysis.intermediate_gradients(model, params, batch, summ.loss_and_metrics)
  out = summ_analysis.output_gradients(model, params, batch, summ.loss_and_metrics)
  for key in ("encoder", "decoder"):
    g = np.abs(np.asarray(grads[key], np.float64))
    expected = [np.mean(g[:3, t, :]) for t in range(g.shape[1])]   # real rows, all units
    np.testing.assert_allclose(out[key], expected, rtol=1e-6)
  np.testing.assert_array_equal(out["decoder"][6:], 0.0)   # past every real summary
  live = (np.arange(T)[None, :] < batch["target_lengths"][:, None])[:3]
  in_vocab = (batch["targets"] < model.vocab_size)[:3]
  np.testing.assert_array_equal(out["decoder"] > 0, (live & in_vocab).any(axis=0))
  longest = int(batch["article_lengths"][:3].max())
  assert np.all(out["encoder"][:longest] > 0)
  np.testing.assert_array_equal(out["encoder"][longest:], 0.0)
  np.testing.assert_allclose(summ_analysis.mean_abs_per_step(-np.ones((2, 3, 4))), 1.0)
  np.testing.assert_array_equal(
      summ_analysis.mean_abs_per_step(np.ones((2, 3, 4)), rows=np.zeros(2)), 0.0)


# ------------------------------------------------------------------ state norm


def test_state_norm_and_the_last_state_norm_metric(workdir):
  """state_norm = ||h_t|| of the LSTM decoder after each step (the hand loop's carries;
  the cell state c left out, Figure 6b's "norm of the last hidden state": it was
  ||[c, h]|| until session 37); last_state_norm = (its sum over the real rows at step
  target_length - 1, their number)."""
  _, _, batch = _loaded(workdir)
  out = _outputs(workdir)
  c, h = _hand_route(workdir)[3]                       # Flax's LSTM carry, each <[T, B, H]>
  assert c.shape == h.shape == (T, 4, H)
  direct = np.sqrt(np.sum(np.asarray(h, np.float64) ** 2, -1)).T
  np.testing.assert_allclose(out["state_norm"], direct, rtol=1e-5)
  assert np.all(np.sqrt(np.sum(np.asarray(c, np.float64) ** 2, -1)).T > 1e-3)   # c counts
  norms = out["state_norm"]
  lengths = batch["target_lengths"]
  total, count = summ.loss_and_metrics(out, batch)[1]["last_state_norm"]
  assert count == 3                                        # the padding row is out
  np.testing.assert_allclose(total, sum(norms[b, lengths[b] - 1] for b in range(3)),
                             rtol=1e-6)
  # A row with no target step counts nowhere.
  empty = dict(batch, target_lengths=np.array([0, 3, 2, 4], np.int32))
  total, count = summ.loss_and_metrics(out, empty)[1]["last_state_norm"]
  assert count == 2
  np.testing.assert_allclose(total, norms[1, 2] + norms[2, 1], rtol=1e-6)


# ------------------------------------------------------------- curves and plot


def test_training_curves():
  rows = [{"step": 1, "train_grad_norm": 2.0, "train_last_state_norm": 3.0},
          {"step": 1, "eval_loss": 9.0},
          {"step": 2, "train_grad_norm": 1.0},                     # before the metric
          {"step": 3, "train_grad_norm": 5.0, "train_last_state_norm": 4.0},
          {"step": 3, "train_grad_norm": 6.0, "train_last_state_norm": 7.0}]  # resumed
  c = summ_analysis.training_curves(rows)
  np.testing.assert_array_equal(c["step"], [1, 2, 3])
  np.testing.assert_array_equal(c["grad_norm"], [2.0, 1.0, 6.0])
  np.testing.assert_array_equal(c["state_norm"], [3.0, np.nan, 7.0])
  assert all(len(v) == 0 for v in summ_analysis.training_curves([]).values())


def test_plot_writes_a_png(tmp_path):
  runs = {"LEAD": {"curves": {"step": [1, 2, 3], "grad_norm": [1.0, 0.9, 0.8],
                              "state_norm": [2.0, None, 2.5]},
                   "gradients": {"encoder": [0.1, 0.2, 0.0], "decoder": [0.3, 0.1]}},
          "decRUM": {"curves": {"step": [1, 2], "grad_norm": [1.5, 1.2],
                                "state_norm": [3.0, 3.5]},
                     "gradients": {"encoder": [0.2, 0.1, 0.0], "decoder": [0.4, 0.0]}}}
  paths = plotting_summ.plot_figure6(runs, str(tmp_path / "figs"))
  assert paths == [str(tmp_path / "figs" / "summ_figure6.png")]
  with open(paths[0], "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------- end to end


def _run(argv):
  values = flags.FlagValues()
  launch_summ.define_flags(values)
  values(["summ_analysis", *argv])
  return launch_summ.run(values)


def test_launch_writes_figure_and_json(workdir, tmp_path, capsys):
  model, params, batch = _loaded(workdir)
  results = _run([f"--workdirs={workdir},{workdir}", "--labels=LEAD,again",
                  f"--out_dir={tmp_path}", f"--batch_index={BATCH_INDEX}"])
  assert list(results) == ["LEAD", "again"]
  with open(tmp_path / "summ_figure6.png", "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  saved = json.loads((tmp_path / "summ_figure6.json").read_text())
  assert saved["settings"] == {"batch_index": BATCH_INDEX, "split": "dev"}
  r = saved["runs"]["LEAD"]
  assert r["step"] == 3 and r["batch_rows"] == 3 and r["decoder_cell"] == "lstm"
  assert r["workdir"] == os.path.basename(workdir)   # no machine path (tmp is outside cwd)
  records = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
  assert r["curves"] == {"step": [1, 2, 3],
                         "grad_norm": [x["train_grad_norm"] for x in records],
                         "state_norm": [x["train_last_state_norm"] for x in records]}
  assert all(v > 0 for v in r["curves"]["grad_norm"] + r["curves"]["state_norm"])
  want = summ_analysis.output_gradients(model, params, batch, summ.loss_and_metrics)
  np.testing.assert_allclose(r["gradients"]["encoder"], want["encoder"], rtol=1e-6)
  np.testing.assert_allclose(r["gradients"]["decoder"], want["decoder"], rtol=1e-6)
  assert len(r["gradients"]["decoder"]) == T
  assert r["target_lengths"] == batch["target_lengths"][:3].tolist()
  assert r["article_lengths"] == batch["article_lengths"][:3].tolist()   # real rows only
  assert saved["runs"]["again"]["gradients"] == r["gradients"]
  out = capsys.readouterr().out
  assert "LEAD step 3: loss" in out and "summ_figure6.json" in out


def test_launch_errors_are_one_line(workdir, tmp_path):
  missing = str(tmp_path / "nowhere")
  with pytest.raises(SystemExit, match=f"error: no training workdir at '{missing}'"):
    _run([f"--workdirs={missing}", f"--out_dir={tmp_path}"])
  other = tmp_path / "recall"
  other.mkdir()
  (other / "config.json").write_text(json.dumps({"task": "recall",
                                                 "model": {"name": "classifier"}}))
  with pytest.raises(SystemExit, match="needs a summarization run") as err:
    _run([f"--workdirs={other}", f"--out_dir={tmp_path}"])
  assert "\n" not in str(err.value)
  with pytest.raises(SystemExit, match="--labels has 2 label"):
    _run([f"--workdirs={workdir}", "--labels=a,b", f"--out_dir={tmp_path}"])
  # Default labels are the paper's names of the runs' configurations.
  with pytest.raises(SystemExit, match=r"labelled alike \(LEAD, LEAD\)"):
    _run([f"--workdirs={workdir},{workdir}", f"--out_dir={tmp_path}"])
  with pytest.raises(SystemExit, match="the 'dev' split has only 2 batch"):
    _run([f"--workdirs={workdir}", "--batch_index=5", f"--out_dir={tmp_path}"])
  empty = tmp_path / "empty"
  empty.mkdir()
  (empty / "config.json").write_text(open(os.path.join(workdir, "config.json")).read())
  with pytest.raises(SystemExit, match="no checkpoint found in") as err:
    _run([f"--workdirs={empty}", f"--out_dir={tmp_path}"])
  assert str(empty) in str(err.value) and "\n" not in str(err.value)


def test_run_labels_and_a_chosen_step(workdir):
  """Figure 6's legend uses the paper's names of the configurations (Table 4), else the
  cells; load_run reads the checkpoint asked for (a missing one is a one-line error, not
  the latest)."""
  for configuration, encoder, decoder, label in (
      ("lead", "lstm", "lstm", "LEAD"), ("encrum", "rum", "lstm", "encRUM"),
      ("decrum", "lstm", "rum", "decRUM"), ("allrum", "rum", "rum", "allRUM"),
      (None, "gru", "rum", "gru/rum")):
    config = ml_collections.ConfigDict({"configuration": configuration, "model": {
        "encoder_cell": encoder, "decoder_cell": decoder}})
    assert summ_analysis.run_label(config) == label
  with pytest.raises(ValueError, match=r"no checkpoint found at step 2 in .*\(steps there: "
                                       r"\[3\]\)"):
    summ_analysis.load_run(workdir, tasks.get_task, step=2)

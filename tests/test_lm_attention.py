"""Where an LSTMN language model attends (rumjax.analysis.lm_attention), the ptb branch of
launch.attention, and config.init_uniform (the Torch LM codes' initialisation)."""

import json
import os

import jax
import numpy as np
import pytest
from absl import flags

from launch import attention as launch_attention
from rumjax import lstmn_scan, training
from rumjax.analysis import lm_attention
from tasks import ptb
from tests.test_task_ptb import _config, corpus, two_windows  # noqa: F401  (the fixture)


def _lstmn_config(corpus, **overrides):
  c = _config(corpus, level="word", **overrides)
  c.model.update(core="lstmn", num_layers=2, dropout_rate=0.0)
  ptb.validate_config(c)
  return c


def _brute_force(weights, span=None):
  """Mean weight on slot 0 and at each distance, from an explicit list of (step, slot)
  (step t sees the slots i < t with t - i <= span)."""
  b, t_len, _ = weights.shape
  by_distance = {}
  for t in range(1, t_len + 1):
    for i in range(t):
      if span is None or t - i <= span:
        d = 0 if i == 0 else t - i
        by_distance.setdefault(d, []).extend(weights[:, t - 1, i])
  return {d: np.mean(v) for d, v in by_distance.items()}


def test_distance_weights_with_a_memory_span():
  """With span K step t sees min(t, K) slots: uniform attention over them is its own
  reference (1/2 at each distance for K = 2; the carried slot only for t <= K), and no
  weight is counted at a distance nobody sees (it was, with the uniform baseline 1/t)."""
  rng = np.random.default_rng(1)
  b, t_len, span = 3, 8, 2
  t, i = np.arange(1, t_len + 1)[:, None], np.arange(t_len + 1)[None, :]
  seen = ((i < t) & (t - i <= span)).astype(float)
  w = rng.random((b, t_len, t_len + 1)) * seen
  w /= w.sum(-1, keepdims=True)
  at, uniform, count = lm_attention.distance_weights(w, memory_span=span)
  want = _brute_force(w, span)
  assert sorted(want) == [0, 1, 2] and list(np.flatnonzero(count)) == [0, 1, 2]
  for d in want:
    np.testing.assert_allclose(at[d] / count[d], want[d], rtol=1e-12)
  flat = np.broadcast_to(seen / seen.sum(-1, keepdims=True), w.shape)
  at, uniform, count = lm_attention.distance_weights(flat, memory_span=span)
  np.testing.assert_allclose(at, uniform, rtol=1e-12)
  np.testing.assert_allclose(uniform[1:3] / count[1:3], [0.5, 0.5], rtol=1e-12)


def test_distance_weights_against_a_loop():
  rng = np.random.default_rng(0)
  b, t_len = 3, 7
  w = rng.random((b, t_len, t_len + 1))
  w *= np.tril(np.ones((t_len, t_len + 1)))      # step t sees positions 0..t-1
  w /= w.sum(-1, keepdims=True)
  at, uniform, count = lm_attention.distance_weights(w)
  want = _brute_force(w)
  np.testing.assert_allclose(at[0] / count[0], want[0], rtol=1e-12)
  for d in range(1, t_len):
    np.testing.assert_allclose(at[d] / count[d], want[d], rtol=1e-12)
  # Uniform attention is its own uniform reference.
  flat = np.tril(np.ones((t_len, t_len + 1)))
  flat = np.broadcast_to(flat / flat.sum(-1, keepdims=True), w.shape)
  at, uniform, _ = lm_attention.distance_weights(flat)
  np.testing.assert_allclose(at, uniform, rtol=1e-12)


def test_window_attention_is_the_models_recurrence(corpus):
  """The weights are lstmn_scan's on the model's own parameters, and the carry after a
  window is the state the model itself carries to the next one."""
  c = _lstmn_config(corpus)
  _, variables, (first, second), state = two_windows(c)
  p = variables["params"]
  weights, carry = lm_attention.window_attention(p, first["inputs"])
  for (h, cc), (h_m, c_m) in zip(carry, state):
    np.testing.assert_allclose(h, h_m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cc, c_m, rtol=1e-5, atol=1e-6)
  weights, _ = lm_attention.window_attention(p, second["inputs"], carry)
  xs = p["embed"]["embedding"][second["inputs"]]
  _, _, s = lstmn_scan(p["rnn"]["stack"]["layer_0"], xs, initial=carry[0],
                       return_attention=True)
  np.testing.assert_allclose(weights[0], s, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.sum(weights[1], -1), 1.0, rtol=1e-5)


def test_profile_resets_and_counts(corpus):
  c = _lstmn_config(corpus)
  model = ptb.build_model(c)
  batch = next(ptb.train_data(c))
  params = model.init(jax.random.key(1), batch,
                      model_state=ptb.initial_model_state(c, c.batch_size))["params"]
  out = lm_attention.profile(params, ptb.eval_data(c, "valid"), max_windows=3)
  assert len(out) == 2 and all(layer["windows"] == 3 for layer in out)
  for layer in out:
    assert len(layer["at_distance"]) == c.seq_len - 1
    # Step 1 sees only the carried slot: its uniform weight averages 1 / t over t = 1..T.
    np.testing.assert_allclose(layer["uniform_carried"],
                               np.mean(1.0 / np.arange(1, c.seq_len + 1)), rtol=1e-12)
    assert 0 < layer["carried"] <= 1
  # A span of 2: the distances 1 and 2 only, each seen by uniform attention at 1/2.
  for layer in lm_attention.profile(params, ptb.eval_data(c, "valid"), max_windows=1,
                                    memory_span=2):
    np.testing.assert_allclose(layer["uniform_at_distance"], [0.5, 0.5], rtol=1e-12)
  with pytest.raises(ValueError, match="not an LSTMN language model"):
    lm_attention.window_attention({"embed": {}}, batch["inputs"])


def test_sentence_in_context_finds_the_line(corpus):
  c = _config(corpus, level="word")
  stream = ptb.token_stream(c, "valid")
  vocab = ptb.vocabulary(c)
  lines = ptb.to_text(c, stream).split("\n")
  context, ids = ptb.sentence_in_context(c, lines[5])
  assert ptb.to_text(c, ids) == lines[5]
  assert int(np.sum(context == vocab.eos_id)) == 5          # five whole lines before it
  np.testing.assert_array_equal(stream[len(context):len(context) + len(ids)], ids)
  context, ids = ptb.sentence_in_context(c, "zebra the cat")  # not a line: no context
  assert len(context) == 0 and ids[0] == vocab.unk_id


@pytest.mark.slow   # ~40 s: the launcher end to end; the analysis is tested above
def test_attention_launch_on_a_language_model(corpus, tmp_path, capsys):
  c = _lstmn_config(corpus, num_steps=2, eval_every=0, checkpoint_every=2)
  c.variant = "word_lstmn1"
  workdir = str(tmp_path / "run")
  training.train_and_evaluate(c, workdir, ptb.TASK)
  line = ptb.to_text(c, ptb.token_stream(c, "valid")).split("\n")[3]
  values = flags.FlagValues()
  launch_attention.define_flags(values)
  out = str(tmp_path / "lm_attention.png")
  values(["attention", f"--workdir={workdir}", f"--out={out}", f"--sentence={line}",
          "--profile_windows=2"])
  assert launch_attention.run(values) == out
  with open(out, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  # (TFDS may print its preparation message first when this test prepares the data.)
  record = json.loads(next(line for line in capsys.readouterr().out.splitlines()
                           if line.startswith("{")))
  assert record["step"] == 2 and record["context_tokens"] > 0
  assert len(record["profile"]) == 2 and record["profile"][0]["windows"] == 2
  # The default --out is a committed figure: an existing one is kept without --overwrite,
  # and no output goes into the run.
  with pytest.raises(SystemExit, match=r"already exists; pass --overwrite"):
    launch_attention.run(values)
  values(["attention", f"--workdir={workdir}", f"--out={workdir}/a.png", "--overwrite"])
  with pytest.raises(SystemExit, match=r"lies inside .*, a run this command reads"):
    launch_attention.run(values)
  assert not os.path.exists(f"{workdir}/a.png")
  # snli's --role on a language model was accepted and did nothing (review).
  values(["attention", f"--workdir={workdir}", f"--out={tmp_path}/b.png", "--role=hypothesis"])
  with pytest.raises(SystemExit, match=r"^error: --role: ptb reads one sentence"):
    launch_attention.run(values)


def test_init_uniform_draws_every_parameter(corpus, tmp_path):
  c = _config(corpus, level="word", num_steps=0, eval_every=0, init_uniform=0.05)
  c.evals = {}
  params = training.train_and_evaluate(c, str(tmp_path / "u"), ptb.TASK)["params"]
  leaves = jax.tree.leaves(params)
  assert all(np.max(np.abs(x)) <= 0.05 for x in leaves)
  assert all(np.std(x) > 0.02 for x in leaves if x.size > 100)   # U(-a, a): std a / sqrt 3
  c.init_uniform = -1.0
  with pytest.raises(ValueError, match="init_uniform"):
    ptb.validate_config(c)


def test_span_one_is_an_lstm_on_the_previous_state(corpus):
  """``model.memory_span=1``: step t attends only to slot t-1, so h~_t = h_{t-1} and
  c~_t = c_{t-1}: an LSTM whose gates read [h_{t-1}, x_t] (a loop over time here)."""
  c = _lstmn_config(corpus)
  c.model.update(num_layers=1, memory_span=1)
  ptb.validate_config(c)
  model = ptb.build_model(c)
  batch = next(ptb.train_data(c))
  state = ptb.initial_model_state(c, c.batch_size)
  variables = model.init(jax.random.key(2), batch, model_state=state)
  logits, _ = model.apply(variables, batch, model_state=state)
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), variables["params"])
  w = p["rnn"]["stack"]["layer_0"]
  sig = lambda z: 1 / (1 + np.exp(-z))
  xs = p["embed"]["embedding"][np.asarray(batch["inputs"])]
  h = cell = np.zeros((xs.shape[0], c.model.hidden_size))
  hs = []
  for t in range(xs.shape[1]):
    pre = h @ w["gates_h"] + xs[:, t] @ w["gates_x"] + w["gates_bias"]
    i, f, o, g = np.split(pre, 4, axis=-1)
    cell = sig(f) * cell + sig(i) * np.tanh(g)
    h = sig(o) * np.tanh(cell)
    hs.append(h)
  want = np.stack(hs, 1) @ p["head"]["kernel"] + p["head"]["bias"]
  np.testing.assert_allclose(logits, want, rtol=2e-4, atol=2e-5)
  out = lm_attention.profile(variables["params"], ptb.eval_data(c, "valid"), max_windows=2,
                             memory_span=1)
  # Only distance 1 is seen; the carried slot only by step 1, which sees nothing else.
  assert len(out[0]["at_distance"]) == 1
  np.testing.assert_allclose(out[0]["at_distance"][0], 1.0, rtol=1e-6)
  np.testing.assert_allclose([out[0]["carried"], out[0]["uniform_carried"]], 1.0, rtol=1e-6)
  c.model.memory_span = -1
  with pytest.raises(ValueError, match="memory_span"):
    ptb.validate_config(c)


def test_profile_resets_the_rows_that_start_a_stream_and_sentences_read_the_last_context(
    corpus):
  """profile: a row whose window has ``reset`` reads it from zeros (as from a stream's
  start), the others from the carry; the means are over the windows read (at most
  ``max_windows``). ``sentence_attention`` reads the last ``max_context_windows`` windows
  of the context before the sentence."""
  c = _lstmn_config(corpus)
  batch = next(ptb.train_data(c))
  params = ptb.build_model(c).init(jax.random.key(1), batch, model_state=ptb.initial_model_state(
      c, c.batch_size))["params"]
  rng, vocab = np.random.default_rng(0), params["embed"]["embedding"].shape[0]
  first, second = rng.integers(0, vocab, (2, 4, 6)).astype(np.int32)
  reset = np.array([True, False, True, False])
  out = lm_attention.profile(params, [{"inputs": first, "reset": np.ones(4, bool)},
                                      {"inputs": second, "reset": reset}])
  w1, carry = lm_attention.window_attention(params, first)
  from_carry, _ = lm_attention.window_attention(params, second, carry)
  from_zeros, _ = lm_attention.window_attention(params, second)
  for layer, a, b, z in zip(out, w1, from_carry, from_zeros):
    w2 = np.where(reset[:, None, None], z, b)
    (at1, _, n1), (at2, _, n2) = (lm_attention.distance_weights(w) for w in (a, w2))
    mean = (at1 + at2) / np.maximum(n1 + n2, 1)      # distance 6 (= T) is never seen
    np.testing.assert_allclose(layer["carried"], mean[0], rtol=1e-5)
    np.testing.assert_allclose(layer["at_distance"], mean[1:6], rtol=1e-5)
  for layer, a in zip(lm_attention.profile(params, [{"inputs": first}, {"inputs": second}],
                                           max_windows=1), w1):
    at, _, n = lm_attention.distance_weights(a)
    assert layer["windows"] == 1
    np.testing.assert_allclose(layer["at_distance"], at[1:6] / n[1:6], rtol=1e-5)
  context = rng.integers(0, vocab, 14).astype(np.int32)   # 3 windows of 4, and 2 tokens
  sentence = rng.integers(0, vocab, 5).astype(np.int32)
  got = lm_attention.sentence_attention(params, context, sentence, seq_len=4,
                                        max_context_windows=2)
  _, carry = lm_attention.window_attention(params, context[None, 6:10])
  _, carry = lm_attention.window_attention(params, context[None, 10:14], carry)
  want, _ = lm_attention.window_attention(params, sentence[None], carry)
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w[0], rtol=1e-5, atol=1e-7)

"""The pointer-generator (rumjax/models/pointer_generator.py) against its definition:
the extended-vocabulary distribution, OOV copying, padding, coverage, the losses against
explicit loops, decoder state threading (decode_step == teacher forcing) for LEAD,
decRUM, encRUM and allRUM, beam 1 == greedy through rumjax.decoding, finite gradients."""

import functools

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rumjax import decoding
from rumjax.models import build_model
from rumjax.models import pointer_generator as pg

V, M, E, H = 12, 3, 8, 6          # base vocabulary, OOV slots, embedding, hidden
B, S, T = 4, 7, 5                 # batch, source steps, decoder steps
UNK, BOS, EOS = 1, 2, 3
LENGTHS = np.array([7, 4, 1, 0])  # the last article is empty


def make_batch(seed=0):
  rng = np.random.RandomState(seed)
  ext = rng.randint(4, V + M, (B, S))
  ext[0, :4] = [V, 5, V, V + 2]   # a repeated OOV and an in-vocabulary word
  ext[np.arange(S)[None, :] >= LENGTHS[:, None]] = 0
  article = np.where(ext >= V, UNK, ext)
  dec_inputs = rng.randint(4, V + M, (B, T))
  dec_inputs[:, 0] = BOS
  dec_inputs[0, 2] = V            # a copied OOV fed back
  targets = np.concatenate([dec_inputs[:, 1:], np.full((B, 1), EOS)], axis=1)
  dec_mask = (np.arange(T)[None, :] < np.array([5, 3, 2, 0])[:, None]).astype(np.float32)
  return {"article": article.astype(np.int32), "article_ext": ext.astype(np.int32),
          "article_lengths": LENGTHS.astype(np.int32),
          "dec_inputs": dec_inputs.astype(np.int32), "targets": targets.astype(np.int32),
          "dec_mask": dec_mask}


def make_model(encoder_cell="lstm", decoder_cell="lstm", **kw):
  return pg.PointerGenerator(vocab_size=V, max_oovs=M, embed_dim=E, hidden_size=H,
                             encoder_cell=encoder_cell, decoder_cell=decoder_cell,
                             unk_id=UNK, **kw)


def random_params(model, seed=0):
  """Random parameters of ``model``'s shapes, without compiling ``model.init`` (its
  orthogonal LSTM initialisers take seconds to compile on CPU; the real init runs once in
  test_build_model_and_init): kernels ~ N(0, 1/fan_in), vectors ~ N(0, 0.1^2)."""
  shapes = jax.eval_shape(model.init, jax.random.key(0), make_batch())["params"]
  rng = np.random.RandomState(seed)

  def fill(x):
    scale = 1.0 / np.sqrt(x.shape[0]) if len(x.shape) == 2 else 0.1
    return jnp.asarray(rng.normal(0.0, scale, x.shape), x.dtype)

  return jax.tree.map(fill, shapes)


@functools.lru_cache(maxsize=None)
def setup(encoder_cell="lstm", decoder_cell="lstm", lam=0, coverage=True, pointer=True):
  """(model, params, jitted apply) for one configuration, built once per session."""
  model = make_model(encoder_cell, decoder_cell, lam=lam, coverage=coverage,
                     pointer=pointer)
  apply = jax.jit(lambda p, b: model.apply({"params": p}, b))
  return model, random_params(model), apply


def real_rows(batch):
  return batch["article_lengths"] > 0


def test_final_distribution_sums_to_one_and_attention_is_masked():
  batch = make_batch()
  _, params, apply = setup()
  out = jax.tree.map(np.asarray, apply(params, batch))
  assert out["probs"].shape == (B, T, V + M)
  assert out["attention"].shape == out["coverage"].shape == (B, T, S)
  assert out["p_gen"].shape == (B, T)
  assert np.all(out["probs"] >= 0)
  np.testing.assert_allclose(out["probs"].sum(-1), 1.0, atol=1e-5)
  pad = np.arange(S)[None, None, :] >= LENGTHS[:, None, None]
  assert np.all(out["attention"][np.broadcast_to(pad, out["attention"].shape)] == 0)
  np.testing.assert_allclose(out["attention"][real_rows(batch)].sum(-1), 1.0, atol=1e-5)
  # The empty article: nothing to attend to, all mass generated.
  np.testing.assert_array_equal(out["attention"][3], 0.0)
  np.testing.assert_array_equal(out["p_gen"][3], 1.0)
  assert np.all((out["p_gen"][:3] > 0) & (out["p_gen"][:3] < 1))


def test_no_pointer_is_plain_attention_seq2seq():
  batch = make_batch()
  _, params, apply = setup(pointer=False)
  assert "pointer" not in params["decoder"]
  out = jax.tree.map(np.asarray, apply(params, batch))
  np.testing.assert_array_equal(out["probs"][..., V:], 0.0)
  np.testing.assert_allclose(out["probs"].sum(-1), 1.0, atol=1e-5)
  np.testing.assert_array_equal(out["p_gen"], 1.0)


def test_oov_copying_with_p_gen_zero():
  batch = make_batch()
  _, params, apply = setup()
  params = flax.core.unfreeze(jax.tree.map(lambda x: x, params))
  params["decoder"]["pointer"]["bias"] = jnp.full((1,), -1e4)
  out = jax.tree.map(np.asarray, apply(params, batch))
  np.testing.assert_array_equal(out["p_gen"][:3], 0.0)
  for b in range(3):
    for t in range(T):
      expected = np.zeros(V + M)
      for i in range(LENGTHS[b]):
        expected[batch["article_ext"][b, i]] += out["attention"][b, t, i]
      np.testing.assert_allclose(out["probs"][b, t], expected, atol=1e-6)
  # The repeated OOV of article 0 (positions 0 and 2) gets both attentions.
  np.testing.assert_allclose(out["probs"][0, :, V],
                             out["attention"][0, :, 0] + out["attention"][0, :, 2],
                             atol=1e-6)


def test_padding_changes_nothing():
  batch = make_batch()
  _, params, apply = setup()
  ref = apply(params, batch)
  other = dict(batch)
  pad = np.arange(S)[None, :] >= LENGTHS[:, None]
  other["article"] = np.where(pad, 7, batch["article"]).astype(np.int32)
  other["article_ext"] = np.where(pad, V + 1, batch["article_ext"]).astype(np.int32)
  out = apply(params, other)
  for key in ref:
    np.testing.assert_allclose(out[key], ref[key], atol=1e-6, err_msg=key)
  # Article 1 (length 4) alone, without padding: the same outputs on its real positions
  # (the backward encoder starts at the last real token).
  single = {k: v[1:2] for k, v in batch.items()}
  single["article"], single["article_ext"] = (single["article"][:, :4],
                                              single["article_ext"][:, :4])
  alone = apply(params, single)
  np.testing.assert_allclose(alone["probs"][0], ref["probs"][1], atol=1e-5)
  np.testing.assert_allclose(alone["attention"][0], ref["attention"][1, :, :4], atol=1e-5)


def test_coverage_is_the_sum_of_previous_attentions():
  _, params, apply = setup()
  out = jax.tree.map(np.asarray, apply(params, make_batch()))
  np.testing.assert_array_equal(out["coverage"][:, 0], 0.0)
  cumsum = np.cumsum(out["attention"], axis=1)
  np.testing.assert_allclose(out["coverage"][:, 1:], cumsum[:, :-1], atol=1e-6)


def _mask_and_avg_loop(values, mask):
  """The reference's _mask_and_avg (per example over its real steps, then the batch),
  skipping rows without real steps."""
  per_example = []
  for b in range(values.shape[0]):
    n = mask[b].sum()
    if n > 0:
      per_example.append(sum(values[b, t] * mask[b, t] for t in range(values.shape[1])) / n)
  return np.mean(per_example)


def test_losses_against_loops():
  rng = np.random.RandomState(1)
  probs = rng.dirichlet(np.ones(V + M), size=(B, T)).astype(np.float32)
  probs[0, 1, :] = 0.0                   # a gold probability of exactly 0
  probs[0, 1, 0] = 1.0
  targets = rng.randint(1, V + M, (B, T))
  mask = (np.arange(T)[None, :] < np.array([5, 3, 2, 0])[:, None]).astype(np.float32)
  losses = np.zeros((B, T))
  for b in range(B):
    for t in range(T):
      losses[b, t] = -np.log(float(probs[b, t, targets[b, t]]) + 1e-12)
  token = (losses * mask).sum() / mask.sum()
  got = pg.nll_loss(probs, targets, mask, normalization="token")
  assert np.isfinite(got)
  np.testing.assert_allclose(got, token, rtol=1e-5)
  # The default is the reference's _mask_and_avg, as coverage_loss's (they add up).
  np.testing.assert_allclose(pg.nll_loss(probs, targets, mask),
                             _mask_and_avg_loop(losses, mask), rtol=1e-5)
  assert abs(float(pg.nll_loss(probs, targets, mask)) - token) > 1e-3   # they differ here

  # Coverage loss: the reference's _coverage_loss loop (coverage built from zeros) vs
  # coverage_loss on the model's coverage output.
  _, params, apply = setup()
  out = jax.tree.map(np.asarray, apply(params, make_batch()))
  attention = out["attention"].astype(np.float64)
  covlosses = np.zeros((B, T))
  for b in range(B):
    coverage = np.zeros(S)
    for t in range(T):
      covlosses[b, t] = sum(min(attention[b, t, i], coverage[i]) for i in range(S))
      coverage += attention[b, t]
  np.testing.assert_allclose(pg.coverage_loss(out["attention"], out["coverage"], mask),
                             _mask_and_avg_loop(covlosses, mask), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(
      pg.coverage_loss(out["attention"], out["coverage"], mask, normalization="token"),
      (covlosses * mask).sum() / mask.sum(), rtol=1e-5, atol=1e-7)
  # No real step at all: 0, not NaN.
  assert pg.nll_loss(probs, targets, np.zeros_like(mask)) == 0.0
  with pytest.raises(ValueError, match="normalization"):
    pg.nll_loss(probs, targets, mask, normalization="sum")


@pytest.mark.parametrize("encoder_cell,decoder_cell,lam,coverage", [
    ("lstm", "lstm", 0, True),     # LEAD
    ("lstm", "rum", 0, False),     # decRUM
    ("rum", "lstm", 0, True),      # encRUM
    ("rum", "rum", 1, True),       # allRUM with the associative memory
])
def test_decode_step_reproduces_teacher_forcing(encoder_cell, decoder_cell, lam, coverage):
  batch = make_batch()
  model, params, apply = setup(encoder_cell, decoder_cell, lam, coverage)
  ref = jax.tree.map(np.asarray, apply(params, batch))
  variables = {"params": params}
  state = jax.jit(functools.partial(model.apply, method=model.encode))(variables, batch)
  if lam:   # RUM's memory starts at the identity, h from the reduced encoder states
    np.testing.assert_array_equal(state["carry"][0], np.broadcast_to(np.eye(H), (B, H, H)))
  step = jax.jit(functools.partial(model.apply, method=model.decode_step))
  for t in range(T):
    out, state = step(variables, batch["dec_inputs"][:, t], state)
    for key in ("probs", "attention", "coverage", "p_gen"):
      np.testing.assert_allclose(out[key], ref[key][:, t], atol=2e-5,
                                 err_msg=f"{key} at step {t}")


def test_beam_one_equals_greedy_and_follows_teacher_forcing():
  batch = make_batch()
  model, params, apply = setup()
  fn, init = pg.make_tokens_to_logits(model, params, batch)
  kw = dict(batch_size=B, bos_id=BOS, eos_id=EOS, max_len=T)
  greedy, greedy_scores = jax.jit(lambda s: decoding.greedy_search(fn, s, **kw))(init)
  beam, beam_scores = jax.jit(
      lambda s: decoding.beam_search(fn, s, beam_size=1, **kw))(init)
  np.testing.assert_array_equal(beam[:, 0], greedy)
  np.testing.assert_allclose(beam_scores[:, 0], greedy_scores, rtol=1e-5)
  assert np.all((np.asarray(greedy) >= 0) & (np.asarray(greedy) < V + M))
  # Fed back under teacher forcing, each greedy token is the argmax of its step (up to
  # the first eos), and the greedy score is the sum of the log-probabilities.
  forced = dict(batch, dec_inputs=np.concatenate(
      [np.full((B, 1), BOS), np.asarray(greedy)[:, :-1]], axis=1).astype(np.int32))
  probs = np.asarray(apply(params, forced)["probs"])
  for b in range(B):
    total = 0.0
    for t in range(T):
      token = int(greedy[b, t])
      assert probs[b, t].argmax() == token
      total += np.log(probs[b, t, token] + 1e-12)
      if token == EOS:
        break
    np.testing.assert_allclose(greedy_scores[b], total, rtol=1e-4)


def test_gradient_of_nll_plus_coverage_is_finite():
  batch = make_batch()
  model, params, _ = setup()

  def loss_fn(p):
    out = model.apply({"params": p}, batch, train=True)
    return (pg.nll_loss(out["probs"], batch["targets"], batch["dec_mask"])
            + pg.coverage_loss(out["attention"], out["coverage"], batch["dec_mask"]))

  loss, grads = jax.jit(jax.value_and_grad(loss_fn))(params)
  assert np.isfinite(loss)
  for path, g in jax.tree_util.tree_leaves_with_path(grads):
    assert np.all(np.isfinite(g)), jax.tree_util.keystr(path)
  for name in ("attn_coverage", "pointer", "input_merge"):
    assert np.any(jax.tree.leaves(grads["decoder"][name])[0] != 0), name
  assert np.any(grads["reduce"]["component_0"]["kernel"] != 0)


def test_build_model_and_init():
  config = {"name": "pointer_generator", "encoder_cell": "rum", "decoder_cell": "lstm",
            "hidden_size": H, "embed_dim": E, "lam": 1, "eta": None, "zoneout": 0.0,
            "coverage": True, "cell": "ignored"}
  model = build_model(config, vocab_size=V, max_oovs=M)
  assert isinstance(model, pg.PointerGenerator)
  assert (model.encoder_cell, model.lam, model.coverage, model.max_oovs) == ("rum", 1,
                                                                               True, M)
  params = jax.jit(model.init)(jax.random.key(0), make_batch())["params"]
  assert set(params) == {"embed", "encoder_fw", "encoder_bw", "reduce", "attn_encoder",
                         "decoder"}
  # encRUM: the LSTM decoder's c and h are both reduced from RUM's [h_fw, h_bw].
  assert params["reduce"]["component_1"]["kernel"].shape == (2 * H, H)
  # w_c starts at 0: switching coverage on does not change the model.
  np.testing.assert_array_equal(params["decoder"]["attn_coverage"], 0.0)


def test_decoder_step_carries_context_and_reads_it_in_p_gen():
  """h*_t is carried to the next step's input merge, p_gen = sigmoid(w [h*_t, s_t, x_t] + b)
  with x_t the MERGED input, state_norm = ||h_t|| (LSTM: the carry's h, not [c, h])."""
  batch = make_batch()
  model, params, _ = setup()
  variables = {"params": params}
  state = jax.jit(functools.partial(model.apply, method=model.encode))(variables, batch)
  step = jax.jit(functools.partial(model.apply, method=model.decode_step))
  d = jax.tree.map(np.asarray, params["decoder"])
  emb_table = np.asarray(params["embed"]["embedding"])
  for t in range(2):
    tokens = batch["dec_inputs"][:, t]
    out, new = step(variables, tokens, state)
    out, new = jax.tree.map(np.asarray, (out, new))
    np.testing.assert_allclose(
        new["context"], np.einsum("bs,bsd->bd", out["attention"], state["enc_outputs"]),
        atol=1e-5)
    emb = emb_table[np.where(tokens >= V, UNK, tokens)]
    x = (np.concatenate([emb, np.asarray(state["context"])], -1) @ d["input_merge"]["kernel"]
         + d["input_merge"]["bias"])
    s = np.concatenate(pg.vector_leaves(new["carry"]), -1)
    logit = (np.concatenate([new["context"], s, x], -1) @ d["pointer"]["kernel"][:, 0]
             + d["pointer"]["bias"][0])
    np.testing.assert_allclose(out["p_gen"][:3], 1 / (1 + np.exp(-logit[:3])), atol=1e-5)
    np.testing.assert_allclose(out["state_norm"], np.linalg.norm(new["carry"][1], axis=-1),
                               rtol=1e-5)
    state = new


def test_initial_decoder_state_reads_both_encoder_directions():
  batch = make_batch()
  model, params, _ = setup()
  encode = jax.jit(functools.partial(model.apply, method=model.encode))
  ref = jax.tree.map(np.asarray, encode({"params": params}, batch)["carry"])
  for name in ("encoder_fw", "encoder_bw"):
    other = dict(params, **{name: jax.tree.map(lambda a: 1.5 * a, params[name])})
    carry = jax.tree.map(np.asarray, encode({"params": other}, batch)["carry"])
    for k in range(2):   # c and h of the LSTM decoder
      assert not np.allclose(carry[k][:3], ref[k][:3], atol=1e-6), (name, k)


def test_encoder_outputs_are_aligned_with_source_positions():
  """h_i = [fw_i, bw_i]: the backward half at an article's last real token has read only
  that token, the forward half at position 0 only the first one."""
  batch = make_batch()
  model, params, _ = setup()
  encode = jax.jit(functools.partial(model.apply, method=model.encode))
  ref = np.asarray(encode({"params": params}, batch)["enc_outputs"])
  article = batch["article"].copy()
  article[:, 0] = np.where(article[:, 0] == 9, 10, 9)        # another first token
  out = np.asarray(encode({"params": params}, dict(batch, article=article))["enc_outputs"])
  for b, n in enumerate(LENGTHS):
    if n >= 2:
      np.testing.assert_allclose(out[b, n - 1, H:], ref[b, n - 1, H:], atol=1e-6)
      assert not np.allclose(out[b, 0, :H], ref[b, 0, :H], atol=1e-6)


def test_coverage_enters_the_attention_through_w_c():
  """e^t_i = v^T tanh(W_h h_i + W_s s_t + w_c c^t_i + b) (See et al. eq. 11): changing w_c
  leaves step 0 (c^0 = 0) as it was and moves the attention of the later steps."""
  batch = make_batch()
  model, params, apply = setup()
  out = apply(params, batch)
  decoder = dict(params["decoder"], attn_coverage=params["decoder"]["attn_coverage"] + 2.0)
  moved = apply(dict(params, decoder=decoder), batch)
  rows = real_rows(batch)
  np.testing.assert_allclose(moved["attention"][:, 0], out["attention"][:, 0], atol=1e-6)
  assert not np.allclose(moved["attention"][rows, 1:], out["attention"][rows, 1:], atol=1e-4)

"""Greedy and beam search (rumjax/decoding.py) against exhaustive search and replays."""

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rumjax import decoding

BOS, EOS = 0, 1


# ---------------------------------------------------------------------------- models


def _rng(seed):
  return np.random.default_rng(seed)


def markov_model(vocab, batch, seed, eos_bias=0.0):
  """Logits ``table[token] + bias[example]``; the state is a per-example bias row."""
  rng = _rng(seed)
  table = 2.0 * rng.normal(size=(vocab, vocab))
  table[:, EOS] += eos_bias
  table = jnp.asarray(table, jnp.float32)
  init = {"bias": jnp.asarray(rng.normal(size=(batch, vocab)), jnp.float32)}
  return lambda tokens, state: (table[tokens] + state["bias"], state), init


def pytree_model(vocab, batch, seed, hidden=4):
  """State ``{"count": <int32>[n], "mem": (R <f>[n, H, H], h <f>[n, H])}``, all used.

  ``count`` counts the odd tokens so far and ``R`` accumulates ``h h^T``: both depend on
  the beam's own history, so a wrong gather across beams changes the logits.
  """
  rng = _rng(seed)
  emb, w, u = (jnp.asarray(rng.normal(size=s), jnp.float32)
               for s in ((vocab, hidden), (hidden, hidden), (hidden, vocab)))
  table, wave = (jnp.asarray(rng.normal(size=s), jnp.float32)
                 for s in ((vocab, vocab), (vocab,)))

  def tokens_to_logits(tokens, state):
    r, h = state["mem"]
    h = jnp.tanh(h @ w + emb[tokens])
    r = r + 0.5 * h[:, :, None] * h[:, None, :]
    count = state["count"] + tokens % 2
    logits = (table[tokens] + jnp.einsum("nij,nj->ni", r, h) @ u
              + 2.0 * jnp.cos(count)[:, None] * wave)
    return logits, {"count": count, "mem": (r, h)}

  init = {"count": jnp.zeros((batch,), jnp.int32),
          "mem": (jnp.broadcast_to(jnp.eye(hidden), (batch, hidden, hidden)),
                  jnp.asarray(rng.normal(size=(batch, hidden)), jnp.float32))}
  return tokens_to_logits, init


def rnn_model(vocab, batch, seed, hidden=5):
  """A tiny RNN: ``h' = tanh(W h + E[token])``, logits ``3 U h'`` (log-probs returned)."""
  rng = _rng(seed)
  emb, w, u = (jnp.asarray(rng.normal(size=s), jnp.float32)
               for s in ((vocab, hidden), (hidden, hidden), (hidden, vocab)))

  def tokens_to_logits(tokens, h):
    h = jnp.tanh(h @ w + emb[tokens])
    return jax.nn.log_softmax(3.0 * h @ u), h

  return tokens_to_logits, jnp.asarray(rng.normal(size=(batch, hidden)), jnp.float32)


def with_eos_bias(model, init, eos_bias):
  """Adds ``eos_bias[example]`` to the eos logit; the state becomes ``(state, bias)``."""
  def tokens_to_logits(tokens, state):
    inner, bias = state
    logits, inner = model(tokens, inner)
    return logits.at[:, EOS].add(bias), (inner, bias)
  return tokens_to_logits, (init, jnp.asarray(eos_bias, jnp.float32))


# -------------------------------------------------------------------- references


def _log_softmax(x):
  x = np.asarray(x, np.float64)
  x = x - x.max()
  return x - np.log(np.exp(x).sum())


_jit = functools.lru_cache(maxsize=None)(jax.jit)   # one compiled model per test model


def _example(state, b):
  return jax.tree.map(lambda x: x[b:b + 1], state)


def replay(model, init, b, tokens, min_len=0):
  """Summed log-prob and length of ``tokens`` (up to eos) by calling the model per token."""
  state, prev, total = _example(init, b), BOS, 0.0
  for i, token in enumerate(int(t) for t in tokens):
    logits, state = _jit(model)(jnp.array([prev], jnp.int32), state)
    if token == EOS and i < min_len:
      return -math.inf, i + 1
    total += _log_softmax(logits[0])[token]
    if token == EOS:
      return total, i + 1
    prev = token
  return total, len(tokens)


def penalty(length, mode, alpha):
  # "average": See et al.'s log_prob / len(tokens), tokens beginning with <s>.
  return {None: 1.0, "average": length + 1, "wmt": ((5 + length) / 6) ** alpha}[mode]


def exhaustive(model, init, b, vocab, max_len, min_len, mode, alpha):
  """All complete hypotheses (eos-terminated or max_len long), best score first."""
  hyps = []
  for length in range(1, max_len + 1):
    for prefix in itertools.product([v for v in range(vocab) if v != EOS],
                                    repeat=length - 1):
      ends = [EOS] if length < max_len else range(vocab)
      for last in ends:
        if last == EOS and length - 1 < min_len:
          continue
        tokens = prefix + (last,)
        logprob, n = replay(model, init, b, tokens, min_len)
        assert n == length
        hyps.append((logprob / penalty(length, mode, alpha), tokens))
  hyps.sort(key=lambda h: -h[0])
  return hyps


def _strip(seq):
  """Tokens up to and including the first eos."""
  seq = [int(t) for t in seq]
  return tuple(seq[:seq.index(EOS) + 1]) if EOS in seq else tuple(seq)


# ------------------------------------------------------------------------- tests


@pytest.mark.parametrize("seed,min_len", [(0, 0), (2, 3)])
@pytest.mark.parametrize("make_model", [markov_model, pytree_model])
def test_beam_one_equals_greedy(make_model, seed, min_len):
  batch, max_len = 8, 9
  model, init = with_eos_bias(*make_model(7, batch, seed), np.linspace(-8.0, 8.0, batch))
  kw = dict(batch_size=batch, bos_id=BOS, eos_id=EOS, max_len=max_len, min_len=min_len)
  g_seqs, g_scores = decoding.greedy_search(model, init, **kw)
  b_seqs, b_scores = decoding.beam_search(model, init, beam_size=1, **kw)
  np.testing.assert_array_equal(b_seqs[:, 0], g_seqs)
  np.testing.assert_allclose(b_scores[:, 0], g_scores, rtol=1e-6)
  # Greedy is the argmax path: check it against a replay with a Python argmax loop.
  for b in range(batch):
    state, prev, tokens = _example(init, b), BOS, []
    for i in range(max_len):
      logits, state = _jit(model)(jnp.array([prev], jnp.int32), state)
      lp = _log_softmax(logits[0])
      if i < min_len:
        lp[EOS] = -np.inf
      prev = int(np.argmax(lp))
      tokens.append(prev)
      if prev == EOS:
        break
    assert _strip(g_seqs[b]) == tuple(tokens)
  ended = np.any(np.asarray(g_seqs) == EOS, axis=1)
  assert ended.any() and not ended.all()        # both kinds of rows are covered


@pytest.mark.parametrize("mode", [None, "average", "wmt"])
@pytest.mark.parametrize("vocab,max_len,min_len", [(3, 3, 0), (4, 3, 2), (3, 4, 1)])
def test_beam_equals_exhaustive(vocab, max_len, min_len, mode):
  batch, alpha = 2, 1.0
  beam = vocab ** (max_len - 1)
  model, init = rnn_model(vocab, batch, seed=vocab + 10 * max_len)
  seqs, scores = decoding.beam_search(
      model, init, batch_size=batch, beam_size=beam, bos_id=BOS, eos_id=EOS,
      max_len=max_len, min_len=min_len, length_normalization=mode, alpha=alpha)
  assert seqs.shape == (batch, beam, max_len) and seqs.dtype == jnp.int32
  assert scores.shape == (batch, beam) and scores.dtype == jnp.float32
  for b in range(batch):
    ref = exhaustive(model, init, b, vocab, max_len, min_len, mode, alpha)
    k = min(beam, len(ref))
    ref_scores = np.array([s for s, _ in ref[:k]])
    np.testing.assert_allclose(scores[b, :k], ref_scores, rtol=1e-5, atol=1e-5)
    assert np.all(np.isneginf(scores[b, k:]))
    got = [_strip(s) for s in seqs[b, :k]]
    assert got[0] == ref[0][1]
    all_scores = np.array([s for s, _ in ref] + [-np.inf])
    for i in range(k):
      gap = min(abs(all_scores[i] - all_scores[i + 1]),
                abs(all_scores[i] - all_scores[i - 1]) if i else np.inf)
      if gap > 1e-4:
        assert got[i] == ref[i][1], (b, i)


@pytest.mark.parametrize("make_model,mode", [
    (pytree_model, None), (pytree_model, "average"), (rnn_model, "wmt")])
def test_scores_are_replayed_log_probs(make_model, mode):
  batch, beam, max_len, min_len, alpha = 3, 4, 7, 2, 0.6
  model, init = make_model(6, batch, seed=5)
  seqs, scores = decoding.beam_search(
      model, init, batch_size=batch, beam_size=beam, bos_id=BOS, eos_id=EOS,
      max_len=max_len, min_len=min_len, length_normalization=mode, alpha=alpha)
  assert np.all(np.isfinite(scores))
  assert np.all(np.diff(np.asarray(scores), axis=1) <= 0)       # best first
  seqs = np.asarray(seqs)
  assert not np.any(seqs[:, :, :min_len] == EOS)
  after_eos = np.cumsum(seqs == EOS, axis=-1) > 0
  assert np.all(seqs[after_eos] == EOS) and np.any(after_eos[:, :, -2])
  for b, k in itertools.product(range(batch), range(beam)):
    logprob, length = replay(model, init, b, seqs[b, k], min_len)
    np.testing.assert_allclose(scores[b, k], logprob / penalty(length, mode, alpha),
                               rtol=1e-5, atol=1e-5)
  # Distinct hypotheses per example.
  for b in range(batch):
    assert len({_strip(s) for s in seqs[b]}) == beam


@pytest.mark.parametrize("mode,alpha,best,beam", [
    (None, 0.6, (EOS,), 1), ("average", 0.6, (2,) * 5, 1), ("wmt", 2.0, (2,) * 5, 1),
    ("average", 0.6, (2,) * 5, 2)])
def test_early_exit_is_safe(mode, alpha, best, beam):
  """eos is the best first token, but a long likely continuation wins once normalised.

  From bos: p(eos) = 0.6, p(2) = 0.35; from 2: p(2) = 0.98. Stopping as soon as the live
  beam's current normalised score is below the finished one would return [eos].
  """
  probs = np.array([[.05, .6, .35], [.05, .6, .35], [.01, .01, .98]])
  table = jnp.asarray(np.log(probs), jnp.float32)
  model = lambda tokens, h: (table[tokens], h)
  init = jnp.zeros((1, 1))
  seqs, scores = decoding.beam_search(
      model, init, batch_size=1, beam_size=beam, bos_id=BOS, eos_id=EOS, max_len=5,
      length_normalization=mode, alpha=alpha)
  ref = exhaustive(model, init, 0, 3, 5, 0, mode, alpha)
  assert ref[0][1] == best and _strip(seqs[0, 0]) == best
  np.testing.assert_allclose(scores[0, 0], ref[0][0], rtol=1e-5)


def test_average_counts_the_start_token_as_see_et_al():
  """``"average"`` ranks by ``log p / (len + 1)``, See et al.'s ``log_prob / len(tokens)``
  with ``<s>`` among the tokens. Here that picks ``[eos]`` (log .5 / 2 = -0.347) over
  ``[2, eos]`` (log .27 / 3 = -0.436); dividing by the generated length alone picked
  ``[2, eos]`` (-0.655 against -0.693)."""
  probs = np.array([[.05, .5, .45], [.05, .5, .45], [.2, .6, .2]])   # rows: bos, eos, 2
  table = jnp.asarray(np.log(probs), jnp.float32)
  model = lambda tokens, h: (table[tokens], h)
  seqs, scores = decoding.beam_search(
      model, jnp.zeros((1, 1)), batch_size=1, beam_size=3, bos_id=BOS, eos_id=EOS,
      max_len=2, length_normalization="average")
  assert _strip(seqs[0, 0]) == (EOS,)
  np.testing.assert_allclose(scores[0, 0], np.log(.5) / 2, rtol=1e-6)
  # Without the start token the other hypothesis would win: the test tells the two apart.
  assert (np.log(.45) + np.log(.6)) / 2 > np.log(.5) / 1
  # And the exhaustive search under the same rule agrees.
  ref = exhaustive(model, jnp.zeros((1, 1)), 0, 3, 2, 0, "average", 0.6)
  assert ref[0][1] == (EOS,)


def test_eos_padding_and_min_len():
  batch, beam, max_len, min_len = 4, 5, 8, 3
  model, init = markov_model(6, batch, seed=3, eos_bias=30.0)  # eos wins once allowed
  seqs, scores = decoding.beam_search(
      model, init, batch_size=batch, beam_size=beam, bos_id=BOS, eos_id=EOS,
      max_len=max_len, min_len=min_len)
  seqs = np.asarray(seqs)
  assert not np.any(seqs[:, :, :min_len] == EOS)
  assert np.all(seqs[:, :, min_len] == EOS)       # with this bias all end right away
  is_eos = seqs == EOS
  after_eos = np.cumsum(is_eos, axis=-1) > 0
  assert np.all(seqs[after_eos] == EOS) and after_eos.any()
  g_seqs, _ = decoding.greedy_search(model, init, batch_size=batch, bos_id=BOS,
                                     eos_id=EOS, max_len=max_len, min_len=min_len)
  np.testing.assert_array_equal(g_seqs, seqs[:, 0])
  # Early exit: every hypothesis ends at position min_len, so min_len + 1 model calls.
  calls = []
  def counted(tokens, state):
    jax.debug.callback(lambda: calls.append(1))
    return model(tokens, state)
  for search in (functools.partial(decoding.beam_search, beam_size=beam),
                 decoding.greedy_search):
    calls.clear()
    jax.block_until_ready(search(counted, init, batch_size=batch, bos_id=BOS, eos_id=EOS,
                                 max_len=max_len, min_len=min_len))
    jax.effects_barrier()
    assert len(calls) == min_len + 1
  # min_len == max_len: eos never appears.
  seqs, scores = decoding.beam_search(
      model, init, batch_size=batch, beam_size=beam, bos_id=BOS, eos_id=EOS,
      max_len=4, min_len=4)
  assert not np.any(np.asarray(seqs) == EOS) and np.all(np.isfinite(scores))


def test_batch_independence_and_jit():
  batch, beam, max_len = 3, 3, 6
  model, init = rnn_model(5, batch, seed=11)
  kw = dict(beam_size=beam, bos_id=BOS, eos_id=EOS, max_len=max_len, min_len=1,
            length_normalization="wmt", alpha=0.8)
  search = jax.jit(functools.partial(decoding.beam_search, model, batch_size=batch, **kw))
  seqs, scores = search(init)
  eager = decoding.beam_search(model, init, batch_size=batch, **kw)
  np.testing.assert_array_equal(seqs, eager[0])
  np.testing.assert_allclose(scores, eager[1], rtol=1e-6)
  one = jax.jit(functools.partial(decoding.beam_search, model, batch_size=1, **kw))
  for b in range(batch):
    seqs_b, scores_b = one(init[b:b + 1])
    np.testing.assert_array_equal(seqs_b[0], seqs[b])
    np.testing.assert_allclose(scores_b[0], scores[b], rtol=1e-5)
  assert len({tuple(np.asarray(s).ravel()) for s in seqs}) == batch   # examples differ


def test_beam_helpers():
  x = {"a": jnp.arange(6).reshape(2, 3), "b": (jnp.arange(2.0),)}
  y = decoding.add_beam_dim(x, 4)
  assert y["a"].shape == (2, 4, 3) and y["b"][0].shape == (2, 4)
  np.testing.assert_array_equal(y["a"][1, 3], x["a"][1])
  flat = decoding.flatten_beam_dim(y)
  assert flat["a"].shape == (8, 3)
  np.testing.assert_array_equal(flat["b"][0], [0, 0, 0, 0, 1, 1, 1, 1])
  back = decoding.unflatten_beam_dim(flat, 2, 4)
  np.testing.assert_array_equal(back["a"], y["a"])
  z = jnp.arange(2 * 3 * 2).reshape(2, 3, 2)
  g = decoding.gather_beams(z, jnp.array([[2, 0], [1, 1]]))
  np.testing.assert_array_equal(g, np.stack([z[0, [2, 0]], z[1, [1, 1]]]))


@pytest.mark.parametrize("kwargs,match", [
    (dict(beam_size=0), "beam_size=0"),
    (dict(max_len=0), "max_len=0"),
    (dict(batch_size=0), "batch_size=0"),
    (dict(min_len=-1), "min_len=-1"),
    (dict(min_len=6), "min_len=6 .*max_len=5"),
    (dict(length_normalization="avg"), "'avg' is unknown.*'average', 'wmt'"),
    (dict(eos_id=9), "eos_id=9 is outside the vocabulary"),
    (dict(batch_size=3), "leading axis batch_size=3"),
    # these were raw TypeErrors from inside the search (review helper)
    (dict(eos_id=1.0), r"eos_id=1.0 is invalid: it must be a token id"),
    (dict(eos_id=None), r"eos_id=None is invalid"),
    (dict(eos_id=True), r"eos_id=True is invalid"),
    (dict(bos_id="0"), r"bos_id='0' is invalid"),
    (dict(bos_id=-1), r"bos_id=-1 is invalid"),
    (dict(alpha="x"), r"alpha='x' is invalid: it must be a finite real number"),
    (dict(alpha=float("nan")), r"alpha=nan is invalid"),
])
def test_argument_errors(kwargs, match):
  model, init = markov_model(4, 2, seed=0)
  args = dict(batch_size=2, beam_size=2, bos_id=BOS, eos_id=EOS, max_len=5) | kwargs
  with pytest.raises(ValueError, match=match):
    decoding.beam_search(model, init, **args)
  if not {"beam_size", "length_normalization", "alpha"} & set(kwargs):
    args.pop("beam_size")
    with pytest.raises(ValueError, match=match):
      decoding.greedy_search(model, init, **args)


def test_state_must_keep_its_shape():
  model = lambda tokens, h: (jnp.zeros((tokens.shape[0], 4)), h[:, :1])
  with pytest.raises(ValueError, match="structure, shapes and dtypes"):
    decoding.beam_search(model, jnp.zeros((2, 3)), batch_size=2, beam_size=2, bos_id=BOS,
                         eos_id=EOS, max_len=3)


def test_benchmark_decoder_cells_are_found_by_name():
  """``rumjax.benchmarks.decoding``'s decoder cells come from its registry: every name
  builds a decoder with float32 logits over the vocabulary (RUM with its name's lam), and
  an unknown name is a one-line error naming the known ones."""
  from rumjax.benchmarks import decoding as bench
  assert bench.DECODER_CELLS.names() == ["gru", "rum0", "rum1"]
  for name in bench.DECODER_CELLS.names():
    tokens_to_logits, params, carry = bench.make_decoder(name, 2, 4, 8)
    logits, _ = tokens_to_logits(params, jnp.ones((2,), jnp.int32), carry)
    assert logits.shape == (2, 8) and logits.dtype == jnp.float32
  assert [bench.DECODER_CELLS.get(f"rum{lam}")(4).lam for lam in (0, 1)] == [0, 1]
  with pytest.raises(ValueError, match=r"^unknown decoder cell 'rum2'; known decoder cells "
                     r"are \['gru', 'rum0', 'rum1'\]; did you mean"):
    bench.make_decoder("rum2", 2, 4, 8)


def test_numpy_integer_arguments_decode_as_ints_and_bad_ones_are_one_line_errors():
  # Sizes read from an array or a config parsed by NumPy (np.int64) are integers too.
  model, init = markov_model(5, 2, 0)
  kw = dict(bos_id=BOS, eos_id=EOS, min_len=1)
  want = decoding.beam_search(model, init, batch_size=2, beam_size=3, max_len=4, **kw)
  got = decoding.beam_search(model, init, batch_size=np.int64(2), beam_size=np.int32(3),
                             max_len=np.array(4), **{**kw, "min_len": np.int64(1)})
  jax.tree.map(np.testing.assert_array_equal, got, want)
  np.testing.assert_array_equal(
      decoding.greedy_search(model, init, batch_size=np.int64(2), max_len=np.int64(4), **kw)[0],
      decoding.greedy_search(model, init, batch_size=2, max_len=4, **kw)[0])
  for bad, message in [
      (dict(beam_size=2.0), r"^beam_size=2\.0 is invalid: it must be an int >= 1\.$"),
      (dict(beam_size=True), r"^beam_size=True is invalid"),
      (dict(max_len=np.int64(0)), r"^max_len=np\.int64\(0\) is invalid"),
      (dict(min_len=5), r"^min_len=5 is invalid: .* max_len=4\.$")]:
    with pytest.raises(ValueError, match=message):
      decoding.beam_search(model, init, **{**kw, "batch_size": 2, "beam_size": 3,
                                           "max_len": 4, **bad})


def test_empty_slots_are_eos_with_score_minus_inf():
  """Fewer than beam_size hypotheses have a finite probability (<s> 2 eos is the only one):
  the first slot holds it, the others are empty: all eos, score -inf (not the leftovers of
  candidates that were ranked at -inf)."""
  vocab = 4

  def one_path(tokens, state):
    step = state["step"][:, 0]
    finite = jnp.where(step == 0, 2, EOS)
    logits = jnp.where(jnp.arange(vocab)[None] == finite[:, None], 0.0, -jnp.inf)
    return logits, {"step": state["step"] + 1}

  init = {"step": jnp.zeros((2, 1), jnp.int32)}
  seqs, scores = decoding.beam_search(one_path, init, batch_size=2, beam_size=3, bos_id=BOS,
                                      eos_id=EOS, max_len=5)
  seqs, scores = np.asarray(seqs), np.asarray(scores)
  np.testing.assert_array_equal(seqs[:, 0], [[2, EOS, EOS, EOS, EOS]] * 2)
  np.testing.assert_array_equal(scores[:, 0], 0.0)
  assert np.all(seqs[:, 1:] == EOS) and np.all(scores[:, 1:] == -np.inf)

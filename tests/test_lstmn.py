"""The LSTMN (Cheng, Dong, Lapata 2016) against slow per-step references.

The references below loop in Python over the batch and the real tokens only (padding is
dropped before they see the sequence), keep the tapes as Python lists and compute the
softmax explicitly, so they are the equations and nothing else. They run on NumPy (values)
and on jax.numpy (gradients, through ``jax.grad``).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import rumjax
from rumjax.core import attention
from rumjax.core import lstmn as lstmn_lib
from rumjax.models import fusion
from rumjax.models import DeepFusion, LSTMN, ShallowFusion, StackedLSTMN

# These tests compare implementations or check against float64: true float32 matmuls.
pytestmark = pytest.mark.usefixtures("float32_matmuls")

enable_x64 = lambda: jax.enable_x64(True)
NX, NH, NA, NB = 3, 4, 5, 3


# ------------------------------------------------------------------ references


def _sigmoid(xp, z):
  return 1.0 / (1.0 + xp.exp(-z))


def _attend(xp, keys, query, v):
  """Explicit eqs. (4)-(5): ``[v . tanh(k_i + q) for i]``, softmax over the list."""
  scores = [xp.sum(v * xp.tanh(k + query)) for k in keys]
  top = max(float(s) for s in scores) if xp is np else 0.0
  e = [xp.exp(s - top) for s in scores]
  total = sum(e)
  return [w / total for w in e]


def _update(xp, p, h_tilde, c_tilde, x, extra=0.0):
  """Eqs. (7)-(9): gates ``[i | f | o | c^]`` from ``[h~_t, x_t]``."""
  pre = h_tilde @ p["gates_h"] + x @ p["gates_x"] + p["gates_bias"]
  i, f, o, c_hat = (pre[k * NH:(k + 1) * NH] for k in range(4))
  c = _sigmoid(xp, f) * c_tilde + _sigmoid(xp, i) * xp.tanh(c_hat) + extra
  return _sigmoid(xp, o) * xp.tanh(c), c


def _real(mask, b, t_len):
  return [t for t in range(t_len) if mask is None or bool(mask[b][t])]


def lstmn_reference(p, xs, mask=None, memory_span=None, initial=None, xp=np,
                    source=None):
  """Per-step LSTMN; with ``source = (src_hs, src_cs, src_mask)`` the deep-fusion decoder.

  Returns ``{(b, t): (h_t, c_t)}`` over the real positions.
  """
  batch, t_len = xs.shape[:2]
  zero = xp.zeros(NH, dtype=xs.dtype)
  out = {}
  for b in range(batch):
    hs_tape = [zero if initial is None else initial[0][b]]        # position 0
    cs_tape = [zero if initial is None else initial[1][b]]
    h_tilde_prev, g_tilde_prev = zero, zero
    if source is not None:
      src_hs, src_cs, src_mask = source
      real_src = _real(src_mask, b, src_hs.shape[1])
      ys = [src_hs[b, j] for j in real_src]
      as_ = [src_cs[b, j] for j in real_src]
    for t in _real(mask, b, t_len):
      x = xs[b, t]
      visible = list(range(len(hs_tape)))
      if memory_span is not None:
        visible = visible[-memory_span:]
      s = _attend(xp, [hs_tape[i] @ p["attn_h"] for i in visible],
                  x @ p["attn_x"] + h_tilde_prev @ p["attn_ht"], p["attn_v"])
      h_tilde = sum(w * hs_tape[i] for w, i in zip(s, visible))
      c_tilde = sum(w * cs_tape[i] for w, i in zip(s, visible))
      extra = 0.0
      if source is not None:
        if ys:
          q = _attend(xp, [g @ p["inter_g"] for g in ys],
                      x @ p["inter_x"] + g_tilde_prev @ p["inter_gt"], p["inter_u"])
          g_tilde = sum(w * g for w, g in zip(q, ys))
          a_tilde = sum(w * a for w, a in zip(q, as_))
        else:
          g_tilde = a_tilde = zero
        r = _sigmoid(xp, g_tilde @ p["gate_r_g"] + x @ p["gate_r_x"] + p["gate_r_bias"])
        extra = r * a_tilde
        g_tilde_prev = g_tilde
      h, c = _update(xp, p, h_tilde, c_tilde, x, extra)
      hs_tape.append(h)
      cs_tape.append(c)
      h_tilde_prev = h_tilde
      out[b, t] = (h, c)
  return out


def shallow_reference(p, src_hs, src_mask, tgt_hs):
  """Shallow fusion's inter-attention and output layer, one (b, t) at a time."""
  out = np.zeros(tgt_hs.shape)
  for b in range(tgt_hs.shape[0]):
    ys = [src_hs[b, j] for j in _real(src_mask, b, src_hs.shape[1])]
    for t in range(tgt_hs.shape[1]):
      h = tgt_hs[b, t]
      if not ys:                      # an empty source: no context
        out[b, t] = np.tanh(h @ p["out_h"] + p["out_bias"])
        continue
      alpha = _attend(np, [g @ p["inter_g"] for g in ys], h @ p["inter_h"], p["inter_u"])
      z = sum(w * g for w, g in zip(alpha, ys))
      out[b, t] = np.tanh(z @ p["out_ctx"] + h @ p["out_h"] + p["out_bias"])
  return out


# ----------------------------------------------------------------------- helpers


def _params(seed, nx=NX, dtype=jnp.float32, bias_scale=0.5):
  params = rumjax.init_lstmn_params(jax.random.key(seed), nx, NH, NA, dtype)
  params["gates_bias"] = bias_scale * jax.random.normal(jax.random.key(seed + 1), (4 * NH,),
                                                        dtype)
  return params


def _normal(seed, *shape, dtype=jnp.float32):
  return jnp.asarray(np.random.default_rng(seed).normal(size=shape), dtype)


MASK = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0]], bool)


def _np(tree):
  return jax.tree.map(np.asarray, tree)


def _assert_real_close(out, ref, mask, rtol=1e-10, atol=1e-10):
  hs, cs = out
  keys = sorted(ref)
  assert len(keys) == (mask.sum() if mask is not None else hs.shape[0] * hs.shape[1])
  np.testing.assert_allclose(np.stack([hs[k] for k in keys]),
                             np.stack([ref[k][0] for k in keys]), rtol=rtol, atol=atol)
  np.testing.assert_allclose(np.stack([cs[k] for k in keys]),
                             np.stack([ref[k][1] for k in keys]), rtol=rtol, atol=atol)


# ------------------------------------------------------------------ lstmn_scan


@pytest.mark.parametrize("case", ["plain", "mask", "span", "initial"])
def test_values_match_reference(case):
  with enable_x64():
    params = _params(0, dtype=jnp.float64)
    xs = _normal(1, 3, 6, NX, dtype=jnp.float64)
    kwargs = {"mask": MASK} if case != "plain" else {}
    if case == "span":
      kwargs["memory_span"] = 2
    if case == "initial":
      kwargs["initial"] = (_normal(2, 3, NH, dtype=jnp.float64),
                           _normal(3, 3, NH, dtype=jnp.float64))
    hs, cs = rumjax.lstmn_scan(params, xs, **kwargs)
    assert hs.shape == cs.shape == (3, 6, NH) and hs.dtype == jnp.float64
    ref = lstmn_reference(_np(params), np.asarray(xs), **{
        k: (v if k == "memory_span" else _np(v)) for k, v in kwargs.items()})
    _assert_real_close((np.asarray(hs), np.asarray(cs)), ref, kwargs.get("mask"))
    if case == "mask":
      hs_r, cs_r = rumjax.lstmn_scan(params, xs, impl="reference", **kwargs)
      np.testing.assert_allclose(hs_r, hs, rtol=1e-12, atol=1e-12)


def test_attention_weights():
  """Step 1 sees only position 0; no weight on future, padded or out-of-span positions."""
  params = _params(4)
  xs = _normal(5, 3, 6, NX)
  initial = (_normal(6, 3, NH), _normal(7, 3, NH))
  _, _, s = rumjax.lstmn_scan(params, xs, mask=MASK, initial=initial, memory_span=3,
                              return_attention=True)
  s = np.asarray(s)
  assert s.shape == (3, 6, 7)
  np.testing.assert_allclose(s[:, 0], np.eye(7)[[0, 0, 0]], atol=1e-7)
  np.testing.assert_allclose(s.sum(-1), 1.0, rtol=1e-6)
  future = np.arange(7)[None, :] > np.arange(6)[:, None]      # tape position i >= t
  assert np.all(s[:, future] == 0)
  assert np.all(s[1, :, 5:] == 0) and np.all(s[2, :, 2:] == 0)  # padded tape positions
  np.testing.assert_array_equal(np.count_nonzero(s[0], axis=-1), [1, 2, 3, 3, 3, 3])
  np.testing.assert_array_equal(np.count_nonzero(s[1, :4], axis=-1), [1, 2, 3, 3])


def _loss_weights(seed, shape):
  return _normal(seed, *shape, dtype=jnp.float64), _normal(seed + 1, *shape, dtype=jnp.float64)


def test_gradients_match_reference():
  with enable_x64():
    params = _params(8, dtype=jnp.float64)
    xs = _normal(9, 3, 6, NX, dtype=jnp.float64)
    initial = (_normal(10, 3, NH, dtype=jnp.float64), _normal(11, 3, NH, dtype=jnp.float64))
    wh, wc = _loss_weights(12, (3, 6, NH))
    real = jnp.asarray(MASK)[..., None]

    def loss(params, xs, initial, impl):
      hs, cs = rumjax.lstmn_scan(params, xs, mask=MASK, initial=initial, memory_span=3,
                                 impl=impl)
      return jnp.sum(jnp.where(real, wh * hs + wc * cs ** 2, 0.0))

    def loss_ref(params, xs, initial):
      out = lstmn_reference(params, xs, MASK, 3, initial, xp=jnp)
      return sum(jnp.sum(wh[k] * h + wc[k] * c ** 2) for k, (h, c) in out.items())

    np.testing.assert_allclose(loss(params, xs, initial, "fast"), loss_ref(params, xs, initial),
                               rtol=1e-12)
    expected = jax.grad(loss_ref, argnums=(0, 1, 2))(params, xs, initial)
    got = jax.grad(loss, argnums=(0, 1, 2))(params, xs, initial, "fast")
    for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
      np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-11)


def test_gradients_finite_differences():
  with enable_x64():
    params = _params(13, dtype=jnp.float64)
    xs = _normal(14, 2, 4, NX, dtype=jnp.float64)
    f = lambda params, xs: rumjax.lstmn_scan(params, xs, mask=MASK[1:, 2:], memory_span=2)
    check_grads(f, (params, xs), order=1, modes=["rev"], eps=1e-6, atol=1e-6, rtol=1e-6)


def test_right_padding_equals_unpadded_and_padding_is_inert():
  params = _params(15)
  xs = _normal(16, 3, 6, NX)
  hs, cs = rumjax.lstmn_scan(params, xs, mask=MASK)
  alone, _ = rumjax.lstmn_scan(params, xs[1:2, :4])
  np.testing.assert_allclose(hs[1, :4], alone[0], rtol=1e-5, atol=1e-6)
  noisy = jnp.where(jnp.asarray(MASK)[..., None], xs, 100.0 * _normal(17, 3, 6, NX))
  hs2, cs2 = rumjax.lstmn_scan(params, noisy, mask=MASK)
  real = MASK[..., None]
  np.testing.assert_array_equal(np.where(real, hs2, 0), np.where(real, hs, 0))
  np.testing.assert_array_equal(np.where(real, cs2, 0), np.where(real, cs, 0))
  # No gradient reaches a padded input from the real positions.
  g = jax.grad(lambda xs: jnp.sum(jnp.where(real, rumjax.lstmn_scan(params, xs, mask=MASK)[0],
                                            0.0)))(xs)
  assert np.all(np.asarray(g)[~MASK] == 0) and np.any(np.asarray(g)[MASK] != 0)


def test_any_mask_equals_the_sequence_without_padding():
  """Left padding and holes: padded steps are skipped (tapes, h~ and the span alike)."""
  params = _params(18)
  xs = _normal(19, 2, 6, NX)
  mask = np.array([[0, 0, 1, 1, 1, 1], [1, 0, 1, 1, 0, 1]], bool)
  for span in (None, 2):
    hs, _ = rumjax.lstmn_scan(params, xs, mask=mask, memory_span=span)
    for b in range(2):
      alone, _ = rumjax.lstmn_scan(params, xs[b:b + 1, mask[b]], memory_span=span)
      np.testing.assert_allclose(hs[b, mask[b]], alone[0], rtol=1e-5, atol=1e-6)


def test_initial_state_continues_a_language_model_window():
  params = _params(20)
  xs = _normal(21, 2, 6, NX)
  zero = jnp.zeros((2, NH))
  np.testing.assert_array_equal(rumjax.lstmn_scan(params, xs, initial=(zero, zero))[0],
                                rumjax.lstmn_scan(params, xs)[0])
  hs1, cs1 = rumjax.lstmn_scan(params, xs[:, :3])
  hs2, _ = rumjax.lstmn_scan(params, xs[:, 3:], initial=(hs1[:, -1], cs1[:, -1]))
  ref = lstmn_reference(_np(params), np.asarray(xs[:, 3:]),
                        initial=(np.asarray(hs1[:, -1]), np.asarray(cs1[:, -1])))
  np.testing.assert_allclose(hs2, np.stack([[ref[b, t][0] for t in range(3)] for b in range(2)]),
                             rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="initial h0"):
    rumjax.lstmn_scan(params, xs, initial=(zero[:1], zero))


def test_degenerate_inputs_have_finite_gradients():
  """All-zero inputs (equal scores everywhere), T = 1, a row without any real token."""
  params = _params(22)
  cases = ((jnp.zeros((2, 5, NX)), None, "fast"),
           (jnp.zeros((2, 1, NX)), np.array([[True], [False]]), "fast"),
           (_normal(23, 2, 1, NX), np.array([[True], [False]]), "reference"))
  for xs, mask, impl in cases:
    loss = lambda p, xs: jnp.sum(rumjax.lstmn_scan(p, xs, mask=mask, impl=impl)[0])
    g = jax.jit(jax.grad(loss, argnums=(0, 1)))(params, xs)
    assert all(np.all(np.isfinite(a)) for a in jax.tree.leaves(g))


def test_params_layout_and_errors():
  params = jax.eval_shape(
      functools.partial(rumjax.init_lstmn_params, nx=7, nh=6, na=5, dtype=jnp.bfloat16),
      jax.random.key(0))
  assert {k: v.shape for k, v in params.items()} == {
      "attn_h": (6, 5), "attn_x": (7, 5), "attn_ht": (6, 5), "attn_v": (5,),
      "gates_x": (7, 24), "gates_h": (6, 24), "gates_bias": (24,)}
  assert all(v.dtype == jnp.bfloat16 for v in params.values())
  params = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), params)
  with pytest.raises(ValueError, match="Nx=7"):
    rumjax.lstmn_scan(params, jnp.zeros((1, 2, 3)))
  bad = dict(params, attn_ht=jnp.zeros((6, 4)))
  with pytest.raises(ValueError, match="attn_ht"):
    rumjax.lstmn_scan(bad, jnp.zeros((1, 2, 7)))
  with pytest.raises(ValueError, match="memory_span"):
    rumjax.lstmn_scan(params, jnp.zeros((1, 2, 7)), memory_span=0)
  with pytest.raises(ValueError, match="keys"):
    rumjax.lstmn_scan({"attn_h": params["attn_h"]}, jnp.zeros((1, 2, 7)))


# --------------------------------------------------------------------- modules


def test_flax_module_equals_lstmn_scan():
  xs = _normal(24, 3, 6, NX)
  initial = (_normal(25, 3, NH), _normal(26, 3, NH))
  module = LSTMN(NH, NA, memory_span=3)
  variables = module.init(jax.random.key(0), xs)
  params = variables["params"]
  assert jax.tree.map(jnp.shape, params) == lstmn_lib.param_shapes(NX, NH, NA)
  got = module.apply(variables, xs, MASK, initial)
  want = rumjax.lstmn_scan(params, xs, mask=MASK, initial=initial, memory_span=3)
  np.testing.assert_array_equal(got[0], want[0])
  np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("skip_input", [False, True])
def test_stacked_lstmn_is_a_composition_of_layers(skip_input):
  xs = _normal(27, 3, 6, NX)
  stack = StackedLSTMN(2, NH, NA, skip_input=skip_input, dropout_rate=0.5)
  variables = stack.init(jax.random.key(1), xs)
  p = variables["params"]
  assert p["layer_1"]["attn_x"].shape == (NH + NX * skip_input, NA)
  h1, c1 = rumjax.lstmn_scan(p["layer_0"], xs, mask=MASK)
  upper_in = jnp.concatenate([h1, xs], -1) if skip_input else h1
  h2, c2 = rumjax.lstmn_scan(p["layer_1"], upper_in, mask=MASK)
  layers = stack.apply(variables, xs, MASK, return_all=True)
  for (hs, cs), (h, c) in zip(layers, ((h1, c1), (h2, c2))):
    np.testing.assert_allclose(hs, h, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(cs, c, rtol=1e-6, atol=1e-6)
  top = stack.apply(variables, xs, MASK)
  assert top[0].shape == (3, 6, NH)
  np.testing.assert_array_equal(top[0], layers[-1][0])
  dropped = stack.apply(variables, xs, MASK, return_all=True, deterministic=False,
                        rngs={"dropout": jax.random.key(2)})
  np.testing.assert_array_equal(dropped[0][0], layers[0][0])   # dropout only between layers
  assert not np.allclose(dropped[1][0], layers[1][0])


# ---------------------------------------------------------------- two sequences


SRC_MASK = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]], bool)


def _deep_params(seed, dtype):
  params = fusion.init_deep_fusion_params(jax.random.key(seed), NX, NH, NA, NB, dtype)
  params["gates_bias"] = 0.5 * _normal(seed + 1, 4 * NH, dtype=dtype)
  params["gate_r_bias"] = 0.5 * _normal(seed + 2, NH, dtype=dtype)
  return params


def test_deep_fusion_matches_reference():
  with enable_x64():
    params = _deep_params(30, jnp.float64)
    src_hs, src_cs = _normal(31, 3, 5, NH, dtype=jnp.float64), _normal(32, 3, 5, NH,
                                                                       dtype=jnp.float64)
    xs = _normal(33, 3, 6, NX, dtype=jnp.float64)
    initial = (_normal(34, 3, NH, dtype=jnp.float64), _normal(35, 3, NH, dtype=jnp.float64))
    args = (params, src_hs, src_cs, SRC_MASK, xs)
    hs, cs = fusion.deep_fusion_scan(*args, mask=MASK, initial=initial)
    ref = lstmn_reference(_np(params), np.asarray(xs), MASK, None, _np(initial),
                          source=(np.asarray(src_hs), np.asarray(src_cs), SRC_MASK))
    _assert_real_close((np.asarray(hs), np.asarray(cs)), ref, MASK)

    def loss(params, src_hs, src_cs, xs, impl):
      hs, cs = fusion.deep_fusion_scan(params, src_hs, src_cs, SRC_MASK, xs, mask=MASK,
                                       memory_span=2, impl=impl)
      return jnp.sum(jnp.where(MASK[..., None], hs * cs, 0.0))

    grads = [jax.grad(loss, argnums=(0, 1, 2, 3))(params, src_hs, src_cs, xs, impl)
             for impl in ("fast", "reference")]
    for g, e in zip(*map(jax.tree.leaves, grads)):
      np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12)
    assert np.all(np.asarray(grads[0][1])[~SRC_MASK] == 0)   # padded source: no gradient


def test_empty_sequences_and_sources():
  """T = 0 gives [B, 0, NH] (both implementations); a source of width 0 reads as one with
  every position padded (inter-attention's weights all zero). ``jnp.max`` over an empty
  axis used to raise."""
  params = _params(40)
  for impl in ("fast", "reference"):
    hs, cs = rumjax.lstmn_scan(params, jnp.zeros((3, 0, NX)), impl=impl)
    assert hs.shape == cs.shape == (3, 0, NH)
  deep = _deep_params(41, jnp.float32)
  xs = _normal(42, 3, 6, NX)
  src = _normal(43, 3, 5, NH)
  empty = fusion.deep_fusion_scan(deep, src[:, :0], src[:, :0], SRC_MASK[:, :0], xs,
                                  mask=MASK)
  masked = fusion.deep_fusion_scan(deep, src, src, np.zeros_like(SRC_MASK), xs, mask=MASK)
  for a, b in zip(empty, masked):   # float32, summed in another order: a few roundings
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
  weights = attention.masked_softmax(jnp.zeros((2, 0)), jnp.zeros((2, 0), bool))
  np.testing.assert_array_equal(weights, np.zeros((2, 0)))


def test_shallow_fusion_matches_reference():
  with enable_x64():
    params = fusion.init_shallow_fusion_params(jax.random.key(40), NH, NB, jnp.float64)
    params["out_bias"] = _normal(41, NH, dtype=jnp.float64)
    src_hs = _normal(42, 3, 5, NH, dtype=jnp.float64)
    tgt_hs = _normal(43, 3, 6, NH, dtype=jnp.float64)
    out, alpha = fusion.shallow_fusion_outputs(params, src_hs, SRC_MASK, tgt_hs)
    ref = shallow_reference(_np(params), np.asarray(src_hs), SRC_MASK, np.asarray(tgt_hs))
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-12)
    assert np.all(np.asarray(alpha)[~np.broadcast_to(SRC_MASK[:, None], alpha.shape)] == 0)


@pytest.mark.parametrize("model", [ShallowFusion, DeepFusion])
def test_fusion_modules(model):
  src_x, tgt_x = _normal(50, 3, 5, NX), _normal(51, 3, 6, NX)
  module = model(NH, NA, inter_size=NB, condition_on_source=True)
  variables = module.init(jax.random.key(3), src_x, SRC_MASK, tgt_x, MASK)
  p = variables["params"]
  apply = module.apply   # eager: reuses the compiled lstmn_scan / deep_fusion_scan
  out = apply(variables, src_x, SRC_MASK, tgt_x, MASK)
  assert [a.shape for a in out] == [(3, 6, NH), (3, 6, NH), (3, 5, NH), (3, 5, NH),
                                    (3, 6, NH)]
  # The wiring: encoder, its last real state at the decoder's position 0, the decoder.
  src_hs, src_cs = rumjax.lstmn_scan(p["encoder"], src_x, mask=SRC_MASK)
  last = np.array([[1], [1], [0]])       # the last source row has no real token
  initial = (src_hs[[0, 1, 2], [4, 1, 0]] * last, src_cs[[0, 1, 2], [4, 1, 0]] * last)
  if model is DeepFusion:
    tgt_hs, _ = fusion.deep_fusion_scan(p["decoder"], src_hs, src_cs, SRC_MASK, tgt_x,
                                        mask=MASK, initial=initial)
    outputs = tgt_hs
  else:
    tgt_hs, _ = rumjax.lstmn_scan(p["decoder"], tgt_x, mask=MASK, initial=initial)
    outputs, _ = fusion.shallow_fusion_outputs(p, src_hs, SRC_MASK, tgt_hs)
  np.testing.assert_allclose(out.tgt_hs, tgt_hs, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(out.outputs, outputs, rtol=1e-5, atol=1e-6)
  # Padded source tokens change nothing; the empty source row stays finite.
  noisy = jnp.where(SRC_MASK[..., None], src_x, 50.0 * _normal(52, 3, 5, NX))
  out2 = apply(variables, noisy, SRC_MASK, tgt_x, MASK)
  real = MASK[..., None]
  np.testing.assert_array_equal(np.where(real, out2.outputs, 0), np.where(real, out.outputs, 0))
  np.testing.assert_array_equal(np.where(SRC_MASK[..., None], out2.src_hs, 0),
                                np.where(SRC_MASK[..., None], out.src_hs, 0))
  assert all(np.all(np.isfinite(a)) for a in out)


def test_deep_fusion_any_mask_equals_the_sequence_without_padding():
  """Left padding and holes in the target: g~ (like h~) is kept over padded steps."""
  params = _deep_params(40, jnp.float32)
  src_hs, src_cs = _normal(41, 2, 5, NH), _normal(42, 2, 5, NH)
  xs = _normal(43, 2, 6, NX)
  mask = np.array([[0, 0, 1, 1, 1, 1], [1, 0, 1, 1, 0, 1]], bool)
  src_mask = np.ones((2, 5), bool)
  hs, _ = fusion.deep_fusion_scan(params, src_hs, src_cs, src_mask, xs, mask=mask)
  for b in range(2):
    alone, _ = fusion.deep_fusion_scan(params, src_hs[b:b + 1], src_cs[b:b + 1],
                                       src_mask[b:b + 1], xs[b:b + 1, mask[b]])
    np.testing.assert_allclose(hs[b, mask[b]], alone[0], rtol=1e-5, atol=1e-6)


def test_shallow_fusion_condition_on_source_reaches_the_decoder():
  src_x, tgt_x = _normal(50, 3, 5, NX), _normal(51, 3, 6, NX)
  on = ShallowFusion(NH, NA, inter_size=NB, condition_on_source=True)
  variables = on.init(jax.random.key(3), src_x, SRC_MASK, tgt_x, MASK)
  off = ShallowFusion(NH, NA, inter_size=NB, condition_on_source=False)
  a = on.apply(variables, src_x, SRC_MASK, tgt_x, MASK).tgt_hs
  b = off.apply(variables, src_x, SRC_MASK, tgt_x, MASK).tgt_hs
  assert not np.allclose(a[0], b[0], atol=1e-6)        # source row 0 has real tokens
  np.testing.assert_allclose(a[2], b[2], atol=1e-6)    # the empty source: initial = 0


def test_gradient_in_the_initial_state_matches_autodiff():
  """The hand-written backward's gradient w.r.t. the initial tape (h_0, c_0; e.g. a shallow
  fusion decoder started from its encoder) equals autodiff of the scan's own steps (float64;
  the full comparison with the reference is in -m slow)."""
  with enable_x64():
    params = _params(8, dtype=jnp.float64)
    xs = _normal(9, 3, 4, NX, dtype=jnp.float64)
    initial = (_normal(10, 3, NH, dtype=jnp.float64), _normal(11, 3, NH, dtype=jnp.float64))
    wh, wc = _loss_weights(12, (3, 4, NH))

    def loss(initial, impl):
      hs, cs = rumjax.lstmn_scan(params, xs, mask=MASK[:, :4], initial=initial,
                                 memory_span=2, impl=impl)
      return jnp.sum(wh * hs + wc * cs ** 2)

    got = jax.grad(loss)(initial, "fast")
    want = jax.grad(loss)(initial, "reference")
    assert all(np.any(np.asarray(g) != 0) for g in got)
    for g, w in zip(got, want):
      np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)

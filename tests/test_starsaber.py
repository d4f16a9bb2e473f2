"""The StarSaber layer (eqs. (4)-(6)) against a slow per-position reference.

The reference loops in Python over the batch, the queries n and the keys i, drops padded
keys before the softmax and writes the two sums of eq. (4) as they stand, so it is the
equations and nothing else. It runs on NumPy in float64; gradients are compared with its
central differences.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rumjax
from rumjax.core import starsaber as starsaber_lib
from rumjax.layers.starsaber import VARIANTS, StarSaberLayer, variant_flags

# These tests compare implementations or check against float64: true float32 matmuls.
pytestmark = pytest.mark.usefixtures("float32_matmuls")

enable_x64 = lambda: jax.enable_x64(True)
B, T, D = 2, 5, 4
MASK = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)


# ------------------------------------------------------------------ reference


def _sigmoid(z):
  return 1.0 / (1.0 + np.exp(-z))


def starsaber_reference(p, h, x, mask=None, variant="plain", all_queries=False):
  """Eqs. (4)-(6) position by position; returns ``{(b, n): h_next_n}`` at the real n.

  Only the real keys i are attended to; ``all_queries`` computes padded queries n too.
  """
  flags = variant_flags(variant)
  d = h.shape[-1]
  out = {}
  for b in range(h.shape[0]):
    real = [t for t in range(h.shape[1]) if mask is None or mask[b][t]]
    for n in (range(h.shape[1]) if all_queries else real):
      scores = [h[b, n] @ p["W"] @ h[b, i] / np.sqrt(d) for i in real]
      e = [np.exp(s - max(scores)) for s in scores]
      g = [w / sum(e) for w in e]
      a = 0.0
      for g_ni, i in zip(g, real):
        if i < n or not flags["directional"]:
          a = a + g_ni * (h[b, i] @ p["U"])
        else:
          a = a + g_ni * (h[b, i] @ p["Q"])
      if flags["gate"]:
        r = _sigmoid(a @ p["W_r"] + x[b, n] @ p["V_r"])
        i_gate = _sigmoid(a @ p["W_i"] + x[b, n] @ p["V_i"])
        pre = r * a + i_gate * (x[b, n] @ p["V"])
      elif flags["direct_path"]:
        pre = a + x[b, n] @ p["V"]
      else:
        pre = a
      out[b, n] = h[b, n] + p["alpha"] * np.tanh(pre)
  return out


# --------------------------------------------------------------------- helpers


def _normal(seed, *shape, dtype=jnp.float32):
  return jnp.asarray(np.random.default_rng(seed).normal(size=shape), dtype)


def _params(seed, variant, dtype=jnp.float32):
  """Random params of a variant: kernels N(0, 1/d) (W: N(0, 9/d), sharper attention)."""
  shapes = starsaber_lib.param_shapes(D, **variant_flags(variant))
  rng = np.random.default_rng(seed)
  params = {name: jnp.asarray(rng.normal(size=shape) / np.sqrt(D), dtype)
            for name, shape in shapes.items()}
  params["alpha"] = jnp.asarray(0.7, dtype)
  params["W"] = params["W"] * 3.0
  return params


def _layer(variant):
  """The functional layer of a variant, called as ``f(params, h, x, mask=...)``."""
  flags = variant_flags(variant)
  if flags.pop("gate"):
    return lambda p, h, x, mask=None: rumjax.starsaber_gate_layer(
        p, h, x, mask=mask, directional=flags["directional"])
  return lambda p, h, x, mask=None: rumjax.starsaber_layer(p, h, x, mask=mask, **flags)


def _np(tree):
  return jax.tree.map(np.asarray, tree)


# ------------------------------------------------------------------- functional


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("masked", [False, True])
def test_values_match_reference(variant, masked):
  with enable_x64():
    params = _params(0, variant, jnp.float64)
    h, x = _normal(1, B, T, D, dtype=jnp.float64), _normal(2, B, T, D, dtype=jnp.float64)
    mask = MASK if masked else None
    got = np.asarray(_layer(variant)(params, h, x, mask=mask))
    assert got.shape == (B, T, D) and got.dtype == np.float64
    ref = starsaber_reference(_np(params), np.asarray(h), np.asarray(x), mask, variant)
    keys = sorted(ref)
    assert len(keys) == (MASK.sum() if masked else B * T)
    np.testing.assert_allclose(np.stack([got[k] for k in keys]),
                               np.stack([ref[k] for k in keys]), rtol=1e-12, atol=1e-12)
    if masked:
      # Padded rows are computed from their own h_n, x_n over the real keys (docstring).
      ref = starsaber_reference(_np(params), np.asarray(h), np.asarray(x), MASK, variant,
                                all_queries=True)
      np.testing.assert_allclose(np.stack([ref[1, n] for n in range(T)]), got[1],
                                 rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("variant", VARIANTS)
def test_padding_is_inert(variant):
  """Garbage in padded h / x changes no real output; real outputs give padding no gradient.

  Huge finite garbage: values and gradients. NaN garbage: real values only (a padded
  query row computes with its own NaN h_n, and 0 * NaN cotangents are NaN).
  """
  params = _params(3, variant)
  h, x = _normal(4, B, T, D), _normal(5, B, T, D)
  layer = _layer(variant)
  real = MASK[..., None]

  @jax.jit
  def run(h, x):
    loss = lambda h, x: jnp.sum(jnp.where(real, layer(params, h, x, mask=MASK), 0.0))
    return layer(params, h, x, mask=MASK), jax.grad(loss, argnums=(0, 1))(h, x)

  out, (gh0, gx0) = run(h, x)
  out = np.asarray(out)
  for garbage in (jnp.full((B, T, D), jnp.nan), 1e4 * _normal(6, B, T, D)):
    out2, (gh, gx) = run(jnp.where(real, h, garbage), jnp.where(real, x, garbage))
    np.testing.assert_array_equal(np.where(real, out2, 0), np.where(real, out, 0))
  gh, gx = np.asarray(gh), np.asarray(gx)     # finite garbage
  np.testing.assert_array_equal(gh[~MASK], 0.0)
  np.testing.assert_array_equal(gx[~MASK], 0.0)
  np.testing.assert_allclose(gh[MASK], np.asarray(gh0)[MASK], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(gx[MASK], np.asarray(gx0)[MASK], rtol=1e-5, atol=1e-6)
  # A shorter sequence padded on the right equals the sequence alone.
  alone = np.asarray(layer(params, h[1:, :3], x[1:, :3]))
  np.testing.assert_allclose(out[1, :3], alone[0], rtol=1e-6, atol=1e-6)


def test_attention_weights():
  params = _params(7, "plain")
  h = _normal(8, B, T, D)
  g = np.asarray(starsaber_lib.attention_weights(params, h, mask=MASK))
  assert g.shape == (B, T, T)
  np.testing.assert_array_equal(g[1, :, 3:], 0.0)             # padded keys
  np.testing.assert_allclose(g.sum(-1), 1.0, rtol=1e-6)       # padded queries too
  hd = np.asarray(h, np.float64)
  scores = np.einsum("nd,de,ie->ni", hd[0], np.asarray(params["W"], np.float64), hd[0]) / 2
  want = np.exp(scores - scores.max(-1, keepdims=True))
  np.testing.assert_allclose(g[0], want / want.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


def _numerical_grad(f, args, eps=1e-6):
  """Central differences of the scalar ``f(*args)`` w.r.t. every entry of every leaf."""
  leaves, treedef = jax.tree.flatten(args)
  grads = []
  for k, leaf in enumerate(leaves):
    g = np.zeros(np.shape(leaf))
    for idx in np.ndindex(*np.shape(leaf)):
      values = []
      for step in (eps, -eps):
        moved = [np.array(a, np.float64, copy=True) for a in leaves]
        moved[k][idx] += step
        values.append(f(*jax.tree.unflatten(treedef, moved)))
      g[idx] = (values[0] - values[1]) / (2 * eps)
    grads.append(g)
  return jax.tree.unflatten(treedef, grads)


@pytest.mark.parametrize("variant", VARIANTS)
def test_gradients_match_reference(variant):
  """jax.grad of the layer (params, h, x) == central differences of the NumPy reference."""
  with enable_x64():
    params = _params(9, variant, jnp.float64)
    h, x = _normal(10, B, T, D, dtype=jnp.float64), _normal(11, B, T, D, dtype=jnp.float64)
    w = np.asarray(_normal(12, B, T, D, dtype=jnp.float64))
    f = _layer(variant)

    def loss(params, h, x):
      return jnp.sum(jnp.where(MASK[..., None], w * f(params, h, x, mask=MASK) ** 2, 0.0))

    def loss_ref(params, h, x):
      out = starsaber_reference(params, h, x, MASK, variant)
      return sum(float(np.sum(w[k] * v ** 2)) for k, v in out.items())

    args = _np((params, h, x))
    np.testing.assert_allclose(loss(params, h, x), loss_ref(*args), rtol=1e-12)
    got = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(params, h, x)
    expected = _numerical_grad(loss_ref, args)
    assert jax.tree.structure(got) == jax.tree.structure(expected)
    for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
      np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-8)
    assert np.all(np.asarray(got[1])[~MASK] == 0) and np.all(np.asarray(got[2])[~MASK] == 0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_fully_padded_row_is_finite(variant):
  """A sequence without real tokens: G = 0, A = 0, finite values and gradients."""
  params = _params(16, variant)
  h, x = _normal(17, B, T, D), _normal(18, B, T, D)
  mask = MASK.copy()
  mask[1] = False
  layer = _layer(variant)

  @jax.jit
  def run(params, h, x, mask):
    loss = lambda p, h, x: jnp.sum(layer(p, h, x, mask=mask) ** 2)
    return (layer(params, h, x, mask=mask),
            starsaber_lib.attention_weights(params, h, mask=mask),
            jax.grad(loss, argnums=(0, 1, 2))(params, h, x))

  out, g, grads = run(params, h, x, mask)
  out = np.asarray(out)
  assert np.all(np.isfinite(out))
  np.testing.assert_array_equal(np.asarray(g)[1], 0.0)
  assert all(np.all(np.isfinite(a)) for a in jax.tree.leaves(grads))
  flags = variant_flags(variant)
  if flags["gate"]:
    xv = x[1] @ params["V"]
    want = h[1] + params["alpha"] * jnp.tanh(jax.nn.sigmoid(x[1] @ params["V_i"]) * xv)
  elif flags["direct_path"]:
    want = h[1] + params["alpha"] * jnp.tanh(x[1] @ params["V"])
  else:
    want = h[1]
  np.testing.assert_allclose(out[1], want, rtol=1e-6, atol=1e-6)
  # All-zero h (equal scores everywhere).
  assert all(np.all(np.isfinite(a))
             for a in jax.tree.leaves(run(params, jnp.zeros_like(h), x, mask)))


@pytest.mark.parametrize("variant", VARIANTS)
def test_alpha_zero_is_identity(variant):
  params = dict(_params(19, variant), alpha=jnp.zeros(()))
  h, x = _normal(20, B, T, D), _normal(21, B, T, D)
  np.testing.assert_array_equal(_layer(variant)(params, h, x, mask=MASK), h)


def test_init_params():
  init = jax.jit(rumjax.init_starsaber_params, static_argnums=1)
  p = init(jax.random.key(0), 64)
  assert {k: v.shape for k, v in p.items()} == {
      "U": (64, 64), "Q": (64, 64), "V": (64, 64), "W": (64, 64), "alpha": ()}
  assert all(v.dtype == jnp.float32 for v in p.values()) and float(p["alpha"]) == 1.0
  assert 0.8 < float(jnp.std(p["U"])) * 8 < 1.2              # lecun: std 1/sqrt(d)
  assert not np.allclose(p["U"], p["Q"])
  shapes = lambda **kw: jax.tree.map(
      jnp.shape, jax.eval_shape(lambda k: rumjax.init_starsaber_params(k, 3, **kw),
                                jax.random.key(0)))
  assert sorted(shapes(gate=True)) == sorted(
      ["U", "Q", "V", "W", "alpha", "W_r", "V_r", "W_i", "V_i"])
  assert shapes(gate=True)["W_r"] == (3, 3)
  assert sorted(shapes(directional=False)) == ["U", "V", "W", "alpha"]
  assert sorted(shapes(direct_path=False)) == ["Q", "U", "W", "alpha"]
  with pytest.raises(ValueError, match="gate=True needs the direct path"):
    rumjax.init_starsaber_params(jax.random.key(0), 3, gate=True, direct_path=False)


def test_errors():
  params = _params(0, "plain")
  h = jnp.zeros((B, T, D))
  with pytest.raises(ValueError, match=r"lacks key 'Q'"):
    rumjax.starsaber_layer({k: v for k, v in params.items() if k != "Q"}, h, h)
  with pytest.raises(ValueError, match=r"lacks key 'W_r'"):
    rumjax.starsaber_gate_layer(params, h, h)
  with pytest.raises(ValueError, match=r"lacks key 'V'"):
    rumjax.starsaber_layer(_params(0, "nodirect"), h, h)
  with pytest.raises(ValueError, match=r"params\['W'\] has shape \(4, 3\); expected \(4, 4\)"):
    rumjax.starsaber_layer(dict(params, W=jnp.zeros((4, 3))), h, h)
  with pytest.raises(ValueError, match=r"params\['alpha'\] has shape \(1,\); expected \(\)"):
    rumjax.starsaber_layer(dict(params, alpha=jnp.ones(1)), h, h)
  with pytest.raises(ValueError, match=r"params\['U'\] has shape \(4, 4\); expected \(3, 3\)"):
    rumjax.starsaber_layer(params, h[..., :3], h[..., :3])
  with pytest.raises(ValueError, match="x has shape"):
    rumjax.starsaber_layer(params, h, h[:, :3])
  with pytest.raises(ValueError, match="mask has shape"):
    rumjax.starsaber_layer(params, h, h, mask=MASK[:, :3])
  # Keys the flags do not use are ignored: plain params run the PE variant.
  out = rumjax.starsaber_layer(params, h, h, directional=False)
  assert out.shape == (B, T, D)


# ------------------------------------------------------------------ Flax module


@pytest.mark.parametrize("variant", VARIANTS)
def test_flax_module_equals_functional(variant):
  h, x = _normal(22, B, T, D), _normal(23, B, T, D)
  module = StarSaberLayer(D, variant=variant)
  variables = module.init(jax.random.key(0), h, x, MASK)
  params = variables["params"]
  flags = variant_flags(variant)
  assert jax.tree.map(jnp.shape, dict(params)) == starsaber_lib.param_shapes(D, **flags)
  names = {"plain": ["Q", "U", "V", "W", "alpha"], "pe": ["U", "V", "W", "alpha"],
           "nodirect": ["Q", "U", "W", "alpha"],
           "gate": ["Q", "U", "V", "V_i", "V_r", "W", "W_i", "W_r", "alpha"]}[variant]
  assert sorted(params) == names
  assert float(params["alpha"]) == 1.0 and params["U"].dtype == jnp.float32
  params = dict(params, alpha=jnp.asarray(0.5, jnp.float32))
  got = module.apply({"params": params}, h, x, MASK)
  want = _layer(variant)(params, h, x, mask=MASK)
  np.testing.assert_array_equal(got, want)


def test_flax_module_errors():
  h = jnp.zeros((B, T, D))
  with pytest.raises(ValueError, match="known variants: plain, gate, pe, nodirect"):
    StarSaberLayer(D, variant="rezero").init(jax.random.key(0), h, h)
  with pytest.raises(ValueError, match="features=3"):
    StarSaberLayer(3).init(jax.random.key(0), h, h)


def test_flax_module_initialisers():
  """``alpha_init`` and ``kernel_init`` give the initial ``alpha`` and every kernel."""
  h = _normal(24, B, T, D)
  module = StarSaberLayer(D, variant="gate", alpha_init=0.25,
                          kernel_init=jax.nn.initializers.constant(0.5))
  params = jax.jit(module.init)(jax.random.key(0), h, h)["params"]
  assert float(params.pop("alpha")) == 0.25
  assert all(np.all(np.asarray(k) == 0.5) for k in params.values())


def test_flax_module_in_bfloat16_keeps_alpha_float32():
  """``dtype=bfloat16``: a bfloat16 output from float32 ``h``, ``x``; ``alpha`` stays
  float32 (``cast_weights``' ``wide``, ``scale``), so its gradient is the float32 sum of
  ``tanh(...) * cotangent`` over every row, not rounded to bfloat16. With ``h = 0``,
  ``V = 20 I`` and ``x = +-1`` the output is ``tanh(+-20) = +-1`` exactly, so that sum is
  ``sum(out * cotangent)``."""
  module = StarSaberLayer(D, dtype=jnp.bfloat16)
  params = dict(_params(25, "plain"), V=20 * jnp.eye(D), alpha=jnp.ones((), jnp.float32))
  h, x = jnp.zeros((B, T, D)), jnp.sign(_normal(26, B, T, D))
  ct = _normal(27, B, T, D, dtype=jnp.bfloat16)

  @jax.jit
  def run(params):
    out, vjp = jax.vjp(lambda p: module.apply({"params": p}, h, x, MASK), params)
    return out, vjp(ct)[0]["alpha"]

  out, grad = run(params)
  assert out.dtype == jnp.bfloat16 and grad.dtype == jnp.float32
  np.testing.assert_array_equal(np.abs(np.asarray(out, np.float32)), 1.0)
  np.testing.assert_allclose(grad, np.sum(np.asarray(ct, np.float64) * np.asarray(out, np.float64)),
                             rtol=1e-6)


def test_attention_weights_in_bfloat16():
  """bfloat16 ``h`` and ``W``: the scores ``(h_n W) . h_i`` accumulate in float32 and the
  softmax is float32 (the precision policy); ``G`` comes back in bfloat16. So ``G`` is the
  float64 softmax of the scores of the bfloat16 ``h W`` and ``h``, rounded once (relative
  error at most bfloat16's unit roundoff 2^-8; scores rounded to bfloat16 exceed it)."""
  params = _params(27, "plain", jnp.bfloat16)
  h = _normal(28, B, T, D, dtype=jnp.bfloat16)
  g = starsaber_lib.attention_weights(params, h, mask=MASK)
  assert g.dtype == jnp.bfloat16
  hw, hd = np.asarray(h @ params["W"], np.float64), np.asarray(h, np.float64)
  scores = np.where(MASK[:, None, :], np.einsum("bnd,bid->bni", hw, hd) / np.sqrt(D), -np.inf)
  want = np.exp(scores - scores.max(-1, keepdims=True))
  want /= want.sum(-1, keepdims=True)
  np.testing.assert_allclose(np.asarray(g, np.float64), want, rtol=1.01 * 2 ** -8, atol=1e-7)


@pytest.mark.parametrize("variant", VARIANTS)
def test_an_empty_sequence_gives_an_empty_output(variant):
  """T = 0: ``[B, 0, D]`` (the attention's max over an empty axis used to raise)."""
  h = jnp.zeros((2, 0, D))
  assert _layer(variant)(_params(0, variant), h, h).shape == (2, 0, D)

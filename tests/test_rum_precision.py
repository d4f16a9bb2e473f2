"""RUM's rotation path in any precision (issue 26): the memory stays orthogonal.

The policy (rumjax/core/rum.py): gates and hidden states in the computation dtype (bfloat16
here), the rotation, the memory R and its update in at least float32 at
``Precision.HIGHEST``.
"""

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rumjax
from rumjax.core import rum
from rumjax.benchmarks import orthogonality

IMPLS = ("fast", "reference")
orth_error = orthogonality.orthogonality_error


def _bf16_problem(t, nh=64, nx=64, batch=4, seed=0):
  params = rumjax.init_rum_params(jax.random.key(seed), nx, nh, jnp.bfloat16)
  xs = jax.random.normal(jax.random.key(seed + 1), (batch, t, nx), jnp.bfloat16)
  return params, xs


def _check_bf16_scan(t, impl):
  params, xs = _bf16_problem(t)
  (r, h), hs = rumjax.rum_scan(params, xs, lam=1, eta=1.0, impl=impl)
  assert hs.dtype == h.dtype == jnp.bfloat16 and r.dtype == jnp.float32
  assert orth_error(r) <= 1e-5, orth_error(r)
  np.testing.assert_allclose(jnp.linalg.norm(hs[:, -1].astype(jnp.float32), axis=-1), 1.0,
                             rtol=1e-2)


@pytest.mark.parametrize("impl", IMPLS)
def test_bfloat16_rum_scan_memory_orthogonal_t300(impl):
  _check_bf16_scan(300, impl)


@pytest.mark.parametrize("impl", IMPLS)
def test_bfloat16_rum_scan_memory_orthogonal_t4000(impl):
  _check_bf16_scan(4000, impl)


def test_naive_bfloat16_is_what_the_safe_path_prevents():
  """The comparison of the picture: the same RUM all in bfloat16 is far from orthogonal."""
  params, xs = _bf16_problem(100)
  errors = {v: orthogonality.drift(v, params, xs, [100]) for v in orthogonality.VARIANTS}
  assert errors["bfloat16_naive"][0] > 1e-3
  assert errors["float32"][0] <= 1e-5 and errors["bfloat16"][0] <= 1e-5


def _check_bf16_cell(t):
  _, xs = _bf16_problem(t)
  cell = rumjax.RUMCell(64, lam=1, eta=1.0, dtype=jnp.bfloat16)
  r0, h0 = cell.initialize_carry(jax.random.key(0), xs[:, 0].shape)
  assert r0.dtype == jnp.float32 and h0.dtype == jnp.bfloat16
  rnn = nn.RNN(cell, return_carry=True)
  variables = rnn.init(jax.random.key(1), xs[:, :2])
  assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(variables))  # param_dtype
  (r, h), hs = jax.jit(rnn.apply)(variables, xs)
  assert hs.dtype == h.dtype == jnp.bfloat16 and r.dtype == jnp.float32
  assert orth_error(r) <= 1e-5, orth_error(r)
  return variables, xs


def test_bfloat16_rum_cell_memory_orthogonal_t300():
  variables, xs = _check_bf16_cell(300)
  # The cell and rum_scan (fast) compute the same recurrence.
  params = jax.tree.map(lambda p: p.astype(jnp.bfloat16), variables["params"]["cell"])
  (_, h_scan), _ = rumjax.rum_scan(params, xs, lam=1, eta=1.0)
  (_, h_cell), _ = nn.RNN(rumjax.RUMCell(64, lam=1, eta=1.0, dtype=jnp.bfloat16),
                          return_carry=True).apply(variables, xs)
  assert h_scan.dtype == jnp.bfloat16
  # bfloat16 over 300 steps: 5e-3 apart (|h| <= 0.61; the cell adds its bias in float32,
  # rum_scan here in bfloat16). Without the memory (lam=0) h is 9e-2 away: the bound tells
  # them apart.
  difference = lambda a: float(jnp.max(jnp.abs(h_cell.astype(jnp.float32)
                                               - a.astype(jnp.float32))))
  assert difference(h_scan) <= 2e-2
  _, hs_lam0 = rumjax.rum_scan(params, xs, lam=0, eta=1.0)   # lam=0: no R in the carry
  h_lam0 = hs_lam0[:, -1]
  assert difference(h_lam0) > 4e-2


def test_bfloat16_rum_cell_memory_orthogonal_t4000():
  _check_bf16_cell(4000)


@pytest.mark.parametrize("dtype,param_dtype", [(jnp.bfloat16, jnp.float32),
                                               (None, jnp.bfloat16)])
def test_bfloat16_cell_initial_memory_is_float32(dtype, param_dtype):
  """RUMCell.initialize_carry: h_0 in the computation dtype, R_0 = 1 in float32 (the
  precision policy: R and the rotation path in at least float32)."""
  cell = rumjax.RUMCell(8, lam=1, dtype=dtype, param_dtype=param_dtype)
  r0, h0 = cell.initialize_carry(jax.random.key(0), (3, 5))
  assert r0.dtype == jnp.float32 and h0.dtype == jnp.bfloat16
  np.testing.assert_array_equal(r0, np.broadcast_to(np.eye(8), (3, 8, 8)))


def test_bfloat16_cell_sows_cos_theta_and_module_runs():
  _, xs = _bf16_problem(5, nh=8, nx=3)
  cell = rumjax.RUMCell(8, lam=1, eta=1.0, dtype=jnp.bfloat16)
  out, state = cell.init_with_output(jax.random.key(0), cell.initialize_carry(
      jax.random.key(0), xs[:, 0].shape), xs[:, 0])
  (r, h), y = out
  assert r.dtype == jnp.float32 and h.dtype == y.dtype == jnp.bfloat16
  _, inter = cell.apply(state, (r, h), xs[:, 1], mutable=["intermediates"])
  cos = inter["intermediates"]["cos_theta"][0]
  assert cos.shape == (4,) and cos.dtype == jnp.float32
  assert np.all(np.abs(np.asarray(cos)) <= 1.0)
  module = rumjax.cells.RUM(rumjax.RUMCell(8, lam=1, eta=1.0, dtype=jnp.bfloat16))
  variables = module.init(jax.random.key(1), xs)
  (r_m, _), hs = module.apply(variables, xs, return_carry=True)
  assert hs.dtype == jnp.bfloat16 and r_m.dtype == jnp.float32


@pytest.mark.parametrize("impl", IMPLS)
def test_bfloat16_gradients_finite(impl):
  params, xs = _bf16_problem(20, nh=8, nx=3)

  def loss(p, x):
    (r, h), hs = rumjax.rum_scan(p, x, lam=1, eta=1.0, impl=impl)
    return jnp.sum(hs.astype(jnp.float32) ** 2) + jnp.sum(jnp.cos(r))

  grads = jax.grad(loss, argnums=(0, 1))(params, xs)
  assert all(g.dtype == jnp.bfloat16 for g in jax.tree.leaves(grads))
  assert all(np.all(np.isfinite(np.asarray(g, np.float32))) for g in jax.tree.leaves(grads))
  assert any(np.any(np.asarray(g, np.float32) != 0) for g in jax.tree.leaves(grads))


@pytest.mark.parametrize("impl", ["fast", pytest.param("reference", marks=pytest.mark.slow)])
def test_bfloat16_gradients_finite_at_zero_norms(impl):
  """sqrt/rsqrt near 0: h' = 0 under eta, e = 0 and anti-parallel e, tau, in bfloat16."""
  nh = 4
  eye = jnp.eye(nh, dtype=jnp.bfloat16)
  params = {"kernel_x": jnp.concatenate([-eye, 0 * eye, eye], 1),
            "kernel_h": jnp.zeros((nh, 2 * nh), jnp.bfloat16),
            "bias": jnp.zeros(3 * nh, jnp.bfloat16).at[2 * nh:].set(-1e-30)}
  xs = jnp.asarray([[[1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1e-20, 0.0, 0.0, 0.0],
                     [0.0, 0.0, 0.0, 3.0]]], jnp.bfloat16)
  for lam in (0, 1):
    loss = lambda p, x: jnp.sum(rumjax.rum_scan(p, x, lam=lam, eta=1.0, impl=impl,
                                                update_gate=False)[1].astype(jnp.float32))
    value, grads = jax.value_and_grad(loss, argnums=(0, 1))(params, xs)
    assert np.isfinite(value)
    assert all(np.all(np.isfinite(np.asarray(g, np.float32))) for g in jax.tree.leaves(grads))


# ----------------------------------------------------------------- precision in the HLO


def _dot_generals(fn, *args):
  """``(precision, lhs element type, rhs element type)`` of every dot_general of ``fn``."""
  text = jax.jit(fn).lower(*args).as_text()
  dots = []
  for line in text.splitlines():
    if "dot_general" not in line:
      continue
    prec = re.search(r"precision = \[([A-Z]+), ([A-Z]+)\]", line)
    types = re.search(r":\s*\(tensor<[^>]*?x?([a-z]+[0-9]+)>,\s*tensor<[^>]*?x?([a-z]+[0-9]+)>\)",
                      line)
    assert types, line
    dots.append(((prec.groups() if prec else ("DEFAULT", "DEFAULT")),) + types.groups())
  return dots


@pytest.mark.parametrize("impl", IMPLS)
def test_rotation_path_dots_are_highest_precision(impl):
  """In a bfloat16 run, the float32 dot_generals are the rotation path (R, its cotangent,
  the plane): every one carries HIGHEST; the gate matmuls are bfloat16, default precision.
  Forward and backward (the gradient is lowered)."""
  params, xs = _bf16_problem(4, nh=8, nx=5, batch=2)

  def loss(p, x):
    (r, _), hs = rumjax.rum_scan(p, x, lam=1, eta=1.0, impl=impl)
    return jnp.sum(hs.astype(jnp.float32)) + jnp.sum(r)

  dots = _dot_generals(jax.grad(loss, argnums=(0, 1)), params, xs)
  f32 = [d for d in dots if "f32" in d[1:]]
  assert len(f32) >= 3 and all(d[0] == ("HIGHEST", "HIGHEST") for d in f32), dots
  bf16 = [d for d in dots if d[1:] == ("bf16", "bf16")]
  assert len(bf16) >= 3 and len(bf16) + len(f32) == len(dots), dots


def test_memory_update_and_cell_step_dots_are_highest_precision():
  """Functions made of the rotation path only (every dot is on it), forward and
  backward, and one RUMCell step in bfloat16."""
  r = jnp.broadcast_to(jnp.eye(6), (3, 6, 6))
  e, tau, h = (jnp.asarray(np.random.default_rng(s).normal(size=(3, 6)), jnp.float32)
               for s in range(3))
  memory = lambda r, e, tau, h: rum.update_memory(r, rumjax.rotation_plane(e, tau), h)
  memory_grad = jax.grad(lambda *a: jnp.sum(memory(*a)[0] ** 2), argnums=(0, 1, 2, 3))
  for fn, args in ((memory, (r, e, tau, h)), (memory_grad, (r, e, tau, h)),
                   (rumjax.rotation_matrix, (e, tau))):
    dots = _dot_generals(fn, *args)
    assert dots and all(d[0] == ("HIGHEST", "HIGHEST") for d in dots), dots
  cell = rumjax.RUMCell(8, lam=1, eta=1.0, dtype=jnp.bfloat16)
  x = jnp.ones((2, 5), jnp.bfloat16)
  carry = cell.initialize_carry(jax.random.key(0), x.shape)
  variables = cell.init(jax.random.key(0), carry, x)
  dots = _dot_generals(lambda v, c, x: cell.apply(v, c, x), variables, carry, x)
  f32 = [d for d in dots if "f32" in d[1:]]
  assert f32 and all(d[0] == ("HIGHEST", "HIGHEST") for d in f32), dots


def test_time_normalization_of_bfloat16_is_correctly_rounded():
  """eta h / |h| with the norm taken in float32 (``rum._normalize``): every bfloat16 entry is
  the float64 value rounded (relative error <= 2^-8, half a bfloat16 ulp); a norm summed in
  bfloat16 puts a fifth of the entries further off."""
  rng = np.random.default_rng(0)
  h = jnp.asarray(rng.normal(size=(64, 256)) * 3.0, jnp.bfloat16)
  out = jax.jit(lambda h: rum._normalize(h, 0.7))(h)
  assert out.dtype == jnp.bfloat16
  h64 = np.asarray(h, np.float64)
  exact = 0.7 * h64 / np.linalg.norm(h64, axis=-1, keepdims=True)
  rel = np.abs(np.asarray(out, np.float64) - exact) / np.abs(exact)
  assert rel.max() <= 2.0**-8 * (1 + 1e-5), rel.max()


def test_real_lam_is_not_rounded_to_bfloat16():
  """A real lam is a float32 value under the bfloat16 policy (the rotation path runs in at
  least float32): with one-hot inputs (bfloat16 matmuls exact) and h0 = 0, step 1's
  R_1 = R_0^lam Rotation(e, tau) of a bfloat16 run equals the float32 run's to float32
  rounding (lam = 0.3 rounded to bfloat16 is 0.30078125, which moves R_0^lam by ~1e-3)."""
  nh, nx = 6, 4
  params = rumjax.init_rum_params(jax.random.key(0), nx, nh)
  params = {k: v.astype(jnp.bfloat16).astype(jnp.float32) for k, v in params.items()}
  params["bias"] = jnp.zeros_like(params["bias"])
  xs = jax.nn.one_hot(jnp.array([[1]]), nx)                 # (B=1, T=1, Nx)
  skew = jax.random.normal(jax.random.key(1), (nh, nh))
  r0 = jax.scipy.linalg.expm(skew - skew.T)[None]           # a rotation, large angles
  h0 = jnp.zeros((1, nh))
  run = lambda dtype: rumjax.rum_scan(
      jax.tree.map(lambda p: p.astype(dtype), params), xs.astype(dtype), lam=0.3,
      h0=(r0, h0.astype(dtype)))[0][0]
  r32, r16 = run(jnp.float32), run(jnp.bfloat16)
  assert r16.dtype == jnp.float32
  np.testing.assert_allclose(r16, r32, atol=2e-5)


def test_rotation_dtypes():
  """The rotation path is at least float32; float64 stays float64."""
  a, b, h = (jnp.asarray(np.random.default_rng(s).normal(size=(2, 5)), jnp.bfloat16)
             for s in range(3))
  plane = rumjax.rotation_plane(a, b)
  assert all(x.dtype == jnp.float32 for x in plane)
  assert rumjax.rotation_matrix(a, b).dtype == jnp.float32
  assert rumjax.rotate(a, b, h).dtype == jnp.bfloat16
  with jax.enable_x64(True):
    params = rumjax.init_rum_params(jax.random.key(0), 3, 4, jnp.float64)
    (r, h), hs = rumjax.rum_scan(params, jnp.ones((2, 5, 3), jnp.float64), lam=1)
    assert r.dtype == h.dtype == hs.dtype == jnp.float64


# ------------------------------------------------------- orthogonality, many small cases


def _cases(rng, nh, nx, n_cases, anti):
  """``n_cases`` parameter sets (stacked) of one shape; ``anti``: the tau block of
  ``kernel_x``/``bias`` is minus the e block plus ``anti * noise`` and ``W^tau_hh`` is
  ``anti * noise`` (0: e, tau exactly anti-parallel at every step; small: nearly);
  ``anti < 0``: the parameters as drawn."""
  def one(i):
    p = rumjax.init_rum_params(jax.random.key(int(rng.integers(2**31))), nx, nh)
    p = {k: np.asarray(v, np.float64) for k, v in p.items()}
    p["bias"] = p["bias"] + 0.5 * rng.normal(size=p["bias"].shape)
    if anti[i] >= 0:
      kx, b = p["kernel_x"], p["bias"]
      kx[:, :nh] = -kx[:, 2 * nh:] + anti[i] * rng.normal(size=(nx, nh))
      b[:nh] = -b[2 * nh:] + anti[i] * rng.normal(size=nh)
      p["kernel_h"][:, :nh] = anti[i] * rng.normal(size=(nh, nh))
    return {k: np.asarray(v, np.float32) for k, v in p.items()}
  cases = [one(i) for i in range(n_cases)]
  return {k: jnp.asarray(np.stack([c[k] for c in cases])) for k in cases[0]}


def _worst_over_small_cases(nhs, seed):
  rng = np.random.default_rng(seed)
  options = [(eta, act) for eta in (None, 0.5, 1.0) for act in ("relu", "tanh")]
  worst = {impl: 0.0 for impl in IMPLS}
  for i, nh in enumerate(nhs):
    nx = int(rng.integers(1, 7))
    t = int(rng.choice([1, 3, int(rng.integers(1, 31)), 30]))
    eta, act = options[i % len(options)]
    n_cases = 24
    anti = np.where(np.arange(n_cases) % 3 == 0,
                    rng.choice([0.0, 1e-7, 1e-6, 1e-5, 1e-3], size=n_cases), -1.0)
    params = _cases(rng, nh, nx, n_cases, anti)
    xs = jnp.asarray(rng.normal(size=(n_cases, 2, t, nx)) * rng.choice([0.1, 1, 10]),
                     jnp.float32)
    for impl in IMPLS:
      run = jax.jit(jax.vmap(lambda p, x: rumjax.rum_scan(
          p, x, lam=1, eta=eta, activation=act, impl=impl)[0][0]))
      worst[impl] = max(worst[impl], orth_error(run(params, xs)))
  return worst


def test_property_memory_orthogonal_small_cases_both_impls():
  """Worst max|R^T R - I| over 3 x 24 seeded random cases (Nh 2, 5, 12, T 1..30,
  three etas, relu and tanh), a third of them with e, tau exactly or nearly anti-parallel (the
  case where the closed form of the old fast path lost orthogonality, issue 26)."""
  worst = _worst_over_small_cases([2, 5, 12], seed=26)
  assert worst["fast"] <= 1e-5 and worst["reference"] <= 1e-5, worst


@pytest.mark.slow
def test_property_memory_orthogonal_many_small_cases_both_impls():
  """As above over 3 x 11 x 24 cases: every Nh from 2 to 12, three seeds."""
  for seed in (1, 2, 3):
    worst = _worst_over_small_cases(list(range(2, 13)), seed=seed)
    assert worst["fast"] <= 1e-5 and worst["reference"] <= 1e-5, (seed, worst)


def test_drift_picture_and_table(tmp_path):
  """The numbers behind docs/figures/orthogonality_drift.png, tiny, and the PNG."""
  from rumjax import plotting
  result = orthogonality.run_drift(ts=(3, 7), nh=4, nx=3, batch=2)
  assert result["ts"] == [3, 7] and set(result["errors"]) == set(orthogonality.VARIANTS)
  assert all(len(e) == 2 and np.all(np.isfinite(e)) for e in result["errors"].values())
  assert max(result["errors"]["float32"] + result["errors"]["bfloat16"]) <= 1e-5
  table = orthogonality.format_table(result)
  assert table.splitlines()[0] == "| T | float32 | bfloat16 | bfloat16_naive |"
  assert len(table.splitlines()) == 4
  path = plotting.save_orthogonality_drift(result, str(tmp_path / "drift.png"))
  assert (tmp_path / "drift.png").stat().st_size > 1000 and path.endswith("drift.png")
  with pytest.raises(ValueError, match="variant='f16'.*float32"):
    orthogonality.drift("f16", None, np.zeros((1, 3, 3)), [3])


def test_naive_scan_keeps_a_zero_hidden_state_zero():
  """The naive bfloat16 variant normalises ``h'`` as ``rum_scan`` does: a ReLU that zeroes
  every unit gives ``h = 0``, not ``0/0`` (``launch.orthogonality --nh=8`` printed nan)."""
  nh = 4
  params = rumjax.core.init_rum_params(jax.random.key(0), nh, nh)
  params = {**params, "bias": params["bias"].at[2 * nh:].set(-100.0)}  # e < 0: h' = 0
  xs = jax.random.normal(jax.random.key(1), (2, 3, nh))
  r, h = orthogonality.naive_bfloat16_scan(params, xs, (jnp.eye(nh)[None].repeat(2, 0),
                                                        jnp.zeros((2, nh))))
  assert np.all(np.asarray(h, np.float32) == 0) and np.all(np.isfinite(np.asarray(r, np.float32)))


def test_a_memory_that_is_not_finite_is_none_in_the_numbers():
  """A diverged ``R`` is ``None`` (JSON null: no bare NaN in the file) and "not finite" in
  the table."""
  assert orthogonality.orthogonality_error(np.full((1, 2, 2), np.nan)) is None
  result = {"ts": [10], "errors": {"float32": [1e-7], "bfloat16_naive": [None]}}
  assert orthogonality.format_table(result).splitlines()[2] == "| 10 | 1e-07 | not finite |"


@pytest.mark.parametrize("args,message", [
    (["--ts=10,abc"], "--ts=10,abc: give positive integers"),
    (["--batch=0"], "--batch=0: give a positive integer"),
    (["--nh=0"], "--nh=0: give a positive integer"),
    (["--eta=-1"], "eta=-1.0 is not supported"),
])
def test_orthogonality_launcher_bad_input_is_a_one_line_error(tmp_path, args, message):
  """``launch.orthogonality``: one ``error: ...`` line like the other launchers (absl's
  UsageError printed the whole usage first), before anything is written."""
  from absl import flags
  from launch import orthogonality as launch_orthogonality
  values = flags.FlagValues()
  launch_orthogonality.define_flags(values)
  values(["orthogonality", "--ts=10", f"--out_dir={tmp_path / 'out'}", *args])
  with pytest.raises(SystemExit, match="^error: " + re.escape(message)) as err:
    launch_orthogonality.run(values)
  assert "\n" not in str(err.value)
  assert not (tmp_path / "out").exists()

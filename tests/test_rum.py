"""rum_scan (Algorithm 1, eqs. (1)-(2)) against a slow explicit-matrix reference."""

import itertools

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import rumjax
from tests.reference import ACTIVATIONS as REF_ACTIVATIONS
from tests.reference import rotation_eq1, rum_reference
from tests.test_rotation_power import power_reference

enable_x64 = lambda: jax.enable_x64(True)


# These tests compare implementations or check against float64: true float32 matmuls.
pytestmark = pytest.mark.usefixtures("float32_matmuls")


def _orthogonality_error(r) -> float:
  """``max |R^T R - 1|`` in float64 on the host (a check computed at the backend's default
  precision would show the backend's rounding, not R's)."""
  r = np.asarray(r, np.float64)
  return float(np.max(np.abs(np.einsum("...ji,...jk->...ik", r, r) - np.eye(r.shape[-1]))))


def _params(seed, nx, nh, dtype=jnp.float32, bias_scale=0.5):
  params = rumjax.init_rum_params(jax.random.key(seed), nx, nh, dtype)
  noise = jax.random.normal(jax.random.key(seed + 1), (3 * nh,), dtype)
  params["bias"] = params["bias"] + bias_scale * noise
  return params


def _xs(seed, *shape, dtype=jnp.float32):
  return jnp.asarray(np.random.default_rng(seed).normal(size=shape), dtype)


@pytest.mark.parametrize(
    "lam,eta,activation,update_gate",
    list(itertools.product([0, 1], [None, 1.3], sorted(rumjax.ACTIVATIONS), [True, False])))
def test_matches_reference(lam, eta, activation, update_gate):
  with enable_x64():
    params = _params(0, 3, 5, jnp.float64)
    xs = _xs(1, 2, 6, 3, dtype=jnp.float64)
    final, hs = rumjax.rum_scan(params, xs, lam=lam, eta=eta, activation=activation,
                                update_gate=update_gate)
    r_ref, hs_ref = rum_reference(params, xs, lam=lam, eta=eta, activation=activation,
                                  update_gate=update_gate)
    assert hs.dtype == jnp.float64 and hs.shape == (2, 6, 5)
    np.testing.assert_allclose(hs, hs_ref, rtol=1e-10, atol=1e-10)
    if lam:
      r, h = final
      np.testing.assert_allclose(r, r_ref, rtol=1e-10, atol=1e-10)
    else:
      h = final
    np.testing.assert_allclose(h, hs_ref[:, -1], rtol=1e-10, atol=1e-10)


def test_time_major_extra_batch_axes_and_h0_continuation():
  params = _params(2, 4, 6)
  xs = _xs(3, 2, 3, 8, 4)  # two batch axes
  for lam in (0, 1):
    final, hs = rumjax.rum_scan(params, xs, lam=lam, eta=1.0)
    assert hs.shape == (2, 3, 8, 6)
    final_tm, hs_tm = rumjax.rum_scan(params, jnp.moveaxis(xs, 2, 0), lam=lam, eta=1.0,
                                      time_major=True)
    np.testing.assert_allclose(jnp.moveaxis(hs_tm, 0, 2), hs, atol=1e-6)
    # Two segments with the carried state == one pass (stateful LM training).
    mid, hs1 = rumjax.rum_scan(params, xs[..., :5, :], lam=lam, eta=1.0)
    end, hs2 = rumjax.rum_scan(params, xs[..., 5:, :], lam=lam, eta=1.0, h0=mid)
    np.testing.assert_allclose(jnp.concatenate([hs1, hs2], -2), hs, atol=1e-5)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, atol=1e-5), end, final)


def test_memory_stays_orthogonal_over_1000_steps_float32():
  params = _params(4, 5, 16)
  xs = _xs(5, 4, 1000, 5)
  (r, _), hs = rumjax.rum_scan(params, xs, lam=1)
  err = _orthogonality_error(r)
  assert err < 1e-4, err
  assert np.all(np.isfinite(hs))


@pytest.mark.parametrize("lam", [0, 1])
def test_time_normalization_fixes_the_norm(lam):
  params = _params(6, 5, 12)
  _, hs = rumjax.rum_scan(params, _xs(7, 3, 40, 5), lam=lam, eta=0.7)
  np.testing.assert_allclose(jnp.linalg.norm(hs, axis=-1), 0.7, rtol=1e-5)


@pytest.mark.parametrize("lam,eta", [(0, None), (1, None), (1, 1.1), (0, 0.9)])
def test_check_grads(lam, eta):
  with enable_x64():
    params = _params(8, 3, 4, jnp.float64)
    xs = _xs(9, 2, 5, 3, dtype=jnp.float64)
    h0 = _xs(10, 2, 4, dtype=jnp.float64)

    def f(params, xs, h0):
      final, hs = rumjax.rum_scan(params, xs, lam=lam, eta=eta, activation="tanh", h0=h0)
      return jnp.sum(hs * jnp.cos(hs)) + jnp.sum(jax.tree.leaves(final)[-1])

    check_grads(f, (params, xs, h0), order=1, modes=("rev",))
    # Forward mode needs the autodiff scan (the fast path is a custom VJP).
    f_ref = lambda p, x, h: jnp.sum(rumjax.rum_scan(p, x, lam=lam, eta=eta, h0=h,
                                                    activation="tanh", impl="reference")[1])
    check_grads(f_ref, (params, xs, h0), order=1, modes=("fwd", "rev"))


def _degenerate_params(nx, nh, case):
  """Parameters that make ``e_t`` and ``tau_t`` degenerate at every step (h0 = 0)."""
  params = _params(11, nx, nh)
  kx, bias = params["kernel_x"], params["bias"]
  kx_e, b_e = kx[:, 2 * nh:], bias[2 * nh:]
  tau_block = {"parallel": (2.0 * kx_e, 2.0 * b_e), "antiparallel": (-kx_e, -b_e),
               "e_zero": (kx[:, :nh], bias[:nh]), "tau_zero": (0 * kx_e, 0 * b_e)}[case]
  e_block = (0 * kx_e, 0 * b_e) if case == "e_zero" else (kx_e, b_e)
  params["kernel_x"] = jnp.concatenate([tau_block[0], kx[:, nh:2 * nh], e_block[0]], 1)
  params["bias"] = jnp.concatenate([tau_block[1], bias[nh:2 * nh], e_block[1]])
  params["kernel_h"] = jnp.zeros_like(params["kernel_h"])  # tau depends on x only
  return params


@pytest.mark.parametrize("case", ["parallel", "antiparallel", "e_zero", "tau_zero"])
@pytest.mark.parametrize("lam,eta", [(0, None), (1, 1.0)])
def test_degenerate_inputs_values_and_gradients_finite(case, lam, eta):
  params = _degenerate_params(3, 4, case)
  xs = _xs(12, 2, 5, 3)
  loss = lambda p, x: jnp.sum(rumjax.rum_scan(p, x, lam=lam, eta=eta)[1] ** 2)
  value = loss(params, xs)
  grads = jax.grad(loss, argnums=(0, 1))(params, xs)
  assert np.isfinite(value)
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
  if lam:
    (r, _), _ = rumjax.rum_scan(params, xs, lam=1)
    np.testing.assert_allclose(jnp.einsum("bji,bjk->bik", r, r),
                               np.broadcast_to(np.eye(4), r.shape), atol=1e-5)


def test_zero_hidden_state_with_eta_is_finite():
  """h' = 0 (relu of a negative pre-activation, no update gate) under time normalization."""
  params = _params(13, 2, 3)
  params["kernel_x"] = jnp.zeros_like(params["kernel_x"])
  params["bias"] = params["bias"].at[6:].set(-1.0)  # e = -1: relu(e + R 0) = 0
  xs = _xs(14, 1, 3, 2)
  loss = lambda p: jnp.sum(rumjax.rum_scan(p, xs, eta=1.0, update_gate=False)[1])
  np.testing.assert_array_equal(rumjax.rum_scan(params, xs, eta=1.0, update_gate=False)[1], 0)
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(jax.grad(loss)(params)))


def test_dtype_follows_inputs():
  """Hidden states follow the inputs; the memory R is at least float32 (issue 26)."""
  for dtype in (jnp.float32, jnp.bfloat16):
    params = _params(15, 3, 4, dtype)
    final, hs = rumjax.rum_scan(params, _xs(16, 2, 5, 3, dtype=dtype), lam=1, eta=1.0)
    assert hs.dtype == final[1].dtype == dtype and final[0].dtype == jnp.float32
    assert np.all(np.isfinite(np.asarray(hs, np.float32)))
  with enable_x64():
    params = _params(15, 3, 4, jnp.float64)
    _, hs = rumjax.rum_scan(params, _xs(16, 2, 5, 3, dtype=jnp.float64))
    assert hs.dtype == jnp.float64


def test_init_rum_params_layout():
  params = rumjax.init_rum_params(jax.random.key(0), nx=7, nh=5)
  assert params["kernel_x"].shape == (7, 15)
  assert params["kernel_h"].shape == (5, 10)
  np.testing.assert_array_equal(params["bias"], [1.0] * 10 + [0.0] * 5)
  for kernel in (params["kernel_x"], params["kernel_h"]):
    for block in jnp.split(kernel, kernel.shape[1] // 5, axis=1):
      np.testing.assert_allclose(block.T @ block, np.eye(5), atol=1e-5)  # gain 1.0


@pytest.mark.parametrize("nx,nh", [(3, 0), (0, 4), (3, 2.5), (3, True)])
def test_init_rum_params_sizes_must_be_positive_integers(nx, nh):
  with pytest.raises(ValueError, match="must be a positive integer"):
    rumjax.init_rum_params(jax.random.key(0), nx, nh)


@pytest.mark.parametrize("call", [
    lambda: rumjax.init_lstmn_params(jax.random.key(0), 3, 0, 4),
    lambda: rumjax.init_starsaber_params(jax.random.key(0), 0),
    lambda: rumjax.make_cell("rum", 0),
])
def test_every_initializer_names_a_size_that_is_not_positive(call):
  """Not a ZeroDivisionError from the initializer's fan-in, nor empty parameters."""
  with pytest.raises(ValueError, match="=0 must be a positive integer"):
    call()


@pytest.mark.parametrize("kwargs,match", [
    (dict(lam=-1), "lam=-1.*>= 0"),
    (dict(lam=-0.5), "lam=-0.5.*>= 0"),
    (dict(lam="1"), "lam='1'"),
    (dict(eta=0.0), "eta=0.0"),
    (dict(eta=-1.0), "eta=-1.0"),
    (dict(eta=float("inf")), "eta=inf.*finite"),   # every h was non-finite
    (dict(activation="gelu"), "activation='gelu'.*relu"),
])
def test_bad_options_raise_clear_errors(kwargs, match):
  params = _params(17, 3, 4)
  with pytest.raises(ValueError, match=match):
    rumjax.rum_scan(params, _xs(18, 2, 5, 3), **kwargs)


def test_bad_shapes_raise_clear_errors():
  params = _params(19, 3, 4)
  with pytest.raises(ValueError, match="xs has 5 features.*Nx=3"):
    rumjax.rum_scan(params, _xs(20, 2, 6, 5))
  with pytest.raises(ValueError, match="kernel_h"):
    rumjax.rum_scan(dict(params, kernel_h=params["kernel_h"][:, :4]), _xs(20, 2, 6, 3))
  with pytest.raises(ValueError, match="keys"):
    rumjax.rum_scan({"kernel_x": params["kernel_x"]}, _xs(20, 2, 6, 3))
  with pytest.raises(ValueError, match="h0 has shape"):
    rumjax.rum_scan(params, _xs(20, 2, 6, 3), h0=jnp.zeros((3, 4)))
  # R0 of another size: the kernel read its top-left corner, the scans a raw einsum error.
  h = jnp.zeros((2, 4))
  for impl in ("fast", "reference", "kernel"):
    with pytest.raises(ValueError, match=r"h0's memory R has shape \(2, 5, 5\) but .* needs "
                                         r"\(2, 4, 4\)"):
      rumjax.rum_scan(params, _xs(20, 2, 6, 3), lam=1, h0=(jnp.zeros((2, 5, 5)), h),
                      impl=impl)
  with pytest.raises(ValueError, match=r"h0 is a pair \(R, h\), but lam=0 carries h alone"):
    rumjax.rum_scan(params, _xs(20, 2, 6, 3), lam=0, h0=(jnp.eye(4), h))


def test_empty_sequences_and_numpy_eta():
  """T = 0 or an empty batch: empty outputs and the initial carry, for a real lam too (its
  checkpointed scan had no segment: a TypeError); ``impl="kernel"`` says it does not run
  them. A numpy eta is a number (it was refused)."""
  params = _params(21, 3, 4)
  for shape in ((2, 0, 3), (0, 5, 3)):
    for lam in (0, 1, 0.5):
      final, hs = rumjax.rum_scan(params, jnp.zeros(shape), lam=lam)
      assert hs.shape == shape[:2] + (4,)
      h = final[1] if lam else final
      np.testing.assert_array_equal(h, np.zeros((shape[0], 4)))
    with pytest.raises(ValueError, match=r"impl='kernel' does not run an empty sequence or "
                                         r"batch"):
      rumjax.rum_scan(params, jnp.zeros(shape), lam=1, impl="kernel")
  xs = _xs(22, 2, 5, 3)
  np.testing.assert_array_equal(rumjax.rum_scan(params, xs, eta=np.float32(1.5))[1],
                                rumjax.rum_scan(params, xs, eta=1.5)[1])


@pytest.mark.slow   # ~45 s of compiling a shape per example
@hypothesis.settings(deadline=None)   # examples: the profile (tests/conftest.py)
@hypothesis.example(nh=2, nx=1, t=3, seed=1, eta=0.5)   # cos = -1.000000: issue 26
@hypothesis.given(nh=st.integers(2, 12), nx=st.integers(1, 6), t=st.integers(1, 30),
                  seed=st.integers(0, 2**20), eta=st.sampled_from([None, 0.5, 2.0]))
def test_property_memory_orthogonal_and_norm(nh, nx, t, seed, eta):
  params = _params(seed, nx, nh)
  # tanh: h'_t is never exactly zero (a zero h' stays zero under eta, by design).
  (r, h), hs = rumjax.rum_scan(params, _xs(seed, 2, t, nx), lam=1, eta=eta,
                               activation="tanh")
  np.testing.assert_allclose(jnp.einsum("bji,bjk->bik", r, r),
                             np.broadcast_to(np.eye(nh), r.shape), atol=1e-5)
  if eta is not None:
    np.testing.assert_allclose(jnp.linalg.norm(hs, axis=-1), eta, rtol=1e-5)


# ------------------------------------------------------------ a real lam (issue 29)


def rum_reference_real_lam(params, xs, *, lam, eta, activation):
  """Algorithm 1 with ``R_t = (R_{t-1})^lam Rotation(e_t, tau_t)``, one example at a time,
  float64 numpy, the power by numpy's eigendecomposition (tests/test_rotation_power.py)."""
  kx, kh, bias = (np.asarray(params[k], np.float64) for k in ("kernel_x", "kernel_h", "bias"))
  nh = kh.shape[0]
  hs, rs = np.zeros(xs.shape[:2] + (nh,)), []
  for i, seq in enumerate(np.asarray(xs, np.float64)):
    h, r = np.zeros(nh), np.eye(nh)
    for t, x in enumerate(seq):
      tau = x @ kx[:, :nh] + h @ kh[:, :nh] + bias[:nh]
      u = 1.0 / (1.0 + np.exp(-(x @ kx[:, nh:2 * nh] + h @ kh[:, nh:] + bias[nh:2 * nh])))
      e = x @ kx[:, 2 * nh:] + bias[2 * nh:]
      r = power_reference(r, lam) @ rotation_eq1(e, tau)
      h = u * h + (1 - u) * REF_ACTIVATIONS[activation](e + r @ h)
      if eta is not None:
        h = eta * h / np.linalg.norm(h)
      hs[i, t] = h
    rs.append(r)
  return np.stack(rs), hs


@pytest.mark.parametrize("lam,eta", [(0.5, None),
                                     pytest.param(0.25, 1.3, marks=pytest.mark.slow),
                                     pytest.param(2.0, None, marks=pytest.mark.slow)])
def test_real_lam_matches_a_python_loop_of_algorithm_1(lam, eta):
  with enable_x64():
    params = _params(21, 3, 5, jnp.float64)
    xs = _xs(22, 2, 8, 3, dtype=jnp.float64)
    r_ref, hs_ref = rum_reference_real_lam(params, xs, lam=lam, eta=eta, activation="tanh")
    for impl in ("reference", "fast"):   # "fast": the checkpointed scan
      (r, h), hs = rumjax.rum_scan(params, xs, lam=lam, eta=eta, activation="tanh",
                                   impl=impl)
      np.testing.assert_allclose(hs, hs_ref, atol=1e-10)
      np.testing.assert_allclose(r, r_ref, atol=1e-10)
      np.testing.assert_allclose(h, hs_ref[:, -1], atol=1e-10)


def test_lam_0_and_1_as_floats_take_the_integer_paths():
  params = _params(23, 3, 6)
  xs = _xs(24, 2, 7, 3)
  for lam in (0, 1):
    want = rumjax.rum_scan(params, xs, lam=lam, eta=1.0)
    got = rumjax.rum_scan(params, xs, lam=float(lam), eta=1.0)
    jax.tree.map(np.testing.assert_array_equal, got, want)


@pytest.mark.slow   # ~60 s: check_grads through an eigh per step
def test_real_lam_gradients_and_check_grads():
  with enable_x64():
    params = _params(25, 2, 4, jnp.float64)
    xs = _xs(26, 2, 5, 2, dtype=jnp.float64)
    f = lambda p, x: jnp.sum(jnp.sin(rumjax.rum_scan(p, x, lam=0.5, activation="tanh")[1]))
    check_grads(f, (params, xs), order=1, modes=("rev",), atol=1e-6, rtol=1e-6)
  # float32 at the start R_0 = 1 (maximally degenerate) and through many steps: finite.
  params, xs = _params(27, 3, 8), _xs(28, 2, 40, 3)
  grads = jax.grad(lambda p: jnp.sum(rumjax.rum_scan(p, xs, lam=0.5, eta=1.0)[1] ** 2))(
      params)
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))


@pytest.mark.slow   # a real lam in bfloat16
def test_real_lam_bfloat16_memory_stays_orthogonal():
  params = _params(29, 4, 10, jnp.bfloat16)
  (r, h), hs = rumjax.rum_scan(params, _xs(30, 3, 60, 4, dtype=jnp.bfloat16), lam=0.5,
                               eta=1.0)
  assert hs.dtype == jnp.bfloat16 and r.dtype == jnp.float32
  np.testing.assert_allclose(jnp.einsum("bji,bjk->bik", r, r),
                             np.broadcast_to(np.eye(10), r.shape), atol=1e-5)
  assert np.all(np.isfinite(hs.astype(jnp.float32)))


@pytest.mark.parametrize("t,segment", [(7, 3), (9, 3), (5, 8), (1, 1), (12, 1)])
def test_checkpointed_scan_equals_the_plain_scan(t, segment):
  """Values and gradients of checkpointed_scan are lax.scan's (T not a multiple of the
  segment, one segment longer than T, segments of one step)."""
  from rumjax.core.rum import checkpointed_scan
  w = jnp.asarray(np.random.default_rng(31).normal(size=(4, 4)) * 0.5, jnp.float32)
  xs = _xs(32, t, 4)

  def body(c, x):
    c = jnp.tanh(c @ w + x)
    return c, (c, jnp.sum(c))

  def run(scan, w_, xs_):
    c, (hs, s) = scan(lambda c, x: body(c @ w_, x), jnp.ones(4), xs_)
    return jnp.sum(c) + jnp.sum(hs ** 2) + jnp.sum(jnp.sin(s))

  plain = lambda w_, xs_: run(jax.lax.scan, w_, xs_)
  ckpt = lambda w_, xs_: run(lambda f, c, x: checkpointed_scan(f, c, x, segment), w_, xs_)
  np.testing.assert_allclose(ckpt(w, xs), plain(w, xs), rtol=1e-6)
  for got, want in zip(jax.grad(ckpt, (0, 1))(w, xs), jax.grad(plain, (0, 1))(w, xs)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow   # ~40 s
def test_real_lam_fast_and_reference_gradients_agree():
  """The checkpointed scan's gradients are the plain scan's (a loss that is not constant
  under eta: a random projection of the hidden states, gradients of order 1)."""
  params, xs, w = _params(33, 3, 6), _xs(34, 2, 11, 3), _xs(35, 2, 11, 6)
  grads = {impl: jax.grad(lambda p: jnp.sum(
      w * rumjax.rum_scan(p, xs, lam=0.5, eta=1.0, impl=impl)[1]))(params)
      for impl in ("fast", "reference")}
  assert max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(grads["fast"])) > 0.1
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5),
               grads["fast"], grads["reference"])


@pytest.mark.slow   # ~60 s: compiles four sequence lengths
def test_real_lam_memory_grows_like_sqrt_t():
  """XLA's temporary buffers of a training step (compiled, not run): the checkpointed scan
  of a real lam grows like sqrt(T) (x2 per x4 in T, plus the O(T) hidden states), the plain
  reference scan, which saves every R_t, like T."""
  params = _params(35, 3, 16)

  def temp_bytes(t, impl):
    xs = jnp.ones((4, t, 3))
    step = jax.jit(jax.grad(lambda p: jnp.sum(rumjax.rum_scan(p, xs, lam=0.5,
                                                              impl=impl)[1] ** 2)))
    return step.lower(params).compile().memory_analysis().temp_size_in_bytes

  fast = temp_bytes(1024, "fast") / temp_bytes(256, "fast")
  ref = temp_bytes(1024, "reference") / temp_bytes(256, "reference")
  assert fast < 3.0 and ref > 3.5, (fast, ref)


@pytest.mark.slow   # ~30 s
def test_lam_as_an_array_equals_the_number_and_has_a_derivative():
  """A learned lam (a traced scalar) gives the same values as the Python number, and
  d/dlam of the hidden states matches central differences (float64)."""
  with enable_x64():
    params = _params(36, 2, 4, jnp.float64)
    xs = _xs(37, 2, 6, 2, dtype=jnp.float64)
    for lam in (0.5, 1.0, 0.0):
      want = rumjax.rum_scan(params, xs, lam=lam if lam not in (0, 1) else 0.5 + lam / 4)
      got = rumjax.rum_scan(params, xs, lam=jnp.asarray(lam if lam not in (0, 1)
                                                        else 0.5 + lam / 4))
      jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-12), got, want)
    f = lambda lam: jnp.sum(jnp.sin(rumjax.rum_scan(params, xs, lam=lam,
                                                    activation="tanh")[1]))
    check_grads(f, (jnp.asarray(0.6),), order=1, modes=("fwd", "rev"), atol=1e-6,
                rtol=1e-6)
    # lam -> 1 from a traced value meets the integer path of lam = 1.
    near_one = rumjax.rum_scan(params, xs, lam=jnp.asarray(1.0))[1]
    np.testing.assert_allclose(near_one, rumjax.rum_scan(params, xs, lam=1)[1], atol=1e-10)
  with pytest.raises(ValueError, match="float scalar"):
    rumjax.rum_scan(params, xs, lam=jnp.ones(2))

"""``rum_scan(impl="fast")`` (hand-written backward pass) against ``impl="reference"``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rumjax
from rumjax.core import rum_fast
from rumjax.core.rum import rum_scan

B, T, NX, NH = 3, 6, 4, 5


# These tests compare implementations or check against float64: true float32 matmuls.
pytestmark = pytest.mark.usefixtures("float32_matmuls")


def _inputs(dtype, t=T, b=B, nx=NX, nh=NH, seed=0, perturb=0.3):
  k = jax.random.split(jax.random.key(seed), 6)
  params = rumjax.init_rum_params(k[0], nx, nh, dtype)
  params = {n: v + perturb * jax.random.normal(k[1], v.shape, dtype)
            for n, v in params.items()}
  xs = jax.random.normal(k[2], (b, t, nx), dtype)
  h0 = jax.random.normal(k[3], (b, nh), dtype)
  r0 = jnp.linalg.qr(jax.random.normal(k[4], (b, nh, nh), dtype))[0]
  weights = jax.random.normal(k[5], (b, t, nh), dtype)
  return params, xs, h0, r0, weights


def _loss(params, xs, h0, weights, impl, return_cos=False, **kw):
  """Uses every output, so cotangents reach hs, the final h and (lam=1) the final R."""
  out = rum_scan(params, xs, h0=h0, impl=impl, return_cos=return_cos, **kw)
  final, hs = out[0], out[1]
  loss = jnp.sum(weights * hs) + jnp.sum(jnp.sin(hs))
  if kw.get("lam"):
    loss += jnp.sum(jnp.cos(final[0])) + jnp.sum(final[1] ** 3)
  else:
    loss += jnp.sum(final ** 3)
  if return_cos:
    loss += jnp.sum(jnp.sin(3.0 * out[2]))
  return loss


def _compare(dtype, tol, lam, eta, activation, update_gate, return_cos=False, t=T,
             perturb=0.3, **extra):
  """Loss value and gradients w.r.t. params, xs and h0 (incl. R0) of fast vs reference."""
  params, xs, h0, r0, weights = _inputs(dtype, t=t, perturb=perturb)
  carry = (r0, h0) if lam else h0
  kw = dict(lam=lam, eta=eta, activation=activation, update_gate=update_gate,
            return_cos=return_cos, **extra)
  grad = jax.value_and_grad(_loss, argnums=(0, 1, 2))
  ref = grad(params, xs, carry, weights, "reference", **kw)
  fast = grad(params, xs, carry, weights, "fast", **kw)
  for a, b in zip(jax.tree.leaves(ref), jax.tree.leaves(fast)):
    assert a.dtype == b.dtype == dtype
    # Relative error in the 2-norm of each gradient array.
    assert float(jnp.linalg.norm(a - b)) <= tol * (float(jnp.linalg.norm(a)) + 1e-30), (a, b)


# Every activation, both gate settings, eta on and off, for lam 0 and 1.
CASES = [
    (0, None, "relu", True), (0, 1.0, "tanh", False), (0, 1.0, "sigmoid", True),
    (1, None, "relu", True), (1, 1.0, "softsign", True), (1, None, "sigmoid", False),
]


@pytest.mark.parametrize("lam,eta,activation,update_gate", [
    # ~35 s each; one per lam in the default run, every case in -m slow
    case if i in (0, 4) else pytest.param(*case, marks=pytest.mark.slow)
    for i, case in enumerate(CASES)])
def test_fast_matches_reference_float64(lam, eta, activation, update_gate):
  with jax.enable_x64(True):
    _compare(jnp.float64, 1e-10, lam, eta, activation, update_gate)


def test_lam1_backward_without_carried_transpose(monkeypatch):
  """From hidden size ``CARRY_QT_BELOW`` on, lam=1's backward reads ``Q u``, ``Q q`` as a
  product with 2 columns instead of carrying ``Q^T``: the same gradients (float64)."""
  monkeypatch.setattr(rum_fast, "CARRY_QT_BELOW", 0)
  with jax.enable_x64(True):
    _compare(jnp.float64, 1e-10, 1, 1.0, "softsign", True)


@pytest.mark.parametrize("lam,eta,activation,update_gate",
                         [(0, None, "relu", True), (1, 1.0, "tanh", False)])
def test_fast_matches_reference_float32(lam, eta, activation, update_gate):
  _compare(jnp.float32, 1e-4, lam, eta, activation, update_gate)


@pytest.mark.parametrize("lam", [0, 1])
def test_cos_time_major_and_batch_axes(lam):
  with jax.enable_x64(True):
    _compare(jnp.float64, 1e-10, lam, 1.0, "relu", True, return_cos=True)
    params, xs, h0, r0, _ = _inputs(jnp.float64)
    xs4 = jnp.stack([xs, 2 * xs])                              # batch shape (2, B)
    tm = jnp.moveaxis(xs4, 2, 0)                               # (T, 2, B, Nx)
    for x, kw in ((xs4, {}), (tm, {"time_major": True})):
      a = rum_scan(params, x, lam=lam, impl="reference", **kw)
      b = rum_scan(params, x, lam=lam, impl="fast", **kw)
      for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(u, v, rtol=1e-10, atol=1e-12)


def test_eta_and_cos_gradients_match_reference_short():
  """The backward of time normalization (the projection ``g - h^ (h^.g)``) and of a loss
  on ``cos(theta_t)`` (return_cos) against autodiff of the reference scan, float64, T = 3:
  the longer comparisons with eta and return_cos run with -m slow. lam = 1 (the two
  backward pieces are shared with lam = 0)."""
  with jax.enable_x64(True):
    _compare(jnp.float64, 1e-10, 1, 0.8, "tanh", True, return_cos=True, t=3)


def test_long_sequence_lam1():
  """2,000 steps: rebuilding R_t backwards keeps the gradients at autodiff's.

  The paper's initialisation and a contracting activation keep the problem well
  conditioned (with perturbed weights and relu, f32 gradients over 2,000 steps differ
  from the f64 ones by O(1) for the reference scan as well).
  """
  _compare(jnp.float32, 1e-4, 1, 1.0, "sigmoid", True, t=2000, perturb=0.0)
  with jax.enable_x64(True):
    _compare(jnp.float64, 1e-10, 1, 1.0, "sigmoid", True, t=2000, perturb=0.0)


def test_reconstruction_drift():
  params, xs, h0, r0, _ = _inputs(jnp.float32, t=2000, b=2, nx=4, nh=16)
  xs = jnp.moveaxis(xs, 1, 0)
  r0_rec = rum_fast.reconstruct_initial_memory(params, xs, (r0, h0), eta=1.0)
  assert float(jnp.max(jnp.abs(r0_rec - r0))) < 1e-4


def test_degenerate_inputs_are_finite():
  """Zero e, zero tau and exactly anti-parallel e, tau: finite values and gradients."""
  with jax.enable_x64(True):
    nh = 4
    eye = jnp.eye(nh)
    params = {"kernel_x": jnp.concatenate([-eye, 0 * eye, eye], 1)[:, :3 * nh],
              "kernel_h": jnp.zeros((nh, 2 * nh)), "bias": jnp.zeros(3 * nh)}
    # tau = -x, e = x: exactly anti-parallel; the zero rows give e = tau = 0.
    xs = jnp.array([[[1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 3.0]]])
    h0 = jnp.array([[0.5, -1.0, 2.0, 0.25]])
    for lam in (0, 1):
      for impl in ("fast", "reference"):
        final, hs = rum_scan(params, xs, lam=lam, h0=h0, impl=impl, activation="tanh")
        assert bool(jnp.all(jnp.isfinite(hs)))
      grad = lambda impl: jax.grad(lambda p, x: jnp.sum(
          rum_scan(p, x, lam=lam, h0=h0, impl=impl)[1] ** 2), argnums=(0, 1))(params, xs)
      grads = grad("fast")
      assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(grads))
      # The fallback plane's derivative (its frame computed before the backward scan)
      # equals autodiff of the reference scan (float64: no TF32 or bfloat16 pass in any
      # matmul, so 1e-10 holds on every backend).
      for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(grad("reference"))):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)
    # Step 1 rotates h0 by pi in a plane containing e: R e = -e, |R h0| = |h0|.
    f, _ = rum_scan(params, xs[:, :1], lam=1, h0=h0, update_gate=False,
                    activation=lambda z: z)
    r = f[0][0]
    np.testing.assert_allclose(r @ r.T, eye, atol=1e-12)
    np.testing.assert_allclose(r @ xs[0, 0], -xs[0, 0], atol=1e-12)
    np.testing.assert_allclose(jnp.linalg.det(r), 1.0, atol=1e-12)


def test_unknown_impl():
  params, xs, *_ = _inputs(jnp.float32)
  with pytest.raises(ValueError, match="impl"):
    rum_scan(params, xs, impl="slow")

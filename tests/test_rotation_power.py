"""rotation_power (RUM paper, footnote 9) against an independent float64 eigen-based power."""

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from jax.test_util import check_grads

import rumjax
from rumjax.core.power import rotation_power

# These tests compare implementations or check against float64: true float32 matmuls.
pytestmark = pytest.mark.usefixtures("float32_matmuls")

enable_x64 = lambda: jax.enable_x64(True)


def random_rotation(seed, n, max_angle=np.pi * 0.999, angles=None):
  """A rotation ``Q blockdiag(Rot(a_k)) Q^T`` with angles drawn in ``[0, max_angle]``."""
  rng = np.random.default_rng(seed)
  q, _ = np.linalg.qr(rng.normal(size=(n, n)))
  q[:, 0] *= np.sign(np.linalg.det(q))
  if angles is None:
    angles = rng.uniform(0, max_angle, size=n // 2)
  a = np.zeros((n, n))
  for k, angle in enumerate(angles):
    a[2 * k + 1, 2 * k], a[2 * k, 2 * k + 1] = angle, -angle
  return q @ scipy.linalg.expm(a) @ q.T


def power_reference(r, lam):
  """``exp(lam log R)`` through numpy's complex eigendecomposition, float64, on the host."""
  w, u = np.linalg.eig(np.asarray(r, np.float64))
  return (u @ np.diag(np.exp(lam * np.log(w.astype(complex)))) @ np.linalg.inv(u)).real


def _skew(a):
  return a - jnp.swapaxes(a, -1, -2)


@pytest.mark.slow   # ~60 s of compiling a shape per example
@hypothesis.settings(deadline=None)   # examples: the profile (tests/conftest.py)
@hypothesis.given(n=st.integers(2, 9), seed=st.integers(0, 2**20),
                  lam=st.floats(0.0, 3.0), max_angle=st.sampled_from([1.0, 3.0, 3.14]))
def test_property_matches_float64_eigen_power(n, seed, lam, max_angle):
  r = random_rotation(seed, n, max_angle)
  with enable_x64():
    p = rotation_power(jnp.asarray(r), lam)
    assert p.dtype == jnp.float64
    np.testing.assert_allclose(p, power_reference(r, lam), atol=1e-11)
  p32 = rotation_power(jnp.asarray(r, jnp.float32), lam)
  assert p32.dtype == jnp.float32
  np.testing.assert_allclose(p32, power_reference(r, lam), atol=2e-5)
  np.testing.assert_allclose(p32.T @ p32, np.eye(n), atol=1e-6)


@pytest.mark.parametrize("dtype,atol", [(jnp.float32, 2e-5), (jnp.float64, 1e-11)])
def test_group_laws(dtype, atol):
  with enable_x64():
    r = jnp.asarray(np.stack([random_rotation(s, 7, 3.0) for s in range(4)]), dtype)
    mm = lambda a, b: jnp.matmul(a, b, precision="highest")
    for a, b in [(0.3, 0.5), (0.25, 0.25), (0.7, 0.2)]:   # (a + b) * 3.0 < pi
      np.testing.assert_allclose(mm(rotation_power(r, a), rotation_power(r, b)),
                                 rotation_power(r, a + b), atol=atol)
    half = rotation_power(r, 0.5)
    np.testing.assert_allclose(mm(half, half), r, atol=atol)
    for lam in (0.5, 1.5, 2.5):
      p = rotation_power(r, lam)
      np.testing.assert_allclose(mm(jnp.swapaxes(p, -1, -2), p),
                                 np.broadcast_to(np.eye(7), p.shape), atol=atol)
      np.testing.assert_allclose(jnp.linalg.det(p), 1.0, atol=atol * 10)


def test_integer_powers():
  r = jnp.asarray(random_rotation(1, 6, 3.1), jnp.float32)
  np.testing.assert_array_equal(rotation_power(r, 0), np.eye(6))
  np.testing.assert_array_equal(rotation_power(r, 1), r)
  np.testing.assert_allclose(rotation_power(r, 2), r @ r, atol=1e-5)
  # A traced lam takes the general path and still gives I, R and R R.
  f = jax.jit(rotation_power)
  for lam, want in [(0.0, np.eye(6)), (1.0, r), (2.0, r @ r)]:
    np.testing.assert_allclose(f(r, lam), want, atol=1e-5)


def test_identity_values_and_gradients_are_exact():
  """R = 1 (RUM's R_0) is N-fold degenerate; d(R^lam) = lam dA along R = exp(dA)."""
  with enable_x64():
    eye = jnp.eye(5)
    a = _skew(jnp.asarray(np.random.default_rng(0).normal(size=(5, 5))))
    np.testing.assert_allclose(rotation_power(eye, 0.3), eye, atol=1e-15)
    tangent = jax.jvp(lambda t: rotation_power(jax.scipy.linalg.expm(t * a), 0.3),
                      (0.0,), (1.0,))[1]
    np.testing.assert_allclose(tangent, 0.3 * a, atol=1e-12)
    g_r, g_lam = jax.grad(lambda r, lam: jnp.sum(jnp.sin(rotation_power(r, lam))),
                          argnums=(0, 1))(eye, 0.3)
    assert np.all(np.isfinite(g_r)) and np.isfinite(g_lam)
    np.testing.assert_allclose(g_lam, 0.0, atol=1e-15)   # 1^lam = 1 for every lam
  g32 = jax.grad(lambda r: jnp.sum(rotation_power(r, 0.5) ** 3))(jnp.eye(4))
  assert np.all(np.isfinite(g32))


@pytest.mark.parametrize("angles", [
    # ~40 s each (check_grads in float64); test_float32_derivatives_match_float64 stays
    pytest.param((0.0, 0.0, 0.0), marks=pytest.mark.slow),      # the identity
    (1.0, 0.0, 0.0),        # R_1 of RUM: one plane, a 5-fold eigenvalue 1
    pytest.param((0.4, 0.4, 1.3), marks=pytest.mark.slow),      # a double angle
    pytest.param((2.0, 1e-3, 0.7), marks=pytest.mark.slow),
    pytest.param((np.pi - 1e-3, 0.5, 2.0), marks=pytest.mark.slow),
])
def test_check_grads_along_rotations(angles):
  with enable_x64():
    r0 = jnp.asarray(random_rotation(3, 7, angles=angles))
    a0 = jnp.asarray(np.random.default_rng(4).normal(size=(7, 7)) * 0.1)
    # R(A) = R0 exp(A - A^T) stays a rotation: the derivatives along SO(N).
    f = lambda a, lam: rotation_power(r0 @ jax.scipy.linalg.expm(_skew(a)), lam)
    check_grads(f, (a0, 0.6), order=1, modes=("fwd", "rev"), atol=1e-5, rtol=1e-5)
    check_grads(f, (jnp.zeros((7, 7)), 1.3), order=1, modes=("fwd", "rev"), atol=1e-5,
                rtol=1e-5)


@pytest.mark.parametrize("angles", [(1.0, 0.0), (0.03, 0.0), (1.0, 1.001), (0.05, 0.01),
                                    (2.0, 0.7)])
def test_float32_derivatives_match_float64(angles):
  """Degenerate and nearly degenerate spectra (eigenvalue 1 of multiplicity 2 and up)."""
  r = random_rotation(8, 5, angles=angles)
  a = np.random.default_rng(9).normal(size=(5, 5))
  dr = r @ (a - a.T)   # a tangent of SO(5) at r
  jvp = lambda dtype: jax.jvp(rotation_power, (jnp.asarray(r, dtype), jnp.asarray(0.5, dtype)),
                              (jnp.asarray(dr, dtype), jnp.asarray(0.3, dtype)))[1]
  j32 = jvp(jnp.float32)
  with enable_x64():
    j64 = jvp(jnp.float64)
  np.testing.assert_allclose(j32, j64, atol=2e-6)


def test_derivative_in_lam_is_r_lam_log_r():
  with enable_x64():
    r = random_rotation(5, 6, 2.5)
    d = jax.jacfwd(rotation_power, argnums=1)(jnp.asarray(r), 0.7)
    log_r = scipy.linalg.logm(r).real
    np.testing.assert_allclose(d, power_reference(r, 0.7) @ log_r, atol=1e-10)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
@pytest.mark.parametrize("gap", [0.0, 1e-12, 1e-6, 1e-3])
def test_angle_pi_values_and_gradients_finite(dtype, gap):
  """At (near) theta = pi: a rotation, and finite gradients in R and lam."""
  with enable_x64():
    r = jnp.asarray(random_rotation(6, 5, angles=(np.pi - gap, 1.0)), dtype)
    for lam in (0.5, 0.3, 2.0):
      p = rotation_power(r, lam)
      # (eps / sin theta)^2 after the Newton-Schulz step: 1e-8 at sin theta = 1e-12.
      np.testing.assert_allclose(p.T @ p, np.eye(5), atol=1e-5 if dtype == jnp.float32
                                 else 1e-7)
      np.testing.assert_allclose(jnp.linalg.det(p), 1.0, atol=1e-5)
      g_r, g_lam = jax.grad(lambda r, l: jnp.sum(jnp.sin(rotation_power(r, l))),
                            argnums=(0, 1))(r, jnp.asarray(lam, dtype))
      assert np.all(np.isfinite(g_r)) and np.isfinite(g_lam)
    # Away from the rounding noise it is the principal power (rotation by lam (pi - gap)).
    if gap >= 1e-3 or (gap >= 1e-6 and dtype == jnp.float64):
      # float32: eps / sin(theta) = 1e-4 at gap 1e-3 (measured 3.8e-5; lam 0.5005 is 1e-3
      # away).
      np.testing.assert_allclose(rotation_power(r, 0.5), power_reference(r, 0.5),
                                 atol=1e-4 if dtype == jnp.float32 else 1e-9)


@pytest.mark.parametrize("lam", [0.3, 0.5, 2.0])
def test_derivative_in_lam_at_angle_pi_matches_finite_differences(lam):
  """At theta = pi the plane's power is cos(lam pi) 1 + sin(lam pi) J (J the chosen
  quarter turn): d/dlam includes pi cos(lam pi) J. float64, central differences (1e-6)."""
  with enable_x64():
    r = jnp.asarray(random_rotation(6, 5, angles=(np.pi, 1.0)))
    f = lambda l: rotation_power(r, l)
    _, d = jax.jvp(f, (jnp.asarray(lam),), (jnp.asarray(1.0),))
    h = 1e-6
    fd = (f(jnp.asarray(lam + h)) - f(jnp.asarray(lam - h))) / (2 * h)
    np.testing.assert_allclose(d, fd, atol=1e-7)


def test_exactly_minus_one_on_two_planes():
  """R = -1 in 4 dimensions: some rotation by lam pi in two planes, orthogonal."""
  r = -jnp.eye(4)
  p = rotation_power(r, 0.5)
  np.testing.assert_allclose(p.T @ p, np.eye(4), atol=1e-6)
  np.testing.assert_allclose(p @ p, r, atol=1e-6)
  np.testing.assert_allclose(rotation_power(r, 2.0), np.eye(4), atol=1e-6)


def test_bfloat16_is_computed_in_float32():
  r = jnp.asarray(random_rotation(7, 6, 3.0), jnp.bfloat16)
  p = rotation_power(r, 0.5)
  assert p.dtype == jnp.float32
  np.testing.assert_allclose(p.T @ p, np.eye(6), atol=1e-5)


def test_batched_and_jit():
  rs = jnp.asarray(np.stack([random_rotation(s, 4, 3.0) for s in range(6)]).reshape(
      2, 3, 4, 4), jnp.float32)
  p = jax.jit(rotation_power)(rs, 0.4)
  assert p.shape == (2, 3, 4, 4)
  np.testing.assert_allclose(p[1, 2], rotation_power(rs[1, 2], 0.4), atol=1e-6)


def test_exported_and_bad_input():
  assert rumjax.rotation_power is rotation_power
  assert rumjax.core.rotation_power is rotation_power
  with pytest.raises(ValueError, match="lam=-0.5.*lam >= 0"):
    rotation_power(jnp.eye(3), -0.5)
  with pytest.raises(ValueError, match=r"shape \(..., N, N\)"):
    rotation_power(jnp.ones((3, 4)), 0.5)

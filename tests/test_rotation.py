"""Rotation(a, b), eq. (1): explicit matrix, O(N) action, degenerate inputs, gradients."""

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
enable_x64 = lambda: jax.enable_x64(True)
from jax.test_util import check_grads

from rumjax import rotate, rotation_matrix
from rumjax.core.rotation import rotate_two_pass, rotation_plane
from tests.reference import rotation_eq1


# These tests compare implementations or check against float64: true float32 matmuls.
pytestmark = pytest.mark.usefixtures("float32_matmuls")


def _random(seed, *shape):
  return np.random.default_rng(seed).normal(size=shape)


def _unit(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_matches_eq1_and_is_a_rotation():
  with enable_x64():
    a, b, h = _random(0, 3, 4, 7), _random(1, 3, 4, 7), _random(2, 3, 4, 7)
    r = np.asarray(rotation_matrix(a, b))
    assert r.shape == (3, 4, 7, 7)
    for i in range(3):
      for j in range(4):
        np.testing.assert_allclose(r[i, j], rotation_eq1(a[i, j], b[i, j]), atol=1e-12)
    eye = np.eye(7)
    np.testing.assert_allclose(r @ np.swapaxes(r, -1, -2), np.broadcast_to(eye, r.shape),
                               atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(r), 1.0, atol=1e-12)
    np.testing.assert_allclose(np.einsum("...ij,...j->...i", r, _unit(a)), _unit(b),
                               atol=1e-12)
    np.testing.assert_allclose(rotate(a, b, h), np.einsum("...ij,...j->...i", r, h),
                               atol=1e-12)


def test_identity_on_orthogonal_complement():
  with enable_x64():
    a, b = _random(3, 6), _random(4, 6)
    # Vectors orthogonal to a and b: the null space of [a; b].
    _, _, vt = np.linalg.svd(np.stack([a, b]))
    complement = vt[2:]
    for w in complement:
      np.testing.assert_allclose(rotate(a, b, w), w, atol=1e-12)


def test_explicit_examples():
  a = jnp.array([1.0, 0.0, 0.0])
  b = jnp.array([0.0, 2.0, 0.0])
  np.testing.assert_allclose(rotate(a, b, jnp.array([1.0, 0.0, 5.0])), [0.0, 1.0, 5.0],
                             atol=1e-6)
  np.testing.assert_allclose(rotate(a, b, jnp.array([0.0, 1.0, 0.0])), [-1.0, 0.0, 0.0],
                             atol=1e-6)


DEGENERATE = {
    "parallel": lambda a, b: (a, 2.5 * a),
    "antiparallel": lambda a, b: (a, -0.5 * a),
    "antiparallel_axis": lambda a, b: (jnp.eye(a.shape[0], dtype=a.dtype)[1], -jnp.eye(a.shape[0], dtype=a.dtype)[1]),
    # u = e_0: the fallback's plane takes the second axis (u_0^2 > 1/2), the branch above never does.
    "antiparallel_axis0": lambda a, b: (jnp.eye(a.shape[0], dtype=a.dtype)[0], -jnp.eye(a.shape[0], dtype=a.dtype)[0]),
    "a_zero": lambda a, b: (0.0 * a, b),
    "b_zero": lambda a, b: (a, 0.0 * b),
    "both_zero": lambda a, b: (0.0 * a, 0.0 * b),
}


@pytest.mark.parametrize("case", sorted(DEGENERATE))
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_degenerate_inputs_are_finite_and_orthogonal(case, dtype):
  with enable_x64():
    a0 = jnp.asarray(_random(5, 6), dtype)
    b0 = jnp.asarray(_random(6, 6), dtype)
    h = jnp.asarray(_random(7, 6), dtype)
    a, b = DEGENERATE[case](a0, b0)
    r = rotation_matrix(a, b)
    tol = 1e-5 if dtype == jnp.float32 else 1e-12
    np.testing.assert_allclose(r @ r.T, np.eye(6), atol=tol)
    np.testing.assert_allclose(np.linalg.det(np.asarray(r, np.float64)), 1.0, atol=tol)
    if case in ("parallel", "a_zero", "b_zero", "both_zero"):
      np.testing.assert_allclose(r, np.eye(6), atol=tol)  # documented: identity
    if case.startswith("antiparallel"):
      np.testing.assert_allclose(r @ _unit(np.asarray(a)), _unit(np.asarray(b)), atol=tol)
    loss = lambda a, b, h: jnp.sum(jnp.sin(rotate(a, b, h)))
    grads = jax.grad(loss, argnums=(0, 1, 2))(a, b, h)
    for g in grads:
      assert g.dtype == dtype
      assert np.all(np.isfinite(g)), (case, grads)
    grads_m = jax.grad(lambda a, b: jnp.sum(jnp.sin(rotation_matrix(a, b))), (0, 1))(a, b)
    assert all(np.all(np.isfinite(g)) for g in grads_m)



def test_rotate_two_pass_is_eq1():
  """rum_fast's lam=0 step: Rot h and cos from two passes equal the explicit matrix of
  eq. (1) (float64, a Python loop) and the plane's action (float32, to its rounding)."""
  with enable_x64():
    a, b, h = _random(10, 5, 9), _random(11, 5, 9), _random(12, 5, 9)
    x, cos = rotate_two_pass(a, b, h)
    for i in range(5):
      np.testing.assert_allclose(x[i], rotation_eq1(a[i], b[i]) @ h[i], atol=1e-12)
      np.testing.assert_allclose(cos[i], _unit(a[i]) @ _unit(b[i]), atol=1e-12)
  a, b, h = (jnp.asarray(v, jnp.float32) for v in (a, b, h))
  np.testing.assert_allclose(rotate_two_pass(a, b, h)[0], rotate(a, b, h), atol=2e-6)


@pytest.mark.parametrize("case", sorted(DEGENERATE))
def test_rotate_two_pass_degenerate(case):
  """The same branches as rotation_plane: identity for parallel and zero inputs, the
  rotation by pi for anti-parallel ones (float32: a few ulps of |h|)."""
  a0, b0 = jnp.asarray(_random(5, 6), jnp.float32), jnp.asarray(_random(6, 6), jnp.float32)
  h = jnp.asarray(_random(7, 6), jnp.float32)
  a, b = DEGENERATE[case](a0, b0)
  x, cos = rotate_two_pass(a, b, h)
  np.testing.assert_allclose(x, rotate(a, b, h), atol=1e-5)
  np.testing.assert_allclose(jnp.linalg.norm(x), jnp.linalg.norm(h), rtol=1e-6)
  if case.startswith("antiparallel"):
    np.testing.assert_allclose(cos, -1.0, atol=1e-6)


def test_zero_h_is_finite():
  a, b = jnp.asarray(_random(8, 5), jnp.float32), jnp.asarray(_random(9, 5), jnp.float32)
  h = jnp.zeros(5)
  np.testing.assert_array_equal(rotate(a, b, h), 0.0)
  grads = jax.grad(lambda a, b, h: jnp.sum(rotate(a, b, h) ** 2 + rotate(a, b, h)),
                   (0, 1, 2))(a, b, h)
  assert all(np.all(np.isfinite(g)) for g in grads)


def test_gradient_at_parallel_is_the_derivative_of_eq1():
  """At theta = 0 the rotation is smooth; the gradient must match finite differences."""
  with enable_x64():
    a = jnp.asarray(_random(10, 5))
    h = jnp.asarray(_random(11, 5))
    f = lambda b: jnp.sum(rotate(a, b, h) * jnp.arange(5.0))
    check_grads(f, (2.0 * a,), order=1, modes=("fwd", "rev"), eps=1e-6)
    g = jax.grad(f)(2.0 * a)
    assert np.linalg.norm(g) > 1e-3  # a real derivative, not a zeroed-out branch


def test_check_grads_generic():
  with enable_x64():
    a, b, h = (jnp.asarray(_random(s, 2, 5)) for s in (12, 13, 14))
    check_grads(rotate, (a, b, h), order=1, modes=("fwd", "rev"))
    check_grads(rotation_matrix, (a, b), order=1, modes=("fwd", "rev"))


def test_dtypes_follow_inputs():
  """rotate follows its inputs; the rotation itself is at least float32 (issue 26)."""
  for dtype in (jnp.float32, jnp.bfloat16):
    a, b, h = (jnp.asarray(_random(s, 4), dtype) for s in (1, 2, 3))
    assert rotate(a, b, h).dtype == dtype
    assert rotation_matrix(a, b).dtype == jnp.float32
  with enable_x64():
    a, b, h = (jnp.asarray(_random(s, 4)) for s in (1, 2, 3))
    assert rotate(a, b, h).dtype == jnp.float64


@jax.jit
def _rotation_and_norm(a, b, h):
  """R and |Rotation(a, b) h| for the property test (one compilation per shape)."""
  return rotation_matrix(a, b), jnp.linalg.norm(rotate(a, b, h), axis=-1)


def _rotation_facts(a, b, h):
  """R R^T, |Rotation(a, b) h| and R a/|a|, the products in float64 on the host (checks
  computed at the backend's default precision would show its rounding, not R's)."""
  r, norm = _rotation_and_norm(a, b, h)
  r, a = np.asarray(r, np.float64), np.asarray(a, np.float64)
  u_a = a / np.linalg.norm(a, axis=-1, keepdims=True)
  return r @ np.swapaxes(r, -1, -2), norm, np.einsum("bij,bj->bi", r, u_a)


@hypothesis.settings(deadline=None)   # examples: the profile (tests/conftest.py)
@hypothesis.given(n=st.integers(2, 24), batch=st.integers(1, 5), seed=st.integers(0, 2**31))
def test_property_orthogonal_and_norm_preserving(n, batch, seed):
  rng = np.random.default_rng(seed)
  scale = 10.0 ** rng.uniform(-3, 3, size=(3, batch, 1))
  a, b, h = (jnp.asarray(rng.normal(size=(batch, n)) * s, jnp.float32) for s in scale)
  rrt, norm_out, r_ua = _rotation_facts(a, b, h)
  np.testing.assert_allclose(rrt, np.broadcast_to(np.eye(n), rrt.shape), atol=2e-5)
  np.testing.assert_allclose(norm_out, jnp.linalg.norm(h, axis=-1), rtol=2e-5)
  np.testing.assert_allclose(r_ua,
                             b / jnp.linalg.norm(b, axis=-1, keepdims=True), atol=2e-5)


@pytest.mark.parametrize("jit", [False, True])
def test_orthogonal_up_to_and_through_antiparallel(jit):
  """b = -a + delta noise: R stays orthogonal to float32 accuracy and maps a^ to b^, also
  for delta = 0 under jit (where the computed orthogonal part of b is rounding noise)."""
  rng = np.random.default_rng(26)
  deltas = np.array([0.0, 1e-9, 1e-7, 1e-6, 3e-6, 1e-5, 1e-4, 1e-3, 1e-1])
  a = rng.normal(size=(len(deltas), 7))
  b = -a * rng.uniform(0.5, 2.0, size=(len(deltas), 1)) + deltas[:, None] * rng.normal(
      size=a.shape)
  a, b = jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)
  fn = jax.jit(rotation_matrix) if jit else rotation_matrix
  r = np.asarray(fn(a, b), np.float64)
  np.testing.assert_allclose(r @ np.swapaxes(r, -1, -2),
                             np.broadcast_to(np.eye(7), r.shape), atol=1e-6)
  unit = lambda x: np.asarray(x, np.float64) / np.linalg.norm(x, axis=-1, keepdims=True)
  np.testing.assert_allclose(np.einsum("bij,bj->bi", r, unit(a)), unit(b), atol=1e-5)


def _matrix_of(plane):
  """``1 + U M U^T`` from a plane, in float64 numpy (an explicit matrix, eq. (1))."""
  u, q = np.asarray(plane.u, np.float64), np.asarray(plane.q, np.float64)
  m = np.asarray(np.stack([np.stack([plane.m_uu, plane.m_uq], -1),
                           np.stack([plane.m_qu, plane.m_qq], -1)], -2), np.float64)
  basis = np.stack([u, q], -1)
  return np.eye(u.shape[-1]) + basis @ m @ np.swapaxes(basis, -1, -2)


def test_kernel_plane_is_eq1():
  """``rotation_plane(in_kernel=True)`` (as the Triton kernel computes it: masked sums, not
  slices, for the fallback's coordinates) against eq. (1)'s matrix, float64, both branches."""
  with enable_x64():
    a, b = _random(30, 8, 7), _random(31, 8, 7)
    b[:4] = -b[:4] - 3 * a[:4]                       # cos <= 0 for the first four
    r = _matrix_of(rotation_plane(jnp.asarray(a), jnp.asarray(b), in_kernel=True))
    for i in range(8):
      np.testing.assert_allclose(r[i], rotation_eq1(a[i], b[i]), atol=1e-12)


@pytest.mark.parametrize("case", sorted(DEGENERATE))
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_kernel_plane_degenerate(case, dtype):
  """The kernel's plane through the degenerate inputs: orthogonal, det +1, the identity where
  documented, a^ -> b^ through anti-parallel, and the XLA path's plane to rounding."""
  with enable_x64():
    a, b = DEGENERATE[case](jnp.asarray(_random(5, 6), dtype), jnp.asarray(_random(6, 6), dtype))
    plane = rotation_plane(a, b, in_kernel=True)
    assert plane.u.dtype == dtype
    r = _matrix_of(plane)
    tol = 1e-5 if dtype == jnp.float32 else 1e-12
    np.testing.assert_allclose(r @ r.T, np.eye(6), atol=tol)
    np.testing.assert_allclose(np.linalg.det(r), 1.0, atol=tol)
    if case in ("parallel", "a_zero", "b_zero", "both_zero"):
      np.testing.assert_allclose(r, np.eye(6), atol=tol)
    if case.startswith("antiparallel"):
      np.testing.assert_allclose(r @ _unit(np.asarray(a, np.float64)),
                                 _unit(np.asarray(b, np.float64)), atol=tol)
    np.testing.assert_allclose(r, _matrix_of(rotation_plane(a, b)), atol=tol)


def test_kernel_plane_orthogonal_through_antiparallel():
  """As test_orthogonal_up_to_and_through_antiparallel, for the kernel's plane (float32)."""
  rng = np.random.default_rng(26)
  deltas = np.array([0.0, 1e-9, 1e-7, 1e-6, 3e-6, 1e-5, 1e-4, 1e-3, 1e-1])
  a = rng.normal(size=(len(deltas), 7))
  b = -a * rng.uniform(0.5, 2.0, size=(len(deltas), 1)) + deltas[:, None] * rng.normal(
      size=a.shape)
  plane = jax.jit(lambda a, b: rotation_plane(a, b, in_kernel=True))(
      jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32))
  r = _matrix_of(plane)
  np.testing.assert_allclose(r @ np.swapaxes(r, -1, -2),
                             np.broadcast_to(np.eye(7), r.shape), atol=1e-6)
  unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
  np.testing.assert_allclose(np.einsum("bij,bj->bi", r, unit(a)), unit(b), atol=1e-5)


def test_cos_and_sin_are_on_the_unit_circle_without_bias():
  """The plane's (cos, sin) after the Newton step: cos^2 + sin^2 - 1 is within one eps of
  float32 and averages to 0 over many pairs. Without the step the division's rounding is
  biased (about +0.36 eps on average here), and a bias makes R_t drift linearly in t."""
  rng = np.random.default_rng(0)
  a, b = (jnp.asarray(rng.normal(size=(8192, 64)), jnp.float32) for _ in range(2))
  plane = jax.jit(rotation_plane)(a, b)
  c, s = np.asarray(plane.cos, np.float64), np.asarray(plane.sin, np.float64)
  err = (c * c + s * s - 1.0) / np.finfo(np.float32).eps
  assert np.abs(err).max() <= 1.0 and abs(err.mean()) < 0.1, (err.mean(), np.abs(err).max())


@pytest.mark.parametrize("call,match", [
    (lambda: rotation_matrix(jnp.float32(1.0), jnp.float32(2.0)), "a is a scalar"),
    (lambda: rotate(jnp.ones(3), jnp.ones(4), jnp.ones(3)), r"a: 3, b: 4, h: 3"),
    (lambda: rotate(jnp.ones(3), jnp.ones(3), jnp.ones(2)), r"a: 3, b: 3, h: 2"),
])
def test_wrong_shapes_are_one_line_errors(call, match):
  with pytest.raises(ValueError, match=match):
    call()

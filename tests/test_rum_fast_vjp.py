"""The hand-written VJP of the rotation (rum_fast._rotate_bwd) against autodiff, float64.

``_rotate_bwd`` differentiates eq. (1) in exact arithmetic (it skips the forward pass's
numerical polish); autodiff of ``_rotate`` differentiates every operation. In float64 they
agree to rounding (1e-12 relative) in both branches of the plane (cos > 0, cos <= 0), at
exactly parallel and anti-parallel inputs (the fallback plane), near anti-parallel
(gradients ~1/sin, large), for zero e or tau (no gradient), for one example (<N>, the
kernel's shape) and with the kernel's coordinate extraction (masked sums). The cotangents
of every plane field are random (sin's is zero: the fast path never reads it). Elementwise
and float64 only: no matmul precision is involved.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rumjax.core import rum_fast
from rumjax.core.rotation import RotationPlane

TOL = 1e-12


def _inputs(case, n=5, batch=6):
  k = jax.random.split(jax.random.key(1), 3)
  tau, e, h = (jax.random.normal(kk, (batch, n), jnp.float64) for kk in k)
  return {
      "random": (tau, e, h),
      "obtuse": (tau, 0.3 * e - tau, h),
      "parallel": (tau, 2 * tau, h),
      "near_parallel": (tau, 2 * tau + 1e-6 * e, h),
      "anti_parallel": (tau, -2 * tau, h),
      "near_anti_parallel": (tau, -2 * tau + 1e-4 * e, h),
      "zero_e": (tau, 0 * e, h),
      "zero_tau": (0 * tau, e, h),
      "one_example": (tau[0], e[0], h[0]),
      "n_2": (tau[:, :2], -tau[:, :2], h[:, :2]),
  }[case]


@pytest.mark.parametrize("precomputed", [False, True])
@pytest.mark.parametrize("memory", [True, False])
@pytest.mark.parametrize("in_kernel", [False, True])
@pytest.mark.parametrize("case", ["random", "obtuse", "parallel", "near_parallel",
                                  "anti_parallel", "near_anti_parallel", "zero_e",
                                  "zero_tau", "one_example", "n_2"])
def test_rotate_bwd_equals_autodiff(case, in_kernel, memory, precomputed):
  """``memory``: cotangents of u and q (lam=1); without, None (lam=0) against zeros.
  ``precomputed``: ``1/|e|, 1/|tau|`` and the fallback's frame passed in, as the backward
  scans compute them before the scan."""
  with jax.enable_x64(True):
    tau, e, h = _inputs(case)
    rotate = lambda t, a, v: rum_fast._rotate(t, a, v, in_kernel)
    (x, plane), vjp = jax.vjp(rotate, tau, e, h)
    keys = jax.random.split(jax.random.key(2), 1 + len(plane))
    gx = jax.random.normal(keys[0], x.shape, x.dtype)
    gp = RotationPlane(*(jax.random.normal(k, f.shape, f.dtype)
                         for k, f in zip(keys[1:], plane)))
    gp = gp._replace(sin=jnp.zeros_like(gp.sin))
    if not memory:
      gp = gp._replace(u=jnp.zeros_like(gp.u), q=jnp.zeros_like(gp.q))
    want = vjp((gx, gp))
    given = ({"inv_norms": rum_fast._inverse_norms(tau, e),
              "frame": rum_fast._fallback_frame(plane.u)} if precomputed else {})
    got = rum_fast._rotate_bwd(tau, e, h, plane, gx,
                               gp if memory else gp._replace(u=None, q=None), in_kernel,
                               **given)
    for name, a, b in zip(("tau", "e", "h"), want, got):
      a, b = np.asarray(a), np.asarray(b)
      assert np.all(np.isfinite(b)), name
      assert np.max(np.abs(a - b)) <= TOL * max(np.max(np.abs(a)), 1.0), (name, case)

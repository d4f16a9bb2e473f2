"""The Rotation operation of RUM (Dangovski et al., TACL 2019, section 3, eq. (1)).

``Rotation(a, b)`` is the orthogonal matrix that turns the direction of ``a`` into the
direction of ``b`` inside the plane ``span(a, b)`` and leaves the orthogonal complement
of that plane untouched::

    theta = arccos(a.b / (|a| |b|))
    u = a / |a|,   v = (b - (u.b) u) / |b - (u.b) u|
    R = [1 - u u^T - v v^T] + (u, v) R~(theta) (u, v)^T,   R~ = [[c, -s], [s, c]]

Everything here works through one small description of that matrix,
``R = 1 + (u, q) M (u, q)^T`` with a 2 x 2 matrix ``M`` (see :func:`rotation_plane`),
so the action on a vector costs O(N) and the associative memory of RUM can be updated as
a rank-2 correction.

Numerics (all values and gradients finite):

* ``a = 0`` or ``b = 0``: no plane is defined; the rotation is the identity.
* ``a`` parallel to ``b`` (``theta = 0``): the identity, and the gradient is the exact
  derivative of eq. (1) there: near ``theta = 0`` we use ``q = s v = b^ - c u`` and the
  identity ``c - 1 = -s^2 / (1 + c)``, which are smooth in ``a`` and ``b`` (the released
  code's ``sin = sqrt(1 - cos^2)`` has an infinite derivative there).
* ``a`` anti-parallel to ``b`` (``theta = pi``): the plane is not unique, so eq. (1) is
  discontinuous there. We rotate by ``pi`` in the plane of ``u`` and the numerically
  computed orthogonal direction; when that direction is below its rounding noise
  (``sin theta <= 16 eps``) we take ``cos = -1``, ``sin = 0`` and the first or second
  coordinate axis orthogonalised against ``u`` (``N >= 2`` required; for ``N = 1`` the result
  is the reflection ``-1``, the only orthogonal map sending ``a`` to ``-a``). Values
  stay orthogonal with determinant +1, gradients are finite but grow like ``1/sin``
  as ``theta -> pi``, as the geometry demands.

Orthogonal up to and through anti-parallel. The two branches are chosen so that no
factor ``1 / (1 + cos theta)`` multiplies a rounding error: for ``cos > 0`` (the only
place the smooth form ``M_qq = -1 / (1 + c)`` is used) ``1 + c > 1``; for ``cos <= 0``
``v = p / |p|`` is a unit vector orthogonal to ``u`` to working precision (Gram-Schmidt
twice) and ``M`` is the exact 2 x 2 rotation minus the identity with
``cos^2 + sin^2 = 1`` renormalised (then one Newton step: the rounding of the division
is biased, and a bias, unlike random rounding, makes the memory ``R_t`` of RUM drift
linearly in ``t``), so ``|R^T R - 1|`` stays at a few ulps for every angle. (The closed form ``1 - d d^T / (1 + c) + 2 b a^T``, ``d = a + b``, is eq. (1)
too, but amplifies the rounding of ``|a|, |b| != 1`` by ``1 / (1 + c)``: 2e-4 in
float32 at ``cos = -0.999999``; issue 26.)

Precision. Whatever the dtype of ``a`` and ``b`` (bfloat16 included), the normalised
vectors ``u``, ``q``, the coefficients ``M``, ``cos`` and ``sin`` are computed and
returned in ``promote_types(dtype, float32)`` (float32, or float64 under x64), with
elementwise products and sums only (no ``dot``, which a TPU would run at bfloat16
precision by default). :func:`rotation_matrix` returns that dtype too (a bfloat16
matrix would not be orthogonal to float32 accuracy); :func:`rotate` computes in it and
returns the dtype of ``h`` promoted with ``a`` and ``b``.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from rumjax.core.precision import HIGHEST, at_least_float32


class RotationPlane(NamedTuple):
  """``Rotation(a, b) = 1 + (u, q) M (u, q)^T`` with ``M = [[m_uu, m_uq], [m_qu, m_qq]]``.

  All fields have shape ``(..., N)`` (vectors) or ``(...,)`` (coefficients).
  ``cos`` and ``sin`` are ``cos(theta)`` and ``sin(theta)`` (kept for analysis, e.g. the
  ``cos(theta)`` histograms of the paper's Figure 5).
  """
  u: jax.Array
  q: jax.Array
  m_uu: jax.Array
  m_uq: jax.Array
  m_qu: jax.Array
  m_qq: jax.Array
  cos: jax.Array
  sin: jax.Array


def _dot(x, y):
  return jnp.sum(x * y, axis=-1)


def first_coordinates(u, in_kernel: bool = False):
  """``(u_0, u_1)`` (shape ``u.shape[:-1]``): slices, or with ``in_kernel`` masked sums
  (a Pallas Triton kernel cannot slice; the sums of one number and zeros are exact, so both
  give the same values; the slices are cheaper for XLA)."""
  if not in_kernel:
    return u[..., 0], u[..., 1]
  index = jax.lax.broadcasted_iota(jnp.int32, u.shape, u.ndim - 1)
  coordinate = lambda k: jnp.sum(jnp.where(index == k, u, 0.0), axis=-1)
  return coordinate(0), coordinate(1)


def _fallback(u, in_kernel: bool = False):
  """A unit vector orthogonal to the unit vector ``u`` (elementwise, no argmin).

  The first coordinate axis if ``u_0^2 <= 1/2``, else the second (then ``u_1^2 <= 1/2``),
  minus its component along ``u``: its norm is at least ``sqrt(1/2)``. Zero for ``N = 1``.
  """
  n = u.shape[-1]
  if n < 2:
    return jnp.zeros_like(u)
  index = jax.lax.broadcasted_iota(jnp.int32, u.shape, u.ndim - 1)
  u0, u1 = (x[..., None] for x in first_coordinates(u, in_kernel))
  first = u0 * u0 <= 0.5
  uk = jnp.where(first, u0, u1)
  axis = jnp.where(first, 0, 1) == index
  sq = 1.0 - uk * uk
  return jnp.where(sq > 0, (axis.astype(u.dtype) - uk * u) * jax.lax.rsqrt(
      jnp.where(sq > 0, sq, 1.0)), 0.0)


def inverse_norms(a, b):
  """``(1/|a|, 1/|b|, ok)`` along the last axis, ``ok = a != 0 and b != 0``; both inverses
  are 0 where not ok (then eq. (1) is the identity). The first pass of :func:`_two_passes`."""
  sq_a, sq_b = _dot(a, a), _dot(b, b)
  ok = (sq_a > 0) & (sq_b > 0)
  inverse = lambda sq: jnp.where(ok, jax.lax.rsqrt(jnp.where(ok, sq, 1.0)), 0.0)
  return inverse(sq_a), inverse(sq_b), ok


class _Passes(NamedTuple):
  """The numbers of eq. (1) from two passes over ``a`` and ``b`` (:func:`_two_passes`)."""
  ok: jax.Array      # a != 0 and b != 0
  inv_a: jax.Array   # 1/|a|, 1/|b| (0 where not ok)
  inv_b: jax.Array
  u: jax.Array       # a/|a|
  p: jax.Array       # b^ - c0 u, the first Gram-Schmidt pass
  up: jax.Array      # u.p (rounding: the second pass subtracts it)
  s0: jax.Array      # |p'|, p' = p - (u.p) u
  c0: jax.Array      # a.b / (|a| |b|)
  cos: jax.Array     # cos(theta) and sin(theta) polished (cos^2 + sin^2 = 1, Newton step)
  sin: jax.Array
  k: jax.Array       # the polish's factor on p' (q = k p' for cos > 0)


def _two_passes(a, b, h=None):
  """The plane of ``Rotation(a, b)`` from two reductions over the vectors.

  First pass, of the raw inputs: ``|a|^2``, ``|b|^2``, ``a.b`` (so ``c0 = a.b/(|a||b|)``).
  Second pass, of ``p = b^ - c0 u``: ``u.p`` and ``|p|^2``. The second Gram-Schmidt pass
  ``p' = p - (u.p) u`` ("twice is enough": ``p'`` is orthogonal to ``u`` to working
  precision even where it is tiny, theta near 0 or pi) and its norm
  ``|p'| = sqrt(|p|^2 - (u.p)^2)`` (``|u| = 1``) follow without a third pass. Then
  ``(cos, sin) = (c0, |p'|)`` renormalised so that ``cos^2 + sin^2 = 1`` and one Newton step
  towards it: the rounding of the division is biased (``cos^2 + sin^2 - 1 ~ +0.4 eps`` on
  average), and a bias, unlike random rounding, makes ``R_t`` drift linearly in ``t``
  (float32, Nh 64: max ``|R^T R - 1|`` at t = 4,000 1.1e-5 without the step, 3e-6 with it).
  (Until issue 45 these were five passes in sequence: the norms, ``cos = u.b^``, ``u.p``,
  ``|p'|`` and, in the step, ``U^T h``; each is a fused operation of its own on XLA:CPU.)
  """
  inv_a, inv_b, ok = inverse_norms(a, b)
  ab, *h_dots = (_dot(x, y) for x, y in ((a, b),) + (((a, h), (b, h)) if h is not None else ()))
  c0 = ab * inv_a * inv_b
  u = a * inv_a[..., None]
  p = b * inv_b[..., None] - c0[..., None] * u
  up, pp = _dot(u, p), _dot(p, p)
  sq = pp - up * up
  s0 = jnp.where(sq > 0, jnp.sqrt(jnp.where(sq > 0, sq, 1.0)), 0.0)   # gradient 0 at 0
  radius = jnp.sqrt(jnp.where(ok, c0 * c0 + s0 * s0, 1.0))
  cos, sin = jnp.where(ok, c0 / radius, 1.0), s0 / radius
  newton = 1.5 - 0.5 * (cos * cos + sin * sin)
  passes = _Passes(ok, inv_a, inv_b, u, p, up, s0, c0, cos * newton, sin * newton,
                   newton / radius)
  return passes if h is None else (passes, h_dots)


def check_vectors(**vectors) -> None:
  """``ValueError`` unless every argument is an array of vectors ``<..., N>`` of one ``N``
  (checked when tracing; free at run time)."""
  sizes = {}
  for name, v in vectors.items():
    if jnp.ndim(v) == 0:
      raise ValueError(f"{name} is a scalar; Rotation takes vectors <..., N> (N >= 1).")
    sizes[name] = jnp.shape(v)[-1]
  if len(set(sizes.values())) > 1:
    listed = ", ".join(f"{k}: {n}" for k, n in sizes.items())
    raise ValueError(f"the vectors' sizes differ ({listed}); Rotation takes vectors of one "
                     "size N in the last axis.")


def rotation_plane(a: jax.Array, b: jax.Array, in_kernel: bool = False) -> RotationPlane:
  """The plane, angle and 2 x 2 block of ``Rotation(a, b)`` (eq. (1)), batched.

  Args:
    a: <float>[..., N] the vector to rotate from (``e~_t`` in RUM).
    b: <float>[..., N] the vector to rotate towards (``tau_t`` in RUM).
    in_kernel: inside a Pallas Triton kernel (no slicing; the same values).

  Returns:
    A :class:`RotationPlane` in :func:`~rumjax.core.precision.at_least_float32`; see the
    module docstring for the degenerate cases and the numerics near anti-parallel, and
    :func:`_two_passes` for how the plane is computed.
  """
  check_vectors(a=a, b=b)
  dtype = at_least_float32(a, b)
  a, b = jnp.broadcast_arrays(jnp.asarray(a, dtype), jnp.asarray(b, dtype))
  w = _two_passes(a, b)
  u, cos, sin = w.u, w.cos, w.sin
  p = w.p - w.up[..., None] * u                                     # p' = s v

  # Small angles (cos > 0): q = p'' = s v (p' polished), M = [[c - 1, -1], [1, -1/(1 + c)]],
  # with c - 1 = -s^2 / (1 + c). Smooth in (a, b), exact identity at theta = 0.
  inv_1pc = 1.0 / (1.0 + jnp.where(cos > 0, cos, 1.0))
  small = RotationPlane(u, w.k[..., None] * p, -(sin**2) * inv_1pc, jnp.full_like(cos, -1.0),
                        jnp.full_like(cos, 1.0), -inv_1pc, cos, sin)

  # Large angles (cos <= 0): q = v = p'/|p'|, M = [[c - 1, -s], [s, c - 1]], the textbook
  # form; no 1/(1 + c) anywhere. v is orthogonal to u to working precision as long as
  # |p'| is above its rounding noise (a few eps); below, p' is noise (its direction, even
  # its component along u, is arbitrary; the compiler's choice of fused operations
  # decides it) and we rotate by exactly pi (c = -1, s = 0, an error <= 16 eps in the
  # value) in the plane of u and a coordinate axis orthogonalised against u.
  v_ok = sin > 16 * jnp.finfo(dtype).eps
  fallback = _fallback(u, in_kernel)
  v = jnp.where(v_ok[..., None], p / jnp.where(v_ok, w.s0, 1.0)[..., None], fallback)
  cos_l, sin_l = jnp.where(v_ok, cos, -1.0), jnp.where(v_ok, sin, 0.0)
  large = RotationPlane(u, v, cos_l - 1.0, -sin_l, sin_l, cos_l - 1.0, cos_l, sin_l)

  pick = lambda x, y: jnp.where(
      jnp.reshape(cos > 0, cos.shape + (1,) * (x.ndim - cos.ndim)), x, y)
  return RotationPlane(*jax.tree.map(pick, small, large))


def apply_plane(plane: RotationPlane, h: jax.Array) -> jax.Array:
  """``(1 + (u, q) M (u, q)^T) h`` in O(N): the action of a rotation on ``h``."""
  uh, qh = _dot(plane.u, h), _dot(plane.q, h)
  cu = plane.m_uu * uh + plane.m_uq * qh
  cq = plane.m_qu * uh + plane.m_qq * qh
  return h + cu[..., None] * plane.u + cq[..., None] * plane.q


def rotate(a: jax.Array, b: jax.Array, h: jax.Array) -> jax.Array:
  """``Rotation(a, b) @ h`` without forming the N x N matrix (eq. (1); O(N) memory).

  Args:
    a: <float>[..., N] rotate from this direction.
    b: <float>[..., N] towards this direction.
    h: <float>[..., N] the vector to rotate; leading axes broadcast with ``a``, ``b``.

  Returns:
    <float>[..., N], ``Rotation(a, b) @ h``. ``|result| = |h|``. Computed in at least
    float32, returned in the dtype of ``a``, ``b`` and ``h`` promoted together.

  Example::

    >>> a, b = jnp.array([1., 0., 0.]), jnp.array([0., 1., 0.])
    >>> rotate(a, b, jnp.array([1., 0., 5.]))   # -> [0., 1., 5.]
  """
  check_vectors(a=a, b=b, h=h)
  out_dtype = jnp.result_type(a, b, h, float)
  plane = rotation_plane(a, b)
  return apply_plane(plane, jnp.asarray(h, plane.u.dtype)).astype(out_dtype)


def rotate_two_pass(a: jax.Array, b: jax.Array, h: jax.Array):
  """``Rotation(a, b) @ h`` and ``cos(theta)`` (eq. (1)) in two passes over the vectors.

  The values of :func:`rotation_plane` followed by :func:`apply_plane` (the same plane,
  branches and polish, :func:`_two_passes`), equal up to rounding, without the third pass
  over the vectors that :func:`apply_plane` makes for ``U^T h``: ``u.h`` and ``q.h`` follow
  from ``a.h`` and ``b.h``, dot products of the raw inputs taken in the first pass
  (``p'.h = b^.h - c0 u.h - (u.p) u.h`` with ``p = b^ - c0 u``, ``p' = p - (u.p) u``), and
  ``Rot h = h + alpha u + beta p + gamma e_k`` (``e_k`` the fallback's coordinate axis).
  This is all RUM lam=0's forward step needs; on XLA:CPU every pass is a fused operation of
  its own with a fixed cost (issue 45).

  Args:
    a, b, h: <float>[..., N] as in :func:`rotate` (``a``, ``b`` and ``h`` of one shape).

  Returns:
    ``(Rot h, cos)``: <float>[..., N] and <float>[...], in
    :func:`~rumjax.core.precision.at_least_float32` of the three.
  """
  dtype = at_least_float32(a, b, h)
  a, b, h = (jnp.asarray(x, dtype) for x in (a, b, h))
  c1 = lambda x: x[..., None]
  # The plane as rotation_plane computes it; a.h and b.h belong to the first pass (dot
  # products of the raw inputs), and p.h, p'.h follow: p = b^ - c0 u, p' = p - (u.p) u.
  w, (ah, bh) = _two_passes(a, b, h)
  u, p, up, s0, cos, sin, k = w.u, w.p, w.up, w.s0, w.cos, w.sin, w.k
  uh, bh = ah * w.inv_a, bh * w.inv_b
  ph = bh - w.c0 * uh - up * uh                        # p'.h
  # cos > 0: U = (u, q), M = [[-s^2/(1 + c), -1], [1, -1/(1 + c)]].
  inv_1pc = 1.0 / (1.0 + jnp.where(cos > 0, cos, 1.0))
  qh = k * ph
  cu_s, cq_s = -(sin * sin) * inv_1pc * uh - qh, uh - inv_1pc * qh
  alpha_s, beta_s = cu_s - cq_s * k * up, cq_s * k
  # cos <= 0, sin above its noise: U = (u, v), v = p'/|p'|, M = [[c - 1, -s], [s, c - 1]].
  v_ok = sin > 16 * jnp.finfo(dtype).eps
  inv_s0 = jnp.where(v_ok, 1.0 / jnp.where(v_ok, s0, 1.0), 0.0)
  vh = ph * inv_s0
  cu_l, cq_l = (cos - 1.0) * uh - sin * vh, sin * uh + (cos - 1.0) * vh
  alpha_l, beta_l = cu_l - cq_l * inv_s0 * up, cq_l * inv_s0
  # Below the noise: a rotation by pi in the plane of u and f = (e_k - u_k u)/n.
  n = a.shape[-1]
  if n >= 2:
    index = jax.lax.broadcasted_iota(jnp.int32, a.shape, a.ndim - 1)
    first = u[..., 0] * u[..., 0] <= 0.5
    uk, hk = jnp.where(first, u[..., 0], u[..., 1]), jnp.where(first, h[..., 0], h[..., 1])
    n_sq = 1.0 - uk * uk
    inv_n = jnp.where(n_sq > 0, jax.lax.rsqrt(jnp.where(n_sq > 0, n_sq, 1.0)), 0.0)
    fh2 = 2.0 * (hk - uk * uh) * inv_n * inv_n         # 2 (f.h) / n
    alpha_f, gamma_f = -2.0 * uh + fh2 * uk, -fh2
    axis = (index == jnp.where(c1(first), 0, 1)).astype(dtype)
  else:                                                # N = 1: the reflection -1
    alpha_f, gamma_f, axis = -2.0 * uh, jnp.zeros_like(uh), jnp.zeros_like(a)
  small, large = cos > 0, v_ok
  pick = lambda x, y, z: jnp.where(w.ok, jnp.where(small, x, jnp.where(large, y, z)), 0.0)
  alpha = pick(alpha_s, alpha_l, alpha_f)
  beta = pick(beta_s, beta_l, 0.0)
  gamma = pick(0.0, 0.0, gamma_f)
  return h + c1(alpha) * u + c1(beta) * p + c1(gamma) * axis, cos


def rotation_matrix(a: jax.Array, b: jax.Array) -> jax.Array:
  """``Rotation(a, b)`` as an explicit matrix (eq. (1)), batched over leading axes.

  Args:
    a: <float>[..., N] rotate from this direction.
    b: <float>[..., N] towards this direction.

  Returns:
    <float>[..., N, N] in :func:`~rumjax.core.precision.at_least_float32`, orthogonal with
    determinant +1 (for N >= 2).
  """
  plane = rotation_plane(a, b)
  n = plane.u.shape[-1]
  basis = jnp.stack([plane.u, plane.q], axis=-1)  # (..., N, 2)
  m = jnp.stack([jnp.stack([plane.m_uu, plane.m_uq], -1),
                 jnp.stack([plane.m_qu, plane.m_qq], -1)], -2)  # (..., 2, 2)
  return jnp.eye(n, dtype=basis.dtype) + jnp.matmul(
      jnp.matmul(basis, m, precision=HIGHEST), jnp.swapaxes(basis, -1, -2), precision=HIGHEST)

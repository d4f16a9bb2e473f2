"""The real power ``R^lam`` of a rotation (RUM paper, section 6 and footnote 9).

The RUM paper's conclusion asks for ``lam`` in eq. (2), ``R_t = (R_{t-1})^lam Rotation(e_t,
tau_t)``, to be "not only zero or one, but any real number"; its footnote 9 defines the
power through the logarithm, ``R^lam := exp(lam log R)`` with ``log R`` skew-symmetric, so
``R^lam`` is again a rotation.

How it is computed (no ``eig``, no ``logm``; every step has a TPU lowering). A rotation is
normal: its symmetric part ``S = (R + R^T) / 2`` and skew part ``K = (R - R^T) / 2``
commute, and in each invariant plane of angle ``theta`` (``R`` = ``[[c, -s], [s, c]]``)
``S = cos(theta) 1`` and ``K = sin(theta) J``. Hence, with ``S = V diag(c_k) V^T`` from
``eigh``::

    R^lam = C(S) + K D(S),   C(c) = cos(lam theta),   D(c) = sin(lam theta) / sin(theta),

``theta_k = atan2(|K v_k|, c_k)`` in ``[0, pi]`` (``|K v_k|`` is ``sin theta_k`` to
absolute working precision, also near ``pi``, where ``arccos(c_k)`` would lose half the
digits). ``C(S)`` and ``D(S)`` are functions of a symmetric matrix, so the value does not
depend on how ``eigh`` picks eigenvectors inside its eigenspaces (every ``cos theta`` is a
double eigenvalue of ``S``; ``R = 1``, RUM's ``R_0``, has a single ``N``-fold one).

Gradients (``jax.custom_jvp``): autodiff through ``eigh`` divides by differences of
eigenvalues (NaN for the double ones); instead the tangent is the Daleckii-Krein formula
``dC(S) = V (Gamma_C o (V^T dS V)) V^T`` with divided differences ``Gamma_C[i, j] =
(C(c_i) - C(c_j)) / (c_i - c_j)``, and ``C'`` of the midpoint when ``|c_i - c_j| <=
eps^(1/3)`` (relative error ~ ``eps^(2/3)``: 2e-5 in float32, 4e-11 in float64), the
same for ``D``, plus ``dK D(S)`` and the derivatives in ``lam``. At ``R = 1`` it is exact:
``d(R^lam) = lam^2 dS + lam dK``, i.e. ``lam dK`` along the rotations (``dS = 0`` there).
Off the rotations (a non-orthogonal ``R``) the function is the extension ``C(S) + K D(S)``
above, not the analytic matrix power; only derivatives along rotations are meaningful.

The angle pi. There ``log R`` is not unique (``-1`` on a plane is the rotation by ``+pi``
and by ``-pi``, in any plane of its eigenspace), ``R^lam`` is discontinuous and its
derivative grows like ``1 / sin(theta)`` as ``theta -> pi``. For a plane with ``sin
theta = |K v| <= 64 eps`` and ``cos theta < 0`` we rotate by ``lam pi`` in the plane of two
consecutive eigenvectors ``(v_a, v_b)`` of ``eigh``'s ``-1`` eigenspace, oriented by the
sign of ``v_b^T K v_a`` (so it agrees with ``R``'s own orientation when that is above the
rounding noise); that plane is treated as constant by the derivative. Values and gradients
stay finite (every ``1 / sin theta`` is clamped at ``64 eps``) and ``R^lam`` orthogonal.

Precision: computed in :func:`~rumjax.core.precision.at_least_float32` of ``R`` with
every product at ``Precision.HIGHEST``; one Newton-Schulz step ``X (3 - X^T X) / 2`` at
the end takes the rounding, amplified like ``eps / sin theta`` near ``pi``, back to
orthogonality: ``|X^T X - 1|`` is a few ``eps`` for ``sin theta >~ sqrt(eps)`` and about
``(eps / sin theta)^2`` between ``64 eps`` and ``sqrt(eps)`` (1e-8 in float64 at ``sin theta
= 1e-12``).
"""

import numbers

import jax
import jax.numpy as jnp

from rumjax.core.precision import HIGHEST, at_least_float32

Array = jax.Array


def _mm(a, b):
  return jnp.matmul(a, b, precision=HIGHEST)


def _t(a):
  return jnp.swapaxes(a, -1, -2)


def _pi_tolerance(dtype):
  return 64 * jnp.finfo(dtype).eps


def _over_sin(num, sin, theta, limit, tau):
  """``num / sin(theta)``: ``limit`` at ``theta = 0``; ``sin`` clamped at ``tau`` only near pi."""
  near0 = theta < 1.5
  den = jnp.where(near0, jnp.where(sin > 0, sin, 1.0), jnp.maximum(sin, tau))
  return jnp.where(near0 & (sin <= 0), limit, num / den)


class _Spectrum:
  """``eigh`` of ``S``, the angles and the scalar functions of this module's docstring."""

  def __init__(self, r, lam):
    dtype, n = r.dtype, r.shape[-1]
    eps, tau = jnp.finfo(dtype).eps, _pi_tolerance(dtype)
    self.k = 0.5 * (r - _t(r))
    self.c, self.v = jnp.linalg.eigh(0.5 * (r + _t(r)))   # ascending c
    self.kv = _mm(self.k, self.v)
    s = jnp.sqrt(jnp.sum(self.kv * self.kv, axis=-2))   # |K v_k| = sin(theta_k)
    theta = jnp.arctan2(s, self.c)
    radius = jnp.sqrt(self.c * self.c + s * s)
    sin = s / jnp.where(radius > 0, radius, 1.0)
    # The angle pi (see the module docstring): pairs (2i, 2i + 1) of the -1 eigenspace,
    # which eigh puts first.
    at_pi = (self.c < 0) & (s <= tau)
    m = n // 2
    pair = at_pi[..., 0:2 * m:2] & at_pi[..., 1:2 * m:2]   # (..., m)
    va, vb = self.v[..., :, 0:2 * m:2], self.v[..., :, 1:2 * m:2]
    sign = jnp.where(jnp.sum(vb * self.kv[..., :, 0:2 * m:2], axis=-2) < 0, -1.0, 1.0)
    w = (pair * sign).astype(dtype)[..., None, :]
    self.j_pi = _mm(vb * w, _t(va)) - _mm(va * w, _t(vb))   # v_a -> v_b, v_b -> -v_a
    paired = jnp.repeat(pair, 2, axis=-1)
    if n % 2:
      paired = jnp.concatenate([paired, jnp.zeros_like(paired[..., :1])], axis=-1)
    self.paired = paired

    lt = lam * theta
    self.cf = jnp.cos(lt)                                                          # C
    self.df = jnp.where(paired, 0.0, _over_sin(jnp.sin(lt), sin, theta, lam, tau))  # D
    self.dc_dlam = -theta * jnp.sin(lt)
    self.dd_dlam = jnp.where(paired, 0.0,
                             _over_sin(theta * jnp.cos(lt), sin, theta, 1.0, tau))
    self.theta, self.lam, self.tau = theta, lam, tau
    self.tol = eps ** (1 / 3)       # divided differences: switch to the derivative
    self.x_series = eps ** (1 / 3)  # theta^2 below which D' is its Taylor series

  def c_prime(self, theta):
    """``dC/dc = lam sin(lam theta) / sin(theta)`` (``lam^2`` at ``theta = 0``)."""
    lam = self.lam
    return lam * _over_sin(jnp.sin(lam * theta), jnp.sin(theta), theta, lam, self.tau)

  def d_prime(self, theta):
    """``dD/dc``: ``(sin(l t) cos t - l cos(l t) sin t) / sin^3 t``; near 0 its series."""
    lam, x = self.lam, theta * theta
    a = (1 - lam * lam) / 6
    b = (1 - lam * lam) * (7 - 3 * lam * lam) / 360
    series = -2 * lam * (a + (2 * b + a / 6) * x)
    th = jnp.where(x < self.x_series, 1.0, theta)
    sin = jnp.maximum(jnp.sin(th), self.tau)
    direct = (jnp.sin(lam * th) * jnp.cos(th) - lam * jnp.cos(lam * th) * jnp.sin(th)) / sin**3
    return jnp.where(x < self.x_series, series, direct)

  def divided(self, f, f_prime):
    """``Gamma[i, j] = (f_i - f_j) / (c_i - c_j)``, ``f'`` at the midpoint when close."""
    diff = self.c[..., :, None] - self.c[..., None, :]
    far = jnp.abs(diff) > self.tol
    ratio = (f[..., :, None] - f[..., None, :]) / jnp.where(far, diff, 1.0)
    # The angle of the midpoint (c_i + c_j) / 2 = cos(sigma) cos(delta), without the
    # cancellation of arccos near c = 1: 1 - c_mid = 2 sin^2(sigma/2) + 2 cos(sigma) sin^2(delta/2).
    sigma = 0.5 * (self.theta[..., :, None] + self.theta[..., None, :])
    delta = 0.5 * (self.theta[..., :, None] - self.theta[..., None, :])
    half = jnp.sin(0.5 * sigma) ** 2 + jnp.cos(sigma) * jnp.sin(0.5 * delta) ** 2
    mid = 2 * jnp.arcsin(jnp.sqrt(jnp.clip(half, 0.0, 1.0)))
    return jnp.where(far, ratio, f_prime(mid))


@jax.custom_jvp
def _power(r, lam):
  sp = _Spectrum(r, lam)
  return _mm(sp.v * sp.cf[..., None, :] + sp.kv * sp.df[..., None, :], _t(sp.v)) \
      + jnp.sin(lam * jnp.pi) * sp.j_pi


@_power.defjvp
def _power_jvp(primals, tangents):
  r, lam = primals
  dr, dlam = tangents
  sp = _Spectrum(r, lam)
  v, vt = sp.v, _t(sp.v)
  out = _mm(v * sp.cf[..., None, :] + sp.kv * sp.df[..., None, :], vt) \
      + jnp.sin(lam * jnp.pi) * sp.j_pi
  ds, dk = 0.5 * (dr + _t(dr)), 0.5 * (dr - _t(dr))
  x = _mm(vt, _mm(ds, v))
  not_paired = ~(sp.paired[..., :, None] | sp.paired[..., None, :])
  g = sp.divided(sp.cf, sp.c_prime) * x
  h = jnp.where(not_paired, sp.divided(sp.df, sp.d_prime), 0.0) * x
  eye = jnp.eye(r.shape[-1], dtype=r.dtype)
  g = g + dlam * sp.dc_dlam[..., None, :] * eye
  h = h + dlam * sp.dd_dlam[..., None, :] * eye
  d_mat = _mm(v * sp.df[..., None, :], vt)
  d_out = _mm(_mm(v, g) + _mm(sp.kv, h), vt) + _mm(dk, d_mat) \
      + dlam * jnp.pi * jnp.cos(lam * jnp.pi) * sp.j_pi
  return out, d_out


def check_power(lam) -> None:
  """A concrete ``lam`` must be a real number >= 0 (traced values are not checked)."""
  if isinstance(lam, bool) or (isinstance(lam, numbers.Number) and not lam >= 0):
    raise ValueError(f"lam={lam!r} is not supported: the power of a rotation needs a real "
                     "lam >= 0.")


def rotation_power(r: Array, lam) -> Array:
  """The principal power ``R^lam = exp(lam log R)`` of a rotation (footnote 9 of the paper).

  Args:
    r: <float>[..., N, N] rotations (orthogonal, determinant +1), batched over leading
      axes; computed in at least float32.
    lam: a real ``lam >= 0`` (a Python number or a scalar array, differentiable).

  Returns:
    <float>[..., N, N] ``R^lam``, a rotation, in ``at_least_float32(r)``: the identity
    for ``lam = 0`` and ``R`` for ``lam = 1`` (exactly, for a Python ``lam``), ``R R``
    for ``lam = 2``, ``R^a R^b = R^(a+b)`` for angles with ``(a + b) theta < pi``. At an
    angle of exactly ``pi`` (where the principal logarithm is not unique) it rotates by
    ``lam pi`` in a plane of ``R``'s ``-1`` eigenspace chosen as the module docstring
    says; values and gradients (in ``R`` and ``lam``) are finite everywhere.
  """
  check_power(lam)
  dtype = at_least_float32(r)
  r = jnp.asarray(r, dtype)
  if r.ndim < 2 or r.shape[-1] != r.shape[-2]:
    raise ValueError(f"r must have shape (..., N, N); got {r.shape}.")
  if isinstance(lam, numbers.Number):
    if lam == 0:
      return jnp.broadcast_to(jnp.eye(r.shape[-1], dtype=dtype), r.shape)
    if lam == 1:
      return r
  p = _power(r, jnp.asarray(lam, dtype))
  # One Newton-Schulz step towards the nearest orthogonal matrix: X (3 - X^T X) / 2.
  return 1.5 * p - 0.5 * _mm(p, _mm(_t(p), p))

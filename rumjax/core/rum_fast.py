"""A fast RUM scan: Algorithm 1 with a hand-written backward pass (``jax.custom_vjp``).

:func:`rumjax.core.rum.rum_scan` with ``impl="fast"`` (the default) runs :func:`fast_scan`;
``impl="reference"`` runs the plain ``lax.scan`` of ``rum_step`` that autodiff
differentiates. Both compute the same function; ``tests/test_rum_fast.py`` checks values
and gradients against each other.

The rotation of a step is :func:`rumjax.core.rotation.rotation_plane`, the same description
of eq. (1) the reference uses, ``Rotation(e, tau) = 1 + U M U^T`` with ``U = (u, q)``
(<B, N, 2>) and a 2 x 2 ``M``: one step costs the input projection, the ``(Nh, 2 Nh)``
matmul, a few O(Nh) dot products and, for ``lam=1``, two passes over ``R``. Degenerate
cases and the numerics near anti-parallel ``e``, ``tau`` are those of
:mod:`rumjax.core.rotation` (values and gradients identical to the reference's, up to
rounding): the rotation stays orthogonal to working precision up to and through
``theta = pi``. (Until issue 26 this file used the closed form
``1 - d d^T / (1 + cos theta) + 2 b a^T``, ``d = a + b``, which amplifies the rounding of
``|a|, |b| != 1`` by ``1 / (1 + cos theta)``: max ``|R^T R - 1|`` reached 2.5e-4 in float32
on small random cases.) Not forward-mode differentiable (``jax.custom_vjp``): use
``impl="reference"`` for ``jax.jvp`` / ``jacfwd``.

Dtypes, as in :mod:`rumjax.core.rum`: the gate matmuls, the pre-activations and the hidden
states have the computation dtype ``dtype`` (that of ``xs`` and the parameters);
the plane, ``R``, its cotangent ``Q = dL/dR``, the saved ``R_{t-1} [u, q, Rot h]`` and
``cos`` have ``promote_types(dtype, float32)``, with every O(Nh^2) product at
``lax.Precision.HIGHEST``. The weight gradients are accumulated over the steps in
``promote_types(dtype, float32)`` and returned in the parameters' dtype.

What the backward pass keeps. The forward scan saves per step only ``h_t``, the
pre-activations ``tau_t``, ``u'_t``, ``e_t`` (three arrays: the batched planes below read
``tau`` and ``e`` whole, and slicing them out of one <T, B, 3 Nh> array cost XLA:CPU two
copies of 0.4 ms each at the recall shape) and for ``lam=1`` ``R_{t-1} [u_t, q_t, Rot_t h_{t-1}]``
(``4 Nh`` or ``7 Nh`` numbers per example). Every input of the rotation is saved, not
recomputed: on a GPU a float32 matmul runs as TF32 by default and two matmuls of the same
numbers (``x W_x`` and ``x W_x[:, 2Nh:]``) need not round alike, and the rebuild of
``R_{t-1}`` below must use the very rotation of the forward pass (issue 44). For ``lam=0``
the backward pass computes the planes of all T steps at once from the saved ``tau_t`` and
``e_t`` (the forward's :func:`rumjax.core.rotation.rotation_plane`, batched over time: a
few large operations, not a dozen small ones in every step of the scan; O(T B Nh) more
memory for the duration of the backward pass); ``lam=1`` saves the plane. For both,
``1/|e_t|``, ``1/|tau_t|`` and the fallback plane's frame (:func:`_fallback_frame`) are
computed the same way, batched before the backward scan. The backward
scan recomputes the O(Nh) quantities of the step and applies the chain rule by hand: the
head (gate, activation, time normalization), the rotation ``(tau, e, h) -> (Rot h, plane)``
(:func:`_rotate_bwd`, the derivative of eq. (1) in exact arithmetic, O(B Nh) per step; until
issue 45 ``jax.vjp`` of :func:`_rotate`, whose transposes of both branches made the CPU step
half again as slow) and the O(Nh^2) memory parts.
For ``lam=1`` the memory ``R_t`` is *not* saved: the backward scan starts from ``R_T``
and rebuilds ``R_{t-1} = R_t Rot_t^T = R_t - (R_{t-1} U) M U^T`` (rotations are
orthogonal) while it carries the cotangent ``Q_t = dL/dR_t``; so the memory of a
training step grows only by O(T B Nh) with the length. With ``G = R_{t-1}^T Q_t``
(never formed)::

    dL/dU = G U M^T + G^T U M,   dL/dM = U^T G U = (R_{t-1} U)^T (Q_t U),
    Q_{t-1} = Q_t Rot_t^T + w (Rot_t h_{t-1})^T,   w = dL/d(R_t h_{t-1}).

Per step, ``lam=1`` reads or writes the ``B x Nh x Nh`` matrices 2 times forward (one
product, one rank-2 update) and 5 times backward (three products, two rank updates; below
hidden size 64 a sixth, the rank update of ``Q^T``, see :func:`_bwd_lam1`). On XLA:CPU
these passes and the many small O(B Nh) operations set the speed, not FLOPs (see
WORKSPACE.md for what was tried).
"""

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from rumjax.core.precision import HIGHEST, at_least_float32, resolve_precision
from rumjax.core.rotation import (RotationPlane, apply_plane, first_coordinates,
                                  inverse_norms, rotate_two_pass, rotation_plane)

Array = jax.Array


def _sum(x, y):
  return jnp.sum(x * y, axis=-1, keepdims=True)


# ------------------------------------------------------------------- per-step algebra


def _rotate(tau, e, h, in_kernel=False):
  """The plane of ``Rotation(e, tau)`` (eq. (1)) and ``Rot h``, in at least float32.

  The one description of the rotation (:func:`rumjax.core.rotation.rotation_plane`); the
  backward pass differentiates it by hand (:func:`_rotate_bwd`). ``in_kernel``: called
  inside the Pallas kernel (:mod:`rumjax.core.rum_kernel`; the same values).
  """
  plane = rotation_plane(e, tau, in_kernel)
  return apply_plane(plane, h.astype(plane.u.dtype)), plane


def _inverse_norms(tau, e):
  """``(1/|e|, 1/|tau|)``, both 0 unless ``e != 0`` and ``tau != 0`` (the identity)."""
  return inverse_norms(e, tau)[:2]


def _fallback_frame(u, in_kernel=False):
  """``(axis, u_k, 1/n)`` of the fallback ``v = f(u) = (axis - u_k u) / n`` of
  :func:`rumjax.core.rotation._fallback`: ``axis`` (like ``u``) the first coordinate
  axis if ``u_0^2 <= 1/2``, else the second; ``u_k`` the coordinate of ``u`` along it;
  ``n = sqrt(1 - u_k^2)``, ``1/n`` 0 where ``n = 0`` and for ``N = 1``. Functions of ``u``
  alone: the backward scans compute them for all steps at once (:func:`_bwd`).
  """
  index = jax.lax.broadcasted_iota(jnp.int32, u.shape, u.ndim - 1)
  u0, u1 = first_coordinates(u, in_kernel) if u.shape[-1] > 1 else (u[..., 0], u[..., 0])
  first = u0 * u0 <= 0.5
  uk = jnp.where(first, u0, u1)
  axis = jnp.where(first[..., None], (index == 0).astype(u.dtype), (index == 1).astype(u.dtype))
  n_sq = 1.0 - uk * uk
  inv_n = jnp.where(n_sq > 0, jax.lax.rsqrt(jnp.where(n_sq > 0, n_sq, 1.0)), 0.0)
  if u.shape[-1] < 2:
    inv_n = jnp.zeros_like(inv_n)
  return axis, uk, inv_n


def _rotate_bwd(tau, e, h, p: RotationPlane, gx, gp: RotationPlane, in_kernel=False,
                inv_norms=None, frame=None):
  """The VJP of :func:`_rotate` by hand: ``(dL/dtau, dL/de, dL/dh)`` given ``gx = dL/d(Rot h)``
  and the cotangents ``gp`` of the plane (``gp.u``, ``gp.q`` None: zero, as for
  ``lam=0``; ``gp.sin`` must be zero: the fast path never reads ``sin``). ``inv_norms``:
  ``(1/|e|, 1/|tau|)`` as :func:`_inverse_norms` returns them, and ``frame``: the
  fallback's ``(axis, u_k, 1/n)`` (:func:`_fallback_frame` of ``p.u``), if already
  computed (the backward scans take both from one batched pass
  before the scan).

  It differentiates eq. (1) in exact arithmetic: ``u = e/|e|``, ``b = tau/|tau|``,
  ``c = u.b``, ``p = b - c u``, ``s = |p|``, ``v = p/s``, ``Rot h = h + U M U^T h`` with
  :func:`rumjax.core.rotation.rotation_plane`'s two branches: ``cos > 0``: ``U = (u, p)``,
  ``M = [[c - 1, -1], [1, -1/(1 + c)]]``; ``cos <= 0``: ``U = (u, v)``,
  ``M = [[c - 1, -s], [s, c - 1]]``; below the rounding noise of ``s`` the fallback
  ``v = f(u)`` (the coordinate axis of :func:`rumjax.core.rotation._fallback`
  orthogonalised against ``u``) with constant ``c = -1``, ``s = 0``; ``e = 0`` or
  ``tau = 0``: the identity, no gradient to ``e``, ``tau``. The forward pass's polish
  (Gram-Schmidt twice, the renormalisation of ``(c, s)``, its Newton step) is the identity
  in exact arithmetic and is not differentiated, and so are ``|u| = 1``, ``u.q = 0``,
  ``|v| = 1`` and ``b = c u + p``, which turn every dot product but four (six more with
  ``gp.u``, ``gp.q``; two norms) into products of numbers. This equals autodiff of
  :func:`_rotate` up to rounding (``tests/test_rum_fast_vjp.py``, float64); autodiff of
  both branches made the fast path's CPU training step half again as slow (issue 45).
  Works on <B, N> and on <N> (one example, the kernel).
  """
  c1 = lambda x: x[..., None]
  dot = lambda x, y: jnp.sum(x * y, axis=-1)
  dtype = p.u.dtype
  tau, e, h, gx = (jnp.asarray(x, dtype) for x in (tau, e, h, gx))
  u, q, c, s = p.u, p.q, p.cos, p.sin
  # x = h + U M alpha with alpha = U^T h; beta = U^T gx.
  uh, qh, ug, qg = dot(u, h), dot(q, h), dot(u, gx), dot(q, gx)
  cu, cq = p.m_uu * uh + p.m_uq * qh, p.m_qu * uh + p.m_qq * qh
  bu, bq = p.m_uu * ug + p.m_qu * qg, p.m_uq * ug + p.m_qq * qg
  gh = gx + c1(bu) * u + c1(bq) * q
  # dL/du = gu = cu gx + bu h (+ gp.u), dL/dq = gq = cq gx + bq h (+ gp.q); their dot
  # products u.gu, u.gq, q.gq:
  uu, uq, vq = cu * ug + bu * uh, cq * ug + bq * uh, cq * qg + bq * qh
  if gp.u is not None:
    uu, uq, vq = uu + dot(u, gp.u), uq + dot(u, gp.q), vq + dot(q, gp.q)
  g_uu, g_uq = gp.m_uu + ug * uh, gp.m_uq + ug * qh
  g_qu, g_qq = gp.m_qu + qg * uh, gp.m_qq + qg * qh
  inv_e, inv_t = _inverse_norms(tau, e) if inv_norms is None else inv_norms
  b = tau * c1(inv_t)
  # cos > 0: q = p = b - c u, m_uu = c - 1, m_qq = -1/(1 + c); b = c u + q.
  k = 1.0 / (1.0 + jnp.where(c > 0, c, 1.0))
  gc_small = g_uu + g_qq * k * k + gp.cos - uq
  # cos <= 0, s above its noise: q = v = p/s, m_uu = m_qq = c - 1, m_qu = -m_uq = s;
  # dL/dp = (gq - (v.gq) v)/s + gs v with gs = g_qu - g_uq; b = c u + s v.
  v_ok = s > 16 * jnp.finfo(dtype).eps
  inv_s = jnp.where(v_ok, 1.0 / jnp.where(v_ok, s, 1.0), 0.0)
  gs = g_qu - g_uq
  u_gp = inv_s * uq                                                  # u.(dL/dp)
  gc_large = g_uu + g_qq + gp.cos - u_gp
  # The fallback v = f(u) = (axis - u_k u)/n, n = sqrt(1 - u_k^2): dL/du gets
  # (-u_k gq + axis (u_k (v.gq)/n - u.gq)) / n.
  axis, uk, inv_n = _fallback_frame(u, in_kernel) if frame is None else frame
  fb_axis = uk * vq * inv_n - uq
  # Per branch: dL/db = coef_q gq + coef_u u (+ gs v), dL/du = gu + coef_gq gq + coef_b b
  # (+ fallback terms), and their dot products with b and u.
  small, large = c > 0, v_ok
  pick = lambda x, y, z: jnp.where(small, x, jnp.where(large, y, z))
  zero = jnp.zeros_like(c)
  gb_q = pick(1.0, inv_s, zero)                  # gb = gb_q gq + gb_u u + gb_v q
  gb_v = pick(zero, gs - inv_s * vq, zero)
  gb_u = pick(gc_small, gc_large, zero)
  gu_q = pick(-c, -c * inv_s, -uk * inv_n)       # gu' = gu + gu_q gq + gu_v q + gu_b b
  gu_v = pick(zero, -c * (gs - inv_s * vq), zero)
  gu_b = pick(gc_small, gc_large, zero)
  gu_axis = pick(zero, zero, inv_n * fb_axis)
  b_gb = pick(c * uq + vq + gc_small * c, c * u_gp + s * gs + gc_large * c, zero)
  u_gu = pick(uu - c * uq + gc_small * c, uu - c * u_gp + gc_large * c,
              uu + inv_n * uk * (uk * vq * inv_n - 2.0 * uq))
  # Through u = e/|e| and b = tau/|tau|: dL/dtau = (gb - (b.gb) b)/|tau|,
  # dL/de = (gu' - (u.gu') u)/|e|, written out as sums of the vectors gx, h, u, q, b,
  # axis (gp.u, gp.q) with per-example coefficients: fewer operations per coordinate than
  # forming gu, gq, gb, b and gu' (XLA:CPU fuses the scalar arithmetic into the vector
  # operations; lam=0's training step at the recall shape ~3% faster).
  coef = (inv_t * gb_q * cq, inv_t * gb_q * bq, inv_t * gb_u, inv_t * gb_v,
          -inv_t * b_gb,
          inv_e * (cu + gu_q * cq), inv_e * (bu + gu_q * bq), -inv_e * u_gu, inv_e * gu_v,
          inv_e * gu_b, inv_e * gu_axis, inv_t * gb_q, inv_e * gu_q, inv_e)
  (t_gx, t_h, t_u, t_q, t_b, e_gx, e_h, e_u, e_q, e_b, e_axis, t_gq, e_gq,
   e_gu) = map(c1, coef)
  gtau = t_gx * gx + t_h * h + t_u * u + t_q * q + t_b * b
  ge = e_gx * gx + e_h * h + e_u * u + e_q * q + e_b * b + e_axis * axis
  if gp.u is not None:
    gtau = gtau + t_gq * gp.q
    ge = ge + e_gu * gp.u + e_gq * gp.q
  return gtau, ge, gh


def _m_rows(p: RotationPlane):
  """``U M^T`` (<B, N> each): ``R Rot = R + (R u) r_u^T + (R q) r_q^T``."""
  c = lambda m: m[..., None]
  return c(p.m_uu) * p.u + c(p.m_uq) * p.q, c(p.m_qu) * p.u + c(p.m_qq) * p.q


def _m_cols(p: RotationPlane):
  """``U M`` (<B, N> each): ``Q Rot^T = Q + (Q u) c_u^T + (Q q) c_q^T``."""
  c = lambda m: m[..., None]
  return c(p.m_uu) * p.u + c(p.m_qu) * p.q, c(p.m_uq) * p.u + c(p.m_qq) * p.q


class _Cfg(NamedTuple):
  lam: int
  eta: Optional[float]
  activation: Callable
  update_gate: bool
  unroll: int
  return_cos: bool
  precision: Optional[jax.lax.Precision] = None   # of the gate matmuls and their gradients


def _mm(cfg: _Cfg, a, b):
  """A gate matmul (``x W_x``, ``h W_h`` and their transposes) at the policy's precision."""
  return jnp.matmul(a, b, precision=cfg.precision)


def _head(cfg: _Cfg, h, upre, e, rh):
  """``h~ = f(e + R h)``, the gate ``sigmoid(upre)`` and the time normalization; returns
  (h_t, aux).

  In the dtype of ``e`` (``rh`` is rounded to it); the norm of ``h'`` in at least float32.
  Works on <B, N> and on <N> (one example, the kernel of :mod:`rumjax.core.rum_kernel`).
  """
  z = e + rh.astype(e.dtype)
  ht = cfg.activation(z)
  hn, ug = ht, None
  if cfg.update_gate:
    ug = jax.nn.sigmoid(upre)
    hn = ht + ug * (h - ht)
  hp = hn
  inv = None
  if cfg.eta is not None:
    hp32 = hp.astype(at_least_float32(hp))
    sq = _sum(hp32, hp32)
    inv = jnp.where(sq > 0, jax.lax.rsqrt(jnp.where(sq > 0, sq, 1.0)), 0.0)
    hn = ((cfg.eta * inv) * hp32).astype(hp.dtype)
  return hn, (z, ht, ug, hp, inv)


def _head_bwd(cfg: _Cfg, h, aux, g):
  """Cotangents of (h_{t-1} via the gate, u' pre-activation, z) given ``g = dL/dh_t``."""
  z, ht, ug, hp, inv = aux
  if cfg.eta is not None:
    hu, g32 = hp.astype(inv.dtype) * inv, g.astype(inv.dtype)
    g = ((cfg.eta * inv) * (g32 - hu * _sum(hu, g32))).astype(g.dtype)
  if cfg.update_gate:
    dht = g - ug * g
    dgate = (g * (h - ht)) * (ug * (1.0 - ug))
    dh = ug * g
  else:
    dht, dgate, dh = g, None, None
  _, f_vjp = jax.vjp(cfg.activation, z)
  (dz,) = f_vjp(dht)
  return dh, dgate, dz


def _rows(v, m):
  """``v_k^T m`` for the rows ``v_k`` of ``v``: <B, k, N>, <B, N, N> -> <B, k, N>."""
  return jnp.einsum("bkj,bji->bki", jax.lax.optimization_barrier(v), m,
                    precision=HIGHEST)


def _cols(m, v):
  """``m v_k`` for the rows ``v_k`` of ``v``: <B, N, N>, <B, k, N> -> <B, N, k>.

  (The <B, N, k> output layout is faster than <B, k, N> on XLA:CPU.)"""
  return jnp.einsum("bij,bkj->bik", m, jax.lax.optimization_barrier(v),
                    precision=HIGHEST)


def _rank_update(m, lefts, rights):
  """``m + sum_i l_i r_i^T`` for a batch, in one pass over ``m`` (elementwise).

  The factors are materialised first (``optimization_barrier``): XLA:CPU would otherwise
  recompute them for every element of ``m``, several times slower.
  """
  left, right = jax.lax.optimization_barrier(
      (jnp.stack(lefts, -1), jnp.stack(rights, -1)))
  return m + sum(left[:, :, None, i] * right[:, None, :, i] for i in range(len(lefts)))


# ------------------------------------------------------------------------ forward


def _cell(cfg: _Cfg, params, h, x, read=None):
  """One step of Algorithm 1 from ``h_{t-1}`` and the input ``x_t``.

  ``read(v)`` returns ``R_{t-1} v_k`` for the rows of ``v`` (``lam=1``). Returns
  ``h_t`` and ``(pre-activations (tau, u', e), the plane, Rot h, R_{t-1} [u, q, Rot h],
  cos)``; for ``lam=0`` the plane and ``R_{t-1} [...]`` are None: its step needs only
  ``Rot h``, computed in two passes (:func:`rumjax.core.rotation.rotate_two_pass`).
  """
  kernel_x, bias, kernel_h = params
  n = kernel_h.shape[0]
  # The input projection stays inside the step: hoisted out of the scan it would write
  # and read back T B 3Nh numbers, slower for the small inputs of the synthetic tasks.
  xp = _mm(cfg, x, kernel_x) + bias
  e = xp[:, 2 * n:]
  gates = xp[:, :2 * n] + _mm(cfg, h, kernel_h)
  pre = (gates[:, :n], gates[:, n:], e)               # tau, u', e: three arrays, not one
  if not cfg.lam:
    x, cos = rotate_two_pass(e, pre[0], h)
    hn, _ = _head(cfg, h, pre[1], e, x)
    return hn, (pre, None, x, None, cos)
  x, p = _rotate(pre[0], e, h)
  y = read(jnp.stack([p.u, p.q, x], 1))
  hn, _ = _head(cfg, h, pre[1], e, y[:, 2])
  return hn, (pre, p, x, y, p.cos)


def _outputs(cfg, save, hn, saved):
  """The scan's outputs per step: ``h_t``, what the backward pass reads (``save``: the
  pre-activations; for ``lam=1`` also the plane, ``Rot h`` and ``R_{t-1} [u, q, Rot h]``)
  and ``cos`` (``return_cos``). (For ``lam=0`` computing the planes again, for all steps
  at once before the backward scan, is cheaper on XLA:CPU than writing them per step; for
  ``lam=1`` saving them is.)"""
  pre, p, x, y, cos = saved
  kept = ((pre, p, x, y) if cfg.lam else (pre, None, None, None)) if save else None
  return hn, kept, (cos if cfg.return_cos else None)


def _forward_lam0(cfg: _Cfg, params, xs, h0, save: bool):
  def step(h, x):
    hn, saved = _cell(cfg, params, h, x)
    return hn, _outputs(cfg, save, hn, saved)
  return jax.lax.scan(step, h0, xs, unroll=cfg.unroll)


def _forward_lam1(cfg: _Cfg, params, xs, carry0, save: bool):
  def step(carry, x):
    s, h = carry                                   # s = R_{t-1}^T (row products are faster)
    hn, saved = _cell(cfg, params, h, x, lambda v: _rows(v, s))
    _, p, _, y, _ = saved
    # R_t = R_{t-1} Rot_t = R_{t-1} + (R_{t-1} u) r_u^T + (R_{t-1} q) r_q^T, transposed.
    s = _rank_update(s, list(_m_rows(p)), [y[:, 0], y[:, 1]])
    return (s, hn), _outputs(cfg, save, hn, saved)

  r0, h0 = carry0
  (s, h), out = jax.lax.scan(step, (jnp.swapaxes(r0, 1, 2), h0), xs, unroll=cfg.unroll)
  return (jnp.swapaxes(s, 1, 2), h), out


def _forward(cfg: _Cfg, params, xs, carry0, save: bool):
  if cfg.lam:
    return _forward_lam1(cfg, params, xs, carry0, save)
  return _forward_lam0(cfg, params, xs, carry0, save)


def _results(cfg, final, hs, cos):
  return (final, hs) + ((cos,) if cfg.return_cos else ())


def _primal(cfg, params, xs, carry0):
  final, (hs, _, cos) = _forward(cfg, params, xs, carry0, save=False)
  return _results(cfg, final, hs, cos)


def _fwd(cfg, params, xs, carry0):
  final, (hs, saved, cos) = _forward(cfg, params, xs, carry0, save=True)
  h0 = carry0[1] if cfg.lam else carry0
  res = (params, xs, h0, hs, saved, final[0] if cfg.lam else None)
  return _results(cfg, final, hs, cos), res


# ----------------------------------------------------------------------- backward


def _cell_bwd(cfg: _Cfg, kernel_h, h, saved, g, dcos, memory=None):
  """The chain rule through one step, given ``g = dL/dh_t``.

  ``memory(w, x, p)`` (``lam=1``) handles ``R_{t-1}``: given ``w = dL/d(R_{t-1} x)``
  it returns ``dL/dx``, the cotangents of ``u``, ``q`` and ``M`` through ``R_t`` and
  something to pass on (``aux``). Returns ``dL/dh_{t-1}``, the cotangent of the input
  projection ``x W_xh + b`` (<B, 3 Nh>) and ``aux``.
  """
  (tau, upre, e), p, x, y, inv_norms, frame = saved
  if x is None:                                 # lam=0: the plane comes from _bwd
    x = apply_plane(p, h.astype(p.u.dtype))
  _, aux = _head(cfg, h, upre, e, y[:, 2] if cfg.lam else x)
  dh_gate, dgate, w = _head_bwd(cfg, h, aux, g)
  w = w.astype(x.dtype)
  zero = jnp.zeros_like(p.cos)
  if cfg.lam:
    dx, (du, dq, dms), aux = memory(w, x, p)
  else:
    dx, du, dq, dms, aux = w, None, None, (zero,) * 4, None
  dcos = dcos if cfg.return_cos else zero
  dtau, de, dh = _rotate_bwd(tau, e, h, p, dx,
                            RotationPlane(du, dq, *dms, dcos, zero),
                            inv_norms=inv_norms, frame=frame)
  dtau, de, dh = dtau.astype(tau.dtype), de.astype(e.dtype), dh.astype(h.dtype)
  if cfg.update_gate:
    dh = dh + dh_gate
  else:
    dgate = jnp.zeros_like(dtau)
  dpre = jnp.concatenate([dtau, dgate], axis=-1)
  dz = w.astype(de.dtype)
  return (dh + _mm(cfg, dpre, kernel_h.T), jnp.concatenate([dpre, de + dz], axis=-1), aux)


def _accumulate(cfg: _Cfg, params, acc, h, x, dxp):
  """Adds one step's weight gradients to ``acc`` (at least float32); returns it and
  ``dL/dx_t``.

  (Per step, not one matmul after the scan: that would write and read back T B 3Nh
  numbers, slower at the synthetic tasks' shapes. ``x^T`` and ``h^T`` are materialised
  first: a product contracting the batch axis of an untransposed operand is not one
  XLA:CPU hands to its fast (YNNPACK) matmul, and the two took a fifth of lam=0's step;
  with the copies, lam=0's training step at the recall shape is ~3% faster.)"""
  kernel_x, _, kernel_h = params
  dkx, db, dkh = acc
  n = kernel_h.shape[0]
  mm = lambda a, b: jnp.matmul(a, b, precision=cfg.precision,
                               preferred_element_type=dkx.dtype)
  xt, ht = jax.lax.optimization_barrier((x.T, h.T))
  acc = (dkx + mm(xt, dxp), db + jnp.sum(dxp.astype(db.dtype), axis=0),
         dkh + mm(ht, dxp[:, :2 * n]))
  return acc, _mm(cfg, dxp, kernel_x.T)


def _bwd_lam0(cfg: _Cfg, params, inp, h_prev, acc, dh_final):
  kernel_x, bias, kernel_h = params

  def step(carry, inp):
    dh_next, acc = carry
    t, saved, x, ghs, dcos = inp
    h = h_prev(t)
    dh, dxp, _ = _cell_bwd(cfg, kernel_h, h, saved, dh_next + ghs, dcos)
    acc, dx = _accumulate(cfg, params, acc, h, x, dxp)
    return (dh, acc), dx

  (dh0, acc), dxs = jax.lax.scan(step, (dh_final, acc), inp, reverse=True,
                                 unroll=cfg.unroll)
  return dh0, acc, dxs


# lam=1's backward carries Q^T beside Q below this hidden size (see _bwd_lam1).
CARRY_QT_BELOW = 64


def _bwd_lam1(cfg: _Cfg, params, inp, h_prev, acc, r_final, ct_final):
  """The backward scan carries ``R_t`` and ``Q_t = dL/dR_t``: it rebuilds
  ``R_{t-1} = R_t Rot_t^T = R_t - (R_{t-1} u) r_u^T - (R_{t-1} q) r_q^T`` from the saved
  ``R_{t-1} [u, q]`` and accumulates ``Q_{t-1} = Q_t Rot_t^T + w x^T``.

  ``Q u`` and ``Q q`` are a product of each matrix with 2 columns (:func:`_cols`). Below
  a hidden size of :data:`CARRY_QT_BELOW` the scan also carries ``Q_t^T``. ``Q^T`` gets
  the same rank-3 update transposed, so it is bitwise the transpose of ``Q_t`` (the same
  products, summed in the same order). ``Q u`` and ``Q q`` are then row products
  ``u^T Q^T``, like every other product of the scan.
  - The trade-off is one more pass over a matrix per step against one slow product.
  - Measured on XLA:CPU (2-core AMD EPYC, training step, one process; session 26):
    - at Nh 50 (recall) carrying ``Q^T`` is 5% faster;
    - at Nh 64 it is 5% slower;
    - at Nh 100 it is 20-29% slower (copying: 1.17 s against 1.52 s a step);
    - the product with 2 columns is slow only at the small sizes.
  """
  kernel_x, bias, kernel_h = params
  n = kernel_h.shape[0]
  carry_qt = n < CARRY_QT_BELOW

  def step(carry, inp):
    r, q, qt, dh_next, acc = carry
    t, saved, x_in, ghs, dcos = inp
    h = h_prev(t)
    y = saved[3]
    ru, rq = y[:, 0], y[:, 1]                       # R_{t-1} u, R_{t-1} q

    def memory(w, x, p):
      row_u, row_q = _m_rows(p)
      r_prev = _rank_update(r, [-ru, -rq], [row_u, row_q])
      uq = jnp.stack([p.u, p.q], 1)
      if carry_qt:
        qv = _rows(uq, qt)                          # Q u, Q q as rows of Q^T
        qu, qq = qv[:, 0], qv[:, 1]
      else:
        qv = _cols(q, uq)                           # Q u, Q q
        qu, qq = qv[..., 0], qv[..., 1]
      gt = _rows(y[:, :2], q)                       # G^T u, G^T q with G = R_{t-1}^T Q
      v = _rows(jnp.stack([w, qu, qq], 1), r_prev)  # R_{t-1}^T [w, Q u, Q q] = [., G u, G q]
      c = lambda m: m[:, None]
      du = (v[:, 1] + gt[:, 0]) * c(p.m_uu) + v[:, 2] * c(p.m_uq) + gt[:, 1] * c(p.m_qu)
      dq = (v[:, 2] + gt[:, 1]) * c(p.m_qq) + v[:, 1] * c(p.m_qu) + gt[:, 0] * c(p.m_uq)
      dms = tuple(jnp.sum(a * b, axis=-1) for a, b in ((ru, qu), (ru, qq), (rq, qu), (rq, qq)))
      col_u, col_q = _m_cols(p)
      # "+ 0 * gt": the update of Q waits for both products that read Q, so that XLA
      # updates Q in place instead of copying it every step.
      q_prev = _rank_update(q, [qu, qq, w + 0.0 * gt[:, 0]], [col_u, col_q, x])
      qt_prev = _rank_update(qt, [col_u, col_q, x], [qu, qq, w]) if carry_qt else None
      return v[:, 0], (du, dq, dms), (r_prev, q_prev, qt_prev)

    dh, dxp, (r_prev, q_prev, qt_prev) = _cell_bwd(cfg, kernel_h, h, saved,
                                                   dh_next + ghs, dcos, memory)
    acc, dx = _accumulate(cfg, params, acc, h, x_in, dxp)
    return (r_prev, q_prev, qt_prev, dh, acc), dx

  dr_final, dh_final = ct_final
  qt0 = jnp.swapaxes(dr_final, 1, 2) if carry_qt else None
  carry0 = (r_final, dr_final, qt0, dh_final, acc)
  (_, q0, _, dh0, acc), dxs = jax.lax.scan(step, carry0, inp, reverse=True,
                                           unroll=cfg.unroll)
  return (q0, dh0), acc, dxs


def _bwd(cfg, res, cts):
  params, xs, h0, hs, saved, r_final = res
  ct_final, ct_hs = cts[0], cts[1]
  rdtype = at_least_float32(xs)
  ct_cos = cts[2] if cfg.return_cos else jnp.zeros(xs.shape[:2], rdtype)
  # What the backward step reads that depends on the forward's values alone, for all T
  # steps at once before the scan: a few large fused operations instead of several small
  # ones in every step. For lam=0 the planes (the forward's rotation_plane, batched over
  # time, from the saved tau_t and e_t; lam=1 saved them); for both lam 1/|e|, 1/|tau|
  # (two reductions fewer per step) and the fallback's frame (no iota, slices and
  # selects per step). Session 30, Intel Xeon, one process against the per-step form:
  # the copying training step 5-8% faster for lam=1 (3 runs), 0-7% for lam=0; recall
  # unchanged within the noise.
  tau, _, e = pre = saved[0]
  pdtype = at_least_float32(tau)               # the plane's dtype
  plane = saved[1] if cfg.lam else rotation_plane(e, tau)
  saved = (pre, plane, *saved[2:4],            # lam=0: Rot h, R_{t-1} [...] are None
           _inverse_norms(tau.astype(pdtype), e.astype(pdtype)), _fallback_frame(plane.u))
  inp = (jnp.arange(xs.shape[0]), saved, xs, ct_hs, ct_cos)

  def h_prev(t):  # h_{t-1}, read from hs in the step (a shifted copy costs O(T B Nh) memory)
    return jnp.where(t > 0, jax.lax.dynamic_index_in_dim(hs, jnp.maximum(t - 1, 0), 0,
                                                         False), h0)

  acc = jax.tree.map(lambda p: jnp.zeros(p.shape, at_least_float32(p)), params)
  if cfg.lam:
    d_carry0, acc, dxs = _bwd_lam1(cfg, params, inp, h_prev, acc, r_final, ct_final)
  else:
    d_carry0, acc, dxs = _bwd_lam0(cfg, params, inp, h_prev, acc, ct_final)
  acc = jax.tree.map(lambda a, p: a.astype(p.dtype), acc, params)
  return acc, dxs, d_carry0


_core = jax.custom_vjp(_primal, nondiff_argnums=(0,))
_core.defvjp(_fwd, _bwd)


# ------------------------------------------------------------------------ entry


def fast_scan(params, xs, carry0, *, lam: int, eta: Optional[float],
              activation: Callable, update_gate: bool, unroll: int = 1,
              return_cos: bool = False, precision=None):
  """The RUM recurrence over a time-major input, with the fast backward pass.

  Args:
    params: the RUM parameters ``{"kernel_x", "kernel_h", "bias"}``.
    xs: <float>[T, B, Nx] the inputs (time-major, one batch axis), in the dtype of
      the parameters.
    carry0: ``h_0`` <float>[B, Nh] or, for ``lam=1``, ``(R_0, h_0)`` with ``R_0`` in
      ``promote_types(dtype, float32)``.
    lam, eta, activation, update_gate, unroll, return_cos: as in ``rum_scan``
      (validated; ``activation`` a callable, applied elementwise).
    precision: the matmul precision of the gate matmuls (``x W_x``, ``h W_h``) and of
      their gradients: None (the backend's default), a name of
      :data:`rumjax.core.precision.PRECISIONS` or a ``lax.Precision``. The rotation path
      is at HIGHEST whatever this says.

  Returns:
    ``(final_state, hs)`` or ``(final_state, hs, cos)`` with ``hs`` <float>[T, B, Nh]
    (the dtype of ``xs``) and ``cos`` <float>[T, B] (at least float32).
  """
  cfg = _Cfg(lam, eta, activation, bool(update_gate), unroll, bool(return_cos),
             resolve_precision(precision))
  p = (params["kernel_x"], params["bias"], params["kernel_h"])
  return _core(cfg, p, xs, carry0)


def reconstruct_initial_memory(params, xs, carry0, *, eta: Optional[float] = None,
                               activation: Callable = jax.nn.relu,
                               update_gate: bool = True):
  """``R_0`` rebuilt backwards from ``R_T`` as the ``lam=1`` backward pass does it.

  For measuring the drift of the reconstruction (compare with the true ``R_0``).
  Arguments as in :func:`fast_scan` (time-major ``xs``, ``carry0 = (R_0, h_0)``).
  """
  cfg = _Cfg(1, eta, activation, bool(update_gate), 1, False)
  p = (params["kernel_x"], params["bias"], params["kernel_h"])
  _, (_, _, _, _, (_, planes, _, ys), r_final) = _fwd(cfg, p, xs, carry0)

  def undo(r, inp):
    plane, y = inp
    return _rank_update(r, [-y[:, 0], -y[:, 1]], list(_m_rows(plane))), None

  r0, _ = jax.lax.scan(undo, r_final, (planes, ys), reverse=True)
  return r0

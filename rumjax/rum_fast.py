"""A fast RUM scan: Algorithm 1 with a hand-written backward pass (``jax.custom_vjp``).

:func:`rumjax.rum.rum_scan` with ``impl="fast"`` (the default) runs :func:`fast_scan`;
``impl="reference"`` runs the plain ``lax.scan`` of ``rum_step`` that autodiff
differentiates. Both compute the same function; ``tests/test_rum_fast.py`` checks values
and gradients against each other.

The rotation of a step in closed form. With ``a = e/|e|``, ``b = tau/|tau|`` (unit) and
``d = a + b``::

    Rotation(e, tau) = 1 - k d d^T + 2 b a^T,      k = 2 / |d|^2 = 1 / (1 + cos theta)

It maps ``a`` to ``b``, ``b`` to ``2 cos(theta) b - a`` and is the identity orthogonal to
``span(a, b)``, i.e. it is eq. (1). One step costs the input projection, the
``(Nh, 2 Nh)`` matmul and a few O(Nh) dot products. Degenerate cases as in :mod:`rumjax.rotation`: ``e = 0`` or
``tau = 0`` give the identity; (nearly) anti-parallel ``e``, ``tau`` (``|a + b|^2 <= eps``)
rotate by exactly ``pi`` in the plane of ``a`` and a fallback direction orthogonal to it
(the first or second coordinate axis, orthogonalised; the reference picks the axis least
aligned with ``a``, so the two may differ there, both being rotations by pi that map
``e`` to ``-e``). No gradient flows through the fallback plane; values and gradients
stay finite. Not forward-mode differentiable (``jax.custom_vjp``): use
``impl="reference"`` for ``jax.jvp`` / ``jacfwd``.

What the backward pass keeps. The forward scan saves per step only ``h_t``, the
pre-activations ``[tau_t | u'_t]`` and for ``lam=1`` ``R_{t-1} [d_t, b_t, Rot_t h_{t-1}]``
(``3 Nh`` or ``6 Nh`` numbers per example); the backward scan recomputes the O(Nh)
quantities of the step from them and applies the chain rule by hand (``_cell_bwd``),
accumulating the weight gradients step by step. For ``lam=1`` the memory ``R_t`` is *not*
saved: the backward scan starts from ``R_T`` and rebuilds ``R_{t-1} = R_t Rotation_t^T``
(rotations are orthogonal) while it carries the cotangent ``Q_t = dL/dR_t``; so the memory
of a training step grows only by O(T B Nh) with the length.

Per step, ``lam=1`` reads or writes the ``B x Nh x Nh`` matrices 2 times forward (one
product, one rank-2 update) and 5 times backward; on XLA:CPU these passes and the many
small O(B Nh) operations, not FLOPs, set the speed (see WORKSPACE.md for what was tried).
"""

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

Array = jax.Array


def _sum(x, y):
  return jnp.sum(x * y, axis=-1, keepdims=True)


# ------------------------------------------------------------------- per-step algebra


class _Plane(NamedTuple):
  ok: Array      # <bool>[B, 1] e != 0 and tau != 0
  inv_ne: Array  # <float>[B, 1] 1/|e| (0 if e = 0)
  inv_nt: Array  # <float>[B, 1] 1/|tau| (0 if not ok)
  a_raw: Array   # <float>[B, N] e/|e| (0 if e = 0)
  a: Array       # <float>[B, N] e/|e| (0 if not ok)
  b: Array       # <float>[B, N] tau/|tau| (0 if not ok)
  d: Array       # <float>[B, N] a + b (the fallback direction when anti-parallel)
  dsq: Array     # <float>[B, 1] |a + b|^2 = 2 (1 + cos theta) (0 if not ok / anti-parallel)
  k: Array       # <float>[B, 1] 2 / |d|^2
  anti: Array    # <bool>[B, 1] exactly anti-parallel (fallback plane)


def _inv_norm(x):
  """``1/|x|`` along the last axis (keepdims) and ``|x| > 0``; 0 where ``x = 0``."""
  sq = _sum(x, x)
  ok = sq > 0
  return jnp.where(ok, jax.lax.rsqrt(jnp.where(ok, sq, 1.0)), 0.0), ok


def _fallback(a):
  """A unit vector orthogonal to the unit vector ``a``, elementwise (no argmin).

  The first coordinate axis if ``a_0^2 <= 1/2``, else the second, minus its component
  along ``a``. Used only for exactly anti-parallel ``e`` and ``tau``, where any plane
  containing ``a`` gives a rotation by pi that maps ``a`` to ``-a``.
  """
  n = a.shape[-1]
  if n < 2:
    return jnp.zeros_like(a)
  first = a[:, :1] * a[:, :1] <= 0.5
  ai = jnp.where(first, a[:, :1], a[:, 1:2])
  axis = jnp.where(first, 0, 1) == jax.lax.broadcasted_iota(jnp.int32, a.shape, 1)
  sq = 1.0 - ai * ai
  return jnp.where(sq > 0, (axis.astype(a.dtype) - ai * a) * jax.lax.rsqrt(
      jnp.where(sq > 0, sq, 1.0)), 0.0)


def _plane(tau, e):
  """The closed form ``Rotation(e, tau) = 1 - k d d^T + 2 b a^T`` of one step."""
  inv_ne, a_ok = _inv_norm(e)
  inv_nt, t_ok = _inv_norm(tau)
  ok = a_ok & t_ok
  a_raw = e * inv_ne
  inv_nt = jnp.where(ok, inv_nt, 0.0)
  b = tau * inv_nt
  a = jnp.where(ok, a_raw, 0.0)
  d = a + b
  dsq = _sum(d, d)
  # (Nearly) anti-parallel: |a + b|^2 <= eps, i.e. theta within ~sqrt(eps) of pi, below
  # the rounding noise of the plane itself. Rotate by exactly pi in the plane of a and the
  # fallback direction (b := -a), which keeps the rotation orthogonal to working precision.
  anti = ok & (dsq <= jnp.finfo(dsq.dtype).eps)
  b = jnp.where(anti, -a, b)
  d = jnp.where(anti, _fallback(a), d)
  k = jnp.where(anti | (dsq <= 0), 2.0, 2.0 / jnp.where(dsq > 0, dsq, 1.0))
  return _Plane(ok, inv_ne, inv_nt, a_raw, a, b, d, dsq, k, anti)


def _rot(p: _Plane, v):
  """``Rotation v = v - k (d.v) d + 2 (a.v) b`` and the two dot products."""
  dv, av = _sum(p.d, v), _sum(p.a, v)
  return v - (p.k * dv) * p.d + (2.0 * av) * p.b, dv, av


def _rot_grads(p: _Plane, h, dh_, ah, w):
  """Cotangents of ``x = Rotation h`` given ``w = dL/dx``: (dL/dh, dL/dd, dL/db, dL/da).

  ``dh_ = d.h`` and ``ah = a.h`` come from the forward computation of ``x``.
  """
  wd, wb = _sum(p.d, w), _sum(p.b, w)
  dh = w - (p.k * wd) * p.d + (2.0 * wb) * p.a
  dd = p.k * (p.k * dh_ * wd) * p.d - p.k * (wd * h + dh_ * w)
  return dh, dd, (2.0 * ah) * w, (2.0 * wb) * h


def _plane_to_inputs(p: _Plane, dd, db, da):
  """Cotangents of ``tau`` and ``e`` (through ``a = e/|e|``) from those of d, b, a."""
  dd = jnp.where(p.anti, 0.0, dd)
  db = jnp.where(p.anti, 0.0, db + dd)      # anti-parallel: b = -a does not follow tau
  da = jnp.where(p.ok, da + dd, 0.0)
  dtau = p.inv_nt * (db - p.b * _sum(p.b, db))
  de = p.inv_ne * (da - p.a_raw * _sum(p.a_raw, da))
  return dtau, de


def _cos(p: _Plane):
  """``cos(theta)`` as in :func:`rumjax.rotation.rotation_plane` (1 when not defined)."""
  return jnp.where(p.ok, 0.5 * p.dsq - 1.0, 1.0)[..., 0]


class _Cfg(NamedTuple):
  lam: int
  eta: Optional[float]
  activation: Callable
  update_gate: bool
  unroll: int
  return_cos: bool


def _head(cfg: _Cfg, h, pre, e, rh):
  """``h~ = f(e + R h)``, the gate and the time normalization; returns (h_t, aux)."""
  n = h.shape[-1]
  z = e + rh
  ht = cfg.activation(z)
  hn, ug = ht, None
  if cfg.update_gate:
    ug = jax.nn.sigmoid(pre[:, n:])
    hn = ht + ug * (h - ht)
  hp = hn
  sq = inv = None
  if cfg.eta is not None:
    sq = _sum(hn, hn)
    inv = jnp.where(sq > 0, jax.lax.rsqrt(jnp.where(sq > 0, sq, 1.0)), 0.0)
    hn = (cfg.eta * inv) * hp
  return hn, (z, ht, ug, hp, inv)


def _head_bwd(cfg: _Cfg, h, aux, g):
  """Cotangents of (h_{t-1} via the gate, u' pre-activation, z) given ``g = dL/dh_t``."""
  z, ht, ug, hp, inv = aux
  if cfg.eta is not None:
    hu = hp * inv
    g = (cfg.eta * inv) * (g - hu * _sum(hu, g))
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
  return jnp.einsum("bkj,bji->bki", jax.lax.optimization_barrier(v), m)


def _cols(m, v):
  """``m v_k`` for the rows ``v_k`` of ``v``: <B, N, N>, <B, k, N> -> <B, N, k>.

  (The <B, N, k> output layout is ~25% faster than <B, k, N> on XLA:CPU.)
  """
  return jnp.einsum("bij,bkj->bik", m, jax.lax.optimization_barrier(v))


def _rank_update(m, lefts, rights):
  """``m + sum_i l_i r_i^T`` for a batch, in one pass over ``m``.

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
  ``h_t``, the pre-activations ``[tau | u']``, the plane and ``R_{t-1} [d, b, Rot h]``.
  """
  kernel_x, bias, kernel_h = params
  n = kernel_h.shape[0]
  # The input projection stays inside the step: hoisted out of the scan it would write
  # and read back T B 3Nh numbers, slower for the small inputs of the synthetic tasks.
  xp = x @ kernel_x + bias
  pre = xp[:, :2 * n] + h @ kernel_h
  e = xp[:, 2 * n:]
  p = _plane(pre[:, :n], e)
  x, _, _ = _rot(p, h)
  y = read(jnp.stack([p.d, p.b, x], 1)) if cfg.lam else None
  hn, _ = _head(cfg, h, pre, e, y[:, 2] if cfg.lam else x)
  return hn, pre, p, y


def _outputs(cfg, save, hn, pre, p, y):
  out = (hn,) + ((pre,) + ((y,) if cfg.lam else ()) if save else ())
  return out + ((_cos(p),) if cfg.return_cos else ())


def _forward_lam0(cfg: _Cfg, params, xs, h0, save: bool):
  def step(h, x):
    hn, pre, p, y = _cell(cfg, params, h, x)
    return hn, _outputs(cfg, save, hn, pre, p, y)
  return jax.lax.scan(step, h0, xs, unroll=cfg.unroll)


def _forward_lam1(cfg: _Cfg, params, xs, carry0, save: bool):
  def step(carry, x):
    s, h = carry                                   # s = R_{t-1}^T (row products are faster)
    hn, pre, p, y = _cell(cfg, params, h, x, lambda v: _rows(v, s))
    # R_t = R_{t-1} Rotation_t = R_{t-1} - k (R_{t-1} d) d^T + 2 (R_{t-1} b) a^T, transposed.
    s = _rank_update(s, [p.d, p.a], [-p.k * y[:, 0], 2.0 * y[:, 1]])
    return (s, hn), _outputs(cfg, save, hn, pre, p, y)

  r0, h0 = carry0
  (s, h), out = jax.lax.scan(step, (jnp.swapaxes(r0, 1, 2), h0), xs, unroll=cfg.unroll)
  return (jnp.swapaxes(s, 1, 2), h), out


def _forward(cfg: _Cfg, params, xs, carry0, save: bool):
  if cfg.lam:
    return _forward_lam1(cfg, params, xs, carry0, save)
  return _forward_lam0(cfg, params, xs, carry0, save)


def _primal(cfg, params, xs, carry0):
  final, out = _forward(cfg, params, xs, carry0, save=False)
  return (final,) + tuple(out)


def _fwd(cfg, params, xs, carry0):
  final, out = _forward(cfg, params, xs, carry0, save=True)
  hs, pre = out[0], out[1]
  ys, out = (out[2], out[3:]) if cfg.lam else (None, out[2:])
  h0 = carry0[1] if cfg.lam else carry0
  res = (params, xs, h0, hs, pre, ys, final[0] if cfg.lam else None)
  return (final, hs) + tuple(out), res


# ----------------------------------------------------------------------- backward


def _cell_bwd(cfg: _Cfg, kernel_h, h, pre, e, p, g, dcos, y=None, memory=None):
  """The chain rule through one step, given ``g = dL/dh_t``.

  ``memory(w, x)`` (``lam=1``) handles ``R_{t-1}``: given ``w = dL/d(R_{t-1} x)`` it
  returns ``dL/dx``, the extra cotangents of ``d``, ``b``, ``a`` and something to pass on
  (``aux``). Returns ``dL/dh_{t-1}``, the cotangent of the input projection
  ``x W_xh + b`` (<B, 3 Nh>) and ``aux``.
  """
  x, dh_, ah = _rot(p, h)
  _, aux = _head(cfg, h, pre, e, y[:, 2] if cfg.lam else x)
  dh_gate, dgate, w = _head_bwd(cfg, h, aux, g)
  if cfg.lam:
    dx, extra, aux = memory(w, x)
    dh, dd, db, da = _rot_grads(p, h, dh_, ah, dx)
    dd, db, da = dd + extra[0], db + extra[1], da + extra[2]
  else:
    dh, dd, db, da = _rot_grads(p, h, dh_, ah, w)
    aux = None
  if cfg.return_cos:
    dd = dd + jnp.where(p.ok, dcos[:, None], 0.0) * p.d
  dtau, de = _plane_to_inputs(p, dd, db, da)
  if cfg.update_gate:
    dh = dh + dh_gate
  else:
    dgate = jnp.zeros_like(dtau)
  dpre = jnp.concatenate([dtau, dgate], axis=-1)
  return dh + dpre @ kernel_h.T, jnp.concatenate([dpre, de + w], axis=-1), aux


def _accumulate(params, acc, h, x, dxp):
  """Adds one step's weight gradients to ``acc``; returns it and ``dL/dx_t``.

  (Per step, not one matmul after the scan: that would write and read back T B 3Nh
  numbers, slower at the synthetic tasks' shapes.)"""
  kernel_x, _, kernel_h = params
  dkx, db, dkh = acc
  n = kernel_h.shape[0]
  acc = (dkx + x.T @ dxp, db + jnp.sum(dxp, axis=0), dkh + h.T @ dxp[:, :2 * n])
  return acc, dxp @ kernel_x.T


def _bwd_lam0(cfg: _Cfg, params, inp, h_prev, acc, dh_final):
  kernel_x, bias, kernel_h = params
  n = kernel_h.shape[0]

  def step(carry, inp):
    dh_next, acc = carry
    t, pre, x, ghs, dcos = inp
    h = h_prev(t)
    e = x @ kernel_x[:, 2 * n:] + bias[2 * n:]
    p = _plane(pre[:, :n], e)
    dh, dxp, _ = _cell_bwd(cfg, kernel_h, h, pre, e, p, dh_next + ghs, dcos)
    acc, dx = _accumulate(params, acc, h, x, dxp)
    return (dh, acc), dx

  (dh0, acc), dxs = jax.lax.scan(step, (dh_final, acc), inp, reverse=True,
                                 unroll=cfg.unroll)
  return dh0, acc, dxs


def _bwd_lam1(cfg: _Cfg, params, inp, h_prev, acc, r_final, ct_final):
  """The backward scan carries ``R_t`` and ``Q_t = dL/dR_t``: it rebuilds
  ``R_{t-1} = R_t Rotation_t^T = R_t + k (R_{t-1} d) d^T - 2 (R_{t-1} b) a^T`` from the
  saved ``R_{t-1} [d, b]`` and accumulates ``Q_{t-1} = Q_t Rotation_t^T + w x^T``."""
  kernel_x, bias, kernel_h = params
  n = kernel_h.shape[0]

  def step(carry, inp):
    r, q, dh_next, acc = carry
    t, pre, x_in, ghs, dcos, y = inp
    h = h_prev(t)
    e = x_in @ kernel_x[:, 2 * n:] + bias[2 * n:]
    p = _plane(pre[:, :n], e)
    rd, rb = y[:, 0], y[:, 1]                       # R_{t-1} d, R_{t-1} b
    r_prev = _rank_update(r, [p.k * rd, -2.0 * rb], [p.d, p.a])

    def memory(w, x):
      qv = _cols(q, jnp.stack([p.d, p.a], 1))       # Q d, Q a
      qd, qa = qv[..., 0], qv[..., 1]
      gt = _rows(y[:, :2], q)                       # G^T d, G^T b with G = R_{t-1}^T Q
      v = _rows(jnp.stack([w, qd, qa], 1), r_prev)  # R_{t-1}^T [w, Q d, Q a]
      dd = -p.k * (v[:, 1] + gt[:, 0]) + (p.k * p.k * _sum(rd, qd)) * p.d
      # "+ 0 * gt": the update of Q waits for both products that read Q, so that XLA
      # updates Q in place instead of copying it every step.
      q_prev = _rank_update(q, [-p.k * qd, 2.0 * qa, w + 0.0 * gt[:, 0]], [p.d, p.b, x])
      return v[:, 0], (dd, 2.0 * v[:, 2], 2.0 * gt[:, 1]), q_prev

    dh, dxp, q_prev = _cell_bwd(cfg, kernel_h, h, pre, e, p, dh_next + ghs, dcos, y,
                                memory)
    acc, dx = _accumulate(params, acc, h, x_in, dxp)
    return (r_prev, q_prev, dh, acc), dx

  dr_final, dh_final = ct_final
  (_, q0, dh0, acc), dxs = jax.lax.scan(step, (r_final, dr_final, dh_final, acc), inp,
                                        reverse=True, unroll=cfg.unroll)
  return (q0, dh0), acc, dxs


def _bwd(cfg, res, cts):
  params, xs, h0, hs, pre, ys, r_final = res
  ct_final, ct_hs = cts[0], cts[1]
  ct_cos = cts[2] if cfg.return_cos else jnp.zeros(xs.shape[:2], xs.dtype)
  inp = (jnp.arange(xs.shape[0]), pre, xs, ct_hs, ct_cos)

  def h_prev(t):  # h_{t-1}, read from hs in the step (a shifted copy costs O(T B Nh) memory)
    return jnp.where(t > 0, jax.lax.dynamic_index_in_dim(hs, jnp.maximum(t - 1, 0), 0,
                                                         False), h0)

  acc = jax.tree.map(jnp.zeros_like, params)
  if cfg.lam:
    d_carry0, acc, dxs = _bwd_lam1(cfg, params, inp + (ys,), h_prev, acc, r_final,
                                         ct_final)
  else:
    d_carry0, acc, dxs = _bwd_lam0(cfg, params, inp, h_prev, acc, ct_final)
  return acc, dxs, d_carry0


_core = jax.custom_vjp(_primal, nondiff_argnums=(0,))
_core.defvjp(_fwd, _bwd)


# ------------------------------------------------------------------------ entry


def fast_scan(params, xs, carry0, *, lam: int, eta: Optional[float],
              activation: Callable, update_gate: bool, unroll: int = 1,
              return_cos: bool = False):
  """The RUM recurrence over a time-major input, with the fast backward pass.

  Args:
    params: the RUM parameters ``{"kernel_x", "kernel_h", "bias"}``.
    xs: <float>[T, B, Nx] the inputs (time-major, one batch axis).
    carry0: ``h_0`` <float>[B, Nh] or, for ``lam=1``, ``(R_0, h_0)``.
    lam, eta, activation, update_gate, unroll, return_cos: as in ``rum_scan``
      (validated; ``activation`` a callable, applied elementwise).

  Returns:
    ``(final_state, hs)`` or ``(final_state, hs, cos)`` with ``hs`` <float>[T, B, Nh]
    and ``cos`` <float>[T, B].
  """
  cfg = _Cfg(lam, eta, activation, bool(update_gate), unroll, bool(return_cos))
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
  _, (_, _, _, _, pre, ys, r_final) = _fwd(cfg, p, xs, carry0)
  n = p[2].shape[0]

  def undo(r, inp):
    pre_t, x_t, y_t = inp
    e = x_t @ p[0][:, 2 * n:] + p[1][2 * n:]
    pl = _plane(pre_t[:, :n], e)
    return _rank_update(r, [pl.k * y_t[:, 0], -2.0 * y_t[:, 1]], [pl.d, pl.a]), None

  r0, _ = jax.lax.scan(undo, r_final, (pre, xs, ys), reverse=True)
  return r0

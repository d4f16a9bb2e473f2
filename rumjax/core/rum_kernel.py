"""The fused RUM kernel: Algorithm 1's whole time loop in one Pallas kernel per pass.

:func:`kernel_scan` computes exactly :func:`rumjax.core.rum_fast.fast_scan` (the XLA fast
path, the reference of this file) for ``lam`` 0 and 1, and is chosen by
``rum_scan(..., impl="kernel")`` (or ``impl="auto"`` on a GPU, see
:func:`rumjax.core.rum.select_impl`). The XLA path runs one ``lax.scan`` step per time step,
and on a GPU each step waits in XLA's while loop (about 100 us at the copying shape); here
one kernel launch runs all T steps of the forward pass and one all T steps of the backward
pass, with one program per example holding that example's ``h``, ``R_t`` (and in the
backward pass ``Q_t = dL/dR_t`` and ``dL/dh_t``) across the steps.

What runs where (one ``jax.custom_vjp``):

* Outside the kernels, as large XLA matmuls at the policy's ``precision``: the input
  projection of all T steps ``x_t W_x + b`` (split into its ``tau``, ``u`` and ``e``
  blocks), and after the backward kernel the weight gradients
  ``dW_x = sum_t x_t^T [dtau | du' | de]_t``, ``dW_h = sum_t h_{t-1}^T [dtau | du']_t``,
  ``db`` and ``dx_t = [dtau | du' | de]_t W_x^T``.
* The forward kernel, per example, for t = 1..T: ``tau = tau^x_t + h W^tau_hh``,
  ``u' = u^x_t + h W^u_hh``, the rotation (the same
  :func:`rumjax.core.rotation.rotation_plane` as every other path), ``R_t`` (``lam=1``) and
  the head (:func:`rumjax.core.rum_fast._head`: activation, gate, time normalization). It
  saves ``h_t``, ``tau_t``, ``u'_t`` and, for ``lam=1``, ``R_{t-1} [u, q, Rot h]``, as the
  fast path does; the forward pass alone (no gradient asked for: inference, evaluation)
  writes only ``h_t`` and the final state.
* The backward kernel, per example, for t = T..1: the fast path's backward step
  (:mod:`rumjax.core.rum_fast`): the head's and the rotation's chain rule by hand
  (:func:`rumjax.core.rum_fast._rotate_bwd`), and for ``lam=1`` the rebuild
  ``R_{t-1} = R_t Rot_t^T`` from the saved ``R_{t-1} [u, q]`` with the cotangent
  ``Q_{t-1} = Q_t Rot_t^T + w (Rot_t h_{t-1})^T``. Every input of the rotation is saved or is
  an input (``e_t``), never recomputed by another matmul (issue 44).

Shapes and padding. ``Nh`` is padded inside to :func:`padded_size` (a power of 2, at least
16: Triton's tensors must have power-of-2 sizes) with zero weights, ``R_0`` padded with the
identity; the activation is masked to 0 on the padding (``f(0) != 0`` for ``sigmoid``), so
padded coordinates of ``h`` stay exactly 0 and the padding changes no value. Any B, T >= 1.

Precision. Everything inside the kernels is float32: the matrix-vector products are
elementwise products and sums (exact float32 on every backend, i.e. the gates at
``"highest"`` whatever ``precision`` says; the matmuls outside follow ``precision``), ``R``,
``Q`` and the rotation path as the policy wants. With bfloat16 inputs and parameters (the
bfloat16 policy) the inputs are read as float32, each ``h_t`` is rounded to bfloat16 as the
XLA path's state is, and ``hs`` is returned in bfloat16.

Memory. Up to a padded Nh of :data:`STREAM_ABOVE` (128) one example's ``R`` (and ``Q``)
is held in registers across the steps; above it ``R``, ``Q`` and ``W_hh`` live in memory
and each step reads and writes them by blocks of :data:`STREAM_ROWS` rows (64 for
``lam=0``, 32 for ``lam=1``; at Np 256 one ``R`` is 256 KB, a whole register file). From
a padded Nh of 128 the backward kernel reads ``W_hh`` by blocks of :data:`W_ROWS` rows.
``lam=0`` issues each step's loads a step early (``prefetch``). The defaults were measured
on an H100 (RESULTS.md).

Options of :func:`kernel_scan` for tuning, opt-in (slower where measured): ``num_warps``;
``block`` (``lam=0``: a block of examples per program, ``h W_hh`` as one tensor-core
product at ``precision``); ``save_plane`` (the backward kernel reads each step's plane
from the forward kernel instead of computing it again); ``transposed`` (sums along rows).
Each computes the same values; their equality and CUDA lowering tests are in the slow set.

Platforms. The kernels are Pallas kernels lowered per platform
(``jax.lax.platform_dependent``): on CUDA through Triton (``pallas.triton.CompilerParams``;
deprecated in jax 0.11 but working in 0.10 and 0.11; the Mosaic GPU lowering wants a
rewrite with ``plgpu.kernel``), everywhere else in Pallas's interpret mode (slow; for tests
on a CPU). (A Mosaic GPU probe of lam=1's step, session 24, jax 0.10.2: R in registers in
the WGMMA layout, row sums, rank-1 updates, a vector moved from the row to the column
layout through shared memory, lowers for CUDA here, but matrices must be staged through
shared memory (``plgpu.load`` from GMEM: "Only optimized transfers to SMEM supported"),
and its GPU interpret mode cannot run it on a CPU (``plgpu.load`` with a layout fails in
the interpreter's abstract evaluation; ``layout_cast`` has no CPU rule), so a port could
not be tested here against the XLA path as this one is.) ``tests/test_rum_kernel.py`` checks values and gradients against the fast path in
interpret mode and the CUDA lowering with ``jax.export``.
"""

import functools
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from rumjax import sharding
from rumjax.core import rum_fast
from rumjax.core.precision import at_least_float32, resolve_precision
from rumjax.core.rotation import RotationPlane, apply_plane

Array = jax.Array
F32 = jnp.float32


# A step's plane (RotationPlane: u, q, then six numbers) as kernel operands.
_PLANE = 8
_PLANE_KINDS = ["seq"] * 2 + ["sca"] * 6


def padded_size(nh: int) -> int:
  """The hidden size inside the kernels: the next power of 2, at least 16."""
  return max(16, 1 << (int(nh) - 1).bit_length())


class _Cfg(NamedTuple):
  head: rum_fast._Cfg           # lam, eta, activation, update_gate (the fast path's)
  nh: int                       # the true hidden size (the rest is padding)
  dtype: jnp.dtype              # of h_t (the policy's computation dtype)
  warps: Optional[int] = None   # Triton warps per program (None: num_warps(Np))
  block: int = 1                # examples per program (> 1: lam=0, h W as one tl.dot)
  save_plane: bool = False      # the forward kernel writes each step's plane for the backward
  precision: Optional[jax.lax.Precision] = None   # of the matmuls outside, and (block > 1) h W
  rows: Optional[int] = None    # R, Q and W streamed through memory in blocks of this many rows
  transposed: bool = False      # forward: W^T (h W as row sums); backward: R^T in registers
  prefetch: bool = False        # step t's loads issued at the start of step t - 1
  w_rows: Optional[int] = None  # the backward's W_hh streamed by blocks of rows (None: whole)
  w_columns: bool = False       # the forward's streamed W_hh by blocks of columns, not rows
  q_rows: Optional[int] = None  # lam=1 backward: Q streamed by blocks of rows, R in registers


# ------------------------------------------------------------- per-example algebra
# One example's vectors are <Np>, its matrices <Np, Np>; products are broadcasts and sums
# (exact float32; Triton's dot needs blocks of at least 16 rows).


def _mv(m, v):
  """``m v`` (sum over the columns of ``m``)."""
  return jnp.sum(m * v[None, :], axis=1)


def _vm(v, m):
  """``v^T m`` (sum over the rows of ``m``)."""
  return jnp.sum(v[:, None] * m, axis=0)


def _outer(a, b):
  return a[:, None] * b[None, :]


# Streamed matrices (``rows``): a <Np, Np> matrix in memory, read and written a block of
# ``rows`` rows at a time, so that no <Np, Np> tile lives in registers (at Np = 256 one
# example's R alone is a whole register file). Triton slices refs but not values: a vector's
# row block is taken with a mask (:func:`_take`), and a vector built from its row blocks
# with masks (:func:`_put`), each O(Np) per block.


def _blocks_of(rows: int, np_: int):
  """``(row slice, block index)`` of each block of ``rows`` rows."""
  rows = min(rows, np_)
  return [(pl.ds(c * rows, rows), c) for c in range(np_ // rows)]


def _take(v, c, rows):
  """``v[c rows : (c + 1) rows]`` of a vector <Np>."""
  v2 = v.reshape(-1, rows)
  sel = jax.lax.broadcasted_iota(jnp.int32, v2.shape, 0) == c
  return jnp.sum(jnp.where(sel, v2, 0.0), axis=0)


def _put(parts):
  """The vector <Np> whose consecutive row blocks are ``parts``."""
  out = jnp.zeros((len(parts), parts[0].shape[0]), F32)
  sel = jax.lax.broadcasted_iota(jnp.int32, out.shape, 0)
  for c, part in enumerate(parts):
    out = jnp.where(sel == c, part[None, :], out)
  return out.reshape(-1)


def _h_w(cfg: _Cfg, h, w_ref):
  """``h W``: for one example (<Np>) a broadcast-and-sum (exact float32; with ``rows``
  block by block of W's rows); for a block of examples (<Bb, Np>) one matrix product at the
  policy's ``precision`` (Triton's dot)."""
  if h.ndim > 1:
    return jnp.dot(h, w_ref[...].astype(F32), precision=cfg.precision,
                   preferred_element_type=F32)
  if not cfg.rows:
    return _vm(h, w_ref[...].astype(F32))
  if cfg.w_columns:          # blocks of W's columns: blocks of h W from the whole h
    return _put([_vm(h, w_ref[:, s].astype(F32))
                 for s, _ in _blocks_of(cfg.rows, h.shape[0])])
  rows = min(cfg.rows, h.shape[0])
  return sum(_vm(_take(h, c, rows), w_ref[s, :].astype(F32))
             for s, c in _blocks_of(rows, h.shape[0]))


def _w_d(cfg: _Cfg, w_ref, d, rows):
  """``W d`` for one example (<Np>; with ``rows``, block by block of W's rows), ``d W^T``
  for a block of examples (<Bb, Np>); as :func:`_h_w`."""
  if d.ndim > 1:
    return jax.lax.dot_general(d, w_ref[...].astype(F32), (((1,), (1,)), ((), ())),
                               precision=cfg.precision, preferred_element_type=F32)
  if not rows:
    return _mv(w_ref[...].astype(F32), d)
  return _put([_mv(w_ref[s, :].astype(F32), d) for s, _ in _blocks_of(rows, d.shape[0])])


def _copy(cfg: _Cfg, src_ref, dst_ref):
  """``dst = src`` (<Np, Np>) block by block of rows."""
  for s, _ in _blocks_of(cfg.rows or cfg.q_rows, src_ref.shape[-1]):
    dst_ref[s, :] = src_ref[s, :].astype(F32)


def _stream_forward(cfg: _Cfg, r_ref, saved_refs, t, p, x, row_u, row_q):
  """The forward step's ``R`` part with ``R`` in ``r_ref`` (``R_{t-1}`` in, ``R_t`` out),
  block by block of rows, each block's ``R_{t-1} [u, q, Rot h]`` written to ``saved_refs``
  (unless ``()``: the forward pass alone); returns ``R_{t-1} Rot_t h_{t-1}``."""
  parts = []
  for s, _ in _blocks_of(cfg.rows, r_ref.shape[-1]):
    m = r_ref[s, :]
    ys = _mv(m, p.u), _mv(m, p.q), _mv(m, x)                 # R_{t-1} [u, q, Rot h]
    r_ref[s, :] = m + _outer(ys[0], row_u) + _outer(ys[1], row_q)  # R_t = R_{t-1} Rot_t
    for ref, y in zip(saved_refs, ys):
      ref[t, s] = y
    parts.append(ys[2])
  return _put(parts)


def _q_block(qm, ru, rq, wc, p, x, col_u, col_q):
  """One block of rows of ``Q_t = dL/dR_t`` (``qm``) in the lam=1 backward step, with the
  same rows of ``R_{t-1} u``, ``R_{t-1} q`` and ``w``: its rows of ``Q u``, ``Q q``, its
  parts of ``G^T u``, ``G^T q`` (``G = R_{t-1}^T Q``) and of the four sums of M's
  cotangent, and its rows of ``Q_{t-1} = Q_t Rot_t^T + w (Rot h)^T``."""
  qu, qq = _mv(qm, p.u), _mv(qm, p.q)
  dms = (ru * qu, ru * qq, rq * qu, rq * qq)
  q_prev = qm + _outer(qu, col_u) + _outer(qq, col_q) + _outer(wc, x)
  return qu, qq, (_vm(ru, qm), _vm(rq, qm)), dms, q_prev


def _stream_backward(cfg: _Cfg, r_ref, q_ref, ru_ref, rq_ref, t, p, x, w):
  """The backward step's ``R``, ``Q`` part with ``R_t`` in ``r_ref`` and ``Q_t`` in
  ``q_ref`` (out: ``R_{t-1}``, ``Q_{t-1}``), block by block of rows, the same algebra as
  the in-register branch of :func:`_backward_kernel`; returns ``(dx, du, dq, dms)``."""
  np_ = r_ref.shape[-1]
  rows = min(cfg.rows, np_)
  row_u, row_q = rum_fast._m_rows(p)
  col_u, col_q = rum_fast._m_cols(p)
  zero = jnp.zeros((np_,), F32)
  dx, v1, v2, gu, gq = zero, zero, zero, zero, zero
  dms = (jnp.zeros((rows,), F32),) * 4        # summed over the rows once, after the blocks
  for s, c in _blocks_of(cfg.rows, np_):
    ru, rq = ru_ref[t, s], rq_ref[t, s]                      # rows of R_{t-1} [u, q]
    m = r_ref[s, :] - _outer(ru, row_u) - _outer(rq, row_q)  # R_{t-1} = R_t Rot_t^T
    r_ref[s, :] = m
    wc = _take(w, c, rows)
    qu, qq, (gu_c, gq_c), dms_c, q_ref[s, :] = _q_block(q_ref[s, :], ru, rq, wc, p, x,
                                                        col_u, col_q)
    gu, gq = gu + gu_c, gq + gq_c
    dx, v1, v2 = dx + _vm(wc, m), v1 + _vm(qu, m), v2 + _vm(qq, m)
    dms = tuple(d + d_c for d, d_c in zip(dms, dms_c))
  du = (v1 + gu) * p.m_uu + v2 * p.m_uq + gq * p.m_qu
  dq = (v2 + gq) * p.m_qq + v1 * p.m_qu + gu * p.m_uq
  return dx, du, dq, tuple(jnp.sum(d) for d in dms)


def _stream_q(cfg: _Cfg, q_ref, ru_ref, rq_ref, t, p, x, w):
  """The backward step's ``Q`` part with ``Q_t`` in ``q_ref`` (out: ``Q_{t-1}``) and ``R``
  in registers (``q_rows``), block by block of rows, the same algebra as the in-register
  branch of :func:`_backward_kernel`; returns ``(Q u, Q q, G^T u, G^T q, dms)``."""
  np_ = q_ref.shape[-1]
  rows = min(cfg.q_rows, np_)
  col_u, col_q = rum_fast._m_cols(p)
  gu = gq = jnp.zeros((np_,), F32)
  dms = (jnp.zeros((rows,), F32),) * 4        # summed over the rows once, after the blocks
  qus, qqs = [], []
  for s, c in _blocks_of(rows, np_):
    qu, qq, (gu_c, gq_c), dms_c, q_ref[s, :] = _q_block(
        q_ref[s, :], ru_ref[t, s], rq_ref[t, s], _take(w, c, rows), p, x, col_u, col_q)
    gu, gq = gu + gu_c, gq + gq_c
    dms = tuple(d + d_c for d, d_c in zip(dms, dms_c))
    qus.append(qu)
    qqs.append(qq)
  return _put(qus), _put(qqs), gu, gq, tuple(jnp.sum(d) for d in dms)


def _head_cfg(cfg: _Cfg, np_: int):
  """The fast path's head config with the activation masked to 0 on the padding."""
  valid = jax.lax.broadcasted_iota(jnp.int32, (np_,), 0) < cfg.nh
  f = cfg.head.activation
  return cfg.head._replace(activation=lambda z: jnp.where(valid, f(z), 0.0))


def _store_policy(cfg: _Cfg, h):
  """``h_t`` rounded to the policy's dtype (the XLA path carries it in that dtype)."""
  return h.astype(cfg.dtype).astype(F32)


def _time_loop(cfg: _Cfg, n_steps, inputs, step, carry):
  """``for i in range(n_steps): carry = step(i, carry, inputs(i))``, where ``inputs(i)``
  loads step i's operands from memory. With ``cfg.prefetch`` step i's loads are issued at
  the start of step i - 1 (carried), so that their latency hides behind that step's work."""
  if not cfg.prefetch:
    return jax.lax.fori_loop(0, n_steps, lambda i, c: step(i, c, inputs(i)), carry)

  def body(i, c):
    c, current = c
    following = inputs(jnp.minimum(i + 1, n_steps - 1))
    return step(i, c, current), following

  return jax.lax.fori_loop(0, n_steps, body, (carry, inputs(0)))[0]


# ------------------------------------------------------------------------ kernels


def _forward_kernel(cfg: _Cfg, save: bool, xt_ref, xu_ref, e_ref, wt_ref, wu_ref, h0_ref,
                    *refs):
  """One example's forward pass over all T steps (see the module docstring). With
  ``cfg.rows`` R lives in ``rT_ref`` (streamed), else in registers (the loop's carry).
  ``save``: also write what the backward kernel reads (``tau``, ``u'``, for ``lam=1``
  ``R_{t-1} [u, q, Rot h]``; the planes with ``cfg.save_plane``, which :func:`_forward`
  turns off without ``save``); without it only ``h_t`` and the final state (the forward
  pass alone)."""
  lam = cfg.head.lam
  plane_refs = refs[len(refs) - _PLANE:] if cfg.save_plane else ()
  refs = refs[:len(refs) - len(plane_refs)]
  r0_ref, refs = (refs[0], refs[1:]) if lam else (None, refs)
  hs_ref, *saved_refs, hT_ref = refs[:-1] if lam else refs
  rT_ref = refs[-1] if lam else None
  tau_ref, upre_ref, *ys_refs = saved_refs or (None, None)
  np_ = h0_ref.shape[-1]
  head = _head_cfg(cfg, np_)
  in_registers = lam and not cfg.rows

  def inputs(t):
    return xt_ref[t].astype(F32), xu_ref[t].astype(F32), e_ref[t].astype(F32)

  def step(t, carry, loaded):
    r, h = carry if in_registers else (None, carry)
    xt, xu, e = loaded
    if cfg.transposed:                                      # W^T h, sums along rows
      tau, upre = xt + _w_d(cfg, wt_ref, h, cfg.rows), xu + _w_d(cfg, wu_ref, h, cfg.rows)
    else:
      tau, upre = xt + _h_w(cfg, h, wt_ref), xu + _h_w(cfg, h, wu_ref)
    x, p = rum_fast._rotate(tau, e, h, in_kernel=True)
    if lam:
      row_u, row_q = rum_fast._m_rows(p)
    if in_registers:
      ru, rq, rh = _mv(r, p.u), _mv(r, p.q), _mv(r, x)     # R_{t-1} [u, q, Rot h]
      r = r + _outer(ru, row_u) + _outer(rq, row_q)         # R_t = R_{t-1} Rot_t
      for ref, y in zip(ys_refs, (ru, rq, rh)):
        ref[t] = y
    elif lam:
      rh = _stream_forward(cfg, rT_ref, ys_refs, t, p, x, row_u, row_q)
    else:
      rh = x
    hn, _ = rum_fast._head(head, h, upre, e, rh)
    hn = _store_policy(cfg, hn)
    hs_ref[t] = hn.astype(hs_ref.dtype)
    if save:
      tau_ref[t], upre_ref[t] = tau, upre
    for ref, field in zip(plane_refs, p):
      ref[t] = field
    return (r, hn) if in_registers else hn

  h0 = h0_ref[...].astype(F32)
  if lam and cfg.rows:
    _copy(cfg, r0_ref, rT_ref)
  carry = (r0_ref[...].astype(F32), h0) if in_registers else h0
  carry = _time_loop(cfg, xt_ref.shape[0], inputs, step, carry)
  if in_registers:
    rT_ref[...], carry = carry[0], carry[1]
  hT_ref[...] = carry.astype(hT_ref.dtype)


def _backward_kernel(cfg: _Cfg, tau_ref, upre_ref, e_ref, hs_ref, h0_ref, g_ref, wt_ref,
                     wu_ref, dhT_ref, *refs):
  """One example's backward pass over all T steps, t = T..1 (see the module docstring).
  With ``cfg.rows`` R lives in ``rw_ref`` and Q in ``dr0_ref`` (streamed), else in
  registers (the loop's carry)."""
  lam = cfg.head.lam
  n_in = 5 if lam else 0
  plane_refs = refs[n_in:n_in + _PLANE] if cfg.save_plane else ()
  refs = refs[:n_in] + refs[n_in + len(plane_refs):]
  if lam:
    (ru_ref, rq_ref, rh_ref, rT_ref, qT_ref, dtau_ref, dgate_ref, de_ref, dh0_ref,
     dr0_ref, *rw_ref) = refs
  else:
    dtau_ref, dgate_ref, de_ref, dh0_ref = refs
  n_steps, np_ = tau_ref.shape[0], tau_ref.shape[-1]
  head = _head_cfg(cfg, np_)
  h0 = h0_ref[...].astype(F32)
  in_registers = lam and not cfg.rows

  def inputs(i):
    t = n_steps - 1 - i
    h = jnp.where(t > 0, hs_ref[jnp.maximum(t - 1, 0)].astype(F32), h0)
    saved = {}                                              # what only some set-ups read
    if lam:
      saved["rh"] = rh_ref[t]
    if in_registers:
      saved["ru"], saved["rq"] = ru_ref[t], rq_ref[t]       # R_{t-1} u, R_{t-1} q
    if plane_refs:
      saved["plane"] = RotationPlane(*(ref[t] for ref in plane_refs))
    return (h, tau_ref[t], upre_ref[t], e_ref[t].astype(F32), g_ref[t].astype(F32)), saved

  def step(i, carry, loaded):
    t = n_steps - 1 - i
    r, q, dh = carry if in_registers else (None, None, carry)
    (h, tau, upre, e, g), saved = loaded
    g = dh + g
    if plane_refs:                                          # the forward's very plane
      p = saved["plane"]
      x = apply_plane(p, h)
    else:
      x, p = rum_fast._rotate(tau, e, h, in_kernel=True)
    rh = saved["rh"] if lam else x
    _, aux = rum_fast._head(head, h, upre, e, rh)
    dh_gate, dgate, w = rum_fast._head_bwd(head, h, aux, g)
    zero = jnp.zeros_like(p.cos)
    if in_registers:
      ru, rq = saved["ru"], saved["rq"]
      row_u, row_q = rum_fast._m_rows(p)
      if cfg.q_rows:                                        # Q in memory (dr0_ref)
        qu, qq, gu, gq, dms = _stream_q(cfg, dr0_ref, ru_ref, rq_ref, t, p, x, w)
      else:
        qu, qq = _mv(q, p.u), _mv(q, p.q)
        gu, gq = _vm(ru, q), _vm(rq, q)                     # G^T u, G^T q
        dms = tuple(jnp.sum(a * b) for a, b in ((ru, qu), (ru, qq), (rq, qu), (rq, qq)))
      if cfg.transposed:                                    # r holds R^T: sums along rows
        r = r - _outer(row_u, ru) - _outer(row_q, rq)       # R_{t-1}^T = Rot_t R_t^T
        dx, v1, v2 = _mv(r, w), _mv(r, qu), _mv(r, qq)      # R_{t-1}^T [w, Q u, Q q]
      else:
        r = r - _outer(ru, row_u) - _outer(rq, row_q)       # R_{t-1} = R_t Rot_t^T
        dx, v1, v2 = _vm(w, r), _vm(qu, r), _vm(qq, r)
      du = (v1 + gu) * p.m_uu + v2 * p.m_uq + gq * p.m_qu
      dq = (v2 + gq) * p.m_qq + v1 * p.m_qu + gu * p.m_uq
      if not cfg.q_rows:
        col_u, col_q = rum_fast._m_cols(p)
        q = q + _outer(qu, col_u) + _outer(qq, col_q) + _outer(w, x)   # Q_{t-1}
    elif lam:
      dx, du, dq, dms = _stream_backward(cfg, rw_ref[0], dr0_ref, ru_ref, rq_ref, t, p, x, w)
    else:
      dx, du, dq, dms = w, None, None, (zero,) * 4
    dtau, de, dh = rum_fast._rotate_bwd(tau, e, h, p, dx,
                                        RotationPlane(du, dq, *dms, zero, zero),
                                        in_kernel=True)
    dh = dh + _w_d(cfg, wt_ref, dtau, cfg.w_rows)            # tau = ... + h W^tau_hh
    if cfg.head.update_gate:
      dh = dh + dh_gate + _w_d(cfg, wu_ref, dgate, cfg.w_rows)
    else:
      dgate = jnp.zeros_like(dtau)
    dtau_ref[t], dgate_ref[t], de_ref[t] = dtau, dgate, de + w
    return (r, q, dh) if in_registers else dh

  dh = dhT_ref[...].astype(F32)
  if lam and cfg.rows:
    _copy(cfg, rT_ref, rw_ref[0])
  if lam and (cfg.rows or cfg.q_rows):
    _copy(cfg, qT_ref, dr0_ref)
  q_carried = in_registers and not cfg.q_rows
  carry = (rT_ref[...], qT_ref[...] if q_carried else None, dh) if in_registers else dh
  carry = _time_loop(cfg, n_steps, inputs, step, carry)
  if q_carried:
    dr0_ref[...] = carry[1]
  dh0_ref[...] = carry[2] if in_registers else carry


# --------------------------------------------------------------------- pallas_call


def _specs(n_steps, np_, kinds, block=1):
  """BlockSpecs for a grid over the batch, ``block`` examples per program: "seq"
  <T, B, Np>, "vec" <B, Np>, "mat" <B, Np, Np> (one example each), "w" <Np, Np> (shared),
  "sca" <T, B> (a number per step and example).
  With one example per program its batch axis is squeezed (the kernel sees vectors)."""
  bb = None if block == 1 else block
  table = {
      "seq": pl.BlockSpec((n_steps, bb, np_), lambda b: (0, b, 0)),
      "vec": pl.BlockSpec((bb, np_), lambda b: (b, 0)),
      "mat": pl.BlockSpec((None, np_, np_), lambda b: (b, 0, 0)),
      "w": pl.BlockSpec((np_, np_), lambda b: (0, 0)),
      "sca": pl.BlockSpec((n_steps, bb), lambda b: (0, b)),
  }
  return [table[k] for k in kinds]


def _shape(kind, n_steps, batch, np_, dtype):
  shapes = {"seq": (n_steps, batch, np_), "vec": (batch, np_), "mat": (batch, np_, np_),
            "sca": (n_steps, batch)}
  return jax.ShapeDtypeStruct(shapes[kind], dtype)


# The defaults, from an H100 (RESULTS.md, "RUM's speed"): padded sizes above STREAM_ABOVE
# stream R, Q and W by blocks of STREAM_ROWS[lam] rows (Np 256: lam=0 24 ms a step instead
# of 500, lam=1 253 instead of 883; lam=0 22.8 ms with 64 rows against 24.8 with 32); lam=0
# prefetches (copying: 4.74 ms instead of 5.27); lam=1 does not (10.25 against 9.51). Below,
# from a padded Nh of W_ROWS_FROM, the backward kernel reads W_hh by blocks of W_ROWS rows
# (copying, session 24: lam=0 4.96 ms against 5.24 whole, lam=1 8.74 against 9.28).
STREAM_ABOVE = 128
STREAM_ROWS = {0: 64, 1: 32}
W_ROWS, W_ROWS_FROM = 64, 128


def num_warps(np_: int) -> int:
  """Triton warps per program: 4 up to Np = 64, 8 above (R, Q of Np^2 numbers)."""
  return 4 if np_ <= 64 else 8


def _pallas(cfg: _Cfg, kernel, ins, outs, args, *, n_steps, batch, np_):
  """``kernel`` over a grid of ``batch / cfg.block`` programs (``batch`` a multiple of the
  block); Triton on CUDA, interpret mode on every other platform (chosen when lowering,
  not from the default backend)."""
  in_specs = _specs(n_steps, np_, ins, cfg.block)
  out_specs = _specs(n_steps, np_, [k for k, _ in outs], cfg.block)
  out_shape = [_shape(k, n_steps, batch, np_, d) for k, d in outs]

  def run(interpret, *args):
    params = None if interpret else pltriton.CompilerParams(
        num_warps=cfg.warps or num_warps(np_), num_stages=1)
    return pl.pallas_call(kernel, out_shape=out_shape, grid=(batch // cfg.block,),
                          in_specs=in_specs, out_specs=out_specs, interpret=interpret,
                          compiler_params=params, name="rum_scan")(*args)

  return jax.lax.platform_dependent(*args, cuda=functools.partial(run, False),
                                    default=functools.partial(run, True))


# --------------------------------------------------------------------- the VJP


def _pad_last(x, np_, value=0.0):
  pad = [(0, 0)] * (x.ndim - 1) + [(0, np_ - x.shape[-1])]
  return jnp.pad(x, pad, constant_values=value)


def _pad_batch(x, bp, axis):
  """``x`` with its batch ``axis`` padded with zeros to ``bp`` examples (a whole number of
  blocks; zero inputs and state keep a padded example at h = 0, its rows are dropped)."""
  if x.shape[axis] == bp:
    return x
  return jnp.pad(x, [(0, bp - x.shape[axis]) if a == axis else (0, 0) for a in range(x.ndim)])


def _blocks(cfg: _Cfg, batch: int) -> int:
  """The batch padded to a whole number of blocks."""
  return -(-batch // cfg.block) * cfg.block


def _pad_square(m, np_):
  """<..., N, N> -> <..., Np, Np> with the identity on the padding."""
  n = m.shape[-1]
  eye = jnp.eye(np_, dtype=m.dtype)
  return eye.at[:n, :n].set(0.0) + jnp.pad(m, [(0, 0)] * (m.ndim - 2) + [(0, np_ - n)] * 2)


def _forward(cfg: _Cfg, params, xs, carry0, save=True):
  """The forward kernel and what the backward reads (``save``; else None in its place)."""
  kernel_x, bias, kernel_h = params
  cfg = cfg._replace(save_plane=save and cfg.save_plane)
  n, np_ = cfg.nh, padded_size(cfg.nh)
  n_steps, batch = xs.shape[:2]
  xp = jnp.matmul(xs, kernel_x, precision=cfg.precision) + bias          # <T, B, 3N>
  bp = _blocks(cfg, batch)
  xt, xu, e = (_pad_batch(_pad_last(xp[..., k * n:(k + 1) * n], np_), bp, 1)
               for k in range(3))
  wt, wu = (_pad_last(jnp.pad(kernel_h[:, k * n:(k + 1) * n], [(0, np_ - n), (0, 0)]),
                      np_) for k in range(2))
  lam, dtype = cfg.head.lam, xs.dtype
  r0, h0 = carry0 if lam else (None, carry0)
  rdtype = at_least_float32(dtype)
  ins = ["seq"] * 3 + ["w"] * 2 + ["vec"]
  w_fwd = (wt.T, wu.T) if cfg.transposed else (wt, wu)
  args = [xt, xu, e, *w_fwd, _pad_batch(_pad_last(h0, np_), bp, 0)]
  n_saved = (2 + 3 * bool(lam)) if save else 0   # tau, u' (and R_{t-1} [u, q, Rot h])
  outs = [("seq", dtype)] + [("seq", F32)] * n_saved
  if lam:
    ins.append("mat")
    args.append(_pad_square(r0.astype(F32), np_))
  outs.append(("vec", dtype))
  if lam:
    outs.append(("mat", F32))
  if cfg.save_plane:
    outs += [(k, F32) for k in _PLANE_KINDS]
  out = _pallas(cfg, functools.partial(_forward_kernel, cfg, save), ins, outs, args,
                n_steps=n_steps, batch=bp, np_=np_)
  plane = tuple(out[len(out) - _PLANE:]) if cfg.save_plane else ()
  out = out[:len(out) - len(plane)]
  hs = out[0]
  tau, upre = out[1:3] if save else (None, None)
  ys = tuple(out[3:1 + n_saved])
  h_final = out[-2 if lam else -1][:batch, :n]
  if lam:
    r_final = out[-1]
    final = (r_final[:, :n, :n].astype(rdtype), h_final)
  else:
    r_final, final = None, h_final
  res = (params, xs, h0, hs, tau, upre, e, ys, r_final, wt, wu, plane)
  return (final, hs[:, :batch, :n]), res


def _primal(cfg, params, xs, carry0):
  """The forward pass alone (no gradient asked for): nothing saved for the backward, so
  inference stores O(T B Nh) numbers once (``h_t``), not three or six times."""
  return _forward(cfg, params, xs, carry0, save=False)[0]


def _bwd(cfg: _Cfg, res, cts):
  params, xs, h0, hs, tau, upre, e, ys, r_final, wt, wu, plane = res
  kernel_x, _, kernel_h = params
  (ct_final, ct_hs) = cts
  lam, n, np_ = cfg.head.lam, cfg.nh, padded_size(cfg.nh)
  n_steps, batch = xs.shape[:2]
  dr_final, dh_final = ct_final if lam else (None, ct_final)
  bp = _blocks(cfg, batch)
  ins = ["seq"] * 4 + ["vec", "seq", "w", "w", "vec"]
  args = [tau, upre, e, hs, _pad_batch(_pad_last(h0, np_), bp, 0),
          _pad_batch(_pad_last(ct_hs, np_), bp, 1), wt, wu,
          _pad_batch(_pad_last(dh_final, np_), bp, 0)]
  if lam:
    ins += ["seq"] * 3 + ["mat"] * 2
    pad = [(0, 0), (0, np_ - n), (0, np_ - n)]
    r_in = jnp.swapaxes(r_final, 1, 2) if cfg.transposed and not cfg.rows else r_final
    args += list(ys) + [r_in, jnp.pad(dr_final.astype(F32), pad)]
  if cfg.save_plane:
    ins += _PLANE_KINDS
    args += list(plane)
  outs = [("seq", F32)] * 3 + [("vec", F32)] + ([("mat", F32)] if lam else [])
  if lam and cfg.rows:
    outs.append(("mat", F32))                  # the streamed R_t (scratch)
  out = _pallas(cfg, functools.partial(_backward_kernel, cfg), ins, outs, args,
                n_steps=n_steps, batch=bp, np_=np_)
  dtau, dgate, de = (d[:, :batch, :n] for d in out[:3])
  dh0 = out[3][:batch, :n].astype(h0.dtype)
  # The weight gradients and dL/dx as large matmuls outside the kernel.
  wdtype = at_least_float32(kernel_x)
  dxp = jnp.concatenate([dtau, dgate, de], axis=-1)                  # <T, B, 3N>
  h_prev = jnp.concatenate([h0[None], hs[:-1, :batch, :n]], axis=0)
  mm = functools.partial(jnp.einsum, precision=cfg.precision, preferred_element_type=wdtype)
  dkx = mm("tbx,tbk->xk", xs.astype(wdtype), dxp)
  dkh = mm("tbn,tbk->nk", h_prev.astype(wdtype), dxp[..., :2 * n])
  db = jnp.sum(dxp, axis=(0, 1))
  dxs = jnp.matmul(dxp.astype(xs.dtype), kernel_x.T, precision=cfg.precision)
  grads = tuple(g.astype(p.dtype) for g, p in zip((dkx, db, dkh), params))
  dcarry = (out[4][:, :n, :n].astype(dr_final.dtype), dh0) if lam else dh0
  return grads, dxs.astype(xs.dtype), dcarry


def _fwd(cfg, params, xs, carry0):
  return _forward(cfg, params, xs, carry0)


_core = jax.custom_vjp(_primal, nondiff_argnums=(0,))
_core.defvjp(_fwd, _bwd)


# ------------------------------------------------------------------------ entry


def kernel_scan(params, xs, carry0, *, lam: int, eta: Optional[float],
                activation: Callable, update_gate: bool, precision=None,
                num_warps: Optional[int] = None, block: int = 1,
                save_plane: bool = False, rows="auto", transposed: bool = False,
                prefetch="auto", w_rows="auto", w_columns: bool = False,
                q_rows: Optional[int] = None):
  """The RUM recurrence over a time-major input in two fused kernels (forward, backward).

  Arguments and results as :func:`rumjax.core.rum_fast.fast_scan` (without ``unroll`` and
  ``return_cos``): ``xs`` <float>[T, B, Nx], ``carry0`` ``h_0`` <float>[B, Nh] or for
  ``lam=1`` ``(R_0, h_0)``; returns ``(final_state, hs)``. ``lam`` must be 0 or 1;
  ``precision`` applies to the matmuls outside the kernels. ``num_warps``: Triton warps per
  program on CUDA (a power of 2; None: :func:`num_warps` of the padded size), for tuning
  (``launch.benchmark``'s ``rum1_kernel_w16`` etc.); it does not change the values.
  ``block`` (``lam=0`` only; 1 or a power of 2 >= 16): examples per program. Then ``h`` is a
  <block, Np> tile and ``h W_hh`` (and ``dtau W^T`` backwards) one matrix product on the
  tensor cores at ``precision`` (the XLA path's gate precision; Triton's dot needs 16
  rows), the weights read once per step and block instead of once per example. On an H100
  slower than ``block=1`` (fewer programs than SMs; at Np 256 W exceeds shared memory), so
  ``impl="kernel"`` runs ``block=1``. ``save_plane``: the forward kernel writes each step's plane (``u``,
  ``q``: 2 Nh numbers, and six more per step and example) and the backward kernel reads it
  instead of computing it again: the same values, four fewer dependent reductions (norms,
  ``cos``, Gram-Schmidt, ``sin``) in every backward step; on an H100 within 5% of the
  default either way (``rum{0,1}_kernel_sp``). ``rows`` (a power of 2, or None): the matrices ``R``, ``Q``
  (``lam=1``) and ``W_hh`` streamed through memory in blocks of ``rows`` rows instead of
  held whole in registers (per example and step, ``R`` and ``Q`` are read and written once
  there, mostly in L2): for a padded Nh whose <Np, Np> tiles do not fit a program's
  registers (Np = 256: one R is 256 KB, a register file; an H100 ran lam=0 20x and lam=1
  4.4x faster so than in registers); the same values up to the order of the sums (``rum{0,1}_kernel_r<k>``). ``"auto"``: :data:`STREAM_ROWS` ``[lam]`` above a padded
  Nh of :data:`STREAM_ABOVE`, else None (in registers). ``transposed``: the forward kernel reads
  ``W_hh^T`` and the backward kernel (``R`` in registers) holds ``R^T``, so that ``h W`` and
  ``R_{t-1}^T [w, Q u, Q q]`` are sums along rows (within a warp in Triton's layouts)
  instead of down columns (across warps, through shared memory); the same values up to the
  order of the sums (``rum{0,1}_kernel_t``; on an H100 slower, lam=1 by 1.7x).
  ``prefetch``: each step's loads (inputs,
  saved states) are issued at the start of the step before, so that their latency hides
  behind its work; the same values (``rum{0,1}_kernel_pf``). ``"auto"``: on for
  ``lam=0``, off for ``lam=1`` (as measured). ``w_rows`` (a power of 2, None or
  ``"auto"``: as ``rows``): the backward kernel reads ``W_hh`` by blocks of ``w_rows``
  rows, so that the weights hold no registers there, where the cotangents (and for
  ``lam=1`` R and Q) compete for them (``rum{0,1}_kernel_wr<k>``; the forward kernel
  streams W with ``rows`` only). ``"auto"``: ``rows`` where set, else :data:`W_ROWS` from
  a padded Nh of :data:`W_ROWS_FROM` (compiled for sm_90 here, lam=0's backward kernel at
  copying then spills no bytes per thread instead of 888, ``launch.kernel_resources``; on
  an H100 lam=0 4.96-5.17 ms against 5.24-5.42 with W whole, lam=1 8.74-8.79 against
  9.28-9.34). ``w_columns`` (with ``rows``): the forward kernel reads ``W_hh`` by blocks
  of columns, each giving a block of ``h W`` from the whole ``h``, instead of by blocks of
  rows, which must first cut ``h`` into blocks (a masked sum each): for sm_90, lam=0 at
  Nh 256 130 -> 92 barriers and 255 -> 177 registers a step (``rum{0,1}_kernel_wc``); on
  an H100 at Nh 256 lam=0 23.2 ms against 24.8 with rows=32 (64 rows, now lam=0's default:
  22.8), lam=1 202.7 against 202.1. ``q_rows`` (a power of 2, ``lam=1`` with R in
  registers): the backward kernel keeps ``R`` in registers and streams ``Q = dL/dR``
  through memory by blocks of ``q_rows`` rows (one read and one write of Q per step), so
  that one <Np, Np> tile instead of two competes for the registers (copying: R and Q are
  2 x 64 KB per example, the register file 256 KB); the same values up to the order of the
  sums (``rum1_kernel_qr<k>``); not yet timed on a GPU.
  """
  if lam not in (0, 1):
    raise ValueError(f"the RUM kernel runs lam 0 and 1; got lam={lam!r} (use impl='fast').")
  nh = params["kernel_h"].shape[0]
  head = rum_fast._Cfg(lam, eta, activation, bool(update_gate), 1, False)
  if num_warps is not None and (num_warps < 1 or num_warps & (num_warps - 1)):
    raise ValueError(f"num_warps={num_warps!r} must be a power of 2 (1, 2, 4, 8, 16, 32).")
  if block != 1 and (lam != 0 or block < 16 or block & (block - 1)):
    raise ValueError(f"block={block!r}: a block of examples per program needs lam=0 (lam=1 "
                     "keeps each example's R on chip) and a power of 2 >= 16.")
  np_ = padded_size(nh)
  if rows == "auto":
    rows = STREAM_ROWS[lam] if np_ > STREAM_ABOVE and block == 1 else None
  if prefetch == "auto":
    prefetch = lam == 0
  if w_rows == "auto":
    w_rows = rows or (W_ROWS if np_ >= W_ROWS_FROM and block == 1 else None)
  for name, value in (("rows", rows), ("w_rows", w_rows), ("q_rows", q_rows)):
    if value is not None and (value < 1 or value & (value - 1) or block != 1):
      raise ValueError(f"{name}={value!r} must be a power of 2, with block=1 (a block of "
                       "examples holds h W as one product).")
  if q_rows is not None and (lam != 1 or rows is not None):
    raise ValueError(f"q_rows={q_rows!r} streams lam=1's Q with R in registers; got lam={lam} "
                     f"and rows={rows!r} (rows streams R and Q already; leave q_rows None).")
  cfg = _Cfg(head, nh, jnp.dtype(xs.dtype), num_warps, block, bool(save_plane),
             resolve_precision(precision), rows, bool(transposed), bool(prefetch), w_rows,
             bool(w_columns), q_rows)
  p = (params["kernel_x"], params["bias"], params["kernel_h"])
  shards = sharding.context_batch_shards()
  if shards > 1:
    return _per_shard(cfg, p, xs, carry0, shards)
  return _core(cfg, p, xs, carry0)


def _per_shard(cfg: _Cfg, p, xs, carry0, shards: int):
  """The kernels on each shard of the batch, split over the ``data`` axis of the mesh in
  context (``jax.shard_map``): XLA cannot partition a custom call, and would otherwise
  gather the batch and run the whole kernel on every device. The parameters are
  replicated; their gradients are summed over the shards by the ``shard_map``'s transpose."""
  batch = xs.shape[1]
  if batch % shards:
    raise ValueError(f"the RUM kernel splits the batch over the mesh's {shards} "
                     f"'{sharding.DATA}' shards, and a batch of {batch} does not split "
                     f"evenly: use a multiple of {shards} (or impl='fast').")
  rows = jax.sharding.PartitionSpec(sharding.DATA)
  carry = (rows, rows) if cfg.head.lam else rows
  return jax.shard_map(functools.partial(_core, cfg),
                       in_specs=(jax.sharding.PartitionSpec(),
                                 jax.sharding.PartitionSpec(None, sharding.DATA), carry),
                       out_specs=(carry, jax.sharding.PartitionSpec(None, sharding.DATA)),
                       check_vma=False)(
                           p, xs, carry0)

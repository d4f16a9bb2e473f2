"""The RUM recurrence: Algorithm 1 of Dangovski et al. (TACL 2019) as pure JAX functions.

For t = 1..T (Algorithm 1)::

    tau_t = W^tau_xh x_t + W^tau_hh h_{t-1} + b^tau      memory target
    u_t   = sigmoid(W^u_xh x_t + W^u_hh h_{t-1} + b^u)  update gate
    e_t   = W~_xh x_t + b                               embedded input
    R_t   = (R_{t-1})^lam Rotation(e_t, tau_t)          associative memory, eq. (2)
    h~_t  = f(e_t + R_t h_{t-1})                        hidden state evolution
    h'_t  = u_t * h_{t-1} + (1 - u_t) * h~_t            new state
    h_t   = eta h'_t / |h'_t|                           time normalization (optional)

Parameter layout (one matmul projects a whole input sequence outside the scan)::

    params = {"kernel_x": (Nx, 3 Nh),   # columns [tau | u | e]
              "kernel_h": (Nh, 2 Nh),   # columns [tau | u]
              "bias":     (3 Nh,)}      # [b^tau | b^u | b]

``x @ kernel_x`` is ``W_xh x`` of the paper (kernels act from the right, as in Flax).

Dtypes (the mixed-precision policy; ``dtype`` = the inputs' and parameters' dtype
promoted together, e.g. bfloat16; ``rdtype = promote_types(dtype, float32)``):

* ``dtype``: the gate matmuls ``x @ kernel_x``, ``h @ kernel_h`` (default precision),
  ``tau``, ``u``, ``e``, ``h~``, ``h'`` and the hidden states ``h_t`` returned.
* ``rdtype`` (float32, or float64 for float64 inputs): the rotation path. The normalised
  vectors, ``cos``/``sin`` (:func:`rumjax.core.rotation.rotation_plane`, elementwise ops), the
  memory ``R_t`` (carried in ``rdtype`` always, as recurrentgemma carries its recurrent
  state in float32) and its update with every product at ``lax.Precision.HIGHEST``, and
  ``R_t h_{t-1}``, which is rounded to ``dtype`` once, when it is added to ``e_t``. The
  norm of ``h'_t`` for time normalization is also taken in ``rdtype``.

So ``R_t`` stays orthogonal to float32 accuracy whatever the policy (bfloat16 rounding
of a rotation would leave it ~1e-2 away from orthogonal after a few hundred steps).
Near anti-parallel ``e_t``, ``tau_t`` see :mod:`rumjax.core.rotation`: the rotation stays
orthogonal to working precision up to and through ``theta = pi``.

A real ``lam`` (not 0 or 1; section 6 and footnote 9 of the paper) takes the principal power
``(R_{t-1})^lam = exp(lam log R_{t-1})`` of :func:`rumjax.core.power.rotation_power` each
step (an ``eigh`` of ``Nh x Nh``, O(Nh^3) per example and step) under
:func:`checkpointed_scan` (``R_t`` stored every ``sqrt(T)`` steps); ``lam`` may also be a
traced scalar (learned). ``lam = 0`` and ``lam = 1`` keep their own code paths.
"""

import functools
import math
import numbers
from typing import Any, Callable, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from rumjax import sharding
from rumjax.core import initializers, rum_fast, rum_kernel
from rumjax.core.power import rotation_power
from rumjax.core.precision import HIGHEST, at_least_float32, resolve_precision
from rumjax.core.rotation import RotationPlane, apply_plane, rotation_plane

Array = jax.Array

ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "relu": jax.nn.relu,
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    "softsign": jax.nn.soft_sign,
}

_identity = lambda x: x


# --------------------------------------------------------------------------- checks


def check_lam(lam) -> Union[int, float, Array]:
  """``lam`` of eq. (2): a real number >= 0 (0 and 1 returned as ints, any other as a float),
  or a scalar array (a learned ``lam``, e.g. :class:`~rumjax.cells.rum.RUMCell`'s
  ``learn_lam``; its sign is the caller's to keep, as the cell's projection does).

  0 switches the associative memory off, 1 is ``R_t = R_{t-1} Rotation``, any other value
  the real power ``(R_{t-1})^lam`` (:func:`rumjax.core.power.rotation_power`), e.g. 0.5 or 2.
  """
  if isinstance(lam, (jax.Array, jax.core.Tracer, np.ndarray)):
    if jnp.ndim(lam) != 0 or not jnp.issubdtype(lam.dtype, jnp.floating):
      raise ValueError(f"lam as an array must be a float scalar (a learned lam); got shape "
                       f"{jnp.shape(lam)} and dtype {lam.dtype}.")
    return lam
  if (isinstance(lam, bool) or not isinstance(lam, numbers.Real)
      or not math.isfinite(lam) or lam < 0):
    raise ValueError(
        f"lam={lam!r} is not supported: lam is the power of the associative memory in "
        "eq. (2) and must be a real number >= 0 (0: no memory, 1: R_t = R_(t-1) Rotation).")
  return int(lam) if lam in (0, 1) else float(lam)


def has_memory(lam) -> bool:
  """Whether eq. (2)'s memory ``R`` is on (carried): every ``lam`` but a Python 0."""
  return not (isinstance(lam, numbers.Number) and lam == 0)


def _is_one(lam) -> bool:
  return isinstance(lam, numbers.Number) and lam == 1


def check_eta(eta) -> Optional[float]:
  if eta is None:
    return None
  if (not isinstance(eta, numbers.Real) or isinstance(eta, bool) or not math.isfinite(eta)
      or not eta > 0):   # numbers.Real: numpy floats too; inf made every h non-finite
    raise ValueError(
        f"eta={eta!r} is not supported: eta is the norm of the time-normalised hidden "
        "state and must be a finite number > 0, or None to switch time normalization off.")
  return float(eta)


def get_activation(activation: Union[str, Callable]) -> Callable[[Array], Array]:
  """The non-linearity ``f`` of Algorithm 1, by name (or a callable, returned as is)."""
  if callable(activation):
    return activation
  if activation not in ACTIVATIONS:
    raise ValueError(
        f"activation={activation!r} is unknown; accepted names are "
        f"{sorted(ACTIVATIONS)} (or pass a callable).")
  return ACTIVATIONS[activation]


def check_params(params, nx: Optional[int] = None) -> tuple[int, int]:
  """Validates the RUM parameter layout; returns ``(Nx, Nh)``."""
  if not isinstance(params, dict) or set(params) != {"kernel_x", "kernel_h", "bias"}:
    got = sorted(params) if isinstance(params, dict) else type(params).__name__
    raise ValueError(
        f"params must be a dict with keys ['bias', 'kernel_h', 'kernel_x']; got {got}. "
        "Use rumjax.init_rum_params(key, nx, nh) to create them.")
  kx, kh, bias = (jnp.shape(params[k]) for k in ("kernel_x", "kernel_h", "bias"))
  if len(kh) != 2 or kh[1] != 2 * kh[0]:
    raise ValueError(f"params['kernel_h'] must have shape (Nh, 2*Nh); got {kh}.")
  nh = kh[0]
  if len(kx) != 2 or kx[1] != 3 * nh:
    raise ValueError(
        f"params['kernel_x'] must have shape (Nx, 3*Nh) = (Nx, {3 * nh}); got {kx}.")
  if bias != (3 * nh,):
    raise ValueError(f"params['bias'] must have shape (3*Nh,) = ({3 * nh},); got {bias}.")
  if nx is not None and kx[0] != nx:
    raise ValueError(
        f"xs has {nx} features in its last axis but params['kernel_x'] expects "
        f"Nx={kx[0]} (shape {kx}); the parameters do not match the inputs.")
  return kx[0], nh


# ------------------------------------------------------------------- initialisation


# Algorithm 1: side-by-side orthogonal blocks of gain 1.0, one per kernel of the paper.
rum_kernel_init = initializers.block_orthogonal


def rum_bias_init(key, shape, dtype=jnp.float32):
  """Biases ``[b^tau | b^u | b]`` at ``[1 | 1 | 0]``, as in the authors' released code."""
  del key
  nh = shape[0] // 3
  return jnp.concatenate([jnp.ones((2 * nh,), dtype), jnp.zeros((nh,), dtype)])


def init_rum_params(key: Array, nx: int, nh: int, dtype=jnp.float32) -> dict:
  """RUM parameters in the layout of this module, initialised as in Algorithm 1.

  Args:
    key: a PRNG key.
    nx: input size ``N_x``.
    nh: hidden size ``N_h``.
    dtype: parameter dtype.

  Returns:
    ``{"kernel_x": (nx, 3 nh), "kernel_h": (nh, 2 nh), "bias": (3 nh,)}``.

  Raises:
    ValueError: if ``nx`` or ``nh`` is not a positive integer.
  """
  initializers.check_sizes(nx=nx, nh=nh)
  kx, kh = jax.random.split(key)
  return {
      "kernel_x": rum_kernel_init(3)(kx, (nx, 3 * nh), dtype),
      "kernel_h": rum_kernel_init(2)(kh, (nh, 2 * nh), dtype),
      "bias": rum_bias_init(None, (3 * nh,), dtype),
  }


# ----------------------------------------------------------------------- one step


def _normalize(h, eta):
  """``eta h / |h|`` (time normalization); a zero ``h`` stays zero (finite gradient).

  The norm is taken in at least float32 (a statistic, as layer norm's), the result has
  the dtype of ``h``.
  """
  h32 = h.astype(at_least_float32(h))
  sq = jnp.sum(h32 * h32, axis=-1, keepdims=True)
  nonzero = sq > 0
  scale = jnp.where(nonzero, eta * jax.lax.rsqrt(jnp.where(nonzero, sq, 1.0)), 0.0)
  return (scale * h32).astype(h.dtype)


def update_memory(r_prev: Array, plane: RotationPlane, h: Array) -> tuple[Array, Array]:
  """``R_t = R_{t-1} Rotation(e, tau)`` as a rank-2 correction, and ``R_t h``.

  With ``Rotation = 1 + (u, q) M (u, q)^T`` (see :mod:`rumjax.core.rotation`),
  ``R_t = R_{t-1} + (R_{t-1} u, R_{t-1} q) M (u, q)^T``: one batched product
  ``R_{t-1} [u, q, h]`` and two outer products, O(N^2) per example.

  Everything is computed in the plane's dtype (at least float32) with the batched
  product at ``lax.Precision.HIGHEST``; the rest are elementwise products and sums.

  Args:
    r_prev: <float>[..., N, N] the memory ``R_{t-1}``.
    plane: the rotation of this step (:func:`rumjax.core.rotation.rotation_plane`).
    h: <float>[..., N] the hidden state ``h_{t-1}`` (any float dtype).

  Returns:
    ``(R_t, R_t h)``, both in the plane's dtype.
  """
  dtype = plane.u.dtype
  r_prev, h = jnp.asarray(r_prev, dtype), jnp.asarray(h, dtype)
  y = jnp.einsum("...ij,...jk->...ik", r_prev,
                 jnp.stack([plane.u, plane.q, h], axis=-1), precision=HIGHEST)
  ru, rq, rh = y[..., 0], y[..., 1], y[..., 2]
  row_u = plane.m_uu[..., None] * plane.u + plane.m_uq[..., None] * plane.q
  row_q = plane.m_qu[..., None] * plane.u + plane.m_qq[..., None] * plane.q
  r_new = r_prev + ru[..., :, None] * row_u[..., None, :] + rq[..., :, None] * row_q[..., None, :]
  uh = jnp.sum(plane.u * h, axis=-1, keepdims=True)
  qh = jnp.sum(plane.q * h, axis=-1, keepdims=True)
  # R_t h = R_{t-1} (h + (u, q) M (u, q)^T h).
  r_h = rh + ru * (plane.m_uu[..., None] * uh + plane.m_uq[..., None] * qh) \
           + rq * (plane.m_qu[..., None] * uh + plane.m_qq[..., None] * qh)
  return r_new, r_h


def rum_step(carry, x_proj: Array, kernel_h: Array, *, lam: int, eta: Optional[float],
             activation: Callable[[Array], Array], update_gate: bool,
             norm_tau: Callable = _identity, norm_u: Callable = _identity,
             norm_h: Callable = _identity, precision=None):
  """One step of Algorithm 1 given the projected input ``x_proj = x @ kernel_x + bias``.

  Args:
    carry: ``h`` <float>[..., Nh] for ``lam=0``; ``(R, h)`` with R <float>[..., Nh, Nh]
      for ``lam > 0``.
    x_proj: <float>[..., 3 Nh] the input projection ``[tau | u | e]`` of this step.
    kernel_h: <float>[Nh, 2 Nh] the recurrent kernel ``[W^tau_hh | W^u_hh]``.
    lam, eta, activation, update_gate: as in :func:`rum_scan` (already validated); ``lam``
      a Python number or a scalar array (a learned ``lam``: the real power).
    norm_tau, norm_u, norm_h: optional normalisations (layer norm) of the ``tau`` and
      ``u`` pre-activations and of the pre-activation ``e + R h`` of ``h~``.
    precision: of the gate matmul ``h @ kernel_h`` (None: the backend's default; a name
      of :data:`rumjax.core.precision.PRECISIONS`); the rotation path is at HIGHEST.

  Returns:
    ``(new_carry, (h_t, plane))``: ``h_t`` in the dtype of ``h`` and ``x_proj``, ``R_t``
    and the plane in at least float32 (see the module docstring).
  """
  memory = has_memory(lam)
  r_prev, h = carry if memory else (None, carry)
  nh = h.shape[-1]
  h_proj = jnp.matmul(h, kernel_h, precision=resolve_precision(precision))
  tau = norm_tau(x_proj[..., :nh] + h_proj[..., :nh])
  e = x_proj[..., 2 * nh:]
  plane = rotation_plane(e, tau)
  if memory:
    # eq. (2): R_t = (R_{t-1})^lam Rotation(e_t, tau_t); lam = 1 multiplies R_{t-1} as is.
    r_mem = r_prev if _is_one(lam) else rotation_power(r_prev, lam)
    r_new, r_h = update_memory(r_mem, plane, h)
  else:
    r_new, r_h = None, apply_plane(plane, h.astype(plane.u.dtype))
  h_tilde = activation(norm_h(e + r_h.astype(e.dtype)))
  if update_gate:
    u = jax.nn.sigmoid(norm_u(x_proj[..., nh:2 * nh] + h_proj[..., nh:]))
    h_new = u * h + (1.0 - u) * h_tilde
  else:
    h_new = h_tilde
  if eta is not None:
    h_new = _normalize(h_new, eta)
  return ((r_new, h_new) if memory else h_new), (h_new, plane)


def initial_carry(batch_shape, nh: int, lam: int, dtype, h0=None):
  """The carry before step 1: ``h_0`` (zeros by default) and, for ``lam > 0``, ``R_0 = 1``.

  ``h`` has ``dtype``; ``R`` has ``promote_types(dtype, float32)`` (the memory is
  carried in at least float32 whatever the policy).
  """
  if h0 is None:
    h = jnp.zeros(tuple(batch_shape) + (nh,), dtype)
    r = None
  elif isinstance(h0, (tuple, list)):
    if not has_memory(lam):
      raise ValueError("h0 is a pair (R, h), but lam=0 carries h alone (no memory R); "
                       "pass h0=h.")
    r, h = h0
  else:
    h, r = h0, None
  if not has_memory(lam):
    return jnp.asarray(h, dtype)
  rdtype = at_least_float32(dtype)
  if r is None:
    r = jnp.broadcast_to(jnp.eye(nh, dtype=rdtype), jnp.shape(h)[:-1] + (nh, nh))
  return jnp.asarray(r, rdtype), jnp.asarray(h, dtype)


# ----------------------------------------------------------------------- the scan


IMPLS = ("auto", "fast", "kernel", "reference")

# impl="auto" picks the fused kernel on a GPU up to this padded hidden size, per lam.
# Measured on an H100 (RESULTS.md, "RUM's speed"): at Np 64 (recall) and 128 (copying) the
# kernel's training step took 0.13-0.31x the XLA scan's time; at Np 256 (256x520x64x256,
# R, Q and W streamed by blocks of rows) lam=0 24 ms against the XLA scan's 33, lam=1 253
# ms against 191 (one example's R and Q no longer fit a program's registers).
KERNEL_AUTO_MAX_HIDDEN = {0: 256, 1: 128}

_KERNEL_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16))


def kernel_unsupported(*, lam, return_cos: bool, dtype) -> Optional[str]:
  """Why the fused kernel cannot run this call (None if it can)."""
  if not isinstance(lam, numbers.Real):   # check_lam passes a learned lam through as an array
    return ("lam given as an array (the kernel runs the fixed lam 0 and 1 given as Python "
            "numbers; an array is a learned lam, even when it holds 0 or 1)")
  if not (isinstance(lam, int) and lam in (0, 1)):
    return f"lam={lam!r} (the kernel runs lam 0 and 1)"
  if return_cos:
    return "return_cos=True"
  if jnp.dtype(dtype) not in _KERNEL_DTYPES:
    return f"dtype {jnp.dtype(dtype).name} (the kernel runs float32 and bfloat16)"
  return None


def kernel_auto_eligible(*, lam, return_cos: bool, nh: int, dtype,
                         devices: Optional[int] = None, batch: Optional[int] = None,
                         shards: Optional[int] = None) -> bool:
  """Whether ``impl="auto"`` runs the fused kernel where the computation is lowered for a
  CUDA GPU: ``lam`` 0 or 1, float32 or bfloat16, a padded hidden size up to
  :data:`KERNEL_AUTO_MAX_HIDDEN` (lam=0: 256, lam=1: 128, where an H100 measured it faster
  than the XLA scan), no ``return_cos``, on one device or with the batch split over every
  device by the mesh in context (the training loop's ``data`` axis; the kernel then runs
  per shard in a ``shard_map``, :func:`rumjax.core.rum_kernel.kernel_scan`); not with
  several devices without such a mesh or with a batch that does not split evenly (XLA's
  partitioner cannot split the kernel's custom call: it would gather the batch and repeat
  the whole kernel on every GPU). ``devices`` defaults to ``jax.device_count()``,
  ``shards`` to :func:`rumjax.sharding.context_batch_shards`; ``batch`` is the flattened
  batch size (None: not checked)."""
  devices = jax.device_count() if devices is None else devices
  shards = sharding.context_batch_shards() if shards is None else shards
  split = devices == 1 or (shards == devices and (batch is None or batch % shards == 0))
  return bool(split and kernel_unsupported(lam=lam, return_cos=return_cos, dtype=dtype) is None
              and rum_kernel.padded_size(nh) <= KERNEL_AUTO_MAX_HIDDEN[int(lam)])


def select_impl(impl: str, *, lam, return_cos: bool, nh: int, dtype,
                backend: Optional[str] = None, devices: Optional[int] = None,
                batch: Optional[int] = None, shards: Optional[int] = None) -> str:
  """The implementation ``rum_scan(impl=...)`` runs on ``backend``: ``"auto"`` resolved,
  the others as is.

  ``"auto"``: the fused Pallas kernel (:mod:`rumjax.core.rum_kernel`) on a CUDA GPU where
  :func:`kernel_auto_eligible`, the XLA fast path (:mod:`rumjax.core.rum_fast`)
  everywhere else: CPUs, TPUs, other GPUs, a real ``lam``, ``return_cos``, larger hidden
  sizes. ``rum_scan`` makes this choice when the computation is lowered
  (``jax.lax.platform_dependent``), so that a function exported for CUDA from a CPU host
  holds the kernel; this function says what runs on ``backend`` (default: the platform of
  this process's first device, e.g. ``"cuda"``, ``"cpu"``; ``"gpu"`` counts as CUDA) for
  the training log and the benchmarks.
  """
  if impl != "auto":
    return impl
  return _auto_choice(kernel_auto_eligible(lam=lam, return_cos=return_cos, nh=nh,
                                           dtype=dtype, devices=devices, batch=batch,
                                           shards=shards), backend)


def _auto_choice(eligible: bool, backend: Optional[str] = None) -> str:
  """What ``impl="auto"`` runs on ``backend`` (:func:`select_impl`) given
  :func:`kernel_auto_eligible`."""
  backend = jax.devices()[0].platform if backend is None else backend
  return "kernel" if backend in ("gpu", "cuda") and eligible else "fast"


_DESCRIPTIONS = {
    "fast": "the XLA scan with the hand-written backward pass (rum_fast)",
    "kernel": "the fused Pallas kernel, one launch per pass (rum_kernel)",
    "reference": "the plain lax.scan differentiated by autodiff",
}
_logged: set = set()


def _log_impl(impl: str, lam) -> None:
  """One log line per implementation a process uses (the training log says which ran)."""
  key = (impl, "real" if not isinstance(lam, int) else lam, jax.default_backend())
  if key not in _logged:
    _logged.add(key)
    name = "checkpointed scan (real lam)" if impl == "fast" and key[1] == "real" else (
        _DESCRIPTIONS[impl])
    logging.info("rum_scan: impl=%s on %s, lam=%s: %s.", impl, key[2], key[1], name)


def _warn_large_kernel(lam: int, nh: int) -> None:
  """One warning per size where ``impl="kernel"`` is asked for above
  :data:`KERNEL_AUTO_MAX_HIDDEN`: the kernel runs (any Nh), but compiled for sm_90 one
  example's state no longer fits a thread's registers (``launch.kernel_resources`` at Nh
  300: lam=0 11,456 spilled stores forward, lam=1 16,216 backward) and no GPU has timed it."""
  padded = rum_kernel.padded_size(nh)
  key = ("large_kernel", lam, padded)
  if padded > KERNEL_AUTO_MAX_HIDDEN[lam] and key not in _logged:
    _logged.add(key)
    logging.warning(
        "rum_scan: impl='kernel' at hidden size %d (padded %d) for lam=%d, above the %d up "
        "to which a GPU measured it faster than the XLA scan (beyond, one example's state "
        "exceeds a thread's registers); impl='auto' runs the XLA scan here.",
        nh, padded, lam, KERNEL_AUTO_MAX_HIDDEN[lam])


def _fast_scan(params, xs, h0, *, lam, eta, f, update_gate, time_major, unroll,
               return_cos, precision, kernel=False):
  """:func:`rumjax.core.rum_fast.fast_scan` (or with ``kernel``
  :func:`rumjax.core.rum_kernel.kernel_scan`) on ``xs`` of any batch shape and
  major-ness."""
  if not time_major:
    xs = jnp.moveaxis(xs, -2, 0)
  t, batch_shape, nh = xs.shape[0], xs.shape[1:-1], params["kernel_h"].shape[0]
  nb = math.prod(batch_shape)
  flat = lambda v, k: jnp.reshape(v, (nb,) + v.shape[k:])
  carry = (flat(h0[0], -2), flat(h0[1], -1)) if lam else flat(h0, -1)
  xs = jnp.reshape(xs, (t, nb, xs.shape[-1]))
  if kernel:
    final, hs = rum_kernel.kernel_scan(params, xs, carry, lam=lam, eta=eta, activation=f,
                                       update_gate=update_gate, precision=precision)
    cos = ()
  else:
    final, hs, *cos = rum_fast.fast_scan(
        params, xs, carry, lam=lam, eta=eta, activation=f, update_gate=update_gate,
        unroll=unroll, return_cos=return_cos, precision=precision)
  unflat = lambda v, k: jnp.reshape(v, batch_shape + v.shape[k:])
  final = (unflat(final[0], -2), unflat(final[1], -1)) if lam else unflat(final, -1)
  hs = jnp.reshape(hs, (t,) + batch_shape + (nh,))
  cos = cos[0].reshape((t,) + batch_shape) if return_cos else None
  if not time_major:
    hs = jnp.moveaxis(hs, 0, -2)
    cos = None if cos is None else jnp.moveaxis(cos, 0, -1)
  return (final, hs, cos) if return_cos else (final, hs)


def checkpointed_scan(body, carry, xs, segment: int, unroll: int = 1):
  """``lax.scan(body, carry, xs)`` whose backward pass stores the carry only at every
  ``segment``-th step and recomputes each segment's forward pass (``jax.checkpoint``).

  Memory of the backward pass: ``ceil(T / segment)`` carries plus one segment's residuals,
  O((T / segment + segment) size(carry)), i.e. O(sqrt(T)) for ``segment ~ sqrt(T)``,
  against O(T) for the plain scan; the cost is one more forward pass. Values and gradients
  are those of the plain scan (the same operations, recomputed).
  """
  t = jax.tree.leaves(xs)[0].shape[0]
  if t == 0:   # no segment: the plain scan's empty outputs
    return jax.lax.scan(body, carry, xs, unroll=unroll)
  n, rest = divmod(t, segment)
  run = jax.checkpoint(lambda c, x: jax.lax.scan(body, c, x, unroll=unroll))
  outs = []
  if n:
    head = jax.tree.map(lambda a: a[:n * segment].reshape((n, segment) + a.shape[1:]), xs)
    carry, ys = jax.lax.scan(run, carry, head)
    outs.append(jax.tree.map(lambda a: a.reshape((n * segment,) + a.shape[2:]), ys))
  if rest:
    carry, ys = run(carry, jax.tree.map(lambda a: a[n * segment:], xs))
    outs.append(ys)
  return carry, (outs[0] if len(outs) == 1
                 else jax.tree.map(lambda *a: jnp.concatenate(a), *outs))


def default_segment(t: int) -> int:
  """The segment of :func:`checkpointed_scan` for a real ``lam``: ``ceil(sqrt(T))``."""
  return max(1, math.isqrt(max(t - 1, 0)) + 1)


@functools.partial(
    jax.jit, static_argnames=("lam", "eta", "activation", "update_gate", "time_major",
                              "unroll", "return_cos", "impl", "precision"))
def _rum_scan(params, xs, h0, lam_value, *, lam, eta, activation, update_gate, time_major,
              unroll, return_cos, impl, precision):
  """``lam`` is 0, 1 or ``"real"`` (static); a real ``lam``'s value is ``lam_value``, a
  traced scalar (so a learned ``lam`` and every fixed real one share one compilation)."""
  f = get_activation(activation)
  if impl in ("fast", "kernel") and lam in (0, 1):
    return _fast_scan(params, xs, h0, lam=lam, eta=eta, f=f, update_gate=update_gate,
                      time_major=time_major, unroll=unroll, return_cos=return_cos,
                      precision=precision, kernel=impl == "kernel")
  # The whole sequence, one matmul.
  x_proj = jnp.matmul(xs, params["kernel_x"], precision=precision) + params["bias"]
  if not time_major:
    x_proj = jnp.moveaxis(x_proj, -2, 0)
  step = functools.partial(rum_step, kernel_h=params["kernel_h"],
                           lam=lam_value if lam == "real" else lam, eta=eta,
                           activation=f, update_gate=update_gate, precision=precision)

  def body(carry, xp):
    carry, (h, plane) = step(carry, xp)
    return carry, ((h, plane.cos) if return_cos else h)

  if impl == "fast":   # a real lam: R_t saved every sqrt(T) steps, segments recomputed
    final, out = checkpointed_scan(body, h0, x_proj, default_segment(x_proj.shape[0]),
                                   unroll=unroll)
  else:
    final, out = jax.lax.scan(body, h0, x_proj, unroll=unroll)
  hs, cos = out if return_cos else (out, None)
  if not time_major:
    hs = jnp.moveaxis(hs, 0, -2)
    cos = None if cos is None else jnp.moveaxis(cos, 0, -1)
  return (final, hs, cos) if return_cos else (final, hs)


def rum_scan(params: dict, xs: Array, *, lam: int = 0, eta: Optional[float] = None,
             activation: Union[str, Callable] = "relu", update_gate: bool = True,
             h0: Any = None, time_major: bool = False, unroll: int = 1,
             return_cos: bool = False, impl: str = "auto", precision=None):
  """Runs the RUM recurrence (Algorithm 1, eqs. (1)-(2)) over a sequence with ``lax.scan``.

  The input projection of the whole sequence is one matmul outside the scan; inside it
  each step costs one ``(Nh, 2 Nh)`` matmul, the O(Nh) rotation of ``h`` and, for
  ``lam=1``, an O(Nh^2) rank-2 update of ``R`` (for another ``lam > 0`` also the power
  ``R^lam``, O(Nh^3)). jit-compiled.

  Args:
    params: ``{"kernel_x": (Nx, 3Nh), "kernel_h": (Nh, 2Nh), "bias": (3Nh,)}``.
    xs: <float>[*batch, T, Nx] (or <float>[T, *batch, Nx] with ``time_major=True``).
    lam: a real number >= 0, the power in eq. (2) ``R_t = (R_{t-1})^lam Rotation(e_t,
      tau_t)``: 0 (no associative memory), 1 (``R_t = R_{t-1} Rotation``) or any other
      value (e.g. 0.5 or 2; the principal power of :func:`rumjax.rotation_power`,
      footnote 9 of the paper), or a float scalar array (a learned ``lam``,
      differentiable; kept >= 0 by the caller). Every real ``lam`` shares one
      compilation (its value is traced).
    eta: ``None`` (no time normalization) or the norm ``eta > 0`` of every ``h_t``.
      A zero ``h'_t`` stays zero instead of dividing by zero.
    activation: ``f``: "relu", "tanh", "sigmoid", "softsign" or a callable.
    update_gate: if False, ``h'_t = h~_t`` (the ablation of Table 2).
    h0: initial state: ``None`` (zeros; ``R_0 = 1``), ``h`` <float>[*batch, Nh], or for
      ``lam > 0`` the tuple ``(R, h)`` returned as ``final_state`` by a previous call
      (to carry the state across consecutive segments).
    time_major: whether time is the leading axis of ``xs`` and ``hs``.
    unroll: passed to ``lax.scan``.
    return_cos: also return ``cos(theta_t)`` of every step, <float>[*batch, T].
    impl: ``"auto"`` (default): ``"kernel"`` on a GPU where it runs and was measured
      faster (:func:`select_impl`: ``lam`` 0 or 1, float32 or bfloat16, hidden size up to
      :data:`KERNEL_AUTO_MAX_HIDDEN`, no ``return_cos``), else ``"fast"``. ``"kernel"``:
      :func:`rumjax.core.rum_kernel.kernel_scan`, the whole recurrence in one fused Pallas
      kernel per pass (Triton on CUDA; Pallas's interpret mode, slow, on other platforms:
      for tests). ``"fast"``: :func:`rumjax.core.rum_fast.fast_scan`, a hand-written
      backward pass that saves only ``h_t`` and the pre-activations per step and, for
      ``lam=1``, rebuilds ``R_{t-1} = R_t Rotation_t^T`` backwards instead of saving
      ``R_t`` (training memory O(B Nh^2 + T B Nh)). ``"reference"``: the plain
      ``lax.scan`` of :func:`rum_step` differentiated by autodiff (saves every
      intermediate, ``R_t`` included); slow but obviously Algorithm 1. Both compute the
      same values and gradients up to rounding. For a ``lam`` other than 0 and 1,
      ``"fast"`` is the same step under :func:`checkpointed_scan`: ``R_t`` is saved only
      every ``ceil(sqrt(T))`` steps and each segment recomputed in the backward pass
      (training memory O(sqrt(T) B Nh^2), one more forward pass); ``"reference"`` saves
      every ``R_t`` (O(T B Nh^2)). (Rebuilding ``R_{t-1}`` backwards as ``lam = 1`` does,
      ``R_{t-1} = (R_t Rotation_t^T)^(1/lam)``, multiplies the rounding by about ``1/lam``
      per step: unusable for ``lam < 1``.)
    precision: the matmul precision of the gate matmuls ``x @ kernel_x``,
      ``h @ kernel_h`` and their gradients, Flax's ``precision=``: None or ``"default"``
      (the backend's: float32 on a CPU, TF32 on an NVIDIA GPU, one bfloat16 pass on a
      TPU), ``"high"``, ``"highest"`` (true float32) or a ``lax.Precision``
      (:data:`rumjax.core.precision.PRECISIONS`). The rotation path (``R``, the plane,
      ``R h``) is at HIGHEST whatever this says.

  Returns:
    ``(final_state, hs)``: ``final_state`` is ``h_T`` for ``lam=0`` and ``(R_T, h_T)``
    for ``lam > 0``; ``hs`` is <float>[*batch, T, Nh] (time-major if ``time_major``).
    With ``return_cos``, ``(final_state, hs, cos)``. ``hs`` and ``h_T`` have the dtype
    of ``xs`` and ``params`` promoted together (bfloat16 in, bfloat16 out); ``R_T`` and
    ``cos`` have that dtype promoted to float32 (float32 for bfloat16, float64 for
    float64): the rotation path is computed in it, at ``Precision.HIGHEST``, so ``R_T``
    stays orthogonal to float32 accuracy in any precision.

  Example::

    >>> params = rumjax.init_rum_params(jax.random.key(0), nx=8, nh=32)
    >>> xs = jnp.ones((4, 10, 8))
    >>> (R, h), hs = rumjax.rum_scan(params, xs, lam=1, eta=1.0)
    >>> hs.shape, R.shape
    ((4, 10, 32), (4, 32, 32))
  """
  lam, eta = check_lam(lam), check_eta(eta)
  get_activation(activation)
  if impl not in IMPLS:
    raise ValueError(f"impl={impl!r} is unknown; accepted values are {list(IMPLS)}.")
  if jnp.ndim(xs) < 2:
    raise ValueError(
        f"xs must have shape (*batch, T, Nx) (or (T, *batch, Nx) with time_major=True); "
        f"got shape {jnp.shape(xs)}.")
  _, nh = check_params(params, nx=jnp.shape(xs)[-1])
  dtype = jnp.result_type(xs, *jax.tree.leaves(params))
  xs = jnp.asarray(xs, dtype)
  params = jax.tree.map(lambda p: jnp.asarray(p, dtype), params)
  batch_shape = jnp.shape(xs)[1:-1] if time_major else jnp.shape(xs)[:-2]
  carry = initial_carry(batch_shape, nh, lam, dtype, h0)
  h_shape = jnp.shape(carry[1] if has_memory(lam) else carry)
  if h_shape != tuple(batch_shape) + (nh,):
    raise ValueError(
        f"h0 has shape {h_shape} but xs of shape {jnp.shape(xs)} with Nh={nh} needs "
        f"{tuple(batch_shape) + (nh,)}.")
  if has_memory(lam) and jnp.shape(carry[0]) != tuple(batch_shape) + (nh, nh):
    raise ValueError(   # the kernel read the top-left corner of a larger R0, silently
        f"h0's memory R has shape {jnp.shape(carry[0])} but xs of shape {jnp.shape(xs)} "
        f"with Nh={nh} needs {tuple(batch_shape) + (nh, nh)}.")
  empty = jnp.shape(xs)[0 if time_major else -2] == 0 or math.prod(batch_shape) == 0
  auto_kernel = impl == "auto" and not empty and kernel_auto_eligible(
      lam=lam, return_cos=bool(return_cos), nh=nh, dtype=dtype, batch=math.prod(batch_shape))
  if impl == "auto":
    impl = _auto_choice(auto_kernel)
  elif impl == "kernel":
    reason = kernel_unsupported(lam=lam, return_cos=bool(return_cos), dtype=dtype)
    if reason is None and empty:
      reason = f"an empty sequence or batch (xs of shape {jnp.shape(xs)})"
    if reason is not None:
      raise ValueError(f"impl='kernel' does not run {reason}; use impl='fast' (or 'auto').")
    _warn_large_kernel(lam, nh)
  _log_impl(impl, lam)
  static = lam if isinstance(lam, int) else "real"
  lam_value = None if static != "real" else jnp.asarray(lam, at_least_float32(dtype))
  scan = lambda which: functools.partial(
      _rum_scan, lam_value=lam_value, lam=static, eta=eta, activation=activation,
      update_gate=bool(update_gate), time_major=bool(time_major), unroll=unroll,
      return_cos=bool(return_cos), impl=which, precision=resolve_precision(precision))
  if auto_kernel:   # decided where it is lowered: the kernel for CUDA, else the XLA scan
    return jax.lax.platform_dependent(params, xs, carry, cuda=scan("kernel"),
                                      default=scan("fast"))
  return scan(impl)(params, xs, carry)

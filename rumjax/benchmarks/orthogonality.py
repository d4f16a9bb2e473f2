"""Drift of RUM's memory from orthogonality, ``max|R_t^T R_t - 1|``, against the length T.

Three ways to run the same RUM (``lam=1``, ``eta=1.0``, relu; the parameters and inputs of
one seed; issue 26):

- ``float32``: :func:`rumjax.rum_scan` with float32 parameters and inputs.
- ``bfloat16``: :func:`rumjax.rum_scan` with the parameters and inputs cast to bfloat16:
  the safe path (gates and hidden states in bfloat16, the rotation and the memory in
  float32 at ``Precision.HIGHEST``; see :mod:`rumjax.core.rum`).
- ``bfloat16_naive``: :func:`naive_bfloat16_scan`, *everything* in bfloat16, the memory
  and the rotation included, which is what a user gets from casting a textbook
  implementation of eq. (1)-(2) to bfloat16. For comparison only.

Each variant is one pass over ``max(ts)`` steps, cut into segments at ``ts`` (the carried
state continues the recurrence exactly), recording the error of the batch's worst
example at the end of each segment (computed in float64 on the host).
"""

import time
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rumjax import core
from rumjax.core import rum as rum_lib

VARIANTS = ("float32", "bfloat16", "bfloat16_naive")
LABELS = {
    "float32": "float32",
    "bfloat16": "bfloat16, safe path (rotation and R in float32, HIGHEST)",
    "bfloat16_naive": "bfloat16, naive (everything cast to bfloat16, R included)",
}


def orthogonality_error(r) -> Optional[float]:
  """``max |R^T R - 1|`` over a batch of matrices <[..., N, N]>, in float64 on the host;
  ``None`` if ``R`` is not finite (JSON has no NaN: the results file stays standard)."""
  r = np.asarray(jnp.asarray(r, jnp.float32), np.float64)
  gram = np.einsum("...ji,...jk->...ik", r, r)
  error = float(np.max(np.abs(gram - np.eye(r.shape[-1]))))
  return error if np.isfinite(error) else None


def _naive_step(carry, xp, kernel_h, eta):
  """Algorithm 1 (``lam=1``, relu, update gate) in the dtype of its inputs, textbook eq. (1).

  ``u = e/|e|``, ``v = (tau^ - cos u)/|.|``, ``sin = |tau^ - cos u|`` and
  ``R_t = R_{t-1} + (R_{t-1} u)((c-1) u - s v)^T + (R_{t-1} v)(s u + (c-1) v)^T``, every
  intermediate rounded to the carry's dtype (bfloat16), no precision setting.
  """
  r, h = carry
  nh = h.shape[-1]
  hp = h @ kernel_h
  tau, e = xp[:, :nh] + hp[:, :nh], xp[:, 2 * nh:]
  dot = lambda a, b: jnp.sum(a * b, axis=-1, keepdims=True)
  u = e / jnp.sqrt(dot(e, e))
  b = tau / jnp.sqrt(dot(tau, tau))
  c = dot(u, b)
  w = b - c * u
  s = jnp.sqrt(dot(w, w))
  v = w / s
  ru = jnp.einsum("bij,bj->bi", r, u)
  rv = jnp.einsum("bij,bj->bi", r, v)
  r = r + ru[:, :, None] * ((c - 1) * u - s * v)[:, None, :] \
        + rv[:, :, None] * (s * u + (c - 1) * v)[:, None, :]
  ht = jax.nn.relu(e + jnp.einsum("bij,bj->bi", r, h))
  g = jax.nn.sigmoid(xp[:, nh:2 * nh] + hp[:, nh:])
  hn = g * h + (1 - g) * ht
  norm = jnp.sqrt(dot(hn, hn))
  hn = jnp.where(norm > 0, eta * hn / jnp.where(norm > 0, norm, 1), 0)
  return (r, hn), None


def naive_bfloat16_scan(params, xs, carry, eta: float = 1.0):
  """``(R_T, h_T)`` of :func:`_naive_step` over <[B, T, Nx]> ``xs``, all in bfloat16."""
  bf = jnp.bfloat16
  params = jax.tree.map(lambda p: jnp.asarray(p, bf), params)
  xp = jnp.moveaxis(jnp.asarray(xs, bf) @ params["kernel_x"] + params["bias"], 1, 0)
  carry = jax.tree.map(lambda c: jnp.asarray(c, bf), carry)
  step = lambda c, x: _naive_step(c, x, params["kernel_h"], jnp.asarray(eta, bf))
  return jax.lax.scan(step, carry, xp)[0]


_naive = jax.jit(naive_bfloat16_scan, static_argnames=("eta",))


def drift(variant: str, params, xs, ts: Sequence[int], eta: float = 1.0,
          impl: str = "fast") -> list[Optional[float]]:
  """``max|R_t^T R_t - 1|`` at each ``t`` in ``ts`` (increasing) for one variant (``None``
  where ``R_t`` is not finite)."""
  if variant not in VARIANTS:
    raise ValueError(f"variant={variant!r} is unknown; choose one of {list(VARIANTS)}.")
  ts = sorted(int(t) for t in ts)
  b, nh = xs.shape[0], params["kernel_h"].shape[0]
  r0 = jnp.broadcast_to(jnp.eye(nh), (b, nh, nh))
  if variant == "bfloat16_naive":
    carry = (r0, jnp.zeros((b, nh)))
    run = lambda c, x: _naive(params, x, c, eta=eta)
  else:
    dtype = jnp.float32 if variant == "float32" else jnp.bfloat16
    params = jax.tree.map(lambda p: jnp.asarray(p, dtype), params)
    carry = rum_lib.initial_carry((b,), nh, 1, dtype)
    run = lambda c, x: core.rum_scan(params, x.astype(dtype), lam=1, eta=eta, h0=c,
                                       impl=impl)[0]
  errors, start = [], 0
  for t in ts:
    carry = run(carry, xs[:, start:t])
    errors.append(orthogonality_error(carry[0]))
    start = t
  return errors


def run_drift(ts: Sequence[int] = (10, 100, 1000, 4000, 10000), nh: int = 64,
              nx: int = 64, batch: int = 4, eta: float = 1.0, seed: int = 0,
              variants: Sequence[str] = VARIANTS, impl: str = "fast") -> dict:
  """The drift of every variant on the same parameters and inputs; a JSON-able dict."""
  params = core.init_rum_params(jax.random.key(seed), nx, nh)
  xs = jax.random.normal(jax.random.key(seed + 1), (batch, max(ts), nx))
  out = {"settings": dict(nh=nh, nx=nx, batch=batch, eta=eta, seed=seed, lam=1,
                          activation="relu", impl=impl, jax=jax.__version__,
                          backend=jax.default_backend()),
         "ts": [int(t) for t in sorted(ts)], "labels": {}, "errors": {}, "seconds": {}}
  for v in variants:
    start = time.perf_counter()
    out["errors"][v] = drift(v, params, xs, ts, eta=eta, impl=impl)
    out["seconds"][v] = time.perf_counter() - start
    out["labels"][v] = LABELS[v]
  return out


def format_table(result: dict, variants: Optional[Sequence[str]] = None) -> str:
  """A Markdown table: T against the error of each variant."""
  variants = list(variants or result["errors"])
  head = "| T | " + " | ".join(variants) + " |"
  rows = [head, "|" + "---|" * (len(variants) + 1)]
  for i, t in enumerate(result["ts"]):
    cells = (result["errors"][v][i] for v in variants)
    rows.append(f"| {t:,} | " + " | ".join("not finite" if c is None else f"{c:.2g}"
                                          for c in cells) + " |")
  return "\n".join(rows)

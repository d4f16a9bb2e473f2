"""Training steps of the recurrent cells side by side: RUM (the fused kernel, the XLA fast
scan with and without ``unroll``, the reference scan; lam 0/1) against Flax's GRU and LSTM,
the LSTMN and, where PyTorch is importable, PyTorch's GRU and LSTM (cuDNN on a GPU), on one
device or data-parallel (``:dp``).

RUM candidates: ``rum0`` / ``rum1`` (``rum_scan(impl="fast")``, the XLA scan), with the
suffix ``_ref`` (the autodiff reference), ``_kernel`` (``impl="kernel"``: the fused Pallas
kernel; Pallas's interpret mode, very slow, off GPUs), ``_kernel_w<k>`` (the kernel with k
Triton warps per program, for tuning its launch on a GPU), ``_kernel_bb<k>`` (``rum0``: k
examples per program, ``h W`` as a tensor-core product), ``_kernel_sp`` (the backward
kernel reads the forward's planes, ``save_plane=True``), ``_kernel_r<k>`` (R, Q and W
streamed by blocks of k rows, ``rows=k``; ``_r0``: held whole), ``_kernel_wr<k>`` (W
alone, ``w_rows=k``; ``_wr0``: whole), ``_kernel_qr<k>`` (lam=1's Q alone, ``q_rows=k``),
``_kernel_wc`` (``w_columns=True``), ``_kernel_t`` (``transposed=True``: sums along rows),
``_kernel_pf`` (``prefetch=True``), options joined by ``_`` (``rum1_kernel_t_pf``),
or ``_unroll8`` (the XLA scan with ``lax.scan(unroll=8)``, a cheap lever against the
per-step cost of XLA's while loop).

A step is ``jax.grad`` (w.r.t. the parameters) of ``sum(hs ** 2)`` over all hidden
states, jit-compiled (``forward=True``: the loss's value alone, the forward pass a user
runs at inference; for the fused kernel its forward kernel without what the backward
saves), in a computation dtype (``dtype``: float32 or bfloat16, the
precision policy): the inputs in that dtype, Flax's cells with ``dtype=``, the functional
scans (RUM, LSTMN) on their float32 parameters cast to it inside the step (so the
gradients are float32), the loss summed in float32. Reported per candidate: median ms, compile time, XLA's buffer sizes,
the matmul FLOPs counted from the shapes against the machine's peak, optionally the peak
RSS of a subprocess, and ratios to GRU / LSTM in the same mode.
"""

import contextlib
import json
import statistics
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp

from rumjax import core
from rumjax.core import rum as rum_lib, rum_kernel
from rumjax.benchmarks import timing, torch_anchor
from rumjax.cells.base import resolve_dtype
from rumjax import sharding

SHAPES = {  # name: (B, T, Nx, Nh)
    "recall": (128, 53, 36, 50),
    "copying": (128, 520, 10, 100),
    "ptb": (128, 150, 128, 1000),
}
# The fused kernel with a given number of Triton warps per program, and (lam=0) with a
# block of examples per program (tuning; on a GPU).
KERNEL_WARPS = (2, 4, 8, 16, 32)
KERNEL_BLOCKS = (16, 32, 64)
KERNEL_ROWS = (8, 16, 32, 64)
CANDIDATES = (("gru", "lstm", "rum0", "rum1", "rum0_ref", "rum1_ref", "rum05", "rum05_ref",
               "rum0_kernel", "rum1_kernel", "rum0_unroll8", "rum1_unroll8", "lstmn",
               "lstmn_ref")
              + tuple(f"rum{lam}_kernel_w{w}" for lam in (0, 1) for w in KERNEL_WARPS)
              + tuple(f"rum0_kernel_bb{b}" for b in KERNEL_BLOCKS)
              + tuple(f"rum{lam}_kernel_r{k}" for lam in (0, 1) for k in KERNEL_ROWS)
              + tuple(f"rum{lam}_kernel_{o}" for lam in (0, 1) for o in ("sp", "t", "pf"))
              + torch_anchor.KINDS)
# launch.benchmark's default --candidates.
DEFAULT_CANDIDATES = ("gru", "lstm", "rum0", "rum1", "gru:dp", "rum0:dp", "rum1:dp")
# The kernel's options by their candidate suffixes (kernel_scan's keyword arguments).
KERNEL_OPTIONS = {"w": "num_warps", "bb": "block", "r": "rows", "wr": "w_rows", "qr": "q_rows",
                  "sp": "save_plane", "t": "transposed", "pf": "prefetch", "wc": "w_columns"}


def kernel_options(variant):
  """``{kernel_scan keyword: value}`` of a variant ``kernel_<opt>[_<opt>...]``, each
  ``<opt>`` a key of KERNEL_OPTIONS with a number (w, bb, r, wr, qr; ``r0``, ``wr0``: whole,
  not streamed) or alone (sp, t, pf, wc); None if ``variant`` is not one."""
  if not variant.startswith("kernel_"):
    return None
  options = {}
  for token in variant.removeprefix("kernel_").split("_"):
    name = token.rstrip("0123456789")
    if name not in KERNEL_OPTIONS or (name in ("w", "bb", "r", "wr", "qr")) == (name == token):
      return None
    value = int(token[len(name):]) if name != token else True
    # r0, wr0: held whole (None), where the default streams them
    options[KERNEL_OPTIONS[name]] = None if value == 0 and name in ("r", "wr") else value
  return options


def is_candidate(cand):
  """A listed candidate, or a RUM kernel with a combination of options."""
  base, _, variant = cand.partition("_")
  return cand in CANDIDATES or (base in ("rum0", "rum1") and bool(kernel_options(variant)))
# RUM candidates' suffixes: (impl, unroll).
RUM_VARIANTS = {"": ("fast", 1), "ref": ("reference", 1), "kernel": ("kernel", 1),
                "unroll8": ("fast", 8)}
# The RUM candidates' lam: rum05 is a real lam (0.5; the checkpointed scan, "_ref" the plain
# one), whose step adds an eigh of Nh x Nh per example and time step.
RUM_LAMS = {"rum0": 0, "rum1": 1, "rum05": 0.5}


def parse_shape(name):
  """``(B, T, Nx, Nh)`` of a named shape (``SHAPES``) or of ``BxTxNxxNh``."""
  if name in SHAPES:
    return SHAPES[name]
  dims = timing.parse_dims(name, 4)
  if dims is None:
    raise ValueError(f"shape {name!r} is neither {sorted(SHAPES)} nor BxTxNxxNh "
                     "(positive integers, e.g. 32x2080x10x100).")
  return dims


def matmul_flops(cand, b, t, nx, nh, forward=False):
  """Matmul FLOPs of one training step (forward + parameter gradients), from the shapes;
  ``forward``: of the forward pass alone."""
  cand = cand.split(":")[0].removeprefix("torch_")
  if cand.startswith("lstmn"):
    passes = 1 if forward else 3                                 # forward + 2 gradients
    gates = 2 * b * (nx + nh) * 4 * nh * passes
    attn = 2 * b * (nh + nx + nh) * nh * passes                  # W_h h_t, W_x x_t, W_h~ h~
    tape = 2 * b * (t + 1) / 2 * (nh + 2 * nh) * passes          # v^T tanh, summaries
    return t * (gates + attn + tape)
  if cand in ("gru", "lstm"):
    g = 3 if cand == "gru" else 4
    fwd = 2 * b * (nx + nh) * g * nh
    bwd = 2 * b * (g * nh * nh + nh * g * nh + nx * g * nh)     # dh, dW_h, dW_x
    return t * (fwd + (0 if forward else bwd))
  fwd = 2 * b * (nx * 3 * nh + nh * 2 * nh)
  bwd = 2 * b * (2 * nh * nh + nh * 2 * nh + nx * 3 * nh)        # dh, dK_h, dK_x
  if cand.startswith(("rum1", "rum05")):
    fwd += 2 * b * 3 * nh * nh                                   # R [d, b, x]
    bwd += 2 * b * 7 * nh * nh                                   # Q [d, a], Q^T, R^T [3]
  if cand.startswith("rum05"):   # R^lam: K V, (V C + K V D) V^T, Newton; eigh not counted
    fwd += 2 * b * 4 * nh ** 3
    bwd += 2 * b * 12 * nh ** 3
  return t * (fwd + (0 if forward else bwd))


def sum_squares(hs):
  """The benchmark's loss ``sum(hs ** 2)``, summed in float32 whatever ``hs``'s dtype."""
  return jnp.sum(jnp.square(hs.astype(jnp.float32)))


def cast_params(params, dtype):
  """``params`` cast to the computation ``dtype`` (inside a step: float32 gradients)."""
  return jax.tree.map(lambda p: p.astype(dtype), params)


def _loss_and_params(cand, xs, nh, dtype=jnp.float32):
  """``(loss(params, xs), params)`` of a candidate without its ``:dp`` suffix, computing
  in ``dtype`` (float32 parameters)."""
  nx = xs.shape[-1]
  if cand in ("gru", "lstm"):
    cell = nn.GRUCell if cand == "gru" else nn.OptimizedLSTMCell
    model = nn.RNN(cell(nh, dtype=dtype))
    return (lambda p, x: sum_squares(model.apply(p, x))), model.init(jax.random.key(1), xs)
  base, _, variant = cand.partition("_")
  options = kernel_options(variant)
  if options:
    return _kernel_loss(RUM_LAMS[base], xs, nh, dtype, **options)
  impl, unroll = RUM_VARIANTS[variant]
  if base == "lstmn":
    params = core.init_lstmn_params(jax.random.key(1), nx, nh, nh)
    return (lambda p, x: sum_squares(
        core.lstmn_scan(cast_params(p, dtype), x, impl=impl)[0])), params
  lam = RUM_LAMS[base]
  params = core.init_rum_params(jax.random.key(1), nx, nh)
  return (lambda p, x: sum_squares(core.rum_scan(
      cast_params(p, dtype), x, lam=lam, impl=impl, unroll=unroll)[1])), params


def _kernel_loss(lam, xs, nh, dtype, **options):
  """``rum{lam}_kernel_<options>``: :func:`rumjax.core.rum_kernel.kernel_scan` (what
  ``rum_scan(impl="kernel")`` runs, with rum_scan's defaults) with ``options``
  (:func:`kernel_options`)."""
  params = core.init_rum_params(jax.random.key(1), xs.shape[-1], nh)
  carry = rum_lib.initial_carry(xs.shape[:1], nh, lam, dtype, None)

  def loss(p, x):
    _, hs = rum_kernel.kernel_scan(cast_params(p, dtype), jnp.moveaxis(x, 1, 0), carry,
                                   lam=lam, eta=None, activation=jax.nn.relu,
                                   update_gate=True, **options)
    return sum_squares(hs)

  return loss, params


def check_candidates(cands):
  """A one-line ``ValueError`` naming every candidate that is not one (before any timing)."""
  def known(c):
    name, _, mode = c.partition(":")
    if name in torch_anchor.KINDS:
      return not mode
    return mode in ("", "dp") and is_candidate(name)
  unknown = [c for c in cands if not known(c)]
  if unknown:
    raise ValueError(f"unknown candidate(s) {unknown}; known: {', '.join(CANDIDATES)} "
                     "(RUM kernels with options, e.g. rum1_kernel_r32_w8; ':dp' splits the "
                     "batch over the devices).")


def make_step(cand, shape, dtype=jnp.float32, forward=False):
  """``(jitted grad function, params, xs)`` for a candidate at a shape, computing in
  ``dtype`` (a dtype or a name of ``rumjax.cells.base.DTYPES``): the inputs in it,
  float32 parameters. ``forward``: the jitted loss instead of its gradient.

  ``<name>:dp``: the batch split over all devices, parameters replicated (the loop's
  data parallelism)."""
  cand, _, mode = cand.partition(":")
  if mode not in ("", "dp"):
    raise ValueError(f"candidate suffix must be ':dp', got {mode!r}.")
  if cand in torch_anchor.KINDS:
    raise ValueError(f"{cand!r} is PyTorch's step (torch_anchor.make_step), without ':dp'.")
  dtype = resolve_dtype(dtype)
  b, t, nx, nh = shape
  xs = jax.random.normal(jax.random.key(0), (b, t, nx), jnp.float32).astype(dtype)
  if not is_candidate(cand):
    raise ValueError(f"unknown candidate {cand!r}: {', '.join(CANDIDATES)}, optionally "
                     "with ':dp'.")
  loss, params = _loss_and_params(cand, xs, nh, dtype)
  if mode == "dp":
    mesh = sharding.make_mesh()
    sharding.check_batch_size(b, mesh)
    xs = jax.device_put(xs, sharding.batch_sharding(mesh))
    params = jax.device_put(params, sharding.replicated(mesh))
  return jax.jit(loss if forward else jax.grad(loss)), params, xs


def rss_child(cand, shape_name, cpu_devices=None, dtype="float32", forward=False):
  """Builds, compiles and runs one step of ``cand``; prints ``{"maxrss_mb": ...}``."""
  sharding.use_cpu_devices(cpu_devices)
  f, params, xs = make_step(cand, parse_shape(shape_name), dtype, forward)
  jax.block_until_ready(f(params, xs))
  print(json.dumps({"maxrss_mb": timing.peak_rss_mb()}))


def measure_rss(cand, shape_name, cpu_devices, dtype="float32", forward=False):
  """Peak RSS (MB) of a fresh Python process that runs only :func:`rss_child`."""
  code = ("from rumjax.benchmarks import cells; "
          f"cells.rss_child({cand!r}, {shape_name!r}, {cpu_devices!r}, "
          f"{jnp.dtype(dtype).name!r}, {forward!r})")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])["maxrss_mb"]


def _torch_row(c, shape, runs, dtype, forward=False):
  """PyTorch's step (no compilation: the first call is the warm-up) into ``runs[c]``."""
  step = torch_anchor.make_step(c, shape, dtype, forward)
  t0 = timing.time.perf_counter()
  step()
  runs[c] = (step, ())
  nan = float("nan")
  return {"compile_s": timing.time.perf_counter() - t0, "xla_mb": nan, "xla_temp_mb": nan,
          "matmul_gflop": matmul_flops(c, *shape, forward) / 1e9}


def _compile_row(c, shape, runs, dtype=jnp.float32, forward=False):
  """Compiles ``c``'s step into ``runs[c]``; its row: compile time, XLA MB, matmul GFLOP."""
  if c in torch_anchor.KINDS:
    return _torch_row(c, shape, runs, dtype, forward)
  f, params, xs = make_step(c, shape, dtype, forward)
  # ":dp": lowered with the loop's mesh in context, as the loop does (the kernel reads it).
  with jax.set_mesh(sharding.make_mesh()) if c.endswith(":dp") else contextlib.nullcontext():
    runs[c], compile_s, _ = timing.compile_and_run(f, params, xs)
  mem = runs[c][0].memory_analysis()
  return {
      "compile_s": compile_s,
      "xla_mb": (mem.temp_size_in_bytes + mem.argument_size_in_bytes
                 + mem.output_size_in_bytes) / 2**20,
      "xla_temp_mb": mem.temp_size_in_bytes / 2**20,
      "matmul_gflop": matmul_flops(c, *shape, forward) / 1e9,
  }


def round_ratio_quartiles(times, base_times):
  """The quartiles ``(q1, q3)`` of the per-round ratios ``times[i] / base_times[i]`` of
  two candidates timed in the same alternated rounds (:func:`timing.time_alternated`):
  how far one round's ratio strays from the median's, the machine's noise (None with fewer
  than 2 rounds)."""
  if len(times) < 2 or len(times) != len(base_times):
    return None
  q = statistics.quantiles([a / b for a, b in zip(times, base_times)], n=4)
  return q[0], q[2]


def add_ratios(rows):
  """``ratio_gru`` (same mode) with its per-round quartiles ``ratio_gru_iqr``,
  ``ratio_lstm`` (same mode), ``ratio_best_gru`` and, where ``torch_gru`` ran,
  ``ratio_torch_gru`` (to PyTorch's GRU: cuDNN on a GPU)."""
  rows = {c: r for c, r in rows.items() if "ms" in r}
  grus = {c: rows[c]["ms"] for c in ("gru", "gru:dp") if c in rows}
  for c, r in rows.items():
    if "torch_gru" in rows:
      r["ratio_torch_gru"] = r["ms"] / rows["torch_gru"]["ms"]
    same = "gru:dp" if c.endswith(":dp") else "gru"
    if same in grus:
      r["ratio_gru"] = r["ms"] / grus[same]
      iqr = round_ratio_quartiles(r.get("times_ms", []), rows[same].get("times_ms", []))
      if iqr and c != same:
        r["ratio_gru_iqr"] = iqr
    lstm = "lstm:dp" if c.endswith(":dp") else "lstm"
    if lstm in rows:
      r["ratio_lstm"] = r["ms"] / rows[lstm]["ms"]
    if grus:
      r["ratio_best_gru"] = r["ms"] / min(grus.values())


def _failed(err):
  """A candidate's row when it cannot run here: its error's first line."""
  first = (str(err).strip().splitlines() or [""])[0]
  return {"error": f"{type(err).__name__}: {first[:160]}"}


def _warm_ms(compiled, args):
  """One more (warm) step's time in ms, after the compile's first run."""
  t0 = timing.time.perf_counter()
  jax.block_until_ready(compiled(*args))
  return 1e3 * (timing.time.perf_counter() - t0)


def run_shape(name, shape, candidates, repeats, peak, max_rum1_hidden=256, rss=False,
              cpu_devices="auto", dtype=jnp.float32, max_step_ms=None, forward=False):
  """Times the candidates' training steps (``forward``: forward passes) at one shape in
  the computation ``dtype``, alternated per round; lam=1 candidates above
  ``max_rum1_hidden`` are skipped. ``rss``: also each one's peak RSS in a subprocess with
  ``cpu_devices``.

  A candidate that fails to build or compile here (say, a kernel on an untested compiler)
  gets a row with its ``error`` and the table goes on; one whose warm step takes longer than
  ``max_step_ms`` is reported with that one step (``ms``, ``too_slow``) and left out of the
  timed rounds."""
  cands = [c for c in candidates if not (c.startswith("rum1") and shape[3] > max_rum1_hidden)]
  runs, rows = {}, {}
  for c in cands:
    try:
      rows[c] = _compile_row(c, shape, runs, dtype, forward)
    except Exception as err:   # pylint: disable=broad-except  # reported in the table
      rows[c] = _failed(err)
      continue
    if max_step_ms is not None:
      ms = _warm_ms(*runs[c]) if c not in torch_anchor.KINDS else None
      if ms is not None and ms > max_step_ms:
        rows[c].update(ms=ms, too_slow=True)
        del runs[c]
  timing.time_alternated(runs, {c: rows[c] for c in runs}, repeats)
  for c, r in rows.items():
    if "error" in r:
      continue
    r["matmul_ms_at_peak"] = 1e3 * r["matmul_gflop"] * 1e9 / peak
    r["matmul_fraction"] = r["matmul_ms_at_peak"] / r["ms"]
    if rss:
      r["rss_mb"] = measure_rss(c, name, cpu_devices, dtype, forward)
  add_ratios(rows)
  return rows


def format_header():
  """The training table's header line."""
  return (f"{'shape':>16} {'cand':>16} {'ms/step':>9} {'x GRU':>6} {'GRU IQR':>9} {'x best':>6} "
          f"{'x LSTM':>6} {'x torch GRU':>11} {'compile s':>9} {'XLA MB':>8} {'RSS MB':>7} {'mm GFLOP':>8} "
          f"{'mm@peak ms':>10} {'mm frac':>7}")


def _ratio(r, key, width=6):
  return f"{r[key]:{width}.2f}" if key in r else f"{'-':>{width}}"


def format_rows(name, rows):
  """The training table's lines of one shape (no header)."""
  lines = []
  for c, r in rows.items():
    if "error" in r:
      lines.append(f"{name:>16} {c:>16}   failed: {r['error']}")
      continue
    rss = f"{r['rss_mb']:7.0f}" if "rss_mb" in r else f"{'-':>7}"
    iqr = ("{:.2f}-{:.2f}".format(*r["ratio_gru_iqr"]) if "ratio_gru_iqr" in r else "-")
    lines.append(
        f"{name:>16} {c:>16} {r['ms']:9.2f} {_ratio(r, 'ratio_gru')} {iqr:>9} "
        f"{_ratio(r, 'ratio_best_gru')} {_ratio(r, 'ratio_lstm')} "
        f"{_ratio(r, 'ratio_torch_gru', 11)} {r['compile_s']:9.2f} "
        f"{r['xla_mb']:8.1f} {rss} {r['matmul_gflop']:8.2f} "
        f"{r['matmul_ms_at_peak']:10.2f} {r['matmul_fraction']:7.2f}"
        + ("  (one step: too slow to repeat)" if r.get("too_slow") else ""))
  return "\n".join(lines)

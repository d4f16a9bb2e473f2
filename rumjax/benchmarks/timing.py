"""Timing and memory primitives shared by the benchmarks: the machine's f32 matmul peak,
compile time with the first run, median step times over alternated rounds, peak RSS."""

import os
import resource
import statistics
import time

import jax
import jax.numpy as jnp

from rumjax.utils import host_cpu


def parse_dims(text: str, count: int) -> tuple[int, ...]:
  """The ``count`` positive integers of ``"AxBx..."`` (any case of ``x``), or ``None`` if
  ``text`` is not of that form (the caller's error names the form it wants)."""
  parts = text.lower().split("x")
  if len(parts) != count or not all(p.isdigit() and int(p) > 0 for p in parts):
    return None
  return tuple(int(p) for p in parts)


def peak_matmul(n, repeats):
  """FLOP/s of an ``n x n x n`` f32 matmul on one device (best of ``max(3, repeats)``)."""
  a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
  f = jax.jit(lambda x: x @ x)
  f(a).block_until_ready()
  times = []
  for _ in range(max(3, repeats)):
    t0 = time.perf_counter()
    f(a).block_until_ready()
    times.append(time.perf_counter() - t0)
  return 2 * n**3 / min(times)


def peak_line(peak, n):
  """The benchmark's first line: JAX, devices, cores, the host processor and the matmul
  peak."""
  return (f"jax {jax.__version__}, {jax.device_count()} x {jax.devices()[0].device_kind} "
          f"device(s), {os.cpu_count()} cores ({host_cpu()}), peak f32 matmul ({n}^3, one "
          f"device): {peak / 1e9:.1f} GFLOP/s")


def peak_rss_mb():
  """Peak RSS of this process: VmHWM (Linux; unlike ``ru_maxrss`` it is not inherited from
  the parent across fork + exec), else ``getrusage``."""
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith("VmHWM:"):
          return int(line.split()[1]) / 1024
  except OSError:
    pass
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def compile_and_run(f, *args):
  """``((compiled, args), compile_s, first output)``: compile time includes one run."""
  t0 = time.perf_counter()
  compiled = f.lower(*args).compile()
  out = jax.block_until_ready(compiled(*args))
  return (compiled, args), time.perf_counter() - t0, out


def time_alternated(runs, rows, repeats):
  """Runs every ``runs[name] = (compiled, args)`` in turn for ``repeats`` rounds
  (alternated, so the candidates share the machine's state); sets ``rows[name]``'s
  ``times_ms`` and their median ``ms``.

  In each round a candidate runs twice and the second run is timed: the step a training
  loop repeats, not the first call after another program (on an H100 a JAX step timed
  right after PyTorch's took up to 0.1 ms longer; RESULTS.md, session 24)."""
  for r in rows.values():
    r["times_ms"] = []
  for _ in range(repeats):
    for name, (compiled, args) in runs.items():
      jax.block_until_ready(compiled(*args))
      t0 = time.perf_counter()
      jax.block_until_ready(compiled(*args))
      rows[name]["times_ms"].append(1e3 * (time.perf_counter() - t0))
  for r in rows.values():
    r["ms"] = statistics.median(r["times_ms"])

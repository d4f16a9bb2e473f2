"""What the fused RUM kernels ask of a GPU, read without one: registers, spills, barriers.

A kernel's speed on a GPU hangs on a few numbers that the compiler decides: the registers
per thread (255 is the most; beyond, values spill to local memory, read and written at
every time step), and the barriers (``bar.sync``: every cross-warp reduction and layout
change goes through shared memory). These can be read on a machine without a GPU:

1. :func:`triton_modules` lowers a function for CUDA (``jax.export``, as the kernel's
   lowering tests do) and records the Triton modules (TTIR) that Pallas emits for each
   ``pallas_call`` (forward kernel, backward kernel);
2. :func:`resources` compiles one with the ``triton`` package (``pip install
   '.[kernel-tools]'``) for a target (default sm_90, the H100/H200) into PTX, and runs its
   ``ptxas -v``: registers, spill stores and loads (bytes per thread), stack frame, and
   counts the PTX's barriers and the layout conversions of its TTGIR.

The ``triton`` package is not the Triton inside jaxlib (another version, other passes), so
the numbers are a proxy for what a GPU compiles, good for comparing variants of a kernel
with each other under one triton version, not a measurement; they move between versions
(the default lam=1 backward at copying spills 556 bytes per thread with triton 3.5.0, 892
with 3.9.0), so compare numbers from one version only (the table prints it). Timings need
a GPU (``.ci/accelerator``).
"""

import os
import re
import subprocess
import tempfile

import jax
from jax import export

TRITON_CALL = "__gpu$xla.gpu.triton"
# The GPU that a lowering for CUDA targets where there is none: jax 0.11's Triton lowering
# reads the compute capability from the abstract mesh's device and fails without a GPU
# ("No supported GPU devices found"); jax 0.10 assumes sm_90. An H100 (sm_90) on both.
CUDA_TARGET = jax.sharding.AbstractDevice(device_kind="NVIDIA H100 80GB HBM3",
                                          num_cores=132, platform="cuda")


def cuda_mesh(axis_sizes=(), axis_names=()) -> jax.sharding.AbstractMesh:
  """An abstract mesh of :data:`CUDA_TARGET` devices (none by default), for
  :func:`export_for_cuda` and for the shardings of its arguments. Its axes are ``Auto``, as
  those of :func:`rumjax.sharding.make_mesh` (jax 0.11's ``AbstractMesh`` defaults to
  ``Explicit``, which a ``shard_map`` then checks its inputs against)."""
  auto = (jax.sharding.AxisType.Auto,) * len(axis_names)
  return jax.sharding.AbstractMesh(tuple(axis_sizes), tuple(axis_names), auto,
                                   abstract_device=CUDA_TARGET)


def export_for_cuda(fn, *args, mesh=None) -> export.Exported:
  """``jax.export`` of ``jax.jit(fn)(*args)`` for CUDA, on any machine: the Triton calls
  allowed, under ``mesh`` (:func:`cuda_mesh`; default one without axes) so that Pallas
  lowers for :data:`CUDA_TARGET` with or without a GPU here (jax 0.10 and 0.11)."""
  checks = [export.DisabledSafetyCheck.custom_call(TRITON_CALL)]
  with jax.sharding.use_abstract_mesh(cuda_mesh() if mesh is None else mesh):
    return export.export(jax.jit(fn), platforms=["cuda"], disabled_checks=checks)(*args)


def triton_modules(fn, *args) -> list[str]:
  """The TTIR text of every Pallas Triton kernel in ``fn(*args)`` lowered for CUDA, in
  lowering order (for a jitted gradient through ``kernel_scan``: forward, backward)."""
  from jax._src.pallas.triton import pallas_call_registration as registration
  modules = []
  lower = registration.lowering.lower_jaxpr_to_triton_module

  def record(*a, **k):
    result = lower(*a, **k)
    modules.append(result.module.operation.get_asm(enable_debug_info=False))
    return result

  registration.lowering.lower_jaxpr_to_triton_module = record
  jax.clear_caches()          # a cached lowering would not pass through ``record``
  try:
    export_for_cuda(fn, *args)
  finally:
    registration.lowering.lower_jaxpr_to_triton_module = lower
  return modules


def parse_ptxas(text: str) -> dict:
  """``ptxas -v`` output -> registers, spill_stores, spill_loads, stack (bytes)."""
  numbers = {
      "registers": r"Used (\d+) registers",
      "spill_stores": r"(\d+) bytes spill stores",
      "spill_loads": r"(\d+) bytes spill loads",
      "stack": r"(\d+) bytes stack frame",
  }
  out = {}
  for key, pattern in numbers.items():
    found = re.search(pattern, text)
    if found is None:
      raise ValueError(f"ptxas printed no {key!r} ({pattern}): {text.strip()[:300]}")
    out[key] = int(found.group(1))
  return out


def _ptxas(triton, capability: int) -> str:
  """The ptxas that the triton package itself uses for ``capability`` (newer versions ship
  a second one for sm_90 and above), else the one in its ``bin``."""
  try:
    from triton.backends.nvidia.compiler import get_ptxas
    try:
      return get_ptxas(capability).path
    except TypeError:                       # older versions: one ptxas, no argument
      return get_ptxas().path
  except (ImportError, AttributeError):
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin",
                        "ptxas")


def resources(ttir: str, num_warps: int, capability: int = 90) -> dict:
  """Registers, spills (bytes per thread), stack, barriers in the PTX and layout
  conversions in the TTGIR of one kernel (its TTIR text), compiled with the ``triton``
  package for compute capability ``capability`` with ``num_warps`` warps, one stage
  (as ``rum_kernel`` launches them)."""
  try:
    import triton
    from triton.backends.compiler import GPUTarget
  except ImportError as err:
    raise ImportError("reading a kernel's resources needs the triton package: "
                      "pip install -e '.[kernel-tools]'") from err
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "kernel.ttir")
    with open(path, "w", encoding="utf-8") as f:
      f.write(ttir)
    compiled = triton.compile(path, target=GPUTarget("cuda", capability, 32),
                              options={"num_warps": num_warps, "num_stages": 1})
    ptx = compiled.asm["ptx"]
    with open(path + ".ptx", "w", encoding="utf-8") as f:
      f.write(ptx)
    arch = re.search(r"\.target (\S+)", ptx).group(1)
    run = subprocess.run([_ptxas(triton, capability), "-v", f"--gpu-name={arch}",
                          path + ".ptx", "-o", os.devnull], capture_output=True, text=True)
    if run.returncode:
      raise ValueError(f"ptxas failed on the kernel's PTX: {run.stderr.strip()[:300]}")
  out = parse_ptxas(run.stdout + run.stderr)
  out["barriers"] = ptx.count("bar.sync")
  out["layout_conversions"] = compiled.asm["ttgir"].count("convert_layout")
  return out


def candidate_resources(cand: str, shape, capability: int = 90) -> list[dict]:
  """Per kernel (forward, backward) of a benchmark candidate (``rum1_kernel``,
  ``rum0_kernel_r32_pf``, ...; :mod:`rumjax.benchmarks.cells`) at ``shape`` (B, T, Nx,
  Nh): its :func:`resources` with the warps it launches with."""
  from rumjax.benchmarks import cells
  from rumjax.core import rum_kernel
  base, _, variant = cand.partition("_")
  if base not in ("rum0", "rum1") or not variant.startswith("kernel"):
    raise ValueError(f"{cand!r} is not a RUM kernel candidate (rum0_kernel, "
                     "rum1_kernel_r32, ...).")
  fn, params, xs = cells.make_step(cand, shape)
  options = cells.kernel_options(variant) or {}
  warps = options.get("num_warps") or rum_kernel.num_warps(rum_kernel.padded_size(shape[3]))
  modules = triton_modules(fn, params, xs)
  return [{"kernel": name, "warps": warps, **resources(m, warps, capability)}
          for name, m in zip(("forward", "backward"), modules)]


def format_table(rows: list[dict]) -> str:
  """One line per shape, candidate and kernel, under the triton version that compiled."""
  import triton
  keys = ("registers", "spill_stores", "spill_loads", "barriers", "layout_conversions")
  lines = [f"compiled by triton {triton.__version__} for sm_90 (a proxy; see "
           "rumjax.benchmarks.kernel_resources)",
           f"{'shape':>16} {'candidate':>20} {'kernel':>8} {'warps':>5} "
           + " ".join(f"{k:>18}" for k in keys)]
  for r in rows:
    lines.append(f"{r['shape']:>16} {r['candidate']:>20} {r['kernel']:>8} {r['warps']:>5} "
                 + " ".join(f"{r[k]:>18}" for k in keys))
  return "\n".join(lines)

"""Exact resume on a GPU: XLA's deterministic GPU ops (issue 44).

On a CPU a run killed and resumed from its checkpoint ends bit-equal to one that never
stopped: every XLA op is deterministic there. On an NVIDIA GPU some are not by default
(scatter-adds and reductions with atomics, autotuned convolution and GEMM algorithms that
may differ between two compilations), so two runs of one config can drift apart in the
last bits, and a resumed run with them. ``--xla_gpu_deterministic_ops=true`` makes XLA
pick deterministic implementations (at some cost in speed). It is an ``XLA_FLAGS`` entry,
read once when the backend initialises, so :func:`use_deterministic_gpu_ops` must run
before JAX runs anything; ``launch/train.py`` calls it first thing.
"""

import importlib.metadata
import os
from typing import MutableMapping, Optional

from absl import logging

FLAG_NAME = "--xla_gpu_deterministic_ops"
FLAG = FLAG_NAME + "=true"
# Distributions of JAX's GPU backends (jax[cuda12] installs jax-cuda12-plugin, ...).
GPU_PLUGIN_PREFIXES = ("jax-cuda", "jax-rocm")
GPU_PLATFORMS = ("cuda", "gpu", "rocm")
# Device files of an NVIDIA or AMD GPU (a jaxlib built with CUDA has no plugin to find).
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/kfd")


def with_flag(xla_flags: Optional[str], flag: str = FLAG) -> str:
  """``xla_flags`` with ``flag`` appended, unless a value of that flag is already there
  (the user's own ``--xla_gpu_deterministic_ops=false`` is kept)."""
  name = flag.split("=", 1)[0]
  entries = (xla_flags or "").split()
  if any(e == name or e.startswith(name + "=") for e in entries):
    return xla_flags or ""
  return " ".join(entries + [flag])


def gpu_may_run(environ: MutableMapping[str, str] = os.environ) -> bool:
  """Whether a GPU backend may initialise in this process: ``JAX_PLATFORMS`` (when set)
  names a GPU platform, and a CUDA or ROCm plugin of JAX is installed or the machine has a
  GPU's device file. Asks JAX for no device (that would initialise the backend); the flag
  is harmless where no GPU runs after all."""
  platforms = environ.get("JAX_PLATFORMS", "").lower()
  if platforms and not any(p in platforms for p in GPU_PLATFORMS):
    return False
  for dist in importlib.metadata.distributions():
    name = (dist.metadata.get("Name") or "").lower().replace("_", "-")
    if name.startswith(GPU_PLUGIN_PREFIXES):
      return True
  return any(os.path.exists(path) for path in GPU_DEVICE_FILES)


def backends_initialized() -> bool:
  """Whether JAX's backends are already up (then ``XLA_FLAGS`` is no longer read)."""
  try:
    from jax._src import xla_bridge  # pylint: disable=import-outside-toplevel
    return bool(xla_bridge.backends_are_initialized())
  except (ImportError, AttributeError):
    return False


def use_deterministic_gpu_ops(environ: MutableMapping[str, str] = os.environ) -> bool:
  """Appends ``--xla_gpu_deterministic_ops=true`` to ``XLA_FLAGS`` when a GPU may run
  (:func:`gpu_may_run`) and the flag is not set yet; call before JAX runs anything.

  Returns whether ``XLA_FLAGS`` now asks for deterministic GPU ops (set here or before).
  If the backend is already initialised the flag cannot take effect: a warning says so
  and nothing is changed.
  """
  current = environ.get("XLA_FLAGS", "")
  if with_flag(current) == current and current:
    return FLAG in current.split()
  if not gpu_may_run(environ):
    return False
  if backends_initialized():
    logging.warning("JAX's backend is already initialised: %s cannot take effect; a "
                    "resumed GPU run may differ from an uninterrupted one in the last "
                    "bits.", FLAG)
    return False
  environ["XLA_FLAGS"] = with_flag(current)
  return True

"""Shared test set-up: float64 is enabled per test where needed via ``jax.experimental``.

One persistent JAX compilation cache per test session (a temporary folder, removed at the
end), shared by the xdist workers and the subprocesses of the launch tests through the
environment: many tests train the same tiny models, which then compile once per session.
A ``JAX_COMPILATION_CACHE_DIR`` already set is used as it is (and kept).
"""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:   # the first process of the session
  _cache = tempfile.mkdtemp(prefix="rumjax-tests-jax-cache-")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
  atexit.register(shutil.rmtree, _cache, ignore_errors=True)

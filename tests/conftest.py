"""Shared test set-up: float64 is enabled per test where needed via ``jax.experimental``.

One persistent JAX compilation cache per test session (a temporary folder, removed at the
end), shared by the xdist workers and the subprocesses of the launch tests through the
environment: many tests train the same tiny models, which then compile once per session.
A ``JAX_COMPILATION_CACHE_DIR`` already set is used as it is (and kept).

Property tests (hypothesis) never depend on chance: the default profile ``ci`` is
derandomised (the examples are a fixed function of the test) and keeps no example database,
so every run of one commit tests the same cases. ``HYPOTHESIS_PROFILE=search`` opts in to a
wide random search (many more examples, failures remembered in ``.hypothesis/`` and replayed
first)::

    HYPOTHESIS_PROFILE=search python -m pytest -q -p no:xdist tests/test_rum.py -k property

A failure it finds is turned into a regression test with ``@hypothesis.example(...)``.
"""

import atexit
import os
import shutil
import tempfile

import hypothesis

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:   # the first process of the session
  _cache = tempfile.mkdtemp(prefix="rumjax-tests-jax-cache-")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
  atexit.register(shutil.rmtree, _cache, ignore_errors=True)

hypothesis.settings.register_profile(
    "ci", derandomize=True, database=None, max_examples=10, deadline=None, print_blob=True)
hypothesis.settings.register_profile(
    "search", derandomize=False, max_examples=500, deadline=None, print_blob=True)
hypothesis.settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

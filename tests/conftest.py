"""Shared test set-up: float64 is enabled per test where needed via ``jax.experimental``.

One temporary folder per test session, removed at the end and shared by the xdist workers
and the subprocesses of the launch tests through the environment (``TMPDIR``): it holds
the persistent JAX compilation cache (many tests train the same tiny models, which then
compile once per session) and whatever libraries leave behind in the temporary directory
(TFDS makes an empty ``tmp*tfds`` folder for every builder of unprepared data and never
removes it). pytest's ``tmp_path`` folders stay in the system's temporary directory.
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
import importlib.metadata
import os
import shutil
import tempfile

import hypothesis
import pytest

_XLA_FLAGS_GIVEN = "XLA_FLAGS" in os.environ
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
if "RUMJAX_TESTS_TMP" not in os.environ:   # the first process of the session
  # pytest's own tmp_path folders stay where they were (kept for inspection, rotated).
  os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
  _tmp = tempfile.mkdtemp(prefix="rumjax-tests-")
  atexit.register(shutil.rmtree, _tmp, ignore_errors=True)
  os.environ["RUMJAX_TESTS_TMP"] = os.environ["TMPDIR"] = _tmp
  if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = os.path.join(_tmp, "jax-cache")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
tempfile.tempdir = None   # re-read TMPDIR: libraries' stray temporary folders land in _tmp



# Modules whose scope="module" fixture trains or prepares something: xdist runs each on one
# worker (pytest_xdist_make_scheduler below), so the fixture is built once, not per worker
# (the default set sends every module to one worker).
ONE_WORKER_MODULES = frozenset(f"tests/{name}.py" for name in (
    "test_reproduce", "test_summ_analysis", "test_landscape", "test_launch_evaluate",
    "test_babi_all"))


# XLA:CPU's older loop emitters instead of its MLIR fusion emitters: the same computations,
# compiled in about 40% less time (a trivial elementwise jit 24 -> 15 ms; the default set
# 1,099 -> 741 s on one core, session 28). The flag is in jaxlib 0.8.0 (setup.cfg's floor),
# 0.10.2 and 0.11.2; XLA refuses an unknown flag, and its legacy emitters are being retired,
# so a newer jaxlib compiles as XLA chooses.
_FAST_COMPILE_JAXLIB = (0, 12)


def _jaxlib_before(version: tuple[int, int]) -> bool:
  try:
    have = importlib.metadata.version("jaxlib").split(".")[:2]
    return tuple(int(part) for part in have) < version
  except (importlib.metadata.PackageNotFoundError, ValueError):
    return False


def _own_share_of_the_cores():
  """Pins an xdist worker to its own share of the cores this session may use (``-n 2`` on
  2 cores: one each), so that the workers' XLA thread pools (sized from the affinity)
  and the launch tests' subprocesses do not compete for every core. Measured on the 2-core
  machine, five core test files with ``-n 2``: 124 and 135 s unpinned, 114 and 112 s
  pinned (session 28)."""
  worker = os.environ.get("PYTEST_XDIST_WORKER", "")
  workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
  if not worker.startswith("gw") or workers < 2 or not hasattr(os, "sched_setaffinity"):
    return
  cpus = sorted(os.sched_getaffinity(0))
  share = max(1, len(cpus) // workers)
  start = (int(worker[2:]) * share) % len(cpus)
  os.sched_setaffinity(0, cpus[start:start + share])


def _default_set(config) -> bool:
  """Whether this run is the default set (setup.cfg's ``-m "not slow"``)."""
  return config.getoption("markexpr") == "not slow"


def pytest_configure(config):
  """The default set (``-m "not slow"``, setup.cfg) compiles with XLA's CPU backend at
  optimisation level 0 and with its legacy loop emitters: its computations are tiny and
  compiling dominates; level 0 cuts it by ~25%, the emitters by ~33% more. Not for
  ``-m slow`` (a kernel test's 1e-5 tolerance sees level 0's other rounding), not with an
  NVIDIA GPU, not when XLA_FLAGS is given. Set before any test computes (the workers and
  the launch tests' subprocesses inherit it). The default set's xdist workers are pinned
  to their share of the cores; ``-m slow`` (whole trainings, several processes per test)
  keeps every core for each worker, as measured there before."""
  if not _default_set(config):
    return
  if not _XLA_FLAGS_GIVEN and shutil.which("nvidia-smi") is None:
    os.environ["XLA_FLAGS"] += " --xla_backend_optimization_level=0"
    if _jaxlib_before(_FAST_COMPILE_JAXLIB):
      os.environ["XLA_FLAGS"] += " --xla_cpu_use_fusion_emitters=false"
  _own_share_of_the_cores()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
  """``-n 2`` alone (the README's command). The default set goes to the workers a module at
  a time (xdist's ``loadfile``, largest modules first): a module's tests share the jitted
  functions their worker has compiled, where spreading them one by one compiles most of
  them on both workers. Measured with both workers on one core, eight core test files
  (243 tests): 301 s spread, 231 s by module (session 29). ``-m slow`` (whole trainings)
  spreads tests one by one, as with xdist's ``load``, except those of
  :data:`ONE_WORKER_MODULES`, which go to one worker together (xdist's own ``xdist_group``
  marks do nothing with pytest 9.2: xdist 3.8 renames a test through ``item._nodeid``,
  which pytest no longer reads). An explicit ``--dist`` wins."""
  if config.getvalue("dist") != "load" or "--dist" in " ".join(config.invocation_params.args):
    return None
  from xdist.scheduler import LoadFileScheduling, LoadScopeScheduling

  if _default_set(config):
    return LoadFileScheduling(config, log)

  class OneWorkerModules(LoadScopeScheduling):
    def _split_scope(self, nodeid):
      module = nodeid.split("::", 1)[0]
      return module if module in ONE_WORKER_MODULES else nodeid

  return OneWorkerModules(config, log)


SLOW_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slow_tests.txt")


def slow_test_ids(path: str = SLOW_TESTS) -> list[str]:
  """The node ids listed in ``tests/slow_tests.txt`` (one per line; ``#`` starts a
  comment): long tests that run only with ``-m slow``, marked here so that no test file
  needs editing (several developers edit the core tests at once)."""
  with open(path, encoding="utf-8") as f:
    return [line.split("#", 1)[0].strip() for line in f if line.split("#", 1)[0].strip()]


@pytest.hookimpl(tryfirst=True)   # before the -m selection of setup.cfg's addopts
def pytest_collection_modifyitems(config, items):
  """Marks the tests of :func:`slow_test_ids` ``slow``."""
  del config
  slow = set(slow_test_ids())
  for item in items:
    if item.nodeid in slow:
      item.add_marker(pytest.mark.slow)


hypothesis.settings.register_profile(
    "ci", derandomize=True, database=None, max_examples=10, deadline=None, print_blob=True)
hypothesis.settings.register_profile(
    "search", derandomize=False, max_examples=500, deadline=None, print_blob=True)
hypothesis.settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def float32_matmuls():
  """Every matmul in true float32 on every backend (``jax.default_matmul_precision
  ("highest")``): a recent NVIDIA GPU's default is TF32, a TPU's one bfloat16 pass
  (DESIGN.md section 3.5). A module that compares implementations or checks against float64
  says ``pytestmark = pytest.mark.usefixtures("float32_matmuls")``; tests/test_accelerator.py
  runs at the backend's default instead."""
  import jax   # pylint: disable=import-outside-toplevel
  with jax.default_matmul_precision("highest"):
    yield

"""The dependency floors of ``setup.cfg`` are true: a fresh venv holding exactly those versions
passes the core tests (rotation, RUM, the RUM cell, the NNX front door, one training run, a
TFDS builder writing array_record files, ROUGE).

The floors have one source, ``setup.cfg``: every ``install_requires`` line is ``name>=floor``
and becomes the pin ``name==floor`` here; ``python_requires`` is ``>=X.Y`` and the venv is made
with Python X.Y when one is on the PATH (this interpreter otherwise). Transitive dependencies
take what pip resolves for those pins; the ``test`` extra (pytest, hypothesis) takes the
newest. The package is installed (not editable) from a copy of the checkout, in the same pip
run as the pins, so pip also checks ``python_requires`` and ``install_requires`` against them;
the tests run from another folder holding ``tests/``, ``tasks/`` and the README only, so
they import the installed ``rumjax``. Nothing is written to the checkout.

Slow (a few hundred MB of wheels, then the core tests on one core, about ten minutes):
``python -m pytest -m slow tests/test_floors.py``. Skipped only when the package index cannot
be reached.
"""

import configparser
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETUP_CFG = os.path.join(REPO, "setup.cfg")
CORE_TESTS = ("tests/test_rotation.py", "tests/test_rum.py", "tests/test_rum_cell.py",
              "tests/test_nnx.py",
              "tests/test_training.py::test_trains_writes_metrics_and_resumes_exactly",
              # and one quick test each for the floors of the data and evaluation packages:
              "tests/test_task_babi.py::test_builder_examples_and_splits",   # tfds, array-record
              "tests/test_rouge.py::test_rouge_f1_is_the_mean_of_rouge_score")   # rouge-score


def _options():
  parser = configparser.ConfigParser()
  parser.read(SETUP_CFG)
  return parser["options"], parser["options.extras_require"]


def _requirement_lines(value):
  return [line.strip() for line in value.splitlines()
          if line.strip() and not line.strip().startswith("#")]


def floor_pins():
  """``["jax==0.8.0", ...]``: setup.cfg's ``install_requires``, each ``>=`` floor pinned."""
  pins = []
  for line in _requirement_lines(_options()[0]["install_requires"]):
    match = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*>=\s*([0-9][0-9A-Za-z.]*)", line)
    assert match, f"setup.cfg install_requires: {line!r} is not 'name>=floor'"
    pins.append(f"{match[1]}=={match[2]}")
  return pins


def python_floor():
  """``(3, 11)`` from setup.cfg's ``python_requires = >=3.11``."""
  value = _options()[0]["python_requires"].strip()
  match = re.fullmatch(r">=\s*(\d+)\.(\d+)", value)
  assert match, f"setup.cfg python_requires: {value!r} is not '>=X.Y'"
  return int(match[1]), int(match[2])


def _normalize(name):
  return re.sub(r"[-_.]+", "-", name).lower()


def test_floor_pins_are_read_from_setup_cfg():
  pins = floor_pins()
  names = {_normalize(p.split("==")[0]) for p in pins}
  assert {"jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy"} <= names
  assert python_floor() >= (3, 11)


def _floor_interpreter(floor):
  """An interpreter of the floor Python: this one, or ``pythonX.Y`` on the PATH."""
  if sys.version_info[:2] == floor:
    return sys.executable
  candidate = shutil.which("python%d.%d" % floor)
  if candidate:
    out = subprocess.run([candidate, "-c", "import sys; print(*sys.version_info[:2])"],
                         capture_output=True, text=True)
    if out.returncode == 0 and tuple(map(int, out.stdout.split())) == floor:
      return candidate
  return sys.executable


def _lost_the_index(pip_output):
  """Whether a failed pip run failed for want of the network (not a conflict, not a bad pin
  that the index answered for)."""
  network = re.search(r"NewConnectionError|Failed to establish a new connection|Temporary "
                      r"failure in name resolution|Name or service not known|Network is "
                      r"unreachable|ConnectTimeoutError|ReadTimeoutError", pip_output)
  not_found = re.search(r"No matching distribution found|Could not find a version", pip_output)
  return bool(network and not_found)


def _run(argv, timeout, **kwargs):
  return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)


def _tail(proc, lines=60):
  return "\n".join((proc.stdout + proc.stderr).splitlines()[-lines:])


@pytest.mark.slow
def test_the_floors_install_and_pass_the_core_tests(tmp_path):
  start = time.time()
  pins = floor_pins()
  test_extra = _requirement_lines(_options()[1]["test"])
  venv = tmp_path / "venv"
  python = str(venv / "bin" / "python")
  made = _run([_floor_interpreter(python_floor()), "-m", "venv", str(venv)], 300)
  assert made.returncode == 0, _tail(made)
  pip = [python, "-m", "pip", "--disable-pip-version-check"]

  # The only reason to skip: the index cannot be reached (jax exists there, whatever the pins).
  probe = _run(pip + ["index", "versions", "jax", "--timeout", "20", "--retries", "1"], 600)
  if probe.returncode != 0:
    pytest.skip("package index unreachable (pip index versions jax: "
                f"{_tail(probe, 3)!r})")

  # The package from a copy (pip builds in the source folder; the checkout stays clean).
  source = tmp_path / "source"
  ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
  shutil.copytree(os.path.join(REPO, "rumjax"), source / "rumjax", ignore=ignore)
  for name in ("setup.cfg", "pyproject.toml", "README.md"):
    shutil.copy(os.path.join(REPO, name), source / name)
  installed = _run(pip + ["install", "--quiet", *pins, *test_extra, str(source)], 1800)
  if installed.returncode != 0 and _lost_the_index(installed.stdout + installed.stderr):
    pytest.skip(f"package index unreachable during the install: {_tail(installed, 3)!r}")
  assert installed.returncode == 0, f"pip install of the floors failed:\n{_tail(installed)}"

  frozen = _run(pip + ["list", "--format=freeze"], 300)
  have = {_normalize(n): v for n, v in
          (line.split("==", 1) for line in frozen.stdout.splitlines() if "==" in line)}
  for pin in pins:
    name, version = pin.split("==")
    assert have.get(_normalize(name)) == version, f"{pin} wanted, {have.get(_normalize(name))} got"
  setup_time = time.time() - start

  # The core tests, from a folder without rumjax/ (they import the installed package).
  run = tmp_path / "run"
  shutil.copytree(os.path.join(REPO, "tests"), run / "tests", ignore=ignore)
  shutil.copytree(os.path.join(REPO, "tasks"), run / "tasks", ignore=ignore)
  shutil.copy(SETUP_CFG, run / "setup.cfg")   # the pytest settings (markers, pythonpath)
  shutil.copy(os.path.join(REPO, "README.md"), run / "README.md")   # test_nnx runs its block
  env = {k: v for k, v in os.environ.items()
         if k not in ("JAX_COMPILATION_CACHE_DIR", "PYTHONPATH", "VIRTUAL_ENV")
         and not k.startswith(("PYTEST_", "XDIST_"))}
  env["JAX_PLATFORMS"] = "cpu"
  tested = _run([python, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                 "-W", "ignore::DeprecationWarning", *CORE_TESTS], 3600, cwd=run, env=env)
  where = _run([python, "-c", "import rumjax; print(rumjax.__file__)"], 300, cwd=run / "tests")
  print(f"floors: {' '.join(pins)}; setup {setup_time:.0f} s, "
        f"tests {time.time() - start - setup_time:.0f} s\n{_tail(tested, 3)}")
  assert tested.returncode == 0, f"the core tests fail on the floors:\n{_tail(tested)}"
  assert str(venv) in where.stdout, where.stdout + where.stderr

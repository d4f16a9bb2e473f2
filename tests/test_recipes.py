"""WORKSPACE.md's recipes work: a cell and a task added from outside the zoo
(``tests/recipe_example.py``) train through the launcher, resume, and are found by name."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

import tasks
from rumjax import cells

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _train(workdir, *extra):
  cmd = [sys.executable, "-m", "launch.train", "--imports=tests.recipe_example",
         "--task=first_symbol", "--cell=elman", f"--workdir={workdir}", *extra]
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
  proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_new_cell_and_task_train_through_the_launcher_and_resume(tmp_path):
  workdir = str(tmp_path / "run")
  summary = _train(workdir, "--steps=10")
  assert summary["step"] == 10 and summary["stop_reason"] == "num_steps"
  assert np.isfinite(summary["train_loss"]) and 0.0 <= summary["test_accuracy"] <= 1.0
  saved = json.load(open(os.path.join(workdir, "config.json")))
  assert saved["task"] == "first_symbol" and saved["model"]["cell"] == "elman"
  resumed = _train(workdir, "--steps=20")    # same command, a larger budget: resumes
  assert resumed["step"] == 20
  records = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
  assert max(r["step"] for r in records) == 20
  # The run records its --imports, so launch.evaluate finds the task without them (it said
  # "unknown task 'first_symbol'", and --imports could not be passed to it).
  assert saved["imports"] == "tests.recipe_example"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-m", "launch.evaluate", f"--workdir={workdir}"],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  evaluated = json.loads(proc.stdout.strip().splitlines()[-1])
  assert evaluated["step"] == 20
  assert evaluated["test_accuracy"] == resumed["test_accuracy"]


def test_the_recipe_registers_by_name_and_the_cell_is_elman():
  from tests import recipe_example
  assert tasks.get_task("first_symbol") is recipe_example.TASK
  assert "first_symbol" in tasks.task_names() and "elman" in cells.cell_names()
  cell = cells.make_cell("elman", 3)
  x, h = jnp.ones((2, 5)), jnp.full((2, 3), 0.5)
  params = cell.init(jax.random.key(0), h, x)["params"]
  new_h, _ = cell.apply({"params": params}, h, x)
  want = np.tanh(np.asarray(x) @ params["x"]["kernel"] + params["x"]["bias"]
                 + np.asarray(h) @ params["h"]["kernel"])
  np.testing.assert_allclose(new_h, want, rtol=1e-6, atol=1e-6)


def test_an_unknown_import_is_one_line(tmp_path):
  proc = subprocess.run([sys.executable, "-m", "launch.train", "--imports=no_such.module",
                         "--task=first_symbol", f"--workdir={tmp_path}"], cwd=REPO,
                        env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode != 0
  assert proc.stderr.strip().splitlines()[-1] == (
      "error: --imports: cannot import 'no_such.module' (No module named 'no_such'); give a "
      "module on the Python path, e.g. --imports=my_project.tasks.")

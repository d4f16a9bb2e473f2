"""``notebooks/quickstart.ipynb`` runs end to end (nbclient, a python3 kernel of this
interpreter) with its parameters shrunk to a few steps, started in ``notebooks/`` as Jupyter
does (the setup cell finds the checkout above it)."""

import os
import sys

import nbformat
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(REPO, "notebooks", "quickstart.ipynb")


def _load():
  with open(NOTEBOOK) as f:
    return nbformat.read(f, as_version=4)


def _parameters_index(nb):
  tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
  assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
  return tagged[0]


def test_notebook_is_clean_and_colab_ready():
  nb = _load()
  nbformat.validate(nb)
  assert nb.metadata.kernelspec.name == "python3"
  for cell in nb.cells:
    if cell.cell_type == "code":
      assert not cell.outputs and cell.execution_count is None, "commit without outputs"
  setup = nb.cells[1].source
  assert "REPO_URL" in setup and 'find_spec("rumjax") is None' in setup
  assert "OWNER" not in setup, "no placeholder URL"
  for cell in nb.cells:   # notebooks import rumjax and tasks only
    if cell.cell_type == "code":
      assert "from launch" not in cell.source and "import launch" not in cell.source
  params = nb.cells[_parameters_index(nb)].source
  for name in ("NUM_STEPS", "LENGTH", "HIDDEN_SIZE", "NNX_STEPS", "WORKDIR"):
    assert f"\n{name} = " in f"\n{params}", name


@pytest.fixture
def python3_kernel(tmp_path, monkeypatch):
  """A ``python3`` kernelspec running this interpreter (so the kernel sees this venv)."""
  from ipykernel.kernelspec import install
  prefix = tmp_path / "jupyter"
  install(prefix=str(prefix), kernel_name="python3")
  monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  return "python3"


def test_notebook_runs(tmp_path, python3_kernel):
  from nbclient import NotebookClient
  nb = _load()
  workdir = tmp_path / "work"
  small = nbformat.v4.new_code_cell(
      f"NUM_STEPS = 4\nLENGTH = 6\nHIDDEN_SIZE = 8\nBATCH_SIZE = 8\nEVAL_EVERY = 2\n"
      f"EVAL_BATCHES = 1\nNNX_STEPS = 5\nWORKDIR = {str(workdir)!r}\n"
      "import sys as _sys; print('kernel python:', _sys.executable)")
  small.metadata["tags"] = ["injected-parameters"]
  nb.cells.insert(_parameters_index(nb) + 1, small)
  client = NotebookClient(nb, kernel_name=python3_kernel, timeout=300,
                          resources={"metadata": {"path": os.path.dirname(NOTEBOOK)}})
  client.execute()   # raises CellExecutionError on any error
  text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                 for o in c.outputs if o.output_type == "stream")
  assert f"kernel python: {sys.executable}" in text
  assert f"repository root: {REPO}" in text
  assert "step 4: dev accuracy" in text
  assert "NNX step 5: train loss" in text and "NNX step 5: dev accuracy" in text   # the NNX cell
  images = [c for c in nb.cells if c.cell_type == "code"
            and any("image/png" in o.get("data", {}) for o in c.outputs)]
  assert len(images) == 2
  for name in ("loss.png", "cos_theta.png"):
    path = workdir / name
    assert path.exists() and path.stat().st_size > 5000, name

"""``rumjax.plotting``: imports without Matplotlib, writes PNGs with the Agg canvas, and
draws Figure 5 for a RUM workdir."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from rumjax import analysis, plotting

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _assert_png(path):
  with open(path, "rb") as f:
    assert f.read(8) == PNG_MAGIC, path
  assert os.path.getsize(path) > 5000, path   # a drawn figure, not an empty canvas


def test_import_without_matplotlib():
  code = textwrap.dedent("""
      import sys
      import rumjax.plotting
      assert "matplotlib" not in sys.modules, "imported eagerly"
      sys.modules["matplotlib"] = None   # as if not installed
      try:
        rumjax.plotting.save_kernel([[1.0]], "unused.png")
      except ImportError as err:
        assert "rumjax[plot]" in str(err), err
      else:
        raise AssertionError("no ImportError")
      print("ok")
  """)
  proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                        text=True, timeout=120, env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]


def test_save_figures(tmp_path):
  rng = np.random.default_rng(0)
  cos = {s: rng.uniform(-1, 1, 9) for s in (0, 10, 20)}
  curves = {"RUM": {"train_loss": (np.arange(5), np.linspace(1, 0.1, 5)),
                    "test_accuracy": (np.array([0, 4]), np.array([0.1, 0.9]))}}
  paths = [
      plotting.save_kernel(rng.normal(size=(8, 8)), str(tmp_path / "k.png")),
      plotting.save_cos(cos, str(tmp_path / "sub" / "c.png"), title="cos"),
      plotting.save_copying(curves, 0.5, str(tmp_path / "copying.png")),
      plotting.save_recall(["RUM", "GRU"], [90.0, None], [100.0, 21.5],
                           {"RUM": curves["RUM"]["train_loss"]}, str(tmp_path / "r.png"),
                           accuracy_curves={"RUM": curves["RUM"]["test_accuracy"]}),
  ]
  for p in paths:
    _assert_png(p)


def _rum_workdir(path, with_cos=True, learn_lam=False):
  os.makedirs(path)
  config = {"task": "recall", "model": {"cell": "rum", "lam": 1, "learn_lam": learn_lam},
            "label": "RUM"}
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(config, f)
  params = {"rnn": {"cell": {"kernel_x": np.ones((3, 12)), "kernel_h": np.eye(4, 8),
                             "bias": np.zeros(12)}}}
  if learn_lam:
    params["rnn"]["cell"]["lam"] = np.asarray(0.7)
  analysis.save_params_npz(os.path.join(path, "params.npz"), params)
  with open(os.path.join(path, "result.json"), "w") as f:
    json.dump({"steps": 7}, f)
  if with_cos:
    with open(os.path.join(path, "cos_theta.jsonl"), "w") as f:
      for step in (0, 7):
        f.write(json.dumps({"step": step, "cos_mean": [0.1 * step / 7, 0.2, -0.3]}) + "\n")


def test_plot_rum_model(tmp_path):
  model_dir = str(tmp_path / "exp" / "rum_lam1")
  _rum_workdir(model_dir)
  os.makedirs(tmp_path / "exp" / "gru")
  with open(tmp_path / "exp" / "gru" / "config.json", "w") as f:
    json.dump({"cell": "gru"}, f)
  os.makedirs(tmp_path / "exp" / "rum_ln")
  with open(tmp_path / "exp" / "rum_ln" / "config.json", "w") as f:
    json.dump({"model": {"cell": "rum", "layer_norm": True}}, f)   # no rum_scan kernel
  assert plotting.rum_model_dirs(str(tmp_path / "exp")) == [model_dir]
  assert plotting.rum_model_dirs(model_dir) == [model_dir]
  paths = plotting.plot_rum_model(model_dir, out_dir=str(tmp_path / "out"))
  assert [os.path.basename(p) for p in paths] == ["kernel_tau.png", "cos_theta.png"]
  for p in paths:
    _assert_png(p)


def test_kernel_blocks_are_the_cells_kernels_by_name():
  """Algorithm 1's kernels cut from kernel_x <Nx, 3Nh> and kernel_h <Nh, 2Nh>: each entry
  of the two matrices lands in exactly one block, at its own place."""
  nx, nh = 3, 4
  kx = np.arange(nx * 3 * nh, dtype=float).reshape(nx, 3 * nh)
  kh = 1000 + np.arange(nh * 2 * nh, dtype=float).reshape(nh, 2 * nh)
  blocks = analysis.kernel_blocks({"kernel_x": kx, "kernel_h": kh})
  assert list(blocks) == ["W^tau_xh", "W^u_xh", "W_xh", "W^tau_hh", "W^u_hh"]
  for i in range(nx):
    for j in range(nh):
      assert blocks["W^tau_xh"][i, j] == kx[i, j]
      assert blocks["W^u_xh"][i, j] == kx[i, nh + j]
      assert blocks["W_xh"][i, j] == kx[i, 2 * nh + j]
  for i in range(nh):
    for j in range(nh):
      assert blocks["W^tau_hh"][i, j] == kh[i, j] and blocks["W^u_hh"][i, j] == kh[i, nh + j]
  with pytest.raises(ValueError, match="not a RUM cell's kernels"):
    analysis.kernel_blocks({"kernel_x": kx[:, :-1], "kernel_h": kh})


def test_plot_rum_kernels(tmp_path):
  model_dir = str(tmp_path / "rum")
  _rum_workdir(model_dir)
  path = plotting.plot_rum_kernels(model_dir, out_dir=str(tmp_path / "out"))
  assert os.path.basename(path) == "kernels.png"
  _assert_png(path)


def test_plot_rum_model_of_a_learned_lam(tmp_path):
  """A RUM with a learned lam (its cell has the parameter "lam" too) is plotted; it was
  listed as a RUM model and then failed with "no RUM cell parameters"."""
  model_dir = str(tmp_path / "rum")
  _rum_workdir(model_dir, learn_lam=True)
  assert plotting.is_rum_model_dir(model_dir)
  path, cell = analysis.find_rum_params(
      analysis.load_params(os.path.join(model_dir, "params.npz"))[1])
  assert path == "rnn/cell" and float(cell["lam"]) == pytest.approx(0.7)
  paths = plotting.plot_rum_model(model_dir, out_dir=str(tmp_path / "out"))
  assert [os.path.basename(p) for p in paths] == ["kernel_tau.png", "cos_theta.png"]


def test_params_of_one_model_relative_to_its_workdir(tmp_path, monkeypatch):
  """``--params=params.npz`` (the launcher's example) from another directory is the
  workdir's file (it was "no parameter file"); given with a folder of several models it
  is a one-line error (every model's kernel was drawn from that one file)."""
  model_dir = str(tmp_path / "exp" / "rum_a")
  _rum_workdir(model_dir)
  _rum_workdir(str(tmp_path / "exp" / "rum_b"))
  monkeypatch.chdir(tmp_path)
  paths = plotting.plot_rum_model(model_dir, str(tmp_path / "out"), "params.npz")
  assert [os.path.basename(p) for p in paths] == ["kernel_tau.png", "cos_theta.png"]
  proc = subprocess.run(
      [sys.executable, "-m", "launch.plot", f"--workdir={tmp_path / 'exp'}",
       "--params=params.npz", f"--out_dir={tmp_path / 'out2'}"], cwd=REPO,
      env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1].startswith(
      "error: --params=params.npz names one model's parameters, but "), proc.stderr[-2000:]
  assert not (tmp_path / "out2").exists()


def test_plot_rum_model_without_records_or_task(tmp_path):
  """No cos_theta.jsonl and no task: the cos panel says so instead of failing."""
  model_dir = str(tmp_path / "rum")
  _rum_workdir(model_dir, with_cos=False)
  paths = plotting.plot_rum_model(model_dir)
  assert all(os.path.exists(p) for p in paths)


def test_draw_on_axes():
  pytest.importorskip("matplotlib")
  fig, axes = plotting.figure(ncols=2)
  plotting.draw_cos_histograms(axes[0, 0], {})
  plotting.draw_accuracy_bars(axes[0, 1], ["a"], [50.0], [None], chance=10.0)
  assert axes[0, 1].get_ylabel() == "test accuracy (%)"


def test_the_seeds_of_a_model_share_its_colour_with_a_line_style_each():
  styles = plotting.common.line_styles(["RUM s0", "RUM s1", "LSTM s0", "LSTM s1", "GRU"])
  assert styles == {"RUM s0": ("C0", "-"), "RUM s1": ("C0", "--"),
                    "LSTM s0": ("C1", "-"), "LSTM s1": ("C1", "--"), "GRU": ("C2", "-")}
  fig, axes = plotting.common.figure()
  plotting.common.draw_curves(axes[0, 0], {k: ([0, 1, 2], [3.0, 2.0, 1.0]) for k in styles})
  drawn = {line.get_label(): (line.get_color(), line.get_linestyle())
           for line in axes[0, 0].get_lines()}
  assert drawn == styles

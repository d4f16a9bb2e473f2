r"""Figures of the RUM paper's synthetic tasks (Figures 4 and 5) with Matplotlib.

The ``draw_*`` functions take a Matplotlib ``Axes`` (a notebook can draw inline); the
``save_*`` functions write PNGs through ``matplotlib.figure.Figure`` and its Agg canvas (no
pyplot, no display). :func:`plot_rum_model` draws Figure 5 for a RUM training workdir:
``kernel_tau.png`` (the target-memory kernel ``W^tau_hh``, Figure 5a) and
``cos_theta.png`` (``cos(theta_t)`` across training, Figure 5b,c).

Matplotlib is the optional ``plot`` extra (``pip install 'rumjax[plot]'``): it is imported
inside the functions that draw, so ``import rumjax.plotting`` works without it.
"""

import json
import os
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from rumjax import analysis

# ------------------------------------------------------------------------- drawing


def _matplotlib():
  """The ``matplotlib`` package, or an ImportError that says how to install it."""
  try:
    import matplotlib
  except ImportError as err:
    raise ImportError("rumjax.plotting needs matplotlib: pip install 'rumjax[plot]' (or "
                      "pip install matplotlib).") from err
  return matplotlib


def _figure(width=6.4, height=4.8, ncols=1, nrows=1):
  """A Matplotlib ``Figure`` on the Agg canvas (no pyplot) and its <Axes>[nrows, ncols]."""
  _matplotlib()
  from matplotlib.figure import Figure
  fig = Figure(figsize=(width, height), layout="constrained")
  axes = fig.subplots(nrows, ncols, squeeze=False)
  return fig, axes


def _save(fig, path: str) -> str:
  """Writes ``fig`` as a PNG at ``path`` (creating its folder); returns ``path``."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=110)
  return path


def draw_kernel(ax, kernel: np.ndarray, title: str = r"$W^{\tau}_{hh}$"):
  """Heat map of a square kernel, symmetric colour scale (Figure 5a)."""
  kernel = np.asarray(kernel)
  vmax = float(np.max(np.abs(kernel))) or 1.0
  image = ax.imshow(kernel, cmap="RdBu_r", vmin=-vmax, vmax=vmax, interpolation="nearest")
  ax.set_title(title)
  ax.set_xlabel(r"$j$ (component of $\tau_t$)")
  ax.set_ylabel(r"$i$ (component of $h_{t-1}$)")
  ax.figure.colorbar(image, ax=ax, shrink=0.85)
  return ax


def draw_cos_histograms(ax, cos_by_step: Mapping[int, Any], bins: int = 20,
                        max_curves: int = 12, title: str = r"$\cos\theta$ across training"):
  """TensorBoard-style offset histograms: one per recorded training step, each of the
  ``T`` mini-batch means of ``cos(theta_t)`` (Figure 5b,c). At most ``max_curves``
  steps (evenly spaced, first and last included) are drawn."""
  _matplotlib()
  from matplotlib import cm
  steps, edges, counts = analysis.cos_histograms(cos_by_step, bins=bins)
  if len(steps) == 0:
    ax.text(0.5, 0.5, "no cos(theta) records", ha="center", va="center",
            transform=ax.transAxes)
    return ax
  keep = np.unique(np.linspace(0, len(steps) - 1, min(max_curves, len(steps))).astype(int))
  steps, counts = steps[keep], counts[keep]
  centers = 0.5 * (edges[1:] + edges[:-1])
  peak = max(int(counts.max()), 1)
  colors = cm.viridis(np.linspace(0.0, 0.9, len(steps)))
  for i, (step, c) in enumerate(zip(steps, counts)):
    offset = len(steps) - 1 - i   # the first step on top, the last at the bottom
    y = offset + 0.9 * c / peak
    ax.fill_between(centers, offset, y, step="mid", color=colors[i], alpha=0.6)
    ax.step(centers, y, where="mid", color=colors[i], lw=1.0)
  ax.set_yticks(np.arange(len(steps)))
  ax.set_yticklabels([str(s) for s in steps[::-1]])
  ax.set_ylabel("training step")
  ax.set_xlabel(r"mini-batch mean of $\cos\theta_t$ (one count per time step $t$)")
  ax.set_xlim(edges[0], edges[-1])
  ax.set_title(title)
  return ax


def draw_cos_map(ax, cos_by_step: Mapping[int, Any], title: str = r"mean $\cos\theta_t$"):
  """Heat map of the mini-batch mean ``cos(theta_t)``: time step ``t`` by training step."""
  by_step = {int(s): np.asarray(v) for s, v in cos_by_step.items()}
  if not by_step:
    return ax
  steps = sorted(by_step)
  grid = np.stack([by_step[s] for s in steps])
  image = ax.imshow(grid, aspect="auto", cmap="viridis", vmin=-1, vmax=1,
                    interpolation="nearest", origin="lower",
                    extent=(0.5, grid.shape[1] + 0.5, -0.5, len(steps) - 0.5))
  ticks = np.unique(np.linspace(0, len(steps) - 1, min(8, len(steps))).astype(int))
  ax.set_yticks(ticks)
  ax.set_yticklabels([str(steps[i]) for i in ticks])
  ax.set_xlabel(r"time step $t$")
  ax.set_ylabel("training step")
  ax.set_title(title)
  ax.figure.colorbar(image, ax=ax, shrink=0.85)
  return ax


def draw_curves(ax, curves: Mapping[str, tuple], *, baseline: Optional[float] = None,
                ylabel: str = "cross-entropy", title: str = "", logy: bool = False):
  """Lines ``{label: (steps, values)}``, with an optional dashed baseline."""
  for label, (steps, values) in curves.items():
    if len(steps):
      ax.plot(steps, values, label=label, lw=1.2, marker="." if len(steps) < 3 else None)
  if baseline is not None:
    ax.axhline(baseline, color="k", ls="--", lw=1.0,
               label=f"memoryless baseline {baseline:.4f}")
  if logy:
    ax.set_yscale("log")
  ax.set_xlabel("training step")
  ax.set_ylabel(ylabel)
  if title:
    ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  return ax


def draw_accuracy_bars(ax, labels: Sequence[str], ours: Sequence[Optional[float]],
                       paper: Sequence[Optional[float]], *, chance: Optional[float] = None,
                       title: str = ""):
  """Grouped bars: our test accuracy (%) next to the paper's, per model."""
  x = np.arange(len(labels))
  nan = lambda v: np.nan if v is None else v
  ax.bar(x - 0.2, [nan(v) for v in ours], 0.4, label="ours")
  ax.bar(x + 0.2, [nan(v) for v in paper], 0.4, label="paper", alpha=0.6)
  for xi, v in zip(x, ours):
    if v is not None:
      ax.text(xi - 0.2, v + 1, f"{v:.1f}", ha="center", fontsize=7)
  if chance is not None:
    ax.axhline(chance, color="k", ls="--", lw=1.0, label=f"chance {chance:.0f}%")
  ax.set_xticks(x)
  ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
  ax.set_ylabel("test accuracy (%)")
  ax.set_ylim(0, 105)
  if title:
    ax.set_title(title)
  ax.legend(fontsize=7)
  return ax


# -------------------------------------------------------------------------- saving


def save_kernel(kernel: np.ndarray, path: str, title: str = r"$W^{\tau}_{hh}$") -> str:
  """:func:`draw_kernel` as a PNG at ``path``; returns ``path``."""
  fig, axes = _figure(5.6, 4.8)
  draw_kernel(axes[0, 0], kernel, title)
  return _save(fig, path)


def save_cos(cos_by_step: Mapping[int, Any], path: str, title: str = "") -> str:
  """:func:`draw_cos_histograms` and :func:`draw_cos_map` side by side as a PNG."""
  fig, axes = _figure(11.0, 4.8, ncols=2)
  draw_cos_histograms(axes[0, 0], cos_by_step)
  draw_cos_map(axes[0, 1], cos_by_step)
  if title:
    fig.suptitle(title)
  return _save(fig, path)


def save_copying(curves: Mapping[str, Mapping[str, tuple]], baseline: float, path: str,
                 title: str = "") -> str:
  """Figure 4: training cross-entropy per model with the memoryless baseline, and the
  test accuracy on the copied symbols at each evaluation.

  Args:
    curves: ``{label: {"train_loss": (steps, values), "test_accuracy": (steps, values)}}``.
  """
  fig, axes = _figure(12.0, 4.6, ncols=2)
  draw_curves(axes[0, 0], {k: v["train_loss"] for k, v in curves.items()},
              baseline=baseline, title=title or "copying: cross-entropy", logy=True)
  draw_curves(axes[0, 1], {k: (v["test_accuracy"][0], 100 * v["test_accuracy"][1])
                           for k, v in curves.items()},
              ylabel="test accuracy on the copied symbols (%)",
              title="copied-symbol accuracy (chance 12.5%)")
  return _save(fig, path)


def save_recall(labels, ours, paper, loss_curves, path: str, title: str = "",
                accuracy_curves: Optional[Mapping[str, tuple]] = None,
                accuracy_title: str = "dev accuracy during training") -> str:
  """Table 1 as bars (ours vs the paper), the training losses and, if given, the accuracy
  measured during training (``{label: (steps, accuracy in [0, 1])}``, titled
  ``accuracy_title``)."""
  ncols = 3 if accuracy_curves else 2
  fig, axes = _figure(6.0 * ncols, 4.6, ncols=ncols)
  draw_accuracy_bars(axes[0, 0], labels, ours, paper, chance=10.0,
                     title=title or "associative recall: test accuracy")
  draw_curves(axes[0, 1], loss_curves, ylabel="training cross-entropy",
              title="training loss")
  if accuracy_curves:
    draw_curves(axes[0, 2], {k: (s, 100 * np.asarray(v))
                             for k, (s, v) in accuracy_curves.items()},
                ylabel="accuracy (%)", title=accuracy_title)
  return _save(fig, path)


# ------------------------------------------------------------------ RUM workdirs


def save_orthogonality_drift(result: Mapping[str, Any], path: str) -> str:
  """``max|R_t^T R_t - 1|`` against ``T`` (log-log), one line per precision variant.

  ``result`` as returned by :func:`rumjax.benchmarks.orthogonality.run_drift`
  (``ts``, ``errors``, ``labels``, ``settings``). Issue 26's picture.
  """
  fig, axes = _figure(6.4, 4.2)
  ax = axes[0, 0]
  for variant, errors in result["errors"].items():
    ax.plot(result["ts"], errors, marker="o", lw=1.2,
            label=result.get("labels", {}).get(variant, variant))
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlabel("sequence length T")
  ax.set_ylabel(r"$\max |R_T^\top R_T - I|$")
  st = result.get("settings", {})
  ax.set_title(f"RUM memory orthogonality (lam=1, eta={st.get('eta')}, "
               f"Nh={st.get('nh')}, batch={st.get('batch')})", fontsize=9)
  ax.grid(alpha=0.3, which="both")
  ax.legend(fontsize=7)
  return _save(fig, path)


def load_json(path: str) -> Optional[dict]:
  """The JSON object in ``path``, or ``None`` if the file does not exist."""
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def load_config(model_dir: str) -> Optional[dict]:
  """A workdir's ``config.json`` (written by ``launch.reproduce``), or ``None``."""
  return load_json(os.path.join(model_dir, "config.json"))


def is_rum_model_dir(path: str) -> bool:
  """Whether ``path`` is the workdir of a RUM model without layer norm (the models whose
  kernel is ``rum_scan``'s layout)."""
  config = load_config(path) or {}
  model = config.get("model") or config   # the model's fields, in config.model if there
  return model.get("cell") == "rum" and not model.get("layer_norm")


def rum_model_dirs(path: str) -> list[str]:
  """``[path]`` if it is a RUM model workdir, else its subdirectories that are."""
  if is_rum_model_dir(path):
    return [path]
  if not os.path.isdir(path):
    return []
  return [os.path.join(path, d) for d in sorted(os.listdir(path))
          if is_rum_model_dir(os.path.join(path, d))]


def _params_label(model_dir: str, params_path: Optional[str], at: Optional[int]) -> str:
  """``"step N"`` for a checkpoint or ``model_dir/params.npz`` (``result.json`` knows its
  step), else the file name of the ``.npz``."""
  if at is not None:
    return f"step {at}"
  result = load_json(os.path.join(model_dir, "result.json"))
  if result and params_path == os.path.join(model_dir, "params.npz"):
    return f"step {result['steps']}"
  return os.path.basename(params_path)


def plot_rum_model(model_dir: str, out_dir: Optional[str] = None,
                   params_path: Optional[str] = None, step: Optional[int] = None,
                   title: str = "", task=None) -> list[str]:
  """``kernel_tau.png`` and ``cos_theta.png`` of a RUM model workdir; returns the paths.

  ``cos_theta.png`` draws the records of ``cos_theta.jsonl`` (``launch.reproduce`` writes
  them every --eval_every steps); without them, and given ``task``, ``cos(theta)`` is
  computed from the checkpoints kept in the workdir on the task's fixed test batch
  (:func:`rumjax.analysis.cos_from_checkpoints`).

  Args:
    model_dir: the ``train_and_evaluate`` workdir of one RUM model (with ``config.json``).
    out_dir: where to write the PNGs (default ``model_dir``).
    params_path: a ``.npz`` of the parameters (default: ``model_dir/params.npz`` if it
      exists, else the checkpoint ``step`` or the latest one).
    step: checkpoint step for the kernel (ignored with a ``.npz``).
    title: the model's name in the titles (default: the config's ``label`` or the folder).
    task: the task module of the run (``tasks.get_task(config["task"])``), needed only
      when there is no ``cos_theta.jsonl``.
  """
  out_dir = out_dir or model_dir
  config = load_config(model_dir) or {}
  label = title or config.get("label") or os.path.basename(os.path.normpath(model_dir))
  if params_path is None and step is None and os.path.exists(
      os.path.join(model_dir, "params.npz")):
    params_path = os.path.join(model_dir, "params.npz")
  at, params = analysis.load_params(params_path or model_dir, step)
  _, cell = analysis.find_rum_params(params)
  nh = np.shape(cell["kernel_h"])[0]
  when = _params_label(model_dir, params_path, at)
  paths = [save_kernel(analysis.target_kernel(cell), os.path.join(out_dir, "kernel_tau.png"),
                       title=rf"{label}: $W^\tau_{{hh}}$ ({nh}x{nh}, {when})")]
  cos_by_step = analysis.read_cos_records(model_dir)
  if not cos_by_step and config and task is not None:
    cos_by_step = analysis.cos_from_checkpoints(model_dir, task, config)
  paths.append(save_cos(cos_by_step, os.path.join(out_dir, "cos_theta.png"),
                        title=rf"{label}: $\cos\theta_t$ (mean over a fixed test batch)"))
  return paths

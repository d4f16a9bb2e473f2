"""Figure 5 of the RUM paper: the kernel ``W^tau_hh`` and the rotation angles
``cos(theta_t)`` of a trained RUM (:mod:`rumjax.analysis.angles` computes them).

:func:`plot_rum_model` draws Figure 5 for a RUM training workdir: ``kernel_tau.png``
(Figure 5a) and ``cos_theta.png`` (``cos(theta_t)`` across training, Figure 5b,c).
Matplotlib is imported only when drawing.
"""

import os
from typing import Any, Mapping, Optional

import numpy as np

from rumjax import analysis, utils
from rumjax.plotting.common import figure, load_config, require_matplotlib, save


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
  require_matplotlib()
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


def save_kernel(kernel: np.ndarray, path: str, title: str = r"$W^{\tau}_{hh}$") -> str:
  """:func:`draw_kernel` as a PNG at ``path``; returns ``path``."""
  fig, axes = figure(5.6, 4.8)
  draw_kernel(axes[0, 0], kernel, title)
  return save(fig, path)


_BLOCK_TITLES = {"W^tau_xh": r"$W^{\tau}_{xh}$", "W^u_xh": r"$W^{u}_{xh}$",
                 "W_xh": r"$W_{xh}$ ($\tilde e_t$)", "W^tau_hh": r"$W^{\tau}_{hh}$",
                 "W^u_hh": r"$W^{u}_{hh}$"}


def save_kernels(blocks: Mapping[str, Any], path: str, title: str = "") -> str:
  """Every kernel of a RUM cell (:func:`rumjax.analysis.kernel_blocks`) as heat maps on
  one PNG, each on its own symmetric colour scale (the RUM conference paper's Figures 7
  and 8); returns ``path``."""
  fig, axes = figure(5.0 * len(blocks), 4.8, ncols=len(blocks))
  for ax, (name, kernel) in zip(axes[0], blocks.items()):
    kernel = np.asarray(kernel)
    vmax = float(np.max(np.abs(kernel))) or 1.0
    image = ax.imshow(kernel, cmap="RdBu_r", vmin=-vmax, vmax=vmax, interpolation="nearest",
                      aspect="auto")
    ax.set_title(f"{_BLOCK_TITLES.get(name, name)} {kernel.shape[0]}x{kernel.shape[1]}")
    ax.set_xlabel("output component")
    ax.set_ylabel("input component")
    fig.colorbar(image, ax=ax, shrink=0.85)
  if title:
    fig.suptitle(title)
  return save(fig, path)


def plot_rum_kernels(model_dir: str, out_dir: Optional[str] = None,
                     params_path: Optional[str] = None, step: Optional[int] = None,
                     title: str = "") -> str:
  """``kernels.png``: every kernel of a RUM model workdir's cell (Figures 7 and 8 of the
  RUM conference paper), from the same parameters as :func:`plot_rum_model`."""
  label, when, cell, _ = _rum_cell_of(model_dir, params_path, step, title)
  return save_kernels(analysis.kernel_blocks(cell),
                      os.path.join(out_dir or model_dir, "kernels.png"),
                      title=f"{label}: the kernels of the RUM cell ({when})")


def save_cos(cos_by_step: Mapping[int, Any], path: str, title: str = "") -> str:
  """:func:`draw_cos_histograms` and :func:`draw_cos_map` side by side as a PNG."""
  fig, axes = figure(11.0, 4.8, ncols=2)
  draw_cos_histograms(axes[0, 0], cos_by_step)
  draw_cos_map(axes[0, 1], cos_by_step)
  if title:
    fig.suptitle(title)
  return save(fig, path)


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
  result = utils.read_json(os.path.join(model_dir, "result.json"))
  if result and params_path == os.path.join(model_dir, "params.npz"):
    return f"step {result['steps']}"
  return os.path.basename(params_path)


def _rum_cell_of(model_dir: str, params_path: Optional[str], step: Optional[int],
                 title: str):
  """``(label, "step N", RUM cell parameters, config)`` of a RUM model workdir: the
  parameters of ``params_path`` (a relative path that is not there is looked up in
  ``model_dir``: ``--params=params.npz``), else ``model_dir/params.npz`` if it exists,
  else the checkpoint ``step`` or the latest one."""
  config = load_config(model_dir) or {}
  label = title or config.get("label") or os.path.basename(os.path.normpath(model_dir))
  if (params_path and not os.path.isabs(params_path) and not os.path.exists(params_path)
      and os.path.exists(os.path.join(model_dir, params_path))):
    params_path = os.path.join(model_dir, params_path)
  if params_path is None and step is None and os.path.exists(
      os.path.join(model_dir, "params.npz")):
    params_path = os.path.join(model_dir, "params.npz")
  at, params = analysis.load_params(params_path or model_dir, step)
  _, cell = analysis.find_rum_params(params)
  return label, _params_label(model_dir, params_path, at), cell, config


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
  label, when, cell, config = _rum_cell_of(model_dir, params_path, step, title)
  nh = np.shape(cell["kernel_h"])[0]
  paths = [save_kernel(analysis.target_kernel(cell), os.path.join(out_dir, "kernel_tau.png"),
                       title=rf"{label}: $W^\tau_{{hh}}$ ({nh}x{nh}, {when})")]
  cos_by_step = analysis.read_cos_records(model_dir)
  if not cos_by_step and config and task is not None:
    cos_by_step = analysis.cos_from_checkpoints(model_dir, task, config)
  paths.append(save_cos(cos_by_step, os.path.join(out_dir, "cos_theta.png"),
                        title=rf"{label}: $\cos\theta_t$ (mean over a fixed test batch)"))
  return paths


def rum_figures(model_dir: str, label: str, task=None) -> list[str]:
  """Figure 5 of one trained model of an experiment (its ``figures``): the PNGs of
  :func:`plot_rum_model` for a RUM without layer norm, nothing for another model."""
  if not is_rum_model_dir(model_dir):
    return []
  return plot_rum_model(model_dir, title=label, task=task)

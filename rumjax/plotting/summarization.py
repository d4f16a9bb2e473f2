r"""Figure 6 of the RUM paper: the summarization study's four panels (Matplotlib).

The inputs are, per run label, ``{"curves": ..., "gradients": ...}`` as
:func:`rumjax.analysis.summarization.figure6_of_run` returns them (or the ``summ_figure6.json`` that
``launch.summ_analysis`` writes): ``curves`` = :func:`rumjax.analysis.summarization.training_curves`
(``step``, ``grad_norm``, ``state_norm``; None or NaN where missing), ``gradients`` =
:func:`rumjax.analysis.summarization.output_gradients` (``encoder`` <[S]>, ``decoder`` <[T]>). As in
:mod:`rumjax.plotting`: ``draw_*`` take a Matplotlib ``Axes``; :func:`plot_figure6` writes
the PNG through ``matplotlib.figure.Figure`` and its Agg canvas (no pyplot); Matplotlib is
imported only when drawing.
"""

import os
from typing import Any, Mapping, Optional

import numpy as np

from rumjax.plotting import common

FILENAME = "summ_figure6.png"


def _floats(values) -> np.ndarray:
  """A sequence with None/NaN holes as <float64>[n] (NaN: a gap in a Figure 6 line)."""
  return np.array([np.nan if v is None else float(v) for v in values], np.float64)


def draw_curve(ax, runs: Mapping[str, Mapping[str, Any]], key: str, ylabel: str,
               title: str):
  """One line per run of ``curves[key]`` against ``curves["step"]`` (Figure 6a,b)."""
  for label, run in runs.items():
    curves = run["curves"]
    ax.plot(np.asarray(curves["step"], np.int64), _floats(curves[key]), lw=1.2,
            label=label)
  ax.set_xlabel("training step")
  ax.set_ylabel(ylabel)
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  return ax


def draw_gradients(ax, runs: Mapping[str, Mapping[str, Any]], key: str, xlabel: str,
                   title: str):
  """One line per run of the per-step mean ``|d loss / d output|`` ``gradients[key]``
  (Figure 6c,d), against the step index from 0, on a log axis (the runs differ by orders
  of magnitude; zeros, e.g. at padded steps, are left out)."""
  positive = False
  for label, run in runs.items():
    g = _floats(run["gradients"][key])
    ax.plot(np.arange(len(g)), g, lw=1.2, label=label)
    positive |= bool(np.any(g > 0))
  if positive:
    ax.set_yscale("log", nonpositive="mask")
  ax.set_xlabel(xlabel)
  ax.set_ylabel(r"mean $|\partial\,\mathrm{loss} / \partial\,\mathrm{output}|$")
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  return ax


def plot_figure6(runs: Mapping[str, Mapping[str, Any]], out_dir: str,
                 filename: str = FILENAME, title: Optional[str] = None) -> list:
  """Figure 6 of the RUM paper, panels (a)-(d) in a 2 x 2 PNG, one line per run.

  (a) the global gradient norm over training, (b) the norm of the decoder's last hidden
  state over training, (c) the per-encoder-step and (d) per-decoder-step mean absolute
  gradient of the loss w.r.t. the bi-directional encoder outputs and the decoder outputs
  at one batch (:mod:`rumjax.analysis.summarization`).

  Args:
    runs: ``{label: {"curves": ..., "gradients": ...}}`` (module docstring).
    out_dir: the folder (created if needed).
    filename: the PNG's name.
    title: the figure title (default: names Figure 6).

  Returns:
    ``[path]`` of the PNG written.
  """
  fig, axes = common.figure(11.0, 8.0, ncols=2, nrows=2)
  draw_curve(axes[0, 0], runs, "grad_norm", "global gradient norm",
             "(a) Global norm of the gradients")
  draw_curve(axes[0, 1], runs, "state_norm", r"$\|s\|_2$ at the last decoder step",
             "(b) Norm of the last hidden state")
  draw_gradients(axes[1, 0], runs, "encoder", "encoder step",
                 "(c) Gradient wrt the bi-directional encoder output")
  draw_gradients(axes[1, 1], runs, "decoder", "decoder step",
                 "(d) Gradient wrt the decoder output")
  fig.suptitle(title or "Text summarization study (RUM paper, Figure 6)")
  return [common.save(fig, os.path.join(out_dir, filename))]

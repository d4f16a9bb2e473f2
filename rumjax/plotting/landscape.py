r"""Figure 8 of the RUM paper: loss landscapes of RUM and GORU side by side (Matplotlib).

The inputs are the result dicts of :func:`rumjax.analysis.landscape.landscape_of_run` (or the
``landscape.json`` that ``launch.landscape`` writes), keyed by model. As in
:mod:`rumjax.plotting`: ``draw_*`` take a Matplotlib ``Axes``; ``plot_*`` write PNGs
through ``matplotlib.figure.Figure`` and its Agg canvas (no pyplot); Matplotlib is imported
only when drawing.
"""

from typing import Any, Mapping

import numpy as np

from rumjax.plotting import common


def _minima(n: int) -> str:
  return f"{n} local minim{'um' if n == 1 else 'a'}"


def draw_landscape_1d(ax, result: Mapping[str, Any]):
  """The loss along ``w* + alpha d1`` (Figure 8a,c), the trained point at ``alpha = 0``."""
  alphas, line = np.asarray(result["alphas"]), np.asarray(result["line"])
  n = result["local_minima_1d"]
  ax.plot(alphas, line, lw=1.4, marker=".", ms=3, label=_minima(n))
  ax.axvline(0.0, color="k", ls=":", lw=0.8)
  ax.plot([0.0], [result["loss_at_params"]], "k*", ms=8, label="trained weights")
  ax.set_xlabel(r"$\alpha$  (loss at $w^* + \alpha\, d_1$)")
  ax.set_ylabel("cross-entropy, first training batch")
  ax.set_title(f"{result['label']}: {_minima(n)}")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  return ax


def draw_landscape_2d(ax, result: Mapping[str, Any], levels: int = 20):
  """Contours of the loss over ``w* + alpha d1 + beta d2`` (Figure 8b,d)."""
  a, b = np.asarray(result["grid_alphas"]), np.asarray(result["grid_betas"])
  z = np.asarray(result["plane"], np.float64).T          # [beta, alpha] for contour
  z = np.where(np.isfinite(z), z, np.nan)
  filled = ax.contourf(a, b, z, levels=levels, cmap="viridis")
  ax.contour(a, b, z, levels=levels, colors="k", linewidths=0.3)
  ax.plot([0.0], [0.0], "r*", ms=9)
  ax.figure.colorbar(filled, ax=ax, shrink=0.85)
  ax.set_xlabel(r"$\alpha$")
  ax.set_ylabel(r"$\beta$")
  ax.set_aspect("equal")
  ax.locator_params(nbins=5)
  ax.set_title(f"{result['label']}: {_minima(result['local_minima_2d'])} (2-D)")
  return ax


def _varied(result) -> str:
  return ", ".join(v.split(" (")[-1].rstrip(")") for v in result["varied"])


def plot_landscape_1d(results: Mapping[str, Mapping[str, Any]], path: str,
                      title: str = "") -> str:
  """One panel per model (RUM and GORU side by side) of :func:`draw_landscape_1d`;
  returns ``path``."""
  fig, axes = common.figure(5.6 * len(results), 4.4, ncols=len(results))
  for ax, result in zip(axes[0], results.values()):
    draw_landscape_1d(ax, result)
    ax.set_xlabel(ax.get_xlabel() + f"\nvaried: {_varied(result)}")
  fig.suptitle(title or "Loss along a filter-normalised random direction of the rotation "
               "weights (Figure 8a,c)")
  return common.save(fig, path)


def plot_landscape_2d(results: Mapping[str, Mapping[str, Any]], path: str,
                      title: str = "") -> str:
  """One contour panel per model (RUM and GORU side by side) of
  :func:`draw_landscape_2d`; returns ``path``."""
  fig, axes = common.figure(5.6 * len(results), 4.8, ncols=len(results))
  for ax, result in zip(axes[0], results.values()):
    draw_landscape_2d(ax, result)
    ax.set_xlabel(ax.get_xlabel() + f"\nvaried: {_varied(result)}")
  fig.suptitle(title or "Loss over a plane of two filter-normalised random directions of "
               "the rotation weights (Figure 8b,d)")
  return common.save(fig, path)

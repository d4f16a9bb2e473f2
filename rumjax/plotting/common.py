r"""What every figure uses, and the RUM paper's synthetic-task figures (Figure 4).

The ``draw_*`` functions take a Matplotlib ``Axes`` (a notebook can draw inline); the
``save_*`` functions write PNGs through ``matplotlib.figure.Figure`` and its Agg canvas (no
pyplot, no display). :func:`plot_rum_model` draws Figure 5 for a RUM training workdir:
``kernel_tau.png`` (the target-memory kernel ``W^tau_hh``, Figure 5a) and
``cos_theta.png`` (``cos(theta_t)`` across training, Figure 5b,c).

Matplotlib is the optional ``plot`` extra (``pip install 'rumjax[plot]'``): it is imported
inside the functions that draw, so ``import rumjax.plotting`` works without it.
"""

import os
import re
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from rumjax import utils


# ------------------------------------------------------------------------- drawing


def require_matplotlib():
  """The ``matplotlib`` package, or an ImportError that says how to install it."""
  try:
    import matplotlib
  except ImportError as err:
    raise ImportError("rumjax.plotting needs matplotlib: pip install 'rumjax[plot]' (or "
                      "pip install matplotlib).") from err
  return matplotlib


def figure(width=6.4, height=4.8, ncols=1, nrows=1):
  """A Matplotlib ``Figure`` on the Agg canvas (no pyplot) and its <Axes>[nrows, ncols]."""
  require_matplotlib()
  from matplotlib.figure import Figure
  fig = Figure(figsize=(width, height), layout="constrained")
  axes = fig.subplots(nrows, ncols, squeeze=False)
  return fig, axes


def save(fig, path: str) -> str:
  """Writes ``fig`` as a PNG at ``path`` (creating its folder); returns ``path``."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=110)
  return path


_SEED_LABEL = re.compile(r"^(.*) s(\d+)$")   # "<model> s<seed>": one seed of a model
_SEED_STYLES = ("-", "--", ":", "-.")


def line_styles(labels: Sequence[str]) -> dict:
  """``{label: (colour, line style)}``: one colour per model, one line style per seed of
  it (labels ``"<model> s<seed>"``, :func:`rumjax.experiments.metric_curves`); a label
  without a seed is a model of its own."""
  colours, seen, out = {}, {}, {}
  for label in labels:
    match = _SEED_LABEL.match(label)
    model = match.group(1) if match else label
    colours.setdefault(model, f"C{len(colours) % 10}")
    k = seen[model] = seen.get(model, -1) + 1
    out[label] = (colours[model], _SEED_STYLES[k % len(_SEED_STYLES)])
  return out


def draw_curves(ax, curves: Mapping[str, tuple], *, baseline: Optional[float] = None,
                ylabel: str = "cross-entropy", title: str = "", logy: bool = False):
  """Lines ``{label: (steps, values)}`` (the seeds of one model in its colour, one line
  style each: :func:`line_styles`), with an optional dashed baseline."""
  styles = line_styles(list(curves))
  for label, (steps, values) in curves.items():
    if len(steps):
      colour, style = styles[label]
      ax.plot(steps, values, label=label, lw=1.2, color=colour, ls=style,
              marker="." if len(steps) < 3 else None)
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


def save_copying(curves: Mapping[str, Mapping[str, tuple]], baseline: float, path: str,
                 title: str = "") -> str:
  """Figure 4: training cross-entropy per model with the memoryless baseline, and the
  test accuracy on the copied symbols at each evaluation.

  Args:
    curves: ``{label: {"train_loss": (steps, values), "test_accuracy": (steps, values)}}``.
  """
  fig, axes = figure(12.0, 4.6, ncols=2)
  draw_curves(axes[0, 0], {k: v["train_loss"] for k, v in curves.items()},
              baseline=baseline, title=title or "copying: cross-entropy", logy=True)
  draw_curves(axes[0, 1], {k: (v["test_accuracy"][0], 100 * v["test_accuracy"][1])
                           for k, v in curves.items()},
              ylabel="test accuracy on the copied symbols (%)",
              title="copied-symbol accuracy (chance 12.5%)")
  return save(fig, path)


def save_recall(labels, ours, paper, loss_curves, path: str, title: str = "",
                accuracy_curves: Optional[Mapping[str, tuple]] = None,
                accuracy_title: str = "dev accuracy during training") -> str:
  """Table 1 as bars (ours vs the paper), the training losses and, if given, the accuracy
  measured during training (``{label: (steps, accuracy in [0, 1])}``, titled
  ``accuracy_title``)."""
  ncols = 3 if accuracy_curves else 2
  fig, axes = figure(6.0 * ncols, 4.6, ncols=ncols)
  draw_accuracy_bars(axes[0, 0], labels, ours, paper, chance=10.0,
                     title=title or "associative recall: test accuracy")
  draw_curves(axes[0, 1], loss_curves, ylabel="training cross-entropy",
              title="training loss")
  if accuracy_curves:
    draw_curves(axes[0, 2], {k: (s, 100 * np.asarray(v))
                             for k, (s, v) in accuracy_curves.items()},
                ylabel="accuracy (%)", title=accuracy_title)
  return save(fig, path)


# ------------------------------------------------------------------ RUM workdirs


def save_orthogonality_drift(result: Mapping[str, Any], path: str) -> str:
  """``max|R_t^T R_t - 1|`` against ``T`` (log-log), one line per precision variant.

  ``result`` as returned by :func:`rumjax.benchmarks.orthogonality.run_drift`
  (``ts``, ``errors``, ``labels``, ``settings``). Issue 26's picture.
  """
  fig, axes = figure(6.4, 4.2)
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
  return save(fig, path)


def load_config(model_dir: str) -> Optional[dict]:
  """A workdir's ``config.json`` (written by ``launch.reproduce``), or ``None``."""
  return utils.read_json(os.path.join(model_dir, "config.json"))


def save_lam_sweep(fixed: Sequence[tuple], learned: Sequence[tuple],
                   trajectories: Mapping[str, tuple], ylabel: str, path: str,
                   title: str = "", baseline: Optional[float] = None) -> str:
  """RUM with a real ``lam`` (RUM paper, section 6): the final metric against a fixed
  ``lam`` (``(lam, mean, std)`` points joined by a line, std as error bars), the runs with a
  learned ``lam`` as stars at their final ``lam`` (``(lam, mean, std)``), an optional
  dashed baseline (the memoryless cross-entropy) and, beside it, the learned ``lam`` during
  training (``{label: (steps, lam)}``)."""
  fig, axes = figure(12.0, 4.6, ncols=2)
  ax = axes[0, 0]
  if fixed:
    ax.errorbar([p[0] for p in fixed], [p[1] for p in fixed], yerr=[p[2] for p in fixed],
                fmt="o-", capsize=3, label="λ fixed")
  for lam, mean, std in learned:
    ax.errorbar([lam], [mean], yerr=[std], fmt="*", ms=14, capsize=3,
                label=f"λ learned (ends at {lam:.3f})")
  if baseline is not None:
    ax.axhline(baseline, color="k", ls="--", lw=1.0, label=f"memoryless {baseline:.4f}")
  ax.set_xlabel("λ")
  ax.set_ylabel(ylabel)
  ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  if any(len(steps) for steps, _ in trajectories.values()):
    draw_curves(axes[0, 1], trajectories, ylabel="learned λ",
                title="learned λ during training")
  else:
    axes[0, 1].set_axis_off()
  return save(fig, path)


def save_steps_and_time(by_step: Mapping[str, tuple], by_time: Mapping[str, tuple],
                        ylabel: str, path: str, title: str = "") -> str:
  """One metric against training steps (left) and against training time in minutes
  (right): ``{label: (steps | seconds, values)}`` each; a PNG at ``path``."""
  fig, axes = figure(12.0, 4.6, ncols=2)
  draw_curves(axes[0, 0], by_step, ylabel=ylabel, title=title)
  minutes = {k: (np.asarray(t) / 60.0, v) for k, (t, v) in by_time.items()}
  draw_curves(axes[0, 1], minutes, ylabel=ylabel, title=f"{title} (against time)")
  axes[0, 1].set_xlabel("training time (minutes; evaluation left out)")
  return save(fig, path)

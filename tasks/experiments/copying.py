"""Copying memory in the RUM paper (Dangovski et al., TACL 2019, sec. 4.1, Figure 4): the
models and what the paper reports about them, for ``launch.reproduce``.

Every model starts from the variant's config (``tasks.configs.copying.get_config("T200")``:
batch 128, RMSProp decay 0.9, lr 1e-3, 10k steps) and changes the fields below.
"""

from rumjax import experiments, plotting
from rumjax.analysis import angles
from tasks import copying as copying_task

_RUM = {"model.cell": "rum", "model.lam": 1, "model.eta": None, "model.hidden_size": 100}

# key -> (label, dotted-field overrides of the variant's config), in Figure 4's legend order
# (uRNN, named in the text, after GRU).
MODELS = {
    "rum_lam1": ("RUM 100 λ=1 η=N/A", _RUM),
    "rum_lam1_eta1": ("RUM 100 λ=1 η=1.0", {**_RUM, "model.eta": 1.0}),
    "rum_lam0": ("RUM 250 λ=0 η=N/A", {**_RUM, "model.lam": 0, "model.hidden_size": 250}),
    "lstm": ("LSTM 250", {"model.cell": "lstm", "model.hidden_size": 250}),
    "gru": ("GRU 250", {"model.cell": "gru", "model.hidden_size": 250}),
    # uRNN: in section 4.1's list of models ("LSTM, GRU, uRNN (Wisdom et al., 2016), EURNN,
    # GORU, and RUM"); the full-capacity uRNN (rumjax.cells.urnn, Cayley steps on W).
    "urnn": ("uRNN 250", {"model.cell": "urnn", "model.hidden_size": 250}),
    "eurnn": ("EURNN 250 (lr 1e-4)", {"model.cell": "eurnn", "model.hidden_size": 250,
                                      "learning_rate": 1e-4}),
    "goru": ("GORU 250", {"model.cell": "goru", "model.hidden_size": 250}),
}

# Figure 4 (T = 500 only; no numbers: the text of section 4.1).
FIGURE4 = {
    "rum_lam1": "converges to 100% accuracy (loss -> 0); faster than eta=1.0",
    "rum_lam1_eta1": "converges to 100% accuracy, slower than eta=N/A",
    "rum_lam0": "learns, much slower than lam=1",
    "lstm": "stays at the memoryless baseline",
    "gru": "stays at the memoryless baseline",
    "urnn": "solves the task in a few steps ('EURNN and uRNN also solve the problem in "
            "just a few steps')",
    "eurnn": "solves the task in a few steps (lr 1e-4; unstable at larger lr)",
    "goru": "converges slightly faster than RUM",
}
DELAYS = (200, 500, 1000)

# --tiny: checks the plumbing in seconds, not the paper.
TINY = {"model.hidden_size": 8, "batch_size": 8, "delay": 10, "num_train": 64,
        "num_test": 16}


def over_baseline(record: dict):
  """The test cross-entropy over the memoryless baseline (< 1: better than memoryless)."""
  metrics = record.get("metrics", {})
  if "test_loss" not in metrics or not metrics.get("test_memoryless_baseline"):
    return None
  return metrics["test_loss"] / metrics["test_memoryless_baseline"]


def baseline(summary: dict) -> float:
  """The memoryless cross-entropy at the experiment's delay (from a model's config)."""
  record = next(iter(summary["models"].values()))
  return copying_task.memoryless_baseline(record["config"]["delay"])


COLUMNS = (
    experiments.Column("test CE", experiments.metric("test_loss"), ".4f"),
    experiments.Column("CE / baseline", over_baseline, ".3f"),
    experiments.Column("copied acc. (%)", experiments.metric("test_accuracy", 100.0)),
    experiments.Column("paper (Fig. 4, T=500)", experiments.paper("note")),
)


def notes(summary: dict) -> list[str]:
  return [f"Memoryless baseline: {baseline(summary):.4f}."]


def plot(summary: dict, exp_dir: str) -> str:
  """Figure 4: training cross-entropy with the memoryless baseline, and the copied-symbol
  accuracy at each evaluation, in ``<exp_dir>/<experiment>.png``."""
  curves = experiments.metric_curves(exp_dir, summary, ("train_loss", "test_accuracy"))
  return plotting.save_copying(
      curves, baseline(summary), f"{exp_dir}/{summary['experiment']}.png",
      title=f"copying {summary['variant']}: training cross-entropy")


def experiment(delay: int) -> experiments.Experiment:
  """``copying_T<delay>``: the models of Figure 4 at delay ``T``."""
  return experiments.Experiment(
      name=f"copying_T{delay}", task=copying_task.TASK, variant=f"T{delay}", models=MODELS,
      tiny=TINY, paper={k: {"note": v} for k, v in FIGURE4.items()},
      paper_source="Figure 4 (T=500 only) and section 4.1", columns=COLUMNS, notes=notes,
      plot=plot,
      hooks=angles.recorder_hooks, figures=plotting.rum_figures)


EXPERIMENTS = {f"copying_T{t}": experiment(t) for t in DELAYS}

"""Associative recall in the RUM paper (Dangovski et al., TACL 2019, sec. 4.1, Table 1):
the models, their published test accuracy and parameter count, for ``launch.reproduce``.

Every model starts from the variant's config (``tasks.configs.recall.get_config("T30")``:
hidden 50, batch 128, RMSProp lr 1e-3, 100k steps) and changes the fields below.
"""

from rumjax import experiments, plotting
from rumjax.analysis import angles
from tasks import recall as recall_task

_RUM = {"model.cell": "rum", "model.lam": 1, "model.eta": None, "model.hidden_size": 50}

# key -> (label, dotted-field overrides of the variant's config), in Table 1's order.
MODELS = {
    "rum_lam1": ("RUM λ=1 η=N/A", _RUM),
    "rum_lam1_eta1": ("RUM λ=1 η=1.0", {**_RUM, "model.eta": 1.0}),
    "rum_lam0": ("RUM λ=0 η=N/A", {**_RUM, "model.lam": 0}),
    "lstm": ("LSTM", {"model.cell": "lstm", "model.hidden_size": 50}),
    "gru": ("GRU", {"model.cell": "gru", "model.hidden_size": 50}),
    "goru": ("GORU", {"model.cell": "goru", "model.hidden_size": 50}),
    "eurnn": ("EURNN", {"model.cell": "eurnn", "model.hidden_size": 50}),
    "fwln": ("FW-LN", {"model.cell": "fwln", "model.hidden_size": 50}),
}

# Table 1: test accuracy (%) at T = 30 and T = 50, and the parameter count.
TABLE1 = {
    "gru": (21.5, 17.6, "14k"),
    "goru": (21.8, 18.9, "13k"),
    "eurnn": (24.5, 18.5, "4k"),
    "lstm": (25.6, 20.5, "17k"),
    "fwln": (100.0, 20.8, "9k"),
    "rum_lam0": (25.0, 18.5, "13k"),
    "rum_lam1_eta1": (100.0, 83.7, "13k"),
    "rum_lam1": (100.0, 100.0, "13k"),
}
LENGTHS = (30, 50)

# --tiny: checks the plumbing in seconds, not the paper.
TINY = {"model.hidden_size": 8, "batch_size": 8, "length": 6, "num_train": 64,
        "num_dev": 16, "num_test": 16}

COLUMNS = (
    experiments.Column("params (paper)", experiments.paper("params")),
    experiments.Column("test acc. (%)", experiments.metric("test_accuracy", 100.0)),
    experiments.Column("paper acc. (%)", experiments.paper("test_accuracy_pct")),
)


def plot(summary: dict, exp_dir: str) -> str:
  """Table 1 as bars (ours vs the paper), the training losses and the dev accuracy
  measured during training, in ``<exp_dir>/<experiment>.png``."""
  curves = experiments.metric_curves(exp_dir, summary, ("train_loss", "eval_accuracy"))
  models = summary["models"].values()
  return plotting.save_recall(
      [f"{r['label']}\n({r['num_params']} params)" for r in models],
      [experiments.metric("test_accuracy", 100.0)(r) for r in models],
      [experiments.paper("test_accuracy_pct")(r) for r in models],
      {k: v["train_loss"] for k, v in curves.items()},
      f"{exp_dir}/{summary['experiment']}.png",
      title=f"associative recall {summary['variant']}: ours vs Table 1",
      accuracy_curves={k: v["eval_accuracy"] for k, v in curves.items()})


def experiment(length: int) -> experiments.Experiment:
  """``recall_T<length>``: the models of Table 1 at ``T = length``."""
  column = LENGTHS.index(length)
  return experiments.Experiment(
      name=f"recall_T{length}", task=recall_task.TASK, variant=f"T{length}", models=MODELS,
      tiny=TINY, paper={k: {"test_accuracy_pct": v[column], "params": v[2]}
                        for k, v in TABLE1.items()},
      paper_source="Table 1", columns=COLUMNS, plot=plot,
      hooks=angles.recorder_hooks, figures=plotting.rum_figures)


EXPERIMENTS = {f"recall_T{t}": experiment(t) for t in LENGTHS}

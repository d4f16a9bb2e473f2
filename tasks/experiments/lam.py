"""The real power ``lam`` of RUM's memory (RUM paper, section 6 and footnote 9): a sweep.

Eq. (2), ``R_t = (R_{t-1})^lam Rotation(e_t, tau_t)``, with ``lam`` in {0, 0.25, 0.5, 0.75, 1}
fixed and ``lam`` learned from 0.5 (``model.learn_lam``), everything else equal: same
config, steps, seed and data. The paper has no numbers for a real ``lam`` (its conclusion
names it as future work), so there is no paper column.

    python -m launch.reproduce --experiment=lam_recall_T30 --workdir=/tmp/lam --steps=1500 \
        --set=batch_size=32 --set=num_test=4000

``lam_recall_T30`` is associative recall at T = 30 (hidden 50, the paper's Table 1 set-up);
``lam_copying`` is the copying task's small CPU setting (delay 10, batch 32) at hidden 50.
A real ``lam`` costs an ``eigh`` of an ``Nh x Nh`` matrix per example and step (see
``launch.benchmark``), which is what bounds the steps and sizes on a CPU.
"""

from rumjax import experiments, plotting
from tasks import copying as copying_task
from tasks import recall as recall_task
from tasks.experiments import copying as copying_experiments

LAMS = (0, 0.25, 0.5, 0.75, 1)
LEARN_FROM = 0.5


def _key(lam) -> str:
  return "rum_lam" + f"{lam:g}".replace(".", "")


def models(hidden: int) -> dict:
  """``{key: (label, overrides)}``: RUM at every fixed ``lam`` of :data:`LAMS`, then learned."""
  rum = {"model.cell": "rum", "model.eta": None, "model.hidden_size": hidden}
  out = {_key(lam): (f"RUM λ={lam:g}", {**rum, "model.lam": lam}) for lam in LAMS}
  out["rum_learn_lam"] = (f"RUM λ learned from {LEARN_FROM:g}",
                          {**rum, "model.lam": LEARN_FROM, "model.learn_lam": True})
  return out


def fixed_lam(record: dict):
  """The fixed ``lam`` of a record (None for the learned one)."""
  model = record.get("config", {}).get("model", {})
  return None if model.get("learn_lam") else model.get("lam")


def final_lam(record: dict):
  """The learned ``lam`` at the end of training (the last ``params/...lam`` record)."""
  values = [v for k, v in record.get("metrics", {}).items() if k.endswith("/lam")]
  return values[0] if len(values) == 1 else None


TINY_RECALL = {"model.hidden_size": 8, "batch_size": 8, "length": 6, "num_train": 64,
               "num_dev": 16, "num_test": 16}
TINY_COPYING = {"model.hidden_size": 8, "batch_size": 8, "delay": 4, "num_train": 64,
                "num_test": 16}


def _spread(name: str, scale: float = 1.0):
  """The sample standard deviation over seeds of the final metric ``name`` (0 for one run)."""
  def value(record):
    return scale * ((record.get("metrics_std") or {}).get(name) or 0.0)
  return value


def _plot(metric: str, label: str, scale: float = 1.0, baseline=None):
  def plot(summary: dict, exp_dir: str) -> str:
    """The final ``metric`` against ``lam`` (fixed: a line, mean ± std over seeds; learned:
    a star at its final ``lam``), and the learned ``lam`` at each evaluation (one curve per
    seed), in ``<exp_dir>/<experiment>.png``."""
    records = list(summary["models"].values())
    value, spread = experiments.metric(metric, scale), _spread(metric, scale)
    fixed = sorted((fixed_lam(r), value(r), spread(r)) for r in records
                   if fixed_lam(r) is not None and value(r) is not None)
    learned = [(final_lam(r), value(r), spread(r)) for r in records
               if fixed_lam(r) is None and final_lam(r) is not None]
    name = "params/rnn/cell/lam"
    curves = experiments.metric_curves(exp_dir, summary, (name,))
    trajectories = {k: v[name] for k, v in curves.items() if len(v[name][0])}
    return plotting.save_lam_sweep(
        fixed, learned, trajectories, label, f"{exp_dir}/{summary['experiment']}.png",
        title=f"RUM with a real λ: {summary['experiment']}",
        baseline=None if baseline is None else baseline(summary))
  return plot


EXPERIMENTS = {
    "lam_recall_T30": experiments.Experiment(
        name="lam_recall_T30", task=recall_task.TASK, variant="T30", models=models(50),
        tiny=TINY_RECALL, paper_source="none (section 6: future work)",
        columns=(experiments.Column("test acc. (%)",
                                    experiments.metric("test_accuracy", 100.0)),
                 experiments.Column("final λ", final_lam, ".3f")),
        plot=_plot("test_accuracy", "test accuracy (%)", 100.0)),
    "lam_copying": experiments.Experiment(
        name="lam_copying", task=copying_task.TASK, variant=None, models=models(50),
        tiny=TINY_COPYING, paper_source="none (section 6: future work)",
        columns=(experiments.Column("test CE", experiments.metric("test_loss"), ".4f"),
                 experiments.Column("copied acc. (%)",
                                    experiments.metric("test_accuracy", 100.0)),
                 experiments.Column("final λ", final_lam, ".3f")),
        plot=_plot("test_loss", "test cross-entropy", baseline=copying_experiments.baseline)),
}

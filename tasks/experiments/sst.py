"""SST in the LSTMN paper (Cheng et al., EMNLP 2016, §5.2, Table 2): LSTM vs LSTMN, test
accuracy at the best dev checkpoint, for ``launch.reproduce``::

    python -m launch.reproduce --experiment=sst_binary,sst_fine --workdir=/tmp/sst_seeds \\
        --seeds=0,1,2 --budget_minutes=20 --eval_batches_during=0

Every model starts from the variant's config (``tasks.configs.sst.get_config("binary")``:
hidden/memory 168, embedding 300 from scratch unless ``word_vectors``, Adam 2e-3, L2 1e-4,
batch 5, dropout 0.5, 10 epochs, dev every epoch) and keeps the best dev checkpoint
(early stopping on ``eval_accuracy`` with a patience beyond the 10 evaluations, so it never
stops a run); the runner then evaluates test on that checkpoint (``at_best_metrics``).
``--eval_batches_during=0`` selects on the whole dev set (launch.reproduce's default of 8
batches would choose the best checkpoint on 400 of its sentences).
"""

from rumjax import experiments
from tasks import sst as sst_task

# The best dev checkpoint is kept and tested; patience > 10 evaluations: no early stop.
_BEST_DEV = {"early_stopping_metric": "eval_accuracy", "early_stopping_patience": 1000}

# key -> (label, dotted-field overrides of the variant's config).
MODELS = {
    "lstm": ("LSTM 168", {"model.name": "lstm", **_BEST_DEV}),
    "lstmn": ("LSTMN 168, 1 layer", {"model.name": "lstmn", **_BEST_DEV}),
}

# Table 2: test accuracy (%) per variant.
TABLE2 = {"binary": {"lstm": 84.9, "lstmn": 86.3}, "fine": {"lstm": 46.4, "lstmn": 47.6}}

# --tiny: checks the plumbing in seconds, not the paper.
TINY = {"model.hidden_size": 8, "model.embed_dim": 8, "batch_size": 4,
        "eval_batch_size": 16}

COLUMNS = (
    experiments.Column("best dev acc. (%)", experiments.at_best("eval_accuracy", 100.0)),
    experiments.Column("test at best dev (%)", experiments.at_best("test_accuracy", 100.0)),
    experiments.Column("final test (%)", experiments.metric("test_accuracy", 100.0)),
    experiments.Column("paper test (%)", experiments.paper("test_accuracy_pct")),
)


def notes(summary: dict) -> list[str]:
  del summary
  return ["Test at best dev: the test set on the checkpoint of the best dev accuracy "
          "(early stopping's `best`); final test: on the last step's parameters."]


def experiment(variant: str) -> experiments.Experiment:
  """``sst_<variant>``: LSTM and LSTMN on the ``binary`` or ``fine`` variant."""
  return experiments.Experiment(
      name=f"sst_{variant}", task=sst_task.TASK, variant=variant, models=MODELS, tiny=TINY,
      paper={k: {"test_accuracy_pct": v} for k, v in TABLE2[variant].items()},
      paper_source="LSTMN paper, Table 2", columns=COLUMNS, notes=notes)


EXPERIMENTS = {f"sst_{v}": experiment(v) for v in ("binary", "fine")}

"""The StarSaber paper's CLUE experiments as data (ICLR 2021 submission, §4, Tables 1, 3, 5-7):
model sizes (dotted-field overrides of ``tasks.configs.clue.get_config``) and the published
dev/test accuracies, for RESULTS.md and for runs at the paper's sizes::

    python -m launch.train --task=afqmc --variant=mlm --workdir=/tmp/pre \\
        --config.model.name=starsaber --config.model.num_layers=12 \\
        --config.model.hidden_size=512 --config.model.embed_dim=512      # StarSaber-1

"Word2Vec" group: frozen pre-trained embeddings, no pretraining, hidden = input = 300.
"Pretrained" group: MLM pretraining on the task's own inputs, hidden = input = 512.
Both: Transformer and ReZero with 8 heads and an FFN of 4 x hidden; at hidden 300 (not a
multiple of 8) we use 6 heads of 50 (the paper does not say how it split 300 over 8 heads).

For ``launch.reproduce``, ``clue_tnews`` and ``clue_afqmc`` compare StarSaber, the
Transformer, ReZero (each pretrained, then fine-tuned from it) and a BiLSTM (from scratch)
at the CPU size of ``tasks.configs.clue`` (4 layers, hidden = embedding = 256, characters,
batch 32), every model at the same steps of each phase::

    python -m launch.reproduce --experiment=clue_tnews --workdir=/tmp/clue \
        --pretrain_steps=4000 --steps=6000 --eval_every=500 --eval_batches_during=0

``clue_tnews_ablations``: the three variants of Tables 5-7 (StarSaber-gate, with PE,
without direct paths) in the same set-up, to compare with ``clue_tnews``'s ``starsaber``.

Pretraining (masked LM on the task's inputs): Adam 1e-3 with a linear warm-up over the first
:data:`PRETRAIN_WARMUP` steps for every pretrained family (:data:`PRETRAIN`; the paper's
1e-4 left the Transformer at 0.2% masked accuracy after 600 steps, RESULTS.md), its dev
masked accuracy on :data:`PRETRAIN_EVAL_BATCHES` batches of dev. Fine-tuning:
the task's config (Adam 1e-4, hinge loss; the BiLSTM 1e-3), the best dev checkpoint kept
(early stopping on dev accuracy, AFQMC on dev loss, patience :data:`PATIENCE` evaluations).
"""

import dataclasses

from rumjax import experiments
from tasks import clue as clue_task

_W2V = {"model.hidden_size": 300, "model.embed_dim": 300, "model.freeze_embeddings": True}
_PRE = {"model.hidden_size": 512, "model.embed_dim": 512}

# Table 1: (group, model) -> overrides; CMNLI doubles the pretrained depths.
TABLE1 = {
    ("word2vec", "bilstm"): {**_W2V, "model.name": "bilstm", "model.num_layers": 1},
    ("word2vec", "rezero"): {**_W2V, "model.name": "rezero", "model.num_layers": 4,
                             "model.num_heads": 6},
    ("word2vec", "transformer"): {**_W2V, "model.name": "transformer", "model.num_layers": 4,
                                  "model.num_heads": 6},
    ("word2vec", "starsaber"): {**_W2V, "model.name": "starsaber", "model.num_layers": 4},
    ("pretrained", "rezero"): {**_PRE, "model.name": "rezero", "model.num_layers": 6},
    ("pretrained", "transformer"): {**_PRE, "model.name": "transformer",
                                    "model.num_layers": 6},
    ("pretrained", "starsaber1"): {**_PRE, "model.name": "starsaber", "model.num_layers": 12},
    ("pretrained", "starsaber2"): {**_PRE, "model.name": "starsaber", "model.num_layers": 6},
}

# Table 1: parameter counts (millions, with the embedding matrices) per task.
PARAMS = {
    ("word2vec", "bilstm"): (1.45, 1.45, 1.45),
    ("word2vec", "rezero"): (3.97, 3.97, 3.97),
    ("word2vec", "transformer"): (3.97, 3.98, 4.35),
    ("word2vec", "starsaber"): (2.89, 2.89, 2.89),
    ("pretrained", "rezero"): (18.19, 19.81, 36.37),
    ("pretrained", "transformer"): (18.20, 19.82, 36.75),
    ("pretrained", "starsaber1"): (13.47, 15.09, 27.30),
    ("pretrained", "starsaber2"): (7.17, 8.79, 14.69),
}
TASKS = ("afqmc", "tnews", "cmnli")

# Table 3: accuracy (%) (dev, test) per task.
TABLE3 = {
    ("word2vec", "bilstm"): ((69.00, 69.90), (51.01, 51.17), (58.55, 67.30)),
    ("word2vec", "rezero"): ((69.05, 69.90), (49.20, 50.03), (58.82, 67.30)),
    ("word2vec", "transformer"): ((69.00, 69.90), (50.23, 50.70), (57.75, 67.30)),
    ("word2vec", "starsaber"): ((69.05, 69.96), (51.22, 50.85), (57.69, 67.30)),
    ("pretrained", "rezero"): ((69.97, 70.27), (52.59, 52.69), (69.44, 69.43)),
    ("pretrained", "transformer"): ((70.32, 70.24), (50.78, 51.64), (71.14, 67.30)),
    ("pretrained", "starsaber1"): ((70.85, 70.68), (53.25, 53.41), (69.67, 69.43)),
    ("pretrained", "starsaber2"): ((70.18, 70.22), (52.28, 52.55), (69.44, 69.43)),
}

# Tables 5-7 (ablations at StarSaber-2's layers/sizes, pretrained): (params M, test, dev)
# per task.
ABLATIONS = {
    "starsaber_gate": ((13.47, 70.27, 70.62), (15.09, 53.56, 53.04), (27.29, 69.43, 69.95)),
    "starsaber_pe": ((11.89, 70.06, 70.06), (13.51, 52.05, 52.13), (24.14, 67.30, 66.67)),
    "starsaber_nodirect": ((10.32, 69.75, 70.16), (11.94, 52.76, 52.31),
                           (20.99, 67.30, 69.00)),
}

# Majority-class rate of the dev splits we have (AFQMC: 2,978 of 4,316 are label 0; TNEWS:
# its largest class, index 8 = code 109 "news_tech", 1,089 of 10,000).
MAJORITY_DEV = {"afqmc": 2978 / 4316, "tnews": 1089 / 10000}


# ------------------------------------------------------------ launch.reproduce experiments

# Fine-tuning keeps the best dev checkpoint; a patience of 10 evaluations lets plateaus
# (AFQMC sits at the majority class for a while) pass.
PATIENCE = 10
PRETRAIN_WARMUP = 500
# The pretraining's dev masked accuracy is a diagnostic, not a selection (its corpus holds
# the dev inputs), so it is measured on the first batches of dev: 20 x 128 titles, about
# 17k masked characters on TNEWS (a standard error near 0.2 points), in seconds instead of
# the ~3 minutes of the whole dev split per evaluation.
PRETRAIN_EVAL_BATCHES = 20
# Pretraining per family: the same rate and warm-up for every pretrained model.
PRETRAIN = {k: {"learning_rate": 1e-3, "warmup_steps": PRETRAIN_WARMUP,
                "evals.eval.batches": PRETRAIN_EVAL_BATCHES}
            for k in ("starsaber", "transformer", "rezero")}

MODELS = {
    "starsaber": ("StarSaber 4x256", {"model.name": "starsaber"}),
    "transformer": ("Transformer 4x256", {"model.name": "transformer"}),
    "rezero": ("ReZero 4x256", {"model.name": "rezero"}),
    "bilstm": ("BiLSTM 256 (no pretraining)", {"model.name": "bilstm",
                                               "model.num_layers": 1, "learning_rate": 1e-3}),
}
# The paper's dev accuracy (Table 3) beside ours: StarSaber-2 and the pretrained
# Transformer / ReZero (6 or 12 layers of 512), the Word2Vec BiLSTM.
_PAPER_KEYS = {"starsaber": ("pretrained", "starsaber2"),
               "transformer": ("pretrained", "transformer"),
               "rezero": ("pretrained", "rezero"), "bilstm": ("word2vec", "bilstm")}

TINY = {"model.num_layers": 1, "model.hidden_size": 8, "model.embed_dim": 8,
        "model.num_heads": 2, "batch_size": 4, "eval_batch_size": 4}


def pretrain_steps(record: dict):
  return (record.get("pretrain") or {}).get("steps")


_PRETRAIN_COLUMNS = (
    experiments.Column("pretrain steps", pretrain_steps, ".0f"),
    experiments.Column("masked acc. (%)", experiments.metric("eval_masked_accuracy", 100.0,
                                                             phase="pretrain")))
_PAPER_COLUMN = experiments.Column("paper dev (%)", experiments.paper("dev_accuracy"), ".2f")
COLUMNS = {
    "tnews": (*_PRETRAIN_COLUMNS,
              experiments.Column("best dev acc. (%)", experiments.at_best("eval_accuracy", 100.0)),
              _PAPER_COLUMN),
    "afqmc": (*_PRETRAIN_COLUMNS,
              experiments.Column("dev acc. (%)", experiments.at_best("eval_accuracy", 100.0)),
              experiments.Column("dev F1 (%)", experiments.at_best("eval_f1", 100.0)),
              experiments.Column("recall of class 0 (%)",
                                 experiments.at_best("eval_recall_0", 100.0)),
              _PAPER_COLUMN),
}


def _balanced_accuracy(record: dict):
  """``(recall of class 1 + recall of class 0) / 2`` (%) at the best checkpoint."""
  recall, recall_0 = (experiments.at_best(name, 100.0)(record)
                      for name in ("eval_recall", "eval_recall_0"))
  return None if recall is None or recall_0 is None else (recall + recall_0) / 2


COLUMNS["afqmc_balanced"] = (
    *COLUMNS["afqmc"][:-1],
    experiments.Column("balanced acc. (%)", _balanced_accuracy), COLUMNS["afqmc"][-1])


def notes(task: str, balanced: bool = False):
  """The table's notes for ``task``; ``balanced``: fine-tuned with the class-balanced loss."""
  def lines(summary: dict) -> list[str]:
    out = ["Dev metrics at the best dev checkpoint (early stopping's `best`; CLUE's test "
           "labels are private). Masked acc.: the pretraining run's final masked-token "
           f"accuracy on the first {PRETRAIN_EVAL_BATCHES} batches of dev."]
    configs = [r["config"] for r in summary["models"].values() if r.get("config")]
    if configs:
      floor = clue_task.context_free_floor(clue_task.data(configs[0]), "dev")
      out.append(f"The context-free floor of the masked positions on dev: "
                 f"{100 * floor['accuracy']:.1f}% (always the most frequent character), "
                 f"{floor['cross_entropy']:.2f} nats (its unigram): a masked accuracy near "
                 "it means a model learnt no context.")
    if balanced:
      out.append("Not the paper's set-up: the fine-tuning loss weights each row by "
                 "N / (2 N_y) of the train split (`class_weights=\"balanced\"`, "
                 "early stopping on that weighted dev loss), so predicting the majority "
                 "class alone no longer minimises it; balanced acc. is the mean of the "
                 "two classes' recalls (50% for any constant prediction). The paper's "
                 "column is its unweighted accuracy.")
    if task == "afqmc":
      out.append(f"The majority class (label 0) is {100 * MAJORITY_DEV['afqmc']:.1f}% of "
                 "dev: accuracy there with F1 0 is no ranking; F1 and the recall of class 0 "
                 "say what each model learnt.")
    return out
  return lines


def experiment(task: str) -> experiments.Experiment:
  """``clue_<task>``: the four models of :data:`MODELS` on ``task``."""
  column = TASKS.index(task)
  return experiments.Experiment(
      name=f"clue_{task}", task={"tnews": clue_task.TNEWS, "afqmc": clue_task.AFQMC}[task],
      variant=None,
      models={k: (label, {**fields, "early_stopping_patience": PATIENCE})
              for k, (label, fields) in MODELS.items()},
      tiny=TINY, paper={k: {"dev_accuracy": TABLE3[g][column][0]}
                        for k, g in _PAPER_KEYS.items()},
      paper_source="StarSaber paper, Table 3 (dev)", columns=COLUMNS[task],
      notes=notes(task), pretraining=experiments.Pretraining("mlm", PRETRAIN))


# Tables 5-7: StarSaber's variants in clue_<task>'s set-up (4x256, the same pretraining and
# fine-tuning as its "starsaber", which is the baseline to compare with).
ABLATION_MODELS = {
    "starsaber_gate": ("StarSaber-gate 4x256 (Table 5)", {"model.name": "starsaber_gate"}),
    "starsaber_pe": ("StarSaber with PE 4x256 (Table 6)", {"model.name": "starsaber_pe"}),
    "starsaber_nodirect": ("StarSaber w/o direct paths 4x256 (Table 7)",
                           {"model.name": "starsaber_nodirect"}),
}


def ablations(task: str) -> experiments.Experiment:
  """``clue_<task>_ablations``: Tables 5-7's variants of StarSaber (:data:`ABLATION_MODELS`)
  at ``clue_<task>``'s sizes, pretraining and fine-tuning; the baseline is ``clue_<task>``'s
  ``starsaber`` (the paper's StarSaber-2, Table 3, is its row there)."""
  base = experiment(task)
  column = TASKS.index(task)
  return experiments.Experiment(
      name=f"clue_{task}_ablations", task=base.task, variant=None,
      models={k: (label, {**fields, "early_stopping_patience": PATIENCE})
              for k, (label, fields) in ABLATION_MODELS.items()},
      tiny=TINY, paper={k: {"dev_accuracy": ABLATIONS[k][column][2]} for k in ABLATION_MODELS},
      paper_source="StarSaber paper, Tables 5-7 (dev, at StarSaber-2's 6x512)",
      columns=COLUMNS[task], notes=notes(task),
      pretraining=experiments.Pretraining(
          "mlm", {k: PRETRAIN["starsaber"] for k in ABLATION_MODELS}))


def balanced(task: str = "afqmc") -> experiments.Experiment:
  """``clue_<task>_balanced``: ``clue_<task>``'s models and phases with the class-balanced
  fine-tuning loss (``class_weights="balanced"``; not in the paper): on AFQMC, where
  ``clue_afqmc``'s models all sit at the majority class, a set-up whose F1 and balanced
  accuracy can tell the models apart."""
  base = experiment(task)
  return dataclasses.replace(
      base, name=f"clue_{task}_balanced",
      models={k: (label, {**fields, "class_weights": "balanced"})
              for k, (label, fields) in base.models.items()},
      columns=COLUMNS[f"{task}_balanced"], notes=notes(task, balanced=True),
      paper_source=base.paper_source + "; the paper's loss is not class-weighted")


EXPERIMENTS = {f"clue_{t}": experiment(t) for t in ("tnews", "afqmc")}
EXPERIMENTS["clue_afqmc_balanced"] = balanced("afqmc")
EXPERIMENTS["clue_tnews_ablations"] = ablations("tnews")

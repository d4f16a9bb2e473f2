"""Text summarization in the RUM paper (Dangovski et al., TACL 2019, §4 E, Table 4): the
pointer-generator with LSTM or RUM encoder and decoder (LEAD, encRUM, decRUM, allRUM) on
the synthetic task, for ``launch.reproduce`` at equal steps::

    python -m launch.reproduce --experiment=summ_synthetic --workdir=/tmp/summ_seeds \\
        --steps=2000 --seeds=0,1,2
    python -m launch.reproduce --experiment=summ_synthetic_hard --workdir=/tmp/summ_hard \\
        --steps=2000 --seeds=0,1,2

``summ_synthetic_hard`` is the hard task (``tasks.summ_synthetic``: 2-3 key sentences to
copy in order, ``key not`` distractors to leave out, 2-3 rare words per sentence), on which
the configurations can differ; every configuration decodes the easy one exactly.

Every model starts from ``tasks.configs.summ_synthetic.get_config("lead")`` (embedding 64,
hidden 128, Adam 1e-3, batch 32, See et al.'s per-example loss, beam 4; ROUGE of the beam
search on test at the end) and changes only the cells. The paper's numbers are on
CNN/DailyMail (Table 4), not on this task: they say how the configurations ranked there.
"""

from rumjax import experiments
from tasks import summ_synthetic
from tasks.configs import summarization as summ_config

LABELS = {"lead": "LEAD (LSTM / LSTM)", "encrum": "encRUM (RUM / LSTM)",
          "decrum": "decRUM (LSTM / RUM)", "allrum": "allRUM (RUM / RUM)"}

# key -> (label, dotted-field overrides of the "lead" config): the configuration's cells.
MODELS = {k: (LABELS[k], {"configuration": k, **{f"model.{field}": cell
                                                for field, cell in cells.items()}})
          for k, cells in summ_config.VARIANTS.items()}

# Table 4 (CNN/DailyMail test, ROUGE-1 / 2 / L): the lines without coverage where there is
# one, else the paper's only line for the configuration.
TABLE4 = {
    "lead": "36.89 / 15.92 / 33.65 (LEAD)",
    "encrum": "36.34 / 15.24 / 33.16 (encRUM 360 cov.)",
    "decrum": "37.07 / 16.17 / 34.07 (decRUM 256)",
    "allrum": "35.01 / 14.69 / 32.02 (allRUM 360 cov.)",
}

# --tiny: checks the plumbing in seconds, not the paper.
TINY = {"model.hidden_size": 8, "model.embed_dim": 8, "batch_size": 4, "num_train": 64,
        "num_eval": 8, "beam_size": 2}

# Every configuration decodes the hard task exactly by step ~1,000 (LEAD and encRUM, seed 0),
# so the table also says how fast each learns: the dev NLL per target word at steps 500 and
# 1,000 (the config evaluates every 500 steps).
COLUMNS = (
    experiments.Column("dev NLL, step 500", experiments.metric_at("eval_nll", 500), ".2g"),
    experiments.Column("step 1,000", experiments.metric_at("eval_nll", 1000), ".2g"),
    experiments.Column("dev loss", experiments.metric("eval_loss"), ".2e"),
    experiments.Column("test ROUGE-1", experiments.metric("test_rouge1")),
    experiments.Column("ROUGE-2", experiments.metric("test_rouge2")),
    experiments.Column("ROUGE-Lsum", experiments.metric("test_rougeLsum")),
    experiments.Column("paper, CNN/DM (Table 4)", experiments.paper("rouge")),
)


def experiment(name: str, variant: str) -> experiments.Experiment:
  """The four configurations on the easy (``lead``) or hard (``lead_hard``) task."""
  return experiments.Experiment(
      name=name, task=summ_synthetic.TASK, variant=variant, models=MODELS, tiny=TINY,
      paper={k: {"rouge": v} for k, v in TABLE4.items()},
      paper_source="Table 4 (CNN/DailyMail; not this task)", columns=COLUMNS)


EXPERIMENTS = {"summ_synthetic": experiment("summ_synthetic", "lead"),
               "summ_synthetic_hard": experiment("summ_synthetic_hard", "lead_hard")}

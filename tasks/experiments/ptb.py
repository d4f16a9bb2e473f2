"""Character-level Penn Treebank (RUM paper, Table 3) at EQUAL PARAMETERS, for
``launch.reproduce``::

    python -m launch.reproduce --experiment=char_ptb_equal_params --workdir=/tmp/char_ptb \\
        --seeds=0,1 --steps=3000 --eval_every=250 --eval_batches_during=20

Table 3 compares models of unequal size (RUM 1000: 2.4M parameters against LSTM 1000:
4.5M; FS-RUM-2 11.2M against FS-LSTM-2 7.2M). Here each pair is matched in parameters at
about a quarter of the paper's width, everything else as in the paper's variants
(``tasks.configs.ptb``: windows of 150, embedding 128, Adam 2e-3, clip 1.0, dropout 0.35,
zoneout; RUM lam 0, eta 1.0, ReLU, layer norm, update gate) at batch 32:

* RUM 350 (406,500 parameters) against LN-LSTM 250 (399,450);
* FS-RUM-2 (fast LN-LSTM 175 x 2, slow RUM 250: 786,800) against FS-LSTM-2 (fast 175 x 2,
  slow LN-LSTM 200: 795,300).

Learning rate: Table 6's schedule (180 epochs at 2e-3, 60 at 1e-4, 120 at 1e-5) compressed
into the last quarter of each run: 2e-3 for the first 3/4 of the steps, 1e-4 for the next
1/12, 1e-5 for the last 1/6 (:func:`decay_last_quarter`, from the run's ``num_steps``).
Validation BPC during training and at the end on the first ``--eval_batches_during``
windows of 128 rows (``eval_batch_size``, the variants' batch size, each row from a zero
state: 20 windows of 150 steps are 384,000 of valid's 393,041 targets), and at the end
test BPC (``test_bpc``) on the whole test stream.

``char_ptb_ablations`` (issue 47): Table 3's lines 1-3 in RUM 350's set-up, RUM 350 with
ReLU and the update gate (line 2), with tanh (line 3), and RUM 495 without the update gate
at equal used parameters (line 1: RUM 1400 against RUM 1000 at 2.4M each)::

    python -m launch.reproduce --experiment=char_ptb_ablations --workdir=/tmp/char_ptb \
        --models=rum350_tanh,rum495_nogate --seed=0 --steps=3000 --eval_every=250 \
        --eval_batches_during=20
"""

from rumjax import analysis, experiments, plotting, utils
from tasks import ptb as ptb_task

# key -> (label, dotted-field overrides of its variant's config).
MODELS = {
    "rum350": ("RUM 350 (0.41M)", {"model.hidden_size": 350}),
    "lnlstm250": ("LN-LSTM 250 (0.40M)", {"model.hidden_size": 250}),
    "fs_rum2": ("FS-RUM-2, slow RUM 250 (0.79M)",
                {"model.fast_size": 175, "model.slow_size": 250}),
    "fs_lstm2": ("FS-LSTM-2, slow LN-LSTM 200 (0.80M)",
                 {"model.fast_size": 175, "model.slow_size": 200}),
}
VARIANTS = {"rum350": "rum1000", "lnlstm250": "lstm1000", "fs_rum2": "fs_rum2",
            "fs_lstm2": "fs_lstm2"}
BATCH = {"batch_size": 32}

# Table 3 (test BPC at the paper's full size; not at these sizes).
TABLE3 = {"rum350": "1.302 (RUM 1000, 2.4M)", "lnlstm250": "1.240 (LSTM 1000, 4.5M)",
          "fs_rum2": "1.189 (11.2M)", "fs_lstm2": "1.190 (7.2M)"}

# Table 6's 360 epochs: 180 at 2e-3, 60 at 1e-4, 120 at 1e-5; here in the last quarter.
LR_VALUES = [2e-3, 1e-4, 1e-5]


def decay_last_quarter(config) -> None:
  """``lr_boundaries`` at 3/4 and 3/4 + 1/12 of ``config.num_steps`` with
  :data:`LR_VALUES` (Table 6's 60 : 120 epochs after the constant phase)."""
  n = config.num_steps
  first = max(1, (3 * n) // 4)
  config.lr_boundaries = [first, max(first + 1, (3 * n) // 4 + n // 12)]
  config.lr_values = list(LR_VALUES)


# --tiny: checks the plumbing in seconds, not the paper (fields every variant has).
TINY = {"batch_size": 4, "seq_len": 12, "eval_batch_size": 4, "model.embed_dim": 8}

COLUMNS = (
    experiments.Column("valid BPC", experiments.metric("eval_bpc"), ".3f"),
    experiments.Column("test BPC", experiments.metric("test_bpc"), ".3f"),
    experiments.Column("paper test BPC (full size)", experiments.paper("test_bpc")),
)


def plot(summary: dict, exp_dir: str) -> str:
  """Validation BPC against steps and against training time, one curve per model and
  seed, in ``<exp_dir>/<experiment>.png``."""
  by_step, by_time = {}, {}
  for key, r in summary["models"].items():
    seeds = r.get("runs") or {None: None}
    for seed in seeds:
      label = r["label"] if seed is None else f"{r['label']} s{seed}"
      records = utils.read_jsonl(f"{experiments.seed_dir(exp_dir, key, seed)}/metrics.jsonl")
      by_step[label] = analysis.metric_curve(records, "eval_bpc")
      by_time[label] = analysis.metric_over_time(records, "eval_bpc")
  return plotting.save_steps_and_time(by_step, by_time, "validation BPC",
                                      f"{exp_dir}/{summary['experiment']}.png",
                                      title="char PTB at equal parameters")


def notes(summary: dict) -> list[str]:
  del summary
  return ["Pairs matched in parameters (RUM 350 vs LN-LSTM 250; FS-RUM-2 vs FS-LSTM-2 with "
          "slow sizes 250 / 200); Table 6's decay in the last quarter of the steps; the "
          "paper's numbers are at full size and 100-360 epochs."]


# Table 3's ablations of RUM 1000 (lines 1-3), at the same quarter width and set-up as
# ``rum350``: key -> (label, dotted-field overrides, Table 3's variant, the paper's line).
# Line 1 (RUM 1400 without the update gate, 2.4M) has the parameters of line 2 (RUM 1000,
# 2.4M); here RUM 495 without the gate uses 405,915 parameters against RUM 350's 406,500
# (h^2 + 312 h + 6,450 against 2 h^2 + 443 h + 6,450). The count that the runner prints
# for it (714,795) includes the gate's weights, which the cell still declares (kernel_x and
# kernel_h keep their u columns) but never uses without the gate: they get no gradient.
ABLATIONS = {
    "rum350": ("RUM 350 (ReLU, update gate; 0.41M)", {"model.hidden_size": 350}, "rum1000",
               "1.302 (line 2: RUM 1000, 2.4M)"),
    "rum350_tanh": ("RUM 350 w/ tanh (0.41M)", {"model.hidden_size": 350}, "rum1000_tanh",
                    "1.299 (line 3: RUM 1000 w/ tanh, 2.4M)"),
    "rum495_nogate": ("RUM 495 w/o update gate (0.41M used)", {"model.hidden_size": 495},
                      "rum1400_nogate", "1.326 (line 1: RUM 1400 w/o upd. gate, 2.4M)"),
}
NOGATE_USED_PARAMS = 405_915


def ablation_notes(summary: dict) -> list[str]:
  del summary
  return ["RUM 350's set-up of `char_ptb_equal_params` (batch 32, 150-character windows, "
          "Table 6's decay in the last quarter); the ablations change only the activation "
          "(tanh) or drop the update gate at equal used parameters (RUM 495: "
          f"{NOGATE_USED_PARAMS:,} used; its params column also counts the gate's unused "
          "weights). The paper's numbers are at full size and 100 epochs."]


EXPERIMENTS = {"char_ptb_equal_params": experiments.Experiment(
    name="char_ptb_equal_params", task=ptb_task.TASK, variant="rum1000",
    models={k: (label, {**BATCH, **fields}) for k, (label, fields) in MODELS.items()},
    model_variants=VARIANTS, tiny=TINY, paper={k: {"test_bpc": v} for k, v in TABLE3.items()},
    paper_source="RUM paper, Table 3 (full size)", columns=COLUMNS, notes=notes, plot=plot,
    adjust=decay_last_quarter),
    "char_ptb_ablations": experiments.Experiment(
        name="char_ptb_ablations", task=ptb_task.TASK, variant="rum1000",
        models={k: (label, {**BATCH, **fields}) for k, (label, fields, _, _) in ABLATIONS.items()},
        model_variants={k: v[2] for k, v in ABLATIONS.items()}, tiny=TINY,
        paper={k: {"test_bpc": v[3]} for k, v in ABLATIONS.items()},
        paper_source="RUM paper, Table 3 lines 1-3 (full size)", columns=COLUMNS,
        notes=ablation_notes, plot=plot, adjust=decay_last_quarter)}

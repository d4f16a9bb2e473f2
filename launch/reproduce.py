r"""Reproduces a paper's comparison: the RUM paper's copying (Figure 4), recall (Table 1)
and summarization configurations (Table 4, on the synthetic task); the LSTMN paper's SST.

    python -m launch.reproduce --experiment=recall_T30 --workdir=/tmp/repro \
        --models=rum_lam1,gru --budget_minutes=15
    python -m launch.reproduce --experiment=copying_T200 --workdir=/tmp/repro \
        --models=rum_lam1,gru --steps=2000 --budget_minutes=10 --set=batch_size=64
    python -m launch.reproduce --experiment=recall_T30,copying_T200 --workdir=/tmp/t \
        --models=rum_lam1,gru --tiny --steps=3          # a smoke test in seconds
    python -m launch.reproduce --experiment=recall_T30 --workdir=/tmp/repro_seeds \
        --models=rum_lam1,gru --seeds=0,1,2 --budget_minutes=15     # mean ± std of 3 seeds

Experiments (``--experiment``, comma-separated; the models, the paper's numbers and the
figures are data in ``tasks/experiments/``): ``copying_T200``, ``copying_T500``,
``copying_T1000`` (RUM λ=1 with η=N/A and η=1.0, RUM λ=0, LSTM, GRU, EURNN, GORU; Figure
4), ``recall_T30``, ``recall_T50`` (the same plus FW-LN; Table 1) and ``sst_binary``,
``sst_fine`` (LSTM and LSTMN, test at the best dev checkpoint; LSTMN paper Table 2),
``summ_synthetic`` (LEAD, encRUM, decRUM, allRUM; RUM paper Table 4),
``char_ptb_equal_params`` (RUM 350 vs LN-LSTM 250 and FS-RUM-2 vs FS-LSTM-2 at equal
parameters, Table 6's decay in the last quarter of ``--steps``; RUM paper Table 3),
``char_ptb_ablations`` (RUM 350 with ReLU and the update gate, with tanh, and RUM 495
without the gate at equal used parameters; Table 3 lines 1-3),
``clue_tnews``, ``clue_afqmc`` (StarSaber, Transformer, ReZero pretrained for
``--pretrain_steps`` in ``<model>/pretrain`` then fine-tuned from it, a BiLSTM from
scratch; StarSaber paper Table 3) and the real-λ sweeps ``lam_copying``,
``lam_recall_T30``.

Each model is one invocation of the generic loop in ``<workdir>/<experiment>/<model>``
(:func:`rumjax.experiments.run_experiment`), compiled once: evaluation every
``--eval_every`` steps (the periodic evaluators on at most ``--eval_batches_during``
batches, the final test on the whole test set), for RUM the
mini-batch mean of ``cos(theta_t)`` per step on a fixed test batch appended to
``cos_theta.jsonl`` at the same cadence (Figure 5b,c), and a stop at ``--budget_minutes``
of wall-clock time. Re-running with the same workdir resumes every model where it stopped
(and skips the finished ones). The models run one after the other; to use more cores
or machines, start one process per model with the same ``--workdir`` (``--models=lstm``
on one, ``--models=lstmn`` on another): each model's folder is locked by its run, the
shared results files are replaced whole, each time with every model that has results on
disk (one seed or several), so the last process to finish reports them all. ``--seeds=0,1,2`` trains every model
once per seed, in ``<workdir>/<experiment>/<model>/seed<k>/``, and reports the mean ±
sample standard deviation over the seeds (with ``n``) in ``results.json`` /
``results.md``; the figure draws one curve per seed. One seed (``--seeds=3``, the same as
``--seed=3``) keeps the single-run layout. With early stopping in the models' configs
(SST) the final-only evaluators also run on the best checkpoint (``at_best_metrics``: test
at best dev).

Outputs under ``<workdir>/<experiment>/``: ``results.json`` and ``results.md`` (per model
the config, parameter count, steps, wall and CPU time, final metrics, status, the paper's
numbers, the hardware), ``<experiment>.png``, and per model ``result.json``,
``params.npz``, ``metrics.jsonl``, checkpoints, and for RUM ``cos_theta.jsonl``,
``kernel_tau.png`` (Figure 5a) and ``cos_theta.png`` (Figure 5b,c).
"""

import sys

import launch
from absl import flags, logging

from rumjax import experiments, utils
from tasks.experiments import EXPERIMENTS


def define_flags() -> None:
  """The command-line flags (defined only when run as a script, so that importing this
  module leaves the global absl flags alone)."""
  flags.DEFINE_list("experiment", None, f"Experiment(s) to run: {sorted(EXPERIMENTS)}.",
                    required=True)
  flags.DEFINE_string("workdir", None, "Root directory; each experiment writes to "
                      "<workdir>/<experiment>. Re-using it resumes the runs.", required=True)
  flags.DEFINE_list("models", None, "Subset of the experiment's models (default: all), "
                    "e.g. rum_lam1,gru.")
  flags.DEFINE_integer("steps", None, "Training steps per model (default: the variant's "
                       "num_steps: 10k for copying, 100k for recall).")
  flags.DEFINE_integer("pretrain_steps", None, "Steps of the pretraining phase of the "
                       "experiments that have one (clue_*: masked-LM pretraining before "
                       "fine-tuning; default: the pretraining variant's num_steps).")
  flags.DEFINE_float("budget_minutes", None, "Wall-clock budget per model and invocation "
                     "(compilation and evaluations included); the model then stops with "
                     "status 'budget' after its final evaluation. Default: none.")
  flags.DEFINE_integer("eval_every", None, "Steps between evaluations, cos(theta) records "
                       "and checkpoints (default: the variant's: 250 copying, 1000 recall).")
  flags.DEFINE_integer("eval_batches_during", 8, "At most N batches for the periodic "
                       "evaluators (recall: dev; copying: test, 4 batches in all); the "
                       "final-only ones (recall: test) use whole splits. 0: the task's.")
  flags.DEFINE_integer("log_every", 10, "Training metrics are logged every N steps.")
  flags.DEFINE_integer("keep_checkpoints", 100, "Checkpoints kept per model (one per "
                       "--eval_every), so that launch.plot can revisit training.")
  flags.DEFINE_multi_string("set", [], "Config override for every model, FIELD=VALUE with "
                            "a dotted field and a Python literal, e.g. --set=batch_size=64 "
                            "or --set=learning_rate=3e-3; repeatable.")
  flags.DEFINE_bool("tiny", False, "The experiment's small sizes for smoke tests (mostly "
                    "hidden 8, batch 8, short sequences, small data sets; each experiment's "
                    "TINY says which): checks the plumbing, not the paper.")
  flags.DEFINE_integer("seed", None, "Seed of every model (config.seed).")
  flags.DEFINE_list("seeds", None, "Several seeds, e.g. 0,1,2: every model once per seed "
                    "in <model>/seed<k>/, reported as mean ± std over the seeds (instead "
                    "of --seed).")
  flags.DEFINE_string("cpu_devices", None, "CPU only: CPU devices for the data-parallel "
                      "loop, or 'auto' (one per core); see launch.train. Default: one.")


def parse_seeds(items) -> list[int] | None:
  """``["0", "1", "2"]`` (``--seeds``) -> ``[0, 1, 2]``; ``None`` stays ``None``."""
  if items is None:
    return None
  try:
    return [int(item) for item in items]
  except ValueError:
    raise ValueError(f"--seeds={','.join(items)} must be comma-separated integers, "
                     "e.g. --seeds=0,1,2.") from None


def options_from_flags(values) -> experiments.Options:
  return experiments.Options(
      steps=values.steps, budget_minutes=values.budget_minutes,
      eval_every=values.eval_every, eval_batches_during=values.eval_batches_during,
      log_every=values.log_every, keep_checkpoints=values.keep_checkpoints,
      sets=experiments.parse_overrides(values.set), tiny=values.tiny, seed=values.seed,
      seeds=parse_seeds(values.seeds), pretrain_steps=values.pretrain_steps)


def main(argv):
  del argv
  FLAGS = flags.FLAGS
  logging.get_absl_handler().addFilter(utils.QuietOrbax())
  if not FLAGS.experiment:
    sys.exit(f"error: --experiment is empty; name one or more of {sorted(EXPERIMENTS)}.")
  unknown = [e for e in FLAGS.experiment if e not in EXPERIMENTS]
  if unknown:
    sys.exit(f"error: unknown experiment(s) {unknown}; known: {sorted(EXPERIMENTS)}.")
  from rumjax import sharding
  try:
    options = options_from_flags(FLAGS)
    experiments.check_options(options)
    # Every experiment's runs and configs (--models, --set), before any trains.
    runs = [run for name in FLAGS.experiment
            for run in experiments.plan_runs(EXPERIMENTS[name], FLAGS.models, options)]
    if options.pretrain_steps is not None and all(run[3] is None for run in runs):
      raise ValueError(f"--pretrain_steps={options.pretrain_steps}: no selected model of "
                       f"{','.join(FLAGS.experiment)} pretrains (only the CLUE experiments' "
                       "pretrained models do); drop the flag.")
    sharding.use_cpu_devices(FLAGS.cpu_devices)
    launch.warn_cpu_devices(FLAGS.cpu_devices)
  except ValueError as err:
    sys.exit(f"error: {err}")
  for name in FLAGS.experiment:
    exp = EXPERIMENTS[name]
    try:
      summary = experiments.run_experiment(exp, FLAGS.workdir, FLAGS.models, options,
                                           log=lambda line: print(line, flush=True))
    except ValueError as err:
      sys.exit(f"error: {err}")
    print(experiments.results_markdown(exp, summary), flush=True)
    if any("preempted" in r.get("statuses", [r["status"]])
           for r in summary["models"].values()):
      return


if __name__ == "__main__":
  define_flags()
  launch.run_app(main)

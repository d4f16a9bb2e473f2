r"""Trains one bAbI model per sub-task with early stopping on dev; prints Table 2's mean.

    python -m launch.babi_all --workdir=/tmp/babi --cell=rum --lam=0 --level=word
    python -m launch.babi_all --workdir=/tmp/babi_s --level=sentence --attention --lam=1 \
        --tasks=1,2,6 --budget_minutes=5

For each sub-task ``k`` of ``--tasks`` the generic loop trains once in ``<workdir>/qa<k>``
(``tasks/babi.py``; the set-up and the paper's numbers are in ``tasks/configs/babi.py``).
Early stopping ("train until convergence on the dev set", sec. 4.2): dev and test are
evaluated every ``--eval_every`` steps (default one epoch); when the dev accuracy improves
the checkpoint is kept in ``<workdir>/qa<k>/best/checkpoints/<step>`` (usable as
``--config.init_from``, with ``launch.evaluate --best`` or ``rumjax.training.restore_params``)
and the test accuracy at that step is what is reported. A sub-task stops after
``--patience`` evaluations without improvement, at ``--max_steps``, or at
``--budget_minutes`` of wall-clock time. Re-running with the same ``--workdir`` resumes
(``early_stopping.json`` per sub-task); a finished sub-task is not run again.

Output: a per-task table (best dev accuracy, its test accuracy, steps, wall time) next to
the paper's per-task RUM numbers (ICLR-workshop version, Table 4: word level, ``lam=0``,
hidden 256), the mean over the sub-tasks run (Table 2's "averaged over the 20 tasks"), and
``<workdir>/results.json`` (rewritten after every sub-task). A sub-task whose files are
missing (here: en-10k qa3 train) is listed as missing and left out of the mean.
"""

import os
import sys

from absl import app, flags, logging

from rumjax import experiments, utils
from tasks.configs import babi as babi_configs


def define_flags() -> None:
  """The command-line flags (defined only when run as a script)."""
  flags.DEFINE_string("workdir", None, "Root folder; sub-task k trains in <workdir>/qa<k>.",
                      required=True)
  flags.DEFINE_list("tasks", [str(k) for k in range(1, 21)], "Sub-tasks to train (1..20).")
  flags.DEFINE_enum("version", "en-10k", ["en-10k", "en"], "bAbI data version.")
  flags.DEFINE_string("cell", "rum", "Recurrent cell by name.")
  flags.DEFINE_integer("lam", 0, "RUM associative memory (0 or 1).")
  flags.DEFINE_integer("hidden_size", 256, "Hidden size of the cell.")
  flags.DEFINE_enum("level", "word", ["word", "sentence"], "Word or sentence level.")
  flags.DEFINE_bool("attention", False, "Dot-product attention (sentence level).")
  flags.DEFINE_integer("max_steps", None, "Steps per sub-task at most (config.num_steps; "
                       "default 20 epochs).")
  flags.DEFINE_integer("eval_every", None, "Steps between dev/test evaluations (default: "
                       "one epoch).")
  flags.DEFINE_integer("patience", 5, "Evaluations without a better dev accuracy before "
                       "stopping.")
  flags.DEFINE_float("budget_minutes", None, "Wall-clock budget per sub-task and "
                     "invocation in minutes (default: none).")
  flags.DEFINE_integer("seed", 0, "Random seed.")
  flags.DEFINE_string("manual_dir", None, "Folder with the bAbI files (archive layout); "
                      "default: the task's (../shared/data/babi if present).")
  flags.DEFINE_string("data_dir", None, "TFDS data dir; default <workdir>/tfds.")
  flags.DEFINE_string("results", None, "Results JSON; default <workdir>/results.json.")
  flags.DEFINE_multi_string("set", [], "More config overrides, FIELD=VALUE with a dotted "
                            "field, e.g. --set=model.embed_dim=32; repeatable.")


def settings_from_flags(values) -> babi_configs.Settings:
  return babi_configs.Settings(
      version=values.version, level=values.level, attention=values.attention,
      cell=values.cell, lam=values.lam, hidden_size=values.hidden_size, seed=values.seed,
      manual_dir=values.manual_dir,
      data_dir=values.data_dir or os.path.join(values.workdir, "tfds"),
      eval_every=values.eval_every, max_steps=values.max_steps, patience=values.patience,
      budget_minutes=values.budget_minutes,
      sets=experiments.parse_overrides(values.set))


def main(argv):
  del argv
  FLAGS = flags.FLAGS
  logging.get_absl_handler().addFilter(utils.QuietOrbax())
  try:
    settings = settings_from_flags(FLAGS)
    task_ids = sorted({int(t) for t in FLAGS.tasks})
    out = babi_configs.run_subtasks(task_ids, FLAGS.workdir, settings, FLAGS.results)
  except ValueError as err:
    sys.exit(f"error: {err}")
  print(babi_configs.format_table(out["tasks"], settings.header(), settings.paper_mean()))
  print(f"results: {FLAGS.results or os.path.join(FLAGS.workdir, 'results.json')}")


if __name__ == "__main__":
  define_flags()
  app.run(main)

r"""Trains one bAbI model per sub-task with early stopping on dev; prints Table 2's mean.

    python -m launch.babi_all --workdir=/tmp/babi_rum --cell=rum --lam=0 --level=word
    python -m launch.babi_all --workdir=/tmp/babi_lstm --cell=lstm --level=word
    python -m launch.babi_all --compare=/tmp/babi_rum,/tmp/babi_lstm \
        --compare_out=/tmp/babi_comparison.md
    python -m launch.babi_all --workdir=/tmp/babi --cells=rum,lstm --tasks=1,3 \
        --max_steps=50      # both models, one after the other per sub-task, + comparison
    python -m launch.babi_all --workdir=/tmp/babi_s --level=sentence --attention --lam=1 \
        --tasks=1,2,6 --budget_minutes=5

For each sub-task ``k`` of ``--tasks`` the generic loop trains once in ``<workdir>/qa<k>``
(``tasks/babi.py``, its config ``tasks/configs/babi.py``; the set-up and the paper's numbers
are in ``tasks/experiments/babi.py``).
Early stopping ("train until convergence on the dev set", sec. 4.2): dev and test are
evaluated every ``--eval_every`` steps (default one epoch); when the dev accuracy improves
the checkpoint is kept in ``<workdir>/qa<k>/best/checkpoints/<step>`` (usable as
``--config.init_from``, with ``launch.evaluate --best`` or ``rumjax.training.restore_params``)
and the test accuracy at that step is what is reported. A sub-task stops after
``--patience`` evaluations without improvement, at ``--max_steps``, or when it has used
``--budget_minutes`` of wall-clock time (over all invocations).

Resuming: re-running with the same ``--workdir`` skips the sub-tasks that finished (or
used up their budget) and continues an interrupted one from its latest checkpoint (one
per evaluation; SIGTERM saves one and ends the run). Sub-tasks are independent: on a
multi-core CPU, run one process per core with disjoint ``--tasks`` and the same
``--workdir`` (each sub-task has its own folder and lock; each write of results.json keeps
the other processes' rows), e.g. ``taskset -c 0 ... --tasks=1,2,3`` beside ``taskset -c 1
... --tasks=4,5,6``, the second started once the first is training (the data is prepared
once, into ``<workdir>/tfds``). A workdir (or ``--results``) holds one set of settings
(but ``--manual_dir``/``--data_dir``): other settings there are refused with the ones that
differ, before anything trains.

Data: a sub-task whose ``--version`` files are missing (here: en-10k qa3 train) trains on
``--fallback_version`` (default ``en``, the 1k version; its row says "(1k)"); ``none``
lists it as missing and leaves it out of the mean.

Output: a per-task table (best dev accuracy, its test accuracy, steps, wall time) next to
the paper's per-task RUM numbers (ICLR-workshop version, Table 4), the mean over the
sub-tasks run, and ``<workdir>/results.json`` (rewritten after every sub-task).
``--compare=DIR,DIR`` (or ``--cells``, :func:`tasks.experiments.babi.run_cells`; each
cell writes ``<workdir>/<cell>/results.json``, so not with ``--results``) writes ONE
Markdown table of several runs: ours and the paper's per-task numbers per model, steps,
wall time, the mean and the passed (>= 95%) sub-tasks
(:func:`tasks.experiments.babi.comparison_markdown`).
"""

import os
import sys
from typing import Collection, Optional

import launch
from absl import flags, logging

from rumjax import experiments, utils
from tasks.experiments import babi as babi_configs


def define_flags() -> None:
  """The command-line flags (defined only when run as a script)."""
  flags.DEFINE_string("workdir", None, "Root folder; sub-task k trains in <workdir>/qa<k> "
                      "(with --cells: <workdir>/<cell>/qa<k>).")
  flags.DEFINE_list("tasks", [str(k) for k in range(1, 21)], "Sub-tasks to train (1..20).")
  flags.DEFINE_enum("version", "en-10k", ["en-10k", "en"], "bAbI data version.")
  flags.DEFINE_enum("fallback_version", "en", ["en", "en-10k", "none"], "Data version of "
                    "a sub-task whose --version files are missing ('none': skip it).")
  flags.DEFINE_string("cell", "rum", "Recurrent cell by name.")
  flags.DEFINE_list("cells", [], "Several cells, each in <workdir>/<cell> with the same "
                    "settings, sub-task by sub-task; then <workdir>/comparison.md.")
  flags.DEFINE_integer("lam", 0, "RUM associative memory (0 or 1).")
  flags.DEFINE_integer("hidden_size", 256, "Hidden size of the cell.")
  flags.DEFINE_enum("level", "word", ["word", "sentence"], "Word or sentence level.")
  flags.DEFINE_bool("attention", False, "Dot-product attention (sentence level).")
  flags.DEFINE_integer("max_steps", None, "Steps per sub-task at most (config.num_steps; "
                       "default 20 epochs).")
  flags.DEFINE_integer("eval_every", None, "Steps between dev/test evaluations and "
                       "checkpoints (default: one epoch).")
  flags.DEFINE_integer("patience", 5, "Evaluations without a better dev accuracy before "
                       "stopping.")
  flags.DEFINE_float("budget_minutes", None, "Wall-clock budget per sub-task in minutes, "
                     "over all invocations (default: none).")
  flags.DEFINE_integer("seed", 0, "Random seed.")
  flags.DEFINE_string("manual_dir", None, "Folder with the bAbI files (archive layout); "
                      "default: the task's (../shared/data/babi if present).")
  flags.DEFINE_string("data_dir", None, "TFDS data dir; default <workdir>/tfds.")
  flags.DEFINE_string("results", None, "Results JSON; default <workdir>/results.json "
                      "(not with --cells).")
  flags.DEFINE_multi_string("set", [], "More config overrides, FIELD=VALUE with a dotted "
                            "field, e.g. --set=model.embed_dim=32; repeatable.")
  flags.DEFINE_list("compare", [], "Only write the comparison table of these runs "
                    "(workdirs or results JSONs), e.g. --compare=/tmp/rum,/tmp/lstm.")
  flags.DEFINE_string("compare_out", None, "The comparison's Markdown file; default "
                      "comparison.md in --workdir, else in the folder holding the first "
                      "--compare run (with --compare: not inside a run; an existing file "
                      "only with --overwrite).")
  flags.DEFINE_bool("overwrite", False, launch.OVERWRITE_HELP)


def settings_from_flags(values, cell=None) -> babi_configs.Settings:
  return babi_configs.Settings(
      version=values.version, level=values.level, attention=values.attention,
      cell=cell or values.cell, lam=values.lam, hidden_size=values.hidden_size,
      seed=values.seed, manual_dir=values.manual_dir,
      data_dir=values.data_dir or os.path.join(values.workdir, "tfds"),
      eval_every=values.eval_every, max_steps=values.max_steps, patience=values.patience,
      budget_minutes=values.budget_minutes,
      fallback_version=None if values.fallback_version == "none" else
      values.fallback_version, sets=experiments.parse_overrides(values.set))


def parse_tasks(values) -> list[int]:
  """``--tasks`` as sorted sub-task numbers (their range is checked with the settings)."""
  try:
    return sorted({int(t) for t in values})
  except ValueError:
    raise ValueError(f"--tasks={','.join(values)} must be sub-task numbers, e.g. "
                     "--tasks=1,3 (1..20).") from None


def compare(paths, out_path) -> None:
  print(babi_configs.write_comparison(paths, out_path))
  print(f"comparison: {out_path}")


# The flags of a training run: --compare, which only compares finished runs, ignores them.
TRAINING_FLAGS = ("tasks", "version", "fallback_version", "cell", "cells", "lam",
                  "hidden_size", "level", "attention", "max_steps", "eval_every", "patience",
                  "budget_minutes", "seed", "manual_dir", "data_dir", "results", "set")


def compare_out(values) -> str:
  """Where ``--compare`` writes: ``--compare_out``, else ``comparison.md`` in ``--workdir``,
  else beside the first run (in the folder holding it, not inside it)."""
  if values.compare_out:
    return values.compare_out
  if values.workdir:
    return os.path.join(values.workdir, "comparison.md")
  first = os.path.abspath(values.compare[0])
  run = first if os.path.isdir(first) else os.path.dirname(first)
  return os.path.join(os.path.dirname(run), "comparison.md")


def compare_problem(values, given: Collection[str] = ()) -> Optional[str]:
  """Why ``--compare`` / ``--compare_out`` cannot be used as given, or ``None``: a run
  named twice (two equal columns), a training flag (ignored by a comparison), or an output
  (:func:`compare_out`) inside a run, in a run's folder or over an existing file without
  ``--overwrite``. ``given``: the flags on the command line (:func:`launch.given_flags`)."""
  if not values.compare:
    return None
  seen = {}
  for path in values.compare:
    real = os.path.realpath(path)
    if real in seen:
      return (f"--compare names {seen[real]} twice (as {path}); give each run once.")
    seen[real] = path
  ignored = [f"--{name}" for name in TRAINING_FLAGS if name in given]
  if ignored:
    return (f"{', '.join(ignored)} would be ignored: --compare only compares finished runs; "
            "leave them out (or train without --compare).")
  return launch.output_problem("compare_out", compare_out(values), runs=values.compare,
                               overwrite=values.overwrite)


def cells_problem(values, given: Collection[str] = ()) -> Optional[str]:
  """Why ``--cells`` cannot run with the other flags, or ``None``: each cell writes its
  own ``<workdir>/<cell>/results.json``, so one ``--results`` file cannot hold them."""
  repeated = sorted({c for c in values.cells if values.cells.count(c) > 1})
  if repeated:
    return (f"--cells={','.join(values.cells)} names {', '.join(repeated)} more than once; "
            "name each cell once.")
  if values.cells and "cell" in given:
    return (f"--cell={values.cell} does not go with --cells={','.join(values.cells)} "
            "(each of those is trained); give one of the two.")
  cells = values.cells or [values.cell]
  if "lam" in given and not any(c.startswith("rum") for c in cells):
    return (f"--lam={values.lam} is RUM's memory, but {', '.join(cells)} has none; leave "
            "--lam out.")
  if values.cells and values.compare:
    return ("--cells does not go with --compare (which only compares finished runs); "
            "run --cells alone: it writes the comparison itself.")
  if values.cells and values.results:
    return (f"--results={values.results} does not go with --cells (each cell writes "
            "<workdir>/<cell>/results.json); leave --results out (--compare_out names "
            "the comparison).")
  return None


def run_cells(values, task_ids) -> None:
  """``--cells``: :func:`tasks.experiments.babi.run_cells`, the comparison printed."""
  out = values.compare_out or os.path.join(values.workdir, "comparison.md")
  text = babi_configs.run_cells(values.cells, task_ids, values.workdir,
                                settings_from_flags(values), out)
  if text is not None:
    print(text)
    print(f"comparison: {out}")


def main(argv):
  del argv
  FLAGS = flags.FLAGS
  logging.get_absl_handler().addFilter(utils.QuietOrbax())
  given = launch.given_flags(FLAGS)
  launch.check_outputs(compare_problem(FLAGS, given) if FLAGS.compare
                       else launch.output_problem("compare_out", FLAGS.compare_out),
                       launch.output_problem("results", FLAGS.results, suffix=".json",
                                             runs=()),
                       cells_problem(FLAGS, given))
  try:
    if FLAGS.compare:
      return compare(FLAGS.compare, compare_out(FLAGS))
    if not FLAGS.workdir:
      raise ValueError("--workdir is required (unless --compare).")
    task_ids = parse_tasks(FLAGS.tasks)
    if FLAGS.cells:
      return run_cells(FLAGS, task_ids)
    settings = settings_from_flags(FLAGS)
    out = babi_configs.run_subtasks(task_ids, FLAGS.workdir, settings, FLAGS.results)
  except ValueError as err:
    sys.exit(f"error: {err}")
  print(babi_configs.format_table(out["tasks"], settings.header(), settings.paper_mean(),
                                  settings.version))
  print(f"results: {FLAGS.results or os.path.join(FLAGS.workdir, 'results.json')}")


if __name__ == "__main__":
  define_flags()
  launch.run_app(main)

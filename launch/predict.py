r"""Writes a split's predictions from a checkpoint as the task's jsonl rows: a benchmark's
submission file, or decoded summaries next to their references.

    python -m launch.predict --workdir=/tmp/afqmc --best --output=/tmp/afqmc_predict.json
    python -m launch.predict --workdir=/tmp/summ --split=test --pred=greedy \
        --output=/tmp/summ_test_greedy.jsonl

The config is the run's ``<workdir>/config.json`` (``--config.FIELD=VALUE`` overrides it);
the task must have a ``submission(config, rows)`` function (the CLUE tasks: ``{"id": ...,
"label": ...}`` per line, the format of www.cluebenchmark.com; the summarization tasks:
``{"split", "index", "decoded", "reference", "article"}``). ``--pred`` names the task's
predict function (default: the task's ``submission_pred``, ``"predict"`` unless the task
sets it; the summarization tasks have ``"beam"``, their default, and ``"greedy"``). Prints
the step, the number of rows written and the rows per second (after the first batch, which
includes compilation). ``--output`` may not lie in the run's folder (or any run's), and an
existing file is replaced only with ``--overwrite``.
"""

import json
import sys

import launch
from absl import flags

import tasks
from launch import evaluate
from rumjax import utils

flags.DEFINE_string("output", None, "The jsonl file to write (outside the run).",
                    required=True)
flags.DEFINE_bool("overwrite", False, launch.OVERWRITE_HELP)
flags.DEFINE_string("split", "test", "The split to predict.")
flags.DEFINE_string("pred", None, "The task's predict function (default: the task's "
                    "submission_pred, e.g. 'beam' for summarization, else 'predict').")
FLAGS = flags.FLAGS
FLAGS_FROM = (evaluate,)   # --workdir, --best, --step, ... (listed by --help too)


def main(argv):
  del argv
  launch.check_outputs(launch.output_problem(   # before decoding
      "output", FLAGS.output, runs=[FLAGS.workdir], overwrite=FLAGS.overwrite))
  if FLAGS["evals"].present:   # launch.evaluate's; it was accepted and did nothing
    sys.exit("error: --evals is launch.evaluate's (metrics); launch.predict writes the "
             "output of --pred: leave --evals out.")
  config, task, workdir = evaluate.setup()
  if task.submission is None:
    sys.exit(f"error: the {config.task} task writes no submission file (it has no "
             "submission function); use launch.evaluate for its metrics.")
  from rumjax import training
  pred = FLAGS.pred or task.submission_pred
  preds = task.submission_preds or (task.submission_pred,)
  if pred not in preds:   # e.g. "metrics": the submission cannot read its output
    sys.exit(f"error: --pred={pred}: the {config.task} submission is written from the "
             f"output of {' or '.join(map(repr, preds))}; pass one of them (or leave --pred "
             "out), or use launch.evaluate for metrics.")
  seconds = []
  try:
    step, rows = training.predict_checkpoint(config, workdir, task, FLAGS.split,
                                             step=FLAGS.step, pred=pred, seconds=seconds)
    lines = task.submission(config, rows)
  except ValueError as err:
    sys.exit(f"error: {err}")
  utils.write_jsonl(FLAGS.output, lines)
  print(json.dumps({"step": step, "pred": pred, "rows": len(lines), "output": FLAGS.output,
                    **utils.rows_per_second(rows, seconds)}))


if __name__ == "__main__":
  evaluate.define_config_flag(sys.argv)
  launch.run_app(main)

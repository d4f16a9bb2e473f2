r"""Evaluates a checkpoint with the evaluators of its config (no training, nothing written).

    python -m launch.evaluate --workdir=/tmp/recall                  # latest checkpoint
    python -m launch.evaluate --workdir=/tmp/babi/qa1 --best         # early stopping's best
    python -m launch.evaluate --workdir=/tmp/recall --step=5000 --evals=test \
        --config.evals.test.batches=10

The config is the task's default (``--task``, ``--variant``) updated with the run's
``<workdir>/config.json`` (written by ``launch.train``), then ``--config.FIELD=VALUE``.
Each evaluator reads the batches of its final run: ``batches_at_end`` where its entry
sets it (the small PTB setting's ``eval``: 0, the whole split), else ``batches``.
Prints one JSON line: the step and every evaluator's metrics.
"""

import json
import os
import sys

import launch
from absl import flags, logging
from ml_collections import config_flags

import tasks
from rumjax import configs, utils

flags.DEFINE_string("workdir", None, "The training run's workdir.", required=True)
flags.DEFINE_bool("best", False, "Evaluate <workdir>/best (kept by early stopping) instead.")
flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).")
flags.DEFINE_list("evals", None, "Evaluators to run (keys of config.evals; default: all).")
flags.DEFINE_string("task", None, "Task (default: the one in <workdir>/config.json).")
flags.DEFINE_string("variant", None, "Variant (default: the one in <workdir>/config.json).")
flags.DEFINE_string("cpu_devices", None, "CPU devices for sharded evaluation, or 'auto'.")
FLAGS = flags.FLAGS


def define_config_flag(argv) -> None:
  """``--config``: the task's default config updated with the run's saved config."""
  workdir = configs.argv_value(argv, "workdir") or ""
  try:
    saved = utils.read_json(os.path.join(workdir, "config.json"), {})
  except ValueError as err:
    sys.exit(f"error: {err}")
  for flag in ("task", "variant"):   # the saved config would silently replace them
    given = configs.argv_value(argv, flag)
    if saved and given is not None and given != saved.get(flag):
      sys.exit(f"error: --{flag}={given}, but the run in {workdir} was trained with "
               f"{flag} {saved.get(flag)!r} (its config.json); leave --{flag} out.")
  name = configs.argv_value(argv, "task") or saved.get("task")
  if not name:
    if launch.help_requested(argv) is not None:
      return   # the help of the flags alone: there is no run to take a config from
    sys.exit(f"error: {no_config_message(workdir)}")
  try:
    tasks.import_modules(saved.get("imports"))   # the run's own task (launch.train --imports)
    config = tasks.get_task(name).get_config(
        configs.argv_value(argv, "variant") or saved.get("variant"))
    configs.update_from_dict(config, saved)
    configs.check_no_identity_overrides(argv)
    configs.check_fields(config, configs.override_paths(argv))
  except ValueError as err:
    sys.exit(f"error: {err}")
  config_flags.DEFINE_config_dict("config", config, "The run's config; override fields "
                                  "with --config.FIELD=VALUE.")


def no_config_message(workdir: str) -> str:
  """Why ``workdir`` gives no config, the real problem first: no training run there at all
  (no checkpoints: ``--task`` would not help), or checkpoints without ``config.json`` (then
  ``--task`` and ``--variant`` are needed)."""
  config_path = os.path.join(workdir, "config.json")
  if not workdir:
    return "pass --workdir, the workdir of a training run."
  if not os.path.isdir(workdir):
    what = "is a file" if os.path.exists(workdir) else "does not exist"
    return f"workdir {workdir!r} {what}; pass the --workdir of a training run."
  if not any(os.path.isdir(os.path.join(workdir, *sub, "checkpoints"))
             for sub in ((), ("best",))):
    return (f"no training run in {workdir!r} (no checkpoints/ and no config.json); pass the "
            "--workdir of a training run.")
  return f"no {config_path}; pass --task (and --variant) of the run."


def setup():
  """(the run's config, its task, the checkpoint directory) from the flags, CPU devices
  set; one-line exit on bad input. Shared with ``launch.predict``."""
  logging.get_absl_handler().addFilter(utils.QuietOrbax())
  from rumjax import sharding
  try:
    sharding.use_cpu_devices(FLAGS.cpu_devices)
    launch.warn_cpu_devices(FLAGS.cpu_devices)
    config = FLAGS.config
    task = tasks.get_task(config.task)
    task.validate_config(config)
  except ValueError as err:
    sys.exit(f"error: {err}")
  workdir = os.path.join(FLAGS.workdir, "best") if FLAGS.best else FLAGS.workdir
  if FLAGS.best and not os.path.isdir(os.path.join(workdir, "checkpoints")):
    sys.exit(f"error: --best: {FLAGS.workdir} kept no best checkpoint ({workdir} is "
             "empty or missing): the run had no early stopping (config."
             "early_stopping_metric) or stopped before its first evaluation; leave --best "
             "out to use its latest checkpoint.")
  return config, task, workdir


def main(argv):
  del argv
  config, task, workdir = setup()
  from rumjax import training
  try:
    metrics = training.evaluate_checkpoint(config, workdir, task, step=FLAGS.step,
                                           names=FLAGS.evals)
  except ValueError as err:
    sys.exit(f"error: {err}")
  print(json.dumps(metrics, default=float))


if __name__ == "__main__":
  define_config_flag(sys.argv)
  launch.run_app(main)

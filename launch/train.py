r"""Trains a task of the zoo with the generic loop.

    python -m launch.train --task=copying --cell=rum --workdir=/tmp/copying
    python -m launch.train --task=recall --variant=T50 --cell=gru --workdir=/tmp/recall \
        --config.learning_rate=1e-3 --steps=2000

The config starts from the task's ``get_config(variant)`` (the paper's settings); any
field can be overridden with ``--config.FIELD=VALUE`` (the model's fields under
``--config.model.FIELD``, e.g. ``--config.model.lam=0``); ``--cell``, ``--steps``, ``--batch_size``,
``--seed``, ``--eval_every`` and ``--checkpoint_every`` are shortcuts for the config fields
of the same meaning. Re-running with the same ``--workdir`` resumes from the latest
checkpoint, if the saved config agrees on everything that shapes the run (else a one-line
error naming the fields; ``rumjax.configs.RESUME_MAY_CHANGE`` lists what may change); a
workdir in use by another run is refused. SIGTERM/SIGINT, from the first second, save what
there is and exit 0. ``--steps=0`` builds the model, prints its parameter count and exits.

Multi-host (TPU pods, several GPU hosts, or processes on one machine for testing): pass
``--distributed``; on TPU/SLURM ``jax.distributed.initialize()`` finds its peers, elsewhere
also pass ``--coordinator_address``, ``--num_processes`` and ``--process_id``.
"""

import signal

# Before any other import (JAX, the tasks): a Ctrl-C or SIGTERM from the first second is
# recorded here, then handed to the loop's StopRequest, which stops cleanly.
_EARLY_SIGNALS = []
if __name__ == "__main__":
  for _sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(_sig, lambda signum, frame: _EARLY_SIGNALS.append(signum))

import json
import sys

import launch
from absl import flags, logging
from ml_collections import config_flags

import tasks
from rumjax import configs, utils

flags.DEFINE_string("task", "copying", f"Task to train: one of {tasks.task_names()}, or "
                    "one registered by --imports.")
flags.DEFINE_string("imports", None, "Comma-separated modules imported first: your own "
                    "tasks, cells, models and evaluators register themselves on import "
                    "(e.g. --imports=my_project.tasks; WORKSPACE.md, 'Adding a task').")
flags.DEFINE_string("variant", None, "Named variant of the task's config (e.g. T200 for "
                    "copying, T50 for recall); default: the task's small CPU setting.")
flags.DEFINE_string("cell", None, "Recurrent cell by name (e.g. rum, gru, lstm); "
                    "default: the task's config.model.cell.")
flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics.jsonl and "
                    "TensorBoard files; re-using it resumes the run.", required=True)
flags.DEFINE_integer("steps", None, "Number of training steps (config.num_steps); 0 only "
                     "builds the model and prints its parameter count.")
flags.DEFINE_integer("batch_size", None, "Global batch size (config.batch_size).")
flags.DEFINE_integer("seed", None, "Random seed (config.seed).")
flags.DEFINE_integer("eval_every", None, "Run the periodic evaluators every N steps "
                     "(config.eval_every).")
flags.DEFINE_integer("checkpoint_every", None, "Save a checkpoint every N steps "
                     "(config.checkpoint_every).")
flags.DEFINE_float("budget_minutes", None, "Stop after this much wall-clock time in this "
                   "invocation (compilation included), save, run the final evaluation.")
flags.DEFINE_string("cpu_devices", None, "CPU only: number of CPU devices for the "
                    "data-parallel loop, or 'auto' (one per core). Default: JAX's (one). "
                    "Faster for RUM lam=1 on multi-core CPUs; the batch must divide evenly.")
flags.DEFINE_bool("distributed", False, "Call jax.distributed.initialize() (multi-host).")
flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (--distributed).")
flags.DEFINE_integer("num_processes", None, "Number of processes (--distributed).")
flags.DEFINE_integer("process_id", None, "This process's index (--distributed).")
flags.DEFINE_enum("cpu_collectives", "gloo", ["gloo", "mpi", "none"],
                  "Collectives for multi-process CPU runs (--distributed).")

FLAGS = flags.FLAGS


def define_config_flag(argv) -> None:
  """Defines ``--config`` from the task's (and variant's) default config; exits with one
  line if the task, the variant or a ``--config.FIELD`` is unknown."""
  name = configs.argv_value(argv, "task", "copying")
  try:
    tasks.import_modules(configs.argv_value(argv, "imports"))
    task = tasks.get_task(name)
    config = task.get_config(configs.argv_value(argv, "variant"))
    configs.check_no_identity_overrides(argv)
    configs.check_fields(config, configs.override_paths(argv))
  except ValueError as err:
    sys.exit(f"error: {err}")
  config_flags.DEFINE_config_dict(
      "config", config, f"The config of task {name!r}; override fields with "
      "--config.FIELD=VALUE (see the task module for their meaning).")


def build_config(argv):
  """The final config: task defaults, then ``--config.*``, then the shortcut flags."""
  config = FLAGS.config
  overridden = set(configs.override_paths(argv))
  with config.unlocked():
    if FLAGS.imports is not None:
      config.imports = FLAGS.imports   # recorded: launch.evaluate etc. import them too
    if FLAGS.cell is not None:
      if "cell" not in config.model:   # it would be recorded and ignored
        sys.exit(f"error: --cell={FLAGS.cell}: the {FLAGS.task} model "
                 f"({config.model.get('name')}) has no recurrent cell to choose; leave "
                 "--cell out (--variant chooses its configuration).")
      config.model.cell = FLAGS.cell
    task = tasks.get_task(FLAGS.task)
    if "model.hidden_size" not in overridden and task.hidden_size_for is not None:
      config.model.hidden_size = task.hidden_size_for(config.model.cell, config.model.lam)
    for flag, field in [("steps", "num_steps"), ("batch_size", "batch_size"),
                        ("seed", "seed"), ("eval_every", "eval_every"),
                        ("checkpoint_every", "checkpoint_every")]:
      if FLAGS[flag].value is not None:
        config[field] = FLAGS[flag].value
  return config


def _init_distributed():
  import jax
  if FLAGS.cpu_collectives != "none":
    jax.config.update("jax_cpu_collectives_implementation", FLAGS.cpu_collectives)
  jax.distributed.initialize(coordinator_address=FLAGS.coordinator_address,
                             num_processes=FLAGS.num_processes, process_id=FLAGS.process_id)


def main(argv):
  from rumjax import training
  with training.StopRequest() as stop:
    if _EARLY_SIGNALS:
      stop.request()
    _main(stop)


def _main(stop):
  logging.get_absl_handler().addFilter(utils.QuietOrbax())
  from rumjax import sharding, training
  from rumjax.training import determinism
  determinism.use_deterministic_gpu_ops()   # before JAX runs: exact resume on a GPU (#44)
  try:
    sharding.use_cpu_devices(FLAGS.cpu_devices)
  except ValueError as err:
    sys.exit(f"error: {err}")
  launch.warn_cpu_devices(FLAGS.cpu_devices)
  peers = [f"--{name}" for name in ("coordinator_address", "num_processes", "process_id",
                                      "cpu_collectives") if FLAGS[name].present]
  if peers and not FLAGS.distributed:   # one process would train alone, silently
    sys.exit(f"error: {', '.join(peers)} only apply with --distributed; add it (or leave "
             "them out for one process).")
  if FLAGS.distributed:
    _init_distributed()
  import jax

  task = tasks.get_task(FLAGS.task)
  config = build_config(sys.argv)
  try:
    task.validate_config(config)
  except ValueError as err:
    sys.exit(f"error: invalid config: {err}")
  # The config is logged by the loop once the run really starts: a refused start (a
  # resume with another config, a batch that does not divide, missing data) ends with
  # its one-line error, not after a page of config.
  logging.info("Task %s, %d process(es), %d device(s).", FLAGS.task, jax.process_count(),
               jax.device_count())
  if config.num_steps == 0:
    print(json.dumps({"task": FLAGS.task, "model": config.model.get("name"),
                      "cell": config.model.get("cell"),
                      "hidden_size": config.model.get("hidden_size"),
                      "num_params": training.count_model_params(task, config)}))
    return
  try:
    hooks = []
    training.check_budget_minutes(FLAGS.budget_minutes)
    if FLAGS.budget_minutes is not None:
      hooks.append(training.TimeBudget(60.0 * FLAGS.budget_minutes))
    summary = training.train_and_evaluate(config, FLAGS.workdir, task, hooks=hooks,
                                          stop=stop)
  except (ValueError, training.NonFiniteError) as err:
    sys.exit(f"error: {err}")
  summary.pop("params", None)
  if jax.process_index() == 0:
    print(json.dumps({k: v for k, v in summary.items()}, default=float))


if __name__ == "__main__":
  define_config_flag(sys.argv)
  launch.run_app(main)

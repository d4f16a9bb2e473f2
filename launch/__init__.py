"""Thin absl entry points, one module per command; the logic is in rumjax/ and tasks/."""

import logging as std_logging
import os
import sys
from typing import Any, Callable, Iterator, Optional, Sequence

from absl import app, flags, logging

# The help flags, and whether each asks for the launcher's own flags only (absl's --help)
# rather than every flag (--helpfull).
HELP_FLAGS = {"--help": True, "-help": True, "-?": True, "--helpshort": True,
              "-helpshort": True, "--helpfull": False, "-helpfull": False}


class QuietLibtpu(std_logging.Filter):
  """Drops JAX's INFO line "Unable to initialize backend 'tpu': ... Failed to open
  libtpu.so" that every launch prints on a machine without a TPU (nothing is wrong)."""

  def filter(self, record):
    return not (record.levelno < std_logging.WARNING and "libtpu.so" in record.getMessage())


std_logging.getLogger("jax._src.xla_bridge").addFilter(QuietLibtpu())


def cpu_devices_warning(value: Optional[str], cores: Optional[int]) -> Optional[str]:
  """A line if ``--cpu_devices`` asks for more CPU devices than ``cores`` (then several
  devices share a core and the data-parallel loop runs slower than with one per core),
  else ``None``."""
  if value is None or value == "auto" or not cores:
    return None
  try:
    count = int(value)
  except ValueError:
    return None
  if count <= cores:
    return None
  return (f"--cpu_devices={count} is more than the {cores} core(s) of this machine: "
          "devices beyond one per core share cores and make each step slower; use "
          f"--cpu_devices=auto ({cores}).")


def warn_cpu_devices(value: Optional[str]) -> None:
  """Logs :func:`cpu_devices_warning` for this machine's core count, if any."""
  line = cpu_devices_warning(value, os.cpu_count())
  if line:
    logging.warning(line)


# The files that make a folder a run's: a training workdir (config.json, metrics.jsonl,
# checkpoints/) or an experiment's folder (results.json). No launcher output goes there.
RUN_FILES = ("config.json", "metrics.jsonl", "checkpoints", "results.json")
OVERWRITE_HELP = "Replace output files that already exist (else they are an error)."


def output_problem(flag: str, path: Optional[str], *, folder: bool = False,
                   suffix: Optional[str] = None, files: Sequence[str] = (),
                   runs: Optional[Sequence[str]] = None,
                   overwrite: Optional[bool] = None) -> Optional[str]:
  """Why ``--flag=path`` cannot be written (a folder with ``folder``, else a file, ending
  in ``suffix`` if given), or ``None``: checked before a launcher's work, so that minutes
  of computation do not end in a ``FileExistsError``. Missing folders are created later.

  The policy (nothing saved is lost): ``files`` are the files written for the flag besides
  ``path`` itself (a folder's contents, a companion beside a file). With ``runs`` (the
  workdirs / experiment folders the command reads; ``None``: not checked, for a launcher
  that writes into its run on purpose) no output may lie inside one of them, nor in any
  folder holding a run's :data:`RUN_FILES`. With ``overwrite=False`` (the launcher's
  ``--overwrite`` flag; ``None``: not checked) no output may already exist."""
  if not path:
    return None
  if folder and os.path.exists(path) and not os.path.isdir(path):
    return f"--{flag}={path} is a file; pass a folder (it is created if missing)."
  if not folder:
    if os.path.isdir(path):
      return f"--{flag}={path} is a folder; pass the path of the file to write."
    if suffix and not path.endswith(suffix):
      return f"--{flag}={path} must end in {suffix}."
  parent = os.path.dirname(os.path.abspath(path))
  while not os.path.exists(parent):
    parent = os.path.dirname(parent)
  if not os.path.isdir(parent):
    return f"--{flag}={path}: {parent} is a file, so no folder can be made there."
  target = os.path.realpath(path if folder else os.path.dirname(os.path.abspath(path)))
  for run in filter(None, runs or ()):
    if os.path.commonpath([target, os.path.realpath(run)]) == os.path.realpath(run):
      return (f"--{flag}={path} lies inside {run}, a run this command reads; write its "
              "output outside the run.")
  owned = [name for name in RUN_FILES if os.path.exists(os.path.join(target, name))]
  if runs is not None and owned:
    return (f"--{flag}={path} would write into {target}, the folder of a run (it holds "
            f"{owned[0]}); write its output outside the run.")
  if overwrite is False:
    for name in ([] if folder else [path]) + list(files):
      if os.path.exists(name):
        return (f"--{flag}={path}: {name} already exists; pass --overwrite to replace it, "
                f"or another --{flag}.")
  return None


def given_flags(values) -> set[str]:
  """The names of the flags given on the command line (absl's ``present``)."""
  return {name for name in values if values[name].present}


def list_problem(flag: str, values: Optional[Sequence[str]]) -> Optional[str]:
  """Why ``--flag`` (a list flag the command needs) is empty, e.g. ``--workdirs=$UNSET``,
  or ``None``."""
  if values is not None and (not values or "" in values):
    return (f"--{flag}={','.join(values)} is empty or has an empty entry; pass the "
            "folders, comma separated (is a shell variable unset?).")
  return None


def check_outputs(*problems: Optional[str]) -> None:
  """Exits with the first of :func:`output_problem`'s (or :func:`list_problem`'s) answers
  that is not ``None``."""
  for problem in problems:
    if problem:
      sys.exit(f"error: {problem}")


def help_requested(argv: Sequence[str]) -> Optional[bool]:
  """``True`` (short help) or ``False`` (full help) if ``argv`` asks for help, else ``None``
  (arguments after ``--`` are not flags)."""
  for arg in argv[1:]:
    if arg == "--":
      return None
    if arg in HELP_FLAGS:
      return HELP_FLAGS[arg]
  return None


def config_lines(config: Any, prefix: str = "--config.") -> Iterator[str]:
  """Every leaf field of a (nested) ``ConfigDict`` as the flag that sets it with its
  default, e.g. ``--config.model.hidden_size=100``: the dotted name shows which fields live
  under ``--config.model.`` (and ``--config.evals.<name>.``)."""
  for key in sorted(config.keys()):
    value = config[key]
    if hasattr(value, "keys") and hasattr(value, "items"):
      yield from config_lines(value, f"{prefix}{key}.")
    else:
      yield f"{prefix}{key}={value!r}"


def help_text(short: bool, flag_values: flags.FlagValues = flags.FLAGS,
              doc: Optional[str] = None) -> str:
  """The usage of the running launcher: its docstring, its own flags (``short``) or every
  flag, and, when it has a ``--config``, each config field on its own line
  (:func:`config_lines`) instead of absl's unindented dump of the whole config."""
  if doc is None:
    doc = sys.modules["__main__"].__doc__ or ""
  config = flag_values["config"].value if "config" in flag_values else None
  if config is not None:
    flag_values["config"].default_as_str = None   # listed field by field below
  body = flag_values.main_module_help() if short else flag_values.get_help()
  if short:   # flags a launcher takes from another (launch.predict: launch.evaluate's)
    for module in getattr(sys.modules["__main__"], "FLAGS_FROM", ()):
      body += "\n" + flag_values.module_help(module)
  parts = [doc.strip(), "flags:\n" + body if short else body]
  if config is not None:
    parts.append("config fields (set any with --config.FIELD=VALUE):\n"
                 + "\n".join("  " + line for line in config_lines(config)))
  if short:
    parts.append("Try --helpfull to get a list of all flags.")
  return "\n\n".join(p for p in parts if p) + "\n"


def exit_on_help(argv: Sequence[str] = sys.argv) -> None:
  """Prints :func:`help_text` and exits 0 if ``argv`` asks for help (absl's own help exits
  1 and prints a nested config without its indentation). Call after the flags are
  defined, before ``app.run``."""
  short = help_requested(argv)
  if short is not None:
    sys.stdout.write(help_text(short))
    sys.exit(0)


def run_app(main: Callable, argv: Sequence[str] = sys.argv) -> None:
  """``app.run(main)``, answering ``--help`` / ``--helpfull`` first (:func:`exit_on_help`)."""
  exit_on_help(argv)
  app.run(main)


def run_cli(define_flags: Callable[[], None], run: Callable) -> None:
  """The body of every entry point: defines the flags, parses them and calls
  ``run(flags.FLAGS)``, with Orbax's routine log lines filtered."""
  from rumjax import utils
  define_flags()

  def main(argv):
    del argv
    logging.get_absl_handler().addFilter(utils.QuietOrbax())
    run(flags.FLAGS)

  run_app(main)

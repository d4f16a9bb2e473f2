"""Config helpers: dotted field names, overrides checked with a one-line error.

    >>> check_fields(config, ["model.lam", "learning_rat"])
    ValueError: unknown config field 'learning_rat' (closest: learning_rate); ...
"""

import difflib
import json
import os
from typing import Any, Callable, Iterable, Mapping

from rumjax import registry, utils


def field_paths(config: Mapping[str, Any], prefix: str = "") -> list[str]:
  """Every field of a (nested) config as a dotted path: ``["model.lam", "seed", ...]``;
  a nested config is listed too (``"model"``)."""
  out = []
  for key in config.keys():
    path = f"{prefix}{key}"
    out.append(path)
    value = config[key]
    if hasattr(value, "keys") and callable(value.keys):
      out.extend(field_paths(value, f"{path}."))
  return out


def check_fields(config: Mapping[str, Any], paths: Iterable[str]) -> None:
  """``ValueError`` naming the first of ``paths`` that is not a field of ``config``, with
  the closest known fields."""
  known = field_paths(config)
  for path in paths:
    if path not in known:
      close = difflib.get_close_matches(path, known, n=3, cutoff=0.5)
      hint = (f"closest: {', '.join(close)}" if close else
              f"top-level fields: {', '.join(k for k in known if '.' not in k)}")
      task = config.get("task") if hasattr(config, "get") else None
      where = f"--task={task} " if task else ""
      raise ValueError(f"unknown config field {path!r} ({hint}); `python -m launch.train "
                       f"{where}--helpfull` lists every field, nested ones as "
                       "--config.model.FIELD.")


def argv_value(argv: Iterable[str], name: str, default: Any = None) -> Any:
  """The value of ``--name=V`` / ``--name V`` in ``argv`` (the last one wins, as in absl),
  for the flags that must be read before the others parse (the task decides ``--config``)."""
  argv, value = list(argv), default
  for i, arg in enumerate(argv):
    if arg.startswith(f"--{name}="):
      value = arg.split("=", 1)[1]
    elif arg == f"--{name}" and i + 1 < len(argv):
      value = argv[i + 1]
  return value


def override_paths(argv: Iterable[str], flag: str = "config") -> list[str]:
  """The fields that ``--config.FIELD=VALUE`` / ``--config.FIELD VALUE`` arguments set."""
  out = []
  start = f"--{flag}."
  for arg in argv:
    if arg.startswith(start):
      out.append(arg[len(start):].split("=", 1)[0])
  return out


def check_no_identity_overrides(argv: Iterable[str]) -> None:
  """``ValueError`` for ``--config.task`` / ``--config.variant``: the task and variant pick
  the config itself (a changed field would be recorded and not used: ``--config.variant=T200``
  trained the default config under the name T200); ``--task`` / ``--variant`` choose them."""
  for field in ("task", "variant"):
    if field in override_paths(argv):
      raise ValueError(f"--config.{field}: the {field} chooses the config itself, it is not a "
                       f"field to override; use --{field} instead.")


def set_fields(config, updates: Mapping[str, Any]) -> None:
  """Sets dotted fields (``{"model.lam": 0, "seed": 1}``) of a ConfigDict in place;
  ``ValueError`` for an unknown field (see :func:`check_fields`) or a value of another type
  than the field's (``model.eta=abc`` for a float)."""
  check_fields(config, updates)
  with config.unlocked():
    for path, value in updates.items():
      *parents, leaf = path.split(".")
      node = config
      for p in parents:
        node = node[p]
      try:
        node[leaf] = value
      except TypeError as err:   # ml_collections keeps each field's type
        raise ValueError(f"{path}={value!r} is not of the field's type "
                         f"({node.get_type(leaf).__name__}; now {node[leaf]!r}).") from err


def update_from_dict(config, values: Mapping[str, Any], prefix: str = "") -> None:
  """Sets the fields of ``config`` from a plain nested dict (e.g. a run's ``config.json``),
  keeping ``config``'s types, placeholders and references; ``ValueError`` for a field the
  config does not have."""
  with config.unlocked():
    for key, value in values.items():
      path = f"{prefix}{key}"
      if key not in config:
        raise ValueError(f"config field {path!r} (from the saved config) is not a field of "
                         "this task's config; was it saved by another version?")
      if isinstance(value, Mapping) and hasattr(config[key], "keys"):
        update_from_dict(config[key], value, f"{path}.")
      else:
        config[key] = value


def load_workdir_config(workdir: str, get_task: Callable[[str], Any]):
  """``(task, config)`` of a training workdir: the task's ``get_config(variant)``
  updated with ``<workdir>/config.json`` (as ``launch.evaluate`` reads it).

  Raises:
    ValueError: one line naming the missing folder or ``config.json``.
  """
  if not os.path.isdir(workdir):
    raise ValueError(f"no training workdir at {workdir!r}.")
  path = os.path.join(workdir, "config.json")
  if not os.path.isfile(path):
    raise ValueError(f"no {path!r}: {workdir!r} is not a training workdir.")
  saved = utils.read_json(path)
  if not isinstance(saved, dict) or "task" not in saved:
    raise ValueError(f"{path} has no 'task': it is not a training run's config.json.")
  registry.import_modules(saved.get("imports"))   # a task of the user's own (--imports)
  task = get_task(saved["task"])
  config = task.get_config(saved.get("variant"))
  update_from_dict(config, saved)
  return task, config


# The fields a resumed run may change: how long it trains, how often it logs, evaluates
# and saves, what and how much it evaluates, and where its data lives. Everything else
# (the model, the optimizer and its hyperparameters, the seed, the batch size and the data
# layout) shapes the state or the run's trajectory and must match the workdir's config.
RESUME_MAY_CHANGE = (
    "num_steps", "log_every", "eval_every", "checkpoint_every", "keep_checkpoints",
    "evals", "eval_batch_size", "rouge_every", "rouge_batches", "beam_size",
    "max_decode_steps", "num_dev", "num_test", "num_eval", "early_stopping_patience",
    "init_from", "data_dir", "manual_dir", "ood_manual_dir", "imports")


# Fields added to the configs after runs were saved without them, with the value that
# reproduces what those runs did: a saved config lacking one of them resumes (and counts as
# the same run) when the new config holds this value. Add a field here whenever a new
# config field's default keeps the old behaviour.
ADDED_FIELDS = {
    "model.learn_lam": False,        # issue 29: RUM's lam learned (2026-11-26)
    "model.slow_learn_lam": False,   # the same for the slow RUM of an FS-RUM-2
    "init_uniform": 0.0,             # issue 31: every parameter U(-s, s) (2026-11-26)
    "model.memory_span": 0,          # issue 31: the PTB LSTMN's attention span
    "warmup_steps": 0,               # issue 32: a linear warm-up of the rate
    "difficulty": "easy",            # issue 32: summ_synthetic's hard variant (2026-11-26)
    "model.precision": "default",    # issue 44: the matmul precision (2026-11-27)
    "imports": "",                   # launch.train --imports recorded (2026-11-29)
    "data_seed": None,               # summ_synthetic's examples apart from the seed (11-29)
}


def fill_added_fields(saved: Mapping[str, Any], new: Mapping[str, Any]) -> dict:
  """``saved`` (a ``config.json``) with every field of :data:`ADDED_FIELDS` that it lacks
  and that ``new`` holds at its old-behaviour value filled in with that value."""
  out = json.loads(json.dumps(saved))
  flat_saved, flat_new = _flat(saved), _flat(new)
  for path, value in ADDED_FIELDS.items():
    if path not in flat_saved and path in flat_new and flat_new[path] == value:
      *parents, leaf = path.split(".")
      node = out
      for key in parents:
        if not isinstance(node.get(key), dict):
          break
        node = node[key]
      else:
        node[leaf] = value
  # Every evaluator entry gained batches_at_end (None: its batches) on 2026-11-29.
  new_evals = new.get("evals") if isinstance(new.get("evals"), Mapping) else {}
  for name, entry in (out.get("evals") or {}).items():
    new_entry = new_evals.get(name)
    if (isinstance(entry, dict) and isinstance(new_entry, Mapping)
        and "batches_at_end" not in entry and "batches_at_end" in new_entry
        and new_entry["batches_at_end"] is None):
      entry["batches_at_end"] = None
  return out


def _flat(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
  out = {}
  for key, value in values.items():
    if isinstance(value, Mapping):
      out.update(_flat(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out


def _may_change(path: str, may_change: Iterable[str]) -> bool:
  return any(path == f or path.startswith(f + ".") for f in may_change)


def resume_differences(saved: Mapping[str, Any], new: Mapping[str, Any],
                       may_change: Iterable[str] = RESUME_MAY_CHANGE
                       ) -> list[tuple[str, Any, Any]]:
  """The fields that differ between a workdir's saved config and a new run's, leaving out
  ``may_change`` (a field or a whole sub-config such as ``"evals"``), as sorted
  ``(dotted path, saved value, new value)``; a field missing on one side is ``"<absent>"``,
  except a field of :data:`ADDED_FIELDS` missing in ``saved`` that ``new`` holds at its
  old-behaviour value. Both are compared as JSON (``saved`` is a ``config.json``; pass
  ``new`` through :func:`as_json`)."""
  a, b = _flat(fill_added_fields(saved, new)), _flat(new)
  absent = "<absent>"
  return [(path, a.get(path, absent), b.get(path, absent))
          for path in sorted(set(a) | set(b))
          if not _may_change(path, may_change) and a.get(path, absent) != b.get(path, absent)]


def as_json(config) -> dict:
  """``config`` as the plain dict ``config.json`` holds (tuples as lists, NumPy scalars
  as floats), for comparing with a saved one."""
  values = config.to_dict() if hasattr(config, "to_dict") else config
  return json.loads(json.dumps(values, default=float))


def format_differences(diffs: Iterable[tuple[str, Any, Any]]) -> str:
  """``"config.model.hidden_size: 8 in the workdir, 16 now; ..."``."""
  return "; ".join(f"config.{path}: {old!r} in the workdir, {new!r} now"
                   for path, old, new in diffs)

"""The zoo's tasks, one module each (see WORKSPACE.md, "The task contract"), by name.

    >>> task = tasks.get_task("copying")
    >>> config = task.default_config()        # or default_config("T500")
    >>> task.validate_config(config)

Every module ``tasks/<name>.py`` that defines ``NAME`` and the contract's functions is a
task: it is registered under ``NAME`` the first time the registry is read, so adding a
task touches only its own module.
"""

import importlib
import pkgutil
from types import ModuleType

from rumjax.registry import Registry

TASKS = Registry("task")
_CONTRACT = ("NAME", "default_config", "validate_config", "train_data", "eval_data",
             "build_model", "loss_and_metrics")
_HELPERS = {"common", "clue", "summarization"}  # modules of this package that are not tasks


def _discover() -> None:
  if TASKS:
    return
  for info in pkgutil.iter_modules(__path__):
    if info.ispkg or info.name.startswith("_") or info.name in _HELPERS:
      continue
    module = importlib.import_module(f"{__name__}.{info.name}")
    if all(hasattr(module, attr) for attr in _CONTRACT):
      TASKS.register(module.NAME, module)


def task_names() -> list[str]:
  """The known task names, sorted."""
  _discover()
  return TASKS.names()


def get_task(name: str) -> ModuleType:
  """The task module ``name``; ``ValueError`` naming the close and the known tasks."""
  _discover()
  return TASKS.get(name)

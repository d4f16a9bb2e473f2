"""The zoo's tasks by name (see WORKSPACE.md, "The task contract").

    >>> task = tasks.get_task("copying")
    >>> config = task.get_config()        # or get_config("T500")
    >>> task.validate_config(config)

A task is a :class:`tasks.base.Task` defined at module level in ``tasks/<module>.py``
(its config in ``tasks/configs/<name>.py``); the first lookup imports the modules of
this package and registers every ``Task`` they define under its ``name``, so adding a
task touches only its own files. :func:`register_task` adds one from elsewhere (a
notebook, a test, a project of your own).
"""

import importlib
import pkgutil

from rumjax import registry
from rumjax.registry import Registry
from tasks.base import Task

TASKS = Registry("task")


def register_task(task: Task) -> Task:
  """Registers ``task`` under ``task.name`` (the same object again is a no-op)."""
  if not isinstance(task, Task):
    raise TypeError(f"register_task takes a tasks.base.Task, got {type(task).__name__}.")
  return TASKS.register(task.name, task)


import_modules = registry.import_modules


def _discover() -> None:
  if getattr(_discover, "done", False):
    return
  for info in pkgutil.iter_modules(__path__):
    if info.ispkg or info.name.startswith("_"):
      continue
    module = importlib.import_module(f"{__name__}.{info.name}")
    for value in vars(module).values():
      if isinstance(value, Task):
        register_task(value)
  _discover.done = True


def task_names() -> list[str]:
  """The known task names, sorted."""
  _discover()
  return TASKS.names()


def get_task(name: str) -> Task:
  """The task ``name``; ``ValueError`` naming the close and the known tasks."""
  _discover()
  return TASKS.get(name)

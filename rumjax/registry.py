"""One way to find things by name: cells, models, evaluators, optimizers and tasks.

    >>> MODELS = Registry("model")
    >>> @MODELS.register("tagger")
    ... class SequenceTagger(nn.Module): ...
    >>> MODELS.get("tagger")
    >>> MODELS.get("taggr")
    ValueError: unknown model 'taggr'; known models are [...]; did you mean 'tagger'?

A registry maps a short name to an object (a class, a function, a module). Registering a
second, different object under a taken name is an error; registering the same object
again is a no-op (modules imported twice, notebooks re-running a cell).
"""

import difflib
import importlib
from typing import Any, Callable, Iterator, Optional


def did_you_mean(name: Any, known) -> str:
  """``did you mean 'x' or 'y'?`` naming the ``known`` names close to ``name``, or ``""``."""
  close = difflib.get_close_matches(str(name), sorted(known), n=3, cutoff=0.6)
  return f"did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def unknown_name_message(kind: str, name: Any, known) -> str:
  """``unknown <kind> 'x'; known <kind>s are [...]; did you mean 'y'?`` (one line)."""
  known = sorted(known)
  hint = did_you_mean(name, known)
  return f"unknown {kind} {name!r}; known {kind}s are {known}" + (f"; {hint}" if hint else ".")


class Registry:
  """Objects by short name, with a one-line error for an unknown name.

  Attributes:
    kind: what the entries are (``"cell"``, ``"model"``, ...), used in error messages.
  """

  def __init__(self, kind: str):
    self.kind = kind
    self._entries: dict[str, Any] = {}

  def register(self, name: str, obj: Optional[Any] = None) -> Any:
    """Registers ``obj`` under ``name``; without ``obj``, a decorator that does."""

    def add(obj):
      if not isinstance(name, str) or not name:
        raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r}.")
      if name in self._entries and self._entries[name] is not obj:
        raise ValueError(f"a {self.kind} is already registered as {name!r}: "
                         f"{self._entries[name]!r}.")
      self._entries[name] = obj
      return obj

    return add if obj is None else add(obj)

  def get(self, name: str) -> Any:
    """The entry ``name``; ``ValueError`` naming the known and the close names if none."""
    if name not in self:
      raise ValueError(unknown_name_message(self.kind, name, self._entries))
    return self._entries[name]

  def names(self) -> list[str]:
    """The registered names, sorted."""
    return sorted(self._entries)

  def __contains__(self, name: Any) -> bool:
    try:
      return name in self._entries
    except TypeError:  # an unhashable name (a list from a config) is not registered
      return False

  def __iter__(self) -> Iterator[str]:
    return iter(self.names())

  def __len__(self) -> int:
    return len(self._entries)

  def items(self) -> list[tuple[str, Any]]:
    return [(n, self._entries[n]) for n in self.names()]


def decorator(registry: Registry) -> Callable[[str], Callable[[Any], Any]]:
  """``register_x = decorator(X)`` gives the ``@register_x("name")`` spelling."""
  return lambda name, obj=None: registry.register(name, obj)


def import_modules(names: Optional[str]) -> None:
  """Imports the comma-separated modules ``names`` (``launch.train --imports``, recorded
  in a run's ``config.imports``): your own tasks, cells, models and evaluators register
  themselves when imported. One-line ``ValueError`` naming a module that cannot be
  imported."""
  for name in filter(None, (n.strip() for n in (names or "").split(","))):
    try:
      importlib.import_module(name)
    except ImportError as err:
      raise ValueError(f"--imports: cannot import {name!r} ({err}); give a module on the "
                       "Python path, e.g. --imports=my_project.tasks.") from err

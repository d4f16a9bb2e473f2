"""The house's layers (WORKSPACE.md, "The layers"): every import of rumjax/, tasks/ and
launch/ points down the list, so no two packages import each other."""

import ast
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# unit -> layer; a unit may import itself and the units of lower layers only.
LAYERS = {
    # The mesh below the equations: the RUM kernel splits the batch over the mesh in
    # context (XLA cannot partition its custom call), so rumjax.core reads it.
    "rumjax.registry": -2, "rumjax.utils": -2,   # names and files: no rumjax import
    "rumjax.sharding": -1,
    "rumjax.core": 0, "rumjax.decoding": 0, "rumjax.metrics": 0, "rumjax.configs": 0,
    "rumjax.cells": 1, "rumjax.layers": 1, "rumjax.evaluators": 1,
    "rumjax.models": 2, "rumjax.training": 2, "rumjax.nnx": 2,
    "rumjax.analysis": 3, "rumjax.benchmarks": 3,
    "rumjax.plotting": 4,
    "rumjax.experiments": 5,
    "rumjax": 6,          # the package's face (rumjax/__init__.py): the public API
    "tasks": 7,
    "launch": 8,
}


def _unit(module: str) -> str:
  """The unit of a dotted module name: its longest prefix in LAYERS."""
  parts = module.split(".")
  for k in range(len(parts), 0, -1):
    if ".".join(parts[:k]) in LAYERS:
      return ".".join(parts[:k])
  return ""


def _module_name(path: str) -> str:
  rel = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
  return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def _imports(path: str):
  """``(line, imported module)`` of every import in the file, in functions too."""
  tree = ast.parse(open(path).read(), path)
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield node.lineno, alias.name
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      for alias in node.names:   # from rumjax import training -> rumjax.training
        yield node.lineno, f"{node.module}.{alias.name}"


def _sources():
  for top in ("rumjax", "tasks", "launch"):
    for root, _, files in os.walk(os.path.join(REPO, top)):
      yield from (os.path.join(root, f) for f in sorted(files) if f.endswith(".py"))


def test_every_import_points_down_the_layers():
  wrong = []
  for path in _sources():
    here = _unit(_module_name(path))
    assert here, f"{path} is in no layer of LAYERS: add its package"
    for line, name in _imports(path):
      there = _unit(name)
      if not there or there == here or (here == "rumjax" and there.startswith("rumjax.")):
        continue
      if LAYERS[there] >= LAYERS[here]:
        wrong.append(f"{os.path.relpath(path, REPO)}:{line} ({here}, layer {LAYERS[here]}) "
                     f"imports {name} ({there}, layer {LAYERS[there]})")
  assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


def test_the_checker_sees_an_arrow_up(tmp_path):
  bad = tmp_path / "bad.py"
  bad.write_text("def f():\n  from rumjax import training\n  import tasks\n")
  assert [name for _, name in _imports(str(bad))] == ["rumjax.training", "tasks"]
  assert _unit("rumjax.training.loop") == "rumjax.training"
  assert LAYERS[_unit("rumjax.training")] > LAYERS[_unit("rumjax.core.rum")]

"""The commands of the README, WORKSPACE.md, RESULTS.md and the usage examples of
``launch/`` run on a fresh clone (issue 32, item 6): no file names a path of one machine,
every ``python -m launch.X`` command names an existing module and only flags it defines,
with values of the flag's kind (an integer, a number, one of an enum's choices, a
registered cell), and every ``--config.FIELD`` is a field of the command's task config.
Nothing is run: the flags are read from the modules' source (their ``DEFINE_*`` calls),
the config fields from ``tasks.get_task(task).get_config(variant)``. Values the text
leaves to the reader (``$c``, ``<folder>``, ``...``) are not checked, their flags are."""

import ast
import functools
import glob
import json
import os
import re
import shlex

import pytest

import tasks
from rumjax import analysis, configs, experiments
from tasks.experiments import EXPERIMENTS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A top-level folder of one machine's file system (not /tmp), e.g. /work/runs/x, /home/me.
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|home|root|mnt|data|Users|scratch|nfs)"
                          r"(?![\w.-])")
# Flags that absl defines for every program.
ABSL_FLAGS = frozenset({
    "help", "helpfull", "helpshort", "helpxml", "flagfile", "undefok", "logtostderr",
    "alsologtostderr", "log_dir", "verbosity", "v", "stderrthreshold",
    "showprefixforinfo", "only_check_args", "pdb", "pdb_post_mortem", "run_with_pdb",
    "run_with_profiling", "profile_file", "use_cprofile_for_profiling", "logger_levels"})
COMMAND = "python -m launch."


def _read(path):
  with open(os.path.join(REPO, path), encoding="utf-8") as f:
    return f.read()


def _scanned_files():
  patterns = ("README.md", "WORKSPACE.md", "RESULTS.md", "launch/*.py", "tasks/experiments/*.py",
              "tasks/configs/*.py", "docs/figures/*.json", "notebooks/*.ipynb")
  return sorted(os.path.relpath(p, REPO) for pattern in patterns
                for p in glob.glob(os.path.join(REPO, pattern)))


# ------------------------------------------------------------------------ commands


def _command_lines(block: str) -> list[str]:
  """The ``python -m launch.X ...`` commands of a shell block (``\\`` continuations
  joined), each from ``python`` on (a ``taskset -c 0`` prefix dropped)."""
  joined = re.sub(r"\\\n", " ", block)
  return [" ".join(line[line.index(COMMAND):].split()) for line in joined.splitlines()
          if COMMAND in line]


def markdown_commands(text: str) -> list[str]:
  """The commands in fenced blocks and in inline code spans of a Markdown text."""
  fences = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.M | re.S)
  outside = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)
  spans = [re.sub(r"\s+", " ", s) for s in re.findall(r"`([^`]+)`", outside)]
  return ([c for block in fences for c in _command_lines(block)]
          + [c for span in spans for c in _command_lines(span)])


def docstring_commands(path: str) -> list[str]:
  """The commands in the module docstring of a Python file."""
  return _command_lines(ast.get_docstring(ast.parse(_read(path)), clean=False) or "")


DOCUMENTS = ("README.md", "WORKSPACE.md", "RESULTS.md")


def all_commands() -> list[tuple[str, str]]:
  """``(where, command)``: the documents, the docstrings of launch/, tasks/experiments/ and
  tasks/configs/."""
  out = [(name, c) for name in DOCUMENTS for c in markdown_commands(_read(name))]
  for pattern in ("launch/*.py", "tasks/experiments/*.py", "tasks/configs/*.py"):
    for path in sorted(glob.glob(os.path.join(REPO, pattern))):
      rel = os.path.relpath(path, REPO)
      out += [(rel, c) for c in docstring_commands(rel)]
  return out


@functools.lru_cache(maxsize=None)
def module_flags(module: str) -> dict:
  """``{flag: (DEFINE kind, default, enum choices or None)}`` of ``launch/<module>.py`` and
  of the launch modules it imports, from their ``DEFINE_*("name", default, ...)`` calls."""
  tree = ast.parse(_read(os.path.join("launch", module + ".py")))
  out = {}
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module == "launch":
      for alias in node.names:
        out.update(module_flags(alias.name))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and node.func.attr.startswith("DEFINE") and node.args
        and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
      default = node.args[1] if len(node.args) > 1 else None
      choices = node.args[2] if len(node.args) > 2 else None
      out[node.args[0].value] = (
          node.func.attr, default.value if isinstance(default, ast.Constant) else None,
          ast.literal_eval(choices) if isinstance(choices, ast.List) else None)
  return out


def _left_to_reader(value: str) -> bool:
  return any(mark in value for mark in ("$", "<", ">", "..."))


def check_value(module: str, name: str, value: str, kind: str, choices) -> None:
  """``AssertionError`` if ``--name=value`` is not of the flag's kind."""
  where = f"launch.{module} --{name}={value}"
  if _left_to_reader(value):
    return
  if kind == "DEFINE_integer":
    assert re.fullmatch(r"[+-]?\d+", value), f"{where}: not an integer"
  elif kind == "DEFINE_float":
    try:
      float(value)
    except ValueError:
      raise AssertionError(f"{where}: not a number") from None
  elif kind in ("DEFINE_bool", "DEFINE_boolean"):
    assert value.lower() in ("true", "false", "1", "0"), f"{where}: not true or false"
  elif kind == "DEFINE_enum" and choices is not None:
    assert value in choices, f"{where}: not one of {choices}"
  if name == "cell" and kind == "DEFINE_string":
    from rumjax.cells.registry import cell_names
    assert value in cell_names(), f"{where}: no such cell (known: {cell_names()})"


def check_command(command: str) -> None:
  """``AssertionError`` naming what in ``command`` would not run."""
  lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
  lexer.whitespace_split = True
  argv = list(lexer)
  argv = argv[:next((i for i, a in enumerate(argv) if a[0] in ";&|"), len(argv))]  # ; done
  assert argv[:2] == ["python", "-m"] and argv[2].startswith("launch."), command
  module = argv[2].split(".", 1)[1]
  assert os.path.isfile(os.path.join(REPO, "launch", module + ".py")), (
      f"no module launch.{module}: {command}")
  known = module_flags(module)
  tasks.import_modules(configs.argv_value(argv, "imports"))   # their cells and tasks
  for arg in argv[3:]:
    if not arg.startswith("--"):
      continue
    name, has_value, value = arg[2:].partition("=")
    if name.startswith("config.") and "config" in known:
      continue                                   # checked against the task's config below
    bool_flag = known.get(name[2:], ("",))[0] in ("DEFINE_bool", "DEFINE_boolean")
    assert name in known or name in ABSL_FLAGS or (name.startswith("no") and bool_flag), (
        f"launch.{module} has no flag --{name}: {command}")
    if name in known and has_value:
      check_value(module, name, value, known[name][0], known[name][2])
  name = configs.argv_value(argv, "task", known.get("task", (None, None))[1])
  if "config" in known and name:     # launch.train (evaluate: the workdir's task if none)
    config = tasks.get_task(name).get_config(configs.argv_value(argv, "variant"))
    configs.check_fields(config, configs.override_paths(argv))
  if module == "reproduce":
    check_reproduce(argv)


def check_reproduce(argv) -> None:
  """The experiments, models, ``--set`` fields and ``--seeds`` of a launch.reproduce
  command exist / parse."""
  from launch import reproduce
  names = configs.argv_value(argv, "experiment").split(",")
  models = configs.argv_value(argv, "models")
  sets = experiments.parse_overrides(
      [a.split("=", 1)[1] for a in argv if a.startswith("--set=")])
  seeds = configs.argv_value(argv, "seeds")
  options = experiments.Options(
      sets=sets, seeds=reproduce.parse_seeds(seeds.split(",")) if seeds else None)
  experiments.check_options(options)
  for name in names:
    assert name in EXPERIMENTS, f"unknown experiment {name!r}: {argv}"
    for key in experiments.select_models(EXPERIMENTS[name],
                                         models.split(",") if models else None):
      experiments.model_config(EXPERIMENTS[name], key, options)


COMMANDS = all_commands()


def test_the_commands_are_found():
  where = {w for w, _ in COMMANDS}
  assert {"README.md", "WORKSPACE.md", "RESULTS.md", "launch/train.py", "launch/reproduce.py", "launch/landscape.py",
          "launch/attention.py", "launch/summ_analysis.py"} <= where
  results = [c for w, c in COMMANDS if w == "RESULTS.md"]
  assert len(results) >= 30
  # Continuation lines, inline spans and prefixes are parsed into whole commands.
  assert any(c.startswith("python -m launch.babi_all --workdir=/tmp/babi/rum --cell=rum")
             and "--budget_minutes=10" in c for c in results)
  assert any(c.startswith("python -m launch.benchmark --cpu_devices=1 --encoders=")
             for c in results)


@pytest.mark.parametrize("where,command", COMMANDS,
                         ids=[f"{w}:{i}" for i, (w, _) in enumerate(COMMANDS)])
def test_command_parses(where, command):
  del where
  check_command(command)


def test_the_summarization_and_sst_commands_carry_the_runs_fields():
  results = [c for w, c in COMMANDS if w == "RESULTS.md"]
  summ = [c for c in results if "launch.train --task=summ_synthetic" in c]
  assert summ and all("--config.loss_normalization=token" in c for c in summ)
  sst = [c for c in results if "launch.train --task=sst" in c]
  assert sst and all("--config.early_stopping_metric=eval_accuracy" in c for c in sst)


def test_the_checks_catch_bad_commands():
  for bad, match in (
      ("python -m launch.nope --workdir=/tmp/x", "no module launch.nope"),
      ("python -m launch.train --task=recall --stepz=3", "no flag --stepz"),
      ("python -m launch.landscape --rum_workdir=/tmp/a --goru_dir=/tmp/b", "--goru_dir")):
    with pytest.raises(AssertionError, match=match):
      check_command(bad)
  for bad, match in (
      ("python -m launch.train --task=recall --steps=many", "not an integer"),
      ("python -m launch.train --task=recall --budget_minutes=ten", "not a number"),
      ("python -m launch.babi_all --level=paragraph", "not one of"),
      ("python -m launch.babi_all --attention=maybe", "not true or false"),
      ("python -m launch.train --task=recall --cell=rnm", "no such cell")):
    with pytest.raises(AssertionError, match=match):
      check_command(bad)
  check_command("python -m launch.babi_all --workdir=/tmp/b/$c --cell=$c --level=sentence")
  check_command("python -m launch.train --imports=tests.recipe_example --task=first_symbol "
                "--cell=elman --workdir=/tmp/x")
  with pytest.raises(ValueError, match="unknown config field 'model.hiden_size'"):
    check_command("python -m launch.train --task=recall --config.model.hiden_size=3")
  with pytest.raises(ValueError, match="unknown model"):
    check_command("python -m launch.reproduce --experiment=recall_T30 --workdir=/tmp/r "
                  "--models=rum_lam9")
  check_command("python -m launch.reproduce --experiment=recall_T30 --workdir=/tmp/r "
                "--models=gru --notiny --seeds=0,1,2   # a comment")
  assert markdown_commands("a `python -m\n  launch.plot --workdir=/tmp/x` b\n```bash\n"
                           "taskset -c 1 python -m launch.train \\\n    --steps=3\n```\n"
                           ) == ["python -m launch.train --steps=3",
                                 "python -m launch.plot --workdir=/tmp/x"]


# ------------------------------------------------------------------- machine paths


def test_no_machine_paths():
  found = []
  for path in _scanned_files():
    for number, line in enumerate(_read(path).splitlines(), 1):
      if MACHINE_PATH.search(line):
        found.append(f"{path}:{number}: {line.strip()[:120]}")
  assert not found, "paths of one machine (use /tmp/... or a relative path):\n" + "\n".join(
      found)


def test_the_machine_path_pattern():
  for bad in ("--workdir=/work/runs/x", "/home/me/data", "(/root/x)", "`/mnt/d`", "/data"):
    assert MACHINE_PATH.search(bad), bad
  for fine in ("/tmp/work/x", "../shared/data/babi", "docs/figures/x.png",
               "https://example.org/home/x", "tasks/data/", "~/data", "/tmp/homework"):
    assert not MACHINE_PATH.search(fine), fine


# ------------------------------------------------------------------------- figures

FIGURE_NAME = re.compile(r"docs/figures/[\w.-]*\w")
IMAGE_LINK = re.compile(r"!\[[^\]]*\]\((docs/figures/[^)\s]+)\)")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".svg", ".gif")


def figures_named_and_shown(text: str) -> tuple[set, set]:
  """``(every docs/figures/ file a Markdown text names, those it shows as an image)``."""
  return set(FIGURE_NAME.findall(text)), set(IMAGE_LINK.findall(text))


def test_results_shows_every_figure_it_names():
  """Issue 47: every docs/figures/ file RESULTS.md names exists, every image it names is
  shown (``![...](docs/figures/x.png)``), and every image in docs/figures/ is shown."""
  named, shown = figures_named_and_shown(_read("RESULTS.md"))
  missing = sorted(p for p in named | shown if not os.path.isfile(os.path.join(REPO, p)))
  assert not missing, f"RESULTS.md names figures that are not in docs/figures/: {missing}"
  not_shown = sorted(p for p in named - shown if p.lower().endswith(IMAGE_SUFFIXES))
  assert not not_shown, f"RESULTS.md names these images but does not show them: {not_shown}"
  on_disk = {os.path.relpath(p, REPO).replace(os.sep, "/")
             for suffix in IMAGE_SUFFIXES
             for p in glob.glob(os.path.join(REPO, "docs", "figures", "*" + suffix))}
  assert not sorted(on_disk - shown), (
      f"images in docs/figures/ that RESULTS.md does not show: {sorted(on_disk - shown)}")


def test_the_readme_and_workspace_name_existing_figures():
  for name in ("README.md", "WORKSPACE.md"):
    named, shown = figures_named_and_shown(_read(name))
    missing = sorted(p for p in named | shown if not os.path.isfile(os.path.join(REPO, p)))
    assert not missing, f"{name} names figures that are not in docs/figures/: {missing}"


def test_the_figure_checks():
  named, shown = figures_named_and_shown(
      "see `docs/figures/a.png`. ![b](docs/figures/b.png) data: docs/figures/c.json, "
      "the folder `docs/figures/`")
  assert named == {"docs/figures/a.png", "docs/figures/b.png", "docs/figures/c.json"}
  assert shown == {"docs/figures/b.png"}


def test_figure_jsons_record_relative_paths():
  for path in glob.glob(os.path.join(REPO, "docs", "figures", "*.json")):
    with open(path) as f:
      data = json.load(f)
    stack = [data]
    while stack:
      item = stack.pop()
      if isinstance(item, dict):
        for key, value in item.items():
          if "dir" in key or "path" in key:
            assert not (isinstance(value, str) and os.path.isabs(value)), (path, key, value)
          stack.append(value)
      elif isinstance(item, list):
        stack.extend(item)


def test_recorded_path(tmp_path, monkeypatch):
  root = tmp_path / "repo"
  (root / "runs").mkdir(parents=True)
  assert analysis.recorded_path(str(root / "runs" / "lead"), str(root)) == "runs/lead"
  assert analysis.recorded_path(str(tmp_path / "elsewhere" / "lead/"), str(root)) == "lead"
  monkeypatch.chdir(root)
  assert analysis.recorded_path("runs/lead") == "runs/lead"
  assert analysis.recorded_path(str(root / "runs")) == "runs"
  assert analysis.recorded_path("/tmp/summ/synth_lead") == "synth_lead"

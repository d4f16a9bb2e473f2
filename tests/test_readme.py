"""The README runs as written: its two opening commands and every ```python block.

A user pastes these first; a ``NameError`` in the functional-core example or a command whose
flags no longer parse is the first thing they see. The opening commands' training part runs
here for a few steps (``-m slow`` runs it as written, to the end).
"""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(REPO, "README.md")


def _read():
  with open(README, encoding="utf-8") as f:
    return f.read()


def _blocks(text, language):
  return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.M | re.S)


def _opening_commands():
  """The README's first block: exactly two commands, train and test."""
  text = _read()
  assert text.split("\n", 2)[2].startswith("```bash\n"), "the README opens with the commands"
  commands = [line for line in _blocks(text, "bash")[0].splitlines() if line.strip()]
  assert len(commands) == 2, commands
  return commands


def _python_part(command):
  """The ``.venv/bin/python -m ...`` part of an opening command, as argv for this interpreter."""
  part = command.split("&&")[-1].strip()
  argv = shlex.split(part)
  assert argv[0] == ".venv/bin/python", part
  return [sys.executable] + argv[1:]


def test_opening_commands_set_up_then_train_and_test():
  train, test = _opening_commands()
  for command in (train, test):
    assert command.startswith("python3 -m venv .venv && .venv/bin/pip install -q -e ")
  assert _python_part(train)[1:4] == ["-m", "launch.train", "--task=copying"]
  assert "--cell=rum" in train and "--workdir=/tmp/" in train
  with open(os.path.join(REPO, ".ci", "run"), encoding="utf-8") as f:
    ci_lines = f.read().splitlines()
  assert ".venv/bin/" + test.split("&& .venv/bin/")[-1] in ci_lines, "CI runs the README's test"


def _run_training(tmp_path, extra):
  argv = [a for a in _python_part(_opening_commands()[0]) if not a.startswith("--workdir=")]
  argv += [f"--workdir={tmp_path / 'run'}"] + extra
  out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900)
  assert out.returncode == 0, out.stderr[-3000:]
  return out


def test_training_command_runs(tmp_path):
  out = _run_training(tmp_path, ["--steps=3", "--eval_every=3"])
  summary = json.loads(out.stdout.strip().splitlines()[-1])
  assert summary["step"] == 3 and summary["stop_reason"] == "num_steps"
  assert 0.0 <= summary["test_accuracy"] <= 1.0
  assert (tmp_path / "run" / "config.json").exists()


@pytest.mark.slow
def test_training_command_runs_as_written(tmp_path):
  _run_training(tmp_path, [])


def test_every_python_block_runs():
  blocks = _blocks(_read(), "python")
  assert blocks, "the README has its functional-core example"
  for i, code in enumerate(blocks):
    namespace = {"__name__": f"readme_block_{i}"}
    exec(compile(code, f"README.md python block {i}", "exec"), namespace)  # pylint: disable=exec-used

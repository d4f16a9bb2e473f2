"""``tensorboard --logdir WORKDIR`` (README) works: the extra that installs TensorBoard, the
README saying how to get it, and TensorBoard itself reading the loop's event files."""

import configparser
import os
import re
import shutil
import subprocess
import sys

import pytest

from rumjax.training import writer as writer_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _extras():
  parser = configparser.ConfigParser()
  parser.read(os.path.join(REPO, "setup.cfg"))
  return {name: [line.strip() for line in value.splitlines()
                 if line.strip() and not line.strip().startswith("#")]
          for name, value in parser["options.extras_require"].items()}


def test_the_readme_says_how_to_get_the_tensorboard_command():
  """Issue 46, item 2: the README's install line installs no TensorBoard, so where it says
  ``tensorboard --logdir WORKDIR`` it names the extra that does."""
  extra = [name for name, reqs in _extras().items()
           if any(re.match(r"tensorboard\b(?!X)", r) for r in reqs)]
  assert extra == ["tensorboard"]
  with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
    paragraphs = [" ".join(p.split()) for p in f.read().split("\n\n")]
  mentions = [p for p in paragraphs if "tensorboard --logdir WORKDIR" in p]
  assert mentions and all("pip install -e '.[tensorboard]'" in p for p in mentions), mentions


def _tensorboard():
  return shutil.which("tensorboard", path=os.path.dirname(sys.executable))


@pytest.mark.skipif(_tensorboard() is None,
                    reason="TensorBoard not installed (pip install -e '.[tensorboard]'; "
                           ".ci/run installs it)")
def test_tensorboard_reads_the_loops_event_files(tmp_path):
  writer = writer_lib.MetricWriter(str(tmp_path))
  writer.write(1, {"train_loss": 2.5, "eval_accuracy": 0.5})
  writer.write(2, {"train_loss": 2.0})
  writer.close()
  proc = subprocess.run([_tensorboard(), "--inspect", f"--logdir={tmp_path}"],
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  scalars = proc.stdout.split("scalars\n", 1)[1].split("tensor -", 1)[0].split()
  assert scalars == ["eval_accuracy", "train_loss"]
  assert re.search(r"last_step\s+2\b", proc.stdout)

"""Preparing a TFDS builder while another run prepares the same data_dir."""

import pytest

from tasks.datasets import prepare


class _Builder:
  def __init__(self, log, prepared_after):
    self.log, self.prepared_after = log, prepared_after

  def download_and_prepare(self, download_config):
    self.log.append(("prepare", download_config.manual_dir))
    raise FileExistsError("Cannot rename incomplete.X: destination already exists.")

  def is_prepared(self):
    self.log.append("check")
    return sum(1 for e in self.log if e == "check") >= self.prepared_after


def test_the_second_run_waits_for_the_first_and_uses_its_data():
  log = []
  builders = []

  def make():
    builders.append(_Builder(log, prepared_after=2))
    return builders[-1]

  got = prepare.prepare(make, "/data/ptb", wait_seconds=30)
  assert got is builders[-1] and log[0] == ("prepare", "/data/ptb")
  assert log.count("check") == 2


def test_it_gives_up_after_the_wait():
  with pytest.raises(FileExistsError):
    prepare.prepare(lambda: _Builder([], prepared_after=10**9), "", wait_seconds=0.0)

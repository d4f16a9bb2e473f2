"""Console progress: a bar only on a terminal, log lines printed above it, none elsewhere."""

import io

from absl import logging

from rumjax.training import progress


class _Terminal(io.StringIO):
  def isatty(self):
    return True


def test_no_bar_when_not_a_terminal():
  stream = io.StringIO()
  p = progress.Progress(10, 0, stream=stream)
  p.update(5)
  p.close()
  assert p.bar is None and stream.getvalue() == ""


def test_bar_on_a_terminal_with_log_lines_above_it():
  stream = _Terminal()
  handler = logging.get_absl_handler().python_handler
  saved, log = handler.stream, io.StringIO()
  handler.stream = original = log
  p = progress.Progress(10, 2, stream=stream)
  assert handler.stream is not original          # logs now go through tqdm.write
  handler.stream.write("a log line\n")
  assert log.getvalue() == "a log line\n"      # printed whole, on its own line
  p.update(7)
  p.set_loss(0.5)
  p.close()
  assert handler.stream is original              # restored
  handler.stream = saved
  text = stream.getvalue()
  assert "7/10" in text or "10/10" in text or "2/10" in text
  p.close()  # closing twice is harmless

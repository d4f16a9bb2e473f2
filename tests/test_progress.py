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


def test_the_bar_counts_the_run_s_steps_and_only_on_the_first_process():
  """The bar starts at the step the run resumes from and shows the step it is at (update
  takes the step, not an increment); a process other than the first draws nothing and
  leaves the log handler alone."""
  handler = logging.get_absl_handler().python_handler
  saved = handler.stream
  try:
    p = progress.Progress(10, 2, stream=_Terminal())
    assert p.bar.n == 2
    for step in (3, 7, 10):
      p.update(step)
      assert p.bar.n == step
    p.close()
    assert handler.stream is saved
    stream = _Terminal()
    p = progress.Progress(10, 2, enabled=False, stream=stream)
    assert p.bar is None and handler.stream is saved
    p.update(5)
    p.close()
    assert stream.getvalue() == ""
  finally:
    handler.stream = saved

"""Console progress that does not fight with the log.

On a terminal: a tqdm bar (steps, steps/s, ETA, the last logged loss) at the bottom, with the
absl log lines printed above it (the log handler writes through ``tqdm.write`` while the bar
lives). Elsewhere (a file, CI, a pipe): no bar; the loop's log line every ``log_every``
steps already carries ``steps_per_sec`` and ``eta_sec``.
"""

import sys
from typing import Optional

import tqdm
from absl import logging


class _ThroughTqdm:
  """A stream for the log handler that prints above the bar."""

  def __init__(self, stream):
    self.stream = stream

  def write(self, text: str) -> None:
    if text.strip():
      tqdm.tqdm.write(text.rstrip("\n"), file=self.stream)

  def flush(self) -> None:
    self.stream.flush()


class Progress:
  """A tqdm bar from ``initial`` to ``total`` steps, only on a terminal.

  Args:
    total: the last step.
    initial: the step the run starts from.
    enabled: ``False`` on every process but the first.
    stream: where the bar goes (default ``sys.stderr``); no bar unless it is a TTY.
  """

  def __init__(self, total: int, initial: int, *, enabled: bool = True, stream=None):
    stream = stream or sys.stderr
    self.bar: Optional[tqdm.tqdm] = None
    self._handler, self._stream = None, None
    if not (enabled and hasattr(stream, "isatty") and stream.isatty()):
      return
    self.bar = tqdm.tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True,
                         mininterval=1.0, file=stream)
    handler = getattr(logging.get_absl_handler(), "python_handler", None)
    if handler is not None and hasattr(handler, "stream"):
      self._handler, self._stream = handler, handler.stream
      handler.stream = _ThroughTqdm(self._stream)

  def update(self, step: int) -> None:
    if self.bar is not None:
      self.bar.update(step - self.bar.n)

  def set_loss(self, loss: float) -> None:
    if self.bar is not None:
      self.bar.set_postfix(loss=f"{loss:.4f}", refresh=False)

  def close(self) -> None:
    if self.bar is not None:
      self.bar.close()
      self.bar = None
    if self._handler is not None:
      self._handler.stream = self._stream
      self._handler = None

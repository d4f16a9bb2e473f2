"""``python -m launch.train``, unchanged, except that the loop waits after one step until a
signal has been handled (for tests that must preempt a run mid-way, without races).

    RUMJAX_TEST_PAUSE_AFTER_STEP=7 python -m tests.launch_paused --workdir=... --steps=24

runs the real launcher (same flags, same ``__main__``, same signal handling) with one
extra hook: after step 7 it prints ``paused after step 7`` to stderr and waits until the
launcher's :class:`rumjax.training.StopRequest` has recorded a signal. A test reads that
line, then sends SIGTERM or SIGINT; the loop then stops at the next step boundary, i.e.
exactly at step 7. If no signal is handled within ``_GIVE_UP_SECONDS`` (a test that died
before sending it), the run exits 1 with a one-line error instead of waiting forever.
"""

import os
import runpy
import sys
import time

ENV = "RUMJAX_TEST_PAUSE_AFTER_STEP"
_GIVE_UP_SECONDS = 120   # only if the test never signals (or the handler is broken)


class PauseUntilSignal:
  """A hook (:mod:`rumjax.training.hooks`) that blocks after step ``step`` until
  ``stop.requested``; a signal handler runs in the waiting main thread, so the wait ends
  once the launcher's handler has run, never before."""

  def __init__(self, step: int, stop):
    self.step, self.stop = step, stop

  def after_step(self, step, state, ctx):
    del state, ctx
    if step != self.step:
      return
    print(f"paused after step {step}", file=sys.stderr, flush=True)
    deadline = time.monotonic() + _GIVE_UP_SECONDS
    while not self.stop.requested:
      if time.monotonic() > deadline:
        sys.exit(f"error: no signal within {_GIVE_UP_SECONDS} s of pausing after step {step}")
      time.sleep(0.01)


def _with_pause(train_and_evaluate, step: int):
  """``train_and_evaluate`` with a :class:`PauseUntilSignal` after the caller's hooks."""

  def wrapped(*args, hooks=(), stop=None, **kwargs):
    if stop is None:
      sys.exit("error: tests.launch_paused needs the launcher's StopRequest (stop=...)")
    return train_and_evaluate(*args, hooks=[*hooks, PauseUntilSignal(step, stop)], stop=stop,
                              **kwargs)

  return wrapped


def main():
  from rumjax import training   # here, so that tests can import ENV without JAX
  value = os.environ.get(ENV, "")
  if not value.isdigit() or int(value) < 1:
    sys.exit(f"error: set {ENV} to the step to pause after (a positive integer), "
             f"not {value!r}")
  training.train_and_evaluate = _with_pause(training.train_and_evaluate, int(value))
  runpy.run_module("launch.train", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
  main()

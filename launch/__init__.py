"""Thin absl entry points, one module per command; the logic is in rumjax/ and tasks/."""

from typing import Callable

from absl import app, flags, logging


def run_cli(define_flags: Callable[[], None], run: Callable) -> None:
  """The body of every entry point: defines the flags, parses them and calls
  ``run(flags.FLAGS)``, with Orbax's routine log lines filtered."""
  from rumjax import utils
  define_flags()

  def main(argv):
    del argv
    logging.get_absl_handler().addFilter(utils.QuietOrbax())
    run(flags.FLAGS)

  app.run(main)

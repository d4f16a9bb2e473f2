"""Evaluators: each built from a predict function and its own options, each with its own
split, batch count and cadence (in the manner of big_vision's ``evaluators/``).

A task's config lists them in ``config.evals``, one entry per evaluator::

    config.evals = {
        "eval": dict(type="loss", split="dev", every=1000, batches=8),  # eval_loss, ...
        "test": dict(type="loss", split="test", every=0),               # at the end only
    }

Every entry has ``type`` (a registered evaluator name, see :data:`EVALUATORS`), ``split``
(passed to the task's ``eval_data``), ``every`` (steps between runs while training; 0 =
never during training), ``at_end`` (run after the last step; default True), ``batches``
(at most this many batches of the split; 0 = the whole split), ``batches_at_end`` (the
same for the final run after the last step and for a saved checkpoint's evaluation;
default: ``batches``; e.g. ``batches=50, batches_at_end=0``: the first 50 batches while
training, the whole split at the end) and ``pred`` (the
name of the predict function, default the evaluator's ``default_pred``); the other keys
are the evaluator's own options. The key of the entry is the prefix of its metrics
(``eval`` -> ``eval_loss``, ``eval_accuracy``).

An evaluator is ``Evaluator(predict_fn, *, data, mesh, prefix, **options)`` with
``run(state) -> {name: float}``; see :mod:`rumjax.evaluators.base`.
"""

from rumjax.evaluators.base import (EVALUATORS, COMMON_OPTIONS, Scheduled, build_evaluators,
                                    eval_entry, register_evaluator, validate_evals)
from rumjax.evaluators import accuracy, loss, perplexity, rouge  # noqa: F401  (registers them)

__all__ = ["EVALUATORS", "COMMON_OPTIONS", "Scheduled", "build_evaluators", "eval_entry",
           "register_evaluator", "validate_evals"]

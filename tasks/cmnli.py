"""CMNLI (Chinese MNLI, CLUE): entailment / neutral / contradiction of a sentence pair
(391,782 / 12,426 / 13,880 pairs in CLUE). Its files are not available here: the task then
stops with an error naming the missing files. Everything is in :mod:`tasks.clue`.
"""

from typing import Optional

from tasks import clue
from tasks.clue import (EVAL_SPLITS, VARIANTS, build_model, eval_data,  # noqa: F401
                        loss_and_metrics, submission, to_text, train_data, validate_config)

NAME = "cmnli"


def default_config(variant: Optional[str] = None):
  """:func:`tasks.clue.default_config` of cmnli (variant None: fine-tuning; "mlm")."""
  return clue.default_config(NAME, variant)

"""TNEWS (Toutiao news titles, CLUE): 15 news categories from the title alone (keywords
not used), 53,360 / 10,000 titles. Here ``dev.json`` is the official dev split and there is
no test file. The StarSaber paper's Table 3 task; everything is in :mod:`tasks.clue`.
"""

from typing import Optional

from tasks import clue
from tasks.clue import (EVAL_SPLITS, VARIANTS, build_model, eval_data,  # noqa: F401
                        loss_and_metrics, submission, to_text, train_data, validate_config)

NAME = "tnews"


def default_config(variant: Optional[str] = None):
  """:func:`tasks.clue.default_config` of tnews (variant None: fine-tuning; "mlm")."""
  return clue.default_config(NAME, variant)

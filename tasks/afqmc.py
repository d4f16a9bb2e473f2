"""AFQMC (Ant Financial question matching, CLUE): are two questions the same? A sentence
pair, 2 classes (34,334 / 4,316 / 3,861 pairs; the test labels are private). The StarSaber
paper's Table 3 task; everything is in :mod:`tasks.clue` (``--variant=mlm`` pretrains, then
``--config.init_from`` fine-tunes).
"""

from typing import Optional

from tasks import clue
from tasks.clue import (EVAL_SPLITS, VARIANTS, build_model, eval_data,  # noqa: F401
                        loss_and_metrics, submission, to_text, train_data, validate_config)

NAME = "afqmc"


def default_config(variant: Optional[str] = None):
  """:func:`tasks.clue.default_config` of afqmc (variant None: fine-tuning; "mlm")."""
  return clue.default_config(NAME, variant)

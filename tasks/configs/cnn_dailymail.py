"""The CNN/DailyMail summarization config (RUM paper, TACL 2019, §4 E, Table 4; See et al.
2017's set-up): ``get_config("decrum")`` for the paper's decRUM.

    python -m launch.train --task=cnn_dailymail --variant=decrum --workdir=/tmp/cnndm
"""

from typing import Optional

import ml_collections

from tasks import common
from tasks.configs import summarization as summ_config

NAME = "cnn_dailymail"
VARIANTS = summ_config.VARIANTS


def get_config(variant: Optional[str] = None) -> ml_collections.ConfigDict:
  """The paper's set-up (:func:`tasks.configs.summarization.real_data_config`) in
  configuration ``variant`` (None: lead), 230k steps."""
  c = summ_config.real_data_config(NAME, variant)
  c.manual_dir = common.shared_data_dir(NAME)   # the .story files and url_lists/
  c.train_csv = ""                 # a CSV (article, highlights) to train on instead
  c.allow_missing_stories = False  # stories listed in url_lists/ but absent are skipped
  c.malformed_stories = "error"    # a story the builder cannot read: error, skip or keep
  c.num_steps = 230_000
  return c

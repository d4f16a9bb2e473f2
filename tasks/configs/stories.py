"""The story / summary / title summarization config (RUM paper, TACL 2019, §4 E, the
Science-Daily tasks of Table 4): the model, optimiser, decoding and evaluators of
:mod:`tasks.configs.cnn_dailymail`. Titles are short: for ``s2t`` set
``--config.min_dec_steps=0 --config.max_decode_steps=30``.

    python -m launch.train --task=stories --variant=decrum --workdir=/tmp/stories \\
        --config.manual_dir=/tmp/science_daily --config.subtask=s2s
"""

from typing import Optional

import ml_collections

from tasks.configs import summarization as summ_config

NAME = "stories"
VARIANTS = summ_config.VARIANTS
SUBTASKS = ("s2s", "sh2s", "s2t", "oods2s")


def get_config(variant: Optional[str] = None) -> ml_collections.ConfigDict:
  """The paper's set-up (:func:`tasks.configs.summarization.real_data_config`) in
  configuration ``variant`` (None: lead), 100k steps; ``manual_dir`` must be given."""
  c = summ_config.real_data_config(NAME, variant)
  c.ood_manual_dir = ""   # oods2s: the folder of the out-of-domain validation/test data
  c.subtask = "s2s"       # one of SUBTASKS: s2s, sh2s (paragraphs shuffled), s2t (title)
  c.data_seed = None      # sh2s's shuffles; None: config.seed (set it to compare seeds
                          # on the same sources)
  c.num_steps = 100_000
  return c

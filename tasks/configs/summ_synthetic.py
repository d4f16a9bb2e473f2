"""The synthetic summarization task's config (RUM paper, TACL 2019, §4 E's model at CPU
sizes; the task is ours, :mod:`tasks.summ_synthetic`): ``get_config("decrum")``.

    python -m launch.train --task=summ_synthetic --variant=decrum --workdir=/tmp/summ
"""

from typing import Optional

import ml_collections

from tasks import common
from tasks.configs import summarization as summ_config

NAME = "summ_synthetic"
# The configurations (lead, encrum, decrum, allrum) on the easy task, and each on the hard
# one (``<configuration>_hard``: multi-sentence summaries with distractors).
# Up to 35 article OOVs per example at the default sizes: 40 copy slots.
HARD = dict(difficulty="hard", max_enc_steps=160, max_dec_steps=40, max_decode_steps=40,
            max_oovs=40)
VARIANTS = {**{k: {} for k in summ_config.VARIANTS},
            **{f"{k}_hard": HARD for k in summ_config.VARIANTS}}


def get_config(variant: Optional[str] = None) -> ml_collections.ConfigDict:
  """The synthetic task's config in configuration ``variant`` (None: lead; ``*_hard``: the
  hard task, 160 encoder / 40 decoder steps): embedding 64, hidden 128, batch 32, Adam 1e-3
  (the paper's Adagrad 0.15 is ``cnn_dailymail``'s), 80 encoder / 12 decoder steps, beam 4
  with no ``min_dec_steps``; the dev loss on 4 batches every ``eval_every``."""
  common.check_variant(NAME, variant, VARIANTS)
  configuration = (variant or "lead").removesuffix("_hard")
  c = common.base_config(NAME, variant)
  summ_config.add_common_fields(c, configuration)
  c.data_seed = None      # the examples' seed; None: config.seed (other seeds, other data)
  c.num_train = 20_000    # training examples, a function of (data seed, split, index)
  c.num_eval = 500        # dev and test examples each
  c.num_common = 100      # frequent words w0, w1, ... (Zipf-distributed)
  c.num_rare = 20_000     # rare words r0, r1, ... (mostly article OOVs)
  c.difficulty = "easy"   # "hard": several key sentences and distractors (*_hard variants)
  c.update(vocab_size=200, max_oovs=20, max_enc_steps=80, max_dec_steps=12,
           min_dec_steps=0, max_decode_steps=12, optimizer="adam", learning_rate=1e-3,
           batch_size=32, num_steps=5000, eval_every=500, checkpoint_every=500,
           log_every=100)
  c.update(VARIANTS[variant or "lead"])
  c.model = summ_config.model_config(configuration, embed_dim=64, hidden_size=128)
  c.evals.eval = common.eval_entry("dev", c.get_ref("eval_every"), batches=4)
  return c

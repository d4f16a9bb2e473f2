"""The associative-recall task's config (RUM paper, TACL 2019, sec. 4.1 and Table 1; set-up
of Ba et al., 2016a): ``get_config()`` for a short CPU run, ``get_config("T30")`` for the
paper's.

    python -m launch.train --task=recall --variant=T30 --workdir=/tmp/recall
"""

from typing import Optional

import ml_collections

from tasks import common

NAME = "recall"

# The paper's variants: T characters (T/2 letter-digit pairs), 100k steps, dev every 1,000
# steps on the whole dev set.
VARIANTS = {
    "T30": dict(length=30),
    "T50": dict(length=50),
}
PAPER = dict(num_steps=100_000, eval_every=1000, checkpoint_every=5000)
# The small set-up is T30 with few steps: 1,000 steps, dev on its first 20 batches (2-4
# minutes on a shared 2-core CPU, ~22% dev accuracy against chance 10%: far from solving
# the task, which takes tens of thousands of steps).
SMALL = dict(length=30, num_steps=1000, eval_every=250, checkpoint_every=500)
SMALL_DEV_BATCHES = 20


def get_config(variant: Optional[str] = None) -> ml_collections.ConfigDict:
  """The recall config: ``T30`` with few steps (``None``) or a paper variant: hidden 50,
  batch 128, RMSProp lr 1e-3, RUM ``lam=1``, ``eta=None``."""
  common.check_variant(NAME, variant, VARIANTS)
  c = common.base_config(NAME, variant)
  c.model = common.cell_model_config("classifier", cell="rum", lam=1, hidden_size=50)
  c.optimizer = "rmsprop"
  c.learning_rate = 1e-3
  c.rmsprop_decay = 0.9
  c.batch_size = 128
  c.length = 0              # T: the characters before "??" and the query (even, <= 52)
  c.num_train = 100_000     # examples per split, generated once from fixed seeds
  c.num_dev = 10_000
  c.num_test = 20_000
  c.update(SMALL if variant is None else {**PAPER, **VARIANTS[variant]})
  # Dev every eval_every steps and at the end (its first 20 batches in the small
  # setting), the whole test set at the end.
  during = SMALL_DEV_BATCHES if variant is None else 0
  c.evals.eval = common.eval_entry("dev", c.get_ref("eval_every"), during)
  c.evals.test = common.eval_entry("test", 0)
  return c

"""The copying-memory task's config (RUM paper, TACL 2019, sec. 4.1 and Figure 4; set-up
of Jing et al., 2017b): ``get_config()`` for a small CPU run, ``get_config("T500")`` for
the paper's.

    python -m launch.train --task=copying --variant=T500 --workdir=/tmp/copying
"""

from typing import Optional

import ml_collections

from tasks import common

NAME = "copying"

# The paper's variants: the delay T (sequences of T + 20 steps), batch 128, lr 1e-3. The
# paper does not state the number of steps (10,000 here).
VARIANTS = {
    "T200": dict(delay=200),
    "T500": dict(delay=500),
    "T1000": dict(delay=1000),
}
PAPER = dict(batch_size=128, learning_rate=1e-3, num_steps=10_000, eval_every=250,
             checkpoint_every=1000)
# The small set-up (not the paper's): delay 10 (30-step sequences); RUM learns it on a
# shared 2-core CPU with launch.train in ~3.5 minutes (test loss 0.007 against the
# memoryless 0.69, 99.5% of the symbols copied).
SMALL = dict(delay=10, batch_size=32, learning_rate=3e-3, num_steps=2000, eval_every=250,
             checkpoint_every=500)


def hidden_size_for(cell: str, lam) -> int:
  """The paper's hidden size: 100 for RUM with ``lam = 1``, 250 for every other model."""
  return 100 if cell == "rum" and lam == 1 else 250


def get_config(variant: Optional[str] = None) -> ml_collections.ConfigDict:
  """The copying config: the small CPU setting (``None``) or a paper variant.

  ``model.hidden_size`` follows :func:`hidden_size_for` at the default ``cell``/``lam``;
  ``launch.train`` re-applies the rule after ``--cell``/``--config.model.lam`` unless
  ``--config.model.hidden_size`` is given; elsewhere, set it again when changing them.
  """
  common.check_variant(NAME, variant, VARIANTS)
  c = common.base_config(NAME, variant)
  c.model = common.cell_model_config("tagger", cell="rum", lam=1,
                                     hidden_size=hidden_size_for("rum", 1))
  c.optimizer = "rmsprop"
  c.rmsprop_decay = 0.9
  c.num_train = 50_000      # training examples, drawn once from a fixed seed
  c.num_test = 500          # test examples, likewise
  c.delay = 0               # T: the marker comes T steps after the last data symbol (T - 1 blanks)
  c.update({**SMALL} if variant is None else {**PAPER, **VARIANTS[variant]})
  # The whole test set every eval_every steps and at the end (metrics test_*).
  c.evals.test = common.eval_entry("test", c.get_ref("eval_every"))
  return c

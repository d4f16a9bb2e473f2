"""The SST sentiment task's config (LSTMN paper, Cheng, Dong, Lapata 2016, §5.2 and Table
2): ``get_config()`` (the fine-grained set-up) or ``get_config("binary")``.

    python -m launch.train --task=sst --variant=binary --workdir=/tmp/sst_binary
"""

import math
from typing import Optional

import ml_collections
from ml_collections import config_dict

from tasks import common

NAME = "sst"

# Training sentences per granularity (the paper's counts): the epoch of num_steps.
NUM_TRAIN = {"fine": 8_544, "binary": 6_920}
EPOCHS = 10
# The paper's variants, one per label granularity: "fine" (5 classes) and "binary" (neutral
# sentences removed, 2 classes). Without a variant: "fine".
VARIANTS = {granularity: dict(granularity=granularity) for granularity in NUM_TRAIN}


def get_config(variant: Optional[str] = None) -> ml_collections.ConfigDict:
  """The SST config of §5.2: ``"fine"`` (also ``None``) or ``"binary"``: LSTMN 168, Adam
  2e-3, L2 1e-4, batch 5, 10 epochs with dev every epoch."""
  common.check_variant(NAME, variant, VARIANTS)
  c = common.base_config(NAME, variant)
  c.granularity = "fine"    # "fine" (5 classes) or "binary" (2; neutral sentences removed)
  c.update(VARIANTS[variant] if variant is not None else {})
  c.manual_dir = common.shared_data_dir("sst")   # the three tree files; "" = download
  c.data_dir = ""           # the prepared TFDS data; "" = the TFDS default
  c.word_vectors = ""       # a GloVe/word2vec text file (the paper: GloVe 840B); "" = none
  c.bucket_lengths = True   # pad a batch to the power of two of its longest sentence
  # LSTMN 168 (the paper's "memory size"), 300-d embeddings, mean pooling; mlp_layers None:
  # a linear softmax layer for 1 layer, 2 ReLU layers for 2 (tasks.sst.model_config).
  c.model = common.cell_model_config(
      "lstmn", cell="lstm", hidden_size=168, embed_dim=300, num_layers=1,
      attn_size=config_dict.placeholder(int), memory_span=config_dict.placeholder(int),
      skip_input=False, impl="fast", pooling="mean",
      mlp_layers=config_dict.placeholder(int), mlp_size=config_dict.placeholder(int),
      dropout_rate=0.5)
  c.optimizer = "adam"
  c.learning_rate = 2e-3
  c.l2 = 1e-4
  c.batch_size = 5
  c.eval_batch_size = 50    # rows of an evaluation batch
  epoch = math.ceil(NUM_TRAIN[c.granularity] / c.batch_size)   # 1,709 / 1,384 steps
  c.num_steps = EPOCHS * epoch
  c.eval_every = c.checkpoint_every = epoch
  c.log_every = 100
  # Dev every epoch and at the end, test at the end.
  c.evals.eval = common.eval_entry("dev", c.get_ref("eval_every"),
                                   batch_size=c.get_ref("eval_batch_size"))
  c.evals.test = common.eval_entry("test", 0, batch_size=c.get_ref("eval_batch_size"))
  return c

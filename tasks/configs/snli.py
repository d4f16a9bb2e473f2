"""The SNLI task's config (LSTMN paper, Cheng, Dong, Lapata 2016, §5.3 and Table 3):
``get_config()`` (train on 90% of dev: no train file here) or ``get_config("full")`` (the
paper's set-up).

    python -m launch.train --task=snli --variant=dev90 --workdir=/tmp/snli
"""

import math
from typing import Optional

import ml_collections
from ml_collections import config_dict

from tasks import common

NAME = "snli"

# The variants (the data split): "full" trains on train, validates on dev (the paper);
# "dev90" trains on a fixed 90% of dev and validates on the other 10% ("dev10"). Without a
# variant: "dev90".
VARIANTS = {
    "full": dict(data_split="full"),
    "dev90": dict(data_split="dev90"),
}
# Per data split: training pairs (one epoch), epochs of num_steps, evaluations per epoch,
# and the validation evaluator (config.evals key, split).
NUM_TRAIN = {"full": 549_367, "dev90": 8_858}
EPOCHS = {"full": 10, "dev90": 20}
EVALS_PER_EPOCH = {"full": 10, "dev90": 1}
VALIDATION = {"full": ("eval", "dev"), "dev90": ("eval_dev10", "dev10")}


def get_config(variant: Optional[str] = None) -> ml_collections.ConfigDict:
  """The SNLI config of §5.3: ``"dev90"`` (also ``None``) or ``"full"``: LSTMN 100, Adam
  1e-3, batch 32, 20 epochs with dev10 every epoch (dev90) or 10 epochs with dev every
  tenth of one (full)."""
  common.check_variant(NAME, variant, VARIANTS)
  c = common.base_config(NAME, variant)
  c.data_split = "dev90"    # "full" or "dev90" (VARIANTS)
  c.update(VARIANTS[variant] if variant is not None else {})
  c.manual_dir = common.shared_data_dir("snli")   # snli_1.0_*.jsonl[.gz]; "" = download
  c.data_dir = ""           # the prepared TFDS data; "" = the TFDS default
  c.word_vectors = ""       # a GloVe/word2vec text file; "" = embeddings from scratch
  c.bucket_lengths = True   # pad each sentence to the power of two of its longest
  # Two LSTMNs of 100 (300 and 450 in Table 3), mean pooling, 2 ReLU layers, dropout 0.2
  # (the paper selects it from [0.1, 0.2, 0.3, 0.4]); "lstmn_shallow"/"lstmn_deep": fusion.
  c.model = common.cell_model_config(
      "lstmn", cell="lstm", hidden_size=100, embed_dim=300, num_layers=1,
      attn_size=config_dict.placeholder(int), inter_size=config_dict.placeholder(int),
      memory_span=config_dict.placeholder(int), skip_input=False,
      condition_on_source=False, impl="fast", pooling="mean", mlp_layers=2,
      mlp_size=config_dict.placeholder(int), dropout_rate=0.2)
  c.optimizer = "adam"
  c.learning_rate = 1e-3
  c.batch_size = 32
  c.eval_batch_size = 64    # rows of an evaluation batch
  epoch = math.ceil(NUM_TRAIN[c.data_split] / c.batch_size)   # 277 / 17,168 steps
  c.num_steps = EPOCHS[c.data_split] * epoch
  c.eval_every = c.checkpoint_every = epoch // EVALS_PER_EPOCH[c.data_split]
  c.log_every = 50
  # Validation every eval_every steps and at the end, test at the end.
  key, split = VALIDATION[c.data_split]
  c.evals[key] = common.eval_entry(split, c.get_ref("eval_every"),
                                   batch_size=c.get_ref("eval_batch_size"))
  c.evals.test = common.eval_entry("test", 0, batch_size=c.get_ref("eval_batch_size"))
  return c

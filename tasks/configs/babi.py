"""The bAbI question-answering config (RUM paper, TACL 2019, sec. 4.2 and Table 2;
ICLR-workshop version, appendix C and Table 4): ``get_config()`` (the word level) or
``get_config("sentence_attention")``, one model per sub-task ``babi_task`` of en-10k.

    python -m launch.train --task=babi --variant=sentence --config.babi_task=2 --workdir=/tmp/qa2

Training (the papers): batch 32, Adam lr 1e-3, no other regularisation, 64-dim embeddings,
hidden 256, RUM ``lam=0`` (word level; the sentence variants: ``lam=1``, TACL Table 2
line 14 and Table 5), ``eta=None``, 20 epochs (appendix C); "train until convergence
on the dev set" is ``launch/babi_all.py`` (early stopping on the dev accuracy).
"""

import math
from typing import Optional

import ml_collections

from tasks import common

NAME = "babi"
NUM_TASKS = 20
# Training questions per sub-task of a data version (9k of en-10k's 10k, 900 of en's 1k).
PAPER_TRAIN_QUESTIONS = {"en-10k": 9000, "en": 900}
# The model of each level: the word level reads one word sequence
# (rumjax.models.SequenceClassifier), the sentence level averaged sentence embeddings
# (rumjax.models.babi.SentenceQA).
MODEL_OF_LEVEL = {"word": "classifier", "sentence": "sentence_qa"}

# The paper's variants (TACL Table 2): the level and config.model's fields;
# model.attention is the dot-product attention over the sentences. RUM's lam: 0 at the word
# level (the paper's only word-level RUM, line 7), 1 at the sentence level (its best, lines
# 14: 79.0 / 80.1 with attention, against 75.1 / 74.3 at lam 0; Table 5's (C): lam 1).
VARIANTS = {
    "word": dict(level="word", model=dict(name=MODEL_OF_LEVEL["word"], lam=0)),
    "sentence": dict(level="sentence", model=dict(name=MODEL_OF_LEVEL["sentence"],
                                                  attention=False, lam=1.0)),
    "sentence_attention": dict(level="sentence", model=dict(name=MODEL_OF_LEVEL["sentence"],
                                                            attention=True, lam=1.0)),
}
DEFAULT_VARIANT = "word"
EPOCHS = 20   # training epochs (appendix C)


def default_manual_dir() -> str:
  """``../shared/data/babi`` relative to the repository root if it exists, else ``""``."""
  return common.shared_data_dir(NAME)


def get_config(variant: Optional[str] = None) -> ml_collections.ConfigDict:
  """The bAbI config of the papers: ``"word"`` (also ``None``), ``"sentence"`` or
  ``"sentence_attention"``; sub-task ``babi_task=1`` of en-10k."""
  common.check_variant(NAME, variant, VARIANTS)
  fields = VARIANTS[variant or DEFAULT_VARIANT]
  c = common.base_config(NAME, variant)
  c.babi_task = 1           # the sub-task, 1..20 (one model each)
  # The data: "en-10k" (about 9k/1k/1k questions: dev is whole stories) or "en" (900/100/1,000). num_steps, eval_every
  # and checkpoint_every below count en-10k's epochs (282 steps): with version="en" set them
  # too (29 steps per epoch: num_steps=580 for 20 epochs), as launch.babi_all does.
  c.version = "en-10k"
  c.level = fields["level"]   # "word" or "sentence" (the model MODEL_OF_LEVEL[level])
  # The raw files as in the archive (en-10k/qa1_..._train.txt, ...; "" = download) and
  # where TFDS keeps the prepared data ("" = $TFDS_DATA_DIR or ~/tensorflow_datasets).
  c.manual_dir = default_manual_dir()
  c.data_dir = ""
  c.bucket_lengths = True   # pad a batch to the power of two above its longest row
  c.model = common.cell_model_config(cell="rum", hidden_size=256, embed_dim=64,
                                     **fields["model"])
  c.optimizer = "adam"
  c.learning_rate = 1e-3
  c.batch_size = 32
  epoch = math.ceil(PAPER_TRAIN_QUESTIONS[c.version] / c.batch_size)  # 282 steps
  c.num_steps = EPOCHS * epoch
  c.eval_every = epoch
  c.checkpoint_every = epoch
  # Whole splits: dev every epoch and at the end, test at the end (also per sub-task).
  c.evals.eval = common.eval_entry("dev", c.get_ref("eval_every"))
  c.evals.test = common.eval_entry("test", 0)
  c.evals.test_subtask = common.eval_entry(
      "test", 0, type="grouped_accuracy", group_key="subtask", num_groups=NUM_TASKS + 1,
      name_format="qa{}")
  return c

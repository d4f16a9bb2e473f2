"""What the summarization tasks' configs share (RUM paper, TACL 2019, §4 E and Table 4; See
et al. 2017): the paper's four configurations as data, the pointer-generator's
``config.model``, the fields and evaluators of every summarization task
(:func:`add_common_fields`) and those of the tasks on real text
(:func:`real_data_config`). Not a task itself: :mod:`tasks.configs.cnn_dailymail`,
:mod:`tasks.configs.stories` and :mod:`tasks.configs.summ_synthetic` build on it.

    python -m launch.train --task=summ_synthetic --variant=decrum --workdir=/tmp/summ
"""

from typing import Optional

import ml_collections

from tasks import common

# The paper's variants (Table 4): the encoder and decoder cells of the pointer-generator.
# LEAD is See et al.'s LSTM encoder and decoder; None means lead.
VARIANTS = {
    "lead": dict(encoder_cell="lstm", decoder_cell="lstm"),
    "encrum": dict(encoder_cell="rum", decoder_cell="lstm"),
    "decrum": dict(encoder_cell="lstm", decoder_cell="rum"),
    "allrum": dict(encoder_cell="rum", decoder_cell="rum"),
}
CONFIGURATIONS = tuple(VARIANTS)


def model_config(configuration: str, **fields) -> ml_collections.ConfigDict:
  """``config.model`` of a pointer-generator in ``configuration`` (:data:`VARIANTS`) at the
  paper's sizes (embedding 128, hidden 256, pointer on, coverage off) unless ``fields`` say
  otherwise."""
  m = ml_collections.ConfigDict(dict(
      name="pointer_generator", **VARIANTS[configuration], embed_dim=128, hidden_size=256,
      pointer=True, coverage=False, lam=0.0, learn_lam=False, eta=None, activation="relu",
      update_gate=True))
  common.add_precision(m)
  m.update(fields)
  return m


def add_common_fields(c: ml_collections.ConfigDict, configuration: str) -> None:
  """The summarization fields of a task config (the RUM paper's / See et al.'s values) and
  the evaluators ``test`` (ROUGE of the beam search) and ``lead3`` on test, at the end."""
  c.configuration = configuration    # one of VARIANTS: the cells of config.model
  c.vocab_size = 50_000              # the most frequent training words (specials included)
  c.max_oovs = 100                   # article OOV slots of the extended vocabulary
  c.max_enc_steps = 400              # article tokens kept
  c.max_dec_steps = 100              # summary tokens trained on (with <s> / </s>)
  c.beam_size = 4                    # the beam search's width (1: greedy)
  c.min_dec_steps = 35               # decoded tokens before </s> may end a hypothesis
  c.max_decode_steps = 120           # decoded tokens at most
  c.cov_loss_wt = 1.0                # the coverage loss's weight when model.coverage
  # "example": the mean over rows of each row's mean over its steps (See et al.'s
  # _mask_and_avg); "token": the mean over all real steps of the batch.
  c.loss_normalization = "example"
  # See et al.'s optimisation: Adagrad 0.15 (accumulator 0.1), clip 2.0, batch 16.
  c.update(optimizer="adagrad", learning_rate=0.15, adagrad_init=0.1, grad_clip=2.0,
           batch_size=16)
  # At the end: ROUGE of the beam search on test, and the LEAD-3 baseline's.
  c.evals.test = common.eval_entry("test", 0, type="rouge", pred="beam", texts="summary")
  c.evals.lead3 = common.eval_entry("test", 0, type="rouge", pred="metrics", texts="lead3")


def real_data_config(name: str, variant: Optional[str]) -> ml_collections.ConfigDict:
  """The config of a summarization task on real text (``cnn_dailymail``, ``stories``):
  :func:`add_common_fields`, the paper's model for ``variant`` (None: LEAD), the dev loss
  every ``eval_every`` (8 batches) and the dev ROUGE of the beam search on the first
  ``rouge_batches`` every ``rouge_every`` (0: at the end only)."""
  common.check_variant(name, variant, VARIANTS)
  configuration = variant or "lead"
  c = common.base_config(name, variant)
  add_common_fields(c, configuration)
  c.manual_dir = ""      # the task's raw files (see its builder in tasks/datasets/)
  c.data_dir = ""        # where the prepared data sets go ("": the TFDS default)
  c.update(eval_every=5000, checkpoint_every=5000, log_every=100)
  c.rouge_every = 0      # the dev ROUGE evaluator's cadence (0: at the end only)
  c.rouge_batches = 8    # the dev batches it decodes
  c.model = model_config(configuration)
  c.evals.eval = common.eval_entry("dev", c.get_ref("eval_every"), batches=8)
  c.evals.dev = common.eval_entry("dev", c.get_ref("rouge_every"), type="rouge",
                                  pred="beam", texts="summary",
                                  batches=c.get_ref("rouge_batches"))
  return c

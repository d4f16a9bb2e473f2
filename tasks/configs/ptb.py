"""The Penn Treebank language-model config (RUM paper, TACL 2019, sec. 4 D and Table 3; ICLR
version, appendix D, Tables 5-6; word level: Cheng et al., 2016, sec. 5.1):
``get_config()`` for a small char-level CPU run, ``get_config("fs_rum2")`` for the paper's
FS-RUM-2.

    python -m launch.train --task=ptb --variant=fs_rum2 --workdir=/tmp/ptb_fs_rum2

Char variants (Table 3 / Table 5): batch 128, windows of 150, Adam 0.002, global-norm clip
1.0; the FS-RNN-2 variants follow Table 6 (180 epochs at 2e-3, 60 at 1e-4, 120 at 1e-5),
the others 100 epochs at 2e-3. Word variants (LSTMN paper sec. 5.1, Table 1):
``word_lstm300`` (LSTM 300, the baseline), ``word_lstmn1`` / ``word_lstmn3`` (LSTMN 300,
1 / 3 layers), embedding 150, output dropout 0.5 (ours: the paper gives none), batch 40,
windows of 35, SGD 0.65 with gradients renormalised above norm 5 for the loss summed over
a window's 35 steps, i.e. ``learning_rate = 0.65 * seq_len`` and ``grad_clip = 5 /
seq_len`` for our per-token mean loss (the same updates), the rate multiplied by 0.85
after every epoch's validation that improves the perplexity by less than 1 ("no significant
improvement" in the paper; 1 ppl is the threshold of the Torch LM code of its lineage,
``lr_plateau_min_delta``). The best-validation checkpoint is kept in ``<workdir>/best``
(early stopping on ``eval_ppl`` with a patience no run reaches); ``launch.evaluate`` with
``--best`` reports the test perplexity there.

Probabilities: ``model.dropout_rate`` is the probability of DROPPING a unit; the
``zoneout`` fields are the probabilities of KEEPING THE PREVIOUS value of a unit (see
:mod:`tasks.ptb`).
"""

import copy
from typing import Optional

import ml_collections

from tasks import common

NAME = "ptb"
# Training-stream tokens (one end-of-line token per line), for epochs -> steps.
TRAIN_TOKENS = {"char": 5_017_482, "word": 929_589}


def steps_per_epoch(level: str, batch_size: int, seq_len: int) -> int:
  """Training windows per epoch: ``((N - 1) // B) // T`` (see tasks/data/stream.py)."""
  return ((TRAIN_TOKENS[level] - 1) // batch_size) // seq_len


def fast_slow(slow_cell: str, slow_size: int, **slow) -> dict:
  """``config.model`` fields of an FS-RNN-2 (Table 5) around the slow cell: its options
  prefixed ``slow_`` (see :func:`rumjax.cells.fast_slow.fast_slow_from_config`)."""
  return dict(core="fast_slow", slow_cell=slow_cell, slow_size=slow_size,
              **{f"slow_{k}": v for k, v in slow.items()})


# --------------------------------------------------------------------------- models

# The language model (rumjax.models.lm.LanguageModel): embedding 128 -> dropout -> core ->
# dropout -> softmax; model.core is "cell" (one cell), "stacked" (num_layers cells) or
# "lstmn" (num_layers LSTMN layers); zoneout_c: the LN-LSTM's cell-state zoneout;
# memory_span: the LSTMN's most recent tape positions attended to (0: the whole window and
# the carried slot; 1: only the previous token's, which makes it an LSTM).
LM = dict(embed_dim=128, dropout_rate=0.35, core="cell", num_layers=1, zoneout_c=0.0,
          memory_span=0)
# The FS-RNN-2 of Table 5 (core "fast_slow", no single cell): fast LN-LSTM 700 x 2 with
# zoneout 0.1 (h) and 0.5 (c) around the slow cell (slow_cell, slow_size, slow_<option>).
FAST_SLOW_LM = dict(name="lm", core="fast_slow", embed_dim=128, dropout_rate=0.35,
                    fast_cell="lnlstm", fast_size=700, num_fast=2, fast_zoneout=0.1,
                    fast_zoneout_c=0.5)
# RUM with layer norm and zoneout of h (Table 5), lam 0, eta 1.0.
RUM_OPTIONS = dict(lam=0.0, learn_lam=False, eta=1.0, activation="relu", update_gate=True,
                   layer_norm=True, zoneout=0.1)
RUM = dict(cell="rum", **RUM_OPTIONS)
# The word-level models (LSTMN paper sec. 5.1): 300 units, embedding 150, dropout 0.5.
WORD_MODEL = dict(hidden_size=300, embed_dim=150, dropout_rate=0.5, zoneout=0.0)

# --------------------------------------------------------------------- training set-ups

CHAR_EPOCH = steps_per_epoch("char", 128, 150)     # 261 windows
WORD_EPOCH = steps_per_epoch("word", 40, 35)
# Table 5: batch 128, windows of 150, 100 epochs of Adam 2e-3, an evaluation per epoch.
CHAR_TRAINING = dict(batch_size=128, seq_len=150, num_steps=100 * CHAR_EPOCH,
                     eval_every=CHAR_EPOCH, checkpoint_every=CHAR_EPOCH)
# Table 6 (the FS-RNN-2 variants): 180 epochs at 2e-3, 60 at 1e-4, 120 at 1e-5.
FS_TRAINING = dict(CHAR_TRAINING, num_steps=360 * CHAR_EPOCH,
                   lr_boundaries=[180 * CHAR_EPOCH, 240 * CHAR_EPOCH],
                   lr_values=[2e-3, 1e-4, 1e-5])
# The paper's SGD rate 0.65 and clip norm 5 act on the gradient of the loss SUMMED over the
# window's time steps (and averaged over the batch), as in the Torch LM code of the time
# (Zaremba et al.); ours is the mean per token, 1/seq_len of that. The same updates: rate
# x seq_len, clip norm / seq_len (exact for SGD with clipping). 40 epochs, the rate x 0.85
# after every validation that improves the perplexity by less than 1; the best-validation
# checkpoint kept for the test (a patience of 1,000 evaluations never stops a run).
WORD_TRAINING = dict(level="word", batch_size=40, seq_len=35, optimizer="sgd",
                     learning_rate=0.65 * 35, grad_clip=5.0 / 35, lr_plateau_factor=0.85,
                     lr_plateau_metric="eval_ppl", lr_plateau_min_delta=1.0,
                     early_stopping_metric="eval_ppl", early_stopping_mode="min",
                     early_stopping_patience=1000, num_steps=40 * WORD_EPOCH,
                     eval_every=WORD_EPOCH, checkpoint_every=WORD_EPOCH)

# The paper's variants: config fields, ``model`` the fields of config.model (Table 3 /
# Table 5 sizes; the LSTMN paper's Table 1 for the word level).
VARIANTS = {
    "fs_rum2": dict(FS_TRAINING, model=fast_slow("rum", 1000, **RUM_OPTIONS)),
    "fs_lstm2": dict(FS_TRAINING, model=fast_slow("lnlstm", 400, zoneout=0.1,
                                                  zoneout_c=0.5)),
    "rum1000": dict(CHAR_TRAINING, model=dict(RUM, hidden_size=1000)),
    "rum1000_tanh": dict(CHAR_TRAINING, model=dict(RUM, hidden_size=1000,
                                                   activation="tanh")),
    "rum1400_nogate": dict(CHAR_TRAINING, model=dict(RUM, hidden_size=1400,
                                                     update_gate=False)),
    "rum2000": dict(CHAR_TRAINING, model=dict(RUM, hidden_size=2000)),
    "2xrum1500": dict(CHAR_TRAINING, model=dict(RUM, hidden_size=1500, eta=0.3,
                                                core="stacked", num_layers=2)),
    "lstm1000": dict(CHAR_TRAINING, model=dict(cell="lnlstm", hidden_size=1000,
                                               zoneout=0.1, zoneout_c=0.5)),
    "fs_eurnn2": dict(FS_TRAINING, model=fast_slow("eurnn", 2000)),
    "fs_goru2": dict(FS_TRAINING, model=fast_slow("goru", 800)),
    "word_lstm300": dict(WORD_TRAINING, model=dict(WORD_MODEL, cell="lstm")),
    "word_lstmn1": dict(WORD_TRAINING, model=dict(WORD_MODEL, core="lstmn", cell="lstmn",
                                                  num_layers=1)),
    "word_lstmn3": dict(WORD_TRAINING, model=dict(WORD_MODEL, core="lstmn", cell="lstmn",
                                                  num_layers=3)),
}
CHAR_VARIANTS = tuple(v for v, fields in VARIANTS.items() if "level" not in fields)
WORD_VARIANTS = tuple(v for v, fields in VARIANTS.items() if fields.get("level") == "word")
# The small set-up (not the paper's): RUM 256, batch 32, windows of 100, 2,000 steps; the
# evaluators read the first 50 windows of valid during training and the whole valid and
# test streams at the end.
SMALL = dict(batch_size=32, seq_len=100, num_steps=2000, eval_every=500, checkpoint_every=500,
             model=dict(RUM, hidden_size=256))
SMALL_VALID_WINDOWS = 50


def model_config(fields: dict) -> ml_collections.ConfigDict:
  """``config.model`` of a variant's ``model`` fields: :data:`FAST_SLOW_LM` for the core
  ``"fast_slow"`` (its cells' options prefixed), else :data:`LM` around one registered cell
  (:func:`tasks.common.cell_model_config`)."""
  if fields.get("core") == "fast_slow":
    m = common.add_precision(ml_collections.ConfigDict(FAST_SLOW_LM))
  else:
    m = common.cell_model_config("lm", **LM)
  m.update(fields)
  return m


def get_config(variant: Optional[str] = None) -> ml_collections.ConfigDict:
  """The PTB config: the small char-level CPU setting (``None``) or a paper variant."""
  common.check_variant(NAME, variant, VARIANTS)
  fields = copy.deepcopy(SMALL if variant is None else VARIANTS[variant])  # lists: not shared
  c = common.base_config(NAME, variant)
  c.level = "char"          # "char": the 50 symbols and end-of-line; "word": 10k words
  # The raw files (Mikolov's simple-examples/data; "" = download) and the prepared data
  # ("" = the TFDS default).
  c.manual_dir = common.shared_data_dir(NAME)
  c.data_dir = ""
  c.model = model_config(fields.pop("model"))
  c.optimizer = "adam"
  c.learning_rate = 2e-3
  c.grad_clip = 1.0
  c.seq_len = 0             # the window: steps per training batch (the state is carried)
  c.update(fields)
  c.eval_batch_size = c.batch_size   # rows of the valid/test streams (1 in the ref. code)
  # Valid every eval_every steps (its first 50 windows in the small setting) and at the
  # end, test at the end; both whole streams at the end, with the state carried (bpc, ppl).
  during = SMALL_VALID_WINDOWS if variant is None else 0
  # The small setting reads the whole valid stream at the end; a variant's final run reads
  # what it reads while training (all of it, unless an experiment limits ``batches``).
  at_end = {"batches_at_end": 0} if during else {}
  c.evals.eval = common.eval_entry("valid", c.get_ref("eval_every"), during,
                                   type="perplexity", batch_size=c.get_ref("eval_batch_size"),
                                   **at_end)
  c.evals.test = common.eval_entry("test", 0, type="perplexity",
                                   batch_size=c.get_ref("eval_batch_size"))
  return c

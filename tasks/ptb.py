"""Task (D): language modelling on the Penn Treebank (Dangovski et al., TACL 2019, sec. 4 D
and Table 3; ICLR version, appendix D, Tables 5-6; word level: Cheng et al., 2016, sec. 5.1).

Data: Mikolov's PTB (``ptb.{train,valid,test}.txt`` and ``ptb.char.*``) through the TFDS
builder :mod:`tasks.datasets.ptb`, read from ``manual_dir`` (default ``../shared/data/ptb``
next to the checkout when it exists) or downloaded. ``level`` ``"char"``: the 50 character
symbols (``_`` marks a space) plus an end-of-line token; ``"word"``: the 10,000 words
including ``<eos>``. The vocabulary comes from the training split.

Each split is one token stream. Training (:class:`tasks.data.StreamBatches`) lays it out as
``batch_size`` contiguous rows read in windows of ``seq_len`` steps (150 characters in the
paper), not shuffled; the model's recurrent state is carried from window to window (the
loop's ``model_state``) and reset at the start of every epoch (``batch["reset"]``). The
iterator position and the carried state are in every checkpoint, so a resumed run continues
mid-epoch exactly. Evaluation (:func:`tasks.data.eval_stream`) reads the whole valid/test
stream once with the state carried (``config.eval_batch_size`` rows; the reference code
tests with 1) and the ``perplexity`` evaluator reports ``bpc = NLL / (tokens ln 2)``,
``ppl = exp(NLL / tokens)`` and ``tokens`` (the split's number of targets).

Models (``config.model``, :class:`rumjax.models.lm.LanguageModel`): embedding (128 for
characters, 150 for words) -> dropout -> core -> dropout -> softmax. ``model.core``:

* ``"cell"``: one registered cell (``model.cell``, ``model.hidden_size`` and its options);
* ``"stacked"``: ``model.num_layers`` copies of that cell, one above the other;
* ``"fast_slow"``: the FS-RNN-k of Mujika et al. (2017), fast cells ``model.fast_cell`` x
  ``model.num_fast`` of size ``model.fast_size`` around a slow cell ``model.slow_cell`` of
  size ``model.slow_size``, their options prefixed ``fast_`` / ``slow_`` (``slow_lam``,
  ``fast_zoneout_c``, ...; :func:`rumjax.cells.fast_slow.fast_slow_from_config`);
* ``"lstmn"``: ``model.num_layers`` LSTMN layers of size ``model.hidden_size`` (Cheng et
  al. 2016, §5.1; :class:`rumjax.models.lstmn.LSTMNCore`): each window's tapes start from
  the previous window's last state, ``model.cell`` is ignored.

Probabilities: ``model.dropout_rate`` is the probability of DROPPING a unit (non-recurrent
dropout, 0.35 in Table 5); the ``zoneout`` fields are the probabilities of KEEPING THE
PREVIOUS value of a unit (Krueger et al.; Table 5's "cell zoneout 0.5, hidden zoneout 0.1").
The FS-RNN reference code writes the same as keep-probabilities of the new value (keep_c
0.5, keep_h 0.9, dropout keep 0.65), and the TACL text mixes the two ("0.5/0.9/0.35").
"""

import functools
import math
import os
from typing import Any, Iterator, Mapping, Optional

import jax.numpy as jnp
import ml_collections
import numpy as np

from rumjax import metrics, models
from rumjax.cells import cell_from_config
from rumjax.models import lm, precision
from tasks import common
from tasks import data as data_lib

NAME = "ptb"
CHAR_VARIANTS = ("fs_rum2", "fs_lstm2", "rum1000", "rum1000_tanh", "rum1400_nogate",
                 "rum2000", "2xrum1500", "lstm1000", "fs_eurnn2", "fs_goru2")
WORD_VARIANTS = ("word_lstm300", "word_lstmn1", "word_lstmn3")
VARIANTS = CHAR_VARIANTS + WORD_VARIANTS
EVAL_SPLITS = ("valid", "test")
LEVELS = ("char", "word")
CORES = ("cell", "stacked", "fast_slow", "lstmn")
# Training-stream tokens (one end-of-line token per line), for epochs -> steps.
TRAIN_TOKENS = {"char": 5_017_482, "word": 929_589}


def default_manual_dir() -> str:
  """``../shared/data/ptb`` relative to the repository root if it exists, else ``""``."""
  return common.shared_data_dir("ptb")


def steps_per_epoch(level: str, batch_size: int, seq_len: int) -> int:
  """Training windows per epoch: ``((N - 1) // B) // T`` (see tasks/data/stream.py)."""
  return ((TRAIN_TOKENS[level] - 1) // batch_size) // seq_len


# ---------------------------------------------------------------------------- config


def _rum(**fields) -> dict:
  """A RUM core with layer norm and zoneout of h (Table 5), ``lam`` 0, ``eta`` 1.0."""
  return {**dict(cell="rum", lam=0, eta=1.0, activation="relu", update_gate=True,
                 layer_norm=True, zoneout=0.1), **fields}


def _fast_slow(slow_cell: str, slow_size: int, **slow) -> ml_collections.ConfigDict:
  """``config.model`` of an FS-RNN-2 (Table 5): fast LN-LSTM 700 x 2 with zoneout 0.1 (h)
  and 0.5 (c), the slow cell's options prefixed ``slow_`` (see
  :func:`rumjax.cells.fast_slow.fast_slow_from_config`)."""
  m = ml_collections.ConfigDict(dict(
      name="lm", core="fast_slow", embed_dim=128, dropout_rate=0.35, fast_cell="lnlstm",
      fast_size=700, num_fast=2, fast_zoneout=0.1, fast_zoneout_c=0.5, slow_cell=slow_cell,
      slow_size=slow_size))
  common.add_precision(m)
  m.update({f"slow_{k}": v for k, v in slow.items()})
  return m


def _model(variant: Optional[str]) -> ml_collections.ConfigDict:
  """``config.model`` of a variant (Table 3 / Table 5 sizes)."""
  fs = {
      "fs_rum2": lambda: _fast_slow("rum", 1000, **{k: v for k, v in _rum().items()
                                                    if k != "cell"}),
      "fs_lstm2": lambda: _fast_slow("lnlstm", 400, zoneout=0.1, zoneout_c=0.5),
      "fs_eurnn2": lambda: _fast_slow("eurnn", 2000),
      "fs_goru2": lambda: _fast_slow("goru", 800),
  }
  if variant in fs:
    return fs[variant]()
  table = {
      None: _rum(hidden_size=256),
      "rum1000": _rum(hidden_size=1000),
      "rum1000_tanh": _rum(hidden_size=1000, activation="tanh"),
      "rum1400_nogate": _rum(hidden_size=1400, update_gate=False),
      "rum2000": _rum(hidden_size=2000),
      "2xrum1500": _rum(hidden_size=1500, eta=0.3, core="stacked", num_layers=2),
      "lstm1000": dict(cell="lnlstm", hidden_size=1000, zoneout=0.1, zoneout_c=0.5),
      "word_lstm300": dict(cell="lstm", hidden_size=300, embed_dim=150, dropout_rate=0.5,
                           zoneout=0.0),
      "word_lstmn1": dict(core="lstmn", cell="lstmn", hidden_size=300, num_layers=1,
                          embed_dim=150, dropout_rate=0.5, zoneout=0.0),
      "word_lstmn3": dict(core="lstmn", cell="lstmn", hidden_size=300, num_layers=3,
                          embed_dim=150, dropout_rate=0.5, zoneout=0.0),
  }
  m = common.cell_model_config("lm", embed_dim=128, dropout_rate=0.35, core="cell",
                               num_layers=1, zoneout_c=0.0)
  m.update(table[variant])
  return m


def default_config(variant: Optional[str] = None) -> ml_collections.ConfigDict:
  """The PTB config: a small char-level CPU setting (``None``) or a paper variant.

  Char variants (Table 3 / Table 5): batch 128, windows of 150, Adam 0.002, global-norm
  clip 1.0; FS variants follow Table 6 (180 epochs at 2e-3, 60 at 1e-4, 120 at 1e-5), the
  others 100 epochs at 2e-3. Word variants (LSTMN paper §5.1, Table 1): ``word_lstm300``
  (LSTM 300, the baseline), ``word_lstmn1`` / ``word_lstmn3`` (LSTMN 300, 1 / 3 layers),
  embedding 150, output dropout 0.5 (ours: the paper gives none), batch 40, windows of 35,
  SGD 0.65 with gradients renormalised above norm 5 for the loss summed over a window's 35
  steps, i.e. ``learning_rate = 0.65 * seq_len`` and ``grad_clip = 5 / seq_len`` for our
  per-token mean loss (the same updates), the rate multiplied by 0.85 after every epoch's
  validation that does not improve the perplexity (``lr_plateau_*`` fields; "no
  significant improvement" in the paper, read here as any increase or tie: set
  ``lr_plateau_min_delta`` for a threshold).

  The small default (not the paper's): RUM 256 (lam 0, eta 1.0, layer norm, zoneout),
  batch 32, windows of 100, 2,000 steps; the evaluators read the first 50 windows of valid
  during training and the whole valid and test streams at the end.
  """
  if variant is not None and variant not in VARIANTS:
    raise ValueError(f"unknown ptb variant {variant!r}; known variants are {list(VARIANTS)} "
                     "(or None for the small char-level setting).")
  c = common.base_config(NAME, variant)
  c.level = "word" if variant in WORD_VARIANTS else "char"
  c.manual_dir = default_manual_dir()
  c.data_dir = ""
  c.model = _model(variant)
  c.optimizer = "adam"
  c.learning_rate = 2e-3
  c.grad_clip = 1.0
  if variant is None:
    c.batch_size, c.seq_len, c.num_steps = 32, 100, 2000
    c.eval_every, c.checkpoint_every = 500, 500
    during = 50
  elif c.level == "char":
    c.batch_size, c.seq_len = 128, 150
    epoch = steps_per_epoch("char", c.batch_size, c.seq_len)
    if variant.startswith("fs_"):
      c.num_steps = 360 * epoch
      c.lr_boundaries = [180 * epoch, 240 * epoch]
      c.lr_values = [2e-3, 1e-4, 1e-5]
    else:
      c.num_steps = 100 * epoch
    c.eval_every = c.checkpoint_every = epoch
    during = 0
  else:
    c.batch_size, c.seq_len = 40, 35
    # The paper's SGD rate 0.65 and clip norm 5 act on the gradient of the loss SUMMED over
    # the window's time steps (and averaged over the batch), as in the Torch LM code of the
    # time (Zaremba et al.); ours is the mean per token, 1/seq_len of that. The same
    # updates: rate x seq_len, clip norm / seq_len (exact for SGD with clipping).
    c.optimizer = "sgd"
    c.learning_rate, c.grad_clip = 0.65 * c.seq_len, 5.0 / c.seq_len
    c.lr_plateau_factor, c.lr_plateau_metric = 0.85, "eval_ppl"
    epoch = steps_per_epoch("word", c.batch_size, c.seq_len)
    c.num_steps = 40 * epoch
    c.eval_every = c.checkpoint_every = epoch
    during = 0
  c.eval_batch_size = c.batch_size
  c.evals.eval = common.eval_entry("valid", c.get_ref("eval_every"), during,
                                   type="perplexity", batch_size=c.get_ref("eval_batch_size"))
  c.evals.test = common.eval_entry("test", 0, type="perplexity",
                                   batch_size=c.get_ref("eval_batch_size"))
  return c


def validate_config(config: Mapping[str, Any]) -> None:
  """Raises ``ValueError`` naming the first bad field."""
  common.check_task(config, NAME, VARIANTS)
  common.validate_common(config, EVAL_SPLITS)
  model = config["model"]
  if config["level"] not in LEVELS:
    raise ValueError(f"config.level={config['level']!r} must be one of {list(LEVELS)}.")
  common.check_int(config, "seq_len", 1)
  common.check_int(config, "eval_batch_size", 1)
  if model["core"] not in CORES:
    raise ValueError(f"config.model.core={model['core']!r} must be one of {list(CORES)}.")
  if model["core"] in ("cell", "stacked"):
    common.validate_cell_model(model)
  if model["core"] != "fast_slow":
    common.check_int(model, "hidden_size", 1, "config.model")
    common.check_int(model, "num_layers", 1, "config.model")
  common.check_int(model, "embed_dim", 1, "config.model")
  if not isinstance(model["dropout_rate"], (int, float)) or not 0 <= model["dropout_rate"] < 1:
    raise ValueError(f"config.model.dropout_rate={model['dropout_rate']!r} must be in [0, 1).")
  try:
    build_core(model)  # the cells check their own options (sizes, zoneout, names)
  except (ValueError, TypeError) as err:
    raise ValueError(f"config.model: {err}") from None
  common.check_data_folders(config, "ptb.train.txt, ptb.valid.txt, ptb.test.txt and "
                            "ptb.char.*.txt (Mikolov's simple-examples/data)")


# ----------------------------------------------------------------------------- data

_BUILDER_SPLIT = {"train": "train", "valid": "validation", "test": "test"}


@functools.lru_cache(maxsize=4)
def _streams(level: str, manual_dir: str, data_dir: str):
  """``(vocab, {split: <int32>[N]})`` of a level (the data prepared once per process)."""
  from tasks.datasets import ptb as ptb_data
  from tasks.datasets import prepare  # imports TFDS: only when data is needed
  try:
    lines = ptb_data.load_splits(level, os.path.expanduser(manual_dir) if manual_dir else "",
                                 os.path.expanduser(data_dir) if data_dir else "")
  except FileNotFoundError as err:   # one line; a ValueError and still a FileNotFoundError
    raise prepare.MissingSourceError(" ".join(str(err).split())) from None
  vocab = ptb_data.build_vocabulary(level, lines["train"])
  source = os.path.expanduser(manual_dir) if manual_dir else ""
  streams = {s: ptb_data.stream(lines[b], vocab, ptb_data.source_file(source, level, b))
             for s, b in _BUILDER_SPLIT.items()}
  for v in streams.values():
    v.flags.writeable = False
  return vocab, streams


def vocabulary(config):
  """The :class:`tasks.text.Vocabulary` of ``config.level`` (from the training split)."""
  return _streams(config.level, config.manual_dir, config.data_dir)[0]


def token_stream(config, split: str) -> np.ndarray:
  """The token ids <int32>[N] of a split (an end-of-line token after every line)."""
  if split not in _BUILDER_SPLIT:
    raise ValueError(f"unknown ptb split {split!r}; known splits are "
                     f"{list(_BUILDER_SPLIT)}.")
  return _streams(config.level, config.manual_dir, config.data_dir)[1][split]


def train_data(config, *, process_index: int = 0,
               process_count: int = 1) -> data_lib.StreamBatches:
  """Endless windows of the training stream (``inputs``, ``targets``, ``weights``,
  ``mask``, ``reset``); resumable mid-epoch (:class:`tasks.data.StreamBatches`)."""
  from tasks.datasets import ptb as ptb_data
  source = ptb_data.source_file(os.path.expanduser(config.manual_dir) if config.manual_dir
                                else "", config.level, "train")
  return data_lib.StreamBatches(token_stream(config, "train"), batch_size=config.batch_size,
                                seq_len=config.seq_len, process_index=process_index,
                                process_count=process_count,
                                source=f"the PTB {config.level} train split ({source})")


def eval_data(config, split: str, *, process_index: int = 0,
              process_count: int = 1) -> Iterator[dict]:
  """The whole ``valid`` or ``test`` stream once, in windows of ``batch_size`` rows
  (padding has weight 0: every target counts exactly once)."""
  if split not in EVAL_SPLITS:
    raise ValueError(f"unknown ptb split {split!r}; known splits are {list(EVAL_SPLITS)}.")
  return data_lib.eval_stream(token_stream(config, split), batch_size=config.batch_size,
                              seq_len=config.seq_len, process_index=process_index,
                              process_count=process_count)


def to_text(config, ids) -> str:
  """Token ids as text: one line per end-of-line token; characters joined with ``_``
  back to spaces, words separated by spaces."""
  vocab = vocabulary(config)
  tokens = vocab.to_tokens(ids, strip_special=False, stop_at_eos=False)
  sep = "" if config.level == "char" else " "
  lines = sep.join(tokens).split(vocab.eos)
  text = "\n".join(line.strip() for line in lines)
  return text.replace("_", " ") if config.level == "char" else text


# ---------------------------------------------------------------------------- model


def build_core(model: Mapping[str, Any]):
  """The recurrent core of ``config.model`` (see the module docstring, ``model.core``),
  in the precision policy ``model.dtype``/``model.param_dtype`` (an FS-RNN's roles may
  override it with ``fast_dtype``/``slow_dtype``)."""
  model = precision.resolve(model)
  if model["core"] == "stacked":
    from rumjax.cells import stacked
    return stacked.stacked_from_config(model)
  if model["core"] == "fast_slow":
    from rumjax.cells import fast_slow
    return fast_slow.fast_slow_from_config(model)
  if model["core"] == "lstmn":
    from rumjax.models import lstmn
    return lstmn.LSTMNCore(model["hidden_size"], num_layers=model["num_layers"],
                           dtype=model.get("dtype"),
                           param_dtype=model.get("param_dtype", jnp.float32))
  return cell_from_config(model["cell"], model["hidden_size"], model)


def build_model(config):
  """A :class:`rumjax.models.lm.LanguageModel` around :func:`build_core`."""
  return models.build_model(config.model, cell=build_core(config.model),
                            vocab_size=len(vocabulary(config)))


def initial_model_state(config, batch_size: int):
  """The core's initial carry for ``batch_size`` rows (carried across windows)."""
  return lm.initial_state(build_model(config), batch_size)


def loss_and_metrics(outputs, batch):
  """Mean NLL per target token, and metric sums.

  Args:
    outputs: the logits <float>[batch, T, vocab] (the loop takes the model's new state).
    batch: ``{"targets": <int>[batch, T], "weights": <float>[batch, T], ...}``.

  Returns:
    ``(loss, {"loss": (nll, tokens), "nll": (nll, tokens), "bpc": (nll / ln 2, tokens)})``
    with ``nll`` the summed negative log-likelihood (nats) of the weighted targets.
  """
  logits = outputs
  weights = jnp.asarray(batch["weights"], jnp.float32)
  nll = jnp.sum(metrics.cross_entropy(logits, batch["targets"]) * weights)
  tokens = jnp.sum(weights)
  return nll / jnp.maximum(tokens, 1.0), {"loss": (nll, tokens), "nll": (nll, tokens),
                                          "bpc": (nll / math.log(2), tokens)}

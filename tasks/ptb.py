"""Task (D): language modelling on the Penn Treebank (Dangovski et al., TACL 2019, sec. 4 D
and Table 3; ICLR version, appendix D, Tables 5-6; word level: Cheng et al., 2016, sec. 5.1).

Data: Mikolov's PTB (``ptb.{train,valid,test}.txt`` and ``ptb.char.*``) through the TFDS
builder :mod:`tasks.datasets.ptb`, read from ``manual_dir`` (default ``../shared/data/ptb``
next to the checkout when it exists) or downloaded. ``level`` ``"char"``: the 49 character
symbols of the training file (``_`` marks a space) plus an end-of-line token (50, the
paper's count); ``"word"``: the 10,000 words
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
characters, 150 for words) -> dropout -> core -> dropout -> softmax. ``model.core``, a
name in the registry :data:`CORES` (:func:`build_core`):

* ``"cell"``: one registered cell (``model.cell``, ``model.hidden_size`` and its options);
* ``"stacked"``: ``model.num_layers`` copies of that cell, one above the other;
* ``"fast_slow"``: the FS-RNN-k of Mujika et al. (2017), fast cells ``model.fast_cell`` x
  ``model.num_fast`` of size ``model.fast_size`` around a slow cell ``model.slow_cell`` of
  size ``model.slow_size``, their options prefixed ``fast_`` / ``slow_`` (``slow_lam``,
  ``fast_zoneout_c``, ...; :func:`rumjax.cells.fast_slow.fast_slow_from_config`);
* ``"lstmn"``: ``model.num_layers`` LSTMN layers of size ``model.hidden_size`` (Cheng et
  al. 2016, §5.1; :class:`rumjax.models.lstmn.LSTMNCore`): each window's tapes start from
  the previous window's last state, ``model.cell`` is ignored; ``model.memory_span`` K > 0
  limits the attention to the K most recent tape positions (K = 1: an LSTM).

Probabilities: ``model.dropout_rate`` is the probability of DROPPING a unit (non-recurrent
dropout, 0.35 in Table 5); the ``zoneout`` fields are the probabilities of KEEPING THE
PREVIOUS value of a unit (Krueger et al.; Table 5's "cell zoneout 0.5, hidden zoneout 0.1").
The FS-RNN reference code writes the same as keep-probabilities of the new value (keep_c
0.5, keep_h 0.9, dropout keep 0.65), and the TACL text mixes the two ("0.5/0.9/0.35").

The config is :mod:`tasks.configs.ptb` (the paper's char variants ``fs_rum2``, ``fs_lstm2``,
``rum1000``, ..., the word variants ``word_lstm300``, ``word_lstmn1``, ``word_lstmn3``;
without a variant a small char-level setting).
"""

import functools
import math
import os
from typing import Any, Iterator, Mapping

import jax.numpy as jnp
import numpy as np

from rumjax import metrics, models, registry
from rumjax.cells import cell_from_config, fast_slow_from_config, stacked_from_config
from rumjax.models import lm, lstmn, precision
from tasks import common
from tasks import data as data_lib
from tasks.base import Task
from tasks.configs import ptb as config_lib

NAME = config_lib.NAME
EVAL_SPLITS = ("valid", "test")
LEVELS = ("char", "word")
steps_per_epoch = config_lib.steps_per_epoch

# ``model.core`` by name: ``model -> core`` (see the module docstring); ``model`` is the
# ``config.model`` with its precision policy resolved to dtypes.
CORES = registry.Registry("core")
CORES.register("stacked", stacked_from_config)
CORES.register("fast_slow", fast_slow_from_config)


@CORES.register("cell")
def cell_core(model: Mapping[str, Any]):
  """One registered cell ``model.cell`` of size ``model.hidden_size`` with its options."""
  return cell_from_config(model["cell"], model["hidden_size"], model)


@CORES.register("lstmn")
def lstmn_core(model: Mapping[str, Any]) -> lstmn.LSTMNCore:
  """``model.num_layers`` LSTMN layers of size ``model.hidden_size`` (Cheng et al. 2016,
  sec. 5.1)."""
  return lstmn.LSTMNCore(model["hidden_size"], num_layers=model["num_layers"],
                         memory_span=model.get("memory_span") or None,
                         dtype=model.get("dtype"),
                         param_dtype=model.get("param_dtype", jnp.float32),
                         precision=model.get("precision"))


def validate_config(config: Mapping[str, Any]) -> None:
  """Raises ``ValueError`` naming the first bad field."""
  common.check_task(config, NAME, config_lib.VARIANTS)
  common.validate_common(config, EVAL_SPLITS)
  model = config["model"]
  if config["level"] not in LEVELS:
    raise ValueError(f"config.level={config['level']!r} must be one of {list(LEVELS)}.")
  common.check_int(config, "seq_len", 1)
  common.check_int(config, "eval_batch_size", 1)
  if model["core"] not in CORES:
    raise ValueError("config.model.core: " + registry.unknown_name_message(
        "core", model["core"], CORES.names()))
  if model["core"] in ("cell", "stacked"):
    common.validate_cell_model(model)
  if model["core"] != "fast_slow":
    common.check_int(model, "memory_span", 0, "config.model")
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


def sentence_in_context(config, sentence: str, split: str = "valid"
                        ) -> tuple[np.ndarray, np.ndarray]:
  """``(context, ids)``: a line of ``split`` and the stream before it (LSTMN Figure 4's
  sentences are lines of the validation set), as token ids <int32>[N], [L].

  ``sentence`` is a whole line as written in the file (words separated by spaces at the
  word level, characters at the char level); a line not in the split is encoded alone
  with an empty context (words outside the vocabulary become ``<unk>``).
  """
  vocab, stream = vocabulary(config), token_stream(config, split)
  units = sentence.split() if config.level == "word" else list(sentence.strip().replace(" ", "_"))
  ids = vocab.encode(units)
  ends = np.flatnonzero(stream == vocab.eos_id)          # the end of every line
  starts = np.concatenate([[0], ends[:-1] + 1])
  for start, end in zip(starts, ends):
    if end - start == len(ids) and np.array_equal(stream[start:end], ids):
      return stream[:start], stream[start:end]
  return stream[:0], np.asarray(ids, np.int32)


# ---------------------------------------------------------------------------- model


def build_core(model: Mapping[str, Any]):
  """The recurrent core of ``config.model``: :data:`CORES` ``[model.core]``, in the
  precision policy ``model.dtype``/``model.param_dtype`` (an FS-RNN's roles may override it
  with ``fast_dtype``/``slow_dtype``)."""
  return CORES.get(model["core"])(precision.resolve(model))


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


TASK = Task(name=NAME, get_config=config_lib.get_config, validate_config=validate_config,
            train_data=train_data, eval_data=eval_data, build_model=build_model,
            loss_and_metrics=loss_and_metrics, variants=tuple(config_lib.VARIANTS),
            eval_splits=EVAL_SPLITS, initial_model_state=initial_model_state,
            to_text=to_text)

"""Sentence and sentence-pair classifiers of the LSTMN paper (Cheng, Dong, Lapata 2016,
§5.2 sentiment, §5.3 natural language inference).

One body for all of them::

    tokens -> embedding (embed_dim, 300 in the paper: GloVe 840B)
           -> encoder (one sentence: hs <[B, T, H]>; a pair: one tape per sentence)
           -> pooling over the real tokens ("mean": the masked average of the hidden tape,
              §5.2-5.3; "last": the last real position)
           -> mlp_layers x (Dense(mlp_size) + ReLU) -> dropout -> Dense(num_classes)

A batch holds either one sentence, ``{"inputs": <int>[B, T], "lengths": <int>[B]}`` (SST),
or a pair, ``{"premise": <int>[B, M], "premise_lengths", "hypothesis": <int>[B, T],
"hypothesis_lengths"}`` (SNLI); token ids after ``lengths`` are padding and never reach
the logits. A pair is classified from ``[pool(premise tape), pool(hypothesis tape)]``
(§5.3: "average pooling for the hidden state tape of each LSTMN, and concatenate the two
averages to form the input to a 2-layer neural network classifier with ReLU").

Registered models (``config.model.name``):

* ``"lstm"``: :class:`RecurrentTextClassifier`, any registered cell (``config.model.cell``,
  default ``"lstm"``); a pair gets two encoders with their own weights (the two LSTMs of
  Bowman et al., 2015).
* ``"lstmn"``: :class:`LSTMNTextClassifier`, a :class:`rumjax.models.StackedLSTMN`
  (``num_layers`` 1 or 2 in the paper); a pair gets two LSTMNs ("we use two LSTMNs to read
  the premise and hypothesis").
* ``"lstmn_shallow"``, ``"lstmn_deep"``: :class:`FusionTextClassifier`, pairs only: the
  premise is the source, the hypothesis the target of :class:`rumjax.models.ShallowFusion`
  / :class:`rumjax.models.DeepFusion` (§4); the pooled tapes are the encoder's ``src_hs``
  and the fusion ``outputs`` (attentional vectors for shallow fusion, ``tgt_hs`` for deep).

The classifier head follows the authors' ``classifier_simple.lua`` (cheng6076/SNLI-attention):
two ReLU layers of the hidden size, dropout, then the softmax layer. ``mlp_layers=0`` is a
linear softmax layer on the (dropped-out) pooled vector: our choice for the paper's 1-layer
SST model, whose classifier the paper does not describe (the 2-layer one "predict[s] ...
based on the averaged hidden vector passed to a 2-layer neural network classifier with
ReLU"). Pooling is the masked mean for every model here, ``"last"`` by config.

:func:`intra_attention` re-runs the LSTMN layers of a trained model on a batch and returns
their intra-attention weights (the picture of Figures 4-5, :mod:`rumjax.plotting.attention`).
"""

from typing import Any, Callable, Mapping, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rumjax.core import lstmn as lstmn_lib
from rumjax.cells.base import check_probability
from rumjax.layers.dense import Dense
from rumjax.models.fusion import DeepFusion, ShallowFusion
from rumjax.models import precision
from rumjax.models.lstmn import StackedLSTMN
from rumjax.models.registry import MODELS, build_model, model_fields, register_model
from rumjax.models.sequence import run_recurrence
from rumjax.registry import Registry

Array = jax.Array

PAIR_KEYS = ("premise", "hypothesis")


# ------------------------------------------------------------------------- pieces


def length_mask(tokens: Array, lengths: Optional[Array]) -> Array:
  """<bool>[B, T]: True at the first ``lengths[b]`` positions (all of them without)."""
  steps = tokens.shape[1]
  if lengths is None:
    return jnp.ones(tokens.shape[:2], bool)
  return jnp.arange(steps)[None, :] < jnp.asarray(lengths, jnp.int32)[:, None]


def masked_mean(hs: Array, mask: Array) -> Array:
  """The average of ``hs`` <float>[B, T, H] over the positions where ``mask`` <bool>[B, T];
  padded entries are never read (they may hold anything, even NaN). Empty rows give 0."""
  total = jnp.sum(jnp.where(mask[..., None], hs, 0.0), axis=1)
  count = jnp.sum(mask, axis=1, keepdims=True).astype(total.dtype)
  return total / jnp.maximum(count, 1.0)


def last_real(hs: Array, mask: Array) -> Array:
  """``hs`` <float>[B, T, H] at each row's last real position, <float>[B, H] (0 if none)."""
  last = mask.shape[1] - 1 - jnp.argmax(mask[:, ::-1], axis=1)
  out = jnp.take_along_axis(hs, last[:, None, None], axis=1)[:, 0]
  return jnp.where(jnp.any(mask, axis=1)[:, None], out, 0.0)


# ``config.model.pooling``: the sentence vector of a hidden tape, ``(hs, mask) -> [B, H]``.
POOLINGS = Registry("pooling")
POOLINGS.register("mean", masked_mean)
POOLINGS.register("last", last_real)


def _check_pooling(pooling: str, where: str = "") -> None:
  if pooling not in POOLINGS:
    raise ValueError(f"{where}pooling={pooling!r} is unknown; use one of "
                     f"{POOLINGS.names()}.")


def pool(hs: Array, mask: Array, pooling: str) -> Array:
  """The pooling registered as ``pooling`` (:data:`POOLINGS`: ``"mean"``,
  :func:`masked_mean`; ``"last"``, :func:`last_real`): [B, T, H] -> [B, H]."""
  _check_pooling(pooling)
  return POOLINGS.get(pooling)(hs, mask)


def pretrained_init(matrix: Callable[[], np.ndarray]) -> Callable:
  """An ``nn.Embed`` initializer returning ``matrix()`` (<float>[V, D], e.g. from
  :func:`tasks.text.embeddings.load_word_vectors`); called only when parameters are
  initialised, so a model can be built without reading the vector file."""

  def init(key, shape, dtype=jnp.float32):
    del key
    value = np.asarray(matrix())
    if tuple(value.shape) != tuple(shape):
      raise ValueError(f"the pre-trained embedding has shape {value.shape}; the model's "
                       f"embedding is {tuple(shape)} (vocabulary size, embed_dim).")
    return jnp.asarray(value, dtype)

  return init


class ClassifierHead(nn.Module):
  """``mlp_layers`` x (Dense(mlp_size) + ReLU), dropout, Dense(num_classes) (the authors'
  ``classifier_simple.lua``: dropout after the ReLU layers, before the softmax layer).

  Submodules ``mlp_0``, ``mlp_1``, ... and ``logits``, at the matmul ``precision``.
  """
  num_classes: int
  mlp_layers: int
  mlp_size: int
  dropout_rate: float
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  precision: Any = None

  @nn.compact
  def __call__(self, features: Array, train: bool) -> Array:
    """<float>[B, F] -> logits <float32>[B, num_classes] (float32 under any policy)."""
    dense = lambda n, name: Dense(n, dtype=self.dtype, param_dtype=self.param_dtype,
                                     precision=self.precision, name=name)
    for k in range(self.mlp_layers):
      features = nn.relu(dense(self.mlp_size, f"mlp_{k}")(features))
    features = nn.Dropout(self.dropout_rate, deterministic=not train)(features)
    return precision.output_dense(self.num_classes, dtype=self.dtype,
                                  param_dtype=self.param_dtype, precision=self.precision,
                                  name="logits")(features)


# ------------------------------------------------------------------------- models


class TextClassifier(nn.Module):
  """The shared body (module docstring); subclasses define the encoders.

  Attributes:
    vocab_size: word ids (the task's vocabulary).
    num_classes: output classes.
    hidden_size: ``H`` of the encoders (the paper's "memory size": 168 SST, 100/300/450
      SNLI).
    embed_dim: word-embedding size (300).
    pooling: ``"mean"`` or ``"last"``.
    mlp_layers: ReLU layers before the softmax layer (2 in the paper's SNLI and 2-layer
      SST models; 0 = a linear softmax layer).
    mlp_size: width of the ReLU layers (None: ``hidden_size``).
    dropout_rate: dropout before the softmax layer (0.5 SST, 0.1-0.4 SNLI).
    embedding_init: initializer of the embedding (:func:`pretrained_init` for word
      vectors; default Flax's ``default_embed_init``, variance scaling by fan-in: std
      ``1/sqrt(embed_dim)``).
    dtype, param_dtype: the precision policy (:mod:`rumjax.models.precision`; None:
      float32) of every layer; the logits are float32.
    precision: the matmul precision of every layer (None: the backend's default; a cell
      has its own, set by :func:`rumjax.models.build_model`).
  """
  vocab_size: int
  num_classes: int
  hidden_size: int = 168
  embed_dim: int = 300
  pooling: str = "mean"
  mlp_layers: int = 0
  mlp_size: Optional[int] = None
  dropout_rate: float = 0.5
  embedding_init: Callable = nn.linear.default_embed_init
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  precision: Any = None

  pairs_only = False  # reads sentence pairs only (the fusion models)

  @classmethod
  def config_fields(cls, model_config: Mapping[str, Any]) -> dict:
    """Fields this model builds from ``config.model`` itself (beyond
    :func:`rumjax.models.build_model`'s); none here."""
    del model_config
    return {}

  def attention_stack(self, params: Mapping[str, Any], sentence: Optional[str]) -> tuple:
    """``(stack params {"layer_k": ...}, skip_input)`` of the LSTMN whose intra-attention
    :func:`intra_attention` reads; this model has none."""
    raise ValueError(f"{type(self).__name__} has no intra-attention; train an 'lstmn' "
                     "model (config.model.name).")

  # Subclasses: one sentence -> hs <[B, T, H]>; a pair -> (premise tape, hypothesis tape).
  def encode(self, xs: Array, mask: Array, train: bool, name: str) -> Array:
    raise NotImplementedError

  def encode_pair(self, premise: tuple, hypothesis: tuple, train: bool) -> tuple:
    (xp, mp), (xh, mh) = premise, hypothesis
    return (self.encode(xp, mp, train, "premise_encoder"),
            self.encode(xh, mh, train, "hypothesis_encoder"))

  @nn.compact
  def __call__(self, batch: Mapping[str, Any], train: bool = False) -> Array:
    """Logits <float>[B, num_classes] of one sentence or a pair (module docstring)."""
    _check_pooling(self.pooling)
    check_probability("dropout_rate", self.dropout_rate)
    embed = nn.Embed(self.vocab_size, self.embed_dim, embedding_init=self.embedding_init,
                     dtype=self.dtype, param_dtype=self.param_dtype, name="embed")
    if "premise" in batch:
      sentences = []
      for key in PAIR_KEYS:
        tokens = jnp.asarray(batch[key])
        sentences.append((embed(tokens), length_mask(tokens, batch.get(f"{key}_lengths"))))
      tapes = self.encode_pair(*sentences, train)
      features = jnp.concatenate([pool(hs, mask, self.pooling)
                                  for hs, (_, mask) in zip(tapes, sentences)], axis=-1)
    else:
      tokens = jnp.asarray(batch["inputs"])
      mask = length_mask(tokens, batch.get("lengths"))
      features = pool(self.encode(embed(tokens), mask, train, "encoder"), mask,
                      self.pooling)
    head = ClassifierHead(self.num_classes, self.mlp_layers,
                          self.mlp_size or self.hidden_size, self.dropout_rate,
                          dtype=self.dtype, param_dtype=self.param_dtype,
                          precision=self.precision, name="head")
    return head(features, train)


@register_model("lstm")
class RecurrentTextClassifier(TextClassifier):
  """A recurrent cell over each sentence (``"lstm"``; the paper's LSTM baselines).

  Attributes (besides :class:`TextClassifier`'s):
    cell: the recurrent cell (built from ``config.model.cell`` and ``hidden_size``;
      :func:`build_text_classifier` stacks ``num_layers`` of them). Its parameters live at
      ``encoder/cell`` (``premise_encoder/cell``, ``hypothesis_encoder/cell`` for a pair).
  """
  cell: Optional[nn.RNNCellBase] = None

  @classmethod
  def config_fields(cls, model_config):
    """``num_layers > 1``: a :class:`rumjax.cells.stacked.StackedCells` of that many cells
    (no dropout between them) as ``cell``."""
    if model_config.get("num_layers", 1) <= 1:
      return {}
    from rumjax.cells import stacked
    return {"cell": stacked.stacked_from_config(precision.resolve(model_config),
                                                dropout_rate=0.0)}

  def encode(self, xs, mask, train, name):
    if self.cell is None:
      raise ValueError("model 'lstm' needs a cell (config.model.cell).")
    return run_recurrence(self.cell, xs, seq_lengths=jnp.sum(mask, axis=1), train=train,
                          name=name)


@register_model("lstmn")
class LSTMNTextClassifier(TextClassifier):
  """A stacked LSTMN over each sentence (``"lstmn"``, eqs. (4)-(10)).

  Attributes (besides :class:`TextClassifier`'s):
    num_layers: LSTMN layers (1 or 2 in §5.2).
    attn_size: ``Na`` of the intra-attention (None: ``hidden_size``).
    memory_span: None (attend to the whole tape, the paper) or the K most recent positions.
    skip_input: feed ``x_t`` to the upper layers as well.
    impl: ``"fast"`` or ``"reference"`` (:func:`rumjax.lstmn_scan`).
  """
  num_layers: int = 1
  attn_size: Optional[int] = None
  memory_span: Optional[int] = None
  skip_input: bool = False
  impl: str = "fast"

  def attention_stack(self, params, sentence):
    name = "encoder" if sentence is None else f"{sentence}_encoder"
    return params[name], self.skip_input

  def encode(self, xs, mask, train, name):
    stack = StackedLSTMN(self.num_layers, self.hidden_size,
                         self.attn_size or self.hidden_size, skip_input=self.skip_input,
                         memory_span=self.memory_span, impl=self.impl, dtype=self.dtype,
                         param_dtype=self.param_dtype, precision=self.precision, name=name)
    return stack(xs, mask, deterministic=not train)[0]


class FusionTextClassifier(TextClassifier):
  """Shallow or deep attention fusion over a sentence pair (§4; pairs only).

  Attributes (besides :class:`TextClassifier`'s):
    attn_size: ``Na`` of the intra-attentions (None: ``hidden_size``).
    inter_size: ``Nb`` of the inter-attention (None: ``attn_size``).
    memory_span: of the intra-attentions.
    condition_on_source: the decoder's tape position 0 holds the encoder's last state.
    impl: as :class:`LSTMNTextClassifier`.
  """
  attn_size: Optional[int] = None
  inter_size: Optional[int] = None
  memory_span: Optional[int] = None
  condition_on_source: bool = False
  impl: str = "fast"

  fusion_cls = None  # ShallowFusion or DeepFusion
  registered_name = ""
  pairs_only = True

  def attention_stack(self, params, sentence):
    if sentence != "premise":
      raise ValueError(f"model {self.registered_name!r}: only the premise's intra-"
                       "attention (its LSTMN encoder) is available: sentence='premise' "
                       "(launch.attention --role=premise).")
    return {"layer_0": params["fusion"]["encoder"]}, False

  def encode(self, xs, mask, train, name):
    raise ValueError(f"model {self.registered_name!r} reads a sentence pair "
                     "(batch['premise'], batch['hypothesis']); this batch has one sentence "
                     "(batch['inputs']): use config.model.name 'lstm' or 'lstmn'.")

  def encode_pair(self, premise, hypothesis, train):
    (xp, mp), (xh, mh) = premise, hypothesis
    fusion = self.fusion_cls(self.hidden_size, self.attn_size or self.hidden_size,
                             self.inter_size, memory_span=self.memory_span,
                             condition_on_source=self.condition_on_source, impl=self.impl,
                             dtype=self.dtype, param_dtype=self.param_dtype,
                             precision=self.precision, name="fusion")
    out = fusion(xp, mp, xh, mh)
    return out.src_hs, out.outputs


@register_model("lstmn_shallow")
class ShallowFusionTextClassifier(FusionTextClassifier):
  """Shallow attention fusion (Figure 3a): pooled ``[src_hs, o_t]`` (module docstring)."""
  fusion_cls = ShallowFusion
  registered_name = "lstmn_shallow"


@register_model("lstmn_deep")
class DeepFusionTextClassifier(FusionTextClassifier):
  """Deep attention fusion (Figure 3b, eqs. (11)-(16)): pooled ``[src_hs, tgt_hs]``."""
  fusion_cls = DeepFusion
  registered_name = "lstmn_deep"


# -------------------------------------------------------------------------- build


def _is_int(x) -> bool:
  return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def check_model_config(model: Mapping[str, Any], names: Sequence[str]) -> None:
  """Checks the fields of a text classifier's ``config.model`` (the cell's own fields are
  checked by ``tasks.common.validate_cell_model``); ``ValueError`` names the field.

  Args:
    model: ``config.model``: ``name``, ``cell``, ``num_layers``, ``embed_dim``, ``pooling``,
      ``mlp_layers`` (None allowed: the task decides), ``mlp_size``, ``dropout_rate``,
      ``attn_size``, ``memory_span``, ``impl`` and, when present, ``inter_size``,
      ``skip_input``, ``condition_on_source``.
    names: the model names this task accepts.
  """
  where = "config.model"
  cls = text_classifier_class(model["name"])
  if model["name"] not in names:
    raise ValueError(f"{where}.name={model['name']!r} is not a model of this task"
                     f"{' (it reads sentence pairs: snli)' if cls.pairs_only else ''}; its "
                     f"models are {list(names)}.")
  with_cell = [n for n in names if "cell" in model_fields(text_classifier_class(n))]
  if "cell" not in model_fields(cls) and model["cell"] != "lstm":
    raise ValueError(f"{where}.cell={model['cell']!r} is read only by {where}.name in "
                     f"{with_cell} (the recurrent baseline); {model['name']!r} has no cell. "
                     f"Set --config.model.name={with_cell[0] if with_cell else 'lstm'} to "
                     f"train a {model['cell']!r} encoder.")
  minimum = {"num_layers": 1, "embed_dim": 1, "mlp_layers": 0, "mlp_size": 1,
             "attn_size": 1, "memory_span": 1, "inter_size": 1}
  optional = ("mlp_layers", "mlp_size", "attn_size", "memory_span", "inter_size")
  for field, low in minimum.items():
    if field not in model or (field in optional and model[field] is None):
      continue
    if not _is_int(model[field]) or model[field] < low:
      raise ValueError(f"{where}.{field}={model[field]!r} must be an integer >= {low}"
                       f"{' (or None)' if field in optional else ''}.")
  if cls.pairs_only and model["num_layers"] != 1:
    raise ValueError(f"{where}.num_layers={model['num_layers']!r}: {model['name']!r} has "
                     "one LSTMN per sentence (encoder and decoder); set it to 1.")
  _check_pooling(model["pooling"], f"{where}.")
  rate = model["dropout_rate"]
  if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < 1:
    raise ValueError(f"{where}.dropout_rate={rate!r} must be in [0, 1).")
  if model["impl"] not in lstmn_lib.IMPLS:
    raise ValueError(f"{where}.impl={model['impl']!r} must be one of {list(lstmn_lib.IMPLS)}.")
  for field in ("skip_input", "condition_on_source"):
    if field in model and not isinstance(model[field], bool):
      raise ValueError(f"{where}.{field}={model[field]!r} must be True or False.")


def text_classifier_class(name: str) -> type:
  """The :class:`TextClassifier` registered as ``name``; ``ValueError`` (one line) for an
  unknown name or a model that is not a text classifier."""
  cls = MODELS.get(name)
  if not (isinstance(cls, type) and issubclass(cls, TextClassifier)):
    text = sorted(n for n, c in MODELS.items()
                  if isinstance(c, type) and issubclass(c, TextClassifier))
    raise ValueError(f"model {name!r} is not a text classifier; the text classifiers are "
                     f"{text}.")
  return cls


def build_text_classifier(model_config: Mapping[str, Any], *, vocab_size: int,
                          num_classes: int, embedding_init: Optional[Callable] = None
                          ) -> TextClassifier:
  """The model ``model_config["name"]`` (:func:`rumjax.models.build_model`) with the data's
  sizes and the fields the model builds itself (:meth:`TextClassifier.config_fields`: for
  ``"lstm"`` with ``num_layers > 1`` a :class:`rumjax.cells.stacked.StackedCells`)."""
  kwargs = dict(vocab_size=vocab_size, num_classes=num_classes)
  if embedding_init is not None:
    kwargs["embedding_init"] = embedding_init
  kwargs.update(text_classifier_class(model_config["name"]).config_fields(model_config))
  return build_model(model_config, **kwargs)


# ---------------------------------------------------------------------- attention


def _stack_attention(params: Mapping[str, Any], xs: Array, mask: Array, *,
                     skip_input: bool, memory_span: Optional[int]) -> list[Array]:
  """The intra-attention of every layer of a :class:`StackedLSTMN`'s ``params``
  (``layer_0``, ...), evaluation mode: a list of <float>[B, T, T + 1], bottom first."""
  out, inputs = [], xs
  for k in range(len(params)):
    hs, _, s = lstmn_lib.lstmn_scan(dict(params[f"layer_{k}"]), inputs, mask=mask,
                                    memory_span=memory_span, return_attention=True)
    out.append(s)
    inputs = jnp.concatenate([hs, xs], axis=-1) if skip_input else hs
  return out


def intra_attention(model: TextClassifier, params: Mapping[str, Any],
                    batch: Mapping[str, Any], sentence: Optional[str] = None) -> list[Array]:
  """The LSTMN intra-attention weights of a trained model on a batch (Figures 4-5).

  Args:
    model: an ``"lstmn"``, ``"lstmn_shallow"`` or ``"lstmn_deep"`` classifier.
    params: its parameters (``variables["params"]``, e.g. from
      :func:`rumjax.training.checkpoint.read_params`).
    batch: one sentence (``inputs``, ``lengths``) or a pair.
    sentence: for a pair, ``"premise"`` or ``"hypothesis"`` (fusion models: the
      premise, read by their LSTMN encoder); None for one sentence.

  Returns:
    One <float>[B, T, T + 1] per LSTMN layer, bottom first: ``s[b, t - 1, i]`` is the
    weight of tape position ``i`` when reading token ``t`` (position 0 is the empty tape
    slot ``h_0 = 0``; positions ``>= t`` and padding have weight 0).
  """
  key = "inputs" if sentence is None else sentence
  if sentence not in (None, *PAIR_KEYS):
    raise ValueError(f"sentence={sentence!r} must be None (one sentence) or one of "
                     f"{list(PAIR_KEYS)}.")
  if key not in batch:
    raise ValueError(f"the batch has no {key!r} (keys: {sorted(batch)}); pass sentence="
                     f"{'None' if 'inputs' in batch else repr(PAIR_KEYS[0])}.")
  tokens = jnp.asarray(batch[key])
  mask = length_mask(tokens, batch.get("lengths" if sentence is None else f"{key}_lengths"))
  stack, skip_input = model.attention_stack(params, sentence)
  xs = jnp.asarray(params["embed"]["embedding"])[tokens]
  return _stack_attention(stack, xs, mask, skip_input=skip_input,
                          memory_span=model.memory_span)

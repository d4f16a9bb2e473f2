"""The StarSaber paper's models (§4.2, Table 1): StarSaber and its ablations, and the
Transformer, ReZero and BiLSTM baselines, as sentence encoders with a classification or a
masked-LM head.

One body for all of them::

    inputs <int>[B, T] (ids after lengths[b] are padding)
      -> nn.Embed(vocab_size, embed_dim)         (frozen: stop_gradient on the looked-up
                                                  vectors; the paper's Word2Vec group)
      -> input map: h^0 = x, or a linear map (Dense(hidden_size), no bias) when embed_dim
         != hidden_size                          (not for the BiLSTM: its LSTMs read
                                                  embed_dim directly)
      -> x sqrt(d) + sinusoidal positions        (transformer, rezero, starsaber_pe)
      -> dropout
      -> encoder: num_layers layers of hidden_size
      -> head, by ``objective``:
         "classify": pooled sentence vector -> dropout -> Dense(num_classes) ("classifier")
                     -> logits <float>[B, num_classes]
         "mlm":      per position: (Dense(embed_dim) "mlm_dense" if the encoder's width
                     differs from embed_dim) -> tied output embedding (x @ E^T, what
                     ``embed.attend`` computes) + bias "mlm_bias" <[vocab_size]>
                     -> logits <float>[B, T, vocab_size]

Registered models (``config.model.name``) and their encoders (submodule ``encoder``):

* ``"starsaber"``: :class:`rumjax.layers.starsaber.StarSaberLayer` (variant ``"plain"``,
  eqs. (4)-(5)); ``"starsaber_gate"`` (appendix eq. (6)); ``"starsaber_pe"`` (§5.2: one
  attention matrix instead of U/Q, and sinusoidal positions added to the input);
  ``"starsaber_nodirect"`` (§5.3: no ``V x`` term). Every layer reads ``h^l`` and the same
  direct path ``x = h^0`` (the input vectors after the input map, positions and dropout):
  ``h^{l+1} = h^l + alpha_l tanh(A^l + V^l x)``. There is no dropout between layers.
* ``"transformer"``: post-LN :class:`rumjax.layers.transformer.TransformerLayer` (8 heads,
  FFN 4 x hidden in the paper), sinusoidal positions added to the input.
* ``"rezero"``: :class:`rumjax.layers.transformer.ReZeroLayer` (no layer norm, one
  ``alpha`` per layer initialised to 0), sinusoidal positions added to the input.
* ``"bilstm"``: one forward and one backward LSTM (``nn.OptimizedLSTMCell(hidden_size)``
  each, ``encoder/forward`` and ``encoder/backward``); ``num_layers`` is not read (the
  paper's BiLSTM has one layer). "Our BiLSTM concatenates features encoded by two LSTM
  encoders of opposite directions": the sentence vector is ``[forward state at the last
  real token, backward state at position 0]`` <[B, 2 hidden_size]>; for "mlm" the
  per-position outputs of the two directions, concatenated.

Pooling for "classify": the masked mean of the last layer over the real positions
(:func:`rumjax.models.text_classifier.masked_mean`) for the attention encoders; the
BiLSTM's final states as above. Token ids at padded positions never reach the classify
logits, nor the mlm logits at real positions.

The parameter names of ``embed``, ``input_map`` and ``encoder`` are the same under both
objectives (the heads differ: ``classifier`` vs ``mlm_dense`` / ``mlm_bias``), so the
encoder of a masked-LM checkpoint initialises a classifier.

Parameter counts. The paper's Table 1 counts include the embedding matrices (its footnote
3). Without embedding, input map and head, an encoder of ``L`` layers of width ``d`` has

* StarSaber: ``L (4 d^2 + 1)`` (U, Q, V, W and alpha; no biases); gate ``L (8 d^2 + 1)``;
  pe and nodirect ``L (3 d^2 + 1)``;
* Transformer: ``L (4 d^2 + 4 d + 2 d f + f + d + 4 d)`` with FFN width ``f`` (attention
  kernels and biases, the FFN, two layer norms); ReZero the same minus ``4 d`` plus 1;
* BiLSTM: ``2 x 4 (e h + h^2 + h)`` (input width ``e``, hidden ``h``).

At d = 512, L = 6 (the paper's pretrained StarSaber-2 / Transformer) that is 6,291,462
(StarSaber) and 18,914,304 (Transformer, f = 2048) (``tests/test_encoders.py``).

Example::

    >>> model = build_model(config.model, vocab_size=5000, num_classes=2)  # name "starsaber"
    >>> batch = {"inputs": ids, "lengths": lengths}        # <int>[B, T], <int>[B]
    >>> params = model.init(jax.random.key(0), batch)["params"]
    >>> logits = model.apply({"params": params}, batch, train=True,
    ...                      rngs={"dropout": jax.random.key(1)})     # <float>[B, 2]
"""

from typing import Any, Callable, Mapping, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rumjax.cells import flax_cells
from rumjax.layers.dense import Dense
from rumjax.layers.positional import sinusoidal_positions
from rumjax.layers.starsaber import StarSaberLayer
from rumjax.layers.transformer import ReZeroLayer, TransformerLayer
from rumjax.models import precision
from rumjax.models.registry import register_model
from rumjax.models.text_classifier import last_real, length_mask, masked_mean

Array = jax.Array

OBJECTIVES = ("classify", "mlm")
ENCODER_MODELS = ("starsaber", "starsaber_gate", "starsaber_pe", "starsaber_nodirect",
                  "transformer", "rezero", "bilstm")
HEAD_MODELS = ("transformer", "rezero")   # multi-head attention: hidden_size % num_heads


# ----------------------------------------------------------------------- encoders


class StarSaberEncoder(nn.Module):
  """``num_layers`` StarSaber layers (``layer_0``, ...) from ``h^0 = x``, each reading the
  same direct path ``x``: ``h^{l+1} = StarSaberLayer_l(h^l, x, mask)``.

  Attributes:
    features: ``d`` (``x`` has ``d`` features).
    num_layers: ``L``.
    variant: one of :data:`rumjax.layers.starsaber.VARIANTS`.
    dtype, param_dtype, precision: the precision policy of every layer.
  """
  features: int
  num_layers: int
  variant: str = "plain"
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  precision: Any = None

  @nn.compact
  def __call__(self, x: Array, mask: Array, *, deterministic: bool) -> Array:
    """``x`` <float>[B, T, d], ``mask`` <bool>[B, T] -> ``h^L`` <float>[B, T, d]."""
    del deterministic   # no dropout inside StarSaber
    h = x
    for l in range(self.num_layers):
      h = StarSaberLayer(self.features, variant=self.variant, dtype=self.dtype,
                         param_dtype=self.param_dtype, precision=self.precision,
                         name=f"layer_{l}")(h, x, mask)
    return h


class TransformerEncoder(nn.Module):
  """``num_layers`` :class:`TransformerLayer` (or :class:`ReZeroLayer` with ``rezero``),
  ``layer_0``, ...; fields as the layers'."""
  features: int
  num_layers: int
  num_heads: int = 8
  ffn_size: Optional[int] = None
  dropout_rate: float = 0.1
  rezero: bool = False
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  precision: Any = None

  @nn.compact
  def __call__(self, x: Array, mask: Array, *, deterministic: bool) -> Array:
    """``x`` <float>[B, T, d], ``mask`` <bool>[B, T] -> <float>[B, T, d]."""
    layer_cls = ReZeroLayer if self.rezero else TransformerLayer
    for l in range(self.num_layers):
      x = layer_cls(self.features, num_heads=self.num_heads, ffn_size=self.ffn_size,
                    dropout_rate=self.dropout_rate, dtype=self.dtype,
                    param_dtype=self.param_dtype, precision=self.precision,
                    name=f"layer_{l}")(
                        x, mask, deterministic=deterministic)
    return x


class BiLSTMEncoder(nn.Module):
  """A forward and a backward LSTM (``forward``, ``backward``: ``nn.RNN`` over
  ``nn.OptimizedLSTMCell(features)``, parameters at ``forward/cell``, ``backward/cell``),
  each stopping at the sequence's length; ``precision`` is the LSTMs' matmul precision
  (:class:`rumjax.cells.flax_cells.OptimizedLSTMCell`)."""
  features: int
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  precision: Any = None

  @nn.compact
  def __call__(self, x: Array, mask: Array, *, deterministic: bool
               ) -> tuple[Array, Array]:
    """``x`` <float>[B, T, E], ``mask`` <bool>[B, T] (a prefix of real tokens) ->

    ``(outputs <float>[B, T, 2H], sentence <float>[B, 2H])``: the per-position states
    ``[forward_t, backward_t]`` (padded positions unspecified) and ``[forward state at the
    last real token, backward state at position 0]`` (0 for a row without real tokens).
    """
    del deterministic
    lengths = jnp.sum(mask, axis=1)
    # Unbound cells (parent=None): nn.RNN adopts them, parameters at forward/cell etc.
    cell = lambda: flax_cells.OptimizedLSTMCell(self.features, dtype=self.dtype,
                                                param_dtype=self.param_dtype,
                                                precision=self.precision, parent=None)
    fwd = nn.RNN(cell(), name="forward")(x, seq_lengths=lengths)
    bwd = nn.RNN(cell(), reverse=True, keep_order=True, name="backward")(
        x, seq_lengths=lengths)
    sentence = jnp.concatenate(
        [last_real(fwd, mask), jnp.where(mask[:, :1], bwd[:, 0], 0.0)], axis=-1)
    return jnp.concatenate([fwd, bwd], axis=-1), sentence


# ------------------------------------------------------------------------- models


class SentenceEncoderModel(nn.Module):
  """The shared body (module docstring); a registered subclass fixes the encoder through
  the class attributes ``ENCODER`` (``"starsaber"`` | ``"transformer"`` | ``"rezero"`` |
  ``"bilstm"``), ``VARIANT`` (StarSaber's) and ``POSITIONS``.

  Attributes:
    vocab_size: token ids (the task's vocabulary; also the mlm output size).
    num_classes: output classes ("classify"; None is allowed for "mlm").
    num_layers: encoder layers (4 in the paper's Word2Vec group; 6 / 12 / 24 pretrained;
      not read by the BiLSTM).
    hidden_size: ``d`` of the encoder (300 Word2Vec, 512 pretrained); the LSTM size of
      each BiLSTM direction.
    embed_dim: embedding width (300 / 512).
    num_heads: attention heads of transformer / rezero (8).
    ffn_size: their FFN width (None: ``4 * hidden_size``).
    dropout_rate: on the input vectors, before the classifier, and the residual dropout
      of transformer / rezero.
    objective: ``"classify"`` or ``"mlm"`` (the head; module docstring).
    freeze_embeddings: ``jax.lax.stop_gradient`` on the embedding (lookups and the tied
      mlm output), so it gets a zero gradient (an optimizer's weight decay would still
      move it).
    embedding_init: initializer of the embedding (e.g.
      :func:`rumjax.models.text_classifier.pretrained_init` for Word2Vec vectors; None:
      Flax's default).
    dtype, param_dtype: the precision policy of every layer
      (:mod:`rumjax.models.precision`; None: float32); the logits are float32.
    precision: the matmul precision of every ``Dense``, attention and ``einsum`` (None:
      the backend's default; :mod:`rumjax.models.precision`).
  """
  vocab_size: int
  num_classes: Optional[int] = None
  num_layers: int = 4
  hidden_size: int = 300
  embed_dim: int = 300
  num_heads: int = 8
  ffn_size: Optional[int] = None
  dropout_rate: float = 0.1
  objective: str = "classify"
  freeze_embeddings: bool = False
  embedding_init: Optional[Callable] = None
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  precision: Any = None

  ENCODER = ""
  VARIANT = "plain"
  POSITIONS = False

  def _encoder(self) -> nn.Module:
    policy = dict(dtype=self.dtype, param_dtype=self.param_dtype, precision=self.precision)
    if self.ENCODER == "starsaber":
      return StarSaberEncoder(self.hidden_size, self.num_layers, self.VARIANT, **policy,
                              name="encoder")
    if self.ENCODER in ("transformer", "rezero"):
      return TransformerEncoder(self.hidden_size, self.num_layers, self.num_heads,
                                self.ffn_size, self.dropout_rate,
                                rezero=self.ENCODER == "rezero", **policy, name="encoder")
    if self.ENCODER == "bilstm":
      return BiLSTMEncoder(self.hidden_size, **policy, name="encoder")
    raise ValueError(f"{type(self).__name__} has no encoder (ENCODER={self.ENCODER!r}).")

  @nn.compact
  def __call__(self, batch: Mapping[str, Any], train: bool = False) -> Array:
    """Logits of ``batch["inputs"]`` <int>[B, T] with ``batch["lengths"]`` <int>[B]
    (optional: all real): <float>[B, num_classes] ("classify") or <float>[B, T,
    vocab_size] ("mlm"). Other keys of ``batch`` are ignored."""
    if self.objective not in OBJECTIVES:
      raise ValueError(f"objective={self.objective!r} must be one of {list(OBJECTIVES)}.")
    if self.objective == "classify" and self.num_classes is None:
      raise ValueError("objective='classify' needs num_classes.")
    tokens = jnp.asarray(batch["inputs"])
    mask = length_mask(tokens, batch.get("lengths"))
    embed = nn.Embed(self.vocab_size, self.embed_dim,
                     embedding_init=self.embedding_init or nn.linear.default_embed_init,
                     dtype=self.dtype, param_dtype=self.param_dtype, name="embed")
    dense = lambda n, name, **kw: Dense(n, dtype=self.dtype,
                                           param_dtype=self.param_dtype,
                                           precision=self.precision, name=name, **kw)
    x = embed(tokens)
    if self.freeze_embeddings:
      x = jax.lax.stop_gradient(x)
    if self.ENCODER != "bilstm" and self.embed_dim != self.hidden_size:
      x = dense(self.hidden_size, "input_map", use_bias=False)(x)
    if self.POSITIONS:
      # As Vaswani et al. (§3.4): the embedding times sqrt(d) (Flax's embedding init has
      # std 1/sqrt(d): this brings it to the positions' scale, ~1) plus the positions.
      x = x * jnp.sqrt(jnp.asarray(x.shape[-1], x.dtype))
      x = x + sinusoidal_positions(x.shape[1], x.shape[2])[None].astype(x.dtype)
    drop = nn.Dropout(self.dropout_rate, deterministic=not train)
    x = drop(x)
    out = self._encoder()(x, mask, deterministic=not train)
    if self.ENCODER == "bilstm":
      hs, sentence = out
    else:
      hs, sentence = out, None
    if self.objective == "classify":
      if sentence is None:
        sentence = masked_mean(hs, mask)
      return precision.output_dense(self.num_classes, dtype=self.dtype,
                                    param_dtype=self.param_dtype, precision=self.precision,
                                    name="classifier")(drop(sentence))
    if hs.shape[-1] != self.embed_dim:
      hs = dense(self.embed_dim, "mlm_dense")(hs)
    table = embed.embedding
    if self.freeze_embeddings:
      table = jax.lax.stop_gradient(table)
    bias = self.param("mlm_bias", nn.initializers.zeros, (self.vocab_size,),
                      self.param_dtype)
    if self.dtype is not None:
      hs, table = jnp.asarray(hs, self.dtype), jnp.asarray(table, self.dtype)
    # The tied output layer accumulates in float32: float32 logits (the policy).
    logits = jnp.einsum("btd,vd->btv", hs, table, precision=self.precision,
                        preferred_element_type=jnp.promote_types(jnp.result_type(hs, table),
                                                                   jnp.float32))
    return precision.float32_logits(logits + bias)


@register_model("starsaber")
class StarSaberModel(SentenceEncoderModel):
  """StarSaber (eqs. (4)-(5)): ``num_layers`` StarSaber layers, variant ``"plain"``."""
  ENCODER = "starsaber"


@register_model("starsaber_gate")
class StarSaberGateModel(SentenceEncoderModel):
  """StarSaber-gate (§5.1, appendix eq. (6))."""
  ENCODER = "starsaber"
  VARIANT = "gate"


@register_model("starsaber_pe")
class StarSaberPEModel(SentenceEncoderModel):
  """StarSaber with one attention matrix instead of U/Q and sinusoidal positions added to
  the input (§5.2)."""
  ENCODER = "starsaber"
  VARIANT = "pe"
  POSITIONS = True


@register_model("starsaber_nodirect")
class StarSaberNoDirectModel(SentenceEncoderModel):
  """StarSaber without the direct paths ``V x`` (§5.3)."""
  ENCODER = "starsaber"
  VARIANT = "nodirect"


@register_model("transformer")
class TransformerModel(SentenceEncoderModel):
  """The post-LN Transformer baseline, sinusoidal positions added to the input."""
  ENCODER = "transformer"
  POSITIONS = True


@register_model("rezero")
class ReZeroModel(SentenceEncoderModel):
  """The ReZero baseline (no layer norm, alpha = 0 at init), sinusoidal positions."""
  ENCODER = "rezero"
  POSITIONS = True


@register_model("bilstm")
class BiLSTMModel(SentenceEncoderModel):
  """The BiLSTM baseline: ``[forward last state, backward first state]``."""
  ENCODER = "bilstm"


# ------------------------------------------------------------------------- checks


def _is_int(x) -> bool:
  return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def check_model_config(model_config: Mapping[str, Any]) -> None:
  """Checks ``config.model`` of an encoder model; one-line ``ValueError`` naming the field.

  Reads ``name`` and, when present, ``num_layers``, ``hidden_size``, ``embed_dim``,
  ``num_heads``, ``ffn_size``, ``dropout_rate``, ``objective``, ``freeze_embeddings``
  (absent fields take the model's defaults).
  """
  where = "config.model"
  m = dict(model_config)
  name = m.get("name")
  if name not in ENCODER_MODELS:
    raise ValueError(f"{where}.name={name!r} must be one of {list(ENCODER_MODELS)}.")
  for field in ("num_layers", "hidden_size", "embed_dim", "num_heads"):
    if field in m and (not _is_int(m[field]) or m[field] < 1):
      raise ValueError(f"{where}.{field}={m[field]!r} must be an integer >= 1.")
  if m.get("ffn_size") is not None and (not _is_int(m["ffn_size"]) or m["ffn_size"] < 1):
    raise ValueError(f"{where}.ffn_size={m['ffn_size']!r} must be an integer >= 1 or None.")
  if name in HEAD_MODELS:
    hidden = m.get("hidden_size", SentenceEncoderModel.hidden_size)
    heads = m.get("num_heads", SentenceEncoderModel.num_heads)
    if hidden % heads:
      raise ValueError(f"{where}.hidden_size={hidden} must be divisible by "
                       f"{where}.num_heads={heads} ({name!r}).")
  objective = m.get("objective", SentenceEncoderModel.objective)
  if objective not in OBJECTIVES:
    raise ValueError(f"{where}.objective={objective!r} must be one of {list(OBJECTIVES)}.")
  rate = m.get("dropout_rate", SentenceEncoderModel.dropout_rate)
  if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < 1:
    raise ValueError(f"{where}.dropout_rate={rate!r} must be in [0, 1).")
  if not isinstance(m.get("freeze_embeddings", False), bool):
    raise ValueError(f"{where}.freeze_embeddings={m['freeze_embeddings']!r} must be "
                     "True or False.")

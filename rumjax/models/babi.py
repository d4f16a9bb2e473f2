"""Sentence-level question answering model for bAbI (Dangovski et al., TACL 2019, sec. 4.2 C).

Each story sentence and the question are embedded as the average of their word
embeddings (64-dim in the paper); the recurrent cell reads the ``n`` story sentences and
then the question, ``{x_1^(s), ..., x_n^(s), x^(q)}``, and the answer comes from a
softmax on the output at the question, ``h^(q)``. With ``attention`` (Luong et al., 2015,
dot product)::

    p_t = softmax_t(h^(q) . h_t^(s)),   t over the story sentences
    c   = sum_t p_t h_t^(s)
    logits = W_s tanh(W_c [c; h^(q)] + b_c) + b_s

(the paper passes "the context vector ... together with the query vector, to a dense
layer"; we use Luong's attentional layer ``tanh(W_c [c; h])`` of size ``features``
before the softmax layer).

Batches are right-padded: token 0 is padding, ``story_lengths`` counts the real
sentences. The question is placed at step ``story_lengths`` (right after the last real
sentence), and ``nn.RNN`` stops at ``story_lengths + 1`` steps::

    >>> model = SentenceQA(cell=make_cell("rum", 256), vocab_size=40, num_classes=7,
    ...                    attention=True)
    >>> logits = model.apply(variables, {"story": story, "story_lengths": n,
    ...                                  "question": question})      # <float>[batch, 7]

Parameters: ``{"embed": ..., "rnn": {"cell": ...}, "attention_dense"?: ..., "head": ...}``.
"""

from typing import Any, Mapping, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from rumjax.layers.dense import Dense
from rumjax.models import precision
from rumjax.models.registry import register_model
from rumjax.models.sequence import run_recurrence

Array = jax.Array


def bag_of_words(embedded: Array, tokens: Array) -> Array:
  """Average of the embeddings of the non-padding tokens (0 is padding).

  Args:
    embedded: <float>[..., W, E] word embeddings.
    tokens: <int>[..., W] word ids.

  Returns:
    <float>[..., E]; all-padding rows give zeros.
  """
  mask = (tokens != 0).astype(embedded.dtype)[..., None]
  return jnp.sum(embedded * mask, axis=-2) / jnp.maximum(jnp.sum(mask, axis=-2), 1.0)


def dot_attention(hs: Array, query: Array, mask: Array, *,
                  precision: Any = None) -> tuple[Array, Array]:
  """Dot-product attention of ``query`` over the steps of ``hs`` where ``mask`` is True.

  Args:
    hs: <float>[batch, T, H] the outputs to attend over.
    query: <float>[batch, H].
    mask: <bool>[batch, T] the steps that may be attended.
    precision: the matmul precision of the two products (None: the backend's default).

  Returns:
    ``(context <float>[batch, H], weights <float32>[batch, T])``; a row without any
    attendable step gets a zero context and zero weights. The scores and the softmax are
    float32 whatever the inputs' dtype; the context has the dtype of ``hs``.
  """
  scores = jnp.einsum("bth,bh->bt", hs, query, precision=precision,
                      preferred_element_type=jnp.float32)
  scores = jnp.where(mask, scores, -jnp.inf)
  any_step = jnp.any(mask, axis=-1, keepdims=True)
  weights = jax.nn.softmax(jnp.where(any_step, scores, 0.0), axis=-1)
  weights = jnp.where(mask, weights, 0.0)
  return jnp.einsum("bt,bth->bh", weights.astype(hs.dtype), hs, precision=precision), weights


@register_model("sentence_qa")
class SentenceQA(nn.Module):
  """Sentence-level bAbI model: averaged word embeddings -> cell -> (attention) -> softmax.

  Attributes:
    cell: the recurrent cell (hidden size ``cell.features``).
    vocab_size: number of word ids (0 is padding).
    num_classes: number of answers.
    embed_dim: size of the word (and so sentence) embeddings.
    attention: dot-product attention of the question state over the sentence states.
    dtype, param_dtype: the precision policy of the embedding and the dense layers
      (:mod:`rumjax.models.precision`; None: float32); the logits are float32.
    precision: the matmul precision of the dense layers and the attention (None: the
      backend's default; the cell has its own, set by :func:`rumjax.models.build_model`).
  """
  cell: nn.RNNCellBase
  vocab_size: int
  num_classes: int
  embed_dim: int = 64
  attention: bool = False
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  precision: Any = None

  @nn.compact
  def __call__(self, batch: Mapping[str, Any], train: bool = False) -> Array:
    """Answer logits.

    Args:
      batch: ``{"story": <int>[batch, S, W], "story_lengths": <int>[batch],
        "question": <int>[batch, W'], ...}`` (right-padded with 0).
      train: training mode (zoneout) or evaluation.

    Returns:
      logits: <float>[batch, num_classes].
    """
    story, question = batch["story"], batch["question"]
    lengths = jnp.asarray(batch["story_lengths"], jnp.int32)
    dense = lambda n, name: Dense(n, dtype=self.dtype, param_dtype=self.param_dtype,
                                     precision=self.precision, name=name)
    embed = nn.Embed(self.vocab_size, self.embed_dim, dtype=self.dtype,
                     param_dtype=self.param_dtype, name="embed")
    sentences = bag_of_words(embed(story), story)              # [B, S, E]
    query = bag_of_words(embed(question), question)            # [B, E]
    steps = sentences.shape[1] + 1
    pos = jnp.arange(steps)[None, :]                           # [1, S + 1]
    xs = jnp.concatenate([sentences, jnp.zeros_like(sentences[:, :1])], axis=1)
    xs = jnp.where((pos == lengths[:, None])[..., None], query[:, None], xs)
    xs = jnp.where((pos <= lengths[:, None])[..., None], xs, 0.0)
    hs = run_recurrence(self.cell, xs, seq_lengths=lengths + 1, train=train)
    h_q = jnp.take_along_axis(hs, lengths[:, None, None], axis=1)[:, 0]
    features = h_q
    if self.attention:
      context, _ = dot_attention(hs, h_q, pos < lengths[:, None], precision=self.precision)
      features = jnp.tanh(dense(self.cell.features, "attention_dense")(
          jnp.concatenate([context, h_q], axis=-1)))
    return precision.output_dense(self.num_classes, dtype=self.dtype,
                                  param_dtype=self.param_dtype, precision=self.precision,
                                  name="head")(features)

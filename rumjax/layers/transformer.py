"""Transformer encoder layers: the post-LN layer of Vaswani et al. (2017) and the ReZero
layer (Bachlechner et al., 2020) as the StarSaber paper uses them (its two attention
baselines, §4.2).

Both are ``layer(x, mask, *, deterministic) -> x'`` on ``x <float>[B, T, d]`` with
``mask <bool>[B, T]`` True at real tokens (None: all real). Padding is masked as keys, so
real positions never read padded ones; what a padded position outputs is unspecified (it
attends somewhere; read it never). Submodules (the parameter layout the tests and
checkpoints rely on)::

    attention     nn.MultiHeadDotProductAttention: query/key/value {kernel <[d, heads, d/heads]>,
                  bias <[heads, d/heads]>}, out {kernel <[heads, d/heads, d]>, bias <[d]>}
    ffn           FeedForward: hidden (Dense ffn_size), output (Dense d)
    attention_norm, ffn_norm   nn.LayerNorm (TransformerLayer only)
    alpha         scalar parameter (ReZeroLayer only)

Dropout (rate ``dropout_rate``) is applied to each sub-layer's output before the residual
sum (Vaswani et al. §5.4 "residual dropout"); the attention weights themselves are not
dropped.

Precision (:mod:`rumjax.models.precision`): ``dtype`` is the computation dtype of every
sub-layer (None: promote inputs and parameters), ``param_dtype`` the parameters'; the
attention softmax is float32 (``force_fp32_for_softmax``) and the layer norms reduce in
float32 (Flax's ``nn.LayerNorm``) whatever ``dtype`` is.
"""

from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from rumjax.core.precision import scale
from rumjax.layers.dense import Dense

Array = jax.Array


class FeedForward(nn.Module):
  """``Dense(ffn_size) -> ReLU -> Dense(features)``, position-wise (Vaswani et al. eq. 2).

  Submodules ``hidden`` and ``output``; ``precision`` is their matmul precision (None:
  the backend's default).
  """
  features: int
  ffn_size: int
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  precision: Any = None

  @nn.compact
  def __call__(self, x: Array) -> Array:
    """<float>[..., d] -> <float>[..., features]."""
    dense = lambda n, name: Dense(n, dtype=self.dtype, param_dtype=self.param_dtype,
                                     precision=self.precision, name=name)
    return dense(self.features, "output")(nn.relu(dense(self.ffn_size, "hidden")(x)))


def _attention_mask(mask: Optional[Array]) -> Optional[Array]:
  """<bool>[B, T] -> <bool>[B, 1, T, T] (query and key real), or None."""
  if mask is None:
    return None
  mask = jnp.asarray(mask, bool)
  return nn.make_attention_mask(mask, mask, dtype=bool)


class _EncoderLayer(nn.Module):
  """Fields and sub-layers shared by :class:`TransformerLayer` and :class:`ReZeroLayer`."""
  features: int
  num_heads: int = 8
  ffn_size: Optional[int] = None
  dropout_rate: float = 0.1
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  precision: Any = None

  def _check(self, x: Array) -> None:
    if x.shape[-1] != self.features:
      raise ValueError(f"{type(self).__name__}: x has {x.shape[-1]} features, the layer "
                       f"{self.features}.")
    if self.features % self.num_heads:
      raise ValueError(f"{type(self).__name__}: features={self.features} is not divisible "
                       f"by num_heads={self.num_heads}.")

  def _attend(self, x: Array, mask: Optional[Array]) -> Array:
    attention = nn.MultiHeadDotProductAttention(num_heads=self.num_heads,
                                                qkv_features=self.features,
                                                out_features=self.features,
                                                dtype=self.dtype,
                                                param_dtype=self.param_dtype,
                                                force_fp32_for_softmax=True,
                                                precision=self.precision,
                                                name="attention")
    return attention(x, mask=_attention_mask(mask))

  def _ffn(self, x: Array) -> Array:
    return FeedForward(self.features, self.ffn_size or 4 * self.features, dtype=self.dtype,
                       param_dtype=self.param_dtype, precision=self.precision,
                       name="ffn")(x)

  def _norm(self, name: str) -> nn.Module:
    return nn.LayerNorm(dtype=self.dtype, param_dtype=self.param_dtype, name=name)


class TransformerLayer(_EncoderLayer):
  """One post-LN Transformer encoder layer (Vaswani et al., 2017)::

      x = LayerNorm(x + Dropout(MultiHeadAttention(x, x, x)))
      x = LayerNorm(x + Dropout(FFN(x)))           FFN = Dense(ffn_size) -> ReLU -> Dense(d)

  Attributes:
    features: ``d`` (the input and output width; divisible by ``num_heads``).
    num_heads: attention heads (8 in the StarSaber paper), each of size ``d / num_heads``.
    ffn_size: the FFN's hidden width (None: ``4 * features``, the paper's "4 *
      Hidden-size").
    dropout_rate: residual dropout.
    dtype, param_dtype: the precision policy (module docstring).
    precision: the matmul precision of the attention and the FFN (None: the backend's
      default; Flax's ``precision=``).

  Example::

      >>> layer = TransformerLayer(features=16, num_heads=2)
      >>> y = layer.apply(variables, x, mask, deterministic=True)  # x <[B, T, 16]>
  """

  @nn.compact
  def __call__(self, x: Array, mask: Optional[Array] = None, *,
               deterministic: bool) -> Array:
    """``x`` <float>[B, T, d], ``mask`` <bool>[B, T] -> <float>[B, T, d]."""
    self._check(x)
    drop = nn.Dropout(self.dropout_rate, deterministic=deterministic)
    x = self._norm("attention_norm")(x + drop(self._attend(x, mask)))
    return self._norm("ffn_norm")(x + drop(self._ffn(x)))


class ReZeroLayer(_EncoderLayer):
  """One ReZero encoder layer (Bachlechner et al., 2020), as in the StarSaber paper
  ("In ReZero Layer Normalization ... and the warmup procedure are dropped")::

      x = x + alpha * Dropout(MultiHeadAttention(x, x, x))
      x = x + alpha * Dropout(FFN(x))

  with one trainable scalar ``alpha`` per layer, shared by its two sub-layers and
  initialised to 0: at initialisation the layer is the identity (its gradient is not zero:
  d out / d alpha is the sub-layers' output). Fields as :class:`TransformerLayer`.
  """

  @nn.compact
  def __call__(self, x: Array, mask: Optional[Array] = None, *,
               deterministic: bool) -> Array:
    """``x`` <float>[B, T, d], ``mask`` <bool>[B, T] -> <float>[B, T, d]."""
    self._check(x)
    alpha = self.param("alpha", nn.initializers.zeros, (), self.param_dtype)
    drop = nn.Dropout(self.dropout_rate, deterministic=deterministic)
    # alpha * y in float32 (its gradient sums over every row; the precision policy).
    x = x + scale(drop(self._attend(x, mask)), alpha)
    return x + scale(drop(self._ffn(x)), alpha)

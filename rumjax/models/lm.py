"""A recurrent language model for truncated back-propagation through time.

    tokens -> embedding -> dropout -> recurrent core -> dropout -> dense -> logits

The core is any recurrent cell of the zoo (a RUM, an LSTM, the stacked cells or the FS-RNN
of :mod:`rumjax.cells`). Its state is carried from one window of the token stream to the
next (the loop's carried ``model_state``) and reset to the initial state where the batch
says so (``batch["reset"]``, the first window of an epoch or of an evaluation), as in the
FS-RNN and RUM reference code. Dropout is the non-recurrent dropout of the papers (on the
embedding and on the core's output); zoneout is the cells' own.

    >>> model = LanguageModel(cell=make_cell("rum", 1000, lam=0, eta=1.0), vocab_size=51)
    >>> state = initial_state(model, batch_size=128)
    >>> logits, state = model.apply(variables, batch, train=True, model_state=state,
    ...                             rngs={"dropout": key})
"""

from typing import Any, Mapping, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from rumjax.models import precision
from rumjax.models.registry import register_model
from rumjax.models.sequence import run_recurrence

Array = jax.Array


def initial_state(model: "LanguageModel", batch_size: int) -> Any:
  """The core's initial carry for ``batch_size`` rows (zeros; RUM's memory ``R_0 = 1``)."""
  cell = model.cell.clone(parent=None)
  return cell.initialize_carry(jax.random.key(0), (batch_size, model.embed_dim))


def reset_where(reset: Array, initial: Any, carry: Any) -> Any:
  """The carry with the rows where ``reset`` <bool>[batch] is True set to ``initial``."""
  def pick(init, old):
    mask = jnp.reshape(reset, reset.shape + (1,) * (old.ndim - reset.ndim))
    return jnp.where(mask, init, old)
  return jax.tree.map(pick, initial, carry)


@register_model("lm")
class LanguageModel(nn.Module):
  """Embedding -> dropout -> cell -> dropout -> softmax over the vocabulary.

  Attributes:
    cell: the recurrent core (its output size is ``cell.features``).
    vocab_size: the number of tokens.
    embed_dim: the embedding size (128 for characters, 150 for words in the papers).
    dropout_rate: non-recurrent dropout on the embedding and on the core's output.
    dtype: the computation dtype of the embedding and the head (None: float32; the core
      has its own); the logits are float32 and the state carried between windows keeps
      the dtypes of the core's ``initialize_carry`` (:mod:`rumjax.models.precision`).
    param_dtype: the parameters' dtype.
    precision: the matmul precision of the head (None: the backend's default; the core
      has its own, set by :func:`rumjax.models.build_model`).
  """
  cell: nn.RNNCellBase
  vocab_size: int
  embed_dim: int = 128
  dropout_rate: float = 0.0
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  precision: Any = None

  @nn.compact
  def __call__(self, batch: Mapping[str, Any], train: bool = False,
               model_state: Optional[Any] = None):
    """Logits of every step, and the core's state after the window.

    Args:
      batch: ``{"inputs": <int>[batch, T], "reset"?: <bool>[batch], ...}``.
      train: training mode (dropout, zoneout masks) or evaluation.
      model_state: the core's carry after the previous window (``None``: the initial one).

    Returns:
      ``(logits <float>[batch, T, vocab_size], new_model_state)``.
    """
    inputs = batch["inputs"]
    x = nn.Embed(self.vocab_size, self.embed_dim, dtype=self.dtype,
                 param_dtype=self.param_dtype, name="embed")(inputs)
    x = nn.Dropout(self.dropout_rate)(x, deterministic=not train)
    initial = initial_state(self, inputs.shape[0])
    carry = initial if model_state is None else model_state
    if "reset" in batch:
      carry = reset_where(jnp.asarray(batch["reset"], bool), initial, carry)
    carry, hs = run_recurrence(self.cell, x, train=train, initial_carry=carry,
                               return_carry=True)
    # The state carried to the next window keeps the initial carry's dtypes.
    carry = precision.carry_like(carry, initial)
    hs = nn.Dropout(self.dropout_rate)(hs, deterministic=not train)
    logits = precision.output_dense(self.vocab_size, dtype=self.dtype,
                                    param_dtype=self.param_dtype, precision=self.precision,
                                    name="head")(hs)
    return logits, carry

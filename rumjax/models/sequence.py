"""Sequence models built from a recurrent cell chosen by name.

Two heads on the same body (token input -> recurrent cell -> dense):

* :class:`SequenceTagger`: one softmax per step, logits <float>[batch, T, num_classes]
  (copying memory task);
* :class:`SequenceClassifier`: one softmax at the last step, logits
  <float>[batch, num_classes] (associative recall, later bAbI / SST).

Both are registered models (``config.model.name`` ``"tagger"`` / ``"classifier"``, see
:mod:`rumjax.models.registry`) and are called on the batch dict of a task's data iterator::

    >>> cell = rumjax.make_cell("rum", 100, lam=1)
    >>> model = SequenceTagger(cell=cell, vocab_size=10, num_classes=9)
    >>> variables = model.init(jax.random.key(0), batch)
    >>> logits = model.apply(variables, batch, train=True,
    ...                      rngs={"dropout": jax.random.key(1)})

``batch["inputs"]`` is <int>[batch, T]; an optional ``batch["lengths"]`` <int>[batch]
gives the true lengths of padded sequences. The parameters are
``{"embed"?: ..., "rnn": {"cell": <the cell's parameters>}, "head": ...}``.
"""

import dataclasses
from typing import Any, Mapping, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from rumjax.cells import rum as rum_cell
from rumjax.models import precision
from rumjax.models.registry import build_model, register_model

Array = jax.Array


def run_recurrence(cell: nn.RNNCellBase, xs: Array, *, seq_lengths: Optional[Array] = None,
                   train: bool = False, name: str = "rnn", initial_carry: Any = None,
                   return_carry: bool = False):
  """Runs ``cell`` over ``xs`` inside the calling module's ``@nn.compact`` method.

  The cell is cloned unbound (so its parameters always live under ``<name>/cell``,
  whichever way the caller got it) with ``deterministic = not train`` when the cell has
  that field (zoneout, dropout). ``nn.RNN`` splits the ``"dropout"`` RNG per step, so
  zoneout masks differ from step to step, and shares the parameters across steps.

  A RUM cell without ``layer_norm``/``zoneout`` runs through :class:`rumjax.cells.rum.RUM`
  (:func:`rumjax.rum_scan`: one matmul for the input projection of the whole sequence and
  a hand-written backward pass) with the same parameters at ``<name>/cell``, so
  checkpoints are interchangeable with the ``nn.RNN`` path. A core with a true class
  attribute ``whole_sequence`` (:class:`rumjax.models.lstmn.LSTMNCore`) is called on the
  whole sequence as ``core(xs, initial_carry=..., return_carry=...)``. On both paths a RUM cell sows
  ``cos(theta_t)`` <float>[batch, T] when ``"intermediates"`` is mutable
  (:func:`rumjax.analysis.angles`): at ``<name>/cos_theta`` (``rum_scan``) or
  ``<name>/cell/cos_theta`` (``nn.RNN``).

  Args:
    cell: a Flax recurrent cell (e.g. from :func:`rumjax.cells.make_cell`).
    xs: <float>[batch, T, features_in].
    seq_lengths: optional <int>[batch] true lengths of right-padded rows: the steps past
      them still run (their outputs are unspecified, see ``nn.RNN``), and the carry
      returned with ``return_carry`` is the one at each row's length.
    train: training mode (zoneout masks) or evaluation.
    name: the name of the ``nn.RNN`` submodule.
    initial_carry: the cell's carry before the first step (default: its
      ``initialize_carry``), e.g. a language model's state carried from the last window.
    return_carry: also return the carry after the last step.

  Returns:
    hs: <float>[batch, T, cell.features], the output of every step; with
    ``return_carry``, ``(carry, hs)``.
  """
  updates = {}
  if any(f.name == "deterministic" for f in dataclasses.fields(cell)):
    updates["deterministic"] = not train
  cell = cell.clone(parent=None, name=None, **updates)
  if getattr(cell, "whole_sequence", False):
    # A core that runs the whole sequence itself (the LSTMN's attention over its tape).
    if seq_lengths is not None:
      raise ValueError(f"{type(cell).__name__} runs whole windows; seq_lengths is not "
                       "supported (use its mask).")
    fields = {f.name: getattr(cell, f.name) for f in dataclasses.fields(cell)
              if f.init and f.name not in ("parent", "name")}
    core = type(cell)(**fields, name=name)  # a child of the calling module
    return core(xs, initial_carry=initial_carry, return_carry=return_carry)
  if rum_cell.supports_scan(cell) and not (return_carry and seq_lengths is not None):
    # Fast path: rum_scan (same parameters at <name>/cell). Outputs past seq_lengths are
    # unspecified here as under nn.RNN; callers read hs before each row's length. The
    # carry at each row's length (return_carry with seq_lengths) needs nn.RNN's scan.
    return rum_cell.RUM(cell, name=name)(xs, initial_carry=initial_carry,
                                         return_carry=return_carry)
  # Sown intermediates (RUM's cos(theta), with mutable=["intermediates"]) stacked over time.
  rnn = nn.RNN(cell, split_rngs={"params": False, "dropout": True},
               variable_axes={"intermediates": -1}, name=name)
  return rnn(xs, seq_lengths=seq_lengths, initial_carry=initial_carry,
             return_carry=return_carry)


class TokenInput(nn.Module):
  """Integer tokens to vectors: one-hot (``embed_dim=None``) or a learned embedding.

  Attributes:
    vocab_size: number of input symbols.
    embed_dim: ``None`` for one-hot inputs, else the size of an ``nn.Embed``.
    dtype: the computation dtype (None: float32), param_dtype: the parameters'
      (:mod:`rumjax.models.precision`).
  """
  vocab_size: int
  embed_dim: Optional[int] = None
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, inputs: Array) -> Array:
    """inputs <int>[batch, T] -> <float>[batch, T, vocab_size or embed_dim]."""
    if self.embed_dim is None:
      return jax.nn.one_hot(inputs, self.vocab_size, dtype=self.dtype or jnp.float32)
    return nn.Embed(self.vocab_size, self.embed_dim, dtype=self.dtype,
                    param_dtype=self.param_dtype, name="embed")(inputs)


class TokenSequenceModel(nn.Module):
  """The body the sequence models share: tokens -> (one-hot or embedding) -> cell.

  Attributes:
    cell: the recurrent cell (its hidden size is ``cell.features``).
    vocab_size: number of input symbols.
    num_classes: number of output classes (of the subclass's head).
    embed_dim: ``None`` for one-hot inputs, else an embedding of this size.
    dtype: the computation dtype of the input and the head (None: float32; the cell has
      its own, set by :func:`rumjax.models.build_model`); the logits are float32.
    param_dtype: the parameters' dtype.
    precision: the matmul precision of the head (None: the backend's default; the cell
      has its own, set by :func:`rumjax.models.build_model`).
  """
  cell: nn.RNNCellBase
  vocab_size: int
  num_classes: int
  embed_dim: Optional[int] = None
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  precision: Any = None

  def encode(self, batch: Mapping[str, Any], train: bool) -> Array:
    """<int>[batch, T] tokens -> <float>[batch, T, cell.features], inside the subclass's
    compact ``__call__`` (submodules ``input`` and ``rnn``)."""
    xs = TokenInput(self.vocab_size, self.embed_dim, dtype=self.dtype,
                    param_dtype=self.param_dtype, name="input")(batch["inputs"])
    return run_recurrence(self.cell, xs, seq_lengths=batch.get("lengths"), train=train)

  def logits(self, hs: Array) -> Array:
    """The output layer ``head``; float32 logits (the precision policy)."""
    return precision.output_dense(self.num_classes, dtype=self.dtype,
                                  param_dtype=self.param_dtype, precision=self.precision,
                                  name="head")(hs)


@register_model("tagger")
class SequenceTagger(TokenSequenceModel):
  """Per-step softmax classifier: tokens -> cell -> dense at every step (fields: see
  :class:`TokenSequenceModel`)."""

  @nn.compact
  def __call__(self, batch: Mapping[str, Any], train: bool = False) -> Array:
    """Logits of every step.

    Args:
      batch: ``{"inputs": <int>[batch, T], "lengths"?: <int>[batch], ...}``.
      train: training mode (zoneout) or evaluation.

    Returns:
      logits: <float>[batch, T, num_classes].
    """
    return self.logits(self.encode(batch, train))


@register_model("classifier")
class SequenceClassifier(TokenSequenceModel):
  """Softmax at the last step: tokens -> cell -> dense on the last output (fields: see
  :class:`TokenSequenceModel`).

  With ``batch["lengths"]`` (each >= 1, the rows right-padded) the last step of each row
  is ``lengths - 1``, else ``T - 1``.
  """

  @nn.compact
  def __call__(self, batch: Mapping[str, Any], train: bool = False) -> Array:
    """Logits <float>[batch, num_classes] of the whole sequence (arguments as
    :meth:`SequenceTagger.__call__`)."""
    hs = self.encode(batch, train)
    lengths = batch.get("lengths")
    if lengths is None:
      last = hs[:, -1]
    else:
      idx = jnp.asarray(lengths, jnp.int32)[:, None, None] - 1
      last = jnp.take_along_axis(hs, idx, axis=1)[:, 0]
    return self.logits(last)


def build_sequence_model(model_config: Mapping[str, Any], kind: str, vocab_size: int,
                         num_classes: int) -> nn.Module:
  """The sequence model ``kind`` (``"tagger"``, ``"classifier"``) whose cell is
  ``model_config.cell`` of size ``model_config.hidden_size`` (shorthand for
  :func:`rumjax.models.build_model` with ``name=kind``).

  Cell options (``lam``, ``eta``, ``activation``, ``update_gate``, ``layer_norm``,
  ``zoneout``, ...) are taken from ``model_config`` when the cell has them;
  ``model_config.embed_dim`` (if present and not ``None``/0) switches from one-hot inputs
  to a learned embedding.
  """
  if kind not in ("tagger", "classifier"):
    raise ValueError(f"unknown sequence model kind {kind!r}; known kinds are "
                     "['classifier', 'tagger'].")
  config = dict(model_config)
  config.update(name=kind, embed_dim=config.get("embed_dim") or None)
  return build_model(config, vocab_size=vocab_size, num_classes=num_classes)

"""Masked losses and metric sums shared by the tasks.

Metrics are ``(sum, count)`` pairs so that the loop can add them over batches and devices
and report ``sum / count``; rows with ``mask`` 0 (padding of the last evaluation batch)
count nowhere. Losses and metrics are float32 under any precision policy (the logits are
cast first; :mod:`rumjax.models.precision`).
"""

from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax


def batch_mask(batch: Mapping[str, Any], rows: int) -> jnp.ndarray:
  """``batch["mask"]`` as float32 <float>[rows], or ones if the batch has none."""
  mask = batch.get("mask")
  if mask is None:
    return jnp.ones((rows,), jnp.float32)
  return jnp.asarray(mask, jnp.float32)


def cross_entropy(logits: jnp.ndarray, labels: jnp.ndarray) -> jnp.ndarray:
  """Softmax cross-entropy in float32: <float>[..., C], <int>[...] -> <float>[...]."""
  return optax.softmax_cross_entropy_with_integer_labels(
      jnp.asarray(logits, jnp.float32), labels)


def classification_loss_and_metrics(logits, batch):
  """Mean cross-entropy of one label per row, and accuracy, as ``(sum, count)`` pairs.

  Args:
    logits: <float>[batch, classes].
    batch: ``{"targets": <int>[batch], "mask"?: <float>[batch], ...}``.

  Returns:
    ``(loss, {"loss": (ce_sum, n), "accuracy": (correct, n)})`` with ``n`` the number of
    real (mask 1) rows.
  """
  targets = batch["targets"]
  mask = batch_mask(batch, targets.shape[0])
  ce_sum = jnp.sum(cross_entropy(logits, targets) * mask)
  n = jnp.sum(mask)
  correct = jnp.sum((jnp.argmax(logits, axis=-1) == targets) * mask)
  return ce_sum / jnp.maximum(n, 1.0), {"loss": (ce_sum, n), "accuracy": (correct, n)}


def multi_margin_loss(scores, labels, margin: float = 1.0):
  """The multi-class hinge loss per row (Weston and Watkins; PyTorch's
  ``MultiMarginLoss``, which the StarSaber paper's "Hinge Loss" most likely is)::

      loss(s, y) = sum_{j != y} max(0, margin - s_y + s_j) / C

  Args:
    scores: <float>[..., C] the class scores (logits).
    labels: <int>[...] the gold class; rows with a label outside ``[0, C)`` (e.g. -1 of
      an unlabelled row) get 0.

  Returns:
    <float>[...] the loss of each row, in float32 (or wider) whatever the scores' dtype.
  """
  scores = jnp.asarray(scores, jnp.promote_types(jnp.result_type(scores), jnp.float32))
  num_classes = scores.shape[-1]
  gold = jax.nn.one_hot(labels, num_classes, dtype=scores.dtype)
  s_y = jnp.sum(scores * gold, axis=-1, keepdims=True)
  terms = jnp.maximum(0.0, margin - s_y + scores) * (1.0 - gold)
  return jnp.sum(terms, axis=-1) / num_classes * jnp.any(gold > 0, axis=-1)


# ------------------------------------------------------- sums over batches and devices


def summarize(metric_sums: Mapping[str, tuple], prefix: str) -> dict:
  """``{name: (sum, count)}`` -> ``{prefix_name: sum / count}``."""
  return {f"{prefix}_{k}": float(s) / max(float(c), 1e-12) for k, (s, c) in metric_sums.items()}


def accumulate(total, new):
  """Adds ``{name: (sum, count)}`` dicts (None is the empty total)."""
  if total is None:
    return jax.tree.map(np.asarray, new)
  return {k: (total[k][0] + np.asarray(new[k][0]), total[k][1] + np.asarray(new[k][1]))
          for k in total}


def totals_to_json(total) -> Any:
  """A :func:`accumulate` total as JSON (``None`` stays ``None``): ``{name: [[sum, dtype],
  [count, dtype]]}``, read back exactly by :func:`totals_from_json` (a float32 sum is a
  float64 number in JSON without loss)."""
  if total is None:
    return None
  return {k: [[np.asarray(x).item(), np.asarray(x).dtype.name] for x in pair]
          for k, pair in total.items()}


def totals_from_json(data) -> Any:
  """The total that :func:`totals_to_json` wrote, with its dtypes."""
  if data is None:
    return None
  return {k: tuple(np.asarray(v, dtype) for v, dtype in pair) for k, pair in data.items()}

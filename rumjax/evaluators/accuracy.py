"""The ``grouped_accuracy`` evaluator: classification accuracy per group of examples.

For bAbI trained on several sub-tasks at once, the accuracy of every sub-task (the rows of
the paper's Table 2), next to the overall accuracy. The group of a row is an integer field
of the batch (``group_key``, e.g. ``"subtask"``); the predict function (default
``"predict"``) gives the logits ``<float>[batch, classes]``; padded rows (``mask`` 0)
count nowhere.

Metrics: ``f"{prefix}_accuracy"`` over all rows and ``f"{prefix}_accuracy_{name}"`` for
every group with at least one row, where ``name = name_format.format(group)``.
"""

import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from rumjax.evaluators.base import register_evaluator
from rumjax.evaluators.loss import LossEvaluator, sharded_batches


@functools.partial(jax.jit, static_argnames=("num_groups",))
def group_counts(logits, targets, groups, mask, *, num_groups: int):
  """Correct and total rows per group (<float>[num_groups] twice) and the number of real
  rows whose group is outside ``0 .. num_groups - 1`` (they count in no group)."""
  correct = (jnp.argmax(logits, axis=-1) == targets) * mask
  one_hot = jax.nn.one_hot(groups, num_groups, dtype=jnp.float32)
  outside = jnp.sum(mask * (jnp.sum(one_hot, axis=-1) == 0))
  return correct @ one_hot, mask @ one_hot, outside


@register_evaluator("grouped_accuracy")
class GroupedAccuracyEvaluator(LossEvaluator):
  """Accuracy per value of ``batch[group_key]`` (in ``0 .. num_groups - 1``).

  Args:
    predict_fn: ``(params, batch, model_state) -> (logits, model_state)``.
    data, mesh, prefix, batches, model_state: see :mod:`rumjax.evaluators.base`.
    group_key: the batch field holding each row's group id <int>[batch].
    num_groups: number of groups.
    name_format: the group's name in the metric, e.g. ``"qa{}"``.
    targets_key: the batch field of the labels <int>[batch].
  """
  default_pred = "predict"

  def __init__(self, predict_fn, *, data, mesh, prefix: str, batches: Optional[int] = None,
               model_state=None, group_key: str = "group", num_groups: int = 1,
               name_format: str = "{}", targets_key: str = "targets"):
    super().__init__(predict_fn, data=data, mesh=mesh, prefix=prefix, batches=batches,
                     model_state=model_state)
    where = f"config.evals.{prefix}"
    if not isinstance(num_groups, int) or isinstance(num_groups, bool) or num_groups < 1:
      raise ValueError(f"{where}.num_groups={num_groups!r} must be an integer >= 1 (the "
                       "largest group id + 1).")
    try:
      name_format.format(0)
    except (KeyError, IndexError, ValueError, AttributeError) as err:
      raise ValueError(f"{where}.name_format={name_format!r} cannot name a group "
                       f"({type(err).__name__}: {err}); use one '{{}}', e.g. 'qa{{}}'."
                       ) from None
    self.group_key, self.num_groups = group_key, num_groups
    self.name_format, self.targets_key = name_format, targets_key

  def run(self, state) -> dict[str, float]:
    where = f"config.evals.{self.prefix}"
    correct = np.zeros(self.num_groups)
    total = np.zeros(self.num_groups)
    outside = 0.0
    model_state = self.model_state() if self.model_state is not None else None
    for batch in sharded_batches(self.data, self.mesh, self.batches):
      for field in ("group_key", "targets_key"):
        if getattr(self, field) not in batch:
          raise ValueError(f"{where}.{field}={getattr(self, field)!r} is not a field of the "
                           f"batches; they have {sorted(batch)}.")
      logits, model_state = self.predict_fn(state.params, batch, model_state)
      mask = batch.get("mask")
      if mask is None:
        mask = jnp.ones(batch[self.targets_key].shape[:1], jnp.float32)
      c, t, o = group_counts(logits, batch[self.targets_key], batch[self.group_key],
                             jnp.asarray(mask, jnp.float32), num_groups=self.num_groups)
      correct += np.asarray(c)
      total += np.asarray(t)
      outside += float(o)
    if outside:
      raise ValueError(f"{where}: {int(outside)} rows have a {self.group_key!r} outside 0 .. "
                       f"{self.num_groups - 1}; set num_groups to the largest id + 1.")
    if not total.sum():
      raise ValueError(f"{where}: the split has no real rows (check its split, batches "
                       "and batch_size).")
    out = {f"{self.prefix}_accuracy": float(correct.sum() / total.sum())}
    for g in np.flatnonzero(total):
      name = self.name_format.format(int(g))
      out[f"{self.prefix}_accuracy_{name}"] = float(correct[g] / total[g])
    return out

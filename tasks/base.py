"""The task contract: one typed object per task, what the loop, the launchers and the
experiments may ask of it (WORKSPACE.md, "The task contract").

    >>> TASK = Task(name="copying", get_config=copying_config.get_config,
    ...             validate_config=validate_config, train_data=train_data,
    ...             eval_data=eval_data, build_model=build_model,
    ...             loss_and_metrics=loss_and_metrics, hidden_size_for=hidden_size_for)

A task module defines its ``Task`` objects at module level (``tasks.clue`` defines three);
:func:`tasks.get_task` finds them by ``name``. The required parts are positional-free
fields without defaults; every optional part defaults to ``None`` (the task has none)
and is asked for with ``task.part is not None``, never probed with ``hasattr``.
"""

import dataclasses
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

Config = Any    # an ml_collections.ConfigDict
Batch = Mapping[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Task:
  """A task of the zoo.

  Required:
    name: the registered name (``--task=<name>``, ``config.task``).
    get_config: ``variant -> config``: the task's ``tasks/configs/<name>.py:get_config``
      (``variant=None``: the small default set-up; otherwise one of ``variants``).
    validate_config: ``config -> None``, a one-line ``ValueError`` naming the first bad
      field, before anything compiles.
    train_data: ``(config, *, process_index, process_count) -> iterator`` of batches
      (dicts of NumPy arrays, this process's rows) with ``get_state`` / ``set_state``.
    eval_data: ``(config, split, *, process_index, process_count) -> iterable`` of batches
      (padded rows have ``mask`` 0).
    build_model: ``config -> flax.linen.Module``, called as ``model.apply(variables, batch,
      train=bool, rngs=...)``.
    loss_and_metrics: ``(outputs, batch) -> (loss, {name: (sum, count)})``.

  Optional (``None``: the task has none):
    variants: the paper's set-ups ``get_config`` accepts.
    eval_splits: the splits ``eval_data`` accepts.
    initial_model_state: ``(config, batch_size) -> state`` carried across batches (the
      model is then called with ``model_state=`` and returns ``(outputs, new_state)``).
    predict_fns: ``(config, model) -> {name: fn(params, batch, model_state) ->
      (result, model_state)}``, the task's own predict functions (a beam decoder).
    text_fns: ``config -> {name: fn(batch, outputs) -> [(hypothesis, reference)]}``.
    wrap_optimizer: ``(config, tx) -> tx``, the task's own optimizer transformation.
    hidden_size_for: ``(cell, lam) -> int``, the paper's hidden size per cell (re-applied
      by ``launch.train`` when ``--cell`` changes and ``model.hidden_size`` is not given).
    submission: ``(config, rows) -> [str]``, ``launch.predict``'s output lines.
    submission_pred: the predict function ``launch.predict`` uses by default.
    submission_preds: the predict functions whose output ``submission`` reads (``()``:
      ``submission_pred`` alone).
    sentence_batch: ``(config, sentence, hypothesis) -> (tokens, batch)``, one sentence
      as the model's batch (``launch.attention``).
    tokenize: ``text -> [token]`` as the task's data tokenises it.
    to_text: ids (or a batch row) -> readable text.
  """
  name: str
  get_config: Callable[[Optional[str]], Config]
  validate_config: Callable[[Config], None]
  train_data: Callable[..., Iterator[Batch]]
  eval_data: Callable[..., Iterable[Batch]]
  build_model: Callable[[Config], Any]
  loss_and_metrics: Callable[[Any, Batch], tuple]
  variants: Sequence[str] = ()
  eval_splits: Sequence[str] = ()
  initial_model_state: Optional[Callable[[Config, int], Any]] = None
  predict_fns: Optional[Callable[[Config, Any], Mapping[str, Callable]]] = None
  text_fns: Optional[Callable[[Config], Mapping[str, Callable]]] = None
  wrap_optimizer: Optional[Callable[[Config, Any], Any]] = None
  hidden_size_for: Optional[Callable[[str, Any], int]] = None
  submission: Optional[Callable[[Config, Sequence[Mapping[str, Any]]], list]] = None
  submission_pred: str = "predict"
  submission_preds: Sequence[str] = ()
  sentence_batch: Optional[Callable[..., tuple]] = None
  tokenize: Optional[Callable[[str], list]] = None
  to_text: Optional[Callable[..., str]] = None

  def __post_init__(self):
    if not isinstance(self.name, str) or not self.name:
      raise ValueError(f"a task name must be a non-empty string, got {self.name!r}.")
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      if field.name not in ("name", "variants", "eval_splits", "submission_pred",
                            "submission_preds") and (
          value is not None and not callable(value)):
        raise TypeError(f"task {self.name!r}: {field.name} must be callable or None, "
                        f"got {type(value).__name__}.")

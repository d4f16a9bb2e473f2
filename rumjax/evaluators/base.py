"""The evaluator protocol, its registry, and building evaluators from ``config.evals``.

An evaluator is a class registered by name::

    @register_evaluator("loss")
    class LossEvaluator:
      default_pred = "metrics"          # which predict function it wants by default

      def __init__(self, predict_fn, *, data, mesh, prefix, model_state=None, **options):
        ...

      def run(self, state) -> dict[str, float]:
        ...

* ``predict_fn``: a jit-compiled function of ``(params, batch, model_state)`` (see
  :func:`rumjax.training.loop.predict_fns` for the ones the loop offers: ``"metrics"``,
  the task's ``loss_and_metrics`` sums, and ``"predict"``, the model's outputs; a task adds
  its own, e.g. a beam decoder, through ``predict_fns(config, model)``);
* ``data``: a function of no argument returning an iterable over this process's batches
  of the split (NumPy dicts), called at every ``run``;
* ``mesh``: the device mesh; batches are sharded on its ``data`` axis like training's;
* ``prefix``: the metrics are named ``f"{prefix}_{name}"``;
* ``model_state``: ``None``, or a function of no argument giving the initial carried state
  (e.g. a language model's recurrent state, sharded like the batch);
* ``state``: the :class:`~rumjax.training.state.TrainState` (``state.params``, ``step``).

Host-side text functions: an evaluator class that sets ``uses_text_fns = True`` (e.g.
``rouge``) also receives ``text_fns``, the task's ``text_fns(config)`` mapping (``{}`` when
the task has none), and names the one it uses with its ``texts`` option. A text function
``fn(batch, outputs) -> [(hypothesis, reference), ...]`` turns the host (NumPy) batch of
this process and the host result of the predict function into one pair of texts per real
row (``mask`` 1), sentences separated by ``"\n"``; it is plain Python, outside jit (e.g.
mapping a pointer-generator's extended-vocabulary ids to the article's OOV words).
"""

import dataclasses
import inspect
from typing import Any, Callable, Mapping, Optional

from rumjax.registry import Registry

EVALUATORS = Registry("evaluator")

# Keys of a ``config.evals`` entry that the loop reads; the rest go to the evaluator.
COMMON_OPTIONS = ("type", "split", "every", "at_end", "batches", "batches_at_end", "pred",
                  "batch_size")
# Arguments of every evaluator class that the loop gives, not the entry.
_GIVEN = ("self", "predict_fn", "data", "mesh", "prefix", "batches", "model_state",
          "text_fns")


def evaluator_options(cls: type) -> Optional[list[str]]:
  """The options a ``config.evals`` entry of class ``cls`` may set besides
  :data:`COMMON_OPTIONS` (its constructor's keyword arguments); None if it takes any
  (``**options``)."""
  params = inspect.signature(cls.__init__).parameters
  if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
    return None
  return [k for k in params if k not in _GIVEN]


def register_evaluator(name: str, cls: Optional[type] = None):
  """Registers an evaluator class under ``name`` (usable as a decorator)."""
  return EVALUATORS.register(name, cls)


def eval_entry(type: str, split: str, *, every: int = 0, at_end: bool = True,
               batches: int = 0, **options) -> dict:
  """One ``config.evals`` entry as a plain dict (a ConfigDict accepts it as is)."""
  return dict(type=type, split=split, every=every, at_end=at_end, batches=batches,
              **options)


@dataclasses.dataclass
class Scheduled:
  """An evaluator with its cadence: runs every ``every`` steps and/or at the end, on at
  most ``batches`` batches while training and ``batches_at_end`` at the end (0 = the whole
  split; ``None`` = ``batches``)."""
  name: str
  evaluator: Any
  every: int = 0
  at_end: bool = True
  batches: Optional[int] = None
  batches_at_end: Optional[int] = None

  def due(self, step: int) -> bool:
    """Whether to run periodically after training step ``step``, the last one included:
    its hooks (early stopping, the learning-rate plateau) then see the last step as an
    uninterrupted longer run would, so a finished run extended to more steps on resume
    continues exactly (the final evaluation reuses its metrics when the batches match)."""
    return bool(self.every) and step % self.every == 0

  def batches_for(self, final: bool) -> Optional[int]:
    """The batches a periodic (``final=False``) or final run reads (0/None: all)."""
    if final and self.batches_at_end is not None:
      return self.batches_at_end
    return self.batches

  def run(self, state, final: bool = False) -> dict:
    """The evaluator's metrics on ``state``: a periodic run, or the final one
    (``final``: after the last step, or of a saved checkpoint)."""
    self.evaluator.batches = self.batches_for(final)
    return self.evaluator.run(state)


def _entries(evals) -> list[tuple[str, dict]]:
  if evals is None:
    return []
  if hasattr(evals, "to_dict"):
    evals = evals.to_dict()
  return [(name, dict(entry)) for name, entry in evals.items()]


def validate_evals(evals, predict_names=None, splits=None, text_fn_names=None) -> None:
  """Checks ``config.evals``; ``ValueError`` naming the entry and the field.

  Args:
    evals: the ``config.evals`` mapping.
    predict_names: the predict functions available (``None``: not checked).
    splits: the task's evaluation splits (``None``: not checked).
    text_fn_names: the task's text functions (``None``: not checked); an evaluator with
      ``uses_text_fns`` must name one of them in its ``texts`` option.
  """
  for name, entry in _entries(evals):
    where = f"config.evals.{name}"
    if "type" not in entry:
      raise ValueError(f"{where} has no 'type'; known types: {EVALUATORS.names()}.")
    try:
      cls = EVALUATORS.get(entry["type"])
    except ValueError as err:
      raise ValueError(f"{where}.type: {err}") from None
    if "split" not in entry:
      raise ValueError(f"{where} has no 'split'.")
    options = evaluator_options(cls)
    unknown = sorted(k for k in entry if k not in COMMON_OPTIONS
                     and options is not None and k not in options)
    if unknown:
      raise ValueError(f"{where} has option(s) {unknown} that a {entry['type']!r} evaluator "
                       f"does not take; its options: {options} besides "
                       f"{list(COMMON_OPTIONS)}.")
    if splits is not None and entry["split"] not in splits:
      raise ValueError(f"{where}.split={entry['split']!r} is unknown; the task's splits "
                       f"are {list(splits)}.")
    for field in ("every", "batches", "batches_at_end", "batch_size"):
      value = entry.get(field)
      if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                or value < 0):
        raise ValueError(f"{where}.{field}={value!r} must be an integer >= 0.")
    if not isinstance(entry.get("at_end", True), bool):
      raise ValueError(f"{where}.at_end={entry['at_end']!r} must be True or False.")
    pred = entry.get("pred") or cls.default_pred
    if predict_names is not None and pred not in predict_names:
      raise ValueError(f"{where}.pred={pred!r} is not a predict function of this task; "
                       f"known: {sorted(predict_names)}.")
    if getattr(cls, "uses_text_fns", False):
      known = "" if text_fn_names is None else f"; known: {sorted(text_fn_names)}"
      texts = entry.get("texts")
      if not isinstance(texts, str) or not texts:
        raise ValueError(f"{where} has no 'texts' (the name of one of the task's text "
                         f"functions, text_fns(config)){known}.")
      if text_fn_names is not None and texts not in text_fn_names:
        raise ValueError(f"{where}.texts={texts!r} is not a text function of this "
                         f"task{known}.")


def build_evaluators(evals, *, predict_fns: Mapping[str, Callable],
                     data_fn: Callable[[str, Optional[int]], Any], mesh,
                     model_state_fn: Optional[Callable[[Optional[int]], Any]] = None,
                     text_fns: Optional[Mapping[str, Callable]] = None
                     ) -> list[Scheduled]:
  """The evaluators of ``config.evals``, in order.

  Args:
    evals: the ``config.evals`` mapping (see the package docstring).
    predict_fns: ``{name: jitted fn(params, batch, model_state)}``.
    data_fn: ``(split, batch_size or None) -> iterable of this process's batches``.
    mesh: the device mesh.
    model_state_fn: ``batch_size or None -> initial carried state`` (or ``None`` for a
      stateless model).
    text_fns: the task's host-side text functions ``{name: fn(batch, outputs) ->
      [(hypothesis, reference), ...]}`` (``None``: none), given as ``text_fns=`` to the
      evaluators whose class sets ``uses_text_fns = True``.
  """
  text_fns = dict(text_fns or {})
  validate_evals(evals, predict_fns, text_fn_names=list(text_fns))
  out = []
  for name, entry in _entries(evals):
    cls = EVALUATORS.get(entry["type"])
    split, batch_size = entry["split"], entry.get("batch_size")
    options = {k: v for k, v in entry.items() if k not in COMMON_OPTIONS}
    state_fn = None
    if model_state_fn is not None:
      state_fn = lambda bs=batch_size: model_state_fn(bs)
    if getattr(cls, "uses_text_fns", False):
      options["text_fns"] = text_fns
    evaluator = cls(predict_fns[entry.get("pred") or cls.default_pred],
                    data=lambda s=split, bs=batch_size: data_fn(s, bs), mesh=mesh,
                    prefix=name, batches=entry.get("batches"), model_state=state_fn,
                    **options)
    out.append(Scheduled(name, evaluator, every=int(entry.get("every") or 0),
                         at_end=bool(entry.get("at_end", True)),
                         batches=entry.get("batches"),
                         batches_at_end=entry.get("batches_at_end")))
  return out

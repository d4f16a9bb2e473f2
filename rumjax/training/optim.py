"""Optimizers and learning-rate schedules from the config, with the papers' settings.

Config fields (:func:`validate_config` checks them all, naming the field):

- ``optimizer``: a name registered with :func:`register_optimizer`. Built in: ``rmsprop``
  (decay ``rmsprop_decay`` = 0.9 for tasks A and B), ``adam`` (bAbI and PTB), ``adagrad``
  (initial accumulator ``adagrad_init`` = 0.1, summarization), ``sgd``.
- ``learning_rate``, or ``lr_boundaries`` / ``lr_values``: piecewise constant, in steps
  (e.g. boundaries [b1, b2] and values [0.002, 1e-4, 1e-5] for FS-RUM-2).
- ``warmup_steps``: the rate rises linearly from ``1/warmup_steps`` of it at step 0 to all
  of it at ``warmup_steps - 1`` (the Transformer's warm-up, Vaswani et al. 2017); 0 or
  missing is off.
- ``grad_clip``: clip by global norm first; 0 or None is off.
- ``l2``: L2 regularisation ``l2 * w`` added to the gradient of every parameter before
  clipping (the same as ``l2/2 ||w||^2`` in the loss; the LSTMN paper's SST "regularization
  constant 1E-4"); 0 or missing is off.
- ``lr_plateau_factor`` (1.0 = off), ``lr_plateau_metric``, ``lr_plateau_mode``,
  ``lr_plateau_patience``, ``lr_plateau_min_delta``: multiply the learning rate by the
  factor whenever the evaluator metric (e.g. ``eval_ppl``) has not improved for
  ``patience`` evaluations (the LSTMN paper's word-level PTB: x0.85 when the validation
  perplexity stops improving; refused with a uRNN cell, :func:`check_plateau_reaches`).
  The scale and its bookkeeping live in the optimizer state
  (:class:`PlateauState`, so checkpoints resume it exactly); the loop reports each
  evaluation through :func:`report_plateau`.

Cells whose parameters need their own update rule register an optimizer wrapper beside the
cell (``rumjax.cells.register_optimizer_wrapper``; the uRNN's Cayley steps on the Stiefel
manifold): :func:`make_optimizer` applies every registered wrapper, each a no-op for a
parameter tree without that cell's parameters. Add an optimizer with::

    @register_optimizer("lamb")
    def lamb(config, schedule):
      return optax.lamb(schedule, weight_decay=config.get("weight_decay", 0.0))
"""

from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rumjax import cells as cells_lib  # the package: every cell module registers itself
from rumjax.registry import Registry, decorator, did_you_mean

Config = Mapping[str, Any]

_OPTIMIZERS = Registry("optimizer")
register_optimizer: Callable = decorator(_OPTIMIZERS)


# ------------------------------------------------------------------------ optimizers


@register_optimizer("rmsprop")
def rmsprop(config: Config, schedule: optax.Schedule) -> optax.GradientTransformation:
  """TF1's ``RMSPropOptimizer``, which the authors used: decay ``rmsprop_decay`` (0.9),
  eps 1e-10 inside the sqrt and the mean-square accumulator initialised to 1 (not 0)."""
  return optax.rmsprop(schedule, decay=config.get("rmsprop_decay", 0.9), eps=1e-10,
                       eps_in_sqrt=True, initial_scale=1.0)


@register_optimizer("adam")
def adam(config: Config, schedule: optax.Schedule) -> optax.GradientTransformation:
  """Adam with optax's defaults (b1 0.9, b2 0.999, eps 1e-8)."""
  del config
  return optax.adam(schedule)


@register_optimizer("adagrad")
def adagrad(config: Config, schedule: optax.Schedule) -> optax.GradientTransformation:
  """Adagrad with the initial accumulator ``adagrad_init`` (0.1)."""
  return optax.adagrad(schedule, initial_accumulator_value=config.get("adagrad_init", 0.1))


@register_optimizer("sgd")
def sgd(config: Config, schedule: optax.Schedule) -> optax.GradientTransformation:
  """Plain gradient descent."""
  del config
  return optax.sgd(schedule)


OPTIMIZERS = tuple(_OPTIMIZERS.names())  # the built-in names; optimizer_names() is live


def optimizer_names() -> list[str]:
  """The registered optimizer names, sorted."""
  return _OPTIMIZERS.names()


# ---------------------------------------------------------------------------- checks


def _is_int(x) -> bool:
  return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _is_number(x) -> bool:
  return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _require(ok: bool, field: str, value: Any, requirement: str) -> None:
  """``ValueError("config.<field>=<value> must <requirement>.")`` unless ``ok``."""
  if not ok:
    raise ValueError(f"config.{field}={value!r} must {requirement}.")


def check_optimizer_name(name: Any) -> None:
  """``ValueError`` naming ``config.optimizer``, the known and the close names if unknown."""
  if name not in _OPTIMIZERS:
    hint = did_you_mean(name, optimizer_names())
    raise ValueError(f"config.optimizer={name!r} is unknown; known optimizers are "
                     f"{optimizer_names()}" + (f"; {hint}" if hint else "."))


def check_schedule(config: Config) -> None:
  """Checks ``lr_boundaries`` (increasing positive steps), ``lr_values`` (positive, one
  more than the boundaries, or both empty) and ``warmup_steps`` (>= 0); ``ValueError``
  naming the field."""
  bounds = list(config.get("lr_boundaries") or [])
  values = list(config.get("lr_values") or [])
  _require(all(_is_int(b) and b > 0 for b in bounds) and bounds == sorted(set(bounds)),
           "lr_boundaries", bounds, "be increasing positive steps")
  _require(all(_is_number(v) and v > 0 for v in values),
           "lr_values", values, "be positive numbers")
  _require(not (bounds or values) or len(values) == len(bounds) + 1, "lr_values", values,
           f"have one more entry than config.lr_boundaries={bounds!r} (or both empty: "
           "constant learning_rate)")
  warmup = config.get("warmup_steps", 0)
  _require(_is_int(warmup) and warmup >= 0, "warmup_steps", warmup,
           "be an integer >= 0 (0 switches warm-up off)")


def validate_config(config: Config) -> None:
  """Checks the optimizer fields; a one-line ``ValueError`` naming the field.

  ``optimizer`` and ``learning_rate`` are required; ``rmsprop_decay`` (in [0, 1)),
  ``adagrad_init`` (>= 0), ``grad_clip`` (>= 0 or None) and the schedule fields
  (:func:`check_schedule`) are checked when present.
  """
  check_optimizer_name(config["optimizer"])
  lr = config["learning_rate"]
  _require(_is_number(lr) and lr > 0, "learning_rate", lr, "be > 0")
  decay = config.get("rmsprop_decay", 0.9)
  _require(_is_number(decay) and 0 <= decay < 1, "rmsprop_decay", decay, "be in [0, 1)")
  init = config.get("adagrad_init", 0.1)
  _require(_is_number(init) and init >= 0, "adagrad_init", init, "be >= 0")
  l2 = config.get("l2", 0.0)
  _require(_is_number(l2) and l2 >= 0, "l2", l2, "be >= 0 (0 switches L2 off)")
  clip = config.get("grad_clip")
  _require(clip is None or (_is_number(clip) and clip >= 0), "grad_clip", clip,
           "be a maximum global norm > 0, or None or 0 to switch clipping off")
  check_schedule(config)
  check_plateau(config)


def check_plateau(config: Config) -> None:
  """Checks the ``lr_plateau_*`` fields (when present); ``ValueError`` naming the field."""
  factor = config.get("lr_plateau_factor", 1.0)
  _require(_is_number(factor) and 0 < factor <= 1, "lr_plateau_factor", factor,
           "be in (0, 1] (1.0 switches the decay off)")
  mode = config.get("lr_plateau_mode", "min")
  _require(mode in ("min", "max"), "lr_plateau_mode", mode, "be 'min' or 'max'")
  patience = config.get("lr_plateau_patience", 1)
  _require(_is_int(patience) and patience >= 1, "lr_plateau_patience", patience, "be >= 1")
  delta = config.get("lr_plateau_min_delta", 0.0)
  _require(_is_number(delta) and delta >= 0, "lr_plateau_min_delta", delta, "be >= 0")
  metric = config.get("lr_plateau_metric", "")
  _require(factor == 1 or (isinstance(metric, str) and metric), "lr_plateau_metric", metric,
           "name an evaluator metric such as 'eval_ppl' when lr_plateau_factor < 1")


# --------------------------------------------------------- decay on a plateau


class PlateauState(NamedTuple):
  """The state of :func:`scale_on_plateau` (part of the optimizer state, so checkpointed).

  Attributes:
    scale: <float32>[] the factor applied to every update (1 until the first decay).
    best: <float32>[] the best metric so far (+inf for mode "min", -inf for "max").
    bad_evals: <int32>[] evaluations since the last improvement or decay.
  """
  scale: jax.Array
  best: jax.Array
  bad_evals: jax.Array


def scale_on_plateau(mode: str = "min") -> optax.GradientTransformation:
  """Multiplies the updates by ``PlateauState.scale``; :func:`report_plateau` changes it.

  Placed after the optimizer, so for SGD and Adam it scales the learning rate.
  """
  def init_fn(params):
    del params
    worst = np.inf if mode == "min" else -np.inf
    return PlateauState(jnp.ones([], jnp.float32), jnp.full([], worst, jnp.float32),
                        jnp.zeros([], jnp.int32))

  def update_fn(updates, state, params=None):
    del params
    return jax.tree.map(lambda u: (u * state.scale).astype(u.dtype), updates), state

  return optax.GradientTransformation(init_fn, update_fn)


def plateau_step(state: PlateauState, value: float, *, factor: float, patience: int = 1,
                 min_delta: float = 0.0, mode: str = "min") -> PlateauState:
  """One evaluation's effect: a value better than ``best`` by more than ``min_delta``
  becomes the best and resets the count; otherwise the count grows, and when it reaches
  ``patience`` the scale is multiplied by ``factor`` and the count restarts at 0."""
  best, scale, bad = float(state.best), float(state.scale), int(state.bad_evals)
  improved = value < best - min_delta if mode == "min" else value > best + min_delta
  if improved:
    best, bad = value, 0
  else:
    bad += 1
    if bad >= patience:
      scale, bad = scale * factor, 0

  def like(old, new):
    return jax.device_put(jnp.asarray(new, old.dtype), old.sharding)

  return PlateauState(like(state.scale, scale), like(state.best, best),
                      like(state.bad_evals, bad))


def _is_plateau(x) -> bool:
  return isinstance(x, PlateauState)


def plateau_scale(opt_state) -> float:
  """The current learning-rate scale of :func:`scale_on_plateau` in ``opt_state`` (1.0 if
  it has none)."""
  found = [float(x.scale) for x in jax.tree.leaves(opt_state, is_leaf=_is_plateau)
           if _is_plateau(x)]
  return found[0] if found else 1.0


def report_plateau(opt_state, value: float, config: Config):
  """``opt_state`` with every :class:`PlateauState` advanced by one evaluation (the
  ``lr_plateau_*`` fields of ``config``, see :func:`plateau_step`)."""
  step = lambda x: plateau_step(
      x, value, factor=config.get("lr_plateau_factor", 1.0),
      patience=config.get("lr_plateau_patience", 1),
      min_delta=config.get("lr_plateau_min_delta", 0.0),
      mode=config.get("lr_plateau_mode", "min")) if _is_plateau(x) else x
  return jax.tree.map(step, opt_state, is_leaf=_is_plateau)


# -------------------------------------------------------------------------- building


def make_schedule(config: Config) -> optax.Schedule:
  """Constant ``learning_rate``, or piecewise constant from ``lr_boundaries``/``lr_values``:
  ``lr(step) = lr_values[i]`` for ``lr_boundaries[i-1] <= step < lr_boundaries[i]``; times
  ``min(1, (step + 1) / warmup_steps)`` with a warm-up."""
  check_schedule(config)
  boundaries = list(config.get("lr_boundaries") or [])
  values = list(config.get("lr_values") or [])
  if not boundaries and not values:
    schedule = optax.constant_schedule(config["learning_rate"])
  else:
    schedule = optax.join_schedules([optax.constant_schedule(v) for v in values], boundaries)
  warmup = config.get("warmup_steps", 0)
  if not warmup:
    return schedule
  ramp = optax.linear_schedule(1.0 / warmup, 1.0, warmup - 1) if warmup > 1 else (
      optax.constant_schedule(1.0))
  return lambda step: schedule(step) * ramp(step)


def check_plateau_reaches(config: Config, params) -> None:
  """One-line ``ValueError`` if the plateau rule is on (``lr_plateau_factor`` < 1) and
  ``params`` hold a uRNN's orthogonal matrix: its Cayley steps (the cell's optimizer
  wrapper) take the schedule's rate and never the plateau scale."""
  factor = config.get("lr_plateau_factor", 1.0)
  if factor >= 1:
    return
  labels = cells_lib.stiefel_labels(params)   # the one wrapper that steps its own leaves
  stiefel = [jax.tree_util.keystr(path) for path, label in
             jax.tree_util.tree_leaves_with_path(labels) if label == "stiefel"]
  if stiefel:
    raise ValueError(f"config.lr_plateau_factor={factor:g} would not reach the uRNN's "
                     f"orthogonal matrix ({stiefel[0]}: its Cayley steps take the "
                     "schedule's rate); leave it at 1.0 with a uRNN cell, or lower the rate "
                     "with lr_boundaries / lr_values.")


def make_optimizer(config: Config) -> optax.GradientTransformation:
  """The optimizer named by ``config.optimizer``, with the ``l2`` gradient term first,
  then global-norm clipping, and
  :func:`scale_on_plateau` after it when ``lr_plateau_factor < 1``.

  Every optimizer wrapper registered by a cell module wraps the optimizer (for the uRNN:
  ``recurrent_orthogonal`` takes Cayley steps of the same schedule, Wisdom et al. 2016);
  each is a no-op for a parameter tree without its cell's parameters.
  """
  validate_config(config)
  schedule = make_schedule(config)
  opt = _OPTIMIZERS.get(config["optimizer"])(config, schedule)
  if config.get("lr_plateau_factor", 1.0) < 1:
    opt = optax.chain(opt, scale_on_plateau(config.get("lr_plateau_mode", "min")))
  for wrap in cells_lib.optimizer_wrappers():
    opt = wrap(opt, schedule)
  clip = config.get("grad_clip")
  if clip:
    opt = optax.chain(optax.clip_by_global_norm(clip), opt)
  l2 = config.get("l2", 0.0)
  return optax.chain(optax.add_decayed_weights(l2), opt) if l2 else opt

"""The single generic training loop: every task trains through ``train_and_evaluate``.

The loop knows nothing about tasks: it receives a ``task`` object (a module of
``tasks/``) with the contract of WORKSPACE.md (``train_data``, ``eval_data``,
``build_model``, ``loss_and_metrics``; optionally ``initial_model_state`` for state carried
across batches and ``predict_fns`` for the task's own predict functions). Evaluation is
the list of evaluators in ``config.evals`` (:mod:`rumjax.evaluators`), each at its own
cadence; what acts during training is a hook (:mod:`rumjax.training.hooks`).

Per step: the batch is sharded over the ``data`` mesh axis, parameters are replicated, one
jit-compiled ``train_step`` computes the loss, the gradient, its global norm and the update.
A non-finite loss or gradient leaves the state untouched and stops the run with an error
naming the step. Checkpoints (orbax) hold the state and the data iterator position, and the
run resumes from the latest one automatically, if the saved config agrees on everything
that shapes the run (:mod:`rumjax.training.workdir`; the workdir's lock keeps a second run
out). SIGTERM/SIGINT, recorded from the first moment (:class:`StopRequest`), save what
there is and return.
"""

import contextlib
import functools
import json
import os
import signal
import threading
import time
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from jax.experimental import multihost_utils

from rumjax import evaluators as evaluators_lib
from rumjax import metrics as metrics_lib
from rumjax import sharding as sharding_lib
from rumjax import utils
from rumjax.training import checkpoint as checkpoint_lib
from rumjax.training import hooks as hooks_lib
from rumjax.training import optim
from rumjax.training import progress as progress_lib
from rumjax.training import writer as writer_lib
from rumjax.training import workdir as workdir_lib
from rumjax.training.state import TrainState


class NonFiniteError(FloatingPointError):
  """The loss or the gradient became NaN or Inf."""


# ------------------------------------------------------------------------ the steps


def _apply(model, params, batch, model_state, *, train, rngs=None):
  """``model.apply`` -> ``(outputs, new_model_state)``; stateless models keep ``None``."""
  variables = {"params": params}
  if model_state is None:
    return model.apply(variables, batch, train=train, rngs=rngs), None
  return model.apply(variables, batch, train=train, rngs=rngs, model_state=model_state)


def train_step(state: TrainState, batch, *, model, loss_and_metrics, tx):
  """One optimizer step. Returns ``(new_state, metrics, finite)``.

  ``metrics`` maps names to ``(sum, count)``; ``grad_norm`` is added. If the loss or the
  gradient is not finite, ``new_state`` is ``state`` and ``finite`` is False.
  """
  rngs = {"dropout": state.step_key(0)}

  def loss_fn(params):
    outputs, model_state = _apply(model, params, batch, state.model_state, train=True,
                                  rngs=rngs)
    loss, metrics = loss_and_metrics(outputs, batch)
    return loss, (metrics, model_state)

  (loss, (metrics, model_state)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      state.params)
  grad_norm = optax.tree.norm(grads)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  new_state = state.replace(step=state.step + 1, params=optax.apply_updates(state.params,
                                                                            updates),
                            opt_state=opt_state, model_state=model_state)
  finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
  new_state = jax.tree.map(lambda new, old: jnp.where(finite, new, old), new_state, state)
  metrics = dict(metrics, grad_norm=(grad_norm, jnp.ones_like(grad_norm)))
  return new_state, metrics, finite


def eval_step(params, batch, model_state, *, model, loss_and_metrics):
  """Metric sums of one batch, and the model state to carry to the next batch."""
  outputs, model_state = _apply(model, params, batch, model_state, train=False)
  return loss_and_metrics(outputs, batch)[1], model_state


# --------------------------------------------------------------------- preemption


class StopRequest:
  """Records SIGTERM/SIGINT (preemption, Ctrl-C) from the moment it is entered.

  ``train_and_evaluate`` enters one first thing (before building the model, the data or
  compiling); ``launch.train`` enters one before anything else and passes it in, so a
  signal during start-up or the first compilation is never lost. The loop checks it
  before the first step and after every step, then saves what it has and returns with
  ``stop_reason="preempted"``. ``request()`` does the same from code (tests).
  """

  def __init__(self):
    self.requested = False
    self._previous = {}

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      for sig in (signal.SIGTERM, signal.SIGINT):
        self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def _handle(self, signum, frame):
    del frame
    logging.warning("Received signal %d: saving what there is and stopping.", signum)
    self.requested = True

  def request(self) -> None:
    self.requested = True

  def __exit__(self, *exc):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
    self._previous = {}

  def agreed(self, step: int, also: bool = False, every: int = 10) -> bool:
    """Whether to stop (on a signal, or if ``also``); with several processes all agree
    (checked every ``every`` steps)."""
    local = self.requested or also
    if jax.process_count() == 1:
      return local
    if step % every:
      return False
    flags = multihost_utils.process_allgather(np.asarray(local))
    return bool(np.any(flags))


# ----------------------------------------------------------------------- the loop


def _init_state(config, task, model, tx, sample_batch, mesh,
                init_from: bool = True) -> TrainState:
  """The initial train state; with ``init_from`` the parameters of ``config.init_from``
  (only where no checkpoint of the run replaces them: a run resumed, evaluated or
  predicted from its own checkpoint does not read ``init_from`` again, which may have been
  moved since)."""
  key = jax.random.key(config.seed)
  init_key, dropout_key, base_key = jax.random.split(key, 3)
  model_state = None
  if task.initial_model_state is not None:
    model_state = task.initial_model_state(config, config.batch_size)
  variables_fn = lambda: _init_variables(model, sample_batch, model_state, init_key,
                                         dropout_key)
  params = jax.jit(variables_fn)()
  if config.get("init_uniform", 0.0) > 0:
    params = uniform_params(params, config.init_uniform, jax.random.fold_in(init_key, 1))
  if init_from and config.get("init_from"):
    params = checkpoint_lib.restore_params(config.init_from, params)
    logging.info("Initialised parameters from %s.", config.init_from)
  return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                    rng=jax.random.key_data(base_key), model_state=model_state)


def uniform_params(params: Any, scale: float, key: jax.Array) -> Any:
  """Every array of ``params`` drawn anew from ``U(-scale, scale)`` in its own dtype (the
  initialisation of the Torch language-model code, e.g. Zaremba et al. 2014: 0.05 or 0.1;
  ``config.init_uniform``)."""
  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(key, len(leaves))
  return jax.tree.unflatten(treedef, [
      jax.random.uniform(k, x.shape, x.dtype, -scale, scale) for k, x in zip(keys, leaves)])


def _init_variables(model, batch, model_state, init_key, dropout_key):
  rngs = {"params": init_key, "dropout": dropout_key}
  kwargs = {} if model_state is None else {"model_state": model_state}
  return model.init(rngs, batch, train=False, **kwargs)["params"]


def make_optimizer(config, task) -> optax.GradientTransformation:
  """:func:`optim.make_optimizer` of ``config``, passed through the task's optional
  ``wrap_optimizer(config, tx) -> tx`` (e.g. the LSTMN paper's first-epoch scaling of the
  pre-trained embedding rows, :func:`tasks.text.embeddings.scale_embedding_rows`)."""
  tx = optim.make_optimizer(config)
  wrap = task.wrap_optimizer
  return tx if wrap is None else wrap(config, tx)


def count_model_params(task, config) -> int:
  """The number of trainable parameters of ``task.build_model(config)`` (shapes only,
  nothing is computed)."""
  model = task.build_model(config)
  batch = next(iter(task.train_data(config)))
  model_state = None
  if task.initial_model_state is not None:
    model_state = task.initial_model_state(config, config.batch_size)
  key = jax.random.key(0)
  shapes = jax.eval_shape(lambda: _init_variables(model, batch, model_state, key, key))
  return utils.count_params(shapes)


def _place(state: TrainState, mesh) -> TrainState:
  """Replicates the state; a carried per-example model state is sharded like the batch."""
  model_state = state.model_state
  state = sharding_lib.replicate(state.replace(model_state=None), mesh)
  if model_state is not None:
    model_state = jax.device_put(model_state, sharding_lib.batch_sharding(mesh))
  return state.replace(model_state=model_state)


def predict_fns(config, task, model) -> dict:
  """The jit-compiled predict functions an evaluator can name (``config.evals.*.pred``).

  Each maps ``(params, batch, model_state)`` to ``(result, new_model_state)``:
  ``"metrics"`` gives the task's ``loss_and_metrics`` sums, ``"predict"`` the model's
  outputs; a task adds its own (e.g. a beam decoder) with ``predict_fns(config, model)``.
  """
  fns = {
      "metrics": functools.partial(eval_step, model=model,
                                   loss_and_metrics=task.loss_and_metrics),
      "predict": lambda params, batch, model_state: _apply(model, params, batch, model_state,
                                                           train=False),
  }
  if task.predict_fns is not None:
    fns.update(task.predict_fns(config, model))
  return {name: jax.jit(fn) for name, fn in fns.items()}


def make_evaluators(config, task, model, mesh) -> list[evaluators_lib.Scheduled]:
  """The evaluators of ``config.evals`` on this task's data, sharded on ``mesh``; the
  task's optional ``text_fns(config)`` (host-side ``fn(batch, outputs) -> [(hypothesis,
  reference), ...]``) go to the evaluators that use them (``rouge``)."""

  def data_fn(split, batch_size):
    cfg = config
    if batch_size:
      cfg = config.copy_and_resolve_references()
      with cfg.unlocked():
        cfg.batch_size = batch_size
    sharding_lib.check_batch_size(cfg.batch_size, mesh)
    return task.eval_data(cfg, split, process_index=jax.process_index(),
                          process_count=jax.process_count())

  model_state_fn = None
  if task.initial_model_state is not None:
    def model_state_fn(batch_size):
      model_state = task.initial_model_state(config, batch_size or config.batch_size)
      if model_state is None:
        return None
      return jax.device_put(model_state, sharding_lib.batch_sharding(mesh))

  # Every evaluator's batch splits over the devices, checked before the first step (not at
  # the first evaluation); a task's own evaluation batch (e.g. ptb's eval_batch_size) is
  # checked through the carried state it starts from.
  for name, entry in (config.get("evals") or {}).items():
    sizes = {f"config.evals.{name}.batch_size": entry.get("batch_size") or config.batch_size}
    if model_state_fn is not None:
      state = task.initial_model_state(config, entry.get("batch_size") or config.batch_size)
      for leaf in jax.tree.leaves(state):
        sizes[f"the batch of evaluator {name!r}'s carried state"] = leaf.shape[0]
    for what, size in sizes.items():
      try:
        sharding_lib.check_batch_size(size, mesh)
      except ValueError as err:
        raise ValueError(f"{what}: {err}") from None
  # Every evaluator's split can be read, before the first step: a split the data lacks
  # (cnn_dailymail's sample has no test stories) ended a trained run at its final
  # evaluation. A task's eval_data raises at the call for a missing split.
  for split in {entry["split"] for entry in (config.get("evals") or {}).values()}:
    data_fn(split, None)

  text_fns = task.text_fns(config) if task.text_fns is not None else {}
  return evaluators_lib.build_evaluators(
      config.get("evals"), predict_fns=predict_fns(config, task, model), data_fn=data_fn,
      mesh=mesh, model_state_fn=model_state_fn, text_fns=text_fns)


def _run_evals(evals, state, step, writer, hooks_, ctx, *, final: bool, cache: dict,
               should_stop: Optional[Callable[[], bool]] = None):
  """Runs the due evaluators (all ``at_end`` ones if ``final``), logs and writes their
  metrics, and calls the hooks' ``after_eval``. An evaluator that already ran at this step
  is not run again (its metrics are reused from ``cache``). Returns ``(metrics, state)``
  (the state a hook may have replaced), or ``(None, state)`` if ``should_stop()`` said so
  before an evaluator (a signal during the final evaluation: nothing written)."""
  record, fresh = {}, {}
  for ev in evals:
    if not (ev.at_end if final else ev.due(step)):
      continue
    if should_stop is not None and should_stop():
      return None, state
    key = (step, ev.batches_for(final))   # the final run may read more of the split
    if cache.get(ev.name, (None,))[0] != key:
      logging.info("step %d: running evaluator %s.", step, ev.name)
      cache[ev.name] = (key, ev.run(state, final=final))
      fresh.update(cache[ev.name][1])
    record.update(cache[ev.name][1])
  if record:
    params = scalar_params(state.params)
    record.update(params)
    if fresh:   # what ran at this step already is in metrics.jsonl once, params included
      written = cache.get(("params",)) == step   # the step whose params are written
      writer.write(step, {**fresh, **({} if written else params)})
      cache[("params",)] = step
    logging.info("step %d %s%s", step, "final " if final else "", _fmt(record))
    if not final:
      state = hooks_lib.call_after_eval(hooks_, step, state, record, ctx)
  return record, state


def scalar_params(params) -> dict[str, float]:
  """Every scalar (0-d) parameter of the model as ``{"params/<path>": value}``, e.g. RUM's
  learned ``lam`` (``params/rnn/cell/lam``): logged with every evaluation so that learned
  scalars can be followed through training; ``{}`` for a model without any."""
  out = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    if jnp.ndim(leaf) == 0:
      name = "/".join(str(getattr(k, "key", getattr(k, "name", k))) for k in path)
      local = leaf.addressable_data(0) if isinstance(leaf, jax.Array) else leaf  # multi-host
      out[f"params/{name}"] = float(np.asarray(local))
  return out


def _check_metric(field: str, metric: str, evals) -> tuple[str, list[str]]:
  """The name of the evaluator that reports ``metric`` (``config.<field>``) and those of
  the evaluators whose names extend it; a one-line ``ValueError`` if none does, or only
  one that runs at the end."""
  source = [ev for ev in evals if metric.startswith(ev.name + "_")]
  if not source:
    raise ValueError(f"config.{field}={metric!r} comes from no evaluator; "
                     f"config.evals has {[ev.name for ev in evals]}; a metric is "
                     f"'<evaluator>_<name>', e.g. '{evals[0].name + '_loss' if evals else 'eval_loss'}'.")
  if not any(ev.every for ev in source):
    raise ValueError(f"config.{field}={metric!r} comes from evaluator {source[0].name!r}, "
                     "which runs only at the end (every=0): it can never act during "
                     "training; use a periodic evaluator's metric, e.g. the dev split's.")
  name = max((ev.name for ev in source), key=len)   # "eval_x" over "eval" for eval_x_acc
  return name, [ev.name for ev in evals if ev.name.startswith(name + "_")]


def _config_hooks(config, evals) -> list:
  """The hooks the config itself asks for: :class:`hooks.LearningRateOnPlateau` when
  ``lr_plateau_factor < 1``, :class:`hooks.EarlyStopping` when ``early_stopping_metric``
  is set (each metric must come from one of ``evals``)."""
  out = []
  if config.get("lr_plateau_factor", 1.0) < 1:
    source, others = _check_metric("lr_plateau_metric", config.lr_plateau_metric, evals)
    out.append(hooks_lib.LearningRateOnPlateau(config, evaluator=source, others=others))
  if config.get("early_stopping_metric"):
    source, others = _check_metric("early_stopping_metric", config.early_stopping_metric,
                                   evals)
    out.append(hooks_lib.EarlyStopping(config.early_stopping_metric,
                                       mode=config.early_stopping_mode,
                                       patience=config.early_stopping_patience,
                                       evaluator=source, others=others))
  return out


def _restore(config, task, model, tx, mesh, workdir):
  """The train state (restored from ``workdir`` if it has a checkpoint), the training
  iterator at the matching position, the checkpointer, and the training metrics summed
  since the last record before that checkpoint (:func:`rumjax.metrics.accumulate`'s
  total; ``None`` if none). A checkpoint that does not fit the model raises
  :class:`checkpoint.StateMismatchError` (nothing is moved)."""
  train_iter = task.train_data(config, process_index=jax.process_index(),
                               process_count=jax.process_count())
  start_position = train_iter.get_state()
  sample_batch = next(train_iter)
  train_iter.set_state(start_position)
  checkpointer = checkpoint_lib.Checkpointer(workdir, keep=config.get("keep_checkpoints", 3),
                                             every=config.get("checkpoint_every", 0))
  try:
    saved = bool(checkpointer.manager.all_steps())
    state = _init_state(config, task, model, tx, sample_batch, mesh, init_from=not saved)
    optim.check_plateau_reaches(config, state.params)   # training only: old runs evaluate
    restored = checkpointer.restore(_abstract(state, mesh))
    if restored is None and saved and config.get("init_from"):   # none was loadable
      state = _init_state(config, task, model, tx, sample_batch, mesh)
  except BaseException:
    checkpointer.close()
    raise
  totals = None
  if restored is not None:
    state, data_state, ckpt_step, window = restored
    train_iter.set_state(data_state)
    # The steps since the last record, unless a stop at this step wrote them already (a
    # stop on a checkpoint step keeps the window saved before its partial record).
    if not any("steps_per_sec" in r for r in records_at(workdir, ckpt_step)):
      totals = metrics_lib.totals_from_json((window or {}).get("totals"))
    logging.info("Resumed from the checkpoint at step %d.", ckpt_step)
  return _place(state, mesh), train_iter, checkpointer, totals


def _lock_workdir(workdir: str, stack: contextlib.ExitStack) -> None:
  """The primary process takes the workdir's run lock (held until ``stack`` closes);
  with several processes all of them learn whether it was refused."""
  refused = None
  if jax.process_index() == 0:
    try:
      stack.enter_context(workdir_lib.WorkdirLock(workdir))
    except workdir_lib.WorkdirError as err:
      refused = err
  if jax.process_count() > 1:
    busy = multihost_utils.broadcast_one_to_all(np.int32(refused is not None))
    if int(busy) and refused is None:
      raise workdir_lib.WorkdirError(f"workdir {workdir!r} is in use by another run (see "
                                     "process 0's message).")
  if refused is not None:
    raise refused


def train_and_evaluate(config, workdir: str, task, hooks: Sequence[Any] = (),
                       stop: Optional[StopRequest] = None) -> dict:
  """Trains ``task`` with ``config`` in ``workdir``, resuming from its latest checkpoint.

  Args:
    config: the task's ``ConfigDict`` (``batch_size``, ``num_steps``, ``seed``, optimizer
      fields, ``evals``, ``checkpoint_every``, ``keep_checkpoints``, ``log_every``,
      ``init_from``). The evaluators of ``config.evals`` run at their own cadence and,
      unless ``at_end=False``, after the last step.
    workdir: where checkpoints, ``metrics.jsonl``, TensorBoard files and ``config.json``
      (the config of the latest invocation) go. It belongs to one run: its lock
      (:mod:`rumjax.training.workdir`) refuses a second run at once, and a run resumes
      only with a config that differs from the saved one in the fields of
      :data:`rumjax.configs.RESUME_MAY_CHANGE` at most (else a one-line
      :class:`~rumjax.training.workdir.WorkdirError` before anything is written).
      Resuming drops (to ``metrics.discarded.jsonl``) the ``metrics.jsonl`` records
      written after the checkpoint it resumes from, since they are computed again.
    task: a ``tasks.base.Task`` (the task contract of WORKSPACE.md).
    hooks: :mod:`rumjax.training.hooks` objects (periodic callbacks, early stopping, a
      wall-clock budget), called in order.
    stop: a :class:`StopRequest` already entered by the caller (``launch.train`` enters
      one at start-up); by default one is entered here, first thing.

  Returns:
    A summary dict: the final ``step``, ``stop_reason`` (``"num_steps"``,
    ``"preempted"``, ``"budget"``, ``"early_stopping"``, ...; ``"finished"`` when the
    run had reached ``num_steps`` before: nothing is trained, evaluated or written, as for
    a run that a hook stops again at once, e.g. early stopping, whose reason it keeps;
    the metrics are those of its recorded final evaluation), ``preempted``, the last
    ``train_*`` metrics, the final evaluators' metrics, what hooks add (e.g.
    ``best_step``), and ``params`` (``None`` if stopped before there was a state).
  """
  existed = os.path.isdir(workdir)
  fresh = not existed or not os.listdir(workdir)
  workdir_lib.check_writable(workdir)
  workdir_lib.check_not_experiment(workdir)
  try:
    with contextlib.ExitStack() as stack:
      if stop is None:
        stop = stack.enter_context(StopRequest())
      _lock_workdir(workdir, stack)
      workdir_lib.check_resume(config, workdir)
      workdir_lib.check_steps(config, workdir)
      if stop.requested:
        return _stopped_before_start(workdir)
      mesh = sharding_lib.make_mesh()
      stack.enter_context(jax.set_mesh(mesh))   # kernels that split the batch read it
      return _train(config, workdir, task, hooks, stop, mesh)
  except BaseException:
    if fresh and jax.process_index() == 0:   # a refused start leaves it as it was
      workdir_lib.remove_unused(workdir, remove_folder=not existed)
    raise


def records_at(workdir: str, step: int) -> list[dict]:
  """The records of ``<workdir>/metrics.jsonl`` at ``step``, in order (a torn last line of
  a killed run is skipped)."""
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.isfile(path):
    return []
  records = []
  with open(path) as f:
    for line in f:
      try:
        record = json.loads(line)
      except ValueError:
        continue
      if isinstance(record, dict) and record.get("step") == step:
        records.append(record)
  return records


def finished_record(workdir: str, step: int, evals) -> Optional[dict]:
  """The metrics of the final evaluation at ``step`` in ``<workdir>/metrics.jsonl`` (every
  ``at_end`` evaluator's metrics, from the records at that step, the last one winning), or
  ``None`` if that evaluation is not there (it never ran, or the run was killed during
  it). An evaluator that also ran periodically at ``step`` on other batches (a stop on an
  evaluation step, ``batches_at_end``) needs its second, final record there."""
  records = records_at(workdir, step)
  for ev in evals:
    if not ev.at_end:
      continue
    written = sum(any(k.startswith(ev.name + "_") for k in r) for r in records)
    periodic_too = ev.due(step) and ev.batches_for(True) != ev.batches_for(False)
    if written < (2 if periodic_too else 1):
      return None
  if not records:
    return None
  return {k: v for r in records for k, v in r.items() if k != "step"}


def _stopped_before_start(workdir: str) -> dict:
  steps = checkpoint_lib.checkpoint_steps(workdir)
  logging.info("Stopped before the run started; nothing to save.")
  return {"step": steps[-1] if steps else 0, "preempted": True,
          "stop_reason": "preempted", "params": None}


def _train(config, workdir: str, task, hooks, stop: StopRequest, mesh) -> dict:
  """:func:`train_and_evaluate` once the workdir is locked and checked, with ``mesh`` (the
  ``data`` axis over every device) in context (``jax.set_mesh``)."""
  sharding_lib.check_batch_size(config.batch_size, mesh)
  model = task.build_model(config)
  tx = make_optimizer(config, task)
  state, train_iter, checkpointer, totals = _restore(config, task, model, tx, mesh, workdir)
  writer = None
  step = int(state.step)
  num_steps = config.num_steps
  progress = progress_lib.Progress(num_steps, step, enabled=jax.process_index() == 0)
  try:
    evals = make_evaluators(config, task, model, mesh)
    hooks = [*hooks, *_config_hooks(config, evals)]

    def save(directory, at_step, at_state):
      if directory == workdir:   # with the training metrics since the last record
        checkpointer.save(at_step, at_state, train_iter.get_state(),
                          window={"totals": metrics_lib.totals_to_json(totals)})
        return
      best = checkpoint_lib.Checkpointer(directory, keep=1)
      try:
        best.save(at_step, at_state, train_iter.get_state())
      finally:
        best.close()

    ctx = hooks_lib.LoopContext(workdir=workdir, config=config, num_steps=num_steps,
                                start_step=step, save=save)
    hooks_lib.call(hooks, "begin", step, state, ctx)
    if step >= num_steps or ctx.stop_reason is not None:
      # Finished already (all steps, or a hook stops it again at once, e.g. early
      # stopping): with its final evaluation in metrics.jsonl there is nothing to do.
      done = finished_record(workdir, step, evals)
      if done is not None:
        reason = "finished" if step >= num_steps else ctx.stop_reason
        how = reason if reason == "finished" else f"stopped ({reason})"
        logging.warning("%s: the run %s at step %d already (its final evaluation is in "
                        "metrics.jsonl); nothing to do, nothing written.", workdir, how, step)
        summary = {**done, "step": step, "preempted": False, "stop_reason": reason}
        hooks_lib.call(hooks, "end", step, state, summary, ctx)
        return {**summary, "params": state.params}
    if jax.process_index() == 0:
      utils.write_json(os.path.join(workdir, "config.json"), config.to_dict())
    logging.info("%s at step %d of %d on %d device(s); config:\n%s",
                 "Resuming" if step else "Starting", step, num_steps, mesh.devices.size,
                 config)
    step_fn = jax.jit(functools.partial(train_step, model=model, tx=tx,
                                        loss_and_metrics=task.loss_and_metrics),
                      donate_argnums=0)
    writer = writer_lib.MetricWriter(workdir, start_step=step)
    log_every = config.get("log_every", 50) or 50
    summary = {"step": step, "preempted": False}
    # The training metrics since the last record (``totals``, restored with the checkpoint:
    # after a kill the resumed run writes the records of an uninterrupted one; a stop
    # writes the steps since the last record at its step, so the resumed run's next record
    # covers only the steps after it) and the steps and time of this invocation among them
    # (for ``steps_per_sec``).
    window_start, window_steps, cache = time.perf_counter(), 0, {}

    def write_window(step):
      """Writes the training metrics of the steps since the last such record."""
      elapsed = time.perf_counter() - window_start
      record = metrics_lib.summarize(totals, "train")
      record["steps_per_sec"] = window_steps / max(elapsed, 1e-9)
      record["eta_sec"] = (num_steps - step) / max(record["steps_per_sec"], 1e-9)
      writer.write(step, record)
      progress.set_loss(record["train_loss"])
      logging.info("step %d/%d %s", step, num_steps, _fmt(record))
      summary.update(record)

    while step < num_steps:
      if stop.agreed(step, also=ctx.stop_reason is not None):
        ctx.request_stop("preempted")
        break
      batch = sharding_lib.shard_batch(next(train_iter), mesh)
      if step == ctx.start_step:
        logging.info("Compiling the train step at step %d (the first step takes longer).",
                     step)
      state, metrics, finite = step_fn(state, batch)
      if not bool(finite):
        last = checkpointer.latest_step()
        kept = ("there is no checkpoint yet (none was saved before this step)"
                if last is None else
                f"the last good checkpoint (step {last}) is kept in "
                f"{checkpointer.directory}")
        raise NonFiniteError(
            f"non-finite loss or gradient at step {step + 1}; stopping; {kept}. Lower "
            "the learning rate, set grad_clip, or use time normalization (eta).")
      step += 1
      window_steps += 1
      totals = metrics_lib.accumulate(totals, jax.device_get(metrics))
      progress.update(step)
      if step % log_every == 0 or step == num_steps:
        write_window(step)
        totals, window_start, window_steps = None, time.perf_counter(), 0
      hooks_lib.call(hooks, "after_step", step, state, ctx)
      _, state = _run_evals(evals, state, step, writer, hooks, ctx, final=False,
                            cache=cache)
      if checkpointer.should_save(step):
        save(workdir, step, state)
    if window_steps:   # stopped between two records: the steps since the last one
      write_window(step)
      totals = None
    if step != ctx.start_step:   # else it is saved already, or is the initial state
      save(workdir, step, state)
    progress.close()
    summary["step"] = step
    # A hook's stop at the last step (early stopping's last evaluation) stops nothing; a
    # signal does, also one during the last step's periodic evaluation or the final one
    # (the checkpoint of the last step is saved; a resumed run evaluates it).
    signalled = lambda: stop.agreed(step, every=1)
    summary["stop_reason"] = ("preempted" if ctx.stop_reason == "preempted" or signalled()
                              else "num_steps" if step >= num_steps
                              else ctx.stop_reason or "num_steps")
    if summary["stop_reason"] != "preempted":
      final, _ = _run_evals(evals, state, step, writer, hooks, ctx, final=True,
                            cache=cache, should_stop=signalled)
      if final is None:
        summary["stop_reason"] = "preempted"
      else:
        summary.update(final)
        hooks_lib.call(hooks, "end", step, state, summary, ctx)
    summary["preempted"] = summary["stop_reason"] == "preempted"
    if summary["preempted"]:
      logging.warning("Stopped by a signal at step %d (checkpoint saved); the same command "
                      "resumes.", step)
  finally:
    progress.close()
    if writer is not None:
      writer.close()
    checkpointer.close()
  summary["params"] = state.params
  return summary


def _load_checkpoint(config, workdir: str, task, model, mesh, step: Optional[int]):
  """``(state, step)`` of a checkpoint of ``workdir`` placed on ``mesh``; one-line
  ``ValueError`` when there is none."""
  tx = make_optimizer(config, task)
  directory = os.path.join(workdir, "checkpoints")
  if not os.path.isdir(directory):
    raise ValueError(f"no checkpoints in {workdir!r} (expected {directory}/<step>/); pass "
                     "the --workdir of a training run.")
  train_iter = task.train_data(config, process_index=jax.process_index(),
                               process_count=jax.process_count())
  state = _init_state(config, task, model, tx, next(train_iter), mesh, init_from=False)
  checkpointer = checkpoint_lib.Checkpointer(workdir, keep=1000, read_only=True)
  try:
    restored = checkpointer.restore(_abstract(state, mesh), step=step)
    saved = sorted(checkpointer.manager.all_steps())
  finally:
    checkpointer.close()
  if restored is None:
    if step is not None and step not in saved:
      raise ValueError(f"no checkpoint at step {step} in {directory}; the steps saved there "
                       f"are {saved}.")
    raise ValueError(f"no loadable checkpoint{'' if step is None else f' at step {step}'} "
                     f"in {directory}.")
  state, _, at, _ = restored
  return _place(state, mesh), int(at)


def predict_checkpoint(config, workdir: str, task, split: str, *,
                       step: Optional[int] = None, pred: str = "predict",
                       seconds: Optional[list] = None):
  """Runs the predict function ``pred`` of a checkpoint over a split (e.g. to write a
  benchmark's submission file from the unlabelled test split).

  Args:
    config, workdir, task, step: as :func:`evaluate_checkpoint`.
    split: a split of ``task.eval_data``.
    pred: a name of :func:`predict_fns` (``"predict"``: the model's outputs).
    seconds: if a list, the wall time of each batch (prediction until its outputs are on
      the host; the first includes compilation) is appended to it.

  Returns:
    ``(step, rows)``: ``rows`` is a list of ``(batch, outputs)`` pairs of host NumPy
    trees, one per batch of this process, in the data's order (padded rows, mask 0,
    included: the caller drops them).
  """
  mesh = sharding_lib.make_mesh()
  model = task.build_model(config)
  state, at = _load_checkpoint(config, workdir, task, model, mesh, step)
  fns = predict_fns(config, task, model)
  if pred not in fns:
    raise ValueError(f"pred={pred!r} is not a predict function of this task; known: "
                     f"{sorted(fns)}.")
  model_state = None
  if task.initial_model_state is not None:
    model_state = task.initial_model_state(config, config.batch_size)
  rows = []
  for batch in task.eval_data(config, split, process_index=jax.process_index(),
                              process_count=jax.process_count()):
    start = time.perf_counter()
    outputs, model_state = fns[pred](state.params, sharding_lib.shard_batch(batch, mesh),
                                     model_state)
    rows.append((batch, jax.tree.map(np.asarray, jax.device_get(outputs))))
    if seconds is not None:
      seconds.append(time.perf_counter() - start)
  return at, rows


def evaluate_checkpoint(config, workdir: str, task, *, step: Optional[int] = None,
                        names: Optional[Sequence[str]] = None) -> dict:
  """Runs the evaluators of ``config.evals`` (all of them, or ``names``) on a checkpoint.

  Args:
    config: the task config the checkpoint was trained with.
    workdir: a training workdir, or the ``best`` folder an :class:`EarlyStopping` hook
      keeps in it.
    task: the task.
    step: the checkpoint step (default: the latest one).
    names: the evaluators to run (keys of ``config.evals``; default: all), each on the
      batches of its final run (``batches_at_end``).

  Returns:
    ``{"step": step, **metrics}``. Nothing is written to ``workdir``.
  """
  mesh = sharding_lib.make_mesh()
  model = task.build_model(config)
  state, at = _load_checkpoint(config, workdir, task, model, mesh, step)
  evals = make_evaluators(config, task, model, mesh)
  if names:
    known = [ev.name for ev in evals]
    unknown = sorted(set(names) - set(known))
    if unknown:
      raise ValueError(f"unknown evaluator(s) {unknown}; config.evals has {known}.")
    evals = [ev for ev in evals if ev.name in names]
  out = {"step": at}
  for ev in evals:
    out.update(ev.run(state, final=True))
  return out


def _abstract(state: TrainState, mesh) -> TrainState:
  """Shapes, dtypes and shardings to restore ``state`` onto this run's mesh (which may
  differ from the one that saved it, e.g. a job resumed on another topology)."""
  struct = lambda sharding: lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x),
                                                           sharding=sharding)
  abstract = jax.tree.map(struct(sharding_lib.replicated(mesh)),
                          state.replace(model_state=None))
  model_state = jax.tree.map(struct(sharding_lib.batch_sharding(mesh)), state.model_state)
  return abstract.replace(model_state=model_state)


def _fmt(record: dict) -> str:
  return " ".join(f"{k}={v:.4g}" for k, v in record.items())

"""The generic loop on a toy task: resume, NaN guard, corrupt checkpoints, carried state."""

import errno
import json
import shutil
import os
import signal

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

from rumjax import training, utils
from tests import toy_task


def _config(**overrides):
  config = toy_task.default_config()
  config.update(overrides)
  return config


def _params_equal(a, b):
  jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), a, b)


def test_trains_writes_metrics_and_resumes_exactly(tmp_path):
  full = training.train_and_evaluate(_config(num_steps=12), str(tmp_path / "full"), toy_task.TASK)
  part = str(tmp_path / "part")
  first = training.train_and_evaluate(_config(num_steps=7), part, toy_task.TASK)
  assert first["step"] == 7
  resumed = training.train_and_evaluate(_config(num_steps=12), part, toy_task.TASK)
  assert resumed["step"] == 12
  _params_equal(full["params"], resumed["params"])
  assert full["eval_loss"] < 5  # it learns (the loss of zero weights is about 30)
  records = [json.loads(line) for line in open(tmp_path / "full" / "metrics.jsonl")]
  assert {"train_loss", "steps_per_sec", "train_grad_norm"} <= set(records[0])
  assert any("eval_loss" in r for r in records)
  assert records[-1]["step"] == 12
  assert os.listdir(tmp_path / "full" / "tensorboard")


def test_nan_guard_names_the_step_and_keeps_the_checkpoint(tmp_path):
  workdir = str(tmp_path / "nan")
  with pytest.raises(training.NonFiniteError, match="step 8"):
    training.train_and_evaluate(_config(num_steps=12, nan_at_step=8), workdir, toy_task.TASK)
  steps = sorted(int(d) for d in os.listdir(os.path.join(workdir, "checkpoints"))
                 if d.isdigit())
  assert steps == [5]


def test_corrupt_latest_checkpoint_falls_back(tmp_path, caplog):
  workdir = str(tmp_path / "corrupt")
  training.train_and_evaluate(_config(num_steps=10), workdir, toy_task.TASK)
  ckpt = os.path.join(workdir, "checkpoints", "10")
  # Corrupt every file of the latest checkpoint's state.
  for root, _, files in os.walk(os.path.join(ckpt, "state")):
    for name in files:
      with open(os.path.join(root, name), "wb") as f:
        f.write(b"garbage")
  summary = training.train_and_evaluate(_config(num_steps=12), workdir, toy_task.TASK)
  assert summary["step"] == 12
  assert "cannot be restored" in caplog.text
  assert os.listdir(os.path.join(workdir, "corrupt_checkpoints"))  # kept, not deleted
  reference = training.train_and_evaluate(_config(num_steps=12), str(tmp_path / "ref"),
                                          toy_task.TASK)
  _params_equal(reference["params"], summary["params"])


@pytest.mark.parametrize("where,err", [
    ("restore", OSError(errno.EACCES, "Permission denied", "checkpoints/10/state")),
    ("restore", ValueError("tensorstore read failed")),   # orbax's wrapper of ...
    ("state_metadata", MemoryError()),
])
def test_a_read_failed_by_the_machine_moves_no_checkpoint(tmp_path, monkeypatch, where, err):
  # Permission denied, out of memory, an I/O error: the checkpoint is not corrupt, so it is
  # not moved aside (the run would fall back to an older one and retrain the steps since);
  # a one-line error, and the same command resumes from it once the cause is fixed.
  workdir = str(tmp_path / "machine")
  training.train_and_evaluate(_config(num_steps=10), workdir, toy_task.TASK)
  if isinstance(err, ValueError):   # ... an OSError, as the cause in the chain
    err.__cause__ = OSError(errno.EIO, "Input/output error")
  target = (ocp.CheckpointManager if where == "restore" else training.Checkpointer)

  def fail(*args, **kwargs):
    raise err

  with monkeypatch.context() as patch:
    patch.setattr(target, where, fail)
    with pytest.raises(training.CheckpointReadError,
                       match=r"^the checkpoint at step 10 in \S+ could not be read: "
                             r"(PermissionError|OSError|MemoryError).*nothing was moved") as info:
      training.train_and_evaluate(_config(num_steps=12), workdir, toy_task.TASK)
  assert "\n" not in str(info.value)
  assert not os.path.exists(os.path.join(workdir, "corrupt_checkpoints"))
  assert os.path.isdir(os.path.join(workdir, "checkpoints", "10"))
  resumed = training.train_and_evaluate(_config(num_steps=12), workdir, toy_task.TASK)
  reference = training.train_and_evaluate(_config(num_steps=12), str(tmp_path / "ref"),
                                          toy_task.TASK)
  _params_equal(reference["params"], resumed["params"])


def test_carried_model_state(tmp_path):
  a = training.train_and_evaluate(_config(num_steps=4, stateful=True, checkpoint_every=2),
                                  str(tmp_path / "a"), toy_task.TASK)
  b = str(tmp_path / "b")
  training.train_and_evaluate(_config(num_steps=2, stateful=True, checkpoint_every=2), b,
                              toy_task.TASK)
  resumed = training.train_and_evaluate(
      _config(num_steps=4, stateful=True, checkpoint_every=2), b, toy_task.TASK)
  _params_equal(a["params"], resumed["params"])


def test_unwritable_workdir(tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("x")
  with pytest.raises(ValueError, match="not writable"):
    training.train_and_evaluate(_config(), str(blocker / "sub"), toy_task.TASK)
  with pytest.raises(ValueError, match="is a file, not a folder"):
    training.train_and_evaluate(_config(), str(blocker), toy_task.TASK)
  assert blocker.read_text() == "x"                # nothing saved is touched


def test_schedules_and_optimizers():
  config = _config(learning_rate=0.1, lr_boundaries=[3, 6], lr_values=[0.1, 0.01, 0.001])
  schedule = training.make_schedule(config)
  assert [float(schedule(s)) for s in (0, 2, 3, 5, 6, 100)] == pytest.approx(
      [0.1, 0.1, 0.01, 0.01, 0.001, 0.001])
  with pytest.raises(ValueError, match="one more entry"):
    training.make_schedule(_config(lr_boundaries=[3], lr_values=[0.1]))
  for name in ("rmsprop", "adam", "adagrad", "sgd"):
    tx = training.make_optimizer(_config(optimizer=name, grad_clip=1.0))
    params = {"w": jax.numpy.ones(3)}
    updates, _ = tx.update({"w": jax.numpy.full(3, 100.0)}, tx.init(params), params)
    assert np.all(np.isfinite(updates["w"]))
  clipped = training.make_optimizer(_config(optimizer="sgd", learning_rate=1.0, grad_clip=1.0))
  params = {"w": jax.numpy.ones(4)}
  updates, _ = clipped.update({"w": jax.numpy.full(4, 100.0)}, clipped.init(params), params)
  assert float(optax.tree.norm(updates)) == pytest.approx(1.0, rel=1e-5)
  with pytest.raises(ValueError, match="optimizer='lamb'"):
    training.make_optimizer(_config(optimizer="lamb"))


def test_init_from_a_pretrained_run(tmp_path):
  pretrained = training.train_and_evaluate(_config(num_steps=10), str(tmp_path / "pre"),
                                           toy_task.TASK)
  config = _config(num_steps=1, learning_rate=1e-9, init_from=str(tmp_path / "pre"))
  fine = training.train_and_evaluate(config, str(tmp_path / "fine"), toy_task.TASK)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
               fine["params"], pretrained["params"])
  with pytest.raises(ValueError, match="no checkpoint found"):
    training.train_and_evaluate(_config(init_from=str(tmp_path / "nothing")),
                                str(tmp_path / "x"), toy_task.TASK)
  # The run's own checkpoints replace init_from's parameters: resuming, evaluating and
  # predicting do not read it again (it may have been moved away since).
  shutil.move(str(tmp_path / "pre"), str(tmp_path / "pre_moved"))
  resumed = training.train_and_evaluate(
      _config(num_steps=2, learning_rate=1e-9, init_from=str(tmp_path / "pre")),
      str(tmp_path / "fine"), toy_task.TASK)
  assert resumed["step"] == 2
  assert training.evaluate_checkpoint(config, str(tmp_path / "fine"), toy_task.TASK)["step"] == 2


def test_task_predict_fn_reaches_its_evaluator(tmp_path, monkeypatch):
  """A task's own predict function (``predict_fns``) drives an evaluator of its config."""
  monkeypatch.setattr(toy_task, "TASK", toy_task.with_parts(predict_fns=lambda config, model: {
      "twice": lambda params, batch, state: ({"double": (2.0 * (batch["y"] ** 2).sum(),
                                                          (batch["y"] ** 2).sum())}, state)}))
  config = _config(num_steps=4, eval_every=2)
  config.evals.twice = dict(type="loss", split="dev", every=2, pred="twice")
  summary = training.train_and_evaluate(config, str(tmp_path), toy_task.TASK)
  assert summary["twice_double"] == pytest.approx(2.0)
  records = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
  assert [r["step"] for r in records if "twice_double" in r] == [2, 4]


def test_init_from_restores_the_shared_parameters_only(tmp_path):
  """A fine-tuning model initialises from a pretraining run: the parameters the two share
  (by path) come from the checkpoint, a new head keeps its initialisation, a parameter the
  model lacks is dropped; a shared path with another shape, or nothing shared, is an error."""
  training.train_and_evaluate(_config(num_steps=3), str(tmp_path / "pre"), toy_task.TASK)
  _, saved = training.checkpoint.read_params(str(tmp_path / "pre"))
  assert set(saved["Dense_0"]) == {"kernel", "bias"}
  model = {"Dense_0": {"kernel": np.zeros_like(saved["Dense_0"]["kernel"])},  # no bias
           "head": {"bias": np.full((4,), 7.0, np.float32)}}
  restored = training.restore_params(str(tmp_path / "pre"), model)
  np.testing.assert_array_equal(restored["Dense_0"]["kernel"], saved["Dense_0"]["kernel"])
  np.testing.assert_array_equal(restored["head"]["bias"], np.full(4, 7.0))
  assert "bias" not in restored["Dense_0"]
  wrong = {"Dense_0": {"kernel": np.zeros((5, 5), np.float32)}}
  with pytest.raises(ValueError, match="Dense_0/kernel has shape"):
    training.restore_params(str(tmp_path / "pre"), wrong)
  with pytest.raises(ValueError, match="none of its parameters"):
    training.restore_params(str(tmp_path / "pre"), {"unrelated": np.zeros(3, np.float32)})


def test_an_evaluation_batch_that_does_not_split_is_refused_before_training():
  """Checked when the evaluators are built, not at the first evaluation (which lost the
  steps since the last checkpoint); the mesh stands for two devices."""
  import types
  from rumjax.training import loop
  two_devices = types.SimpleNamespace(devices=np.empty(2))
  config = _config()
  config.evals.eval.batch_size = 3
  with pytest.raises(ValueError, match=r"^config.evals.eval.batch_size: batch_size=3 is not "
                     r"divisible by the number of devices \(2\)"):
    loop.make_evaluators(config, toy_task.TASK, None, two_devices)


def test_a_resumed_run_writes_the_training_records_of_an_uninterrupted_one(tmp_path):
  """Killed after the checkpoint at step 6 (log_every 5: step 6 is in the window of the
  record at 10): the resumed run's record at step 10 averages steps 6-10, as the
  uninterrupted run's does (before session 33 it averaged steps 7-10 only)."""
  config = _config(num_steps=12, log_every=5, checkpoint_every=3, keep_checkpoints=10)
  full, killed = str(tmp_path / "full"), str(tmp_path / "killed")
  training.train_and_evaluate(config, full, toy_task.TASK)
  shutil.copytree(full, killed)
  for step in ("9", "12"):   # what the kill left unsaved
    shutil.rmtree(os.path.join(killed, "checkpoints", step))
  training.train_and_evaluate(config, killed, toy_task.TASK)
  train = lambda d: [{k: v for k, v in r.items() if k.startswith("train_") or k == "step"}
                     for r in map(json.loads, open(os.path.join(d, "metrics.jsonl")))
                     if "train_loss" in r]
  assert [r["step"] for r in train(killed)] == [5, 10, 12]
  assert train(killed) == train(full)
  # A checkpoint saved without the window (before session 33) still resumes.
  old = str(tmp_path / "old")
  shutil.copytree(full, old)
  for step in ("9", "12"):
    shutil.rmtree(os.path.join(old, "checkpoints", step))
  shutil.rmtree(os.path.join(old, "checkpoints", "6", "window"))
  assert training.train_and_evaluate(config, old, toy_task.TASK)["step"] == 12
  assert [r["step"] for r in train(old)] == [5, 10, 12]


def test_batches_at_end_reads_more_of_the_split_at_the_end_than_during_training(tmp_path):
  """evals.eval: batches=1 while training, batches_at_end=0 (the whole split, 3 batches)
  at the end and for a checkpoint's evaluation; a stop on an evaluation step evaluates
  again at the end instead of reusing the periodic metrics."""
  def config(batches, at_end=None):
    c = _config(num_steps=100, eval_every=2, checkpoint_every=2)
    c.evals.eval.batches = batches
    if at_end is not None:
      c.evals.eval.batches_at_end = at_end
    return c

  stop = lambda: [training.EarlyStopping("eval_loss", mode="max", patience=1)]
  split = training.train_and_evaluate(config(1, 0), str(tmp_path / "split"), toy_task.TASK,
                                      hooks=stop())
  during = training.train_and_evaluate(config(1), str(tmp_path / "one"), toy_task.TASK,
                                       hooks=stop())
  whole = training.train_and_evaluate(config(0), str(tmp_path / "whole"), toy_task.TASK,
                                      hooks=stop())
  assert split["step"] == during["step"] == whole["step"] == 4
  assert split["eval_loss"] == whole["eval_loss"] != during["eval_loss"]
  evals = lambda d: [r["eval_loss"] for r in map(json.loads, open(d / "metrics.jsonl"))
                     if "eval_loss" in r]
  # Periodic at steps 2 and 4 on one batch, then the final at step 4 on the whole split.
  assert evals(tmp_path / "split") == evals(tmp_path / "one") + [whole["eval_loss"]]
  again = training.evaluate_checkpoint(config(1, 0), str(tmp_path / "split"), toy_task.TASK)
  assert again["eval_loss"] == whole["eval_loss"]
  with pytest.raises(ValueError, match=r"batches_at_end=-1 must be an integer >= 0"):
    training.train_and_evaluate(config(1, -1), str(tmp_path / "bad"), toy_task.TASK)


def test_evaluating_a_corrupt_checkpoint_moves_nothing(tmp_path):
  workdir = str(tmp_path / "run")
  config = toy_task.default_config()
  config.update(num_steps=10)
  training.train_and_evaluate(config, workdir, toy_task.TASK)
  for root, _, files in os.walk(os.path.join(workdir, "checkpoints", "10", "state")):
    for name in files:
      with open(os.path.join(root, name), "wb") as f:
        f.write(b"garbage")
  training.evaluate_checkpoint(config, workdir, toy_task.TASK)
  assert os.path.isdir(os.path.join(workdir, "checkpoints", "10"))
  assert not os.path.exists(os.path.join(workdir, "corrupt_checkpoints"))


def test_the_step_key_is_the_base_key_folded_with_the_step():
  """Dropout's key at step s is fold_in(rng, s), then the extra integers (state.py): a new
  key every step, the same one at the same step of a resumed run."""
  from rumjax.training.state import TrainState
  base = jax.random.key(3)
  keys = []
  for step in (0, 1, 2):
    state = TrainState(step=np.int32(step), params={}, opt_state=(),
                       rng=jax.random.key_data(base))
    want = jax.random.fold_in(jax.random.fold_in(base, step), 7)
    keys.append(np.asarray(jax.random.key_data(state.step_key(7))))
    np.testing.assert_array_equal(keys[-1], jax.random.key_data(want))
  assert len({k.tobytes() for k in keys}) == 3


class _KeyModel(nn.Module):
  """``w x`` plus, in training, a uniform draw of its dropout key."""

  @nn.compact
  def __call__(self, batch, *, train):
    w = self.param("w", lambda key: np.float32(2.0))
    u = jax.random.uniform(self.make_rng("dropout"), ()) if train else 0.0
    return w * batch["x"] + u


def test_train_step_uses_the_step_key_and_eval_step_the_eval_mode():
  """The dropout key differs from step to step and is the state's ``step_key(0)``;
  ``eval_step`` runs the model with ``train=False``; ``grad_norm`` is one value (count 1);
  a step whose loss or gradient is not finite returns the state unchanged."""
  from rumjax.training import loop
  from rumjax.training.state import TrainState
  model, tx = _KeyModel(), optax.sgd(0.1)

  def loss_and_metrics(out, batch):
    return jnp.sum(out), {"out": (jnp.sum(out), jnp.float32(1))}

  def state_at(step):
    params = {"w": jnp.float32(2.0)}
    return TrainState(step=jnp.int32(step), params=params, opt_state=tx.init(params),
                      rng=jax.random.key_data(jax.random.key(5)))

  batch = {"x": jnp.ones((1,), jnp.float32)}
  outs = []
  for step in (0, 1):
    state = state_at(step)
    _, metrics, finite = training.train_step(state, batch, model=model,
                                             loss_and_metrics=loss_and_metrics, tx=tx)
    assert bool(finite)
    want = model.apply({"params": state.params}, batch, train=True,
                       rngs={"dropout": state.step_key(0)})
    np.testing.assert_allclose(metrics["out"][0], jnp.sum(want))
    outs.append(float(metrics["out"][0]))
    assert float(metrics["grad_norm"][1]) == 1
    np.testing.assert_allclose(metrics["grad_norm"][0], 1.0)   # d(w x + u)/dw at x=1
  assert outs[0] != outs[1]
  eval_metrics, _ = loop.eval_step(state.params, batch, None, model=model,
                                   loss_and_metrics=loss_and_metrics)
  assert float(eval_metrics["out"][0]) == 2.0   # w x, no draw
  state = state_at(3)
  new, _, finite = training.train_step(state, {"x": jnp.full((1,), jnp.nan)}, model=model,
                                       loss_and_metrics=loss_and_metrics, tx=tx)
  assert not bool(finite)
  assert int(new.step) == 3 and float(new.params["w"]) == 2.0
  # a finite loss with a non-finite gradient (d sqrt(0 w)/dw = inf * 0) is not finite either
  sqrt_loss = lambda out, batch: (jnp.sqrt(0 * jnp.sum(out)), {})
  new, _, finite = training.train_step(state, batch, model=model, loss_and_metrics=sqrt_loss,
                                       tx=tx)
  assert not bool(finite)
  assert int(new.step) == 3 and float(new.params["w"]) == 2.0


class _At:
  """At ``step``, requests a stop (``how="hook"``) or sends this process SIGTERM."""

  def __init__(self, step, how):
    self.step, self.how = step, how

  def after_step(self, step, state, ctx):
    if step == self.step:
      if self.how == "hook":
        ctx.request_stop("early_stopping")
      else:   # only with the loop's handler in place (else SIGTERM would end pytest)
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN, None)
        os.kill(os.getpid(), signal.SIGTERM)


def _records(workdir):
  return utils.read_jsonl(os.path.join(workdir, "metrics.jsonl"))


def test_stops_between_records_and_at_the_last_step(tmp_path):
  """A hook's stop at step 7 (log_every=5) writes the training record of steps 6-7; a
  hook's stop at the last step stops nothing (the run ends by ``num_steps``, with 0 s to go
  in its last record); a signal during the last step is a preemption (no final
  evaluation)."""
  early = training.train_and_evaluate(_config(num_steps=12), str(tmp_path / "a"),
                                      toy_task.TASK, hooks=[_At(7, "hook")])
  assert early["step"] == 7 and early["stop_reason"] == "early_stopping"
  train = [r for r in _records(tmp_path / "a") if "train_loss" in r]
  assert [r["step"] for r in train] == [5, 7]
  last = training.train_and_evaluate(_config(num_steps=6), str(tmp_path / "b"),
                                     toy_task.TASK, hooks=[_At(6, "hook")])
  assert last["step"] == 6 and last["stop_reason"] == "num_steps"
  assert [r["eta_sec"] for r in _records(tmp_path / "b") if "eta_sec" in r][-1] == 0
  signalled = training.train_and_evaluate(_config(num_steps=6, eval_every=100),
                                          str(tmp_path / "c"), toy_task.TASK,
                                          hooks=[_At(6, "signal")])
  assert signalled["step"] == 6 and signalled["stop_reason"] == "preempted"
  assert not any("eval_loss" in r for r in _records(tmp_path / "c"))


def test_a_finished_run_is_not_trained_or_evaluated_again(tmp_path):
  first = training.train_and_evaluate(_config(num_steps=4), str(tmp_path), toy_task.TASK)
  before = open(tmp_path / "metrics.jsonl").read()
  again = training.train_and_evaluate(_config(num_steps=4), str(tmp_path), toy_task.TASK)
  assert again["stop_reason"] == "finished" and again["step"] == 4
  assert again["eval_loss"] == first["eval_loss"]
  assert open(tmp_path / "metrics.jsonl").read() == before


def test_each_training_record_covers_the_steps_since_the_previous_one(tmp_path):
  """log_every=5: the records at steps 5 and 10 average steps 1-5 and 6-10, so their mean
  is the record at step 10 of the same run with log_every=10 (equal rows per step)."""
  training.train_and_evaluate(_config(num_steps=10), str(tmp_path / "a"), toy_task.TASK)
  training.train_and_evaluate(_config(num_steps=10, log_every=10), str(tmp_path / "b"),
                              toy_task.TASK)
  a = {r["step"]: r["train_loss"] for r in _records(tmp_path / "a") if "train_loss" in r}
  b = {r["step"]: r["train_loss"] for r in _records(tmp_path / "b") if "train_loss" in r}
  assert sorted(a) == [5, 10] and sorted(b) == [10]
  assert abs(a[5] - a[10]) > 1e-3 * abs(b[10])   # the loss falls: the windows differ
  np.testing.assert_allclose((a[5] + a[10]) / 2, b[10], rtol=1e-5)

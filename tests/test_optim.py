"""rumjax.training.optim: optimizers by name, schedules, the config checks, the uRNN hook."""

import inspect
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from rumjax import cells
from rumjax.training import optim


def _config(**overrides):
  config = ml_collections.ConfigDict(dict(
      optimizer="rmsprop", learning_rate=0.01, rmsprop_decay=0.9, adagrad_init=0.1,
      grad_clip=None, lr_boundaries=[], lr_values=[]))
  config.update(overrides)
  return config


def _params():
  rng = np.random.default_rng(0)
  w, _ = np.linalg.qr(rng.normal(size=(6, 6)))
  return {"rnn": {"cell": {"recurrent_orthogonal": jnp.asarray(w, jnp.float32),
                           "kernel_x": jnp.asarray(rng.normal(size=(3, 6)), jnp.float32),
                           "bias": jnp.zeros(6, jnp.float32)}},
          "dense": {"kernel": jnp.asarray(rng.normal(size=(6, 2)), jnp.float32)}}


def _grads(seed):
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape), p.dtype), _params())


def _run(tx, params, steps, grads=None):
  """``steps`` updates of ``tx`` on the gradients ``_grads(1), _grads(2), ...`` (or ``grads``)."""
  state = tx.init(params)
  for s in range(steps):
    updates, state = tx.update(grads or _grads(s + 1), state, params)
    params = optax.apply_updates(params, updates)
  return params


# ------------------------------------------------------------------------ optimizers


@pytest.mark.parametrize("name", optim.optimizer_names())
def test_every_optimizer_builds_and_steps(name):
  params = {"w": jnp.ones(3)}
  tx = optim.make_optimizer(_config(optimizer=name))
  new = _run(tx, params, 3, grads={"w": jnp.asarray([1.0, -2.0, 0.5])})
  assert np.all(np.isfinite(new["w"])) and np.all(new["w"] != params["w"])


def test_builtin_optimizers_are_the_papers_settings():
  assert set(optim.OPTIMIZERS) == {"rmsprop", "adam", "adagrad", "sgd"}
  assert set(optim.OPTIMIZERS) <= set(optim.optimizer_names())
  params, grads = {"w": jnp.ones(4)}, {"w": jnp.asarray([1.0, -2.0, 0.5, 3.0])}
  expected = {
      # TF1 RMSProp: ms_0 = 1, ms_1 = 0.9 + 0.1 g^2, step lr g / sqrt(ms_1 + 1e-10).
      "rmsprop": -0.01 * grads["w"] / np.sqrt(0.9 + 0.1 * grads["w"] ** 2 + 1e-10),
      "adam": -0.01 * np.sign(grads["w"]),  # first Adam step: lr * g / |g|
      # Adagrad: acc_1 = 0.1 + g^2.
      "adagrad": -0.01 * grads["w"] / np.sqrt(0.1 + grads["w"] ** 2),
      "sgd": -0.01 * grads["w"],
  }
  for name, want in expected.items():
    tx = optim.make_optimizer(_config(optimizer=name))
    updates, _ = tx.update(grads, tx.init(params), params)
    np.testing.assert_allclose(updates["w"], want, rtol=1e-4, err_msg=name)


def test_grad_clip_by_global_norm_first():
  tx = optim.make_optimizer(_config(optimizer="sgd", learning_rate=1.0, grad_clip=1.0))
  params = {"a": jnp.ones(4), "b": jnp.ones(2)}
  grads = {"a": jnp.full(4, 100.0), "b": jnp.full(2, -100.0)}
  updates, _ = tx.update(grads, tx.init(params), params)
  assert float(optax.tree.norm(updates)) == pytest.approx(1.0, rel=1e-5)
  for off in (None, 0.0):
    tx = optim.make_optimizer(_config(optimizer="sgd", learning_rate=1.0, grad_clip=off))
    updates, _ = tx.update(grads, tx.init(params), params)
    np.testing.assert_allclose(updates["a"], -100.0)


def test_a_registered_optimizer_is_found_by_name(monkeypatch):
  monkeypatch.setitem(optim._OPTIMIZERS._entries, "signsgd",
                      lambda config, schedule: optax.chain(optax.scale_by_sign(),
                                                           optax.scale_by_learning_rate(
                                                               schedule)))
  config = _config(optimizer="signsgd", learning_rate=0.5)
  optim.validate_config(config)
  tx = optim.make_optimizer(config)
  params = {"w": jnp.ones(2)}
  updates, _ = tx.update({"w": jnp.asarray([3.0, -0.1])}, tx.init(params), params)
  np.testing.assert_allclose(updates["w"], [-0.5, 0.5])


# ------------------------------------------------------------------------- schedules


def test_piecewise_schedule_at_the_boundaries():
  config = _config(learning_rate=0.1, lr_boundaries=[3, 6], lr_values=[0.1, 0.01, 0.001])
  schedule = optim.make_schedule(config)
  steps = [0, 2, 3, 5, 6, 7, 10_000]
  assert [float(schedule(s)) for s in steps] == pytest.approx(
      [0.1, 0.1, 0.01, 0.01, 0.001, 0.001, 0.001])
  assert float(optim.make_schedule(_config(learning_rate=0.3))(123)) == pytest.approx(0.3)


def test_warmup_ramps_linearly_then_follows_the_schedule():
  config = _config(learning_rate=0.1, lr_boundaries=[6], lr_values=[0.1, 0.01],
                   warmup_steps=4)
  schedule = optim.make_schedule(config)
  want = [0.1 * min(1.0, (s + 1) / 4) for s in range(6)] + [0.01, 0.01]
  assert [float(schedule(s)) for s in range(8)] == pytest.approx(want)
  one = optim.make_schedule(_config(learning_rate=0.2, warmup_steps=1))
  assert [float(one(s)) for s in range(3)] == pytest.approx([0.2] * 3)
  with pytest.raises(ValueError, match=r"config\.warmup_steps=-1 must be an integer >= 0"):
    optim.make_schedule(_config(learning_rate=0.1, warmup_steps=-1))


def test_the_schedule_drives_the_steps():
  tx = optim.make_optimizer(_config(optimizer="sgd", learning_rate=1.0, lr_boundaries=[2],
                                    lr_values=[1.0, 0.5]))
  params, grads = {"w": jnp.zeros(1)}, {"w": jnp.ones(1)}
  state, sizes = tx.init(params), []
  for _ in range(4):
    updates, state = tx.update(grads, state, params)
    sizes.append(float(-updates["w"][0]))
  assert sizes == pytest.approx([1.0, 1.0, 0.5, 0.5])


# ---------------------------------------------------------------------------- checks


@pytest.mark.parametrize("field,value,match", [
    ("optimizer", "lamb", r"config\.optimizer='lamb' is unknown; known optimizers are \["),
    ("optimizer", "adamm", r"config\.optimizer='adamm' is unknown; known optimizers are "
                           r"\[.*\]; did you mean 'adam'\?"),
    ("optimizer", None, r"config\.optimizer=None is unknown"),
    ("learning_rate", 0.0, r"config\.learning_rate=0\.0 must be > 0"),
    ("rmsprop_decay", 1.0, r"config\.rmsprop_decay=1\.0 must be in \[0, 1\)"),
    ("adagrad_init", -0.1, r"config\.adagrad_init=-0\.1 must be >= 0"),
    ("grad_clip", -1.0, r"config\.grad_clip=-1\.0 must be a maximum global norm > 0, or "
                        r"None or 0"),
    ("lr_boundaries", [6, 3], r"config\.lr_boundaries=\[6, 3\] must be increasing positive"),
    ("lr_boundaries", [3, 3], r"config\.lr_boundaries=\[3, 3\] must be increasing positive"),
    ("lr_boundaries", [0], r"config\.lr_boundaries=\[0\] must be increasing positive"),
    ("lr_values", [0.1, -1.0], r"config\.lr_values=\[0\.1, -1\.0\] must be positive"),
    ("lr_values", [0.1, 0.2], r"config\.lr_values=\[0\.1, 0\.2\] must have one more entry "
                              r"than config\.lr_boundaries=\[\]"),
    ("l2", -1e-4, r"config\.l2=-0\.0001 must be >= 0"),
    ("lr_plateau_factor", 1.5, r"config\.lr_plateau_factor=1\.5 must be in \(0, 1\]"),
    ("lr_plateau_factor", 0.0, r"config\.lr_plateau_factor=0\.0 must be in \(0, 1\]"),
    ("lr_plateau_mode", "down", r"config\.lr_plateau_mode='down' must be 'min' or 'max'"),
    ("lr_plateau_patience", 0, r"config\.lr_plateau_patience=0 must be >= 1"),
    ("lr_plateau_min_delta", -1.0, r"config\.lr_plateau_min_delta=-1\.0 must be >= 0"),
])
def test_validate_config_names_the_field(field, value, match):
  config = _config()
  config[field] = value
  with pytest.raises(ValueError, match=match) as err:
    optim.validate_config(config)
  assert "\n" not in str(err.value)
  with pytest.raises(ValueError, match=match):  # make_optimizer checks the same way
    optim.make_optimizer(config)


def test_validate_config_accepts_the_defaults_and_missing_optional_fields():
  optim.validate_config(_config())
  optim.validate_config(_config(grad_clip=0.0, lr_boundaries=[10, 20],
                                lr_values=[1e-3, 1e-4, 1e-5]))
  optim.validate_config({"optimizer": "adam", "learning_rate": 1})  # a plain dict
  with pytest.raises(ValueError, match=r"config\.learning_rate='1e-3' must be > 0"):
    optim.validate_config({"optimizer": "adam", "learning_rate": "1e-3"})
  assert float(optim.make_schedule(_config(lr_values=[0.2]))(5)) == pytest.approx(0.2)
  with pytest.raises(ValueError, match="one more entry"):
    optim.make_schedule(_config(lr_boundaries=[3], lr_values=[0.1]))


# --------------------------------------------------------- decay on a plateau


def _plateau_reference(values, factor, patience, min_delta, mode):
  """The scale after each evaluation, by the rule written out in a plain loop."""
  best, bad, scale, out = None, 0, 1.0, []
  for v in values:
    if best is None or (v < best - min_delta if mode == "min" else v > best + min_delta):
      best, bad = v, 0
    else:
      bad += 1
      if bad == patience:
        scale, bad = scale * factor, 0
    out.append(scale)
  return out


@pytest.mark.parametrize("patience,min_delta,mode", [(1, 0.0, "min"), (2, 0.0, "min"),
                                                     (1, 0.3, "min"), (2, 0.1, "max")])
def test_plateau_step_follows_the_rule(patience, min_delta, mode):
  values = [5.0, 4.0, 4.0, 4.5, 3.0, 2.9, 3.5, 3.5, 1.0, 1.0, 1.0]
  state = optim.scale_on_plateau(mode).init(None)
  scales = []
  for v in values:
    state = optim.plateau_step(state, v, factor=0.85, patience=patience,
                               min_delta=min_delta, mode=mode)
    scales.append(float(state.scale))
  want = _plateau_reference(values, 0.85, patience, min_delta, mode)
  np.testing.assert_allclose(scales, want, rtol=1e-6)
  assert min(want) < 1.0  # the sequence exercises at least one decay


def test_the_plateau_scale_multiplies_the_sgd_step():
  config = _config(optimizer="sgd", learning_rate=0.1, lr_plateau_factor=0.5,
                   lr_plateau_metric="eval_ppl")
  tx = optim.make_optimizer(config)
  params = {"w": jnp.ones(3)}
  grads = {"w": jnp.asarray([1.0, -2.0, 3.0])}
  opt_state = tx.init(params)
  assert optim.plateau_scale(opt_state) == 1.0
  updates, _ = tx.update(grads, opt_state, params)
  np.testing.assert_allclose(updates["w"], -0.1 * grads["w"], rtol=1e-6)
  opt_state = optim.report_plateau(opt_state, 100.0, config)  # first value: the best
  opt_state = optim.report_plateau(opt_state, 120.0, config)  # worse: x0.5
  assert optim.plateau_scale(opt_state) == 0.5
  updates, _ = tx.update(grads, opt_state, params)
  np.testing.assert_allclose(updates["w"], -0.05 * grads["w"], rtol=1e-6)
  # Off by default: no plateau state in the optimizer.
  plain = optim.make_optimizer(_config(optimizer="sgd", learning_rate=0.1)).init(params)
  assert optim.plateau_scale(plain) == 1.0
  assert optim.report_plateau(plain, 1.0, config) is not None
  with pytest.raises(ValueError, match=r"config\.lr_plateau_metric='' must name"):
    optim.validate_config(_config(lr_plateau_factor=0.5, lr_plateau_metric=""))


def test_l2_adds_its_term_to_the_gradient_before_clipping():
  params = {"w": jnp.asarray([1.0, -2.0, 0.5])}
  grads = {"w": jnp.asarray([0.3, 0.1, -0.2])}
  tx = optim.make_optimizer(_config(optimizer="sgd", learning_rate=0.1, l2=0.01))
  updates, _ = tx.update(grads, tx.init(params), params)
  np.testing.assert_allclose(updates["w"], -0.1 * (grads["w"] + 0.01 * params["w"]),
                             rtol=1e-6)
  # With clipping the L2 term counts in the clipped norm.
  tx = optim.make_optimizer(_config(optimizer="sgd", learning_rate=1.0, l2=1.0,
                                    grad_clip=1e-3))
  updates, _ = tx.update(grads, tx.init(params), params)
  total = grads["w"] + params["w"]
  np.testing.assert_allclose(updates["w"], -1e-3 * total / jnp.linalg.norm(total),
                             rtol=1e-5)


# ------------------------------------------------------------------- the uRNN's hook


def test_urnn_hook_keeps_the_recurrent_matrix_orthogonal():
  config = _config(optimizer="rmsprop", learning_rate=0.05)
  params = _params()
  trained = _run(optim.make_optimizer(config), params, 20)
  w0 = np.asarray(params["rnn"]["cell"]["recurrent_orthogonal"], np.float64)
  w = np.asarray(trained["rnn"]["cell"]["recurrent_orthogonal"], np.float64)
  assert np.abs(w.T @ w - np.eye(6)).max() < 1e-5
  assert np.abs(w - w0).max() > 1e-2  # it moved
  # The other parameters took exactly the base optimizer's steps.
  others = lambda p: {"kernel_x": p["rnn"]["cell"]["kernel_x"],
                      "bias": p["rnn"]["cell"]["bias"], "dense": p["dense"]}
  base = optim.rmsprop(config, optim.make_schedule(config))
  state, expected = base.init(others(params)), others(params)
  for s in range(20):
    updates, state = base.update(others(_grads(s + 1)), state, expected)
    expected = optax.apply_updates(expected, updates)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7),
               others(trained), expected)


def test_urnn_hook_takes_the_cayley_step_of_wisdom_et_al():
  """One step: W_new = (I + lr/2 A)^{-1} (I - lr/2 A) W, A = G W^T - W G^T (eq. (10))."""
  lr = 0.05
  params = _params()
  trained = _run(optim.make_optimizer(_config(optimizer="adam", learning_rate=lr)), params, 1)
  w = np.asarray(params["rnn"]["cell"]["recurrent_orthogonal"], np.float64)
  g = np.asarray(_grads(1)["rnn"]["cell"]["recurrent_orthogonal"], np.float64)
  a = g @ w.T - w @ g.T
  eye = np.eye(6)
  ref = np.linalg.solve(eye + lr / 2 * a, (eye - lr / 2 * a) @ w)
  np.testing.assert_allclose(trained["rnn"]["cell"]["recurrent_orthogonal"], ref, atol=1e-5)


def test_without_urnn_parameters_the_hook_is_a_no_op():
  params = {"kernel": jnp.ones((3, 3)), "bias": jnp.zeros(3)}
  grads = {"kernel": jnp.full((3, 3), 2.0), "bias": jnp.full(3, -1.0)}
  config = _config(optimizer="adagrad")
  tx, base = optim.make_optimizer(config), optim.adagrad(config, optim.make_schedule(config))
  updates, _ = tx.update(grads, tx.init(params), params)
  want, _ = base.update(grads, base.init(params), params)
  jax.tree.map(np.testing.assert_array_equal, updates, want)


def test_optim_does_not_import_the_urnn_module():
  source = inspect.getsource(optim)
  assert "urnn" not in "".join(line for line in source.splitlines(True)
                               if line.lstrip().startswith(("import ", "from ")))
  assert "make_urnn_optimizer" not in source
  # Importing the optimizer module alone registers the hook (it imports rumjax.cells).
  code = ("from rumjax.training import optim; from rumjax.cells import urnn; "
          "import sys; assert urnn.make_urnn_optimizer in "
          "sys.modules['rumjax.cells'].optimizer_wrappers()")
  subprocess.run([sys.executable, "-c", code], check=True)
  assert cells.make_urnn_optimizer in cells.optimizer_wrappers()


def test_grad_clip_clips_the_gradient_not_the_update():
  tx = optim.make_optimizer(_config(optimizer="sgd", learning_rate=0.5, grad_clip=1.0))
  params = {"w": jnp.ones(4)}
  updates, _ = tx.update({"w": jnp.full(4, 100.0)}, tx.init(params), params)
  assert float(optax.tree.norm(updates)) == pytest.approx(0.5, rel=1e-5)


def test_report_plateau_follows_the_configured_mode():
  config = _config(optimizer="sgd", learning_rate=0.5, lr_plateau_factor=0.5,
                   lr_plateau_metric="eval_accuracy", lr_plateau_mode="max",
                   lr_plateau_patience=1)
  tx = optim.make_optimizer(config)
  opt_state = tx.init({"w": jnp.ones(2)})
  for value in (0.1, 0.2, 0.3):        # rising accuracy: never a plateau
    opt_state = optim.report_plateau(opt_state, value, config)
  assert optim.plateau_scale(opt_state) == 1.0
  opt_state = optim.report_plateau(opt_state, 0.25, config)
  assert optim.plateau_scale(opt_state) == 0.5

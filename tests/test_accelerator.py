"""The accelerator set (issue 44): what must hold at the backend's DEFAULT matmul precision.

Every other test that compares two implementations, or one with float64, runs its matmuls
at ``"highest"`` (true float32 on every backend), so it means the same on a CPU, a GPU and
a TPU. These run at the backend's default (float32 on a CPU, TF32 on an NVIDIA GPU from
Ampere on, one bfloat16 pass on a TPU; DESIGN.md section 3.5), as a user's run does, with
tolerances that say what the reduced precision may and may not do:

* the memory ``R`` stays orthogonal to float32 accuracy (``max |R^T R - 1| <= 1e-5``),
  whatever the gates' precision: the rotation path is at HIGHEST (float32 or bfloat16
  policy);
* the fast backward pass of ``rum_scan`` equals autodiff of the reference scan up to the
  gates' rounding: TF32 keeps 11 significant bits (relative 2^-11 ~ 5e-4 per operand),
  so values and gradients agree to 1e-2 in relative 2-norm (1e-5 on a CPU), and the
  rebuild of ``R_0`` from ``R_T`` over 2,000 steps stays within its CPU drift (1e-4);
* a killed and resumed tiny training run ends bit-equal to an uninterrupted one (on a GPU
  with ``--xla_gpu_deterministic_ops=true``, which ``launch/train.py`` sets;
  :mod:`rumjax.training.determinism`);
* the bfloat16 policy: float32 parameters, logits and memory, finite gradients, outputs
  within bfloat16's rounding (8 significant bits) of the float32 model's.

They are part of the default run (each a few seconds on a CPU) and run alone with
``pytest -m accelerator``. On a GPU, run them with the flag already in the environment
(``XLA_FLAGS=--xla_gpu_deterministic_ops=true python -m pytest -m accelerator``): this
module appends it at import, which is too late if an earlier module started the backend.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rumjax
import tasks
from rumjax import training
from rumjax.benchmarks.orthogonality import orthogonality_error
from rumjax.core import rum_fast
from rumjax.training import determinism

pytestmark = pytest.mark.accelerator

# Before this process's backend initialises, if it has not yet (a no-op on a CPU).
determinism.use_deterministic_gpu_ops()

ORTHOGONAL = 1e-5   # max |R^T R - 1|: float32 accuracy, the rotation path at HIGHEST


@pytest.fixture(autouse=True)
def _backend_default_precision():
  """The backend's default matmul precision, whatever the session set."""
  with jax.default_matmul_precision(None):
    yield


def _problem(seed, b, t, nx, nh, dtype=jnp.float32, perturb=0.3):
  k = jax.random.split(jax.random.key(seed), 5)
  params = rumjax.init_rum_params(k[0], nx, nh, dtype)
  params = {n: v + perturb * jax.random.normal(k[1], v.shape, dtype)
            for n, v in params.items()}
  xs = jax.random.normal(k[2], (b, t, nx), dtype)
  h0 = jax.random.normal(k[3], (b, nh), dtype)
  r0 = jnp.linalg.qr(jax.random.normal(k[4], (b, nh, nh), jnp.float32))[0]
  return params, xs, h0, r0


def _on_cpu() -> bool:
  return jax.default_backend() == "cpu"


def _fast_tolerance() -> float:
  """Relative 2-norm error of fast vs reference: float32 on a CPU, TF32 gates elsewhere."""
  return 1e-5 if _on_cpu() else 1e-2


def _relative(a, b) -> float:
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.linalg.norm(a - b) / (np.linalg.norm(a) + 1e-30))


@pytest.mark.parametrize("dtype,impls", [(jnp.float32, ("fast", "reference")),
                                         (jnp.bfloat16, ("fast",))])
def test_memory_orthogonal_at_default_precision(dtype, impls):
  params, xs, _, _ = _problem(0, 4, 200, 16, 32, dtype, perturb=0.0)
  for impl in impls:
    (r, h), hs = rumjax.rum_scan(params, xs, lam=1, eta=1.0, impl=impl)
    assert r.dtype == jnp.float32 and hs.dtype == dtype
    assert orthogonality_error(r) <= ORTHOGONAL, (impl, orthogonality_error(r))


@pytest.mark.parametrize("lam", [0, 1])
def test_fast_matches_reference_at_default_precision(lam):
  params, xs, h0, r0 = _problem(1, 3, 10, 4, 8)
  carry = (r0, h0) if lam else h0
  weights = jax.random.normal(jax.random.key(2), (3, 10, 8))

  def loss(p, x, c, impl):
    final, hs = rumjax.rum_scan(p, x, lam=lam, eta=1.0, activation="tanh", h0=c,
                                impl=impl)
    return jnp.sum(weights * hs) + sum(jnp.sum(jnp.cos(f)) for f in jax.tree.leaves(final))

  grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)), static_argnums=3)
  ref, fast = grad(params, xs, carry, "reference"), grad(params, xs, carry, "fast")
  for a, b in zip(jax.tree.leaves(ref), jax.tree.leaves(fast)):
    assert _relative(a, b) <= _fast_tolerance(), _relative(a, b)


def test_rebuilt_memory_stays_within_its_cpu_drift():
  # The fast backward rebuilds R_{t-1} from R_t; with the gates in TF32 it must undo the
  # very rotation the forward pass applied (issue 44).
  params, xs, h0, r0 = _problem(3, 2, 2000, 4, 16)
  r0_rec = rum_fast.reconstruct_initial_memory(params, jnp.moveaxis(xs, 1, 0), (r0, h0),
                                               eta=1.0)
  assert float(jnp.max(jnp.abs(r0_rec - r0))) < 1e-4


def _recall(num_steps, dtype="float32"):
  recall = tasks.get_task("recall")
  c = recall.get_config()
  c.length, c.batch_size = 8, 8
  c.num_train, c.num_dev, c.num_test = 48, 16, 16
  c.update(num_steps=num_steps, eval_every=num_steps, checkpoint_every=2, log_every=2)
  c.model.update(hidden_size=8, dtype=dtype)
  recall.validate_config(c)
  return recall, c


def test_killed_and_resumed_run_is_bit_equal(tmp_path):
  task, full_config = _recall(4)
  full = training.train_and_evaluate(full_config, str(tmp_path / "full"), task)
  part = str(tmp_path / "part")
  training.train_and_evaluate(_recall(2)[1], part, task)
  resumed = training.train_and_evaluate(full_config, part, task)
  assert resumed["step"] == full["step"] == 4
  exact = _on_cpu() or determinism.FLAG in os.environ.get("XLA_FLAGS", "").split()
  assert exact, ("a GPU run resumes bit-equal only with XLA_FLAGS="
                 f"{determinism.FLAG} set before JAX starts (launch/train.py does)")
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
               full["params"], resumed["params"])
  assert resumed["eval_loss"] == full["eval_loss"]


def test_bfloat16_policy_at_default_precision():
  task, c32 = _recall(0)
  _, c16 = _recall(0, "bfloat16")
  batch = next(task.train_data(c32))
  m32, m16 = task.build_model(c32), task.build_model(c16)
  params = m32.init(jax.random.key(0), batch)["params"]
  assert {p.dtype for p in jax.tree.leaves(params)} == {np.dtype(np.float32)}

  def loss(model, p):
    return task.loss_and_metrics(model.apply({"params": p}, batch), batch)[0]

  logits16 = jax.jit(m16.apply)({"params": params}, batch)
  logits32 = jax.jit(m32.apply)({"params": params}, batch)
  assert logits16.dtype == logits32.dtype == jnp.float32
  # bfloat16 keeps 8 significant bits (2^-8 ~ 4e-3 per rounding) over 18 steps.
  assert _relative(logits32, logits16) <= 0.1, _relative(logits32, logits16)
  value, grads = jax.jit(jax.value_and_grad(lambda p: loss(m16, p)))(params)
  assert np.isfinite(float(value))
  assert all(g.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(g)))
             for g in jax.tree.leaves(grads))


# ------------------------------------------------ the deterministic-ops flag (pure parts)


def test_with_flag_appends_and_keeps_a_users_value():
  assert determinism.with_flag(None) == determinism.FLAG
  assert determinism.with_flag("--a=1") == "--a=1 " + determinism.FLAG
  kept = "--xla_gpu_deterministic_ops=false --a=1"
  assert determinism.with_flag(kept) == kept


def test_use_deterministic_gpu_ops_leaves_a_cpu_run_alone():
  env = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--a=1"}
  assert not determinism.use_deterministic_gpu_ops(env)
  assert env["XLA_FLAGS"] == "--a=1"
  env = {"XLA_FLAGS": "--a=1 " + determinism.FLAG}
  assert determinism.use_deterministic_gpu_ops(env)
  assert env["XLA_FLAGS"] == "--a=1 " + determinism.FLAG


def test_gpu_may_run_reads_jax_platforms_and_the_device_files(tmp_path, monkeypatch):
  device = tmp_path / "nvidiactl"
  device.write_text("")
  monkeypatch.setattr(determinism, "GPU_DEVICE_FILES", (str(device),))
  assert determinism.gpu_may_run({})
  assert determinism.gpu_may_run({"JAX_PLATFORMS": "cuda,cpu"})
  assert not determinism.gpu_may_run({"JAX_PLATFORMS": "cpu"})
  monkeypatch.setattr(determinism, "GPU_DEVICE_FILES", (str(tmp_path / "none"),))
  monkeypatch.setattr(determinism, "GPU_PLUGIN_PREFIXES", ("no-such-distribution",))
  assert not determinism.gpu_may_run({})


def test_a_users_false_flag_is_not_reported_as_deterministic():
  env = {"XLA_FLAGS": "--xla_gpu_deterministic_ops=false --a=1"}
  assert not determinism.use_deterministic_gpu_ops(env)
  assert env["XLA_FLAGS"] == "--xla_gpu_deterministic_ops=false --a=1"

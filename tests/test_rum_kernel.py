"""The fused RUM kernel (rumjax/core/rum_kernel.py) against the XLA fast path.

On a CPU the kernel runs in Pallas's interpret mode (the same kernel body, lowered as a JAX
loop); its CUDA lowering (Triton) is checked with ``jax.export`` for the platform "cuda".

Precision: the comparisons run under ``jax.default_matmul_precision("highest")``, so the
XLA path's gate matmuls are float32 on every backend (the kernel's own products are exact
float32 always); float32 agreement is then rounding only (1e-5). bfloat16 compares two
computations that round h_t to bfloat16 at different places: 5e-2 of the largest entry.
"""

import functools
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import tasks
from rumjax import sharding
from rumjax.benchmarks import kernel_resources
from rumjax.core import rum, rum_fast, rum_kernel
from rumjax.core.rum import init_rum_params, rum_scan

F32_TOL = 1e-5
BF16_TOL = 5e-2
TRITON = kernel_resources.TRITON_CALL


def _problem(lam, nh, nx=3, batch=2, steps=4, dtype=jnp.float32, seed=0):
  """Parameters off their initialisation (biases, gates away from 1), inputs, a carry."""
  k = jax.random.split(jax.random.key(seed), 5)
  params = init_rum_params(k[0], nx, nh)
  params = jax.tree.map(lambda p, kk: p + 0.2 * jax.random.normal(kk, p.shape),
                        params, dict(zip(sorted(params), jax.random.split(k[1], 3))))
  xs = jax.random.normal(k[2], (steps, batch, nx))
  h0 = 0.3 * jax.random.normal(k[3], (batch, nh))
  r0 = jax.vmap(lambda kk: jnp.linalg.qr(jax.random.normal(kk, (nh, nh)))[0])(
      jax.random.split(k[4], batch))
  cast = lambda t: jax.tree.map(lambda a: a.astype(dtype), t)
  carry = (r0, cast(h0)) if lam else cast(h0)
  return cast(params), cast(xs), carry


def _loss(scan, lam, params, xs, carry):
  """A loss that reads every output with distinct weights (hs, h_T and R_T); the outputs
  are its aux."""
  outputs = scan(params, xs, carry)
  final, hs = outputs
  hs = hs.astype(jnp.float32)
  weights = jnp.arange(1, hs.shape[-1] + 1, dtype=jnp.float32)
  loss = jnp.sum(hs**2 * weights)
  if lam:
    r, h = final
    loss += jnp.sum(r * jnp.arange(r.shape[-1])) + jnp.sum(h.astype(jnp.float32)**3)
  else:
    loss += jnp.sum(final.astype(jnp.float32)**3)
  return loss, outputs


def _value_and_grads(impl, lam, kw, params, xs, carry):
  """``impl``: "fast", or "kernel" with kernel_scan's options after "+" (e.g.
  "kernel+rows4+prefetch", "kernel+block16")."""
  fn = rum_kernel.kernel_scan if impl.startswith("kernel") else rum_fast.fast_scan
  for option in impl.split("+")[1:]:
    name = option.rstrip("0123456789")
    value = int(option[len(name):]) if option != name else True
    fn = functools.partial(fn, **{name: value})
  scan = functools.partial(fn, lam=lam, **kw)
  loss = functools.partial(_loss, scan, lam)
  with jax.default_matmul_precision("highest"):
    (value, outputs), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2),
                                                         has_aux=True))(params, xs, carry)
  return value, grads, outputs


def _max_rel(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-30)


def _compare(lam, kw, problem, tol, impl="kernel"):
  """Every output (hs, h_T, R_T) and every gradient, entry by entry relative to the
  largest entry. (Not the scalar loss: a sum over ~N^2 terms with cancellation, whose
  float32 rounding depends on the summation order.)"""
  ref = _value_and_grads("fast", lam, kw, *problem)[1:]
  got = _value_and_grads(impl, lam, kw, *problem)[1:]
  for name, a, b in zip(("grads", "outputs"), ref, got):
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(leaves_a) == len(leaves_b)
    for la, lb in zip(leaves_a, leaves_b):
      assert la.shape == lb.shape and la.dtype == lb.dtype, (name, la.shape, lb.shape)
      assert _max_rel(la, lb) <= tol, (name, la.shape, _max_rel(la, lb))


# (lam, nh, steps, eta, activation, update_gate): both lam, eta, every activation kind
# (sigmoid: f(0) != 0 on the padding), gate on and off, padding 5 -> 16 and 100 -> 128,
# no padding (16), T = 1.
CASES = [
    (0, 5, 4, None, "relu", True),
    (1, 5, 4, None, "relu", True),
    (1, 5, 3, 1.0, "tanh", False),
    (0, 5, 1, 2.0, "sigmoid", True),
    (1, 16, 1, None, "softsign", True),
    (1, 100, 3, 1.0, "relu", True),
]


@pytest.mark.parametrize("lam,nh,steps,eta,activation,gate", CASES)
def test_kernel_matches_fast_path_float32(lam, nh, steps, eta, activation, gate):
  kw = dict(eta=eta, activation=rum.get_activation(activation), update_gate=gate)
  _compare(lam, kw, _problem(lam, nh, steps=steps), F32_TOL)


@pytest.mark.parametrize("lam", [0, 1])
def test_kernel_matches_fast_path_bfloat16_policy(lam):
  """bfloat16 inputs and parameters: hs and h_T bfloat16, R_T float32, gradients in the
  parameters' dtype, values within bfloat16 rounding of the XLA path's."""
  kw = dict(eta=1.0, activation=jax.nn.relu, update_gate=True)
  problem = _problem(lam, 5, dtype=jnp.bfloat16)
  _compare(lam, kw, problem, BF16_TOL)
  (final, hs) = jax.jit(functools.partial(rum_kernel.kernel_scan, lam=lam, **kw))(*problem)
  assert hs.dtype == jnp.bfloat16
  if lam:
    assert final[0].dtype == jnp.float32 and final[1].dtype == jnp.bfloat16


# lam=0 with a block of 16 examples per program (h W as one matrix product): batch 5 and 20
# (padded to 16 and 32 examples), Nh 5 and 100, eta, gate off, sigmoid.
@pytest.mark.slow    # opt-in options: their interpret-mode equality runs with -m slow
@pytest.mark.parametrize("nh,batch,eta,activation,gate", [
    (5, 5, None, "relu", True),
    (100, 20, 1.0, "sigmoid", False),
])
def test_kernel_with_blocks_of_examples_matches_fast_path(nh, batch, eta, activation, gate):
  kw = dict(eta=eta, activation=rum.get_activation(activation), update_gate=gate)
  _compare(0, kw, _problem(0, nh, batch=batch, steps=3), F32_TOL, impl="kernel+block16")


@pytest.mark.slow
def test_kernel_with_blocks_of_examples_bfloat16_policy():
  kw = dict(eta=1.0, activation=jax.nn.relu, update_gate=True)
  _compare(0, kw, _problem(0, 5, batch=3, dtype=jnp.bfloat16), BF16_TOL,
           impl="kernel+block16")


# save_plane: the backward kernel reads the forward's planes (both lam, padding, eta).
@pytest.mark.slow
@pytest.mark.parametrize("lam,nh,eta", [(1, 5, 1.0), (0, 100, None)])
def test_kernel_reading_the_saved_planes_matches_fast_path(lam, nh, eta):
  kw = dict(eta=eta, activation=jax.nn.relu, update_gate=True)
  _compare(lam, kw, _problem(lam, nh, steps=3), F32_TOL, impl="kernel+save_plane")


# rows: R, Q and W streamed through memory by blocks of rows (Nh 5 -> 16 in 4 blocks of 4,
# Nh 100 -> 128 in 8 of 16; one block of the whole matrix; both lam, eta, sigmoid, no gate).
@pytest.mark.parametrize("lam,nh,rows,eta,activation,gate", [
    (1, 5, 4, None, "relu", True),
    pytest.param(0, 5, 4, 1.0, "sigmoid", True, marks=pytest.mark.slow),
    pytest.param(1, 100, 16, 1.0, "tanh", False, marks=pytest.mark.slow),
    pytest.param(1, 5, 16, 2.0, "relu", True, marks=pytest.mark.slow),
])
def test_kernel_streaming_rows_matches_fast_path(lam, nh, rows, eta, activation, gate):
  kw = dict(eta=eta, activation=rum.get_activation(activation), update_gate=gate)
  _compare(lam, kw, _problem(lam, nh, steps=3), F32_TOL, impl=f"kernel+rows{rows}")


# transposed: W^T in the forward kernel, R^T in the backward (alone and with rows).
@pytest.mark.slow    # opt-in options (slower where measured): -m slow
@pytest.mark.parametrize("lam,nh,eta,impl", [
    (1, 5, 1.0, "kernel+transposed"),
    (0, 100, None, "kernel+transposed"),
    (1, 100, None, "kernel+transposed+rows32"),
])
def test_kernel_transposed_matches_fast_path(lam, nh, eta, impl):
  kw = dict(eta=eta, activation=jax.nn.relu, update_gate=True)
  _compare(lam, kw, _problem(lam, nh, steps=3), F32_TOL, impl=impl)


# prefetch: each step's loads issued a step early (T = 1 and 3; with rows, transposed,
# saved planes). lam=0 prefetches by default (every lam=0 test above); here lam=1 with it
# and lam=0 without.
@pytest.mark.slow
@pytest.mark.parametrize("lam,nh,steps,impl", [
    (1, 5, 3, "kernel+prefetch"),
    (0, 5, 1, "kernel+prefetch0"),
    (1, 100, 3, "kernel+prefetch+transposed"),
    pytest.param(1, 5, 3, "kernel+prefetch+rows4", marks=pytest.mark.slow),
    pytest.param(1, 5, 3, "kernel+prefetch+save_plane", marks=pytest.mark.slow),
])
def test_kernel_prefetching_matches_fast_path(lam, nh, steps, impl):
  kw = dict(eta=1.0, activation=jax.nn.relu, update_gate=True)
  _compare(lam, kw, _problem(lam, nh, steps=steps), F32_TOL, impl=impl)


# w_rows: the backward kernel reads W_hh by blocks of rows (R, Q in registers).
@pytest.mark.parametrize("lam,nh,impl", [
    pytest.param(1, 5, "kernel+w_rows4", marks=pytest.mark.slow),     # opt-in options
    pytest.param(0, 5, "kernel+rows4+w_columns", marks=pytest.mark.slow),
    pytest.param(0, 100, "kernel+w_rows64", marks=pytest.mark.slow),
    pytest.param(1, 100, "kernel+rows32+w_columns", marks=pytest.mark.slow),
])
def test_kernel_streaming_the_weights_matches_fast_path(lam, nh, impl):
  kw = dict(eta=1.0, activation=jax.nn.relu, update_gate=True)
  _compare(lam, kw, _problem(lam, nh, steps=3), F32_TOL, impl=impl)


# q_rows: lam=1's backward streams Q (dL/dR) by blocks of rows and keeps R in registers.
@pytest.mark.slow    # an opt-in option (tuning), as the other options' equality tests
@pytest.mark.parametrize("nh,steps,impl", [
    (5, 3, "kernel+q_rows4"),                                # two blocks of Np 8
    (5, 3, "kernel+q_rows4+prefetch+transposed"),
    (100, 3, "kernel+q_rows32+w_rows64"),
    (5, 1, "kernel+q_rows16"),                               # one block, T 1
])
def test_kernel_streaming_q_matches_fast_path(nh, steps, impl):
  kw = dict(eta=1.0, activation=jax.nn.relu, update_gate=True)
  _compare(1, kw, _problem(1, nh, steps=steps), F32_TOL, impl=impl)


# The forward pass alone (no gradient: jit of the scan, not of its VJP) runs the forward
# kernel without what the backward reads: the same outputs as the fast path's.
@pytest.mark.parametrize("lam,nh,steps,options", [
    (0, 5, 3, {}),
    (1, 5, 3, {}),
    (1, 100, 2, dict(save_plane=True)),                      # the planes not written either
    pytest.param(1, 5, 3, dict(rows=4), marks=pytest.mark.slow),    # R streamed
    pytest.param(0, 5, 1, dict(rows=4, prefetch=False), marks=pytest.mark.slow),
])
def test_kernel_forward_alone_matches_fast_path(lam, nh, steps, options):
  params, xs, carry = _problem(lam, nh, steps=steps)
  kw = dict(lam=lam, eta=1.0, activation=jax.nn.relu, update_gate=True)
  with jax.default_matmul_precision("highest"):
    ref = jax.jit(functools.partial(rum_fast.fast_scan, **kw))(params, xs, carry)
    got = jax.jit(functools.partial(rum_kernel.kernel_scan, **kw, **options))(
        params, xs, carry)
  for a, b in zip(jax.tree.leaves(ref), jax.tree.leaves(got)):
    assert a.shape == b.shape and a.dtype == b.dtype
    assert _max_rel(a, b) <= F32_TOL


@pytest.mark.parametrize("lam", [0, 1])
def test_kernel_forward_alone_writes_only_the_states(lam):
  """Lowered for CUDA at copying, the forward pass alone is one Triton kernel whose
  outputs are h_t (T B Np numbers) and the final state, not tau, u' and R_{t-1} [u, q,
  Rot h] (2 or 5 more arrays of T B Np floats, a memory of O(T) for nothing at inference)."""
  batch, steps, nx, nh = 128, 520, 10, 100
  params = init_rum_params(jax.random.key(0), nx, nh)
  xs = jnp.zeros((batch, steps, nx), jnp.float32)
  module = kernel_resources.export_for_cuda(
      jax.jit(lambda p, x: rum_scan(p, x, lam=lam, impl="kernel")[1]), params,
      xs).mlir_module()
  calls = [line for line in module.splitlines() if TRITON + "(" in line]
  assert len(calls) == 1
  results = calls[0].rsplit("->", 1)[1]
  assert results.count(f"tensor<{steps}x{batch}x128x") == 1     # h_t only


@pytest.mark.parametrize("lam,options", [(0, dict(q_rows=4)), (1, dict(q_rows=4, rows=4)),
                                         (1, dict(q_rows=6))])
def test_kernel_refuses_q_rows_it_cannot_stream(lam, options):
  params, xs, carry = _problem(lam, 5)
  with pytest.raises(ValueError, match="q_rows="):
    rum_kernel.kernel_scan(params, xs, carry, lam=lam, eta=None, activation=jax.nn.relu,
                           update_gate=True, **options)


@pytest.mark.slow
def test_kernel_streaming_rows_bfloat16_policy():
  kw = dict(eta=1.0, activation=jax.nn.relu, update_gate=True)
  _compare(1, kw, _problem(1, 5, dtype=jnp.bfloat16), BF16_TOL, impl="kernel+rows4")


@pytest.mark.parametrize("name,rows,block", [("rows", 3, 1), ("rows", 0, 1),
                                             ("rows", 16, 16), ("w_rows", 6, 1)])
def test_kernel_refuses_rows_it_cannot_stream(name, rows, block):
  params, xs, carry = _problem(0, 5)
  with pytest.raises(ValueError, match=f"{name}={rows}"):
    rum_kernel.kernel_scan(params, xs, carry, lam=0, eta=None, activation=jax.nn.relu,
                           update_gate=True, block=block, **{name: rows})


@pytest.mark.parametrize("lam,block", [(1, 16), (0, 8), (0, 24)])
def test_kernel_refuses_blocks_it_cannot_run(lam, block):
  params, xs, carry = _problem(lam, 5)
  with pytest.raises(ValueError, match=f"block={block}"):
    rum_kernel.kernel_scan(params, xs, carry, lam=lam, eta=None, activation=jax.nn.relu,
                           update_gate=True, block=block)


def test_rum_scan_impl_kernel_any_batch_shape_and_major():
  """rum_scan(impl="kernel") flattens batch axes as the fast path does: same values."""
  params, _, _ = _problem(1, 5)
  xs = jax.random.normal(jax.random.key(3), (2, 3, 4, 3))    # (*batch, T, Nx)
  with jax.default_matmul_precision("highest"):
    (r_k, h_k), hs_k = rum_scan(params, xs, lam=1, eta=1.0, impl="kernel")
    (r_f, h_f), hs_f = rum_scan(params, xs, lam=1, eta=1.0, impl="fast")
  assert hs_k.shape == (2, 3, 4, 5) and r_k.shape == (2, 3, 5, 5)
  for a, b in ((hs_k, hs_f), (h_k, h_f), (r_k, r_f)):
    assert _max_rel(b, a) <= F32_TOL


@pytest.mark.parametrize("kwargs,message", [
    (dict(lam=0.5), "lam=0.5"),
    (dict(lam=1, return_cos=True), "return_cos"),
    (dict(lam=jnp.asarray(1.0)), "lam given as an array .*even when it holds 0 or 1"),
])
def test_kernel_refuses_what_it_does_not_run(kwargs, message):
  params, _, _ = _problem(1, 5)
  with pytest.raises(ValueError, match=message):
    rum_scan(params, jnp.ones((2, 3, 3)), impl="kernel", **kwargs)


def test_auto_picks_the_kernel_on_a_gpu_where_it_was_measured_faster():
  """An H100 measured the kernel faster up to Np = 128 for lam=1 (slower at 256), up to
  256 for lam=0 (RESULTS.md)."""
  sel = functools.partial(rum.select_impl, "auto", return_cos=False,
                          dtype=jnp.float32, backend="gpu", devices=1)
  for nh in (50, 100, 128):
    assert sel(lam=1, nh=nh) == "kernel" and sel(lam=0, nh=nh) == "kernel"
  assert sel(lam=1, nh=129) == "fast" and sel(lam=1, nh=256) == "fast"
  assert sel(lam=0, nh=256) == "kernel" and sel(lam=0, nh=257) == "fast"


def test_auto_keeps_the_xla_scan_when_the_batch_may_be_sharded_over_gpus():
  """XLA cannot partition the kernel's custom call: more than one device -> the XLA scan."""
  assert rum.select_impl("auto", lam=1, return_cos=False, nh=100, dtype=jnp.float32,
                         backend="gpu", devices=2) == "fast"


def test_auto_picks_the_kernel_when_the_mesh_in_context_splits_the_batch():
  """The training loop's mesh (jax.set_mesh, axis "data" over every device): the kernel
  runs per shard, so several GPUs keep it when the batch splits evenly."""
  sel = functools.partial(rum.select_impl, "auto", lam=1, return_cos=False, nh=100,
                          dtype=jnp.float32, backend="gpu", devices=2)
  assert sel(shards=2, batch=4) == "kernel" and sel(shards=2, batch=None) == "kernel"
  assert sel(shards=2, batch=5) == "fast"              # does not split evenly
  assert sel(shards=1, batch=4) == "fast"              # no mesh: XLA would gather the batch
  assert rum.select_impl("auto", lam=1, return_cos=False, nh=100, dtype=jnp.float32,
                         backend="gpu", devices=4, shards=2, batch=4) == "fast"


def sharded_kernel_report(lams=(0, 1)):
  """Run with 2 CPU devices (test below): the kernel under the loop's mesh against the
  XLA scan on one device (largest relative difference over values and gradients, both
  lam), and the CUDA lowering of a sharded training step (its Triton calls and the
  per-shard batch in the kernels' operands)."""
  mesh = sharding.make_mesh()
  out = {"devices": jax.device_count()}
  for lam in lams:
    params, xs, carry = _problem(lam, 5, batch=4, steps=3)
    kw = dict(eta=1.0, activation=jax.nn.relu, update_gate=True)
    ref = _value_and_grads("fast", lam, kw, params, xs, carry)[1:]
    with jax.set_mesh(mesh):
      xs = jax.device_put(xs, jax.sharding.NamedSharding(
          mesh, jax.sharding.PartitionSpec(None, sharding.DATA)))
      got = _value_and_grads("kernel", lam, kw, params, xs, carry)[1:]
    out[f"lam{lam}"] = max(_max_rel(a, b) for a, b in zip(jax.tree.leaves(ref),
                                                            jax.tree.leaves(got)))
  # Lowered for two GPUs (an abstract mesh: jax 0.11 lowers Triton only for a GPU it knows).
  gpus = kernel_resources.cuda_mesh(mesh.axis_sizes, mesh.axis_names)
  rows = jax.sharding.NamedSharding(gpus, jax.sharding.PartitionSpec(sharding.DATA))
  xs = jax.ShapeDtypeStruct((8, 6, 3), jnp.float32, sharding=rows)
  params = init_rum_params(jax.random.key(0), 3, 20)
  loss = lambda p, x: jnp.sum(rum_scan(p, x, lam=1, impl="kernel")[1] ** 2)
  module = kernel_resources.export_for_cuda(jax.grad(loss), params, xs,
                                            mesh=gpus).mlir_module()
  out["triton_calls"] = module.count(TRITON + "(")
  out["per_shard_operand"] = "tensor<6x4x32xf32>" in module      # <T, B / 2, Np>
  out["gathers"] = "all_gather" in module or "all-gather" in module
  return out


@pytest.mark.parametrize("lam", [pytest.param(0, marks=pytest.mark.slow), 1])
def test_kernel_splits_the_batch_over_the_mesh_in_context(lam):
  """Two CPU devices, the loop's mesh in context: values and every gradient equal the XLA
  scan's on one device (float32, 1e-5), and lowered for CUDA the two kernels run on each
  device's half of the batch, with no gather."""
  code = ("import json; from tests import test_rum_kernel as t; "
          f"print(json.dumps(t.sharded_kernel_report(lams=({lam},))))")
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
             JAX_PLATFORMS="cpu")
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run([sys.executable, "-c", code], cwd=repo, env=env, text=True,
                        capture_output=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  report = json.loads(proc.stdout.strip().splitlines()[-1])
  assert report["devices"] == 2
  assert report[f"lam{lam}"] <= F32_TOL, report
  assert report["triton_calls"] == 2 and report["per_shard_operand"], report
  assert not report["gathers"], report


def test_kernel_refuses_a_batch_the_mesh_cannot_split(monkeypatch):
  monkeypatch.setattr(sharding, "context_batch_shards", lambda: 2)
  params, xs, carry = _problem(0, 5, batch=3)
  with pytest.raises(ValueError, match="a batch of 3 does not split evenly"):
    rum_kernel.kernel_scan(params, xs, carry, lam=0, eta=None, activation=jax.nn.relu,
                           update_gate=True)


def test_auto_selects_the_kernel_on_gpus_only(monkeypatch):
  monkeypatch.setattr(rum, "KERNEL_AUTO_MAX_HIDDEN", {0: 128, 1: 128})
  sel = functools.partial(rum.select_impl, "auto", return_cos=False, dtype=jnp.float32,
                          devices=1)
  assert sel(lam=1, nh=100, backend="gpu") == "kernel"
  assert sel(lam=0, nh=50, backend="gpu") == "kernel"
  assert sel(lam=1, nh=100, backend="cpu") == "fast"
  assert sel(lam=1, nh=100, backend="tpu") == "fast"
  assert sel(lam=0.5, nh=100, backend="gpu") == "fast"
  assert sel(lam=1, nh=129, backend="gpu") == "fast"
  assert sel(lam=1, nh=8, backend="gpu", return_cos=True) == "fast"
  assert rum.select_impl("auto", lam=1, return_cos=False, nh=8, dtype=jnp.float64,
                         backend="gpu", devices=1) == "fast"
  assert rum.select_impl("fast", lam=1, return_cos=False, nh=8, dtype=jnp.float32,
                         backend="gpu") == "fast"


def _lower_training_step(platform, lam, batch, steps, nx, nh, dtype, block=None,
                         **options):
  """The StableHLO of a jitted gradient of a loss through rum_scan(impl="kernel") (with
  ``block`` or ``options``: kernel_scan with them)."""
  params = jax.tree.map(lambda p: p.astype(dtype), init_rum_params(jax.random.key(0), nx, nh))
  xs = jnp.zeros((batch, steps, nx), dtype)

  def loss(params, xs):
    if block is None and not options:
      _, hs = rum_scan(params, xs, lam=lam, eta=1.0, impl="kernel")
    else:
      carry = rum.initial_carry((batch,), nh, lam, dtype)
      _, hs = rum_kernel.kernel_scan(params, jnp.moveaxis(xs, 1, 0), carry, lam=lam, eta=1.0,
                                     activation=jax.nn.relu, update_gate=True,
                                     block=block or 1, **options)
    return jnp.sum(hs.astype(jnp.float32)**2)

  step = jax.grad(loss, argnums=(0, 1))
  if platform == "cuda":
    return kernel_resources.export_for_cuda(step, params, xs).mlir_module()
  return export.export(jax.jit(step), platforms=[platform])(params, xs).mlir_module()


# The shapes the benchmark and the auto selection use (recall, copying), both dtypes.
@pytest.mark.parametrize("lam,batch,steps,nx,nh,dtype", [
    (1, 128, 520, 10, 100, jnp.float32),
    (0, 128, 520, 10, 100, jnp.bfloat16),
    (1, 128, 53, 36, 50, jnp.bfloat16),
    (0, 128, 520, 64, 256, jnp.bfloat16),      # rows streamed (auto above Np 128)
])
def test_kernel_lowers_for_cuda(lam, batch, steps, nx, nh, dtype):
  """Lowered for CUDA, a training step holds two Triton kernels (forward, backward)."""
  module = _lower_training_step("cuda", lam, batch, steps, nx, nh, dtype)
  assert module.count(TRITON + "(") == 2


@pytest.mark.parametrize("lam", [pytest.param(0, marks=pytest.mark.slow), 1])
def test_a_task_model_reaches_the_kernel_on_a_gpu(lam):
  """The recall task's model (RUM cell, Nh 50, impl="auto") in a training step lowered for
  CUDA on this CPU host: the models reach the kernel through the cells, forward and
  backward (two Triton kernels), because "auto" decides where it is lowered."""
  task = tasks.get_task("recall")
  config = task.get_config()
  config.update(length=8, batch_size=4, num_train=8, num_dev=4, num_test=4)
  config.model.lam = lam
  task.validate_config(config)
  batch = jax.tree.map(jnp.asarray, next(iter(task.train_data(
      config, process_index=0, process_count=1))))
  model = task.build_model(config)
  params = model.init(jax.random.key(0), batch, train=False)

  def loss(params):
    return task.loss_and_metrics(model.apply(params, batch, train=False), batch)[0]

  module = kernel_resources.export_for_cuda(jax.grad(loss), params).mlir_module()
  assert module.count(TRITON + "(") == 2


@pytest.mark.parametrize("lam", [0, 1])
def test_auto_decides_on_the_platform_it_is_lowered_for(lam):
  """impl="auto" chose from the default backend: exported for CUDA from a CPU host it held
  the XLA scan (review). Now CUDA gets the kernel (two Triton calls: forward and backward),
  the CPU the XLA scan alone, and its values and gradients are the fast path's."""
  params, _, _ = _problem(lam, 5)
  xs = jax.random.normal(jax.random.key(3), (2, 3, 3))

  def loss(impl):
    return lambda p, x: jnp.sum(rum_scan(p, x, lam=lam, eta=1.0, impl=impl)[1] ** 2)

  cuda = kernel_resources.export_for_cuda(jax.grad(loss("auto")), params, xs).mlir_module()
  assert cuda.count(TRITON + "(") == 2
  cpu = export.export(jax.jit(jax.grad(loss("auto"))), platforms=["cpu"])(params, xs)
  assert TRITON not in cpu.mlir_module()
  jax.tree.map(np.testing.assert_array_equal, jax.grad(loss("auto"))(params, xs),
               jax.grad(loss("fast"))(params, xs))


@pytest.mark.slow    # an opt-in option (tuning); the default path's lowering is tested above
@pytest.mark.parametrize("nh,dtype", [(100, jnp.float32), (256, jnp.bfloat16)])
def test_kernel_with_blocks_lowers_for_cuda(nh, dtype):
  """lam=0 with 16 examples per program (the tensor-core product) lowers for CUDA."""
  module = _lower_training_step("cuda", 0, 128, 520, 10, nh, dtype, block=16)
  assert module.count(TRITON + "(") == 2


@pytest.mark.slow    # an opt-in option (tuning)
@pytest.mark.parametrize("lam", [0, 1])
def test_kernel_reading_the_saved_planes_lowers_for_cuda(lam):
  module = _lower_training_step("cuda", lam, 128, 520, 10, 100, jnp.float32,
                                save_plane=True)
  assert module.count(TRITON + "(") == 2


# The streamed rows at the shapes they are for (Nh 256) and at copying's Nh 100.
@pytest.mark.parametrize("lam,nh,rows,dtype", [
    pytest.param(1, 256, 32, jnp.float32, marks=pytest.mark.slow),   # not auto-picked
    pytest.param(0, 256, 32, jnp.bfloat16, marks=pytest.mark.slow),
    pytest.param(1, 100, 32, jnp.float32, marks=pytest.mark.slow),
])
def test_kernel_streaming_rows_lowers_for_cuda(lam, nh, rows, dtype):
  module = _lower_training_step("cuda", lam, 128, 520, 64, nh, dtype, rows=rows)
  assert module.count(TRITON + "(") == 2


@pytest.mark.slow
def test_kernel_streaming_q_lowers_for_cuda():
  """lam=1 at copying with Q streamed by blocks of 32 rows (R in registers)."""
  module = _lower_training_step("cuda", 1, 128, 520, 10, 100, jnp.float32, q_rows=32)
  assert module.count(TRITON + "(") == 2


@pytest.mark.slow
@pytest.mark.parametrize("lam", [0, 1])
def test_kernel_streaming_weight_columns_lowers_for_cuda(lam):
  module = _lower_training_step("cuda", lam, 128, 520, 64, 256, jnp.float32, rows=32,
                                w_columns=True, w_rows=64)
  assert module.count(TRITON + "(") == 2


@pytest.mark.slow
@pytest.mark.parametrize("lam,options", [(0, dict(transposed=True)),
                                         (1, dict(transposed=True, prefetch=True)),
                                         (0, dict(prefetch=True, rows=32))])
def test_kernel_transposed_and_prefetching_lower_for_cuda(lam, options):
  module = _lower_training_step("cuda", lam, 128, 520, 10, 100, jnp.float32, **options)
  assert module.count(TRITON + "(") == 2


def test_kernel_is_interpreted_off_gpus():
  """Lowered for a CPU, the same function holds no Triton kernel (interpret mode)."""
  module = _lower_training_step("cpu", 1, 2, 3, 3, 5, jnp.float32)
  assert TRITON not in module and "while" in module


@pytest.mark.slow
@pytest.mark.parametrize("lam", [0, 1])
def test_kernel_matches_fast_path_long_sequence(lam):
  """T = 64, Nh = 100 (padded to 128): the backward kernel's rebuild of R over many steps
  keeps the gradients at the XLA path's (minutes in interpret mode; seconds on a GPU)."""
  kw = dict(eta=None, activation=jax.nn.relu, update_gate=True)
  _compare(lam, kw, _problem(lam, 100, nx=10, batch=4, steps=64), 1e-4)


def test_kernel_above_the_measured_sizes_runs_and_warns_once(monkeypatch, caplog):
  """``impl="kernel"`` runs any Nh (padded inside) but says once per size when it is above
  ``KERNEL_AUTO_MAX_HIDDEN`` (lam=1: 128), where a GPU measured it slower."""
  monkeypatch.setattr(rum, "_logged", set())
  monkeypatch.setattr(rum, "KERNEL_AUTO_MAX_HIDDEN", {0: 4, 1: 4})   # Nh 5 pads to 16
  params, _, _ = _problem(1, 5)
  xs = jnp.ones((2, 3, 3))
  with caplog.at_level("INFO", logger="absl"):
    for _ in range(2):
      hs = rum_scan(params, xs, lam=1, impl="kernel")[1]
    rum_scan(params, xs, lam=1, impl="fast")
  warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
  assert hs.shape == (2, 3, 5) and len(warned) == 1
  assert "impl='kernel' at hidden size 5 (padded 16) for lam=1, above the 4" in warned[0]


def test_the_log_names_the_implementation_once(monkeypatch, caplog):
  """One log line per implementation a process uses (the training log says which ran)."""
  monkeypatch.setattr(rum, "_logged", set())
  params, _, _ = _problem(1, 5)
  xs = jnp.ones((2, 3, 3))
  with caplog.at_level("INFO", logger="absl"):
    for _ in range(2):
      rum_scan(params, xs, lam=1)
      rum_scan(params, xs, lam=1, impl="reference")
  lines = [r.getMessage() for r in caplog.records if "rum_scan: impl=" in r.getMessage()]
  assert len(lines) == 2
  backend = jax.default_backend()
  auto = rum.select_impl("auto", lam=1, return_cos=False, nh=5, dtype=jnp.float32)
  assert auto == ("kernel" if backend == "gpu" and jax.device_count() == 1 else "fast")
  assert lines[0].startswith(f"rum_scan: impl={auto} on {backend}, lam=1")
  assert lines[1].startswith(f"rum_scan: impl=reference on {backend}, lam=1")

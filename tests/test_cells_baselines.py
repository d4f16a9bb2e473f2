"""The comparison cells (eurnn, goru, urnn, fwln, lnlstm) against slow references.

Each reference is written from the paper's equations: NumPy float64, a Python loop over
time, explicit matrices (the EUNN ``W`` as a product of explicit Givens layers, the fast
weights ``A`` as explicit outer products). Nothing but the parameters is shared with
rumjax.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rumjax.cells import cell_fields, make_cell, modrelu
from rumjax.cells.base import RecurrentCell, check_probability, zoneout
from rumjax.cells.eurnn import eunn_apply, eunn_matrix, eunn_num_angles
from rumjax.cells.urnn import (cayley_step, make_urnn_optimizer, stiefel_cayley,
                               stiefel_labels)

# These tests compare implementations or check against float64: true float32 matmuls.
pytestmark = pytest.mark.usefixtures("float32_matmuls")

B, T, NX = 3, 5, 4


# ------------------------------------------------------------------------ references


def sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def modrelu_ref(z, b):
  """Arjovsky et al. (2016): (|z| + b) z / |z| if |z| + b >= 0, else 0 (real z != 0)."""
  mag = np.abs(z) + b
  return np.where(mag >= 0, mag * z / np.abs(z), 0.0)


def layer_norm_ref(x, scale, bias, eps=1e-6):
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(var + eps) * scale + bias


def eunn_pairs_ref(n, capacity, fft):
  """Tunable: (0,1),(2,3),... then (1,2),(3,4),...; FFT: partners at distance 2^k."""
  if fft:
    num_layers = int(np.ceil(np.log2(n)))
    dists = [2 ** (num_layers - 1 - l) for l in range(num_layers)]
    return [[(i, i + d) for i in range(n) if (i // d) % 2 == 0 and i + d < n]
            for d in dists]
  return [[(i, i + 1) for i in range(l % 2, n - 1, 2)] for l in range(capacity)]


def eunn_matrix_ref(thetas, n, capacity, fft):
  """W = D_L ... D_1, each D_l an explicit product of disjoint Givens rotations."""
  thetas = np.asarray(thetas, np.float64)
  w, a = np.eye(n), 0
  for layer in eunn_pairs_ref(n, capacity, fft):
    d = np.eye(n)
    for i, j in layer:
      c, s = np.cos(thetas[a]), np.sin(thetas[a])
      d[i, i], d[i, j], d[j, i], d[j, j] = c, -s, s, c
      a += 1
    w = d @ w
  assert a == len(thetas)
  return w


def _xs(seed=0, nx=NX):
  return jnp.asarray(np.random.default_rng(seed).normal(size=(B, T, nx)), jnp.float32)


def _random_params(name, n, nx=NX, seed=0, **kwargs):
  """Random float64 parameters with the layout of ``make_cell(name, n)`` (without running
  its initialisers: faster, and non-trivial layer-norm gains and biases)."""
  cell = make_cell(name, n, **kwargs)
  carry = cell.initialize_carry(jax.random.key(0), (1, nx))
  shapes = jax.eval_shape(cell.init, jax.random.key(0), carry,
                          jax.ShapeDtypeStruct((1, nx), jnp.float32))["params"]
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda a: rng.normal(size=a.shape) * 0.5, shapes)


def _run(name, n, params, xs, **kwargs):
  """The cell ``name`` under ``nn.RNN`` (float32) with the given parameters."""
  rnn = nn.RNN(make_cell(name, n, **kwargs))
  p32 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), params)
  return np.asarray(jax.jit(rnn.apply)({"params": {"cell": p32}}, xs))


# --------------------------------------------------------------------------- modReLU


def test_modrelu():
  z = np.array([-3.0, -0.5, 0.2, 1.5, 4.0])
  b = np.array([0.5, -1.0, -0.1, -2.0, 1.0])
  np.testing.assert_allclose(modrelu(jnp.asarray(z), jnp.asarray(b)), modrelu_ref(z, b),
                             atol=1e-6)
  g = jax.grad(lambda z: modrelu(z, jnp.full(3, 0.5)).sum())(jnp.array([0.0, 1.0, -1.0]))
  assert np.all(np.isfinite(g)) and np.allclose(g[1:], 1.0)


# ------------------------------------------------------------------------------ EUNN


@pytest.mark.parametrize("n,capacity,fft", [(6, 3, False), (7, 4, False), (50, 2, False),
                                            (8, 0, True), (11, 0, True), (50, 0, True)])
def test_eunn_matrix_is_product_of_givens_layers_and_orthogonal(n, capacity, fft):
  k = eunn_num_angles(n, capacity, fft)
  assert k == sum(len(p) for p in eunn_pairs_ref(n, capacity, fft))
  if not fft:
    assert k == -(-capacity // 2) * (n // 2) + (capacity // 2) * ((n - 1) // 2)
  thetas = jax.random.uniform(jax.random.key(n), (k,), jnp.float32, -np.pi, np.pi)
  w = np.asarray(eunn_matrix(thetas, n, capacity=capacity, fft=fft))
  np.testing.assert_allclose(w, eunn_matrix_ref(thetas, n, capacity, fft), atol=1e-5)
  np.testing.assert_allclose(w.T @ w, np.eye(n), atol=1e-5)
  h = np.random.default_rng(0).normal(size=(2, 3, n)).astype(np.float32)
  np.testing.assert_allclose(eunn_apply(thetas, jnp.asarray(h), capacity=capacity, fft=fft),
                             h @ w.T, atol=1e-5)


@pytest.mark.parametrize("fft", [False, True])
def test_eurnn_matches_explicit_recurrence(fft):
  xs = _xs(1)
  p = _random_params("eurnn", 6, capacity=3, fft=fft)
  p["thetas"] = np.random.default_rng(1).uniform(-np.pi, np.pi, p["thetas"].shape)
  hs = _run("eurnn", 6, p, xs, capacity=3, fft=fft)
  w = eunn_matrix_ref(p["thetas"], 6, 3, fft)
  h, ref = np.zeros((B, 6)), []
  for t in range(T):
    h = modrelu_ref(h @ w.T + np.asarray(xs[:, t], np.float64) @ p["kernel_x"], p["bias"])
    ref.append(h)
  np.testing.assert_allclose(hs, np.stack(ref, 1), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------ GORU


@pytest.mark.parametrize("fft", [False, True])
def test_goru_matches_explicit_recurrence(fft):
  n, xs = 6, _xs(2)
  p = _random_params("goru", n, capacity=2, fft=fft)
  p["thetas"] = np.random.default_rng(2).uniform(-np.pi, np.pi, p["thetas"].shape)
  hs = _run("goru", n, p, xs, capacity=2, fft=fft)
  u = eunn_matrix_ref(p["thetas"], n, 2, fft)
  np.testing.assert_allclose(u.T @ u, np.eye(n), atol=1e-12)
  wx, wh, b = p["kernel_x"], p["kernel_h"], p["bias"]
  h, ref = np.zeros((B, n)), []
  for t in range(T):
    x = np.asarray(xs[:, t], np.float64)
    r = sigmoid(x @ wx[:, :n] + h @ wh[:, :n] + b[:n])
    z = sigmoid(x @ wx[:, n:2 * n] + h @ wh[:, n:] + b[n:])
    h_tilde = modrelu_ref(x @ wx[:, 2 * n:] + r * (h @ u.T), p["mod_bias"])
    h = z * h + (1 - z) * h_tilde
    ref.append(h)
  np.testing.assert_allclose(hs, np.stack(ref, 1), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------ uRNN


def test_urnn_matches_explicit_recurrence():
  n, xs = 6, _xs(3)
  p = _random_params("urnn", n)
  p["recurrent_orthogonal"] = np.linalg.qr(np.random.default_rng(3).normal(size=(n, n)))[0]
  hs = _run("urnn", n, p, xs)
  w = p["recurrent_orthogonal"].T  # the kernel acts from the right
  h, ref = np.zeros((B, n)), []
  for t in range(T):
    h = modrelu_ref(w @ h.T + (np.asarray(xs[:, t], np.float64) @ p["kernel_x"]).T,
                    p["bias"][:, None]).T
    ref.append(h)
  np.testing.assert_allclose(hs, np.stack(ref, 1), rtol=1e-5, atol=1e-5)


def _cayley_ref(w, g, lr):
  """Wisdom et al., eq. (10), in float64: ``(I + lr/2 A)^{-1} (I - lr/2 A) W`` with
  ``A = G W^T - W G^T``."""
  eye = np.eye(w.shape[0])
  a = g @ w.T - w @ g.T
  return np.linalg.inv(eye + lr / 2 * a) @ (eye - lr / 2 * a) @ w


def test_cayley_step_is_wisdom_eq():
  rng = np.random.default_rng(4)
  w = np.linalg.qr(rng.normal(size=(5, 5)))[0]
  g, lr = rng.normal(size=(5, 5)), 0.3
  ref = _cayley_ref(w, g, lr)
  with jax.enable_x64(True):
    new = np.asarray(cayley_step(jnp.asarray(w), jnp.asarray(g), lr))
  np.testing.assert_allclose(new, ref, atol=1e-12)
  np.testing.assert_allclose(new.T @ new, np.eye(5), atol=1e-12)


def test_cayley_step_on_a_tall_stiefel_matrix():
  """``W`` <n, p>, n > p, with orthonormal columns (cayley_step's docstring): eq. (10) with
  the n x n ``A``; the columns stay orthonormal (float64)."""
  rng = np.random.default_rng(17)
  w = np.linalg.qr(rng.normal(size=(6, 3)))[0]
  g = rng.normal(size=(6, 3))
  with jax.enable_x64(True):
    new = np.asarray(cayley_step(jnp.asarray(w), jnp.asarray(g), 0.3))
  np.testing.assert_allclose(new, _cayley_ref(w, g, 0.3), atol=1e-12)
  np.testing.assert_allclose(new.T @ new, np.eye(3), atol=1e-12)


def test_stiefel_cayley_follows_its_schedule():
  """``stiefel_cayley(schedule)``: update ``k`` is the Cayley step at ``schedule(k)``
  (eq. (10) in float64; float32 tolerance)."""
  rng = np.random.default_rng(18)
  w = np.linalg.qr(rng.normal(size=(5, 5)))[0]
  g = rng.normal(size=(5, 5))
  schedule = lambda count: 0.1 * (count + 1)
  tx = stiefel_cayley(schedule)
  params = jnp.asarray(w, jnp.float32)
  state = tx.init(params)
  for k in range(3):
    updates, state = tx.update(jnp.asarray(g, jnp.float32), state, params)
    params = optax.apply_updates(params, updates)
    w = _cayley_ref(w, g, 0.1 * (k + 1))
    np.testing.assert_allclose(params, w, atol=2e-5)


def test_urnn_stays_orthogonal_under_the_cayley_optimizer():
  n, xs = 8, _xs(5)
  target = jnp.asarray(np.random.default_rng(6).normal(size=(B, n)), jnp.float32)
  rnn = nn.RNN(make_cell("urnn", n))
  params = jax.jit(rnn.init)(jax.random.key(0), xs)["params"]
  w0 = np.asarray(params["cell"]["recurrent_orthogonal"], np.float64)
  np.testing.assert_allclose(w0.T @ w0, np.eye(n), atol=1e-5)  # orthogonal init
  labels = stiefel_labels(params)
  assert labels["cell"] == {"recurrent_orthogonal": "stiefel", "kernel_x": "base",
                            "bias": "base"}
  tx = make_urnn_optimizer(optax.rmsprop(1e-2), optax.constant_schedule(0.1))
  loss_fn = lambda p: jnp.mean((rnn.apply({"params": p}, xs)[:, -1] - target) ** 2)

  @jax.jit
  def step(params, opt_state):
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  opt_state, p, losses = tx.init(params), params, []
  for _ in range(100):
    p, opt_state, loss = step(p, opt_state)
    losses.append(float(loss))
  w = np.asarray(p["cell"]["recurrent_orthogonal"], np.float64)
  assert np.abs(w.T @ w - np.eye(n)).max() < 1e-5
  assert np.abs(w - params["cell"]["recurrent_orthogonal"]).max() > 1e-2  # it moved
  assert np.abs(p["cell"]["kernel_x"] - params["cell"]["kernel_x"]).max() > 1e-3
  assert losses[-1] < 0.5 * losses[0]


# ----------------------------------------------------------------------------- FW-LN


@pytest.mark.parametrize("inner_steps,activation", [(1, "relu"), (2, "tanh")])
def test_fwln_matches_explicit_recurrence(inner_steps, activation):
  n, xs, lam, eta = 6, _xs(7), 0.9, 0.4
  kwargs = dict(decay=lam, fast_lr=eta, inner_steps=inner_steps, activation=activation)
  p = _random_params("fwln", n, seed=8, **kwargs)
  hs = _run("fwln", n, p, xs, **kwargs)
  f = {"relu": lambda v: np.maximum(v, 0), "tanh": np.tanh}[activation]
  w, c = p["kernel_h"].T, p["kernel_x"].T
  ref = []
  for b in range(B):
    a, h_prev, out = np.zeros((n, n)), np.zeros(n), []
    for t in range(T):
      x = np.asarray(xs[b, t], np.float64)
      a = lam * a + eta * np.outer(h_prev, h_prev)
      boundary = w @ h_prev + c @ x + p["bias"]
      h = f(boundary)
      for _ in range(inner_steps):
        h = f(layer_norm_ref(boundary + a @ h, p["ln"]["scale"], p["ln"]["bias"]))
      h_prev = h
      out.append(h)
    ref.append(out)
  np.testing.assert_allclose(hs, np.array(ref), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------- LN-LSTM


def lnlstm_ref(p, xs, zh, zc, forget_bias=1.0, eps=1e-6):
  """Deterministic LN-LSTM with zoneout in expectation."""
  n = p["kernel_h"].shape[0]
  c, h, out = np.zeros((B, n)), np.zeros((B, n)), []
  for t in range(T):
    z = np.asarray(xs[:, t], np.float64) @ p["kernel_x"] + h @ p["kernel_h"]
    gates = [layer_norm_ref(z[:, k * n:(k + 1) * n], p["ln_gates"]["scale"][k],
                            p["ln_gates"]["bias"][k], eps) for k in range(4)]
    i, g, f, o = gates
    c_new = sigmoid(f + forget_bias) * c + sigmoid(i) * np.tanh(g)
    h_new = sigmoid(o) * np.tanh(layer_norm_ref(c_new, p["ln_c"]["scale"],
                                                p["ln_c"]["bias"], eps))
    c = zc * c + (1 - zc) * c_new
    h = zh * h + (1 - zh) * h_new
    out.append(h)
  return np.stack(out, 1)


@pytest.mark.parametrize("zh,zc", [(0.0, 0.0), (0.1, 0.5)])
def test_lnlstm_matches_reference(zh, zc):
  n, xs = 6, _xs(9)
  p = _random_params("lnlstm", n, seed=10)
  hs = _run("lnlstm", n, p, xs, zoneout=zh, zoneout_c=zc)
  np.testing.assert_allclose(hs, lnlstm_ref(p, xs, zh, zc), rtol=1e-4, atol=1e-5)


def test_lnlstm_epsilon_is_the_layer_norms():
  """``epsilon=0.05`` in both layer norms (the authors use 1e-3): the reference with it,
  and visibly not the default's."""
  n, xs = 6, _xs(9)
  p = _random_params("lnlstm", n, seed=10)
  hs = _run("lnlstm", n, p, xs, epsilon=0.05)
  np.testing.assert_allclose(hs, lnlstm_ref(p, xs, 0.0, 0.0, eps=0.05), rtol=1e-4, atol=1e-5)
  assert np.max(np.abs(hs - lnlstm_ref(p, xs, 0.0, 0.0))) > 1e-3


def test_lnlstm_zoneout_training_keeps_previous_units():
  n, batch = 8, 256
  x = jnp.asarray(np.random.default_rng(11).normal(size=(batch, NX)), jnp.float32)
  prev = tuple(jnp.asarray(np.random.default_rng(s).normal(size=(batch, n)), jnp.float32)
               for s in (12, 13))
  variables = {"params": jax.tree.map(lambda a: jnp.asarray(a, jnp.float32),
                                      _random_params("lnlstm", n, seed=11))}
  (c_new, h_new), _ = jax.jit(make_cell("lnlstm", n).apply)(variables, prev, x)
  cell = make_cell("lnlstm", n, zoneout=0.2, zoneout_c=0.5, deterministic=False)
  (c, h), y = jax.jit(cell.apply)(variables, prev, x, rngs={"dropout": jax.random.key(1)})
  np.testing.assert_array_equal(y, h)
  for got, old, new, p in ((h, prev[1], h_new, 0.2), (c, prev[0], c_new, 0.5)):
    kept = np.isclose(got, old, rtol=1e-5, atol=1e-6)
    updated = np.isclose(got, new, rtol=1e-5, atol=1e-6)
    assert np.all(kept | updated)
    assert abs(kept.mean() - p) < 0.05


# -------------------------------------------------------------- all cells under nn.RNN


CELLS = ["eurnn", "goru", "urnn", "fwln", "lnlstm"]


@pytest.mark.parametrize("name", CELLS)
def test_runs_under_nn_rnn_with_jit_and_grad(name):
  kwargs = {"zoneout": 0.1, "zoneout_c": 0.5, "deterministic": False} if name == "lnlstm" \
      else {}
  rnn = nn.RNN(make_cell(name, 6, **kwargs), split_rngs={"params": False, "dropout": True})
  xs = _xs(14)
  rngs = {"dropout": jax.random.key(2)}
  variables = jax.jit(rnn.init)({"params": jax.random.key(0), **rngs}, xs)

  @jax.jit
  def loss_and_grad(params):
    return jax.value_and_grad(
        lambda p: jnp.sum(rnn.apply({"params": p}, xs, rngs=rngs) ** 2))(params)

  loss, grads = loss_and_grad(variables["params"])
  assert np.isfinite(loss)
  leaves = jax.tree.leaves(grads)
  assert leaves and all(np.all(np.isfinite(g)) for g in leaves)
  assert any(np.abs(g).max() > 0 for g in leaves)
  # Extra batch axes and the carry shape contract.
  ys = jax.eval_shape(lambda v, x: rnn.apply(v, x, rngs=rngs), variables,
                      xs.reshape(1, B, T, NX))
  assert ys.shape == (1, B, T, 6)


# ------------------------------------------------- parameter counts (associative recall)


RECALL_T, RECALL_NH, RECALL_CLASSES = 30, 50, 10
RECALL_NX = RECALL_T // 2 + 10 + 1  # letters (T/2) + digits + "?", one-hot


def _num_params(name, nx, nh, **kwargs):
  cell = make_cell(name, nh, **kwargs)
  x = jax.ShapeDtypeStruct((1, nx), jnp.float32)
  carry = cell.initialize_carry(jax.random.key(0), (1, nx))
  shapes = jax.eval_shape(cell.init, jax.random.key(0), carry, x)["params"]
  return sum(int(np.prod(a.shape)) for a in jax.tree.leaves(shapes))


def test_parameter_counts_at_the_recall_configuration(capsys):
  n, nx = RECALL_NH, RECALL_NX
  expected = {
      "eurnn": eunn_num_angles(n, 2) + nx * n + n,              # thetas, U, b
      "eurnn(fft)": eunn_num_angles(n, fft=True) + nx * n + n,
      "goru": 3 * nx * n + 2 * n * n + 3 * n + eunn_num_angles(n, 2),
      "urnn": n * n + nx * n + n,
      "fwln": n * n + nx * n + 3 * n,                           # W, C, b, LN gain/bias
      "lnlstm": 4 * nx * n + 4 * n * n + 10 * n,
      "rum": 3 * nx * n + 2 * n * n + 3 * n,
  }
  assert eunn_num_angles(n, 2) == n // 2 + (n - 1) // 2 == 49
  output = n * RECALL_CLASSES + RECALL_CLASSES
  with capsys.disabled():
    print(f"\nparameters at Nh={n}, Nx={nx} (T={RECALL_T}), + output {output}:")
  for key, count in expected.items():
    name, kwargs = (key[:-5], {"fft": True}) if key.endswith("(fft)") else (key, {})
    assert _num_params(name, nx, n, **kwargs) == count, key
    with capsys.disabled():
      print(f"  {key:11s} cell {count:6d}   with output {count + output:6d}")


# ------------------------------------------------------------ initial parameter values


def _init(name, n, nx=NX):
  """The parameters ``make_cell(name, n)`` initialises (key 0), as NumPy."""
  cell = make_cell(name, n)
  x = jnp.zeros((1, nx))
  carry = cell.initialize_carry(jax.random.key(1), x.shape)
  return jax.tree.map(np.asarray, jax.jit(cell.init)(jax.random.key(0), carry, x)["params"])


def test_default_initial_parameters_are_the_documented_ones():
  """LN-LSTM: orthogonal kernels (rows orthonormal, ``K K^T = I``); FW-LN: ``W = 0.05 I``
  (Ba et al., 2016); GORU: ``[b_r | b_z] = [2 | 0]``, modReLU ``b_h = 2``, kernels in
  U(-0.01, 0.01) (``goru_bias_init``); EURNN and GORU angles in U[-pi, pi)."""
  n = 16
  p = _init("lnlstm", n)
  for k in (p["kernel_x"], p["kernel_h"]):
    np.testing.assert_allclose(k @ k.T, np.eye(k.shape[0]), atol=1e-5)
  np.testing.assert_array_equal(_init("fwln", n)["kernel_h"], 0.05 * np.eye(n, dtype=np.float32))
  p = _init("goru", n)
  np.testing.assert_array_equal(p["bias"], np.r_[np.full(n, 2.0), np.zeros(n)])
  np.testing.assert_array_equal(p["mod_bias"], np.full(n, 2.0))
  for k in (p["kernel_x"], p["kernel_h"]):
    assert 0.009 < np.abs(k).max() <= 0.01
  for name in ("eurnn", "goru"):
    thetas = _init(name, 64)["thetas"]
    assert -np.pi <= thetas.min() < -2.5 and 2.5 < thetas.max() < np.pi


# ------------------------------------- the shared base (carry, dtype promotion, zoneout)


@pytest.mark.parametrize("name", CELLS)
def test_base_carry_dtype_and_field_order(name):
  cell = make_cell(name, 6)
  assert isinstance(cell, RecurrentCell) and cell.num_feature_axes == 1
  assert cell_fields(name)[0] == "features"
  assert {"dtype", "param_dtype", "carry_init"} <= set(cell_fields(name))
  assert type(cell)(6).features == 6  # features is the first positional field
  carry = cell.initialize_carry(jax.random.key(0), (2, B, NX))
  expected = {"fwln": ((2, B, 6, 6), (2, B, 6)), "lnlstm": ((2, B, 6), (2, B, 6))}.get(
      name, (2, B, 6))
  assert jax.tree.map(lambda a: a.shape, carry, is_leaf=lambda a: hasattr(a, "shape")) \
      == expected
  assert all(not np.any(a) for a in jax.tree.leaves(carry))  # zeros
  assert all(a.dtype == jnp.float32 for a in jax.tree.leaves(carry))
  # dtype: computation and outputs in bfloat16, parameters in float32; the carry keeps
  # one dtype from step to step: bfloat16, but float32 for the unitary cells.
  low = make_cell(name, 6, dtype=jnp.bfloat16)
  x = _xs(15)[:, 0]
  carry = low.initialize_carry(jax.random.key(0), x.shape)
  variables = low.init(jax.random.key(0), carry, x)
  assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(variables))
  new_carry, y = low.apply(variables, carry, x)
  assert y.dtype == jnp.bfloat16
  carry_dtype = jnp.float32 if name in ("eurnn", "goru", "urnn") else jnp.bfloat16
  assert type(low).UNITARY == (carry_dtype == jnp.float32)
  assert all(a.dtype == carry_dtype for a in jax.tree.leaves((carry, new_carry)))


class _Zoneout(nn.Module):
  rate: float
  deterministic: bool

  def __call__(self, prev, new):
    return zoneout(self, self.rate, prev, new, deterministic=self.deterministic)


def test_zoneout_helper():
  rng = np.random.default_rng(16)
  prev, new = (jnp.asarray(rng.normal(size=(64, 32)), jnp.float32) for _ in range(2))
  # Evaluation: the expectation rate * prev + (1 - rate) * new; rate 0 needs no RNG.
  got = _Zoneout(0.3, True).apply({}, prev, new)
  np.testing.assert_allclose(got, 0.3 * np.asarray(prev) + 0.7 * np.asarray(new), rtol=1e-6)
  np.testing.assert_array_equal(_Zoneout(0.0, False).apply({}, prev, new), new)
  # Training: each unit is either its previous or its new value, previous w.p. rate.
  got = np.asarray(_Zoneout(0.3, False).apply({}, prev, new,
                                              rngs={"dropout": jax.random.key(3)}))
  kept, updated = got == np.asarray(prev), got == np.asarray(new)
  assert np.all(kept | updated) and abs(kept.mean() - 0.3) < 0.05
  with pytest.raises(ValueError, match="zoneout_c=1.0 must be a probability"):
    check_probability("zoneout_c", 1.0)


def test_carry_init_draws_the_initial_state():
  """``carry_init`` draws ``h_0`` (base.py: ``h_0 = carry_init(rng, (*batch, N))``); the
  LN-LSTM draws ``c_0`` and ``h_0`` from two keys (as Flax's ``LSTMCell``), not equal."""
  init = nn.initializers.normal(1.0)
  for name in CELLS:
    carry = make_cell(name, 6, carry_init=init).initialize_carry(jax.random.key(0), (B, NX))
    h = carry[-1] if isinstance(carry, tuple) else carry
    assert h.shape == (B, 6) and np.all(np.asarray(h) != 0), name
  c, h = make_cell("lnlstm", 6, carry_init=init).initialize_carry(jax.random.key(0), (B, NX))
  assert np.all(np.asarray(c) != np.asarray(h))

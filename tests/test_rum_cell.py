"""RUMCell as a flax.linen recurrent cell, and the cell registry."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

import rumjax
from rumjax import cells


# These tests compare implementations or check against float64: true float32 matmuls.
pytestmark = pytest.mark.usefixtures("float32_matmuls")


def _xs(seed, *shape):
  return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


@pytest.mark.parametrize("lam,eta,activation,update_gate",
                         [(0, None, "relu", True), (1, None, "tanh", True),
                          (1, 1.3, "softsign", False), (0, 0.8, "sigmoid", True),
                          # real lam (an eigh per step): -m slow
                          pytest.param(0.5, None, "tanh", True, marks=pytest.mark.slow),
                          pytest.param(2.0, 1.0, "relu", True, marks=pytest.mark.slow)])
def test_rnn_equals_rum_scan(lam, eta, activation, update_gate):
  xs = _xs(0, 3, 7, 4)
  cell = rumjax.RUMCell(6, lam=lam, eta=eta, activation=activation, update_gate=update_gate)
  rnn = nn.RNN(cell, return_carry=True)
  variables = rnn.init(jax.random.key(1), xs)
  params = variables["params"]["cell"]
  assert set(params) == {"kernel_x", "kernel_h", "bias"}
  carry, hs = rnn.apply(variables, xs)
  final, hs_scan = rumjax.rum_scan(params, xs, lam=lam, eta=eta, activation=activation,
                                   update_gate=update_gate)
  np.testing.assert_allclose(hs, hs_scan, atol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), carry, final)
  if lam:
    assert carry[0].shape == (3, 6, 6) and carry[1].shape == (3, 6)


def test_jit_grad_vmap_bidirectional_seq_lengths():
  xs = _xs(2, 4, 6, 3)
  rnn = nn.RNN(rumjax.RUMCell(5, lam=1))
  variables = rnn.init(jax.random.key(0), xs)
  loss = lambda v, x: jnp.sum(rnn.apply(v, x) ** 2)
  grads = jax.jit(jax.grad(loss))(variables, xs)
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
  per_example = jax.vmap(lambda x: rnn.apply(variables, x[None])[0])(xs)
  np.testing.assert_allclose(per_example, rnn.apply(variables, xs), atol=1e-5)
  bi = nn.Bidirectional(nn.RNN(rumjax.RUMCell(5, lam=1)), nn.RNN(rumjax.RUMCell(5)))
  bv = bi.init(jax.random.key(1), xs)
  assert bi.apply(bv, xs).shape == (4, 6, 10)
  lengths = jnp.array([6, 3, 1, 4])
  carry, _ = nn.RNN(rumjax.RUMCell(5), return_carry=True).apply(
      {"params": {"cell": variables["params"]["cell"]}}, xs, seq_lengths=lengths)
  for i, n in enumerate(lengths):
    _, hs = rumjax.rum_scan(variables["params"]["cell"], xs[i:i + 1, :n])
    np.testing.assert_allclose(carry[i], hs[0, -1], atol=1e-5)


def test_layer_norm_and_zoneout():
  xs = _xs(3, 2, 9, 3)
  cell = rumjax.RUMCell(4, layer_norm=True, zoneout=0.5, deterministic=False)
  rnn = nn.RNN(cell, split_rngs={"params": False, "dropout": True})
  variables = rnn.init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, xs)
  assert {"ln_tau", "ln_u", "ln_h"} <= set(variables["params"]["cell"])
  train1 = rnn.apply(variables, xs, rngs={"dropout": jax.random.key(2)})
  train2 = rnn.apply(variables, xs, rngs={"dropout": jax.random.key(3)})
  assert not np.allclose(train1, train2)  # stochastic in training
  # With a zoned-out unit the value is exactly the previous one.
  same = np.isclose(train1[:, 1:], train1[:, :-1])
  assert 0.2 < same.mean() < 0.8
  det = nn.RNN(cell.clone(deterministic=True))
  e1 = det.apply(variables, xs)
  np.testing.assert_array_equal(e1, det.apply(variables, xs))
  grads = jax.grad(lambda v: jnp.sum(rnn.apply(v, xs, rngs={"dropout": jax.random.key(2)})))(
      variables)
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))


def test_cell_validates_options():
  xs = _xs(4, 2, 3, 3)
  for kwargs, match in [(dict(lam=-3), "lam=-3"), (dict(eta=-2.0), "eta=-2.0"),
                        (dict(activation="elu"), "activation='elu'"),
                        (dict(zoneout=1.5), "zoneout")]:
    with pytest.raises(ValueError, match=match):
      nn.RNN(rumjax.RUMCell(4, **kwargs)).init(jax.random.key(0), xs)


def test_registry():
  assert {"rum", "lstm", "gru"} <= set(cells.cell_names())
  assert isinstance(cells.make_cell("gru", 8), nn.GRUCell)
  assert isinstance(cells.make_cell("lstm", 8), nn.OptimizedLSTMCell)
  cell = cells.make_cell("rum", 8, lam=1, eta=1.0)
  assert (cell.features, cell.lam, cell.eta) == (8, 1, 1.0)
  with pytest.raises(ValueError, match=r"unknown cell 'rnm'; known cells are \[.*'rum'"):
    cells.make_cell("rnm", 8)
  with pytest.raises(ValueError, match="has no option"):
    cells.make_cell("gru", 8, lam=1)
  config = ml_collections.ConfigDict(dict(lam=1, eta=0.5, hidden_size=3, batch_size=4))
  rum = cells.cell_from_config("rum", 16, config)
  assert (rum.features, rum.lam, rum.eta) == (16, 1, 0.5)
  assert isinstance(cells.cell_from_config("gru", 16, config), nn.GRUCell)


@pytest.mark.parametrize("lam,eta,learn_lam", [
    (0, None, False), (1, 1.0, False),
    # ~40-100 s each (real or learned lam): -m slow
    pytest.param(0.5, 1.0, False, marks=pytest.mark.slow),
    pytest.param(0.5, None, True, marks=pytest.mark.slow),
    pytest.param(0, 1.0, True, marks=pytest.mark.slow)])
def test_rum_layer_equals_rnn_of_the_cell(lam, eta, learn_lam):
  """The fast sequence layer (rum_scan) has the cell's parameters at the same path and
  gives the same outputs and gradients as nn.RNN(RUMCell), a learned lam included."""
  xs = _xs(5, 3, 11, 4)
  cell = rumjax.RUMCell(6, lam=lam, eta=eta, learn_lam=learn_lam)
  rnn, fast = nn.RNN(cell, name="rnn"), cells.RUM(cell, name="rnn")
  v_rnn = rnn.init(jax.random.key(0), xs)
  v_fast = fast.init(jax.random.key(0), xs)
  assert jax.tree.structure(v_rnn) == jax.tree.structure(v_fast)
  jax.tree.map(np.testing.assert_array_equal, v_rnn, v_fast)  # same initialisation
  np.testing.assert_allclose(fast.apply(v_rnn, xs), rnn.apply(v_rnn, xs), atol=1e-5)
  g_rnn = jax.grad(lambda v: jnp.sum(jnp.sin(rnn.apply(v, xs))))(v_rnn)
  g_fast = jax.grad(lambda v: jnp.sum(jnp.sin(fast.apply(v, xs))))(v_rnn)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
               g_fast, g_rnn)
  assert cells.supports_scan(cell)
  assert not cells.supports_scan(cell.clone(zoneout=0.1))
  assert not cells.supports_scan(nn.GRUCell(4))


@pytest.mark.parametrize("lam", [pytest.param(0.5, marks=pytest.mark.slow), 1.0, 0.0])
def test_learned_lam_is_a_parameter_initialised_at_lam(lam):
  """learn_lam: params["lam"] starts at lam and the cell then computes eq. (2) with that
  value (the real-power path, so the carry holds R even from lam = 0); its gradient is
  finite and, away from lam = 0 where R^lam is flat in lam at R = 1, non-zero."""
  xs = _xs(6, 3, 9, 4)
  rnn = nn.RNN(rumjax.RUMCell(5, lam=lam, learn_lam=True, eta=1.0), return_carry=True)
  variables = rnn.init(jax.random.key(2), xs)
  params = variables["params"]["cell"]
  assert set(params) == {"kernel_x", "kernel_h", "bias", "lam"}
  assert params["lam"].shape == () and float(params["lam"]) == lam
  (r, h), hs = rnn.apply(variables, xs)
  kernels = {k: params[k] for k in ("kernel_x", "kernel_h", "bias")}
  want = rumjax.rum_scan(kernels, xs, lam=jnp.asarray(lam), eta=1.0)[1]
  np.testing.assert_allclose(hs, want, atol=1e-5)
  assert r.shape == (3, 5, 5)
  g = jax.grad(lambda v: jnp.sum(jnp.sin(rnn.apply(v, xs)[1])))(variables)
  g_lam = float(g["params"]["cell"]["lam"])
  assert np.isfinite(g_lam) and (lam == 0 or g_lam != 0)


def test_keep_lam_nonnegative_projects_only_lam():
  """Projected gradient descent: a step that would take lam below 0 ends at 0, one that
  keeps it positive is the base optimizer's; other parameters (and a kernel named
  otherwise) are the base optimizer's; the state is the base optimizer's own tree."""
  import optax
  params = {"cell": {"lam": jnp.asarray(0.3), "kernel_h": jnp.ones((2, 2))},
            "other": {"lam": jnp.ones(3)}}   # not a scalar: not a RUM lam, untouched
  grads = {"cell": {"lam": jnp.asarray(1.0), "kernel_h": jnp.ones((2, 2))},
           "other": {"lam": jnp.ones(3)}}
  base = optax.sgd(0.5)
  tx = cells.keep_lam_nonnegative(base)
  state = tx.init(params)
  assert jax.tree.structure(state) == jax.tree.structure(base.init(params))
  updates, _ = tx.update(grads, state, params)
  new = optax.apply_updates(params, updates)
  assert float(new["cell"]["lam"]) == 0.0            # 0.3 - 0.5 projected to 0
  np.testing.assert_allclose(new["cell"]["kernel_h"], 0.5)
  np.testing.assert_allclose(new["other"]["lam"], 0.5)
  small = jax.tree.map(lambda g: 0.1 * g, grads)
  updates, _ = tx.update(small, state, params)
  np.testing.assert_allclose(optax.apply_updates(params, updates)["cell"]["lam"], 0.25)
  # The zoo's optimizers carry the projection (a registered optimizer wrapper).
  from rumjax.training import optim
  config = ml_collections.ConfigDict(dict(optimizer="sgd", learning_rate=0.5))
  zoo = optim.make_optimizer(config)
  updates, _ = zoo.update(grads, zoo.init(params), params)
  assert float(optax.apply_updates(params, updates)["cell"]["lam"]) == 0.0


@pytest.mark.slow   # ~40 s: a real lam in bfloat16
def test_learned_lam_in_bfloat16_keeps_the_memory_a_rotation():
  """The precision policy with a learned lam: hidden states in bfloat16, the memory R and
  the parameter lam in float32, R orthogonal to float32 accuracy, finite gradient in lam."""
  xs = _xs(7, 2, 20, 4).astype(jnp.bfloat16)
  rnn = nn.RNN(rumjax.RUMCell(6, lam=0.5, learn_lam=True, eta=1.0, dtype=jnp.bfloat16),
               return_carry=True)
  variables = rnn.init(jax.random.key(3), xs)
  assert variables["params"]["cell"]["lam"].dtype == jnp.float32
  (r, h), hs = rnn.apply(variables, xs)
  assert hs.dtype == jnp.bfloat16 and r.dtype == jnp.float32
  np.testing.assert_allclose(jnp.einsum("bji,bjk->bik", r, r),
                             np.broadcast_to(np.eye(6), r.shape), atol=1e-5)
  g = jax.grad(lambda v: jnp.sum(jnp.sin(rnn.apply(v, xs)[1].astype(jnp.float32))))(variables)
  assert np.isfinite(float(g["params"]["cell"]["lam"]))


@pytest.mark.parametrize("lam", [pytest.param(0, marks=pytest.mark.slow), 1])   # 8 s each
def test_run_recurrence_fast_path_keeps_carry_init_and_the_carry_at_each_length(lam):
  """run_recurrence's rum_scan path equals nn.RNN: a non-zero carry_init is the first
  state (it started from zeros), and with seq_lengths the returned carry is each row's at
  its length (it ran through the padding). float32 matmuls (module fixture)."""
  from rumjax.models.sequence import run_recurrence

  class Layer(nn.Module):
    cell: nn.RNNCellBase
    under_nn_rnn: bool

    @nn.compact
    def __call__(self, xs, lengths):
      if self.under_nn_rnn:
        cell = self.cell.clone(parent=None, name=None)
        return nn.RNN(cell, name="rnn")(xs, seq_lengths=lengths, return_carry=True)
      return run_recurrence(self.cell, xs, seq_lengths=lengths, return_carry=True,
                            name="rnn")

  xs, lengths = _xs(7, 2, 5, 3), jnp.array([5, 2])
  for cell, lens in [(cells.make_cell("rum", 4, lam=lam,
                                      carry_init=nn.initializers.ones_init()), None),
                     (cells.make_cell("rum", 4, lam=lam), lengths)]:
    fast, ref = Layer(cell, False), Layer(cell, True)
    variables = ref.init(jax.random.key(0), xs, lens)
    (c_fast, h_fast), (c_ref, h_ref) = (m.apply(variables, xs, lens) for m in (fast, ref))
    np.testing.assert_allclose(h_fast[0], h_ref[0], atol=1e-6)   # row 0: all 5 steps real
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), c_fast, c_ref)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_block_orthogonal_draws_an_independent_orthogonal_block_per_gate(dtype):
  """RUM's Algorithm 1 (one orthogonal matrix per gate): each (n_in, n) block has
  orthonormal columns (to the dtype's rounding), and no two blocks are equal."""
  from rumjax.core.initializers import block_orthogonal
  w = block_orthogonal(3)(jax.random.key(0), (8, 24), dtype)
  assert w.shape == (8, 24) and w.dtype == dtype
  blocks = np.split(np.asarray(w, np.float64), 3, axis=-1)
  tol = 1e-6 if dtype == jnp.float32 else 2e-2
  for q in blocks:
    np.testing.assert_allclose(q.T @ q, np.eye(8), atol=tol)
  for i in range(3):
    for j in range(i):
      assert np.abs(blocks[i] - blocks[j]).max() > 0.1
  with pytest.raises(ValueError, match="does not split into 3 blocks"):
    block_orthogonal(3)(jax.random.key(0), (8, 20))

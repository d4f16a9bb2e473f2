"""StackedCells and FastSlowCell (FS-RNN-k) against slow Python-loop references.

The references run the sub-cells one by one, step by step, in plain Python, each with its
own ``apply`` and the sub-tree of the composite's parameters (``fast_cells_0``,
``slow_cell``, ``cells_1``, ...), wired as in Mujika et al. (2017), eqs. (1)-(5):

    F_1 reads x_t from F_k's state at t-1; S reads F_1's output; F_2 reads S's output from
    F_1's new state; F_3..F_k read a zero input of width 1 from the previous fast state.

Sub-cells in the references are built with ``deterministic=True`` themselves; the composite
under test gets them with ``deterministic=False`` and must propagate its own mode.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from rumjax.cells import (FastSlowCell, LNLSTMCell, RUMCell, StackedCells,
                          fast_slow_from_config, stacked_from_config)
from rumjax.models.sequence import run_recurrence

B, T, NX, NF, NS = 2, 4, 3, 6, 5
RNN_KW = dict(split_rngs={"params": False, "dropout": True}, return_carry=True)


def close(a, b, tol=2e-5):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=tol, atol=tol)


def xs_and_key(seed=0, nx=NX):
  return jax.random.normal(jax.random.key(seed), (B, T, nx))


# ------------------------------------------------------------------------ cells used


def fast(zoneout=0.1, zoneout_c=0.5, deterministic=True):
  return LNLSTMCell(NF, zoneout=zoneout, zoneout_c=zoneout_c, deterministic=deterministic)


def slow(zoneout=0.2, lam=0, deterministic=True):
  return RUMCell(NS, lam=lam, eta=1.0, layer_norm=True, zoneout=zoneout,
                 deterministic=deterministic)


def fs_cell(k, dropout_rate=0.0, **kw):
  """An FS-RNN-k whose sub-cells say deterministic=False: the wrapper's mode must win."""
  return FastSlowCell(tuple(fast(deterministic=False) for _ in range(k)),
                      slow(deterministic=False), dropout_rate=dropout_rate, **kw)


def init_rnn(cell, xs, seed=1):
  rnn = nn.RNN(cell, **RNN_KW)
  carry = cell.initialize_carry(jax.random.key(0), xs[:, 0].shape)
  variables = rnn.init({"params": jax.random.key(seed), "dropout": jax.random.key(2)},
                       xs, initial_carry=carry)
  return rnn, carry, variables["params"]["cell"]


class PassCell(nn.RNNCellBase):
  """Test cell: ``(carry, x) -> (x, x)``, so a composite's output shows its dropout masks."""
  features: int

  @nn.compact
  def __call__(self, carry, inputs):
    return inputs, inputs

  @nn.nowrap
  def initialize_carry(self, rng, input_shape):
    return jnp.zeros(tuple(input_shape[:-1]) + (self.features,))

  @property
  def num_feature_axes(self):
    return 1


# ------------------------------------------------------------------------ references


def fs_reference(k, params, carry, xs):
  """FS-RNN-k, evaluation mode, one sub-cell ``apply`` at a time (Mujika et al. (1)-(5))."""
  f_cells = [fast() for _ in range(k)]
  s_cell = slow()
  fast_c, slow_c = carry
  ys = []
  for t in range(xs.shape[1]):
    fast_c, y = f_cells[0].apply({"params": params["fast_cells_0"]}, fast_c, xs[:, t])
    slow_c, s = s_cell.apply({"params": params["slow_cell"]}, slow_c, y)
    fast_c, y = f_cells[1].apply({"params": params["fast_cells_1"]}, fast_c, s)
    for i in range(2, k):
      fast_c, y = f_cells[i].apply({"params": params[f"fast_cells_{i}"]}, fast_c,
                                   jnp.zeros((xs.shape[0], 1)))
    ys.append(y)
  return (fast_c, slow_c), jnp.stack(ys, 1)


def stacked_reference(ref_cells, params, carry, xs):
  """Layer k reads layer k-1's output at the same step; evaluation mode."""
  carry, ys = list(carry), []
  for t in range(xs.shape[1]):
    y = xs[:, t]
    for k, cell in enumerate(ref_cells):
      carry[k], y = cell.apply({"params": params[f"cells_{k}"]}, carry[k], y)
    ys.append(y)
  return tuple(carry), jnp.stack(ys, 1)


def step_loop(cell, params, carry, xs, **apply_kw):
  """The composite's own ``__call__`` step by step (no scan)."""
  ys = []
  for t in range(xs.shape[1]):
    carry, y = cell.apply({"params": params}, carry, xs[:, t], **apply_kw)
    ys.append(y)
  return carry, jnp.stack(ys, 1)


# ------------------------------------------------------------------------ FS-RNN


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("dropout_rate", [0.0, 0.4])
def test_fast_slow_matches_reference_loop(k, dropout_rate):
  """Wiring, shared fast state, propagated deterministic (zoneout expectation), and
  dropout = identity in evaluation; step by step and under nn.RNN."""
  xs = xs_and_key()
  cell = fs_cell(k, dropout_rate)
  assert all(c.deterministic for c in (*cell.fast_cells, cell.slow_cell))
  rnn, carry0, params = init_rnn(cell, xs)
  assert sorted(params) == sorted([f"fast_cells_{i}" for i in range(k)] + ["slow_cell"])
  # F_1 reads x, S reads F_1 (N_F), F_2 reads S (N_S), F_3.. read a zero of width 1.
  assert params["fast_cells_0"]["kernel_x"].shape == (NX, 4 * NF)
  assert params["slow_cell"]["kernel_x"].shape == (NF, 3 * NS)
  assert params["fast_cells_1"]["kernel_x"].shape == (NS, 4 * NF)
  for i in range(2, k):
    assert params[f"fast_cells_{i}"]["kernel_x"].shape == (1, 4 * NF)
  want_carry, want_ys = fs_reference(k, params, carry0, xs)
  got_carry, got_ys = step_loop(cell, params, carry0, xs)
  close(got_ys, want_ys)
  close(got_carry, want_carry)
  rnn_carry, rnn_ys = rnn.apply({"params": {"cell": params}}, xs, initial_carry=carry0)
  close(rnn_ys, want_ys)
  close(rnn_carry, want_carry)
  assert rnn_ys.shape == (B, T, NF) and cell.features == NF and cell.num_fast == k


def test_fast_slow_zoneout_eval_is_the_manual_mix():
  """Evaluation zoneout of every sub-cell, written out by hand from zoneout-free cells:
  each cell mixes with the state it was handed (F_2 with F_1's new state)."""
  zf, zc, zs = 0.3, 0.6, 0.25
  cell = FastSlowCell((fast(zf, zc, False), fast(zf, zc, False)),
                      slow(zs, deterministic=False), dropout_rate=0.5)
  x = xs_and_key()[:, 0]
  key = jax.random.key(5)
  carry = jax.tree.map(lambda a: jax.random.normal(key, a.shape),
                       cell.initialize_carry(key, x.shape))
  params = cell.init(jax.random.key(1), carry, x)["params"]
  (got_fast, got_slow), got_y = cell.apply({"params": params}, carry, x)  # no rngs

  def lstm(name, c, inp):
    (c_new, h_new), _ = fast(0.0, 0.0).apply({"params": params[name]}, c, inp)
    return (zc * c[0] + (1 - zc) * c_new, zf * c[1] + (1 - zf) * h_new)

  (c0, h0), s0 = carry
  f1 = lstm("fast_cells_0", (c0, h0), x)
  s_new, _ = slow(0.0).apply({"params": params["slow_cell"]}, s0, f1[1])
  s1 = zs * s0 + (1 - zs) * s_new
  f2 = lstm("fast_cells_1", f1, s1)
  close((got_fast, got_slow, got_y), (f2, s1, f2[1]))


def test_fast_slow_dropout_masks_per_step_and_per_edge():
  """Training: F_1 -> S and S -> F_2 dropouts, fresh masks at every step (split_rngs),
  reproducible given the rng. With pass-through cells y_t = m2_t * m1_t * x_t / keep^2."""
  n, rate = 64, 0.5
  cell = FastSlowCell((PassCell(n), PassCell(n)), PassCell(n), dropout_rate=rate,
                      deterministic=False)
  rnn = nn.RNN(cell, **RNN_KW)
  xs = jnp.ones((B, 6, n))
  variables = rnn.init({"params": jax.random.key(0), "dropout": jax.random.key(0)}, xs)
  run = lambda seed: rnn.apply(variables, xs, rngs={"dropout": jax.random.key(seed)})[1]
  ys = np.asarray(run(3))
  np.testing.assert_array_equal(ys, np.asarray(run(3)))
  assert not np.array_equal(ys, np.asarray(run(4)))
  np.testing.assert_allclose(np.unique(ys), [0.0, 1 / (1 - rate) ** 2])
  kept = (ys > 0).mean()
  assert 0.15 < kept < 0.35          # two independent masks: (1 - rate)^2 = 0.25
  masks = ys > 0
  for t in range(1, ys.shape[1]):
    assert not np.array_equal(masks[:, t], masks[:, 0])
  # Evaluation: identity.
  eval_ys = nn.RNN(cell.clone(deterministic=True), **RNN_KW).apply(variables, xs)[1]
  np.testing.assert_array_equal(eval_ys, xs)


def test_fast_slow_training_reproducible_and_gradients_finite():
  xs = xs_and_key()
  cell = fs_cell(3, dropout_rate=0.3, deterministic=False)
  assert not any(c.deterministic for c in (*cell.fast_cells, cell.slow_cell))
  rnn, carry0, params = init_rnn(cell, xs)

  @jax.jit
  @jax.value_and_grad
  def loss(p, key):
    _, ys = rnn.apply({"params": {"cell": p}}, xs, initial_carry=carry0,
                      rngs={"dropout": key})
    return jnp.sum(ys ** 2)

  l1, g1 = loss(params, jax.random.key(7))
  l2, _ = loss(params, jax.random.key(7))
  assert l1 == l2 and loss(params, jax.random.key(8))[0] != l1
  assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(g1))
  # F_3 reads zeros: its input kernel gets no gradient; every other kernel does.
  assert not np.any(np.asarray(g1["fast_cells_2"]["kernel_x"]))
  for name in ("fast_cells_0", "fast_cells_1", "slow_cell"):
    assert np.any(np.asarray(g1[name]["kernel_x"]))
  assert np.any(np.asarray(g1["fast_cells_2"]["kernel_h"]))


def test_fast_slow_carry_shapes_and_clone_propagation():
  cell = FastSlowCell((fast(), fast()), slow(lam=1), dropout_rate=0.1)
  (c, h), (r, hs) = cell.initialize_carry(jax.random.key(0), (B, 7, NX))
  assert c.shape == h.shape == (B, 7, NF)
  assert r.shape == (B, 7, NS, NS) and hs.shape == (B, 7, NS)
  np.testing.assert_array_equal(r[0, 0], np.eye(NS))
  train = cell.clone(deterministic=False)
  assert not any(c.deterministic for c in (*train.fast_cells, train.slow_cell))
  assert all(c.deterministic for c in (*cell.fast_cells, cell.slow_cell))
  # The same cell object passed twice still gives two cells with their own parameters.
  shared = fast()
  twice = FastSlowCell((shared, shared), slow())
  x = jnp.ones((B, NX))
  p = twice.init(jax.random.key(0), twice.initialize_carry(jax.random.key(0), x.shape),
                 x)["params"]
  assert p["fast_cells_0"]["kernel_x"].shape == (NX, 4 * NF)
  assert p["fast_cells_1"]["kernel_x"].shape == (NS, 4 * NF)


def test_fast_slow_validation():
  x = jnp.ones((B, NX))
  with pytest.raises(ValueError, match="at least 2 fast cells"):
    FastSlowCell((fast(),), slow()).initialize_carry(jax.random.key(0), x.shape)
  bad = FastSlowCell((fast(), LNLSTMCell(NF + 1)), slow())
  with pytest.raises(ValueError, match="one size"):
    bad.initialize_carry(jax.random.key(0), x.shape)
  with pytest.raises(ValueError, match="dropout_rate"):
    FastSlowCell((fast(), fast()), slow(), dropout_rate=1.0).initialize_carry(
        jax.random.key(0), x.shape)


# ------------------------------------------------------------------------ stacked


@pytest.mark.parametrize("dropout_rate", [0.0, 0.4])
def test_stacked_matches_reference_loop(dropout_rate):
  xs = xs_and_key()
  layers = (RUMCell(7, eta=0.3, zoneout=0.2, deterministic=False), fast(deterministic=False),
            RUMCell(NS, lam=1, layer_norm=True))
  refs = (RUMCell(7, eta=0.3, zoneout=0.2), fast(), RUMCell(NS, lam=1, layer_norm=True))
  cell = StackedCells(layers, dropout_rate=dropout_rate)
  assert cell.features == NS
  rnn, carry0, params = init_rnn(cell, xs)
  assert params["cells_1"]["kernel_x"].shape == (7, 4 * NF)
  assert params["cells_2"]["kernel_x"].shape == (NF, 3 * NS)
  want_carry, want_ys = stacked_reference(refs, params, carry0, xs)
  close(step_loop(cell, params, carry0, xs), (want_carry, want_ys))
  rnn_carry, rnn_ys = rnn.apply({"params": {"cell": params}}, xs, initial_carry=carry0)
  close(rnn_ys, want_ys)
  close(rnn_carry, want_carry)
  shapes = jax.tree.map(jnp.shape, carry0)
  assert shapes == ((B, 7), ((B, NF), (B, NF)), ((B, NS, NS), (B, NS)))


def test_stacked_dropout_between_layers_only():
  n, rate = 64, 0.5
  cell = StackedCells((PassCell(n), PassCell(n), PassCell(n)), dropout_rate=rate,
                      deterministic=False)
  rnn = nn.RNN(cell, **RNN_KW)
  xs = jnp.ones((B, 5, n))
  variables = rnn.init({"params": jax.random.key(0), "dropout": jax.random.key(0)}, xs)
  ys = np.asarray(rnn.apply(variables, xs, rngs={"dropout": jax.random.key(1)})[1])
  np.testing.assert_allclose(np.unique(ys), [0.0, 1 / (1 - rate) ** 2])   # 2 masks
  assert not np.array_equal(ys[:, 0] > 0, ys[:, 1] > 0)
  np.testing.assert_array_equal(
      ys, np.asarray(rnn.apply(variables, xs, rngs={"dropout": jax.random.key(1)})[1]))
  single = StackedCells((PassCell(n),), dropout_rate=rate, deterministic=False)
  np.testing.assert_array_equal(nn.RNN(single, **RNN_KW).apply({}, xs)[1], xs)


def test_stacked_training_gradients_finite():
  xs = xs_and_key()
  cell = stacked_from_config(dict(cell="rum", hidden_size=NF, num_layers=2, lam=0,
                                  eta=0.3, layer_norm=True, zoneout=0.1,
                                  dropout_rate=0.35)).clone(deterministic=False)
  rnn, carry0, params = init_rnn(cell, xs)

  @jax.jit
  @jax.grad
  def grad(p):
    return jnp.sum(rnn.apply({"params": {"cell": p}}, xs, initial_carry=carry0,
                             rngs={"dropout": jax.random.key(3)})[1] ** 2)

  grads = grad(params)
  assert all(bool(jnp.all(jnp.isfinite(g))) and np.any(np.asarray(g))
             for g in jax.tree.leaves(grads))


# ------------------------------------------------------------------------ in a model


class TinyModel(nn.Module):
  """A model holding the composite as a field and running it like the language model."""
  cell: nn.RNNCellBase

  @nn.compact
  def __call__(self, xs, train: bool = False):
    return run_recurrence(self.cell, xs, train=train)


def test_fast_slow_in_a_model_via_run_recurrence():
  xs = xs_and_key()
  model = TinyModel(fs_cell(2, dropout_rate=0.3))
  variables = model.init({"params": jax.random.key(1), "dropout": jax.random.key(2)}, xs,
                         train=True)
  params = variables["params"]["rnn"]["cell"]
  carry0 = model.cell.initialize_carry(jax.random.key(0), xs[:, 0].shape)
  _, want = fs_reference(2, params, carry0, xs)
  close(model.apply(variables, xs), want)
  train_ys = model.apply(variables, xs, train=True, rngs={"dropout": jax.random.key(3)})
  assert train_ys.shape == want.shape and not np.allclose(train_ys, want)
  _, inter = model.apply(variables, xs, mutable=["intermediates"])
  cos = inter["intermediates"]["rnn"]["cell"]["slow_cell"]["cos_theta"][0]
  assert cos.shape == (B, T)


def test_stacked_in_a_model_via_run_recurrence():
  """A model holding the stack as a field: ``run_recurrence`` clones the bound stack with
  its mode unchanged, and ``prepare_cells`` re-clones the bound sub-cells (Flax adopts a
  module once): the outputs are the reference loop's, evaluation mode."""
  xs = xs_and_key()
  model = TinyModel(StackedCells((fast(), fast())))
  variables = model.init(jax.random.key(1), xs)
  params = variables["params"]["rnn"]["cell"]
  carry0 = model.cell.initialize_carry(jax.random.key(0), xs[:, 0].shape)
  want = stacked_reference((fast(), fast()), params, carry0, xs)[1]
  close(model.apply(variables, xs), want)


# ------------------------------------------------------------------------ builders


def test_fast_slow_from_config():
  c = ml_collections.ConfigDict(dict(
      name="lm", fast_cell="lnlstm", fast_size=NF, num_fast=3, fast_zoneout=0.1,
      fast_zoneout_c=0.5, fast_lam=1, slow_cell="rum", slow_size=NS, slow_lam=0,
      slow_eta=1.0, slow_layer_norm=True, slow_zoneout=0.1, slow_zoneout_c=None,
      dropout_rate=0.35, zoneout=0.9, hidden_size=3))
  cell = fast_slow_from_config(c)
  assert cell.num_fast == 3 and cell.features == NF and cell.dropout_rate == 0.35
  for f in cell.fast_cells:
    assert isinstance(f, LNLSTMCell)
    assert (f.features, f.zoneout, f.zoneout_c) == (NF, 0.1, 0.5)   # fast_lam ignored
  s = cell.slow_cell
  assert isinstance(s, RUMCell)
  assert (s.features, s.lam, s.eta, s.layer_norm, s.zoneout) == (NS, 0, 1.0, True, 0.1)
  assert fast_slow_from_config(c, dropout_rate=0.0).dropout_rate == 0.0
  c.slow_zonout = 0.1
  with pytest.raises(ValueError, match="slow_zonout.*slow_zoneout"):
    fast_slow_from_config(c)
  with pytest.raises(ValueError, match="fast_size"):
    fast_slow_from_config(dict(slow_size=NS))
  with pytest.raises(ValueError, match="num_fast"):
    fast_slow_from_config(dict(fast_size=NF, slow_size=NS, num_fast=1))
  defaults = fast_slow_from_config(dict(fast_size=NF, slow_size=NS))
  assert defaults.num_fast == 2 and isinstance(defaults.slow_cell, RUMCell)


def test_fast_slow_from_config_none_is_the_cells_default():
  """A ``fast_<option>`` / ``slow_<option>`` given as None leaves the cell's default
  (``role_options``), as an absent one does."""
  cell = fast_slow_from_config(dict(fast_size=NF, slow_size=NS, fast_forget_bias=None,
                                    fast_zoneout=None, slow_zoneout=None, slow_eta=None))
  assert all((f.forget_bias, f.zoneout, f.zoneout_c) == (1.0, 0.0, 0.0)
             for f in cell.fast_cells)
  assert (cell.slow_cell.zoneout, cell.slow_cell.eta) == (0.0, None)


def test_stacked_from_config():
  c = ml_collections.ConfigDict(dict(cell="rum", hidden_size=1500, num_layers=2, lam=0,
                                     eta=0.3, zoneout=0.1, dropout_rate=0.35))
  cell = stacked_from_config(c)
  assert [(x.features, x.eta, x.zoneout) for x in cell.cells] == [(1500, 0.3, 0.1)] * 2
  assert cell.dropout_rate == 0.35 and cell.features == 1500
  sizes = stacked_from_config(dict(cell="lnlstm", hidden_size=[4, 3]))
  assert [x.features for x in sizes.cells] == [4, 3] and sizes.dropout_rate == 0.0
  with pytest.raises(ValueError, match="num_layers"):
    stacked_from_config(dict(cell="rum", hidden_size=[4, 3], num_layers=3))
  with pytest.raises(ValueError, match="cell"):
    stacked_from_config(dict(hidden_size=4))


def test_stacked_from_config_defaults_to_two_layers():
  """``num_layers`` unset with an int ``hidden_size``: the depth is 2 (its docstring)."""
  cell = stacked_from_config(dict(cell="rum", hidden_size=4))
  assert [c.features for c in cell.cells] == [4, 4]

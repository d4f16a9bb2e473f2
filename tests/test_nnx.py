"""rumjax.nnx: every registered cell as an NNX cell, on the same step functions as Linen.

For every cell: the NNX cell runs in ``nnx.RNN`` and ``nnx.Bidirectional`` and computes the
Linen cell's outputs (float32) with weights moved by ``from_linen`` / ``to_linen``; RUM's
``nnx.Param``s are ``rum_scan``'s parameters; the README's NNX block trains.
"""

import os
import re

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import rumjax
import rumjax.cells
import rumjax.nnx

# These tests compare implementations or check against float64: true float32 matmuls.
pytestmark = pytest.mark.usefixtures("float32_matmuls")

NX, N = 3, 6

# Options that differ from the defaults where a cell has them (the equations' branches).
OPTIONS = {
    "rum": dict(lam=1, eta=1.0),
    "eurnn": dict(capacity=3),
    "goru": dict(fft=True),
    "urnn": {},
    "fwln": dict(inner_steps=2, decay=0.9),
    "lnlstm": dict(zoneout=0.1, zoneout_c=0.5, forget_bias=0.5, epsilon=0.05),
    "lstm": {},
    "gru": {},
}
CASES = [(name, OPTIONS[name]) for name in sorted(OPTIONS)] + [
    ("rum", dict(lam=0, layer_norm=True, zoneout=0.2, activation="tanh")),
    ("rum", dict(lam=1, update_gate=False)),
    ("rum", dict(lam=1, layer_norm=True, update_gate=False)),   # no ln_u, as Linen
    ("rum", dict(lam=0.7, learn_lam=True, eta=1.0)),   # params["lam"], a real power
]
IDS = [f"{name}-{'-'.join(f'{k}={v}' for k, v in opts.items())}" for name, opts in CASES]


def _xs(t=5, batch=(2,)):
  return jax.random.normal(jax.random.key(1), batch + (t, NX))


def _perturb(params, seed):
  """Linen parameters moved off their initial values (biases non-zero, LN gains != 1);
  the Linen GRU's ``hn/bias`` stays 0 (Flax's nnx.GRUCell has none)."""
  leaves, tree = jax.tree_util.tree_flatten_with_path(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  out = []
  for (path, leaf), key in zip(leaves, keys):
    if jax.tree_util.keystr(path).endswith("['hn']['bias']"):
      out.append(leaf)
    else:
      out.append(leaf + 0.3 * jax.random.normal(key, leaf.shape, leaf.dtype))
  return jax.tree_util.tree_unflatten(tree, out)


def _nnx_cell(name, opts, seed=0):
  return rumjax.nnx.make_cell(name, NX, N, rngs=nnx.Rngs(seed), **opts)


def _assert_trees_equal(a, b):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(x, y)


def test_cell_names_are_the_linen_registry_names():
  # The library's own Linen cells: a test may have registered one of its own before on
  # this worker (tests/recipe_example.py's "elman"), which has no NNX twin.
  from rumjax.cells.registry import CELLS
  own = [name for name, cell in CELLS.items()
         if getattr(cell, "__module__", "").startswith("rumjax.")]
  assert rumjax.nnx.cell_names() == own
  for name in rumjax.nnx.cell_names():
    assert issubclass(rumjax.nnx.get_cell_class(name), nnx.RNNCellBase)
  # Flax's own NNX cells, with the policy's precision (rumjax.nnx.cells._FlaxCellPrecision).
  assert issubclass(rumjax.nnx.get_cell_class("lstm"), nnx.OptimizedLSTMCell)
  assert issubclass(rumjax.nnx.get_cell_class("gru"), nnx.GRUCell)


@pytest.mark.parametrize("name,opts", CASES, ids=IDS)
def test_linen_weights_give_linen_outputs_in_rnn_and_bidirectional(name, opts):
  xs = _xs()
  linen = lambda: nn.RNN(rumjax.cells.make_cell(name, N, **opts))
  bi_linen = nn.Bidirectional(linen(), linen())
  params = _perturb(bi_linen.init(jax.random.key(0), xs)["params"], seed=2)
  want = bi_linen.apply({"params": params}, xs)
  fwd = rumjax.nnx.from_linen(_nnx_cell(name, opts, 3), params["forward_rnn"]["cell"])
  bwd = rumjax.nnx.from_linen(_nnx_cell(name, opts, 4), params["backward_rnn"]["cell"])
  got = nnx.Bidirectional(nnx.RNN(fwd), nnx.RNN(bwd))(xs)
  assert got.shape == (2, 5, 2 * N)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  # nnx.RNN alone, with its final carry, equals nn.RNN's.
  carry, hs = nnx.RNN(fwd, return_carry=True)(xs)
  want_carry, want_hs = linen().apply({"params": params["forward_rnn"]}, xs, return_carry=True)
  np.testing.assert_allclose(hs, want_hs, rtol=1e-5, atol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5),
               carry, want_carry)
  # ... and back: to_linen returns exactly the weights loaded.
  _assert_trees_equal(rumjax.nnx.to_linen(fwd), params["forward_rnn"]["cell"])


@pytest.mark.parametrize("name,opts", CASES[:len(OPTIONS)], ids=IDS[:len(OPTIONS)])
def test_nnx_weights_give_nnx_outputs_in_linen(name, opts):
  xs = _xs(t=4, batch=(3,))
  cell = _nnx_cell(name, opts, seed=7)
  params = rumjax.nnx.to_linen(cell)
  want = nnx.RNN(cell)(xs)
  got = nn.RNN(rumjax.cells.make_cell(name, N, **opts)).apply({"params": {"cell": params}}, xs)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  # The parameter tree is the Linen cell's (names and shapes).
  linen_params = nn.RNN(rumjax.cells.make_cell(name, N, **opts)).init(
      jax.random.key(0), xs)["params"]["cell"]
  assert jax.tree.map(jnp.shape, params) == jax.tree.map(jnp.shape, linen_params)


@pytest.mark.parametrize("lam", [0, 1, 0.5])
def test_rum_scan_on_the_nnx_params_is_the_nnx_layer(lam):
  cell = rumjax.nnx.RUMCell(NX, N, lam=lam, eta=1.0, rngs=nnx.Rngs(0))
  assert sorted(nnx.to_pure_dict(nnx.state(cell, nnx.Param))) == [
      "bias", "kernel_h", "kernel_x"]
  assert all(isinstance(getattr(cell, k), nnx.Param) for k in ("kernel_x", "kernel_h", "bias"))
  xs = _xs(t=7)
  params = {k: getattr(cell, k)[...] for k in ("kernel_x", "kernel_h", "bias")}
  _, want = rumjax.rum_scan(params, xs, lam=lam, eta=1.0)
  np.testing.assert_allclose(nnx.RNN(cell)(xs), want, rtol=1e-5, atol=1e-5)
  _assert_trees_equal(cell.rum_params(), params)


def test_rum_params_have_the_init_rum_params_layout():
  cell = rumjax.nnx.RUMCell(NX, N, rngs=nnx.Rngs(0))
  ref = rumjax.init_rum_params(jax.random.key(0), nx=NX, nh=N)
  assert jax.tree.map(jnp.shape, cell.rum_params()) == jax.tree.map(jnp.shape, ref)
  assert jax.tree.map(lambda a: a.dtype, cell.rum_params()) == jax.tree.map(
      lambda a: a.dtype, ref)


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_bfloat16_policy_matches_linen(name):
  """One step under dtype=bfloat16: the NNX cell's output and carry dtypes and values are
  the Linen cell's (float32 carry for the unitary cells and RUM's memory)."""
  opts = dict(OPTIONS[name], dtype=jnp.bfloat16)
  x = _xs(t=1)[:, 0]
  cell = _nnx_cell(name, opts)
  carry = cell.initialize_carry(x.shape, nnx.Rngs(0))
  new_carry, y = cell(carry, x)
  linen = rumjax.cells.make_cell(name, N, **opts)
  lcarry = linen.initialize_carry(jax.random.key(0), x.shape)
  want_carry, want_y = linen.apply({"params": rumjax.nnx.to_linen(cell)}, lcarry, x)
  assert jax.tree.map(lambda a: a.dtype, carry) == jax.tree.map(lambda a: a.dtype, lcarry)
  assert y.dtype == want_y.dtype
  jax.tree.map(lambda a, b: (a.dtype == b.dtype) or pytest.fail(f"{a.dtype} != {b.dtype}"),
               new_carry, want_carry)
  # The same operations in the same dtypes: equal, output and carry.
  np.testing.assert_array_equal(np.float32(y), np.float32(want_y))
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.float32(a), np.float32(b)),
               new_carry, want_carry)


def test_zoneout_in_training_draws_per_step_masks_from_the_dropout_stream():
  xs = jnp.ones((2, 6, NX))
  make = lambda seed, det: rumjax.nnx.LNLSTMCell(NX, N, zoneout=0.5, deterministic=det,
                                                 rngs=nnx.Rngs(seed))
  train = nnx.RNN(make(0, False))(xs)
  again = nnx.RNN(make(0, False))(xs)
  other = nnx.RNN(make(1, False))(xs)
  evaluation = nnx.RNN(make(0, True))(xs)
  np.testing.assert_array_equal(train, again)              # the seed decides the masks
  assert not np.allclose(train, other)
  assert not np.allclose(train, evaluation)
  # A kept unit repeats its previous value: some (not all) units do, at some steps.
  kept = np.asarray(train[:, 1:] == train[:, :-1])
  assert 0 < kept.mean() < 1
  rnn = nnx.RNN(make(0, False))
  rnn.eval()                                                # nnx's switch to evaluation
  np.testing.assert_allclose(rnn(xs), evaluation, rtol=1e-6)


def test_from_linen_rejects_params_of_another_shape():
  cell = _nnx_cell("rum", {})
  other = rumjax.nnx.to_linen(rumjax.nnx.RUMCell(NX + 1, N, rngs=nnx.Rngs(0)))
  with pytest.raises(ValueError, match=r"\['kernel_x'\]: got \(4, 18\), expected \(3, 18\)"):
    rumjax.nnx.from_linen(cell, other)
  with pytest.raises(ValueError, match="ln_tau"):
    rumjax.nnx.from_linen(_nnx_cell("rum", dict(layer_norm=True)), {"params": other})


def test_from_linen_rejects_a_gru_with_a_hidden_bias():
  xs = _xs()
  params = nn.RNN(nn.GRUCell(N)).init(jax.random.key(0), xs)["params"]["cell"]
  params = dict(params, hn=dict(params["hn"], bias=params["hn"]["bias"] + 1.0))
  with pytest.raises(ValueError, match="hn/bias"):
    rumjax.nnx.from_linen(_nnx_cell("gru", {}), params)


@pytest.mark.parametrize("name", ["gru", "lstm", "rum"])
def test_from_linen_takes_an_rnn_s_params_and_names_what_is_missing(name):
  """``nn.RNN(cell)``'s params (``{"cell": ...}``) load as the cell's; a tree without the
  cell's parameters is a one-line error (the GRU's and LSTM's was a raw KeyError)."""
  xs = _xs()
  variables = nn.RNN(rumjax.cells.get_cell_class(name)(N)).init(jax.random.key(0), xs)
  for given in (variables, variables["params"], variables["params"]["cell"]):
    cell = rumjax.nnx.from_linen(_nnx_cell(name, {}), given)
    # float32; NNX's GRU and LSTM fuse the gate matmuls (another summation order).
    np.testing.assert_allclose(nnx.RNN(cell)(xs), nn.RNN(
        rumjax.cells.get_cell_class(name)(N)).apply(variables, xs), rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match=r"^the Linen params do not fit this "):
    rumjax.nnx.from_linen(_nnx_cell(name, {}), {"encoder": variables["params"]["cell"]})


# flax 0.11's nnx.Optimizer cannot hold optax.multi_transform's state (its MaskedNode
# leaves: "tuple indices must be integers or slices, not ellipsis" at construction); the
# floors (tests/test_floors.py) run flax 0.11.1.
@pytest.mark.skipif(tuple(int(p) for p in flax.__version__.split(".")[:2]) < (0, 12),
                    reason="nnx.Optimizer with optax.multi_transform needs flax >= 0.12")
def test_nnx_optimizer_keeps_the_urnn_orthogonal():
  """The URNNCell docstring's ``nnx.Optimizer(model, make_urnn_optimizer(tx, lr))``: W
  takes Cayley steps (it moves and stays orthogonal); its labels were all "base" on an
  ``nnx.State`` (paths end in ``.value``) and the first update failed."""
  import optax
  from rumjax.cells.urnn import make_urnn_optimizer
  cell = rumjax.nnx.make_cell("urnn", NX, N, rngs=nnx.Rngs(0))
  opt = nnx.Optimizer(cell, make_urnn_optimizer(optax.adam(0.1), 0.5), wrt=nnx.Param)
  w0 = np.asarray(cell.recurrent_orthogonal[...])
  for _ in range(3):
    opt.update(cell, nnx.grad(lambda m: jnp.sum(nnx.RNN(m)(_xs()) ** 2))(cell))
  w = np.asarray(cell.recurrent_orthogonal[...], np.float64)
  assert np.abs(w - w0).max() > 0.1
  np.testing.assert_allclose(w.T @ w, np.eye(N), atol=1e-5)


def test_unknown_names_and_cells_are_one_line_errors():
  with pytest.raises(ValueError, match="did you mean 'rum'"):
    rumjax.nnx.make_cell("rnm", NX, N, rngs=nnx.Rngs(0))
  with pytest.raises(TypeError, match="not an NNX cell of rumjax.nnx"):
    rumjax.nnx.to_linen(nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
  with pytest.raises(ValueError, match="lam"):
    rumjax.nnx.RUMCell(NX, N, lam=-1, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="inner_steps"):
    rumjax.nnx.FWLNCell(NX, N, inner_steps=0, rngs=nnx.Rngs(0))
  # sizes as the Linen make_cell checks them (a zero-width RNN was built silently)
  with pytest.raises(ValueError, match=r"^hidden_features=0 must be a positive integer"):
    rumjax.nnx.make_cell("rum", NX, 0, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match=r"^in_features=0 must be a positive integer"):
    rumjax.nnx.RUMCell(0, N, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match=r"^hidden_features=-1 must be a positive integer"):
    rumjax.nnx.make_cell("lstm", NX, -1, rngs=nnx.Rngs(0))
  # zoneout without a dropout stream (Flax's AttributeError before)
  with pytest.raises(ValueError, match=r"^zoneout needs rngs with a 'dropout' stream"):
    rumjax.nnx.LNLSTMCell(NX, N, zoneout=0.1, rngs=nnx.Rngs(params=0))
  # a bfloat16 param_dtype with dtype=None: the carry and the computation would differ
  for make in (lambda: rumjax.nnx.make_cell("rum", NX, N, param_dtype="bfloat16",
                                            rngs=nnx.Rngs(0)),
               lambda: rumjax.cells.make_cell("fwln", N, param_dtype="bfloat16")):
    with pytest.raises(ValueError, match=r"^param_dtype=bfloat16 needs dtype set too"):
      make()


@pytest.mark.parametrize("name", ["rum", "goru", "fwln", "lnlstm"])
def test_initialize_carry_takes_carry_init_as_flax(name):
  """``initialize_carry(..., carry_init=f)`` draws ``h_0`` (and the LN-LSTM's ``c_0``) with
  ``f``, as Flax's NNX cells do in current Flax (it was ignored: zeros). Flax's own lstm
  and gru are not ours to test: the floor Flax's take no ``carry_init``."""
  cell = rumjax.nnx.make_cell(name, NX, N, rngs=nnx.Rngs(0), **(
      dict(lam=1) if name == "rum" else {}))
  ones = nn.initializers.ones_init()
  carry = cell.initialize_carry((2, NX), nnx.Rngs(0), carry_init=ones)
  h = carry[1] if isinstance(carry, tuple) else carry
  assert h.shape == (2, N) and np.all(np.asarray(h) == 1)
  if name == "lnlstm":
    assert np.all(np.asarray(carry[0]) == 1)
  default = cell.initialize_carry((2, NX), nnx.Rngs(0))
  h0 = default[1] if isinstance(default, tuple) else default
  assert np.all(np.asarray(h0) == 0)


def test_bfloat16_parameters_initialise_with_dtype_set():
  """``param_dtype=dtype=bfloat16``: the LN-LSTM's orthogonal kernels are drawn in float32
  and cast (QR has no bfloat16 kernel: NotImplementedError), Linen and NNX alike."""
  cell = rumjax.cells.make_cell("lnlstm", N, dtype="bfloat16", param_dtype="bfloat16")
  x = _xs()[:, 0]
  params = cell.init(jax.random.key(0), cell.initialize_carry(jax.random.key(0), x.shape),
                     x)["params"]
  assert params["kernel_h"].dtype == jnp.bfloat16
  reference = rumjax.cells.make_cell("lnlstm", N)
  ref = reference.init(jax.random.key(0), reference.initialize_carry(jax.random.key(0),
                                                                     x.shape), x)["params"]
  np.testing.assert_array_equal(params["kernel_h"], ref["kernel_h"].astype(jnp.bfloat16))
  nnx_cell = rumjax.nnx.make_cell("lnlstm", NX, N, dtype="bfloat16", param_dtype="bfloat16",
                                  rngs=nnx.Rngs(0))
  assert nnx_cell.kernel_h[...].dtype == jnp.bfloat16


def _readme_nnx_block():
  with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "README.md"),
            encoding="utf-8") as f:
    blocks = re.findall(r"^```python\n(.*?)^```", f.read(), flags=re.M | re.S)
  nnx_blocks = [b for b in blocks if "from rumjax.nnx import" in b]
  assert len(nnx_blocks) == 1, "the README has one NNX block"
  return nnx_blocks[0]


def test_readme_nnx_block_trains_as_written():
  code = _readme_nnx_block()
  for used in ("nnx.RNN(RUMCell(", "nnx.Optimizer(", "wrt=nnx.Param", "@nnx.jit"):
    assert used in code
  namespace = {"__name__": "readme_nnx_block"}
  exec(compile(code, "README.md NNX block", "exec"), namespace)  # pylint: disable=exec-used
  assert float(namespace["loss"]) < 1.2 < np.log(8)          # it learned to recall


@pytest.mark.parametrize("lam", [0, 1])
def test_rum_zoneout_mixes_with_the_previous_state(lam):
  """RUM zoneout acts on h_{t-1} from the carry: evaluation gives the expectation
  rate * h_{t-1} + (1 - rate) * h~_t, training keeps each unit at h_{t-1} or h~_t."""
  x = _xs(t=1)[:, 0]
  plain = rumjax.nnx.RUMCell(NX, N, lam=lam, rngs=nnx.Rngs(0))
  carry = plain.initialize_carry(x.shape, nnx.Rngs(0))
  h_prev = jax.random.normal(jax.random.key(5), (2, N))
  carry = (carry[0], h_prev) if lam else h_prev
  _, h_new = plain(carry, x)
  make = lambda det: rumjax.nnx.RUMCell(NX, N, lam=lam, zoneout=0.5, deterministic=det,
                                        rngs=nnx.Rngs(0))
  _assert_trees_equal(make(True).rum_params(), plain.rum_params())
  _, h_eval = make(True)(carry, x)
  np.testing.assert_allclose(h_eval, 0.5 * h_prev + 0.5 * h_new, rtol=1e-5, atol=1e-6)
  _, h_train = make(False)(carry, x)
  kept = np.isclose(h_train, h_prev, rtol=1e-6, atol=1e-7)
  assert 0 < kept.mean() < 1
  np.testing.assert_allclose(np.where(kept, h_prev, h_new), h_train, rtol=1e-6, atol=1e-7)

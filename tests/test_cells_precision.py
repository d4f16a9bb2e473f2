"""The comparison cells' precision policy (rumjax/cells/base.py, DESIGN.md section 3.5).

Every registered cell in bfloat16 (params float32, outputs bfloat16, finite values and
gradients under ``nn.RNN``); the unitary cells' rotation path and carried state in float32
(the norm of ``h`` over T = 1,000 steps of the unitary part alone, against the naive
all-bfloat16 computation, which fails the same bound); the lowered HLO (the CPU ignores
``precision``, TPUs and GPUs do not, so the HLO is where to check it); layer-norm
statistics in float32; the composite cells and config builders passing the policy on.
"""

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rumjax.cells import (FastSlowCell, StackedCells, cell_from_config, cell_names,
                          fast_slow_from_config, get_cell_class, make_cell,
                          stacked_from_config)
from rumjax.cells.base import precise, precise_state, resolve_dtype
from rumjax.cells.eurnn import eunn_apply, eunn_layout, eunn_matrix, eunn_num_angles
from rumjax.cells.urnn import cayley_step

B, T, NX, N = 2, 8, 3, 6
UNITARY = ("eurnn", "goru", "urnn")
# Flax's own cells compute in bfloat16 but carry (and so output) float32: their update
# ``(1 - z) n + z h`` promotes with the float32 initial carry.
FLAX_FLOAT32_OUTPUT = ("gru", "lstm")
# A float32 computation's round-off grows at most ~ T eps_32 = 6e-5 over T = 1,000
# steps; bfloat16's (eps 4e-3) is two to four orders above it.
DRIFT_T, DRIFT_N, DRIFT_BOUND = 1000, 64, 5e-5


def _xs(seed=0, shape=(B, T, NX)):
  return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def _leaves_dtypes(tree):
  return {a.dtype for a in jax.tree.leaves(tree)}


# ----------------------------------------------------------- every cell in bfloat16


@pytest.mark.parametrize("name", cell_names())
def test_every_cell_runs_in_bfloat16(name):
  cell = make_cell(name, N, dtype="bfloat16")   # a dtype name, as a config gives it
  assert cell.dtype == jnp.bfloat16 and cell.param_dtype == jnp.float32
  rnn = nn.RNN(cell, return_carry=True)
  xs = _xs(1)
  variables = rnn.init(jax.random.key(0), xs)
  assert _leaves_dtypes(variables) == {jnp.dtype(jnp.float32)}
  if name == "goru":
    # modReLU with its bias at 2 jumps by 4 where a unit's input crosses 0, so one rounding
    # can flip a unit (2.07 of 7.6 measured): compare the continuous b = 0 instead.
    variables = jax.tree_util.tree_map_with_path(
        lambda path, a: jnp.zeros_like(a) if "mod_bias" in jax.tree_util.keystr(path) else a,
        variables)

  def loss(v):
    carry, ys = rnn.apply(v, xs)
    return jnp.sum(ys.astype(jnp.float32) ** 2), (carry, ys)

  (value, (carry, ys)), grads = jax.value_and_grad(loss, has_aux=True)(variables)
  expected = jnp.float32 if name in FLAX_FLOAT32_OUTPUT else jnp.bfloat16
  assert ys.dtype == expected and ys.shape == (B, T, N)
  # The values are the float32 policy's with the same parameters, to bfloat16's precision:
  # 5e-2 of the largest output at most over these 8 steps (measured 2.5e-3 to 2.1e-2, eps_bf16
  # = 2^-8 per operation).
  _, ys32 = nn.RNN(make_cell(name, N), return_carry=True).apply(variables, xs)
  scale = float(jnp.max(jnp.abs(ys32)))
  assert float(jnp.max(jnp.abs(ys.astype(jnp.float32) - ys32))) <= 5e-2 * scale
  carry_dtype = jnp.float32 if name in UNITARY + FLAX_FLOAT32_OUTPUT else jnp.bfloat16
  if name == "rum":   # RUM's carry is its own (rumjax/cells/rum.py); R, if any, float32
    carry_dtype = jax.tree.leaves(carry)[-1].dtype
  assert _leaves_dtypes(carry) <= {jnp.dtype(carry_dtype), jnp.dtype(jnp.float32)}
  assert jax.tree.leaves(carry)[-1].dtype == carry_dtype
  assert np.isfinite(float(value)) and float(value) > 0
  assert all(np.all(np.isfinite(np.asarray(g))) for g in jax.tree.leaves(grads))
  assert _leaves_dtypes(grads) == {jnp.dtype(jnp.float32)}


@pytest.mark.parametrize("name", cell_names())
def test_float32_policy_unchanged(name):
  """``dtype=None`` with float32 inputs is float32 throughout, carry included."""
  rnn = nn.RNN(make_cell(name, N), return_carry=True)
  xs = _xs(2)
  carry, ys = rnn.apply(rnn.init(jax.random.key(0), xs), xs)
  assert ys.dtype == jnp.float32 and _leaves_dtypes(carry) == {jnp.dtype(jnp.float32)}


def test_urnn_orthogonal_matrix_float32_whatever_param_dtype():
  """A bfloat16 W would be orthogonal only to ~4e-3: the uRNN keeps W float32; its other
  parameters follow ``param_dtype``."""
  cell = make_cell("urnn", N, dtype="bfloat16", param_dtype="bfloat16")
  x = _xs(5)[:, 0]
  params = cell.init(jax.random.key(0), cell.initialize_carry(jax.random.key(0), x.shape),
                     x)["params"]
  assert params["recurrent_orthogonal"].dtype == jnp.float32
  assert params["kernel_x"].dtype == params["bias"].dtype == jnp.bfloat16


def test_resolve_dtype_names_and_errors():
  assert resolve_dtype("bfloat16") == jnp.bfloat16 and resolve_dtype(None) is None
  assert resolve_dtype(jnp.float32) == jnp.float32
  assert precise(jnp.bfloat16) == jnp.float32 and precise(jnp.float32) == jnp.float32
  with pytest.raises(ValueError, match=r"^dtype='bf16' is not a known dtype name; choose "
                     r"one of float32, bfloat16\.$"):
    make_cell("eurnn", N, dtype="bf16")
  with pytest.raises(ValueError, match="param_dtype='half'"):
    cell_from_config("gru", N, {"param_dtype": "half"})
  with pytest.raises(ValueError, match="param_dtype=<class 'int'> is not a floating"):
    make_cell("lnlstm", N, param_dtype=int)


COMPARISON = ("eurnn", "goru", "urnn", "fwln", "lnlstm")   # the cells of base.py


@pytest.mark.parametrize("name", ["urnn", "lnlstm"])
def test_dtype_none_promotes_the_carry_too(name):
  """``dtype=None``: the computation dtype is the promotion of the inputs, the first kernel
  and the carry (base.py, Flax's rule). bfloat16 inputs and parameters with a float32
  carry compute and output float32; with a bfloat16 carry, bfloat16."""
  cell = get_cell_class(name)(N, param_dtype=jnp.bfloat16)   # (make_cell asks for dtype)
  x = _xs(7)[:, 0].astype(jnp.bfloat16)
  carry32 = make_cell(name, N).initialize_carry(jax.random.key(0), x.shape)
  variables = jax.jit(cell.init)(jax.random.key(0), carry32, x)
  carry16 = jax.tree.map(lambda a: a.astype(jnp.bfloat16), carry32)
  step = jax.jit(cell.apply)
  assert step(variables, carry32, x)[1].dtype == jnp.float32
  assert step(variables, carry16, x)[1].dtype == jnp.bfloat16


def test_precise_state_never_lowers_the_state():
  """``precise_state``: the carried state in ``precise(dtype)``, never below its own dtype
  (a float64 carry under a float32 computation stays float64)."""
  assert precise_state(jnp.ones(3, jnp.bfloat16), jnp.bfloat16).dtype == jnp.float32
  with jax.enable_x64(True):
    assert precise_state(jnp.ones(3, jnp.float64), jnp.float32).dtype == jnp.float64


# --------------------------------------------- the unitary path: norm drift over T


def _unit_rows(shape, dtype=jnp.float32, seed=3):
  h = jax.random.normal(jax.random.key(seed), shape)
  return (h / jnp.linalg.norm(h, axis=-1, keepdims=True)).astype(dtype)


def _norm_drift(h):
  """``max | |h_T| / |h_0| - 1 |`` for unit ``h_0`` (float64 norms)."""
  return float(np.max(np.abs(np.linalg.norm(np.asarray(h, np.float64), axis=-1) - 1)))


def _unitary_part_alone(name, params):
  """Parameters reducing the cell to its unitary part with no input: ``h_t = W h_{t-1}``
  (modReLU bias 0; GORU's reset gate saturated open, update gate shut)."""
  params = dict(params)
  if name == "goru":
    params["bias"] = jnp.concatenate([jnp.full((DRIFT_N,), 30.0), jnp.full((DRIFT_N,), -30.0)])
    params["mod_bias"] = jnp.zeros((DRIFT_N,))
  else:
    params["bias"] = jnp.zeros((DRIFT_N,))
  return params


@pytest.mark.parametrize("name", UNITARY)
def test_unitary_cell_norm_drift_bounded_in_bfloat16(name):
  rnn = nn.RNN(make_cell(name, DRIFT_N, dtype=jnp.bfloat16), return_carry=True)
  xs = jnp.zeros((4, DRIFT_T, 1), jnp.bfloat16)
  h0 = _unit_rows((4, DRIFT_N))
  variables = rnn.init(jax.random.key(0), xs[:, :2], initial_carry=h0)
  params = {"cell": _unitary_part_alone(name, variables["params"]["cell"])}
  carry, ys = jax.jit(lambda p: rnn.apply({"params": p}, xs, initial_carry=h0))(params)
  assert carry.dtype == jnp.float32 and ys.dtype == jnp.bfloat16
  assert _norm_drift(carry) <= DRIFT_BOUND
  # The outputs are rounded to bfloat16 once, not step after step.
  assert _norm_drift(ys[:, -1]) <= 2 ** -7


def _naive_eunn(thetas, h, capacity=2):
  """The EUNN as a bfloat16 computation: cos/sin, the layers and the state in bfloat16."""
  perm, angle_index, sign = eunn_layout(h.shape[-1], capacity, False)
  padded = jnp.concatenate([thetas, jnp.zeros((1,), thetas.dtype)])
  cos, sin = jnp.cos(padded)[angle_index], jnp.sin(padded)[angle_index] * sign.astype(h.dtype)
  for l in range(perm.shape[0]):
    h = cos[l] * h + sin[l] * jnp.take(h, perm[l], axis=-1)
  return h


def test_naive_bfloat16_unitary_paths_fail_the_drift_bound():
  """What the policy prevents: the same T steps computed all in bfloat16."""
  thetas = jax.random.uniform(jax.random.key(1), (eunn_num_angles(DRIFT_N),), jnp.float32,
                              -np.pi, np.pi).astype(jnp.bfloat16)
  w = nn.initializers.orthogonal()(jax.random.key(2), (DRIFT_N, DRIFT_N)).astype(jnp.bfloat16)
  h0 = _unit_rows((4, DRIFT_N), jnp.bfloat16)
  run = lambda step: jax.jit(lambda h: jax.lax.fori_loop(0, DRIFT_T, lambda _, h: step(h),
                                                         h))(h0)
  eunn_drift = _norm_drift(run(lambda h: _naive_eunn(thetas, h)))
  urnn_drift = _norm_drift(run(lambda h: h @ w))
  assert eunn_drift > 100 * DRIFT_BOUND and urnn_drift > 100 * DRIFT_BOUND


def test_eunn_matrix_orthogonal_for_bfloat16_angles():
  """The Givens layers of bfloat16 angles, computed in float32, form a rotation to
  float32 accuracy; with cos/sin rounded to bfloat16 (c^2 + s^2 != 1) they do not."""
  thetas = jax.random.uniform(jax.random.key(4), (eunn_num_angles(DRIFT_N, 8),),
                              jnp.float32, -np.pi, np.pi).astype(jnp.bfloat16)
  eye = np.eye(DRIFT_N)
  w = np.asarray(eunn_matrix(thetas, DRIFT_N, capacity=8), np.float64)
  assert w.dtype == np.float64 and np.max(np.abs(w.T @ w - eye)) <= 1e-6
  naive = np.asarray(_naive_eunn(thetas, jnp.eye(DRIFT_N, dtype=jnp.bfloat16), 8), np.float64)
  assert np.max(np.abs(naive.T @ naive - eye)) > 1e-3


def test_eunn_apply_of_bfloat16_is_the_float32_computation_rounded_once():
  """``eunn_apply`` of bfloat16 angles and state computes cos, sin and every layer in
  float32 (``precise``) and rounds the result to ``h``'s dtype once: the float32
  computation of the same values, rounded to bfloat16 (bit for bit)."""
  thetas = jax.random.uniform(jax.random.key(7), (eunn_num_angles(DRIFT_N, 8),),
                              jnp.float32, -np.pi, np.pi).astype(jnp.bfloat16)
  h = _unit_rows((4, DRIFT_N), jnp.bfloat16)
  got = eunn_apply(thetas, h, capacity=8)
  assert got.dtype == jnp.bfloat16
  assert eunn_apply(thetas.astype(jnp.float32), h, capacity=8).dtype == jnp.bfloat16
  want = eunn_apply(thetas.astype(jnp.float32), h.astype(jnp.float32), capacity=8)
  np.testing.assert_array_equal(np.float32(got), np.float32(want.astype(jnp.bfloat16)))


def test_cayley_step_stays_orthogonal_with_bfloat16_gradients():
  """100 Stiefel steps from bfloat16 gradients (a bfloat16 model's) keep ``W`` orthogonal
  to float32 accuracy; the same steps computed in bfloat16 leave the manifold."""
  w0 = nn.initializers.orthogonal()(jax.random.key(5), (16, 16))
  grads = jax.random.normal(jax.random.key(6), (100, 16, 16)).astype(jnp.bfloat16)
  steps = lambda w: jax.lax.fori_loop(0, 100, lambda k, w: cayley_step(w, grads[k], 0.05), w)
  # W^T W in float64 on the host: at the backend's default (TF32 on a GPU, 11 significant
  # bits) the check itself would round far above 1e-5.
  err = lambda w: float(np.max(np.abs(np.asarray(w, np.float64).T
                                      @ np.asarray(w, np.float64) - np.eye(16))))
  w = jax.jit(steps)(w0)
  assert w.dtype == jnp.float32 and err(w) <= 1e-5
  f32 = lambda a: a.astype(jnp.float32)   # (CPU has no bfloat16 LU: solve in float32)

  def naive(w, g):   # the products in bfloat16, W rounded to bfloat16 after each step
    a = 0.025 * (g @ w.T - w @ g.T)
    eye = jnp.eye(16, dtype=w.dtype)
    return jnp.linalg.solve(f32(eye + a), f32((eye - a) @ w)).astype(jnp.bfloat16)

  w_naive = jax.lax.fori_loop(0, 100, lambda k, w: naive(w, grads[k]),
                              w0.astype(jnp.bfloat16))
  assert err(w_naive.astype(jnp.float32)) > 1e-3


def test_cayley_step_of_a_bfloat16_matrix_computes_in_float32():
  """``cayley_step`` of a bfloat16 ``W`` (and gradient) computes in at least float32 and
  rounds ``W_new`` to bfloat16 once: the float32 step of the same values, rounded."""
  w = nn.initializers.orthogonal()(jax.random.key(8), (8, 8)).astype(jnp.bfloat16)
  g = jax.random.normal(jax.random.key(9), (8, 8)).astype(jnp.bfloat16)
  got = cayley_step(w, g, 0.1)
  assert got.dtype == jnp.bfloat16
  want = cayley_step(w.astype(jnp.float32), g.astype(jnp.float32), 0.1).astype(jnp.bfloat16)
  np.testing.assert_array_equal(np.float32(got), np.float32(want))


# ----------------------------------------------------------------- the lowered HLO

DOT = re.compile(r"stablehlo\.dot_general .*precision = \[(\w+), (\w+)\].*"
                 r": \(tensor<[\dx]*x?(\w+)>, tensor<[\dx]*x?(\w+)>\)")


def dot_generals(text):
  """``[(precision, lhs dtype, rhs dtype)]`` of every dot_general of a lowered module."""
  out = []
  for line in text.splitlines():
    if "stablehlo.dot_general" in line:
      m = DOT.search(line)
      assert m, line
      assert m.group(1) == m.group(2), line
      out.append((m.group(1), m.group(3), m.group(4)))
  return out


def float32_dots_not_highest(text):
  """The float32 dot_generals (the unitary path's, under bfloat16) below HIGHEST."""
  return [d for d in dot_generals(text) if "f32" in d[1:] and d[0] != "HIGHEST"]


def _lowered_step(name, with_grad):
  cell = make_cell(name, N, dtype=jnp.bfloat16)
  x = _xs(3)[:, 0]
  carry = cell.initialize_carry(jax.random.key(0), x.shape)
  variables = cell.init(jax.random.key(0), carry, x)

  def loss(v, carry, x):
    new_carry, y = cell.apply(v, carry, x)
    return jnp.sum(y.astype(jnp.float32) ** 2) + jnp.sum(new_carry ** 2)

  f = jax.grad(loss, argnums=(0, 1)) if with_grad else cell.apply
  return jax.jit(f).lower(variables, carry, x).as_text()


def test_hlo_check_can_fail():
  """The checker flags a float32 dot at the default precision (the naive W h)."""
  text = jax.jit(lambda h, w: h @ w).lower(jnp.ones((3, N)), jnp.eye(N)).as_text()
  assert float32_dots_not_highest(text) == [("DEFAULT", "f32", "f32")]


@pytest.mark.parametrize("with_grad", [False, True])
def test_hlo_urnn_unitary_dots_highest(with_grad):
  """uRNN in bfloat16: ``W h`` (and, in the gradient, ``W^T dh`` and ``dW``) are float32
  dots at HIGHEST; the input projection ``V x`` follows the policy (bfloat16, DEFAULT)."""
  dots = dot_generals(_lowered_step("urnn", with_grad))
  highest = [d for d in dots if d[0] == "HIGHEST"]
  assert highest and all(d[1:] == ("f32", "f32") for d in highest)
  assert float32_dots_not_highest(_lowered_step("urnn", with_grad)) == []
  assert ("DEFAULT", "bf16", "bf16") in dots
  assert len(highest) == (3 if with_grad else 1)


@pytest.mark.parametrize("name", ["eurnn", "goru"])
@pytest.mark.parametrize("with_grad", [False, True])
def test_hlo_eunn_path_elementwise_float32(name, with_grad):
  """EURNN/GORU in bfloat16: the Givens layers are elementwise (no dot_general on the
  unitary path: every dot is a bfloat16 input/gate projection) and their cos/sin are
  float32."""
  text = _lowered_step(name, with_grad)
  assert all(d == ("DEFAULT", "bf16", "bf16") for d in dot_generals(text))
  trig = re.findall(r"stablehlo\.(?:cosine|sine) .*: tensor<[\dx]*x?(\w+)>", text)
  assert trig and set(trig) == {"f32"}


def test_hlo_cayley_step_dots_highest():
  text = jax.jit(lambda w, g: cayley_step(w, g, 0.1)).lower(
      jnp.eye(N), jnp.ones((N, N), jnp.bfloat16)).as_text()
  dots = dot_generals(text)
  assert len(dots) == 3 and all(d == ("HIGHEST", "f32", "f32") for d in dots)


@pytest.mark.parametrize("name", COMPARISON)
def test_hlo_precision_highest_reaches_every_dot(name):
  """``precision="highest"`` reaches every dot of the step and of its gradient: the input
  and gate matmuls (base.py's ``matmul``) as well as the unitary ones. Lowering only."""
  cell = make_cell(name, N, precision="highest")
  x = _xs(6)[:, 0]
  carry = cell.initialize_carry(jax.random.key(0), x.shape)
  variables = cell.init(jax.random.key(0), carry, x)

  def loss(v, carry):
    new_carry, y = cell.apply(v, carry, x)
    return jnp.sum(y ** 2) + sum(jnp.sum(c ** 2) for c in jax.tree.leaves(new_carry))

  dots = dot_generals(jax.jit(jax.grad(loss, argnums=(0, 1))).lower(variables, carry).as_text())
  assert dots and {d[0] for d in dots} == {"HIGHEST"}, dots


@pytest.mark.parametrize("name", ["lnlstm", "fwln"])
def test_layer_norm_statistics_float32(name):
  """Flax's ``nn.LayerNorm(dtype=bfloat16)`` reduces in float32: every sum of a
  bfloat16 cell step (the mean and variance) is a float32 reduction."""
  text = _lowered_step(name, with_grad=False)
  sums = re.findall(r"stablehlo\.reduce\(.*applies stablehlo\.add .*-> tensor<[\dx]*x?(\w+)>",
                    text)
  assert len(sums) >= 2 and set(sums) == {"f32"}


# ------------------------------------------------------ composites and config builders


def _sub_cells(cell):
  return cell.cells if isinstance(cell, StackedCells) else (*cell.fast_cells, cell.slow_cell)


def _run_composite(cell):
  """``(carry, ys)`` of ``cell`` under ``nn.RNN``; float32 parameters, finite outputs and
  gradients."""
  rnn = nn.RNN(cell, return_carry=True)
  xs = _xs(4)
  variables = rnn.init(jax.random.key(0), xs)
  grads = jax.grad(lambda v: jnp.sum(rnn.apply(v, xs)[1].astype(jnp.float32) ** 2))(
      variables)
  carry, ys = rnn.apply(variables, xs)
  assert _leaves_dtypes(variables) == {jnp.dtype(jnp.float32)}
  assert np.all(np.isfinite(np.asarray(ys, np.float32)))
  assert all(np.all(np.isfinite(np.asarray(g))) for g in jax.tree.leaves(grads))
  return carry, ys


def test_stacked_from_config_passes_the_policy():
  stack = stacked_from_config(dict(cell="goru", hidden_size=N, num_layers=2,
                                   dtype="bfloat16", param_dtype=None))
  assert all(c.dtype == jnp.bfloat16 and c.param_dtype == jnp.float32
             for c in _sub_cells(stack))
  carry, ys = _run_composite(stack)
  assert ys.dtype == jnp.bfloat16 and _leaves_dtypes(carry) == {jnp.dtype(jnp.float32)}


def test_fast_slow_from_config_passes_the_policy():
  cell = fast_slow_from_config(dict(fast_cell="lnlstm", fast_size=N, slow_cell="eurnn",
                                    slow_size=4, dtype="bfloat16"))
  assert all(c.dtype == jnp.bfloat16 for c in _sub_cells(cell))
  (fast, slow), ys = _run_composite(cell)
  assert ys.dtype == jnp.bfloat16
  assert _leaves_dtypes(fast) == {jnp.dtype(jnp.bfloat16)} and slow.dtype == jnp.float32
  # A role's own dtype overrides the shared one.
  cell = fast_slow_from_config(dict(fast_size=N, slow_cell="urnn", slow_size=4,
                                    dtype="bfloat16", slow_dtype="float32"))
  assert cell.fast_cells[0].dtype == jnp.bfloat16 and cell.slow_cell.dtype == jnp.float32
  with pytest.raises(ValueError, match="dtype='fp8' is not a known dtype name"):
    fast_slow_from_config(dict(fast_size=N, slow_cell="goru", slow_size=4, dtype="fp8"))


def test_composite_policy_fields_reach_the_sub_cells_and_roles_override():
  """``precision`` and ``param_dtype`` of a composite override every sub-cell's
  (``prepare_cells``); in ``fast_slow_from_config`` a role's own ``slow_dtype`` /
  ``fast_precision`` overrides the shared field. Construction only."""
  highest = jax.lax.Precision.HIGHEST
  for cell in (StackedCells((make_cell("fwln", N), make_cell("urnn", N)), precision="highest",
                            param_dtype="bfloat16"),
               FastSlowCell((make_cell("lnlstm", N),) * 2, make_cell("goru", 4),
                            precision="highest", param_dtype="bfloat16")):
    assert all(c.precision == highest and c.param_dtype == jnp.bfloat16
               for c in _sub_cells(cell))
  cell = fast_slow_from_config(dict(fast_size=N, slow_cell="urnn", slow_size=4,
                                    dtype="bfloat16", slow_dtype="float32", precision="high",
                                    fast_precision="highest"))
  assert [c.dtype for c in _sub_cells(cell)] == [jnp.bfloat16, jnp.bfloat16, jnp.float32]
  assert [c.precision for c in _sub_cells(cell)] == [highest, highest,
                                                     jax.lax.Precision.HIGH]


@pytest.mark.parametrize("composite", ["stacked", pytest.param("fast_slow",
                                                                marks=pytest.mark.slow)])
def test_composite_dtype_field_reaches_every_sub_cell(composite):
  if composite == "stacked":
    cell = StackedCells((make_cell("fwln", N), make_cell("urnn", N)), dtype=jnp.bfloat16)
  else:
    cell = FastSlowCell((make_cell("lnlstm", N),) * 2, make_cell("goru", 4),
                        dtype="bfloat16")
  assert all(c.dtype == jnp.bfloat16 for c in _sub_cells(cell))
  _, ys = _run_composite(cell)
  assert ys.dtype == jnp.bfloat16
  # None leaves every sub-cell's own policy.
  mixed = StackedCells((make_cell("fwln", N, dtype=jnp.bfloat16), make_cell("urnn", N)))
  assert [c.dtype for c in mixed.cells] == [jnp.bfloat16, None]

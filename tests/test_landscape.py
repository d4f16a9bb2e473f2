"""``rumjax.analysis.landscape`` (Figure 8): the rotation weights of RUM and GORU, filter-normalised
directions, the line and plane evaluations, local minima, and ``launch.landscape`` end to
end on tiny trained recall runs."""

import functools
import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from absl import flags

import tasks
from launch import landscape as launch_landscape
from rumjax import analysis
from rumjax.analysis import landscape
from rumjax.core import rum
from rumjax.cells import eurnn
from rumjax.training import loop

NH = 8


def _config(cell):
  """A tiny recall config (T=6, hidden 8, batch 8)."""
  task = tasks.get_task("recall")
  config = task.get_config()
  with config.unlocked():
    config.model.cell = cell
    config.model.hidden_size = NH
    config.batch_size, config.length = 8, 6
    config.num_train, config.num_dev, config.num_test = 64, 16, 16
    config.num_steps, config.log_every, config.checkpoint_every = 3, 1, 3
    config.evals = ml_collections.ConfigDict()
  return task, config


@functools.lru_cache(maxsize=None)
def _model_params(cell, seed=0):
  """(task, config, model, batch, loss_fn, params) of a freshly initialised tiny model."""
  task, config = _config(cell)
  loss_fn, batch = landscape.first_batch_loss(task, config)
  model = task.build_model(config)
  init = jax.jit(functools.partial(model.init, train=False))
  params = init(jax.random.key(seed), batch)["params"]
  return task, config, model, batch, loss_fn, params


def _leaf(tree, path):
  for key in path:
    tree = tree[key]
  return tree


# ------------------------------------------------------------------ selected weights


def test_rum_blocks_are_the_rotation_kernels():
  *_, params = _model_params("rum")
  blocks = landscape.rotation_param_paths("rum", params)
  cell = ("rnn", "cell")
  assert blocks == [
      landscape.Block(cell + ("kernel_x",), slice(0, NH), "W^tau_xh"),
      landscape.Block(cell + ("kernel_x",), slice(2 * NH, 3 * NH), "W~_xh"),
      landscape.Block(cell + ("kernel_h",), slice(0, NH), "W^tau_hh")]
  mask = landscape.rotation_mask(params, blocks)
  nx = params["rnn"]["cell"]["kernel_x"].shape[0]
  assert landscape.num_selected(mask) == 2 * nx * NH + NH * NH
  assert not np.any(mask["head"]["kernel"]) and not np.any(mask["rnn"]["cell"]["bias"])


def test_rum_mask_is_exactly_where_one_step_rotation_depends_on_the_kernels():
  """The gradient of one step's Rotation(e, tau) (from rum_step itself) w.r.t. the kernels
  is non-zero exactly on the selected columns."""
  *_, params = _model_params("rum")
  cell = params["rnn"]["cell"]
  mask = landscape.rotation_mask(params, landscape.rotation_param_paths("rum", params))
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(3, cell["kernel_x"].shape[0])), jnp.float32)
  carry = (jnp.eye(NH)[None].repeat(3, 0), jnp.asarray(rng.normal(size=(3, NH)), jnp.float32))
  weights = jnp.asarray(rng.normal(size=(NH, NH)), jnp.float32)

  def rotation(kx, kh):
    _, (_, plane) = rum.rum_step(carry, x @ kx + cell["bias"], kh, lam=1, eta=None,
                                 activation=jax.nn.relu, update_gate=True)
    u, q = plane.u, plane.q
    m = jnp.stack([jnp.stack([plane.m_uu, plane.m_uq], -1),
                   jnp.stack([plane.m_qu, plane.m_qq], -1)], -2)
    uq = jnp.stack([u, q], -1)
    return jnp.sum(jnp.einsum("bia,bac,bjc->bij", uq, m, uq) * weights)

  gx, gh = jax.jit(jax.grad(rotation, argnums=(0, 1)))(cell["kernel_x"], cell["kernel_h"])
  for g, m in ((gx, mask["rnn"]["cell"]["kernel_x"]), (gh, mask["rnn"]["cell"]["kernel_h"])):
    touched = np.any(np.abs(np.asarray(g)) > 0, axis=0)
    np.testing.assert_array_equal(touched, m.any(axis=0))


def test_direction_is_zero_off_the_selection_and_moves_the_rotation():
  task, config, model, batch, loss_fn, params = _model_params("rum")
  mask = landscape.rotation_mask(params, landscape.rotation_param_paths("rum", params))
  d = landscape.filter_normalized_direction(jax.random.key(1), params, mask)
  for leaf, m in zip(jax.tree.leaves(d), jax.tree.leaves(mask)):
    assert np.all(np.asarray(leaf)[m == 0] == 0)
    assert np.all(np.asarray(leaf)[m == 1] != 0)
  moved = jax.tree.map(lambda w, di: w + 0.5 * di, params, d)
  # Only the selected weights moved (the head, the biases, the u blocks did not) ...
  for w, w2, m in zip(*(jax.tree.leaves(t) for t in (params, moved, mask))):
    np.testing.assert_array_equal(np.asarray(w)[m == 0], np.asarray(w2)[m == 0])
  # ... and the rotation angles of the model did.
  sown = jax.jit(lambda p: model.apply({"params": p}, batch, train=False,
                                      mutable=["intermediates"])[1])
  cos = lambda p: analysis.sown_cos(sown(p))["rnn"]     # cos(theta_t), [batch, T]
  assert np.max(np.abs(cos(moved) - cos(params))) > 1e-3
  assert float(jax.jit(loss_fn)(moved)) != float(jax.jit(loss_fn)(params))


def test_goru_selects_the_angles_of_its_orthogonal_kernel():
  *_, params = _model_params("goru")
  blocks = landscape.rotation_param_paths("goru", params)
  assert blocks == [landscape.Block(("rnn", "cell", "thetas"), None, "thetas: angles of U")]
  mask = landscape.rotation_mask(params, blocks)
  assert landscape.num_selected(mask) == params["rnn"]["cell"]["thetas"].size
  d = landscape.filter_normalized_direction(jax.random.key(2), params, mask)
  thetas = params["rnn"]["cell"]["thetas"]
  u0 = eurnn.eunn_matrix(thetas, NH)
  u1 = eurnn.eunn_matrix(thetas + 0.3 * d["rnn"]["cell"]["thetas"], NH)
  assert np.max(np.abs(u1 - u0)) > 1e-3
  np.testing.assert_allclose(u1 @ u1.T, np.eye(NH), atol=1e-5)    # still orthogonal
  assert not np.any(d["rnn"]["cell"]["kernel_h"]) and not np.any(d["head"]["kernel"])


def test_other_cells_are_an_error():
  with pytest.raises(ValueError, match="'lstm' has none"):
    landscape.rotation_param_paths("lstm", {"rnn": {}})
  with pytest.raises(ValueError, match="no 'goru' cell parameters"):
    landscape.rotation_param_paths("goru", {"rnn": {"cell": {"kernel": np.zeros((2, 2))}}})


# ------------------------------------------------------------- filter normalisation


def test_each_filter_has_the_norm_of_the_weights_filter():
  *_, params = _model_params("rum")
  mask = landscape.rotation_mask(params, landscape.rotation_param_paths("rum", params))
  d = landscape.filter_normalized_direction(jax.random.key(3), params, mask)
  for name in ("kernel_x", "kernel_h"):
    w, dd = (np.asarray(t["rnn"]["cell"][name]) for t in (params, d))
    selected = mask["rnn"]["cell"][name].any(axis=0)
    np.testing.assert_allclose(np.linalg.norm(dd, axis=0)[selected],
                               np.linalg.norm(w, axis=0)[selected], rtol=1e-5)
    assert np.all(np.linalg.norm(dd, axis=0)[~selected] == 0)
  # A vector is one filter; a zero direction stays zero.
  v = jnp.arange(1.0, 5.0)
  out = landscape.normalize_filters(jnp.array([3.0, 0.0, 4.0, 0.0]), v)
  np.testing.assert_allclose(np.linalg.norm(out), np.linalg.norm(v), rtol=1e-6)
  assert not np.any(landscape.normalize_filters(jnp.zeros(3), v[:3]))


# ----------------------------------------------------------------- line and plane


def test_line_equals_a_loop_and_the_plane_at_beta_zero_is_the_line():
  *_, loss_fn, params = _model_params("rum")
  mask = landscape.rotation_mask(params, landscape.rotation_param_paths("rum", params))
  d1, d2 = (landscape.filter_normalized_direction(k, params, mask)
            for k in jax.random.split(jax.random.key(4)))
  alphas = np.linspace(-1.0, 1.0, 5)
  line = landscape.loss_along_line(loss_fn, params, d1, alphas)
  jitted = jax.jit(loss_fn)
  loop_values = [float(jitted(jax.tree.map(lambda w, d: w + a * d, params, d1)))
                 for a in alphas]
  np.testing.assert_allclose(line, loop_values, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(
      landscape.loss_along_line(loss_fn, params, d1, alphas, batch_size=2), line,
      rtol=1e-5, atol=1e-6)
  plane = landscape.loss_on_plane(loss_fn, params, d1, d2, alphas, [-0.5, 0.0, 0.5])
  assert plane.shape == (5, 3)
  np.testing.assert_allclose(plane[:, 1], line, rtol=1e-5, atol=1e-6)
  moved = jax.tree.map(lambda w, a, b: w + 0.5 * a - 0.5 * b, params, d1, d2)
  np.testing.assert_allclose(plane[3, 0], float(loss_fn(moved)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("values, expected", [
    ([3, 2, 1, 2, 3], 1),                     # one valley
    ([3, 1, 3, 1, 3], 2),                     # two
    ([1, 2, 3, 4], 0),                        # monotone up
    ([4, 3, 2, 1], 0),                        # monotone down
    ([1, 2, 1], 0),                           # minima at the ends do not count
    ([5, 5, 5], 0),                           # flat
    ([3, 1, 1, 1, 3], 1),                     # a plateau counts once
    ([3, 1, 1, 2, 1, 1, 3], 2),
    ([1, 1, 2, 3], 0),                        # plateau touching an end
    ([3, 2, 1, 1], 0),
    ([3, 1, 1, 0.5, 2], 1),                   # a shelf on the way down is no minimum
    ([3, np.nan, 1, 2], 1),                   # non-finite is a wall
    ([], 0), ([1], 0),
])
def test_count_local_minima(values, expected):
  assert landscape.count_local_minima(values) == expected


def test_count_local_minima_tolerance_and_2d():
  assert landscape.count_local_minima([3, 1, 1.0001, 1, 3]) == 2
  assert landscape.count_local_minima([3, 1, 1.0001, 1, 3], tol=1e-3) == 1
  a = np.add.outer(np.linspace(-1, 1, 5) ** 2, np.linspace(-1, 1, 5) ** 2)
  assert landscape.count_local_minima_2d(a) == 1
  assert landscape.count_local_minima_2d(-a) == 0
  assert landscape.count_local_minima_2d(np.ones((4, 4))) == 0


# ---------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def workdirs(tmp_path_factory):
  """Tiny RUM and GORU recall runs, 3 steps each."""
  out = {}
  for cell in ("rum", "goru"):
    task, config = _config(cell)
    out[cell] = str(tmp_path_factory.mktemp(cell))
    loop.train_and_evaluate(config, out[cell], task)
  return out


def _run(argv):
  values = flags.FlagValues()
  launch_landscape.define_flags(values)
  values(["landscape", *argv])
  return launch_landscape.run(values)


def test_launch_writes_figures_and_json(workdirs, tmp_path, capsys):
  results = _run([f"--rum_workdir={workdirs['rum']}", f"--goru_workdir={workdirs['goru']}",
                  f"--out_dir={tmp_path}", "--points=5", "--grid=3", "--span=0.5"])
  for name in ("landscape_1d.png", "landscape_2d.png"):
    with open(tmp_path / name, "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  saved = json.loads((tmp_path / "landscape.json").read_text())
  assert saved["settings"] == {"points": 5, "grid": 3, "span": 0.5, "seed": 0}
  for cell in ("rum", "goru"):
    r = saved[cell]
    assert r["cell"] == cell and r["step"] == 3
    assert r["workdir"] == os.path.basename(workdirs[cell])   # no machine path
    assert len(r["line"]) == 5 and np.shape(r["plane"]) == (3, 3)
    assert r["local_minima_1d"] == results[cell]["local_minima_1d"]
    np.testing.assert_allclose(r["line"][2], r["loss_at_params"], rtol=1e-5)
    np.testing.assert_allclose(np.asarray(r["plane"])[:, 1], np.asarray(r["line"])[::2],
                               rtol=1e-5)
  assert saved["rum"]["varied"][0] == "rnn/cell/kernel_x[:, 0:8] (W^tau_xh)"
  assert saved["goru"]["varied"] == ["rnn/cell/thetas (thetas: angles of U)"]
  out = capsys.readouterr().out
  assert f"local minima {results['goru']['local_minima_1d']} along the line" in out


def test_launch_errors_name_the_path(workdirs, tmp_path):
  missing = str(tmp_path / "nowhere")
  with pytest.raises(SystemExit, match=f"no training workdir at '{missing}'"):
    _run([f"--rum_workdir={missing}", f"--goru_workdir={workdirs['goru']}",
          f"--out_dir={tmp_path}"])
  empty = tmp_path / "empty"
  empty.mkdir()
  (empty / "config.json").write_text(
      (open(os.path.join(workdirs["rum"], "config.json")).read()))
  with pytest.raises(SystemExit, match="no checkpoint found in") as err:
    _run([f"--rum_workdir={empty}", f"--goru_workdir={workdirs['goru']}",
          f"--out_dir={tmp_path}"])
  assert str(empty) in str(err.value) and "\n" not in str(err.value)
  with pytest.raises(SystemExit, match="is a 'goru' run; expected a 'rum' run"):
    _run([f"--rum_workdir={workdirs['goru']}", f"--goru_workdir={workdirs['goru']}",
          f"--out_dir={tmp_path}"])
  # --points=0 wrote an empty figure; the sizes are checked before any run is read.
  for flag, message in [("--points=1", r"^error: points=1 must be an integer >= 2\.$"),
                        ("--grid=0", r"^error: grid=0 must be an integer >= 2\.$"),
                        ("--span=0", r"^error: span=0\.0 must be > 0\.$")]:
    with pytest.raises(SystemExit, match=message):
      _run([f"--rum_workdir={missing}", f"--goru_workdir={workdirs['goru']}",
            f"--out_dir={tmp_path / 'never'}", flag])
  assert not (tmp_path / "never").exists()


def test_launch_keeps_existing_figures_and_the_runs(workdirs, tmp_path):
  """The default --out_dir is docs/figures: a quick try replaced the committed figures.
  An existing output is refused without --overwrite, and no output goes into a workdir."""
  out = tmp_path / "figs"
  out.mkdir()
  (out / "landscape.json").write_text("keep")
  base = [f"--rum_workdir={workdirs['rum']}", f"--goru_workdir={workdirs['goru']}",
          "--points=3", "--grid=2"]
  with pytest.raises(SystemExit, match=r"^error: --out_dir=.*landscape\.json already exists; "
                     r"pass --overwrite"):
    _run([*base, f"--out_dir={out}"])
  assert (out / "landscape.json").read_text() == "keep"
  inside = os.path.join(workdirs["rum"], "figs")
  with pytest.raises(SystemExit, match=r"lies inside .*, a run this command reads"):
    _run([*base, f"--out_dir={inside}", "--overwrite"])
  assert not os.path.exists(inside)
  _run([*base, f"--out_dir={out}", "--overwrite"])
  assert json.loads((out / "landscape.json").read_text())["settings"]["points"] == 3


def test_line_and_plane_of_a_known_function():
  """losses_at moves the centre by coeffs . directions; the plane's [i, j] lies at
  (alphas[i], betas[j]) (a grid that is not square), for any batch size."""
  params = {"w": jnp.array([1.0, 2.0]), "b": jnp.array(0.5)}
  d1 = {"w": jnp.array([1.0, 0.0]), "b": jnp.array(0.0)}
  d2 = {"w": jnp.array([0.0, 1.0]), "b": jnp.array(1.0)}

  def loss_fn(p):
    return p["w"][0] ** 2 + 3 * p["w"][1] + p["b"]

  def want(a, b):
    return (1 + a) ** 2 + 3 * (2 + b) + 0.5 + b

  alphas, betas = np.array([-1.0, 0.0, 0.5, 2.0]), np.array([-2.0, 1.0, 3.0])
  line = landscape.loss_along_line(loss_fn, params, d1, alphas)
  np.testing.assert_allclose(line, [want(a, 0.0) for a in alphas], rtol=1e-6)
  for batch_size in (None, 2):
    plane = landscape.loss_on_plane(loss_fn, params, d1, d2, alphas, betas,
                                    batch_size=batch_size)
    np.testing.assert_allclose(plane, [[want(a, b) for b in betas] for a in alphas],
                               rtol=1e-6)


def test_the_plane_spans_two_directions(workdirs):
  """landscape_of_run draws d1 and d2 from two keys: the plane is no line in disguise
  (with d2 = d1 it would be symmetric, L(a, b) = L(b, a)); beta = 0 is the line."""
  r = landscape.landscape_of_run(workdirs["rum"], tasks.get_task, points=3, grid=3)
  plane = np.asarray(r["plane"])
  np.testing.assert_allclose(plane[:, 1], r["line"], rtol=1e-5)
  np.testing.assert_allclose(r["line"][1], r["loss_at_params"], rtol=1e-5)
  assert abs(plane[0, 2] - plane[2, 0]) > 1e-4 * abs(plane[0, 2])

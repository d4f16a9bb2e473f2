"""Sequence models built from cells by name: shapes, modes, lengths, and a little learning."""

import importlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

import tasks
from rumjax import models
from rumjax.cells import make_cell

B, T, V = 3, 7, 11


def token_batch(seed=0):
  return {"inputs": np.random.default_rng(seed).integers(0, V, (B, T)).astype(np.int32)}


CELLS = [("rum", {"lam": 1}, None), ("rum", {"lam": 0, "eta": 1.0}, 5),
         ("rum", {"lam": 1, "layer_norm": True, "zoneout": 0.2}, None), ("gru", {}, 5),
         ("lstm", {}, None)]


@pytest.mark.parametrize("name,options,embed_dim", CELLS)
def test_shapes(name, options, embed_dim):
  # Shapes only (tracing, no compilation): jax.eval_shape of init and apply.
  cell = make_cell(name, 8, **options)
  batch = token_batch()
  tagger = models.SequenceTagger(cell=cell, vocab_size=V, num_classes=4, embed_dim=embed_dim)
  classifier = models.SequenceClassifier(cell=cell, vocab_size=V, num_classes=6,
                                         embed_dim=embed_dim)
  rngs = {"dropout": jax.random.key(1)}
  for model, shape in [(tagger, (B, T, 4)), (classifier, (B, 6))]:
    variables = jax.eval_shape(model.init, jax.random.key(0), batch)
    params = variables["params"]
    assert set(params) == {"rnn", "head"} | ({"input"} if embed_dim else set())
    assert set(params["rnn"]) == {"cell"}
    assert params["head"]["kernel"].shape == (8, shape[-1])
    for train in (False, True):
      out = jax.eval_shape(lambda v, b: model.apply(v, b, train=train, rngs=rngs),
                           variables, batch)
      assert out.shape == shape and out.dtype == jnp.float32


def test_zoneout_masks_depend_on_the_rng_only_in_training():
  cell = make_cell("rum", 8, lam=1, zoneout=0.5)
  model = models.SequenceTagger(cell=cell, vocab_size=V, num_classes=4)
  batch = token_batch()
  variables = jax.jit(model.init)(jax.random.key(0), batch)
  run = jax.jit(lambda key, train: model.apply(variables, batch, train=train,
                                               rngs={"dropout": key}), static_argnums=1)
  k1, k2 = jax.random.key(1), jax.random.key(2)
  assert bool(jnp.all(jnp.isfinite(run(k1, True))))
  assert not np.allclose(run(k1, True), run(k2, True))
  np.testing.assert_array_equal(run(k1, False), run(k2, False))
  np.testing.assert_allclose(run(k1, False), model.apply(variables, batch),  # no rng needed
                             rtol=1e-5, atol=1e-6)


def test_classifier_reads_the_last_real_step():
  model = models.SequenceClassifier(cell=make_cell("gru", 8), vocab_size=V, num_classes=3)
  batch = token_batch()
  variables = model.init(jax.random.key(0), batch)
  apply = jax.jit(model.apply)
  lengths = np.array([7, 4, 1], np.int32)
  out = apply(variables, dict(batch, lengths=lengths))
  # Tokens past the lengths do not matter; a full-length row is the unpadded result.
  garbage = np.where(np.arange(T) < lengths[:, None], batch["inputs"], 0).astype(np.int32)
  np.testing.assert_allclose(apply(variables, dict(inputs=garbage, lengths=lengths)), out,
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(apply(variables, batch)[0], out[0], rtol=1e-5, atol=1e-6)
  # Row 1 is the model run on its first 4 tokens only.
  np.testing.assert_allclose(model.apply(variables, {"inputs": batch["inputs"][1:2, :4]})[0],
                             out[1], rtol=1e-5, atol=1e-6)


def test_build_sequence_model_takes_cell_options_from_the_config():
  c = ml_collections.ConfigDict(dict(name="tagger", cell="rum", hidden_size=12, lam=1,
                                     eta=2.0, activation="tanh", dropout_rate=0.3))
  model = models.build_sequence_model(c, "tagger", vocab_size=V, num_classes=4)
  assert isinstance(model, models.SequenceTagger) and model.embed_dim is None
  assert (model.cell.features, model.cell.lam, model.cell.eta, model.cell.activation) == (
      12, 1, 2.0, "tanh")
  c2 = ml_collections.ConfigDict(dict(cell="lstm", hidden_size=6, lam=1, embed_dim=4))
  model = models.build_sequence_model(c2, "classifier", vocab_size=V, num_classes=2)
  assert isinstance(model, models.SequenceClassifier) and model.embed_dim == 4
  with pytest.raises(ValueError, match="kind"):
    models.build_sequence_model(c, "lm", vocab_size=V, num_classes=2)


def test_model_registry_builds_by_name():
  c = ml_collections.ConfigDict(dict(name="classifier", cell="gru", hidden_size=5,
                                     embed_dim=3, lam=1))
  model = models.build_model(c, vocab_size=V, num_classes=2)
  assert isinstance(model, models.SequenceClassifier) and model.embed_dim == 3
  assert isinstance(model.cell, nn.GRUCell) and model.cell.features == 5
  assert models.MODELS.get("sentence_qa").__name__ == "SentenceQA"
  with pytest.raises(ValueError, match="did you mean 'tagger'"):
    models.build_model(dict(c, name="tager"), vocab_size=V, num_classes=2)
  with pytest.raises(ValueError, match=r"no field\(s\) \['nope'\]"):
    models.build_model(c, vocab_size=V, num_classes=2, nope=1)


@pytest.mark.parametrize("task_name", ["copying", "recall"])
def test_task_models_have_the_task_shapes(task_name):
  task = tasks.get_task(task_name)
  c = task.get_config()
  c.model.hidden_size, c.batch_size = 8, 4
  batch = next(task.train_data(c))
  model = task.build_model(c)
  variables = jax.eval_shape(model.init, jax.random.key(0), batch)
  out = jax.eval_shape(
      lambda v, b: model.apply(v, b, train=True, rngs={"dropout": jax.random.key(1)}),
      variables, batch)
  expected = batch["targets"].shape + (importlib.import_module(f"tasks.{task_name}").NUM_CLASSES,)
  assert out.shape == expected
  loss, metrics = jax.eval_shape(task.loss_and_metrics, out, batch)
  assert loss.shape == () and {"loss", "accuracy"} <= set(metrics)


TINY = {
    "copying": dict(delay=3, batch_size=16, num_train=200),
    "recall": dict(length=4, batch_size=32, num_train=500),
}


@pytest.mark.parametrize("task_name,steps", [("copying", 40), ("recall", 60)])
def test_a_few_dozen_steps_lower_the_loss(task_name, steps):
  task = tasks.get_task(task_name)
  c = task.get_config()
  c.update(TINY[task_name])
  c.model.hidden_size = 16
  task.validate_config(c)
  model, data = task.build_model(c), task.train_data(c)
  params = model.init(jax.random.key(0), next(data))["params"]
  tx = optax.adam(1e-2)
  opt_state = tx.init(params)

  @jax.jit
  def train_step(params, opt_state, batch):
    def loss_fn(p):
      return task.loss_and_metrics(model.apply({"params": p}, batch, train=True), batch)[0]
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state, loss

  losses = []
  for _ in range(steps):
    params, opt_state, loss = train_step(params, opt_state, next(data))
    losses.append(float(loss))
  assert np.all(np.isfinite(losses))
  assert np.mean(losses[-5:]) < 0.75 * np.mean(losses[:3]), losses


# ------------------------------------------------------------- matmul precision (issue 44)

NH = 7   # 3 NH = 21 and 2 NH = 14: the gates' widths, unlike any other size below


def _dots(task_name, precision, **model_fields):
  """``[(precision, operand and result types)]`` of every ``dot_general`` in the lowered
  StableHLO of the jitted loss gradient of the task's model (``build_model``), with
  ``config.model.precision = precision``."""
  task = tasks.get_task(task_name)
  c = task.get_config()
  c.update(TINY[task_name])
  c.batch_size = 5
  c.model.update(hidden_size=NH, precision=precision, **model_fields)
  task.validate_config(c)
  model, batch = task.build_model(c), next(task.train_data(c))
  params = jax.eval_shape(model.init, jax.random.key(0), batch)["params"]

  def loss(p):
    return task.loss_and_metrics(model.apply({"params": p}, batch, train=True), batch)[0]

  text = jax.jit(jax.grad(loss)).lower(params).as_text()
  dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
  assert dots, "no dot_general in the lowered training step"
  out = []
  for line in dots:
    assert "precision = [" in line, line
    out.append((line.split("precision = [")[1].split("]")[0], line.split(" : ")[-1]))
  return out


def _is_gate(types: str) -> bool:
  """Whether a dot has an operand or result as wide as RUM's gates (3 NH or 2 NH)."""
  return any(f"x{w}x" in types or f"<{w}x" in types for w in (3 * NH, 2 * NH))


@pytest.mark.parametrize("task_name", ["recall", "copying"])
def test_precision_highest_puts_every_dot_of_a_training_step_at_highest(task_name):
  # --config.model.precision=highest: the gates, the head and the rotation path, forward
  # and backward (rum_scan's hand-written VJP included), all at HIGHEST.
  dots = _dots(task_name, "highest", cell="rum", lam=1.0)
  assert sum(_is_gate(t) for _, t in dots) >= 4      # x W_x, h W_h and their gradients
  assert {p for p, _ in dots} == {"HIGHEST, HIGHEST"}, dots


@pytest.mark.parametrize("cell,options", [
    ("gru", {}), ("lstm", {}), ("lnlstm", {}), ("goru", {}), ("urnn", {}),
    ("eurnn", {}), ("fwln", {}), ("rum", dict(lam=1.0, layer_norm=True)),
    ("rum", dict(lam=0.0, eta=1.0))])
def test_precision_highest_reaches_every_cell(cell, options):
  dots = _dots("copying", "highest", cell=cell, **options)
  assert {p for p, _ in dots} == {"HIGHEST, HIGHEST"}, (cell, dots)


def test_precision_default_leaves_the_gates_at_the_backends_default():
  # "default" (Flax's None): the gates' dots carry no precision of their own (DEFAULT: the
  # backend decides, TF32 on an NVIDIA GPU); the rotation path stays at HIGHEST.
  dots = _dots("recall", "default", cell="rum", lam=1.0)
  gates = [p for p, t in dots if _is_gate(t)]
  assert len(gates) >= 4 and set(gates) == {"DEFAULT, DEFAULT"}, dots
  assert ("HIGHEST, HIGHEST") in {p for p, _ in dots}      # the rotation
  assert {p for p, _ in dots} == {"DEFAULT, DEFAULT", "HIGHEST, HIGHEST"}


def test_precision_names_are_checked_and_reach_the_cell():
  c = ml_collections.ConfigDict(dict(name="classifier", cell="rum", hidden_size=5,
                                     lam=1, precision="highest"))
  model = models.build_model(c, vocab_size=V, num_classes=2)
  assert model.precision == jax.lax.Precision.HIGHEST
  assert model.cell.precision == jax.lax.Precision.HIGHEST
  assert models.build_model(dict(c, precision="default"), vocab_size=V,
                            num_classes=2).cell.precision is None
  with pytest.raises(ValueError, match=r"config.model.precision='float16' is unknown; "
                                       r"accepted names are \['default', 'high', 'highest'\]"):
    models.build_model(dict(c, precision="float16"), vocab_size=V, num_classes=2)


@pytest.mark.parametrize("name", models.MODELS.names())
def test_precision_highest_reaches_every_dot_of_every_model(name):
  # Every registered model at config.model.precision=highest: every Dense, Einsum and dot
  # of the model and its cells, forward and backward (the LSTMN's and deep fusion's
  # hand-written backward passes included), lowered at HIGHEST (lowering only, no compile).
  from tests.test_mixed_precision import _loss, _tiny
  m, kwargs, batch = _tiny(name, "float32", cell="rum")
  model = models.build_model(dict(m, precision="highest"), **kwargs)
  params = jax.eval_shape(model.init, jax.random.key(0), batch)["params"]
  grad = jax.grad(lambda p: _loss(name, model.apply({"params": p}, batch), batch))
  text = jax.jit(grad).lower(params).as_text()
  dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
  assert dots and all("precision = [HIGHEST, HIGHEST]" in d for d in dots), (
      name, [d for d in dots if "precision = [HIGHEST, HIGHEST]" not in d][:3])


def test_every_cell_takes_precision_by_name_in_linen_and_nnx():
  # A cell built directly (not through build_model) takes the policy's names too, and so
  # does its NNX twin; "highest" reaches every dot of the step (and of its gradient).
  from flax import nnx
  import rumjax.nnx as rumjax_nnx
  from rumjax.cells import cell_names, get_cell_class
  xs = jnp.ones((2, 3, 4))

  def dot_precisions(f, *args):
    text = jax.jit(f).lower(*args).as_text()
    return {line.split("precision = [")[1].split("]")[0] for line in text.splitlines()
            if "stablehlo.dot_general" in line}

  for name in cell_names():
    if not get_cell_class(name).__module__.startswith("rumjax."):
      continue   # a test's own cell (tests/recipe_example.py's "elman"), no NNX twin
    rnn = nn.RNN(get_cell_class(name)(5, precision="highest"))
    variables = jax.eval_shape(rnn.init, jax.random.key(0), xs)
    assert dot_precisions(jax.grad(lambda v: jnp.sum(rnn.apply(v, xs))), variables) == {
        "HIGHEST, HIGHEST"}, name
    cell = rumjax_nnx.make_cell(name, 4, 5, rngs=nnx.Rngs(0), precision="highest")
    graph, state = nnx.split(nnx.RNN(cell))   # the forward step (the gradient's dots are
    run = lambda s: nnx.merge(graph, s)(xs)    # those of the Linen cell's pure step)
    assert dot_precisions(run, state) == {"HIGHEST, HIGHEST"}, ("nnx", name)

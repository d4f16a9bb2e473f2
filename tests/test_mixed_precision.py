"""The mixed-precision policy (rumjax.models.precision): ``config.model.dtype`` reaches every
model and task; parameters, losses, logits, attention and decoding scores stay float32;
bfloat16 training runs end to end and resumes exactly."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import tasks
from rumjax import decoding, metrics, models, training
from rumjax.core import attention, lstmn
from rumjax.models import pointer_generator as pg
from rumjax.models import precision

B, T, V = 2, 5, 11
CELL_MODELS = ("tagger", "classifier", "sentence_qa", "lm")


def _tokens(seed, *shape):
  return jnp.asarray(np.random.default_rng(seed).integers(1, V, shape), jnp.int32)


def _tiny(name, dtype, cell="gru"):
  """``(config.model, build kwargs, batch)`` of a tiny model ``name``."""
  m = dict(name=name, dtype=dtype, param_dtype="float32")
  kwargs = dict(vocab_size=V, num_classes=3)
  lengths = jnp.asarray([T, T - 2], jnp.int32)
  batch = {"inputs": _tokens(0, B, T), "lengths": lengths}
  if name in CELL_MODELS:
    m.update(cell=cell, hidden_size=6, lam=1 if cell == "rum" else 0, eta=None, embed_dim=4)
  if name == "lm":
    del kwargs["num_classes"], batch["lengths"]
  elif name == "sentence_qa":
    batch = {"story": _tokens(1, B, 3, 4), "story_lengths": jnp.asarray([3, 2]),
             "question": _tokens(2, B, 4)}
  elif name in ("lstm", "lstmn", "lstmn_shallow", "lstmn_deep"):
    m.update(cell="lstm", hidden_size=6, embed_dim=4, num_layers=1, mlp_layers=1,
             dropout_rate=0.0)
    if name in ("lstmn_shallow", "lstmn_deep"):
      batch = {"premise": _tokens(3, B, T), "premise_lengths": lengths,
               "hypothesis": _tokens(4, B, 4), "hypothesis_lengths": jnp.asarray([4, 2])}
  elif name == "pointer_generator":
    m.update(embed_dim=4, hidden_size=6, encoder_cell=cell, decoder_cell=cell, coverage=True)
    kwargs = dict(vocab_size=V, max_oovs=2)
    batch = {"article": _tokens(5, B, T), "article_ext": _tokens(6, B, T),
             "article_lengths": lengths, "dec_inputs": _tokens(7, B, 4)}
  else:  # the sentence encoders
    m.update(num_layers=1, hidden_size=8, embed_dim=8, num_heads=2, dropout_rate=0.0)
  return m, kwargs, batch


def _loss(name, outputs, batch):
  if name == "pointer_generator":
    return pg.nll_loss(outputs["probs"], batch["dec_inputs"], jnp.ones((B, 4)))
  logits = outputs[0] if name == "lm" else outputs
  assert logits.dtype == jnp.float32   # the policy: float32 logits
  labels = jnp.zeros(logits.shape[:-1], jnp.int32)
  return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def _loss_and_grads(name, dtype, cell="gru"):
  m, kwargs, batch = _tiny(name, dtype, cell)
  model = models.build_model(m, **kwargs)
  params = model.init(jax.random.key(0), batch)["params"]

  def f(p):
    outputs = model.apply({"params": p}, batch)
    return _loss(name, outputs, batch), outputs

  lowered = jax.jit(jax.value_and_grad(f, has_aux=True)).lower(params)
  (loss, outputs), grads = lowered.compile()(params)
  return model, params, loss, outputs, grads, lowered.as_text()


# ------------------------------------------------------------------------ names


def test_dtype_names_and_the_one_line_error():
  assert precision.get_dtype("bfloat16") == jnp.bfloat16
  assert precision.get_dtype("float32") == jnp.float32
  with pytest.raises(ValueError, match=r"^config.model.dtype='float16x' is unknown; "
                     r"accepted names are \['float32', 'bfloat16'\]\.$"):
    precision.get_dtype("float16x")
  resolved = precision.resolve({"dtype": "bfloat16", "param_dtype": "float32", "x": 1})
  assert resolved == {"dtype": jnp.bfloat16, "param_dtype": jnp.float32, "x": 1}


def test_every_task_has_the_fields_and_rejects_an_unknown_dtype():
  for name in tasks.task_names():
    config = tasks.get_task(name).get_config()
    assert (config.model.dtype, config.model.param_dtype) == ("float32", "float32"), name
  config = tasks.get_task("recall").get_config()
  config.model.dtype = "float16x"
  with pytest.raises(ValueError, match="config.model.dtype='float16x'.*'bfloat16'"):
    tasks.get_task("recall").validate_config(config)
  config.model.dtype, config.model.param_dtype = "bfloat16", "half"
  with pytest.raises(ValueError, match="config.model.param_dtype='half'"):
    tasks.get_task("recall").validate_config(config)
  # bfloat16 parameters crashed most cells (the carry changed dtype; no bfloat16 QR).
  config.model.param_dtype = "bfloat16"
  with pytest.raises(ValueError, match=r"^config.model.param_dtype='bfloat16' is not "
                     r"supported: .* set config.model.dtype='bfloat16'\.$"):
    tasks.get_task("recall").validate_config(config)


# ------------------------------------------------------------------------ models


def _slow_if(names, *slow):
  """Parameters, those in ``slow`` marked slow (> 20 s on the shared 2-core CPU)."""
  return [pytest.param(n, marks=pytest.mark.slow) if n in slow else n for n in names]


@pytest.mark.parametrize("name", _slow_if(models.MODELS.names(), "pointer_generator",
                                          "lstmn", "lstmn_shallow", "lstmn_deep", "bilstm"))
def test_every_model_trains_in_bfloat16_with_float32_params_and_loss(name):
  model, params, loss, outputs, grads, hlo = _loss_and_grads(name, "bfloat16")
  assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}
  assert {x.dtype for x in jax.tree.leaves(grads)} == {jnp.dtype(jnp.float32)}
  assert loss.dtype == jnp.float32 and np.isfinite(float(loss))
  assert all(np.all(np.isfinite(np.asarray(g))) for g in jax.tree.leaves(grads))
  # What the model returns is float32 (logits, distributions, attention, coverage).
  assert {x.dtype for x in jax.tree.leaves(outputs)
          if jnp.issubdtype(x.dtype, jnp.floating)} == {jnp.dtype(jnp.float32)}
  assert model.dtype == jnp.bfloat16
  assert "bf16" in hlo   # the computation did run in bfloat16


@pytest.mark.parametrize("name", _slow_if(["tagger", "lm", "pointer_generator", "lstmn",
                                           "transformer"], "pointer_generator", "lstmn"))
def test_float32_policy_is_the_default_computation(name):
  """``dtype="float32"`` gives exactly what a config without the field gives."""
  m, kwargs, batch = _tiny(name, "float32")
  plain = {k: v for k, v in m.items() if k not in precision.FIELDS}
  model, model32 = models.build_model(plain, **kwargs), models.build_model(m, **kwargs)
  params = model.init(jax.random.key(0), batch)
  jax.tree.map(np.testing.assert_array_equal, model.apply(params, batch),
               model32.apply(params, batch))


@pytest.mark.parametrize("cell", ["lstm", "gru", "rum"])
def test_the_cell_gets_the_policy(cell):
  m, kwargs, _ = _tiny("tagger", "bfloat16", cell)
  model = models.build_model(m, **kwargs)
  assert (model.cell.dtype, model.cell.param_dtype) == (jnp.bfloat16, jnp.float32)
  m, kwargs, batch = _tiny("pointer_generator", "bfloat16", cell)
  pgm = models.build_model(m, **kwargs)
  bound = pgm.bind(jax.eval_shape(pgm.init, jax.random.key(0), batch))
  assert bound.encoder_fw.cell.dtype == bound.decoder.cell.dtype == jnp.bfloat16


@pytest.mark.parametrize("name", _slow_if(["tagger", "classifier", "lm", "pointer_generator"],
                                          "pointer_generator", "lm"))
def test_rum_models_in_bfloat16(name):
  """RUM (lam=1) through rum_scan (tagger, classifier, lm) and nn.RNN (pointer-generator)."""
  _, params, loss, _, grads, hlo = _loss_and_grads(name, "bfloat16", "rum")
  assert loss.dtype == jnp.float32 and np.isfinite(float(loss))
  assert all(np.all(np.isfinite(np.asarray(g))) for g in jax.tree.leaves(grads))
  assert "bf16" in hlo


@pytest.mark.parametrize("core", ["lstm", "lstmn"])
def test_language_model_state_stays_float32(core):
  m, kwargs, batch = _tiny("lm", "bfloat16", "lstm")
  if core == "lstmn":   # the PTB task's word-level LSTMN core
    kwargs["cell"] = models.lstmn.LSTMNCore(6, num_layers=2, dtype=jnp.bfloat16)
  model = models.build_model(m, **kwargs)
  variables = model.init(jax.random.key(0), batch)
  logits, state = model.apply(variables, batch)
  _, state2 = model.apply(variables, batch, model_state=state)
  assert logits.dtype == jnp.float32
  assert {x.dtype for x in jax.tree.leaves((state, state2))} == {jnp.dtype(jnp.float32)}


def test_softmaxes_run_in_float32():
  scores = jnp.asarray([[3.0, 1.0, -2.0, 0.5]], jnp.bfloat16)
  valid = jnp.asarray([[True, True, False, True]])
  weights = attention.masked_softmax(scores, valid)
  assert weights.dtype == jnp.float32
  expected = jax.nn.softmax(jnp.asarray([3.0, 1.0, 0.5]))
  np.testing.assert_allclose(np.asarray(weights)[0, [0, 1, 3]], expected, rtol=1e-6)
  # Additive attention: float32 scores, weights in the tapes' dtype for the weighted sum.
  keys = jnp.ones((1, 4, 3), jnp.bfloat16)
  s = lstmn.attention_weights(keys, jnp.zeros((1, 3), jnp.bfloat16),
                              jnp.ones((3,), jnp.bfloat16), valid)
  assert s.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(s, np.float32)[0], [1 / 3, 1 / 3, 0, 1 / 3],
                             rtol=2 ** -8)   # one bfloat16 rounding


def test_losses_and_metrics_are_float32_for_bfloat16_logits():
  logits = jnp.asarray([[2.0, -1.0, 0.5], [0.0, 3.0, 1.0]], jnp.bfloat16)
  batch = {"targets": jnp.asarray([0, 2])}
  loss, sums = metrics.classification_loss_and_metrics(logits, batch)
  hinge = metrics.multi_margin_loss(logits, batch["targets"])
  assert loss.dtype == hinge.dtype == jnp.float32
  assert {x.dtype for x in jax.tree.leaves(sums)} == {jnp.dtype(jnp.float32)}
  expected = optax.softmax_cross_entropy_with_integer_labels(
      jnp.asarray(logits, jnp.float32), batch["targets"]).mean()
  np.testing.assert_allclose(float(loss), float(expected), rtol=1e-6)


def test_beam_search_scores_are_float32_in_bfloat16():
  m, kwargs, batch = _tiny("pointer_generator", "bfloat16", "lstm")
  model = models.build_model(m, **kwargs)
  params = model.init(jax.random.key(0), batch)["params"]
  tokens_to_logits, state = pg.make_tokens_to_logits(model, params, batch)
  seqs, scores = decoding.beam_search(tokens_to_logits, state, batch_size=B, beam_size=2,
                                      max_len=4, bos_id=2, eos_id=3)
  assert seqs.shape[:2] == (B, 2) and scores.dtype == jnp.float32
  assert np.all(np.isfinite(np.asarray(scores)))


# ---------------------------------------------------------------------- end to end


def _finite(summary, *keys):
  for key in keys:
    assert np.isfinite(summary[key]), (key, summary[key])


@pytest.mark.slow   # ~50 s: mostly compiling the beam search
def test_summarization_with_beam_search_in_bfloat16(tmp_path):
  from tasks import summ_synthetic
  c = summ_synthetic.TASK.get_config("decrum")
  c.update(num_train=16, num_eval=4, batch_size=4, num_steps=4, eval_every=4,
           checkpoint_every=4, log_every=2, max_enc_steps=30, max_dec_steps=6,
           max_decode_steps=6, beam_size=2)
  c.model.update(embed_dim=8, hidden_size=8, dtype="bfloat16")
  summ_synthetic.validate_config(c)
  summary = training.train_and_evaluate(c, str(tmp_path), summ_synthetic.TASK)
  assert summary["step"] == 4
  _finite(summary, "train_loss", "eval_loss", "eval_nll", "test_rouge1", "test_rouge2")
  assert summary["test_rouge_count"] == 4


@pytest.mark.slow
def test_fs_rum2_ptb_in_bfloat16(tmp_path):
  from tests.test_task_ptb import _write_corpus
  from tasks import ptb
  c = ptb.TASK.get_config("fs_rum2")
  c.update(manual_dir=_write_corpus(tmp_path / "manual"), data_dir=str(tmp_path / "tfds"),
           batch_size=4, seq_len=12, num_steps=3, eval_every=3, checkpoint_every=3,
           log_every=1, eval_batch_size=3)
  c.model.update(fast_size=8, slow_size=12, embed_dim=8, dtype="bfloat16")
  ptb.validate_config(c)
  core = ptb.build_core(c.model)
  assert core.slow_cell.dtype == jnp.bfloat16 and core.fast_cells[0].dtype == jnp.bfloat16
  summary = training.train_and_evaluate(c, str(tmp_path / "run"), ptb.TASK)
  assert summary["step"] == 3
  _finite(summary, "train_loss", "eval_bpc", "test_bpc")


def test_starsaber_afqmc_in_bfloat16(tmp_path):
  from tests.test_task_clue import _config, afqmc_dir
  task, c = _config("afqmc", afqmc_dir(tmp_path), tmp_path, **{"model.dtype": "bfloat16"})
  summary = training.train_and_evaluate(c, str(tmp_path / "run"), task)
  assert summary["step"] == 3
  _finite(summary, "train_loss", "train_accuracy", "eval_loss", "eval_accuracy")


def _recall(num_steps, cell="rum"):
  recall = tasks.get_task("recall")
  c = recall.get_config()
  c.length, c.batch_size = 8, 8
  c.num_train, c.num_dev, c.num_test = 48, 16, 16
  c.update(num_steps=num_steps, eval_every=num_steps, checkpoint_every=3, log_every=3)
  c.model.update(cell=cell, hidden_size=8, dtype="bfloat16")
  recall.validate_config(c)
  return recall, c


def test_bfloat16_resume_is_exact(tmp_path):
  task, full_config = _recall(6)
  full = training.train_and_evaluate(full_config, str(tmp_path / "full"), task)
  part = str(tmp_path / "part")
  training.train_and_evaluate(_recall(3)[1], part, task)
  resumed = training.train_and_evaluate(full_config, part, task)
  assert resumed["step"] == 6
  assert {x.dtype for x in jax.tree.leaves(resumed["params"])} == {np.dtype(np.float32)}
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
               full["params"], resumed["params"])
  assert np.isfinite(full["eval_accuracy"]) and resumed["eval_loss"] == full["eval_loss"]


def test_output_dense_is_flax_dense_with_float32_sums():
  """The models' output layer: nn.Dense's parameters and float32 values; in bfloat16 a
  float32 result and bias, so the bias gradient is the float32 sum of the cotangents over
  the 240 rows (Flax's bfloat16 Dense: 1.3% off it)."""
  from rumjax.models import precision
  x = jnp.asarray(np.random.default_rng(0).normal(size=(8, 30, 16)), jnp.float32)
  ct = jnp.asarray(np.random.default_rng(1).normal(size=(8, 30, 5)), jnp.float32)
  make = lambda dtype: precision.output_dense(5, dtype=dtype, param_dtype=jnp.float32,
                                              precision=jax.lax.Precision.HIGHEST, name="head")
  flax_dense = nn.Dense(5, param_dtype=jnp.float32, precision=jax.lax.Precision.HIGHEST)
  params = make(None).init(jax.random.key(0), x)
  flax_params = flax_dense.init(jax.random.key(0), x)
  jax.tree.map(np.testing.assert_array_equal, params, flax_params)
  np.testing.assert_array_equal(make(None).apply(params, x), flax_dense.apply(params, x))
  out = make(jnp.bfloat16).apply(params, x)
  assert out.dtype == jnp.float32
  grads = jax.grad(lambda p: jnp.sum(make(jnp.bfloat16).apply(p, x) * ct))(params)
  np.testing.assert_allclose(grads["params"]["bias"], np.sum(np.asarray(ct, np.float64),
                                                              axis=(0, 1)), rtol=1e-5)
  assert grads["params"]["kernel"].dtype == jnp.float32


# ------------------------------------------------------------------------ float32 sums

# Flax's own modules add their biases in bfloat16 (their gradients are bfloat16 sums):
# nn.GRUCell and nn.OptimizedLSTMCell ("gru", "lstm") and nn.MultiHeadDotProductAttention
# (the Transformer and ReZero). Every other module of the zoo adds a bias or a residual
# weight in float32 (rumjax.core.precision.add_bias / scale, rumjax.layers.dense.Dense).
# Their sums, by the shape summed (the tiny models of _tiny):
FLAX_MODULES = {"transformer": ("bfloat16[2,5,2,4]", "bfloat16[2,5,8]"),   # q/k/v, out bias
                "rezero": ("bfloat16[2,5,2,4]", "bfloat16[2,5,8]"),
                "bilstm": ("bfloat16[2,32]",),                              # LSTM gates
                "lstm": ("bfloat16[2,24]",)}


def _bfloat16_batch_sums(jaxpr, found):
  """Appends the input shape of every bfloat16 ``reduce_sum`` over axis 0 (the batch:
  a parameter's gradient sums its rows) in ``jaxpr`` and its sub-jaxprs."""
  for eqn in jaxpr.eqns:
    if (eqn.primitive.name == "reduce_sum" and 0 in eqn.params["axes"]
        and eqn.outvars[0].aval.dtype == jnp.bfloat16):
      found.append(str(eqn.invars[0].aval))
    for sub in jax.tree.leaves(list(eqn.params.values()),
                               is_leaf=lambda x: isinstance(x, jax.extend.core.ClosedJaxpr)):
      if isinstance(sub, jax.extend.core.ClosedJaxpr):
        _bfloat16_batch_sums(sub.jaxpr, found)
      elif isinstance(sub, jax.extend.core.Jaxpr):
        _bfloat16_batch_sums(sub, found)
  return found


OUR_CELLS = ("rum", "goru", "eurnn", "fwln", "urnn", "lnlstm")
SUM_CASES = ([("tagger", c) for c in OUR_CELLS]
             + [(n, "rum") for n in CELL_MODELS[1:] + ("pointer_generator",)]
             + [(n, "gru") for n in models.MODELS.names() if n not in CELL_MODELS
                and n != "pointer_generator"])


@pytest.mark.parametrize("name,cell", SUM_CASES)
def test_parameter_gradients_are_float32_sums_in_bfloat16(name, cell):
  """Under the bfloat16 policy no parameter's gradient is a bfloat16 sum over the batch:
  no bfloat16 ``reduce_sum`` over axis 0 in the gradient's jaxpr (Flax's own modules
  excepted, :data:`FLAX_MODULES`)."""
  m, kwargs, batch = _tiny(name, "bfloat16", cell)
  model = models.build_model(m, **kwargs)
  params = jax.eval_shape(model.init, jax.random.key(0), batch)["params"]
  loss = lambda p: _loss(name, model.apply({"params": p}, batch), batch)
  found = _bfloat16_batch_sums(jax.make_jaxpr(jax.grad(loss))(params).jaxpr, [])
  assert [s for s in found if not s.startswith(FLAX_MODULES.get(name, ()))] == []


def test_hidden_dense_is_flax_dense_with_a_float32_bias():
  """``rumjax.layers.dense.Dense``: nn.Dense's parameters and float32 values; in bfloat16
  a bfloat16 result whose bias gradient is the float32 sum of the (bfloat16) cotangents
  over the 240 rows."""
  from rumjax.layers.dense import Dense
  x = jnp.asarray(np.random.default_rng(0).normal(size=(8, 30, 16)), jnp.float32)
  ct = jnp.asarray(np.random.default_rng(1).normal(size=(8, 30, 5)), jnp.bfloat16)
  make = lambda dtype: Dense(5, dtype=dtype, precision=jax.lax.Precision.HIGHEST)
  flax_dense = nn.Dense(5, precision=jax.lax.Precision.HIGHEST)
  params = make(None).init(jax.random.key(0), x)
  jax.tree.map(np.testing.assert_array_equal, params, flax_dense.init(jax.random.key(0), x))
  np.testing.assert_array_equal(make(None).apply(params, x), flax_dense.apply(params, x))
  np.testing.assert_array_equal(make(jnp.float32).apply(params, x),
                                flax_dense.apply(params, x))
  out, vjp = jax.vjp(lambda p: make(jnp.bfloat16).apply(p, x), params)
  assert out.dtype == jnp.bfloat16
  grads = vjp(ct)[0]["params"]
  assert {g.dtype for g in jax.tree.leaves(grads)} == {jnp.dtype(jnp.float32)}
  np.testing.assert_allclose(grads["bias"], np.sum(np.asarray(ct, np.float64), axis=(0, 1)),
                             rtol=1e-5)


def test_add_bias_and_scale_sum_their_gradients_in_float32():
  """``add_bias`` / ``scale`` (rumjax.core.precision): exactly ``y + b`` / ``w * y`` in
  float32; in bfloat16 a bfloat16 result and gradients that are float32 sums of the
  cotangents over the rows (to float32 rounding)."""
  from rumjax.core.precision import add_bias, scale
  rng = np.random.default_rng(2)
  y = jnp.asarray(rng.normal(size=(600, 7)), jnp.float32)
  b, w = jnp.asarray(rng.normal(size=7), jnp.float32), jnp.asarray(0.7, jnp.float32)
  np.testing.assert_array_equal(add_bias(y, b), y + b)
  np.testing.assert_array_equal(scale(y, w), w * y)
  y16 = y.astype(jnp.bfloat16)
  ct = jnp.asarray(rng.normal(size=(600, 7)), jnp.bfloat16)
  out, vjp = jax.vjp(lambda b: add_bias(y16, b), b)
  assert out.dtype == jnp.bfloat16
  np.testing.assert_allclose(vjp(ct)[0], np.sum(np.asarray(ct, np.float64), 0), rtol=1e-5)
  out, vjp = jax.vjp(lambda w: scale(y16, w), w)
  assert out.dtype == jnp.bfloat16
  exact = np.sum(np.asarray(ct, np.float64) * np.asarray(y16, np.float64))
  np.testing.assert_allclose(vjp(ct)[0], exact, rtol=1e-5)

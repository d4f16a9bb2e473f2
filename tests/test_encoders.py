"""The StarSaber paper's encoder models (rumjax/models/encoders.py) and their layers
(rumjax/layers/positional.py, rumjax/layers/transformer.py): shapes of every registered
model under both objectives, padding invariance, ReZero's identity at initialisation, the
Transformer layer against an explicit NumPy reference, frozen embeddings, shared parameter
names between objectives, the BiLSTM's sentence vector by hand, parameter counts at the
paper's pretrained size, and the config checks."""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ml_collections import ConfigDict

from rumjax import models
from rumjax.layers.positional import sinusoidal_positions
from rumjax.layers.starsaber import StarSaberLayer
from rumjax.layers.transformer import ReZeroLayer, TransformerLayer
from rumjax.models import encoders
from rumjax.utils import count_params

V, E, H = 17, 6, 8


def _build(name, objective="classify", **fields):
  config = dict(name=name, num_layers=2, hidden_size=H, embed_dim=E, num_heads=2,
                ffn_size=None, dropout_rate=0.1, objective=objective)
  config.update(fields)
  return models.build_model(config, vocab_size=V, num_classes=3)


def _batch(seed=0):
  rng = np.random.default_rng(seed)
  return {"inputs": rng.integers(0, V, (3, 6)).astype(np.int32),
          "lengths": np.array([6, 3, 1], np.int32), "labels": np.zeros(3, np.int32)}


def _repad(batch, value):
  out = dict(batch)
  pad = np.arange(batch["inputs"].shape[1])[None] >= batch["lengths"][:, None]
  out["inputs"] = np.where(pad, value, batch["inputs"]).astype(np.int32)
  return out


def _paths(tree):
  return sorted(jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(tree))


# ---------------------------------------------------------------------- positions


def test_sinusoidal_positions_match_the_formula():
  for length, d in ((7, 6), (5, 5), (3, 1)):
    pe = np.asarray(sinusoidal_positions(length, d))
    assert pe.shape == (length, d) and pe.dtype == np.float32
    ref = np.zeros((length, d))
    for pos in range(length):
      for j in range(d):
        i2 = j - j % 2   # 2i
        angle = pos / 10000 ** (i2 / d)
        ref[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    np.testing.assert_allclose(pe, ref, atol=1e-6)
  np.testing.assert_array_equal(sinusoidal_positions(1, 4), [[0, 1, 0, 1]])


def test_sinusoidal_positions_are_float32_under_x64():
  """``PE`` is <float32> (the docstring) also when float64 is enabled."""
  with jax.enable_x64(True):
    assert sinusoidal_positions(3, 4).dtype == jnp.float32


@pytest.mark.usefixtures("float32_matmuls")
def test_hidden_dense_multiplies_in_its_dtype():
  """``rumjax.layers.dense.Dense(dtype=bfloat16)``: the product of the bfloat16 inputs and
  kernel (bfloat16), the float32 bias added in float32, rounded to bfloat16 once."""
  from rumjax.layers.dense import Dense   # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(29)
  x = jnp.asarray(rng.normal(size=(6, 16)), jnp.float32)
  dense = Dense(5, dtype=jnp.bfloat16)
  params = dict(dense.init(jax.random.key(0), x)["params"],
                bias=jnp.asarray(rng.normal(size=5), jnp.float32))
  got = dense.apply({"params": params}, x)
  assert got.dtype == jnp.bfloat16
  product = x.astype(jnp.bfloat16) @ params["kernel"].astype(jnp.bfloat16)
  want = (product.astype(jnp.float32) + params["bias"]).astype(jnp.bfloat16)
  np.testing.assert_array_equal(np.float32(got), np.float32(want))


# ---------------------------------------------------------------- every model


@pytest.mark.parametrize("name", encoders.ENCODER_MODELS)
def test_shapes_padding_and_shared_names(name):
  batch = _batch()
  variables = {}
  for objective, shape in (("classify", (3, 3)), ("mlm", (3, 6, V))):
    model = _build(name, objective)
    params = model.init(jax.random.key(0), batch)["params"]
    variables[objective] = params
    # Eager nn.RNN re-compiles its scan at every call: jit the BiLSTM once.
    apply = jax.jit(model.apply) if name == "bilstm" else model.apply
    out = apply({"params": params}, batch)
    assert out.shape == shape and bool(jnp.all(jnp.isfinite(out)))
    # Padded token ids never reach the logits (at real positions for mlm).
    other = apply({"params": params}, _repad(batch, V - 1))
    if objective == "classify":
      np.testing.assert_allclose(other, out, rtol=1e-5, atol=1e-6)
    else:
      real = np.arange(6)[None] < batch["lengths"][:, None]
      np.testing.assert_allclose(np.asarray(other)[real], np.asarray(out)[real],
                                 rtol=1e-5, atol=1e-6)
  # The embedding / input map / encoder are named alike under both objectives.
  body = lambda p: {k: v for k, v in p.items() if k in ("embed", "input_map", "encoder")}
  assert _paths(body(variables["classify"])) == _paths(body(variables["mlm"]))
  assert set(variables["classify"]) - set(body(variables["classify"])) == {"classifier"}
  assert set(variables["mlm"]) - set(body(variables["mlm"])) == {"mlm_dense", "mlm_bias"}
  # A masked-LM checkpoint's body initialises the classifier.
  transferred = {**body(variables["mlm"]), "classifier": variables["classify"]["classifier"]}
  assert _build(name).apply({"params": transferred}, batch).shape == (3, 3)


def test_input_map_only_when_sizes_differ():
  batch = _batch()
  shapes = lambda model: jax.eval_shape(model.init, jax.random.key(0), batch)["params"]
  assert "input_map" not in shapes(_build("starsaber", embed_dim=H))
  assert shapes(_build("starsaber"))["input_map"]["kernel"].shape == (E, H)   # no bias
  assert "input_map" not in shapes(_build("bilstm"))   # the LSTMs read embed_dim
  assert "mlm_dense" not in shapes(_build("rezero", "mlm", embed_dim=H))
  with pytest.raises(ValueError, match="objective"):
    shapes(_build("starsaber", "lm"))
  with pytest.raises(ValueError, match="num_classes"):
    shapes(models.build_model(dict(name="starsaber"), vocab_size=V))


def test_dropout_only_in_training():
  batch = _batch()
  model = _build("starsaber")
  params = model.init(jax.random.key(0), batch)["params"]
  train = lambda k: model.apply({"params": params}, batch, train=True,
                                rngs={"dropout": jax.random.key(k)})
  assert not np.allclose(train(1), train(2))
  np.testing.assert_array_equal(model.apply({"params": params}, batch),
                                model.apply({"params": params}, batch, train=False))


def test_starsaber_every_layer_reads_h0_as_its_direct_path():
  batch = _batch()
  model = _build("starsaber", embed_dim=H)
  params = model.init(jax.random.key(0), batch)["params"]
  mask = jnp.arange(6)[None] < batch["lengths"][:, None]
  x = params["embed"]["embedding"][batch["inputs"]]
  h = x
  for l in range(2):
    h = StarSaberLayer(H).apply({"params": params["encoder"][f"layer_{l}"]}, h, x, mask)
  pooled = np.asarray([np.asarray(h[b, :n]).mean(0) for b, n in enumerate(batch["lengths"])])
  ref = pooled @ params["classifier"]["kernel"] + params["classifier"]["bias"]
  np.testing.assert_allclose(model.apply({"params": params}, batch), ref, rtol=1e-5,
                             atol=1e-6)


# ---------------------------------------------------------------------- ReZero


def test_rezero_is_the_identity_at_initialisation():
  x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 5, H)), jnp.float32)
  mask = jnp.array([[True] * 5, [True, True, False, False, False]])
  stack = encoders.TransformerEncoder(H, 3, num_heads=2, dropout_rate=0.5, rezero=True)
  variables = stack.init(jax.random.key(1), x, mask, deterministic=True)
  assert [variables["params"][f"layer_{l}"]["alpha"] for l in range(3)] == [0.0] * 3
  y = stack.apply(variables, x, mask, deterministic=False,
                  rngs={"dropout": jax.random.key(2)})
  np.testing.assert_array_equal(y, x)
  layer_0 = {"params": variables["params"]["layer_0"]}
  np.testing.assert_array_equal(
      ReZeroLayer(H, num_heads=2).apply(layer_0, x, mask, deterministic=True), x)
  # Not stuck: every alpha gets a gradient.
  loss = lambda p: jnp.sum(stack.apply({"params": p}, x, mask, deterministic=True) ** 2)
  g = jax.jit(jax.grad(loss))(variables["params"])
  assert all(g[f"layer_{l}"]["alpha"] != 0.0 for l in range(3))


# ----------------------------------------------------------------- Transformer


def _layer_norm(z, p, eps=1e-6):
  mean = z.mean(-1, keepdims=True)
  var = ((z - mean) ** 2).mean(-1, keepdims=True)
  return (z - mean) / np.sqrt(var + eps) * p["scale"] + p["bias"]


def _reference_transformer_layer(p, x, mask, rezero=False):
  """Post-LN layer with explicit loops over batch, heads, queries and keys (float64);
  ``rezero``: no layer norms, both residual branches scaled by ``p["alpha"]``."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), p)
  a = p["attention"]
  B, T, d = x.shape
  heads, hd = a["query"]["bias"].shape
  proj = {n: np.einsum("btd,dhk->bthk", x, a[n]["kernel"]) + a[n]["bias"]
          for n in ("query", "key", "value")}
  att = np.zeros((B, T, d))
  for b in range(B):
    for n in range(T):
      for h in range(heads):
        keys = [i for i in range(T) if mask[b, i]]
        scores = np.array([proj["query"][b, n, h] @ proj["key"][b, i, h] / math.sqrt(hd)
                           for i in keys])
        w = np.exp(scores - scores.max())
        w /= w.sum()
        ctx = sum(wi * proj["value"][b, i, h] for wi, i in zip(w, keys))
        att[b, n] += ctx @ a["out"]["kernel"][h]
      att[b, n] += a["out"]["bias"]
  f = p["ffn"]
  ffn = lambda z: (np.maximum(z @ f["hidden"]["kernel"] + f["hidden"]["bias"], 0.0)
                   @ f["output"]["kernel"] + f["output"]["bias"])
  if rezero:
    x1 = x + p["alpha"] * att
    return x1 + p["alpha"] * ffn(x1)
  x1 = _layer_norm(x + att, p["attention_norm"])
  return _layer_norm(x1 + ffn(x1), p["ffn_norm"])


def test_transformer_layer_matches_a_numpy_reference():
  d = 4
  rng = np.random.default_rng(0)
  x = rng.normal(size=(2, 5, d))
  mask = np.array([[True] * 5, [True, True, True, False, False]])
  layer = TransformerLayer(d, num_heads=2, ffn_size=6, dropout_rate=0.3)
  variables = layer.init(jax.random.key(1), jnp.asarray(x, jnp.float32), mask,
                         deterministic=True)
  # Non-trivial layer norms, so their scale and bias are exercised too.
  variables = jax.tree.map(lambda a: a + 0.1 * rng.normal(size=a.shape).astype(np.float32),
                           variables)
  assert variables["params"]["attention"]["query"]["kernel"].shape == (d, 2, 2)
  y = layer.apply(variables, jnp.asarray(x, jnp.float32), mask, deterministic=True)
  ref = _reference_transformer_layer(variables["params"], x, mask)
  np.testing.assert_allclose(np.asarray(y)[mask], ref[mask], rtol=1e-4, atol=1e-5)
  # Padded keys are not read: changing the padded inputs leaves real positions alone.
  x2 = np.where(mask[..., None], x, 100.0)
  y2 = layer.apply(variables, jnp.asarray(x2, jnp.float32), mask, deterministic=True)
  np.testing.assert_allclose(np.asarray(y2)[mask], np.asarray(y)[mask], atol=1e-5)


def test_rezero_layer_matches_a_numpy_reference_away_from_zero():
  """alpha = 0.7 (at 0 any wiring is the identity): eq. of :class:`ReZeroLayer` against the
  float64 loops, float32 here (exact products on the CPU): 1e-4; padded keys not read."""
  d = 4
  rng = np.random.default_rng(3)
  x = rng.normal(size=(2, 5, d))
  mask = np.array([[True] * 5, [True, True, True, False, False]])
  layer = ReZeroLayer(d, num_heads=2, ffn_size=6)
  variables = layer.init(jax.random.key(4), jnp.asarray(x, jnp.float32), mask,
                         deterministic=True)
  variables = jax.tree.map(lambda a: a + 0.1 * rng.normal(size=a.shape).astype(np.float32),
                           variables)
  variables["params"]["alpha"] = jnp.float32(0.7)
  y = layer.apply(variables, jnp.asarray(x, jnp.float32), mask, deterministic=True)
  ref = _reference_transformer_layer(variables["params"], x, mask, rezero=True)
  np.testing.assert_allclose(np.asarray(y)[mask], ref[mask], rtol=1e-4, atol=1e-5)
  x2 = np.where(mask[..., None], x, 100.0)
  y2 = layer.apply(variables, jnp.asarray(x2, jnp.float32), mask, deterministic=True)
  np.testing.assert_allclose(np.asarray(y2)[mask], np.asarray(y)[mask], atol=1e-5)


# ------------------------------------------------------------ frozen embeddings


@pytest.mark.parametrize("objective", encoders.OBJECTIVES)
def test_frozen_embeddings_get_zero_gradient(objective):
  batch = _batch()

  def grads(freeze):
    model = _build("starsaber", objective, freeze_embeddings=freeze)
    params = model.init(jax.random.key(0), batch)["params"]
    loss = lambda p: jnp.sum(model.apply({"params": p}, batch) ** 2)
    return jax.jit(jax.grad(loss))(params)

  frozen, free = grads(True), grads(False)
  assert not np.any(frozen["embed"]["embedding"])
  assert np.any(free["embed"]["embedding"])
  for path, g in jax.tree_util.tree_leaves_with_path(
      {k: v for k, v in frozen.items() if k != "embed"}):
    assert np.any(g), jax.tree_util.keystr(path)


# ---------------------------------------------------------------------- BiLSTM


def test_bilstm_sentence_vector_is_forward_last_and_backward_first():
  batch = _batch(1)
  model = _build("bilstm", dropout_rate=0.0)
  params = model.init(jax.random.key(0), batch)["params"]
  xs = np.asarray(params["embed"]["embedding"])[batch["inputs"]]
  cell = nn.OptimizedLSTMCell(H)

  def run(cell_params, steps):
    carry = (jnp.zeros((1, H)), jnp.zeros((1, H)))
    for x_t in steps:
      carry, _ = cell.apply({"params": cell_params}, carry, jnp.asarray(x_t)[None])
    return np.asarray(carry[1][0])   # (c, h): the hidden state

  enc = params["encoder"]
  expected = np.stack([
      np.concatenate([run(enc["forward"]["cell"], xs[b, :n]),
                      run(enc["backward"]["cell"], xs[b, :n][::-1])])
      for b, n in enumerate(batch["lengths"])])
  mask = jnp.arange(6)[None] < batch["lengths"][:, None]
  _, sentence = encoders.BiLSTMEncoder(H).apply({"params": enc}, jnp.asarray(xs), mask,
                                                deterministic=True)
  np.testing.assert_allclose(sentence, expected, rtol=1e-5, atol=1e-6)
  logits = expected @ params["classifier"]["kernel"] + params["classifier"]["bias"]
  np.testing.assert_allclose(model.apply({"params": params}, batch), logits, rtol=1e-5,
                             atol=1e-6)


# -------------------------------------------------------------- parameter counts


def _encoder_params(name, d=512, layers=6):
  model = models.build_model(dict(name=name, num_layers=layers, hidden_size=d, embed_dim=d),
                             vocab_size=100, num_classes=2)
  batch = {"inputs": jnp.zeros((1, 4), jnp.int32), "lengths": jnp.array([4])}
  shapes = jax.eval_shape(model.init, jax.random.key(0), batch)["params"]
  return count_params(shapes["encoder"]), count_params(shapes["encoder"]["layer_0"])


def test_parameter_counts_at_the_pretrained_size():
  """The paper's StarSaber-2 / Transformer (d = 512, 6 layers), encoder only (Table 1 adds
  the embedding matrices): 4 d^2 + 1 per StarSaber layer; 4 d^2 + 4 d (attention), 2 d f +
  f + d (FFN, f = 4 d), 4 d (two layer norms) per Transformer layer."""
  d, f = 512, 2048
  total, per_layer = _encoder_params("starsaber")
  assert per_layer == 4 * d * d + 1 == 1_048_577
  assert total == 6 * per_layer == 6_291_462
  total, per_layer = _encoder_params("transformer")
  assert per_layer == 4 * d * d + 4 * d + 2 * d * f + f + d + 4 * d == 3_152_384
  assert total == 18_914_304
  _, rezero = _encoder_params("rezero")
  assert rezero == per_layer - 4 * d + 1


# ---------------------------------------------------------------------- checks


def test_check_model_config():
  good = dict(name="transformer", num_layers=4, hidden_size=16, embed_dim=8, num_heads=8,
              ffn_size=None, dropout_rate=0.1, objective="classify",
              freeze_embeddings=False)
  encoders.check_model_config(good)
  encoders.check_model_config(ConfigDict(good))
  encoders.check_model_config(dict(good, name="starsaber", hidden_size=10))  # no heads
  bad = [(dict(name="bert"), "name"), (dict(num_layers=0), "num_layers"),
         (dict(num_layers=2.0), "num_layers"), (dict(hidden_size=12), "divisible"),
         (dict(name="rezero", num_heads=5), "divisible"), (dict(objective="lm"), "objective"),
         (dict(dropout_rate=1.0), "dropout_rate"), (dict(dropout_rate=-0.1), "dropout_rate"),
         (dict(ffn_size=0), "ffn_size"), (dict(freeze_embeddings="yes"), "freeze")]
  for fields, match in bad:
    with pytest.raises(ValueError, match=match):
      encoders.check_model_config(dict(good, **fields))
  assert set(encoders.ENCODER_MODELS) <= set(models.MODELS.names())


@pytest.mark.parametrize("name", ["transformer", "starsaber_pe"])
def test_positional_encoders_scale_the_embedding_and_add_positions(name):
  """Vaswani et al. §3.4: the layers read embed(x) * sqrt(d) + PE (dropout off)."""
  model, batch = _build(name, embed_dim=H), _batch()
  variables = model.init(jax.random.key(0), batch)
  _, inter = model.apply(variables, batch, capture_intermediates=True,
                         mutable=["intermediates"])
  layers_in = inter["intermediates"]["Dropout_0"]["__call__"][0]   # then the classifier's
  table = np.asarray(variables["params"]["embed"]["embedding"])
  want = table[batch["inputs"]] * math.sqrt(H) + np.asarray(sinusoidal_positions(6, H))[None]
  np.testing.assert_allclose(layers_in, want, rtol=1e-6, atol=1e-6)


def test_classifier_reads_the_pooled_sentence_through_dropout():
  """In training the classifier's input is the pooled sentence vector with dropout (each
  feature 0 or scaled by 1 / (1 - rate), masks from the key); in evaluation it is the
  pooled vector itself."""
  batch = _batch()
  model = _build("starsaber", dropout_rate=0.5)
  params = model.init(jax.random.key(0), batch)["params"]
  mask = np.arange(6)[None] < batch["lengths"][:, None]

  def run(train, key):
    seen = {}
    def record(f, args, kwargs, context):
      out = f(*args, **kwargs)
      if context.module.name == "encoder":
        seen["pooled"] = np.asarray(encoders.masked_mean(out, mask))
      elif context.module.name == "classifier":
        seen["classifier_in"] = np.asarray(args[0])
      return out
    with nn.intercept_methods(record):
      model.apply({"params": params}, batch, train=train, rngs={"dropout": key})
    return seen["pooled"], seen["classifier_in"]

  pooled, seen = run(True, jax.random.key(1))
  dropped = seen == 0
  assert 0 < dropped.mean() < 1
  np.testing.assert_allclose(seen[~dropped], 2 * pooled[~dropped], rtol=1e-5, atol=1e-6)
  _, other = run(True, jax.random.key(2))
  assert not np.array_equal(dropped, other == 0)
  pooled, seen = run(False, jax.random.key(1))
  np.testing.assert_array_equal(seen, pooled)

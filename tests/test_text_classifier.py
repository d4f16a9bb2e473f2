"""The LSTMN paper's text classifiers (rumjax/models/text_classifier.py): padding never
reaches the logits, pooling, the four registered models on one sentence and on pairs,
the intra-attention read-out and its heat map, and the config checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rumjax import models
from rumjax.plotting import attention as plotting_attention
from rumjax.models import LSTMN, text_classifier as tc

V, E, H = 20, 6, 8
NAMES = ("lstm", "lstmn", "lstmn_shallow", "lstmn_deep")


def _model_config(model_name, **fields):
  m = dict(name=model_name, cell="lstm", hidden_size=H, embed_dim=E, num_layers=1, pooling="mean",
           mlp_layers=2, mlp_size=None, dropout_rate=0.2, attn_size=None, memory_span=None,
           inter_size=None, skip_input=False, condition_on_source=False, impl="fast",
           lam=1, eta=None, activation="relu", update_gate=True, layer_norm=False,
           zoneout=0.0)
  m.update(fields)
  return m


def _build(name, **fields):
  return tc.build_text_classifier(_model_config(name, **fields), vocab_size=V, num_classes=3)


def _pair(seed=0):
  rng = np.random.default_rng(seed)
  return {"premise": rng.integers(2, V, (3, 7)).astype(np.int32),
          "premise_lengths": np.array([7, 3, 1], np.int32),
          "hypothesis": rng.integers(2, V, (3, 5)).astype(np.int32),
          "hypothesis_lengths": np.array([5, 2, 4], np.int32)}


def _single(seed=0):
  pair = _pair(seed)
  return {"inputs": pair["premise"], "lengths": pair["premise_lengths"]}


def _repad(batch, value):
  """The batch with every padded token id replaced by ``value``."""
  out = dict(batch)
  for key in ("inputs", "premise", "hypothesis"):
    if key in batch:
      lengths = batch["lengths" if key == "inputs" else f"{key}_lengths"]
      pad = np.arange(batch[key].shape[1])[None] >= lengths[:, None]
      out[key] = np.where(pad, value, batch[key]).astype(np.int32)
  return out


def test_masked_mean_and_last_ignore_padding():
  hs = jnp.arange(2 * 4 * 3, dtype=jnp.float32).reshape(2, 4, 3)
  mask = jnp.array([[True, True, False, False], [True, True, True, True]])
  poisoned = jnp.where(mask[..., None], hs, jnp.nan)   # padded outputs are unspecified
  np.testing.assert_allclose(tc.masked_mean(poisoned, mask),
                             np.stack([hs[0, :2].mean(0), hs[1].mean(0)]))
  np.testing.assert_allclose(tc.last_real(poisoned, mask), np.stack([hs[0, 1], hs[1, 3]]))
  empty = jnp.zeros((1, 4), bool)
  assert np.all(tc.masked_mean(hs[:1], empty) == 0) and np.all(tc.last_real(hs[:1], empty) == 0)
  with pytest.raises(ValueError, match="pooling='max'"):
    tc.pool(hs, mask, "max")


def test_poolings_and_text_classifiers_are_found_by_name():
  assert tc.POOLINGS.names() == ["last", "mean"] and tc.POOLINGS.get("mean") is tc.masked_mean
  with pytest.raises(ValueError, match=r"pooling='max' is unknown; use one of "
                                       r"\['last', 'mean'\]"):
    tc.pool(jnp.zeros((1, 2, 3)), jnp.ones((1, 2), bool), "max")
  assert [tc.text_classifier_class(n).pairs_only for n in NAMES] == [False, False, True, True]
  with pytest.raises(ValueError, match=r"model 'starsaber' is not a text classifier; the "
                                       r"text classifiers are \['lstm', 'lstmn', "
                                       r"'lstmn_deep', 'lstmn_shallow'\]"):
    tc.build_text_classifier(_model_config("starsaber"), vocab_size=V, num_classes=3)
  # The recurrent baseline builds its own stacked cell for num_layers > 1; others nothing.
  assert tc.RecurrentTextClassifier.config_fields(_model_config("lstm")) == {}
  assert list(tc.RecurrentTextClassifier.config_fields(_model_config("lstm", num_layers=2))
              ) == ["cell"]
  assert tc.LSTMNTextClassifier.config_fields(_model_config("lstmn", num_layers=2)) == {}


@pytest.mark.parametrize("name", NAMES)
def test_padded_token_ids_change_nothing(name):
  """Masked pooling (and masked attention) ignore padding: other padded ids, same logits."""
  model = _build(name)
  # One sentence for "lstm" and "lstmn" (a pair is two such encoders), a pair for fusion.
  for batch in [_single() if name in ("lstm", "lstmn") else _pair()]:
    variables = model.init(jax.random.key(0), batch)
    apply = jax.jit(model.apply)
    logits = apply(variables, batch)
    assert logits.shape == (3, 3) and np.all(np.isfinite(logits))
    for value in (0, 1, V - 1):
      np.testing.assert_allclose(apply(variables, _repad(batch, value)), logits, atol=1e-6)
    # Real tokens do matter.
    changed = dict(batch)
    key = "inputs" if "inputs" in batch else "hypothesis"
    changed[key] = batch[key].copy()
    changed[key][0, 0] = (batch[key][0, 0] + 1) % V
    assert not np.allclose(apply(variables, changed)[0], logits[0])


def _params(model, batch):
  """The parameter shapes (nothing computed)."""
  return jax.eval_shape(lambda: model.init(jax.random.key(0), batch))["params"]


def test_parameters_of_each_family():
  names = lambda model, batch: set(_params(model, batch))
  assert names(_build("lstm"), _single()) == {"embed", "encoder", "head"}
  for name in ("lstm", "lstmn"):   # two encoders for a pair (Bowman et al.'s two LSTMs)
    assert names(_build(name), _pair()) == {"embed", "premise_encoder",
                                            "hypothesis_encoder", "head"}
  params = _params(_build("lstmn", num_layers=2), _single())
  assert set(params["encoder"]) == {"layer_0", "layer_1"}
  assert set(params["head"]) == {"mlp_0", "mlp_1", "logits"}
  assert params["head"]["mlp_0"]["kernel"].shape == (H, H)
  params = _params(_build("lstmn_deep"), _pair())
  assert set(params) == {"embed", "fusion", "head"}
  assert params["head"]["mlp_0"]["kernel"].shape == (2 * H, H)   # [premise; hypothesis]
  linear = _params(_build("lstmn", mlp_layers=0), _single())
  assert set(linear["head"]) == {"logits"}
  # A 2-layer "lstm" stacks two cells; --cell=gru gives GRU cells.
  stacked = _params(_build("lstm", num_layers=2, cell="gru"), _single())
  assert set(stacked["encoder"]["cell"]) == {"cells_0", "cells_1"}
  assert set(stacked["encoder"]["cell"]["cells_0"]) == {"ir", "iz", "in", "hr", "hz", "hn"}


def test_dropout_only_in_training():
  model, batch = _build("lstmn", dropout_rate=0.5), _single()
  variables = model.init(jax.random.key(0), batch)
  a = model.apply(variables, batch, train=True, rngs={"dropout": jax.random.key(1)})
  b = model.apply(variables, batch, train=True, rngs={"dropout": jax.random.key(2)})
  assert not np.allclose(a, b)
  np.testing.assert_allclose(model.apply(variables, batch), model.apply(variables, batch))


@pytest.mark.parametrize("name", ["lstmn_shallow", "lstmn_deep"])
def test_fusion_needs_a_pair(name):
  with pytest.raises(ValueError, match=f"model '{name}' reads a sentence pair"):
    _build(name).init(jax.random.key(0), _single())


def test_intra_attention_is_the_layers_attention():
  model, batch = _build("lstmn"), _single()
  params = model.init(jax.random.key(0), batch)["params"]
  (weights,) = tc.intra_attention(model, params, batch)
  xs = params["embed"]["embedding"][batch["inputs"]]
  mask = np.arange(7)[None] < batch["lengths"][:, None]
  _, _, expected = LSTMN(H, H).apply({"params": params["encoder"]["layer_0"]}, xs, mask,
                                     return_attention=True)
  np.testing.assert_allclose(weights, expected, atol=1e-6)
  assert weights.shape == (3, 7, 8)
  for b, n in enumerate(batch["lengths"]):
    for t in range(1, n + 1):   # step t attends to positions 0..t-1 only
      np.testing.assert_allclose(weights[b, t - 1, :t].sum(), 1.0, atol=1e-5)
      assert np.all(weights[b, t - 1, t:] == 0)
  stacked = _build("lstmn", num_layers=2)
  layers = tc.intra_attention(stacked, stacked.init(jax.random.key(0), batch)["params"], batch)
  assert len(layers) == 2
  deep = _build("lstmn_deep")
  pair = _pair()
  (premise,) = tc.intra_attention(deep, deep.init(jax.random.key(0), pair)["params"], pair,
                                  "premise")
  assert premise.shape == (3, 7, 8)
  with pytest.raises(ValueError, match="only the premise"):
    tc.intra_attention(deep, deep.init(jax.random.key(0), pair)["params"], pair, "hypothesis")
  with pytest.raises(ValueError, match="no intra-attention"):
    lstm = _build("lstm")
    tc.intra_attention(lstm, lstm.init(jax.random.key(0), batch)["params"], batch)


def test_attention_heat_map_png(tmp_path):
  tokens = ["it", "'s", "a", "fantastic", "movie"]
  rng = np.random.default_rng(0)
  weights = np.tril(rng.random((5, 6)))   # row t - 1 holds positions 0..t-1
  weights /= weights.sum(1, keepdims=True)
  path = plotting_attention.plot_intra_attention(tokens, weights, str(tmp_path / "a.png"),
                                                 title="test")
  with open(path, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  picture = plotting_attention.attention_matrix(weights, 5)
  # Step 1 reads only the empty slot (position 0); step t reads positions 0..t-1.
  assert picture.shape == (5, 5) and picture[0, 0] == weights[0, 0] == 1.0
  assert np.all(np.isnan(picture[np.triu_indices(5, k=1)]))
  np.testing.assert_array_equal(picture[np.tril_indices(5)], weights[np.tril_indices(5)])
  with pytest.raises(ValueError, match="for 5 tokens"):
    plotting_attention.attention_matrix(weights[:4], 5)


def test_pretrained_init_and_config_checks():
  matrix = np.arange(V * E, dtype=np.float32).reshape(V, E)
  model = tc.build_text_classifier(_model_config("lstm"), vocab_size=V, num_classes=3,
                                   embedding_init=tc.pretrained_init(lambda: matrix))
  params = model.init(jax.random.key(0), _single())["params"]
  np.testing.assert_array_equal(params["embed"]["embedding"], matrix)
  wrong = tc.build_text_classifier(_model_config("lstm"), vocab_size=V + 1, num_classes=3,
                                   embedding_init=tc.pretrained_init(lambda: matrix))
  with pytest.raises(ValueError, match="pre-trained embedding has shape"):
    wrong.init(jax.random.key(0), _single())
  names = ("lstm", "lstmn")
  tc.check_model_config(_model_config("lstmn"), names)
  for fields, message in [
      (dict(name="lstmn_deep"), "it reads sentence pairs"),
      (dict(cell="gru"), "config.model.cell='gru' is read only by"),
      (dict(pooling="max"), "config.model.pooling='max'"),
      (dict(num_layers=0), "config.model.num_layers=0"),
      (dict(mlp_layers=-1), "config.model.mlp_layers=-1"),
      (dict(dropout_rate=1.0), "config.model.dropout_rate=1.0"),
      (dict(impl="slow"), "config.model.impl='slow'")]:
    with pytest.raises(ValueError, match=message):
      tc.check_model_config(_model_config("lstmn", **fields), names)
  with pytest.raises(ValueError, match="one LSTMN per sentence"):
    tc.check_model_config(_model_config("lstmn_deep", num_layers=2), NAMES)
  with pytest.raises(ValueError, match="did you mean 'lstmn'"):
    models.build_model(_model_config("lstmnn"), vocab_size=V, num_classes=3)


def test_each_sentence_of_a_pair_reads_its_own_encoder():
  """The premise (7 steps) goes through "premise_encoder", the hypothesis (5 steps) through
  "hypothesis_encoder": the names intra_attention and launch.attention read (encode_pair
  is the base class's, shared by every family)."""
  model, batch = _build("lstmn"), _pair()
  variables = model.init(jax.random.key(0), batch)
  _, inter = model.apply(variables, batch, capture_intermediates=True,
                         mutable=["intermediates"])
  for encoder, steps in (("premise_encoder", 7), ("hypothesis_encoder", 5)):
    outputs = jax.tree.leaves(inter["intermediates"][encoder]["__call__"])
    assert outputs and all(np.shape(o)[:2] == (3, steps) for o in outputs), encoder

"""The recurrent language model: state carried across windows equals one long sequence,
resets restore the initial state; the perplexity evaluator's arithmetic."""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rumjax import evaluators, models
from rumjax.cells import make_cell
from rumjax.models import lm
from rumjax import sharding as sharding_lib
from rumjax.training.state import TrainState

V, B, T = 11, 3, 5
CELLS = {
    "gru": lambda: make_cell("gru", 6),
    "rum_lam1_fast": lambda: make_cell("rum", 6, lam=1, eta=1.0),   # rum_scan path
    "rum_lam0_zoneout": lambda: make_cell("rum", 6, lam=0, zoneout=0.3),  # nn.RNN path
    "lnlstm_zoneout": lambda: make_cell("lnlstm", 6, zoneout=0.1, zoneout_c=0.5),
}


@pytest.mark.parametrize("name", sorted(CELLS))
def test_two_windows_with_carried_state_equal_one_long_window(name):
  model = lm.LanguageModel(cell=CELLS[name](), vocab_size=V, embed_dim=4, dropout_rate=0.2)
  tokens = jax.random.randint(jax.random.key(0), (B, 2 * T), 0, V)
  variables = model.init(jax.random.key(1), {"inputs": tokens[:, :T]})
  apply = jax.jit(lambda b, s: model.apply(variables, b, model_state=s))
  whole, _ = apply({"inputs": tokens}, None)
  first, state = apply({"inputs": tokens[:, :T]}, None)
  second, _ = apply({"inputs": tokens[:, T:]}, state)
  np.testing.assert_allclose(np.concatenate([first, second], 1), whole, rtol=2e-5,
                             atol=2e-5)
  # A reset row starts again from the initial state: its logits are those of a fresh start.
  reset = jnp.array([True, False, True])
  again, _ = apply({"inputs": tokens[:, T:], "reset": reset}, state)
  fresh, _ = apply({"inputs": tokens[:, T:]}, None)
  np.testing.assert_allclose(again[reset], fresh[reset], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(again[~reset], second[~reset], rtol=1e-5, atol=1e-6)


def test_initial_state_and_dropout_in_training():
  model = lm.LanguageModel(cell=make_cell("rum", 6, lam=1), vocab_size=V, embed_dim=4,
                           dropout_rate=0.5)
  r, h = lm.initial_state(model, B)
  np.testing.assert_array_equal(r, np.broadcast_to(np.eye(6), (B, 6, 6)))
  np.testing.assert_array_equal(h, np.zeros((B, 6)))
  batch = {"inputs": jnp.zeros((B, T), jnp.int32)}
  variables = model.init(jax.random.key(0), batch)
  run = lambda k: model.apply(variables, batch, train=True, rngs={"dropout": k})[0]
  assert not np.allclose(run(jax.random.key(1)), run(jax.random.key(2)))
  np.testing.assert_array_equal(run(jax.random.key(1)), run(jax.random.key(1)))
  assert models.MODELS.get("lm") is lm.LanguageModel


def test_perplexity_evaluator_arithmetic():
  nll = [np.float32(3.0), np.float32(5.0)]
  tokens = [np.float32(2.0), np.float32(6.0)]
  batches = [{"i": np.zeros((2,), np.int32) + k} for k in range(2)]

  def predict(params, batch, state):
    k = batch["i"][0]
    return {"nll": (jnp.asarray(nll)[k], jnp.asarray(tokens)[k]),
            "other": (1.0, 1.0)}, state

  ev = evaluators.build_evaluators({"valid": dict(type="perplexity", split="valid")},
                                   predict_fns={"metrics": jax.jit(predict)},
                                   data_fn=lambda s, b: iter(batches),
                                   mesh=sharding_lib.make_mesh())[0]
  state = TrainState(step=jnp.zeros((), jnp.int32), params={}, opt_state=(),
                     rng=jnp.zeros((2,), jnp.uint32))
  out = ev.run(state)
  assert out["valid_tokens"] == 8.0
  assert out["valid_nll"] == pytest.approx(1.0)
  assert out["valid_bpc"] == pytest.approx(1.0 / math.log(2))
  assert out["valid_ppl"] == pytest.approx(math.e)


def test_reset_rows_start_from_the_initial_state_others_continue():
  model = lm.LanguageModel(cell=make_cell("gru", 6), vocab_size=V, embed_dim=4)
  tokens = jax.random.randint(jax.random.key(0), (2, 2 * T), 0, V)
  variables = model.init(jax.random.key(1), {"inputs": tokens[:, :T]})
  _, state = model.apply(variables, {"inputs": tokens[:, :T]})
  second = {"inputs": tokens[:, T:]}
  carried, _ = model.apply(variables, second, model_state=state)
  fresh, _ = model.apply(variables, second)
  got, _ = model.apply(variables, dict(second, reset=np.array([True, False])),
                       model_state=state)
  assert not np.allclose(carried[0], fresh[0])      # the carried state matters
  np.testing.assert_allclose(got[0], fresh[0], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(got[1], carried[1], rtol=1e-5, atol=1e-6)


def test_dropout_on_the_core_output_in_training_only():
  """The head reads the core's outputs through dropout: in training each unit is 0 or
  scaled by 1 / (1 - rate), with masks from the dropout key; in evaluation unchanged."""
  model = lm.LanguageModel(cell=make_cell("gru", 6), vocab_size=V, embed_dim=4,
                           dropout_rate=0.5)
  batch = {"inputs": jax.random.randint(jax.random.key(0), (B, T), 0, V)}
  variables = model.init(jax.random.key(1), batch)

  def run(train, key):
    seen = {}
    def record(f, args, kwargs, context):
      out = f(*args, **kwargs)
      if context.module.name == "rnn":
        seen["core"] = out[1]
      elif context.module.name == "head":
        seen["head_in"] = args[0]
      return out
    with nn.intercept_methods(record):
      model.apply(variables, batch, train=train, rngs={"dropout": key})
    return np.asarray(seen["core"]), np.asarray(seen["head_in"])

  core, head_in = run(True, jax.random.key(2))
  dropped = head_in == 0
  assert 0 < dropped.mean() < 1
  np.testing.assert_allclose(head_in[~dropped], 2 * core[~dropped], rtol=1e-6)
  _, other = run(True, jax.random.key(3))
  assert not np.array_equal(dropped, other == 0)
  core, head_in = run(False, jax.random.key(2))
  np.testing.assert_array_equal(head_in, core)

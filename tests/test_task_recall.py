"""The associative recall task: data against its definition, iterators, metrics, configs."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tasks import recall
from tasks.configs import recall as recall_config


def small_config(**overrides):
  c = recall_config.get_config()
  c.length, c.batch_size = 8, 8
  c.num_train, c.num_dev, c.num_test = 50, 20, 30
  c.update(overrides)
  return c


# ----------------------------------------------------------------------------- data


def test_vocabulary():
  assert recall.VOCAB[:26] == list("abcdefghijklmnopqrstuvwxyz")
  assert recall.VOCAB[26:36] == list("0123456789") and recall.VOCAB[36] == "?"
  assert recall.VOCAB_SIZE == len(set(recall.VOCAB)) == 37
  text = "c1a7d3b3??d"
  np.testing.assert_array_equal(recall.encode(text), [2, 27, 0, 33, 3, 29, 1, 29, 36, 36, 3])
  assert recall.to_text(recall.encode(text)) == text
  assert recall.answer(recall.encode(text)) == 3


@pytest.mark.parametrize("length", [2, 8, 30, 50])
def test_examples_follow_the_definition(length):
  ex = recall.generate(length, 200, np.random.default_rng(0))
  x, y = ex["inputs"], ex["targets"]
  assert x.shape == (200, length + 3) and y.shape == (200,)
  assert x.dtype == y.dtype == np.int32
  pairs = length // 2
  letters, digits = x[:, 0:length:2], x[:, 1:length:2]
  # The letter set is the first T/2 letters and no letter is repeated: a permutation.
  np.testing.assert_array_equal(np.sort(letters, axis=1),
                                np.broadcast_to(np.arange(pairs), (200, pairs)))
  assert np.all((digits >= recall.DIGIT0) & (digits < recall.DIGIT0 + 10))
  assert np.all(x[:, length:length + 2] == recall.QUERY_TOKEN)
  assert np.all(x[:, -1] < pairs)  # the query is a letter of the sequence
  assert np.all((y >= 0) & (y < 10))
  assert all(recall.answer(row) == t for row, t in zip(x, y))
  if length >= 8:  # the answer is not always the same pair / digit
    assert len(set(y.tolist())) == 10
    assert len(set((x[:, -1]).tolist())) == pairs


def test_the_example_format_of_the_paper():
  text = recall.to_text(recall.generate(10, 1, np.random.default_rng(1))["inputs"][0])
  assert len(text) == 13 and text[10:12] == "??"
  assert text[0:10:2].isalpha() and text[1:10:2].isdigit() and text[-1] in text[0:10:2]


def test_splits_are_fixed_and_different():
  c = small_config()
  dev, test = list(recall.eval_data(c, "dev")), list(recall.eval_data(c, "test"))
  np.testing.assert_array_equal(next(recall.eval_data(c, "dev"))["inputs"], dev[0]["inputs"])
  assert not np.array_equal(dev[0]["inputs"], test[0]["inputs"])
  train = recall._split("train", 8, 50)["inputs"]
  assert not np.array_equal(train[:8], dev[0]["inputs"])
  with pytest.raises(ValueError, match="split"):
    recall.eval_data(c, "train")


def test_eval_data_padding():
  c = small_config()
  batches = list(recall.eval_data(c, "test"))
  assert len(batches) == 4  # ceil(30 / 8)
  mask = np.concatenate([b["mask"] for b in batches])
  assert mask.sum() == 30 and np.all(mask[30:] == 0)
  assert all(b["inputs"].shape == (8, 11) and b["targets"].shape == (8,) for b in batches)


def test_train_batches_determinism_sharding_and_resume():
  c = small_config()
  b = next(recall.train_data(c))
  assert set(b) == {"inputs", "targets", "mask"}
  assert b["inputs"].shape == (8, 11) and b["targets"].shape == (8,)
  assert all(recall.answer(r) == t for r, t in zip(b["inputs"], b["targets"]))
  whole = recall.train_data(c)
  shards = [recall.train_data(c, process_index=p, process_count=4) for p in range(4)]
  for _ in range(3):
    next(whole)
    for s in shards:
      next(s)
  state = json.loads(json.dumps(whole.get_state()))
  for _ in range(10):  # crosses epochs
    g = next(whole)
    parts = [next(s) for s in shards]
    for key in g:
      np.testing.assert_array_equal(np.concatenate([p[key] for p in parts]), g[key])
  resumed = recall.train_data(c)
  resumed.set_state(state)
  again = recall.train_data(c)
  for _ in range(3):
    next(again)
  for _ in range(10):
    np.testing.assert_array_equal(next(resumed)["inputs"], next(again)["inputs"])
  with pytest.raises(ValueError, match="divisible"):
    recall.train_data(c, process_count=3)


# -------------------------------------------------------------------------- metrics


def test_loss_and_metrics():
  batch = next(recall.train_data(small_config()))
  perfect = 50.0 * jax.nn.one_hot(batch["targets"], 10)
  loss, m = jax.jit(recall.loss_and_metrics)(perfect, batch)
  assert float(loss) < 1e-6 and float(m["accuracy"][0]) == float(m["accuracy"][1]) == 8
  loss, m = recall.loss_and_metrics(jnp.zeros((8, 10)), batch)
  assert float(loss) == pytest.approx(math.log(10), rel=1e-5)
  assert float(m["loss"][0]) == pytest.approx(8 * math.log(10), rel=1e-5)
  masked = dict(batch, mask=np.r_[np.zeros(2), np.ones(6)].astype(np.float32))
  loss, m = recall.loss_and_metrics(perfect.at[:2].set(-perfect[:2]), masked)
  assert float(loss) < 1e-6 and float(m["accuracy"][0]) == float(m["accuracy"][1]) == 6
  # Right answers on the masked rows do not count either.
  assert float(recall.loss_and_metrics(perfect, masked)[1]["accuracy"][0]) == 6


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize("variant,length", [(None, 30), ("T30", 30), ("T50", 50)])
def test_default_configs_validate(variant, length):
  c = recall_config.get_config(variant)
  recall.validate_config(c)
  assert c.length == length and c.variant == variant and c.task == "recall"
  m = c.model
  assert (m.name, m.cell, m.lam, m.eta, m.hidden_size) == ("classifier", "rum", 1, None, 50)
  # Dev during training and at the end (a few batches in the small setting), whole test
  # set at the end.
  assert (c.evals.eval.split, c.evals.eval.at_end) == ("dev", True)
  assert c.evals.eval.batches == (20 if variant is None else 0)
  assert (c.evals.test.batches, c.evals.test.every) == (0, 0)
  assert (c.optimizer, c.learning_rate, c.batch_size) == ("rmsprop", 1e-3, 128)
  assert (c.num_train, c.num_dev, c.num_test) == (100_000, 10_000, 20_000)


@pytest.mark.parametrize("field,value", [
    ("length", 7), ("length", 54), ("length", 0), ("num_dev", 0), ("lam", -1),
    ("cell", "nope"), ("batch_size", 0), ("variant", "T40"),
])
def test_validate_config_names_the_field(field, value):
  c = recall_config.get_config()
  (c.model if field in c.model else c)[field] = value
  with pytest.raises(ValueError, match=field):
    recall.validate_config(c)

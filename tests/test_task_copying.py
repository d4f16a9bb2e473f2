"""The copying memory task: data against its definition, iterators, metrics, configs."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tasks
from tasks import copying
from tasks.configs import copying as copying_config


def small_config(**overrides):
  c = copying_config.get_config()
  c.delay, c.batch_size, c.num_train, c.num_test = 5, 8, 50, 21
  c.update(overrides)
  return c


# ----------------------------------------------------------------------------- data


def test_memoryless_baseline_is_footnote_4():
  assert copying.memoryless_baseline(500) == pytest.approx(10 * math.log(8) / 520)
  assert copying.memoryless_baseline(10) == pytest.approx(10 * math.log(8) / 30)


@pytest.mark.parametrize("delay", [1, 5, 30])
def test_examples_follow_the_definition(delay):
  symbols = np.random.default_rng(0).integers(0, 8, size=(6, 10))
  ex = copying.make_examples(symbols, delay)
  x, y = ex["inputs"], ex["targets"]
  assert x.shape == y.shape == (6, delay + 20) and x.dtype == y.dtype == np.int32
  blank, marker = copying.BLANK, copying.MARKER
  # inputs = [data(10), blank * (delay - 1), marker, blank * 10]
  np.testing.assert_array_equal(x[:, :10], symbols)
  assert np.all(x[:, 10:10 + delay - 1] == blank)
  assert np.all(x[:, 10 + delay - 1] == marker)
  assert np.all(x[:, 10 + delay:] == blank)
  assert np.all((x == marker).sum(axis=1) == 1)
  # targets = [blank * (delay + 10), data(10)]: blank until the marker, then the copy.
  assert np.all(y[:, :delay + 10] == blank)
  np.testing.assert_array_equal(y[:, -10:], symbols)
  assert y.max() < copying.NUM_CLASSES


def test_train_batches_shapes_vocab_and_determinism():
  c = small_config()
  a = [next(copying.train_data(c)) for _ in range(1)][0]
  assert set(a) == {"inputs", "targets", "mask"}
  assert a["inputs"].shape == a["targets"].shape == (8, 25)
  assert a["inputs"].dtype == np.int32 and a["mask"].dtype == np.float32
  assert a["inputs"].min() >= 0 and a["inputs"].max() < copying.VOCAB_SIZE
  assert np.all(a["inputs"][:, :10] < copying.NUM_DATA)
  it1, it2 = copying.train_data(c), copying.train_data(c)
  for _ in range(9):  # crosses an epoch boundary (50 examples, batch 8)
    b1, b2 = next(it1), next(it2)
    np.testing.assert_array_equal(b1["inputs"], b2["inputs"])
  other = next(copying.train_data(small_config(seed=1)))
  assert not np.array_equal(other["inputs"], a["inputs"])


def test_an_epoch_visits_every_example_once():
  c = small_config(num_train=48)  # 6 batches of 8 per epoch
  it = copying.train_data(c)
  seen = np.concatenate([it.indices(i) for i in range(6)])
  np.testing.assert_array_equal(np.sort(seen), np.arange(48))
  nxt = np.concatenate([it.indices(i) for i in range(6, 12)])
  np.testing.assert_array_equal(np.sort(nxt), np.arange(48))
  assert not np.array_equal(seen, nxt)  # reshuffled


def test_process_shards_concatenate_to_the_global_batch():
  c = small_config()
  whole = copying.train_data(c)
  shards = [copying.train_data(c, process_index=p, process_count=2) for p in range(2)]
  for _ in range(8):
    g = next(whole)
    parts = [next(s) for s in shards]
    for key in g:
      np.testing.assert_array_equal(np.concatenate([p[key] for p in parts]), g[key])


def test_batch_size_must_divide_over_processes():
  with pytest.raises(ValueError, match="divisible"):
    copying.train_data(small_config(), process_index=0, process_count=3)
  with pytest.raises(ValueError, match="process_index"):
    copying.train_data(small_config(), process_index=2, process_count=2)


def test_state_resumes_the_same_sequence():
  c = small_config()
  it = copying.train_data(c)
  for _ in range(3):
    next(it)
  state = json.loads(json.dumps(it.get_state()))
  expected = [next(it)["inputs"] for _ in range(5)]
  resumed = copying.train_data(c)
  resumed.set_state(state)
  for e in expected:
    np.testing.assert_array_equal(next(resumed)["inputs"], e)
  with pytest.raises(ValueError, match="seed"):
    copying.train_data(small_config(seed=3)).set_state(state)


def test_eval_data_covers_the_test_set_once_with_padding():
  c = small_config()
  batches = list(copying.eval_data(c, "test"))
  assert len(batches) == 3  # ceil(21 / 8)
  assert all(b["inputs"].shape == (8, 25) for b in batches)
  mask = np.concatenate([b["mask"] for b in batches])
  assert mask.sum() == 21 and np.all(mask[:21] == 1) and np.all(mask[21:] == 0)
  data = np.concatenate([b["inputs"][:, :10] for b in batches])[:21]
  assert len({tuple(r) for r in data}) > 15  # real, mostly distinct examples
  # Fixed data: the same on every call, a different set than the training data.
  np.testing.assert_array_equal(next(copying.eval_data(c, "test"))["inputs"],
                                batches[0]["inputs"])
  halves = [copying.eval_data(c, "test", process_index=p, process_count=2) for p in (0, 1)]
  for b, h0, h1 in zip(batches, *halves):
    np.testing.assert_array_equal(np.concatenate([h0["mask"], h1["mask"]]), b["mask"])
  with pytest.raises(ValueError, match="split"):
    copying.eval_data(c, "dev")


# -------------------------------------------------------------------------- metrics


def test_loss_and_metrics():
  c = small_config()
  batch = next(copying.train_data(c))
  perfect = 50.0 * jax.nn.one_hot(batch["targets"], copying.NUM_CLASSES)
  loss, m = jax.jit(copying.loss_and_metrics)(perfect, batch)
  assert float(loss) < 1e-6
  assert float(m["accuracy"][0]) == float(m["accuracy"][1]) == 8 * 10
  assert float(m["loss"][1]) == 8 * 25
  baseline = m["memoryless_baseline"][0] / m["memoryless_baseline"][1]
  assert float(baseline) == pytest.approx(copying.memoryless_baseline(5), rel=1e-6)
  uniform = jnp.zeros(perfect.shape)
  loss, m = copying.loss_and_metrics(uniform, batch)
  assert float(loss) == pytest.approx(math.log(9), rel=1e-5)
  # Padded rows count nowhere.
  masked = dict(batch, mask=np.r_[np.ones(5), np.zeros(3)].astype(np.float32))
  wrong = perfect.at[5:].set(-perfect[5:])
  loss, m = copying.loss_and_metrics(wrong, masked)
  assert float(loss) < 1e-6 and float(m["accuracy"][1]) == 50 and float(m["loss"][1]) == 125
  assert float(copying.loss_and_metrics(perfect, masked)[1]["accuracy"][0]) == 50


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize("variant,delay", [(None, 10), ("T200", 200), ("T500", 500),
                                           ("T1000", 1000)])
def test_default_configs_validate(variant, delay):
  c = copying_config.get_config(variant)
  copying.validate_config(c)
  assert c.delay == delay and c.variant == variant and c.task == "copying"
  m = c.model
  assert m.name == "tagger" and m.cell == "rum" and m.lam == 1 and m.eta is None
  assert m.hidden_size == 100 and m.embed_dim is None
  assert c.optimizer == "rmsprop" and c.rmsprop_decay == 0.9
  assert c.evals.test.split == "test" and c.evals.test.batches == 0  # the whole test set
  assert c.evals.test.every == c.eval_every
  if variant:
    assert (c.batch_size, c.learning_rate, c.num_train, c.num_test) == (128, 1e-3, 50_000, 500)


def test_hidden_size_rule():
  assert copying_config.hidden_size_for("rum", 1) == 100
  assert copying_config.hidden_size_for("rum", 0) == 250
  assert copying_config.hidden_size_for("gru", 1) == 250


@pytest.mark.parametrize("field,value", [
    ("lam", -1.0), ("delay", 0), ("batch_size", 0), ("cell", "nope"), ("eta", -1.0),
    ("optimizer", "lamb"), ("grad_clip", -1.0), ("zoneout", 1.0), ("num_train", 0),
    ("hidden_size", 0), ("activation", "gelu"), ("task", "recall"), ("lr_boundaries", [100]),
    ("name", "nosuchmodel"),
])
def test_validate_config_names_the_field(field, value):
  c = copying_config.get_config()
  (c.model if field in c.model else c)[field] = value
  with pytest.raises(ValueError, match=field):
    copying.validate_config(c)


@pytest.mark.parametrize("lam", [0, 0.5, 1, 2, 2.5])
def test_any_real_lam_is_valid_a_negative_one_is_a_one_line_error(lam):
  c = copying_config.get_config()
  c.model.lam = lam   # --config.model.lam=0.5 parses: the field is a float
  copying.validate_config(c)
  c.model.lam = -0.5
  with pytest.raises(ValueError, match=r"^config\.model\.lam: lam=-0\.5 .*>= 0") as e:
    copying.validate_config(c)
  assert "\n" not in str(e.value)


def test_unknown_variant():
  with pytest.raises(ValueError, match="T500"):
    copying_config.get_config("T7")


def test_task_registry():
  assert {"copying", "recall"} <= set(tasks.task_names())
  assert tasks.get_task("copying") is copying.TASK
  with pytest.raises(ValueError, match=r"unknown task 'x'; known tasks are \[.*'copying'"):
    tasks.get_task("x")
  with pytest.raises(ValueError, match="did you mean 'copying'"):
    tasks.get_task("copyng")


def test_the_plateau_rule_with_a_urnn_is_refused_before_training(tmp_path):
  """lr_plateau_factor < 1 would not reach the uRNN's orthogonal matrix (its Cayley steps
  take the schedule's rate): a one-line error before any step, no workdir left."""
  from rumjax import training
  c = small_config(num_steps=2)
  c.model.cell = "urnn"
  c.update(lr_plateau_factor=0.5, lr_plateau_metric="eval_loss")
  with pytest.raises(ValueError, match=r"^config.lr_plateau_factor=0.5 would not reach the "
                     r"uRNN's orthogonal matrix \(\[.*recurrent_orthogonal"):
    training.train_and_evaluate(c, str(tmp_path / "run"), copying.TASK)
  assert not (tmp_path / "run").exists()
  c.lr_plateau_factor = 1.0
  assert training.train_and_evaluate(c, str(tmp_path / "run"), copying.TASK)["step"] == 2

def test_a_urnn_run_with_the_plateau_rule_saved_before_the_check_still_evaluates(
    tmp_path, monkeypatch):
  """The check sat in every checkpoint load: such a run (trained before the check existed)
  could not be evaluated or predicted. It is on the training path only."""
  from rumjax import training
  from rumjax.training import optim
  c = small_config(num_steps=2)
  c.model.cell = "urnn"
  c.update(lr_plateau_factor=0.5, lr_plateau_metric="test_loss")
  with monkeypatch.context() as m:   # the run as trained before the check
    m.setattr(optim, "check_plateau_reaches", lambda config, params: None)
    trained = training.train_and_evaluate(c, str(tmp_path / "run"), copying.TASK)
  metrics = training.evaluate_checkpoint(c, str(tmp_path / "run"), copying.TASK)
  assert metrics["step"] == 2 and metrics["test_loss"] == trained["test_loss"]

"""The CLUE tasks of the StarSaber paper (afqmc, tnews, cmnli) on small fixture folders:
text encoding, MLM batches, the hinge loss, config checks, and pretrain -> fine-tune ->
submission through the loop."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tasks
from rumjax import metrics, training
from tasks import clue
from tasks.configs import clue as clue_config

Q = ["花呗怎么还款", "借呗额度为什么降低", "蚂蚁花呗可以分期吗", "花呗账单", "借呗提前还款",
     "如何开通花呗", "花呗逾期", "借呗利息多少"]
TNEWS_LABELS = [("100", "news_story"), ("101", "news_culture"), ("102", "news_entertainment")]


def _write(folder, files):
  os.makedirs(folder, exist_ok=True)
  for name, rows in files.items():
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
      for row in rows:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
  return str(folder)


def afqmc_dir(tmp_path):
  pairs = [(Q[i % 8], Q[(i * 3 + 1) % 8], str(int(i % 3 == 0))) for i in range(24)]
  return _write(tmp_path / "afqmc", {
      "train.json": [{"sentence1": a, "sentence2": b, "label": y} for a, b, y in pairs],
      "dev.json": [{"sentence1": a, "sentence2": b, "label": y} for a, b, y in pairs[:10]],
      "test.json": [{"id": 100 + i, "sentence1": a, "sentence2": b}
                    for i, (a, b, _) in enumerate(pairs[:7])]})


def tnews_dir(tmp_path):
  rows = [{"label": TNEWS_LABELS[i % 3][0], "label_desc": TNEWS_LABELS[i % 3][1],
           "sentence": Q[i % 8] + "新闻", "keywords": "花呗"} for i in range(20)]
  return _write(tmp_path / "tnews", {
      "labels.json": [{"label": c, "label_desc": d} for c, d in TNEWS_LABELS],
      "train.json": rows, "dev.json": rows[:6]})


def _config(name, folder, tmp_path, variant=None, **fields):
  task = tasks.get_task(name)
  config = task.get_config(variant)
  config.manual_dir = folder
  config.data_dir = str(tmp_path / "tfds")
  config.model.update(num_layers=1, hidden_size=8, embed_dim=8, num_heads=2)
  config.update(batch_size=4, eval_batch_size=4, num_steps=3, eval_every=3,
                checkpoint_every=3, log_every=1)
  for key, value in fields.items():
    if key.startswith("model."):
      config.model[key[6:]] = value
    else:
      config[key] = value
  task.validate_config(config)
  return task, config


def test_the_three_tasks_are_registered_with_their_variants():
  for name in ("afqmc", "tnews", "cmnli"):
    task = tasks.get_task(name)
    assert task.name == name and task.variants == ("mlm",)
    assert task.get_config().task == name and task.submission is clue.submission
    assert task.get_config().objective == "classify"
    assert task.get_config("mlm").objective == "mlm"
    assert task.get_config("mlm").model.objective == "mlm"
    assert task.get_config().seed == 10  # "Random seed is set to 10"
  assert tasks.get_task("afqmc").get_config().learning_rate == 1e-4
  assert tasks.get_task("afqmc").get_config("mlm").learning_rate == 1e-3


def test_the_tasks_differ_by_their_registered_spec():
  assert clue.SPECS.names() == ["afqmc", "cmnli", "tnews"] == sorted(clue_config.NAMES)
  assert [clue.SPECS.get(n).num_classes for n in ("afqmc", "tnews", "cmnli")] == [2, 15, 3]
  assert [n for n, spec in clue.SPECS.items() if spec.pair] == ["afqmc", "cmnli"]
  with pytest.raises(ValueError, match=r"unknown CLUE task 'ocnli'; known CLUE tasks are "
                                       r"\['afqmc', 'cmnli', 'tnews'\]") as err:
    clue.SPECS.get("ocnli")
  assert "\n" not in str(err.value)
  with pytest.raises(ValueError, match="unknown CLUE task 'ocnli'"):
    clue_config.get_config("ocnli")
  with pytest.raises(ValueError, match="unknown afqmc variant 'mlmm'"):
    tasks.get_task("afqmc").get_config("mlmm")
  # Each task checks that the config is its own.
  with pytest.raises(ValueError, match="config.task='afqmc' but this is the 'tnews' task"):
    tasks.get_task("tnews").validate_config(tasks.get_task("afqmc").get_config())
  assert clue.OBJECTIVES.names() == ["classify", "mlm"]
  assert clue.OBJECTIVES.get("mlm").new_mask_per_epoch
  assert not clue.OBJECTIVES.get("classify").new_mask_per_epoch


def test_join_pair_cuts_the_longer_sentence_first():
  assert clue.join_pair([1, 2], [3], 9, 10) == [1, 2, 9, 3]
  assert clue.join_pair([1, 2, 3, 4, 5], [6, 7], 9, 6) == [1, 2, 3, 9, 6, 7]
  assert clue.join_pair([1, 2], None, 9, 1) == [1]
  for n1 in range(6):
    for n2 in range(6):
      out = clue.join_pair(list(range(n1)), list(range(10, 10 + n2)), 99, 5)
      assert len(out) == min(5, n1 + n2 + 1) and out.count(99) == 1


def test_pairs_are_joined_with_a_separator_and_the_vocabulary_covers_all_splits(tmp_path):
  task, config = _config("afqmc", afqmc_dir(tmp_path), tmp_path)
  d = clue.data(config)
  vocab = d.vocab
  assert vocab.tokens[:3] == ("<pad>", "<unk>", "<sep>") and vocab.pad_id == 0
  row = d.splits["train"]
  ids = row["inputs"][0][:row["lengths"][0]]
  text = vocab.to_text(ids, sep="", strip_special=False)
  assert text == Q[0] + "<sep>" + Q[1]
  assert set(d.splits) == {"train", "dev", "test"}
  np.testing.assert_array_equal(d.splits["test"]["targets"], -1)
  np.testing.assert_array_equal(d.splits["test"]["id"], 100 + np.arange(7))
  assert vocab.unk_id not in d.splits["test"]["inputs"]  # test characters are in the vocabulary
  batch = next(iter(task.eval_data(config, "dev")))
  assert batch["inputs"].shape == (4, 16) and batch["mask"].tolist() == [1, 1, 1, 1]


def test_tnews_reads_titles_only_and_has_no_test_split(tmp_path):
  task, config = _config("tnews", tnews_dir(tmp_path), tmp_path)
  d = clue.data(config)
  assert set(d.splits) == {"train", "dev"}
  assert d.vocab.id("<sep>") not in d.splits["train"]["inputs"]  # no separator in a single text
  assert "花" in d.vocab and d.splits["train"]["targets"].tolist()[:4] == [0, 1, 2, 0]
  with pytest.raises(ValueError, match="no test split"):
    list(task.eval_data(config, "test"))


def test_mlm_batches_mask_dynamically_and_never_the_separator(tmp_path):
  task, config = _config("afqmc", afqmc_dir(tmp_path), tmp_path, variant="mlm",
                         mask_prob=0.5)
  d = clue.data(config)
  it = task.train_data(config)
  assert it.num_examples == 24 + 10 + 7   # train + dev + test inputs
  batches = [next(it) for _ in range(20)]
  sep = d.vocab.id("<sep>")
  for b in batches:
    real = np.arange(b["inputs"].shape[1])[None] < b["lengths"][:, None]
    assert not np.any(b["weights"][~real])
    assert not np.any(b["weights"][b["targets"] == sep])
    np.testing.assert_array_equal(b["inputs"][b["weights"] == 0], b["targets"][b["weights"] == 0])
    assert np.all(b["inputs"][b["weights"] > 0] >= 3)  # replacements are never specials
  # A new mask every epoch: the same example in epochs 0 and 1 (10 batches of 4 = 40 rows
  # reach into epoch 1 at row 41) gets two different masks.
  masks = {}
  for step in range(22):
    idx, ep = it.indices(step), it.epochs(step)
    b = it.make_batch(idx, ep)
    for r, (i, e) in enumerate(zip(idx, ep)):
      masks.setdefault(int(i), {})[int(e)] = b["weights"][r][:b["lengths"][r]].tobytes()
  twice = [m for m in masks.values() if len(m) == 2]
  assert twice and any(m[0] != m[1] for m in twice)
  # Resumable: a fresh iterator set to the state gives the same batch.
  state = it.get_state()
  again = task.train_data(config)
  again.set_state(state)
  b1, b2 = next(it), next(again)
  for k in b1:
    np.testing.assert_array_equal(b1[k], b2[k])


def test_the_context_free_floor_counts_characters_by_hand(tmp_path):
  """The masked-LM floor from the raw texts with a Python loop: the corpus is every
  split's inputs (AFQMC: both sentences of each pair, the separator left out)."""
  import collections
  import math
  _, config = _config("afqmc", afqmc_dir(tmp_path), tmp_path)
  folder = config.manual_dir
  texts = {name: [json.loads(line) for line in open(os.path.join(folder, f"{name}.json"),
                                                    encoding="utf-8")]
           for name in ("train", "dev", "test")}
  chars = {name: [c for row in rows for c in row["sentence1"] + row["sentence2"]]
           for name, rows in texts.items()}
  counts = collections.Counter(c for name in chars for c in chars[name])
  tops = [c for c, n in counts.items() if n == max(counts.values())]
  vocab_size = len(counts) + 3                     # <pad>, <unk>, <sep>
  total = sum(counts.values())
  expected_ce = -sum(math.log((counts[c] + 1) / (total + vocab_size))
                     for c in chars["dev"]) / len(chars["dev"])
  floor = clue.context_free_floor(clue.data(config), "dev")
  assert floor["accuracy"] in [pytest.approx(chars["dev"].count(c) / len(chars["dev"]))
                               for c in tops]
  assert floor["cross_entropy"] == pytest.approx(expected_ce)
  assert 0 < floor["accuracy"] < 1


def test_multi_margin_loss_against_its_definition():
  rng = np.random.default_rng(0)
  scores = rng.normal(size=(6, 4)).astype(np.float32)
  labels = np.asarray([0, 3, 1, 2, -1, 3])
  got = np.asarray(metrics.multi_margin_loss(jnp.asarray(scores), jnp.asarray(labels)))
  for r in range(6):
    y = labels[r]
    want = 0.0 if y < 0 else sum(max(0.0, 1 - scores[r, y] + scores[r, j])
                                 for j in range(4) if j != y) / 4
    assert got[r] == pytest.approx(want, abs=1e-6)
  # Gradient: only the violating classes move.
  g = jax.grad(lambda s: metrics.multi_margin_loss(s, jnp.asarray([0]))[0])(
      jnp.asarray([[5.0, 0.0, 4.5]]))
  np.testing.assert_allclose(g, [[-1 / 3, 0.0, 1 / 3]], atol=1e-6)


def test_classification_metrics_count_precision_and_recall_of_class_one():
  logits = jnp.asarray([[0.0, 1.0], [1.0, 0.0], [0.0, 2.0], [3.0, 0.0], [0.0, 1.0]])
  batch = {"targets": jnp.asarray([1, 1, 0, 0, 1]), "mask": jnp.asarray([1, 1, 1, 1, 0.0])}
  loss, m = clue.loss_and_metrics(logits, batch)
  assert [float(x) for x in m["accuracy"]] == [2, 4]
  assert [float(x) for x in m["precision"]] == [1, 2]   # predicted 1: rows 0, 2
  assert [float(x) for x in m["recall"]] == [1, 2]      # gold 1: rows 0, 1
  assert [float(x) for x in m["f1"]] == [2, 4]          # 2 TP / (2 predicted + 2 gold)
  assert [float(x) for x in m["recall_0"]] == [1, 2]    # gold 0: rows 2, 3; row 3 right
  # Against scikit-learn's definitions, by hand: F1 = 2PR / (P + R) = 0.5.
  p, r = 1 / 2, 1 / 2
  assert float(m["f1"][0] / m["f1"][1]) == pytest.approx(2 * p * r / (p + r))
  # The majority class: F1 0 (no true positive), recall_0 1.
  majority = clue.loss_and_metrics(jnp.asarray([[1.0, 0.0]] * 3),
                                   {"targets": jnp.asarray([0, 0, 1])})[1]
  assert float(majority["f1"][0]) == 0 and [float(x) for x in majority["recall_0"]] == [2, 2]
  assert float(loss) == pytest.approx(float(m["loss"][0]) / 4)
  three = clue.loss_and_metrics(jnp.zeros((2, 3)), {"targets": jnp.asarray([0, 2])})[1]
  assert "precision" not in three


def test_balanced_class_weights_by_hand():
  w = clue.balanced_class_weights(np.asarray([0, 0, 0, 1, -1]), 3)
  # N = 4 labelled rows, C = 3: w_c = 4 / (3 N_c); class 2 has no row.
  np.testing.assert_allclose(w, [4 / 9, 4 / 3, 0.0], rtol=1e-6)
  assert w.dtype == np.float32


def test_class_weighted_hinge_loss_against_a_loop():
  """``class_weight`` in the batch: the loss is sum_i w_i l_i / sum_i w_i over the real
  rows (float64 loop, float32 on this CPU: 1e-6); accuracy and F1 still count rows."""
  rng = np.random.default_rng(1)
  logits = rng.normal(size=(6, 2)).astype(np.float32)
  targets = np.asarray([0, 1, 0, 0, 1, 0])
  mask = np.asarray([1, 1, 1, 1, 1, 0], np.float32)
  weight = np.asarray([0.75, 1.5, 0.75, 0.75, 1.5, 0.75], np.float32)
  batch = {"targets": jnp.asarray(targets), "mask": jnp.asarray(mask),
           "class_weight": jnp.asarray(weight)}
  loss, m = clue.loss_and_metrics(jnp.asarray(logits), batch)
  num = den = 0.0
  for i in range(6):
    if mask[i]:
      y = targets[i]
      hinge = max(0.0, 1.0 - float(logits[i, y]) + float(logits[i, 1 - y])) / 2
      num, den = num + float(weight[i]) * hinge, den + float(weight[i])
  assert float(loss) == pytest.approx(num / den, rel=1e-6)
  assert [float(x) for x in m["loss"]] == pytest.approx([num, den], rel=1e-6)
  unweighted = clue.loss_and_metrics(jnp.asarray(logits), {k: v for k, v in batch.items()
                                                           if k != "class_weight"})[1]
  for name in ("accuracy", "f1", "recall_0"):
    assert [float(x) for x in m[name]] == [float(x) for x in unweighted[name]]


def test_balanced_batches_carry_the_training_splits_weights(tmp_path):
  """Train and dev rows get the weight of their label from the train split's counts
  (the fixture: 8 of 24 train pairs are label 1, so w_0 = 24 / 32, w_1 = 24 / 16); the
  fine-tuning runs through the loop with it; a bad value is a one-line error."""
  folder = afqmc_dir(tmp_path)
  task, config = _config("afqmc", folder, tmp_path, class_weights="balanced")
  want = {0: 0.75, 1: 1.5}
  batch = next(iter(task.train_data(config)))
  for y, w in zip(batch["targets"], batch["class_weight"]):
    assert w == pytest.approx(want[int(y)])
  dev = next(iter(task.eval_data(config, "dev")))
  real = dev["mask"] > 0
  assert set(np.round(dev["class_weight"][real], 6)) <= {0.75, 1.5}
  assert "class_weight" not in next(iter(task.train_data(_config(
      "afqmc", folder, tmp_path)[1])))
  summary = training.train_and_evaluate(config, str(tmp_path / "run"), task)
  assert np.isfinite(summary["eval_loss"]) and 0 <= summary["eval_f1"] <= 1
  with pytest.raises(ValueError, match=r"config\.class_weights='inverse' must be one of") as err:
    _config("afqmc", folder, tmp_path, class_weights="inverse")
  assert "\n" not in str(err.value)


def test_afqmc_stops_on_dev_loss_the_others_on_accuracy():
  from tasks.configs import clue as clue_config
  afqmc = clue_config.get_config("afqmc")
  assert (afqmc.early_stopping_metric, afqmc.early_stopping_mode) == ("eval_loss", "min")
  tnews = clue_config.get_config("tnews")
  assert (tnews.early_stopping_metric, tnews.early_stopping_mode) == ("eval_accuracy", "max")
  assert clue_config.get_config("afqmc", "mlm").early_stopping_metric == ""


def test_mlm_loss_covers_every_real_position():
  logits = jnp.log(jnp.asarray([[[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]]]))
  batch = {"targets": jnp.asarray([[0, 0, 1]]), "lengths": jnp.asarray([2]),
           "weights": jnp.asarray([[0.0, 1.0, 0.0]])}
  loss, m = clue.loss_and_metrics(logits, batch)
  want = -(np.log(0.5) + np.log(0.9)) / 2   # position 2 is padding
  assert float(loss) == pytest.approx(want, rel=1e-6)
  assert [float(x) for x in m["masked_accuracy"]] == [1, 1]
  assert float(m["masked_loss"][0]) == pytest.approx(-np.log(0.9), rel=1e-6)


def test_config_errors_are_one_line(tmp_path):
  folder = afqmc_dir(tmp_path)
  task = tasks.get_task("afqmc")
  bad = [({"objective": "seq2seq"}, r"config\.objective='seq2seq' must be one of"),
         ({"mask_prob": 0.0}, r"config\.mask_prob=0\.0 must be in"),
         ({"mask_prob": None}, r"config\.mask_prob=None must be in"),   # a TypeError
         ({"model.name": "lstmn"}, "lstmn"),
         ({"word_vectors": "/nonexistent.txt"}, "is not a file"),
         ({"early_stopping_patience": 0}, r"config\.early_stopping_patience=0")]
  for fields, match in bad:
    with pytest.raises(ValueError, match=match) as err:
      _config("afqmc", folder, tmp_path, **fields)
    assert "\n" not in str(err.value)
  config = task.get_config()
  config.objective = "mlm"            # config.model.objective follows it...
  assert config.model.objective == "mlm"
  config.model.objective = "classify"  # one field in two places
  assert config.objective == "classify"
  config = task.get_config()
  config.evals.test = dict(type="loss", split="test", every=0, at_end=True, batches=0)
  with pytest.raises(ValueError, match="test labels are private"):
    task.validate_config(config)


def test_cmnli_without_files_names_them(tmp_path):
  task, config = _config("cmnli", str(tmp_path), tmp_path)
  with pytest.raises(ValueError, match="train.json") as err:
    task.train_data(config)
  assert "\n" not in str(err.value)


@pytest.mark.parametrize("model", ["starsaber", pytest.param("transformer", marks=pytest.mark.slow)])
def test_pretrain_then_fine_tune_then_write_a_submission(tmp_path, model):
  folder = afqmc_dir(tmp_path)
  task, pre = _config("afqmc", folder, tmp_path, variant="mlm", **{"model.name": model})
  summary = training.train_and_evaluate(pre, str(tmp_path / "pre"), task)
  assert np.isfinite(summary["eval_loss"]) and "eval_masked_accuracy" in summary
  _, fine = _config("afqmc", folder, tmp_path, init_from=str(tmp_path / "pre"),
                    learning_rate=1e-12, num_steps=1, **{"model.name": model})
  tuned = training.train_and_evaluate(fine, str(tmp_path / "fine"), task)
  for key in ("embed", "encoder"):
    found = [k for k in tuned["params"] if key in k.lower()]
    assert found
    for k in found:   # the pretrained parts arrive (one step of a learning rate ~0)
      jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
                   tuned["params"][k], summary["params"][k])
  assert any(k not in summary["params"] for k in tuned["params"])  # the new head
  assert 0 <= tuned["eval_accuracy"] <= 1 and "eval_precision" in tuned
  step, rows = training.predict_checkpoint(fine, str(tmp_path / "fine"), task, "test")
  out = task.submission(fine, rows)
  assert step == 1 and [r["id"] for r in out] == list(range(100, 107))
  assert all(r["label"] in ("0", "1") for r in out)


def test_a_submission_writes_the_labels_the_data_was_encoded_with(tmp_path):
  """TNEWS's files in an unpacked ``tnews_public/`` sub-folder with ``labels.json`` in an
  order of its own: a prediction equal to every dev target is submitted as the dev rows'
  own label codes (the list the builder read, not CLUE's built-in one)."""
  order = [TNEWS_LABELS[2], TNEWS_LABELS[0], TNEWS_LABELS[1]]
  rows = [{"id": i, "label": TNEWS_LABELS[i % 3][0], "label_desc": TNEWS_LABELS[i % 3][1],
           "sentence": Q[i % 8] + "新闻", "keywords": "花呗"} for i in range(12)]
  folder = tmp_path / "tnews"
  _write(folder / "tnews_public", {
      "labels.json": [{"label": c, "label_desc": d} for c, d in order],
      "train.json": rows, "dev.json": rows[:6]})
  _, config = _config("tnews", str(folder), tmp_path)
  dev = clue.data(config).splits["dev"]
  logits = np.eye(3)[dev["targets"]]
  batch = {"id": np.arange(6), "mask": np.ones(6)}
  submitted = clue.submission(config, [(batch, logits)])
  assert [(r["label"], r["label_desc"]) for r in submitted] == [
      TNEWS_LABELS[i % 3] for i in range(6)]


def test_clue_precision_and_recall_0_count_predicted_rows_and_only_real_rows():
  # predicted 1: rows 0, 2, 3 (3); gold 1: rows 0, 1 (2); row 4 is padding, gold 0 and
  # predicted 0 (it must count in no metric).
  logits = jnp.asarray([[0.0, 1.0], [1.0, 0.0], [0.0, 2.0], [0.0, 3.0], [1.0, 0.0]])
  batch = {"targets": jnp.asarray([1, 1, 0, 0, 0]), "mask": jnp.asarray([1, 1, 1, 1, 0.0])}
  _, m = clue.loss_and_metrics(logits, batch)
  assert [float(x) for x in m["precision"]] == [1, 3]
  assert [float(x) for x in m["recall"]] == [1, 2]
  assert [float(x) for x in m["f1"]] == [2, 5]
  assert [float(x) for x in m["recall_0"]] == [0, 2]


def test_clue_mlm_metrics_ignore_padded_rows():
  # Row 1 is a padded copy (mask 0) with a masked position: it counts nowhere.
  logits = jnp.log(jnp.asarray([[[0.5, 0.5], [0.9, 0.1]], [[0.5, 0.5], [0.9, 0.1]]]))
  batch = {"targets": jnp.asarray([[0, 0], [0, 0]]), "lengths": jnp.asarray([2, 2]),
           "weights": jnp.asarray([[0.0, 1.0], [0.0, 1.0]]), "mask": jnp.asarray([1.0, 0.0])}
  _, m = clue.loss_and_metrics(logits, batch)
  assert [float(x) for x in m["masked_accuracy"]] == [1, 1]
  assert float(m["masked_loss"][1]) == 1
  assert float(m["loss"][1]) == 2

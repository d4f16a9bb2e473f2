"""The snli task (tasks/snli.py) on tiny fixture jsonl files: the dev90 split, pair
batches, training every model through the loop, word vectors (only OOV rows move in the
first epoch), and bad input (the full variant without the train file)."""

import gzip
import json
import os

import numpy as np
import pytest

from rumjax import training
import tasks
from tasks import snli
from tasks.configs import snli as snli_config
from tests.test_task_sst import check_summary, write_vectors

PAIRS = [("A man sleeps.", "A person rests.", "entailment"),
         ("A dog runs.", "An animal moves.", "-"),
         ("Two kids play.", "Nobody plays.", "contradiction"),
         ("A woman sings.", "She sings well.", "neutral"),
         ("A cat naps.", "The cat is old.", "neutral"),
         ("Rain falls.", "It's wet.", "entailment"),
         ("A boy swims.", "The boy is asleep.", "contradiction"),
         ("Girls dance.", "People dance.", "entailment"),
         ("A man doesn't eat.", "A man eats.", "contradiction"),
         ("Kids laugh.", "Children are happy.", "entailment"),
         ("A dog barks.", "A cat barks.", "contradiction"),
         ("A chef cooks.", "Someone makes food.", "entailment")]


def _line(i, s1, s2, gold):
  return json.dumps({"gold_label": gold, "pairID": f"p{i}", "sentence1": s1,
                     "sentence2": s2, "annotator_labels": [gold]}) + "\n"


def write_snli(root, splits=("dev", "test"), gz=True):
  """dev: all 12 lines (11 labelled); test: the first 5 (4 labelled); train: lines 6-11."""
  os.makedirs(root, exist_ok=True)
  lines = {"dev": PAIRS, "test": PAIRS[:5], "train": PAIRS[6:]}
  for split in splits:
    data = "".join(_line(i, *p) for i, p in enumerate(lines[split])).encode()
    name = os.path.join(root, f"snli_1.0_{split}.jsonl")
    if gz:
      with gzip.open(name + ".gz", "wb") as f:
        f.write(data)
    else:
      with open(name, "wb") as f:
        f.write(data)
  return str(root)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
  base = tmp_path_factory.mktemp("snli")
  return {"manual_dir": write_snli(base / "manual"), "data_dir": str(base / "tfds")}


def small_config(dirs, variant=None, name="lstmn", **fields):
  c = snli_config.get_config(variant)
  c.update(manual_dir=dirs["manual_dir"], data_dir=dirs["data_dir"], batch_size=2,
           eval_batch_size=3, num_steps=2, eval_every=1, checkpoint_every=0, log_every=1)
  c.update(fields)
  c.model.update(name=name, hidden_size=8, embed_dim=6)
  snli.validate_config(c)
  return c


def test_dev90_split_is_deterministic_disjoint_and_by_premise():
  premises = [f"premise {i // 3}" for i in range(9840)] + ["a", "b"]   # 3 pairs a premise
  train, heldout = snli.dev90_split(premises)
  assert len(train) == 8858 and len(heldout) == 984
  assert not set(train) & set(heldout)
  assert np.array_equal(np.sort(np.concatenate([train, heldout])), np.arange(9842))
  again = snli.dev90_split(premises)
  assert np.array_equal(again[0], train) and np.array_equal(again[1], heldout)
  assert np.all(np.diff(train) > 0)
  # All pairs of a premise on one side (split by pair, 975 of 984 held-out pairs had their
  # premise in training).
  assert not {premises[i] for i in train} & {premises[i] for i in heldout}


def test_pairs_vocabulary_and_batches(dirs):
  config = small_config(dirs)
  data = snli.data(config)
  # 11 labelled dev pairs: round(0.9 * 11) = 10 to train on, 1 held out; test: 4 pairs.
  assert {s: data.size(s) for s in data.splits} == {"train": 10, "dev10": 1, "test": 4}
  labelled = [i for i, p in enumerate(PAIRS) if p[2] != "-"]   # the file lines
  train_idx, held_idx = snli.dev90_split([PAIRS[i][0] for i in labelled])
  assert data.splits["train"]["index"].tolist() == [labelled[i] for i in train_idx]
  assert data.splits["dev10"]["index"].tolist() == [labelled[i] for i in held_idx]
  assert data.vocab.tokens[:2] == ("<pad>", "<unk>")
  assert {"does", "n't", "'s", "."} <= set(data.vocab.tokens)
  assert snli.tokenize("A man doesn't eat.") == ["a", "man", "does", "n't", "eat", "."]
  batch = next(snli.train_data(config))
  assert set(batch) == {"premise", "premise_lengths", "hypothesis", "hypothesis_lengths",
                        "targets", "index", "mask"}
  assert batch["premise"].shape[0] == 2
  row = int(np.flatnonzero(data.splits["train"]["index"] == 8)[0])
  assert snli.to_text(config, data.splits["train"], row) == (
      "a man does n't eat . || a man eats . -> contradiction")
  config.batch_size = 3   # the evaluators use eval_batch_size this way
  batches = list(snli.eval_data(config, "test"))
  assert np.concatenate([b["mask"] for b in batches]).tolist() == [1, 1, 1, 1, 0, 0]
  with pytest.raises(ValueError, match="evaluation splits are \\['dev10', 'test'\\]"):
    snli.eval_data(config, "dev")


@pytest.mark.parametrize("name", [pytest.param("lstmn", marks=pytest.mark.slow),
                                  pytest.param("lstmn_shallow", marks=pytest.mark.slow),
                                  "lstmn_deep"])   # deep fusion runs every part
def test_trains_every_model(dirs, tmp_path, name):
  """(The "lstm" model trains in the word-vector test below.)"""
  # One evaluation, at the end (dev10 and test batches share their shape).
  config = small_config(dirs, name=name, eval_every=0)
  summary = training.train_and_evaluate(config, str(tmp_path / name), snli.TASK)
  check_summary(snli, config, summary, "eval_dev10")


def test_the_task_and_its_variants():
  task = tasks.get_task("snli")
  assert task is snli.TASK and task.variants == ("full", "dev90")
  dev90 = task.get_config()
  assert dev90.data_split == "dev90" and list(dev90.evals) == ["eval_dev10", "test"]
  assert (dev90.num_steps, dev90.eval_every) == (20 * 277, 277)
  full = task.get_config("full")
  assert (full.num_steps, full.eval_every, full.checkpoint_every) == (10 * 17_168, 1716, 1716)
  with pytest.raises(ValueError, match="unknown snli variant 'dev80'"):
    task.get_config("dev80")


def test_full_variant_needs_the_train_file(dirs, tmp_path):
  config = snli_config.get_config("full")
  assert list(config.evals) == ["eval", "test"] and config.evals.eval.split == "dev"
  config.update(manual_dir=dirs["manual_dir"], data_dir=dirs["data_dir"])
  train_file = os.path.join(dirs["manual_dir"], "snli_1.0_train.jsonl")
  with pytest.raises(ValueError, match=f"lacks {train_file} \\(or .jsonl.gz\\): "
                                       "data_split='full' needs it"):
    snli.validate_config(config)
  # Past the config check: the builder's one line naming the file.
  with pytest.raises(ValueError) as err:
    snli.load_pairs("full", dirs["manual_dir"], dirs["data_dir"])
  assert f"{train_file}.jsonl" not in str(err.value) and train_file in str(err.value)
  assert "\n" not in str(err.value) and "--variant=dev90" in str(err.value)
  # With the train file (a fresh data_dir): train / dev / test.
  manual = write_snli(tmp_path / "all", splits=("train", "dev", "test"), gz=False)
  config.update(manual_dir=manual, data_dir=str(tmp_path / "tfds"))
  snli.validate_config(config)
  data = snli.data(config)
  assert {s: data.size(s) for s in data.splits} == {"train": 6, "dev": 11, "test": 4}
  config.evals.eval.split = "dev10"
  with pytest.raises(ValueError, match="config.evals.eval.split='dev10' is not"):
    snli.validate_config(config)


def test_bad_model_names(dirs):
  config = small_config(dirs)
  config.model.name = "lstmn_deeep"
  with pytest.raises(ValueError, match="did you mean 'lstmn_deep'"):
    snli.validate_config(config)
  config.model.name = "lstmn_deep"
  config.model.num_layers = 2
  with pytest.raises(ValueError, match="one LSTMN per sentence"):
    snli.validate_config(config)


def test_word_vectors_only_oov_rows_move_in_the_first_epoch(dirs, tmp_path):
  path = str(tmp_path / "vectors.txt")
  vectors = write_vectors(path, ["a", "man", "dog", "cat", "."], 6)
  config = small_config(dirs, name="lstm", word_vectors=path, num_steps=1, eval_every=0)
  matrix, pretrained = snli.word_vectors(config)
  vocab = snli.data(config).vocab
  for word, vector in vectors.items():
    np.testing.assert_allclose(matrix[vocab.id(word)], vector, rtol=1e-6)
  summary = training.train_and_evaluate(config, str(tmp_path / "run"), snli.TASK)
  check_summary(snli, config, summary, "eval_dev10")
  params = summary["params"]
  embedding = np.asarray(params["embed"]["embedding"])
  np.testing.assert_array_equal(embedding[pretrained], matrix[pretrained])
  batch = next(snli.train_data(config))
  seen = np.zeros(len(vocab), bool)
  for key in ("premise", "hypothesis"):
    real = np.arange(batch[key].shape[1])[None] < batch[f"{key}_lengths"][:, None]
    seen[batch[key][real]] = True
  moved = np.any(embedding != matrix, axis=1)
  assert np.any(seen & pretrained) and np.any(seen & ~pretrained)
  assert np.all(moved[seen & ~pretrained])   # the batch's OOV words are learnt


def test_snli_each_sentence_gets_its_own_bucket():
  arrays = {"premise": np.ones((2, 32), np.int32),
            "premise_lengths": np.asarray([3, 4], np.int32),
            "hypothesis": np.ones((2, 32), np.int32),
            "hypothesis_lengths": np.asarray([12, 2], np.int32),
            "targets": np.zeros(2, np.int32), "index": np.arange(2, dtype=np.int32)}
  batch = snli.batch_maker(arrays, True)(np.arange(2))
  assert batch["premise"].shape[1] == 8 and batch["hypothesis"].shape[1] == 16


@pytest.mark.parametrize("n", [5, 10, 11, 37])
def test_dev90_split_covers_every_pair(n):
  train, heldout = snli.dev90_split([f"p{i}" for i in range(n)])
  assert sorted(train.tolist() + heldout.tolist()) == list(range(n))

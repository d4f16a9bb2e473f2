"""The sst task (tasks/sst.py) on a tiny fixture of PTB-format trees: text handling, the
binary view, batches, training each model through the loop, word vectors and their
first-epoch scaling, bad input, and the attention picture of a trained run."""

import dataclasses
import os
import subprocess
import sys

import jax
import ml_collections
import numpy as np
import pytest

from launch import attention as launch_attention
from rumjax import training
from rumjax.training import loop, optim
import tasks
from tasks import sst
from tasks.configs import sst as sst_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Sentences of at most 8 tokens (one length bucket: one compilation per step function).
TREES = {
    "train.txt": ["(3 (2 It) (4 (2 's) (4 good)))",
                  "(2 (2 A) (2 film))",
                  "(0 (1 (1 Not) (2 good)) (2 .))",
                  "(4 (4 Great) (2 -LRB-) (3 fun) (2 -RRB-))",
                  "(1 (2 The) (1 (1 dull) (2 plot\\/story)))",
                  "(3 (3 Good) (2 film) (2 .))"],
    "dev.txt": ["(2 (2 So) (2 so))", "(1 (1 Weak) (3 fun))", "(4 (4 Great) (2 film))"],
    "test.txt": ["(3 (2 -LRB-) (3 Nice) (2 -RRB-))", "(2 (2 Meh) (2 .))",
                 "(0 (0 Awful) (2 .))", "(4 (4 good) (4 fun))", "(1 (1 dull) (2 .))"],
}


def write_trees(root, skip=()):
  os.makedirs(root, exist_ok=True)
  for name, lines in TREES.items():
    if name not in skip:
      with open(os.path.join(root, name), "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
  return str(root)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
  base = tmp_path_factory.mktemp("sst")
  return {"manual_dir": write_trees(base / "manual"), "data_dir": str(base / "tfds")}


def small_config(dirs, variant="fine", name="lstmn", **fields):
  c = sst_config.get_config(variant)
  c.update(manual_dir=dirs["manual_dir"], data_dir=dirs["data_dir"], batch_size=2,
           eval_batch_size=2, num_steps=3, eval_every=2, checkpoint_every=0, log_every=1)
  c.update(fields)
  c.model.update(name=name, hidden_size=8, embed_dim=6)
  sst.validate_config(c)
  return c


def check_final_eval(task, config, summary, split, key, apply=None):
  """The final ``key`` evaluation saw every example of ``split`` exactly once."""
  apply = apply or jax.jit(task.build_model(config).apply)
  cfg = config.copy_and_resolve_references()
  cfg.batch_size = cfg.eval_batch_size
  seen, correct = [], 0
  for batch in task.eval_data(cfg, split):
    real = batch["mask"] > 0
    logits = apply({"params": summary["params"]}, batch)
    seen += batch["index"][real].tolist()
    correct += int(np.sum((np.argmax(logits, -1) == batch["targets"]) & real))
  assert sorted(seen) == sorted(task.data(config).splits[split]["index"].tolist())
  assert len(set(seen)) == len(seen)
  assert summary[f"{key}_accuracy"] == pytest.approx(correct / len(seen))


# ----------------------------------------------------------------------------- data


def test_the_task_and_its_variants():
  task = tasks.get_task("sst")
  assert task is sst.TASK and task.variants == ("fine", "binary")
  assert task.get_config().granularity == "fine" and task.get_config().num_steps == 10 * 1709
  binary = task.get_config("binary")
  assert binary.granularity == "binary" and binary.eval_every == 1384
  binary.eval_batch_size = 7       # the evaluators follow the referenced fields
  assert binary.evals.test.batch_size == 7
  with pytest.raises(ValueError, match="unknown sst variant 'coarse'"):
    task.get_config("coarse")


def test_tokens_vocabulary_and_batches(dirs):
  assert sst.normalize("-LRB-") == "(" and sst.normalize("-rrb-") == ")"
  assert sst.normalize("plot\\/story") == "plot/story" and sst.normalize("It") == "it"
  assert sst.tokenize("It's tough to watch (but fantastic)") == [
      "it", "'s", "tough", "to", "watch", "(", "but", "fantastic", ")"]
  # The corpus's ellipsis, dash and Penn Treebank quotes (the regex alone splits "..."
  # and "--" into marks, and maps '"' to <unk>).
  assert sst.tokenize('"Elling" -- it\'s fun... (really) "yes"!') == [
      "``", "elling", "''", "--", "it", "'s", "fun", "...", "(", "really", ")", "``", "yes",
      "''", "!"]
  assert sst.tokenize("Wait…for it—\"no\"") == ["wait", "...", "for", "it", "--", "``",
                                                  "no", "''"]
  config = small_config(dirs)
  data = sst.data(config)
  assert data.vocab.tokens[:2] == ("<pad>", "<unk>")
  assert {"good", "(", ")", "plot/story", "."} <= set(data.vocab.tokens)
  assert "meh" not in data.vocab    # test words are not in the training vocabulary
  assert {s: data.size(s) for s in sst.SPLITS} == {"train": 6, "dev": 3, "test": 5}
  assert data.splits["train"]["targets"].tolist() == [3, 2, 0, 4, 1, 3]
  assert data.splits["train"]["lengths"].tolist() == [3, 2, 3, 4, 3, 3]
  batch = next(sst.train_data(config))
  assert batch["inputs"].shape == (2, 4) and batch["mask"].tolist() == [1.0, 1.0]
  assert sst.to_text(config, data.splits["train"], 3) == "great ( fun ) -> very positive"
  tokens, one = sst.sentence_batch(config, "Great fun, meh")
  assert tokens == ["great", "fun", ",", "meh"]
  assert one["inputs"].tolist() == [[data.vocab.id("great"), data.vocab.id("fun"), 1, 1]]
  # Every test sentence exactly once; the padded row of the last batch has mask 0.
  batches = list(sst.eval_data(config, "test"))
  mask = np.concatenate([b["mask"] for b in batches])
  assert mask.tolist() == [1, 1, 1, 1, 1, 0]
  assert np.concatenate([b["index"] for b in batches])[:5].tolist() == [0, 1, 2, 3, 4]


def test_binary_variant_drops_neutral(dirs):
  config = small_config(dirs, "binary")
  data = sst.data(config)
  assert {s: data.size(s) for s in sst.SPLITS} == {"train": 5, "dev": 2, "test": 4}
  assert data.splits["train"]["targets"].tolist() == [1, 0, 1, 0, 1]
  assert data.splits["train"]["index"].tolist() == [0, 2, 3, 4, 5]   # line 1 is neutral
  assert sst.build_model(config).num_classes == 2


# ----------------------------------------------------------------------------- training


@pytest.fixture(scope="module")
def trained(dirs, tmp_path_factory):
  """A tiny 1-layer LSTMN run (used by the attention launch test too)."""
  config = small_config(dirs)
  workdir = str(tmp_path_factory.mktemp("run") / "lstmn")
  return config, workdir, training.train_and_evaluate(config, workdir, sst.TASK)


def check_summary(task, config, summary, eval_key="eval"):
  """Finite metrics; the final evaluations saw every example exactly once."""
  assert summary["step"] == config.num_steps
  for metric in ("train_loss", f"{eval_key}_accuracy", f"{eval_key}_loss", "test_accuracy",
                 "test_loss"):
    assert np.isfinite(summary[metric]), metric
  apply = jax.jit(task.build_model(config).apply)
  check_final_eval(task, config, summary, "test", "test", apply)
  check_final_eval(task, config, summary, config.evals[eval_key].split, eval_key, apply)


def test_lstmn_trains_and_evaluates_every_example_once(trained):
  """(The "lstm" model trains in the word-vector test below.)"""
  config, _, summary = trained
  check_summary(sst, config, summary)
  assert set(summary["params"]) == {"embed", "encoder", "head"}
  assert set(summary["params"]["head"]) == {"logits"}   # 1 layer: a linear softmax layer


def test_attention_launch_writes_a_png(trained, tmp_path):
  from absl import flags
  _, workdir, _ = trained
  values = flags.FlagValues()
  launch_attention.define_flags(values)
  out = str(tmp_path / "figures" / "attention.png")
  values(["attention", f"--workdir={workdir}", f"--out={out}",
          "--sentence=It 's not good , it 's great fun"])
  assert launch_attention.run(values) == out
  with open(out, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  # --role is for snli's two sentences; on sst it drew the sentence anyway (review).
  values = flags.FlagValues()
  launch_attention.define_flags(values)
  values(["attention", f"--workdir={workdir}", f"--out={tmp_path / 'role.png'}",
          "--sentence=It 's good", "--role=hypothesis"])
  with pytest.raises(SystemExit, match=r"^error: --role=hypothesis: sst reads one sentence"):
    launch_attention.run(values)
  assert not (tmp_path / "role.png").exists()
  # Flags of other tasks are refused (--profile_windows was accepted and did nothing).
  for flag, message in [("--hypothesis=Fun", "sst reads one sentence; a hypothesis is for"),
                        ("--profile_windows=3", "--profile_windows is ptb's")]:
    values = flags.FlagValues()
    launch_attention.define_flags(values)
    values(["attention", f"--workdir={workdir}", f"--out={tmp_path / 'other.png'}", flag])
    with pytest.raises(SystemExit, match=rf"^error: {message}"):
      launch_attention.run(values)
  assert not (tmp_path / "other.png").exists()


# ------------------------------------------------------------------------ word vectors


def write_vectors(path, words, dim, seed=0):
  rng = np.random.default_rng(seed)
  vectors = {w: rng.normal(size=dim).round(4) for w in words}
  with open(path, "w", encoding="utf-8") as f:
    f.write(f"{len(words)} {dim}\n")
    for w, v in vectors.items():
      f.write(w + " " + " ".join(str(x) for x in v) + "\n")
  return vectors


def test_word_vectors_initialise_and_scale_the_first_epoch(dirs, tmp_path):
  path = str(tmp_path / "vectors.txt")
  vectors = write_vectors(path, ["good", "film", "(", "unseen"], 6)
  config = small_config(dirs, "binary", name="lstm", word_vectors=path)
  config.num_steps, config.eval_every = 1, 0
  vocab = sst.data(config).vocab
  matrix, pretrained = sst.word_vectors(config)
  assert sorted(vocab.tokens[i] for i in np.flatnonzero(pretrained)) == ["(", "film", "good"]
  summary = training.train_and_evaluate(config, str(tmp_path / "scaled"), sst.TASK)
  check_summary(sst, config, summary)
  scaled = summary["params"]
  # The same step without the first-epoch scaling.
  unscaled = dataclasses.replace(sst.TASK, wrap_optimizer=None)
  config.evals = ml_collections.ConfigDict()
  plain = training.train_and_evaluate(config, str(tmp_path / "plain"), unscaled)["params"]
  # Initialisation: the known words' rows are the file's vectors.
  model = sst.build_model(config)
  init = model.init(jax.random.key(0), next(sst.train_data(config)))["params"]
  for word in ("good", "film", "("):
    np.testing.assert_allclose(init["embed"]["embedding"][vocab.id(word)], vectors[word],
                               rtol=1e-6)
  np.testing.assert_array_equal(init["embed"]["embedding"], matrix)
  step_scaled = np.asarray(scaled["embed"]["embedding"]) - matrix
  step_plain = np.asarray(plain["embed"]["embedding"]) - matrix
  assert np.all(np.abs(step_plain) > 0)   # Adam + L2: every row moves
  np.testing.assert_allclose(step_scaled[pretrained], 0.35 * step_plain[pretrained],
                             rtol=1e-3, atol=1e-8)
  np.testing.assert_allclose(step_scaled[~pretrained], step_plain[~pretrained], rtol=1e-6)
  # The scaling's step count is in the optimizer state (resumes with a checkpoint).
  assert loop.make_optimizer(config, sst.TASK).init(init)[-1].count == 0
  # The optimizer without word vectors is the plain one.
  config.word_vectors = ""
  assert jax.tree.structure(loop.make_optimizer(config, sst.TASK).init(init)) == \
      jax.tree.structure(optim.make_optimizer(config).init(init))


# ---------------------------------------------------------------------------- bad input


def test_bad_input(dirs, tmp_path):
  config = small_config(dirs)
  config.model.name = "lstmnn"
  with pytest.raises(ValueError, match="unknown model 'lstmnn'.*did you mean 'lstmn'"):
    sst.validate_config(config)
  config.model.name = "lstmn_deep"
  with pytest.raises(ValueError, match="reads sentence pairs"):
    sst.validate_config(config)
  config.model.name = "lstmn"
  config.model.cell = "gru"
  with pytest.raises(ValueError, match="--config.model.name=lstm"):
    sst.validate_config(config)
  config = small_config(dirs)
  config.manual_dir = str(tmp_path / "nowhere")
  with pytest.raises(ValueError, match="config.manual_dir=.* is not a folder"):
    sst.validate_config(config)
  partial = write_trees(tmp_path / "partial", skip=("dev.txt",))
  config.manual_dir = partial
  with pytest.raises(ValueError, match=f"lacks {os.path.join(partial, 'dev.txt')}"):
    sst.validate_config(config)
  # Past the config check (data loaded directly): still one line naming the file.
  config.data_dir = str(tmp_path / "tfds")
  with pytest.raises(ValueError) as err:
    sst.data(config)
  assert os.path.join(partial, "dev.txt") in str(err.value) and "\n" not in str(err.value)


def test_launch_train_without_data_says_which_files(tmp_path):
  proc = subprocess.run(
      [sys.executable, "-m", "launch.train", "--task=sst", f"--workdir={tmp_path / 'w'}",
       f"--config.manual_dir={tmp_path}", "--steps=1"],
      cwd=REPO, capture_output=True, text=True, timeout=300,
      env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert proc.returncode != 0
  assert f"lacks {tmp_path / 'train.txt'}, {tmp_path / 'dev.txt'}" in proc.stderr
  assert "Traceback" not in proc.stderr


def test_sst_bucket_holds_the_longest_sentence():
  arrays = {"inputs": np.ones((2, 32), np.int32), "lengths": np.asarray([3, 20], np.int32),
            "targets": np.zeros(2, np.int32), "index": np.arange(2, dtype=np.int32)}
  batch = sst.batch_maker(arrays, True)(np.arange(2))
  assert batch["inputs"].shape[1] == 32


def test_sst_two_layer_model_gets_the_papers_mlp():
  config = sst_config.get_config()
  config.model.num_layers = 2
  config.model.mlp_layers = None
  assert sst.model_config(config)["mlp_layers"] == 2


def test_sst_width_covers_dev_and_test_sentences():
  ex = lambda words, i: {"tokens": words, "label": 1, "index": i}
  examples = {"train": [ex(["a", "b"], 0)], "dev": [ex(["a"] * 5, 0)],
              "test": [ex(["b"], 0)]}
  data = sst.encode(examples)
  assert data.splits["dev"]["lengths"].tolist() == [5]

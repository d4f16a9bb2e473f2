"""The PTB language-model task on a small fixture corpus: configs, the stream layout, the
whole-stream evaluation (every target counted once), training and exact resume."""

import json
import os

import jax
import numpy as np
import pytest

import tasks
from rumjax import training
from tasks import ptb
from tasks.configs import ptb as ptb_config
from tasks.datasets import ptb as ptb_data

WORDS = "the cat sat on a mat dog ran far N <unk> and".split()
# Words that spell the 49 symbols of Mikolov's character-level PTB (its vocabulary, with <eos>,
# has 50 tokens), so that a model built on them has the real task's parameter count.
PTB_CHAR_WORDS = ["abcdefghijklm", "nopqrstuvwxyz", "<unk>", "N", "0123456789", "$&#",
                  "'.-", "\\/*"]


def _write_corpus(root, seed=0, words=WORDS):
  """Random word lines in both layouts of Mikolov's files (char files: `_` between words)."""
  rng = np.random.default_rng(seed)
  os.makedirs(root, exist_ok=True)
  for split, n in (("train", 120), ("validation", 23), ("test", 17)):
    lines = [" " + " ".join(rng.choice(words, size=rng.integers(2, 9))) + " "
             for _ in range(n)]
    with open(os.path.join(root, ptb_data.file_name("word", split)), "w") as f:
      f.write("".join(line + "\n" for line in lines))
    with open(os.path.join(root, ptb_data.file_name("char", split)), "w") as f:
      f.write("".join(" " + " ".join("_".join(line.split())) + "\n" for line in lines) + " ")
  return str(root)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  base = tmp_path_factory.mktemp("ptb_task")
  return {"manual_dir": _write_corpus(base / "manual"), "data_dir": str(base / "tfds")}


def _config(corpus, variant=None, level="char", **overrides):
  c = ptb_config.get_config(variant)
  c.update(manual_dir=corpus["manual_dir"], data_dir=corpus["data_dir"], level=level,
           batch_size=4, seq_len=12, num_steps=6, eval_every=3, checkpoint_every=3,
           log_every=1)
  c.eval_batch_size = 3
  c.model.update(hidden_size=16, embed_dim=8)
  c.update(overrides)
  ptb.validate_config(c)
  return c


@pytest.mark.parametrize("variant", (None,) + tuple(ptb_config.VARIANTS))
def test_every_variant_validates(variant):
  c = ptb_config.get_config(variant)
  ptb.validate_config(c)
  assert c.evals.eval.type == c.evals.test.type == "perplexity"
  if variant in ptb_config.CHAR_VARIANTS:
    assert (c.batch_size, c.seq_len, c.optimizer, c.learning_rate, c.grad_clip) == (
        128, 150, "adam", 2e-3, 1.0)
    assert c.model.embed_dim == 128 and c.model.dropout_rate == 0.35
    epoch = ptb.steps_per_epoch("char", 128, 150)
    assert epoch == 261
    if variant.startswith("fs_"):
      assert c.lr_boundaries == [180 * epoch, 240 * epoch] and c.num_steps == 360 * epoch
    else:
      assert c.num_steps == 100 * epoch and not c.lr_boundaries
  elif variant in ptb_config.WORD_VARIANTS:
    # The paper's 0.65 / 5 are for the loss summed over the window: ours is the mean.
    assert (c.batch_size, c.seq_len, c.optimizer) == (40, 35, "sgd")
    assert c.learning_rate == pytest.approx(0.65 * 35)
    assert c.grad_clip == pytest.approx(5.0 / 35)
    assert (c.lr_plateau_factor, c.lr_plateau_metric) == (0.85, "eval_ppl")
    assert c.model.embed_dim == 150 and c.model.hidden_size == 300


def test_variants_are_data_and_configs_do_not_share_them():
  epoch = ptb_config.CHAR_EPOCH
  assert ptb_config.VARIANTS["fs_rum2"]["model"]["slow_lam"] == 0
  c = ptb_config.get_config("fs_rum2")
  assert (c.model.slow_cell, c.model.slow_size, c.model.fast_size) == ("rum", 1000, 700)
  c.lr_boundaries.append(1)
  assert ptb_config.get_config("fs_rum2").lr_boundaries == [180 * epoch, 240 * epoch]
  assert ptb_config.WORD_VARIANTS == ("word_lstm300", "word_lstmn1", "word_lstmn3")
  with pytest.raises(ValueError, match=r"unknown ptb variant 'fs_rum3'; known variants are "
                     r"\['fs_rum2'"):
    ptb_config.get_config("fs_rum3")


def test_cores_are_looked_up_by_name():
  known = ["cell", "fast_slow", "lstmn", "stacked"]
  assert ptb.CORES.names() == known
  c = ptb_config.get_config()
  c.model.core = "stackd"
  with pytest.raises(ValueError) as err:
    ptb.build_core(c.model)
  assert str(err.value) == (f"unknown core 'stackd'; known cores are {known}; did you mean "
                            "'stacked'?")
  with pytest.raises(ValueError, match=r"^config.model.core: unknown core 'stackd'; known "
                     r"cores are \['cell', 'fast_slow', 'lstmn', 'stacked'\]"):
    ptb.validate_config(c)


@pytest.mark.parametrize("field,value", [("level", "byte"), ("seq_len", 0),
                                         ("eval_batch_size", 0)])
def test_validate_names_the_field(field, value):
  c = ptb_config.get_config()
  c[field] = value
  with pytest.raises(ValueError, match=f"config.{field}"):
    ptb.validate_config(c)
  c = ptb_config.get_config()
  c.model.core = "tree"
  with pytest.raises(ValueError, match="config.model.core"):
    ptb.validate_config(c)


@pytest.mark.parametrize("level", ["char", "word"])
def test_stream_and_whole_split_evaluation(corpus, level):
  c = _config(corpus, level=level)
  valid = ptb.token_stream(c, "valid")
  lines = open(os.path.join(corpus["manual_dir"],
                            ptb_data.file_name(level, "validation"))).read().split("\n")
  lines = [line.split() for line in lines if line.strip()]
  assert len(valid) == sum(len(line) + 1 for line in lines)
  text = ptb.to_text(c, valid)
  first = "".join(lines[0]).replace("_", " ") if level == "char" else " ".join(lines[0])
  assert text.split("\n")[0] == first
  # The evaluation batches cover every target of the split exactly once.
  batches = list(ptb.eval_data(c, "valid"))
  assert sum(b["weights"].sum() for b in batches) == len(valid) - 1
  assert tasks.get_task("ptb") is ptb.TASK


def test_loss_and_metrics_against_a_loop():
  """The NLL and BPC sums cover the weighted targets only, and the loss is their mean (the
  last window of a split is padded with weight 0; a batch of only padding has loss 0)."""
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(3, 4, 7)).astype(np.float32)
  targets = rng.integers(0, 7, size=(3, 4))
  weights = np.ones((3, 4), np.float32)
  weights[1, 2:] = 0.0
  weights[2] = 0.0
  loss, m = ptb.loss_and_metrics(logits, {"targets": targets, "weights": weights})
  x = logits.astype(np.float64)
  logp = x - np.log(np.exp(x).sum(-1, keepdims=True))
  nll = [-logp[b, t, targets[b, t]] for b in range(3) for t in range(4) if weights[b, t]]
  assert float(m["nll"][1]) == float(m["bpc"][1]) == len(nll) == 6
  np.testing.assert_allclose(float(m["nll"][0]), sum(nll), rtol=1e-6)
  np.testing.assert_allclose(float(m["bpc"][0]), sum(nll) / np.log(2), rtol=1e-6)
  np.testing.assert_allclose(float(loss), np.mean(nll), rtol=1e-6)
  loss, m = ptb.loss_and_metrics(logits, {"targets": targets, "weights": 0 * weights})
  assert float(loss) == float(m["loss"][0]) == float(m["loss"][1]) == 0.0


@pytest.mark.slow   # ~60 s (three runs); tests/test_training.py checks exact resume fast
def test_trains_evaluates_the_whole_stream_and_resumes_exactly(corpus, tmp_path):
  c = _config(corpus, num_steps=8)
  c.evals.eval.batches = 1   # while training; the small setting's batches_at_end is 0
  full = training.train_and_evaluate(c, str(tmp_path / "full"), ptb.TASK)
  n_valid = len(ptb.token_stream(c, "valid")) - 1
  assert full["eval_tokens"] == n_valid and full["test_tokens"] == len(
      ptb.token_stream(c, "test")) - 1
  periodic = [json.loads(line)["eval_tokens"] for line in open(tmp_path / "full" /
                                                               "metrics.jsonl")
              if "eval_tokens" in line]
  assert periodic[:-1] == [3 * 12] * (len(periodic) - 1) and periodic[-1] == n_valid
  assert np.isfinite(full["eval_bpc"]) and full["eval_bpc"] < np.log2(len(ptb.vocabulary(c)))
  # Stopped at step 4 (mid-epoch: an epoch is several windows here) and resumed to 8.
  assert ((len(ptb.token_stream(c, "train")) - 1) // 4) // 12 > 8  # one epoch > 8 windows
  part = str(tmp_path / "part")
  training.train_and_evaluate(_config(corpus, num_steps=4), part, ptb.TASK)
  resumed = training.train_and_evaluate(c, part, ptb.TASK)
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)),
               full["params"], resumed["params"])
  assert resumed["eval_bpc"] == full["eval_bpc"] and resumed["test_bpc"] == full["test_bpc"]
  records = [json.loads(line) for line in open(tmp_path / "full" / "metrics.jsonl")]
  assert any("train_bpc" in r for r in records)


@pytest.mark.parametrize("core", ["stacked", pytest.param("fast_slow",
                                                            marks=pytest.mark.slow)])
def test_composite_cores_train(corpus, tmp_path, core):
  c = _config(corpus, num_steps=2)
  c.model.update(core=core, num_layers=2, fast_size=8, slow_size=12, slow_cell="rum",
                 fast_cell="lnlstm")
  ptb.validate_config(c)
  summary = training.train_and_evaluate(c, str(tmp_path / core), ptb.TASK)
  assert summary["step"] == 2 and np.isfinite(summary["test_bpc"])


def test_paper_cores_are_table_5():
  from rumjax.cells import LNLSTMCell, RUMCell
  from rumjax.cells.fast_slow import FastSlowCell
  from rumjax.cells.stacked import StackedCells
  fs = ptb.build_core(ptb_config.get_config("fs_rum2").model)
  assert isinstance(fs, FastSlowCell) and len(fs.fast_cells) == 2
  for f in fs.fast_cells:
    assert isinstance(f, LNLSTMCell) and (f.features, f.zoneout, f.zoneout_c) == (700, 0.1, 0.5)
  s = fs.slow_cell
  assert isinstance(s, RUMCell)
  assert (s.features, s.lam, s.eta, s.activation, s.layer_norm, s.zoneout) == (
      1000, 0, 1.0, "relu", True, 0.1)
  assert fs.dropout_rate == 0.35
  slow_lstm = ptb.build_core(ptb_config.get_config("fs_lstm2").model).slow_cell
  assert isinstance(slow_lstm, LNLSTMCell) and slow_lstm.features == 400
  two = ptb.build_core(ptb_config.get_config("2xrum1500").model)
  assert isinstance(two, StackedCells) and [c.features for c in two.cells] == [1500, 1500]
  assert all(c.eta == 0.3 and c.lam == 0 for c in two.cells)
  one = ptb.build_core(ptb_config.get_config("rum1400_nogate").model)
  assert isinstance(one, RUMCell) and one.features == 1400 and not one.update_gate


def two_windows(c):
  """``(model, variables, (first, second), state)``: the model of ``c`` initialised on the
  first two training windows and its carried state after the first."""
  model = ptb.build_model(c)
  batches = ptb.train_data(c)
  first, second = next(batches), next(batches)
  state = ptb.initial_model_state(c, c.batch_size)
  variables = model.init(jax.random.key(0), first, model_state=state)
  _, state = model.apply(variables, first, model_state=state)
  return model, variables, (first, second), state


def test_lstmn_core_carries_its_state_across_windows(corpus):
  """Word-level LSTMN (LSTMN paper §5.1): the second window's logits equal a hand-built
  stack of lstmn_scan calls whose tapes start from the first window's last states."""
  from rumjax import lstmn_scan
  c = _config(corpus, level="word")
  c.model.update(core="lstmn", num_layers=2, dropout_rate=0.0)
  ptb.validate_config(c)
  model, variables, (first, second), state = two_windows(c)
  logits, _ = model.apply(variables, second, model_state=state)
  p = variables["params"]

  def stack(tokens, initial):
    x, last = p["embed"]["embedding"][tokens], []
    for k in range(2):
      hs, cs = lstmn_scan(p["rnn"]["stack"][f"layer_{k}"], x, initial=initial[k])
      last.append((hs[:, -1], cs[:, -1]))
      x = hs
    return x, last

  _, carried = stack(first["inputs"], [None, None])
  hs, _ = stack(second["inputs"], carried)
  want = hs @ p["head"]["kernel"] + p["head"]["bias"]
  np.testing.assert_allclose(logits, want, rtol=1e-5, atol=1e-5)


def test_lstmn_core_trains_through_the_loop(corpus, tmp_path):
  """The loop donates the carried state: the LSTMN's initial carry holds distinct buffers."""
  c = _config(corpus, level="word", num_steps=2, eval_every=0)
  c.model.update(core="lstmn", num_layers=2)
  summary = training.train_and_evaluate(c, str(tmp_path), ptb.TASK)
  assert summary["step"] == 2 and np.isfinite(summary["eval_ppl"])

"""The rouge evaluator: rouge_f1 against hand counts and rouge-score itself, rougeLsum vs
rougeL, text functions through build_evaluators and the training loop, config errors."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from rouge_score import rouge_scorer

from rumjax import evaluators, training
from rumjax.evaluators import rouge
from rumjax import sharding as sharding_lib
from rumjax.training.state import TrainState
from tests import toy_task


def _f1(overlap, hyp_len, ref_len):
  p, r = overlap / hyp_len, overlap / ref_len
  return 2 * p * r / (p + r) if overlap else 0.0


def test_rouge_f1_matches_hand_counts_in_percent():
  pairs = [("the cat sat on the mat", "the cat lay on the mat"),
           ("a dog barked loudly", "the dog barked")]
  # Pair 1: unigrams the x2 (clipped to 2), cat, on, mat -> 5 of 6 and 6; bigrams the-cat,
  # on-the, the-mat -> 3 of 5 and 5. Pair 2: dog, barked -> 2 of 4 and 3; bigram
  # dog-barked -> 1 of 3 and 2.
  r1 = (_f1(5, 6, 6) + _f1(2, 4, 3)) / 2
  r2 = (_f1(3, 5, 5) + _f1(1, 3, 2)) / 2
  out = rouge.rouge_f1(pairs, ("rouge1", "rouge2"))
  assert set(out) == {"rouge1", "rouge2"}
  assert out["rouge1"] == pytest.approx(100 * r1)
  assert out["rouge2"] == pytest.approx(100 * r2) and out["rouge2"] == pytest.approx(50.0)
  # Porter stemming on by default: cats/cat and running/runs match only with it.
  assert rouge.rouge_f1([("cats running", "cat runs")], ["rouge1"])["rouge1"] == 100.0
  assert rouge.rouge_f1([("cats running", "cat runs")], ["rouge1"],
                        use_stemmer=False)["rouge1"] == 0.0
  assert rouge.rouge_f1([], ["rouge1"]) == {"rouge1": 0.0}


def test_rouge_f1_is_the_mean_of_rouge_score():
  pairs = [("Police arrested two men.\nThe car was stolen on Friday.",
            "Two men were arrested by police.\nThey had stolen a car."),
           ("Markets fell sharply\nInvestors worried", "Stocks fell.\nInvestors were worried "
            "about rates.\nThe dollar rose."),
           ("", "An empty hypothesis scores zero."),
           ("The the the the", "The cat")]
  types = ("rouge1", "rouge2", "rougeL", "rougeLsum")
  scorer = rouge_scorer.RougeScorer(list(types), use_stemmer=True)
  expected = {t: 100 * np.mean([scorer.score(ref, hyp)[t].fmeasure for hyp, ref in pairs])
              for t in types}
  got = rouge.rouge_f1(pairs, types)
  for t in types:
    assert got[t] == pytest.approx(expected[t])
  with pytest.raises(TypeError, match="pair 0"):
    rouge.rouge_f1([(["a", "list"], "x")])
  with pytest.raises(ValueError, match="rouge_types"):
    rouge.rouge_f1(pairs, ("rouge1", "rougeX"))


def test_rouge_lsum_is_summary_level():
  """Two sentences in swapped order: one LCS over the whole texts finds 3 of 6 tokens, the
  summary-level LCS of each reference sentence against the hypothesis sentences all 6."""
  pair = ("the cat sat\nthe dog ran", "the dog ran\nthe cat sat")
  out = rouge.rouge_f1([pair], ("rougeL", "rougeLsum"))
  assert out["rougeL"] == pytest.approx(100 * _f1(3, 6, 6)) == pytest.approx(50.0)
  assert out["rougeLsum"] == pytest.approx(100.0)


def _state():
  return TrainState(step=jnp.zeros((), jnp.int32), params=jnp.asarray(2.0),
                    opt_state=(), rng=jnp.zeros((2,), jnp.uint32))


_WORDS = np.array("alpha beta gamma delta epsilon zeta".split())


def _batches():
  rng = np.random.default_rng(0)
  out = []
  for i in range(3):
    mask = np.ones(4, np.float32)
    if i == 2:
      mask[3] = 0
    out.append({"ids": rng.integers(0, 6, size=(4, 5)).astype(np.int32),
                "ref": rng.integers(0, 6, size=(4, 5)).astype(np.int32), "mask": mask})
  return out


def _decode(params, batch, model_state):
  # (ids + 2 * params) mod 6: with params = 2, hypothesis id = ids + 4 (mod 6).
  return {"sequences": (batch["ids"] + 2 * params.astype(jnp.int32)) % 6}, model_state


def _texts(batch, outputs):
  assert isinstance(outputs["sequences"], np.ndarray)  # host NumPy, outside jit
  rows = np.flatnonzero(batch["mask"])
  return [(" ".join(_WORDS[outputs["sequences"][r, :3]]) + "\n"
           + " ".join(_WORDS[outputs["sequences"][r, 3:]]),
           " ".join(_WORDS[batch["ref"][r]])) for r in rows]


def test_evaluator_scores_the_text_pairs_of_the_real_rows():
  batches = _batches()
  evals = evaluators.build_evaluators(
      {"dev": dict(type="rouge", split="dev", texts="words", pred="beam"),
       "two": dict(type="rouge", split="dev", texts="words", pred="beam", batches=2,
                   rouge_types=["rouge1"], use_stemmer=False)},
      predict_fns={"beam": jax.jit(_decode)}, data_fn=lambda split, bs: iter(batches),
      mesh=sharding_lib.make_mesh(), text_fns={"words": _texts})
  out = {}
  for ev in evals:
    out.update(ev.run(_state()))
  host = [_texts(b, jax.device_get(_decode(jnp.asarray(2.0), b, None)[0])) for b in batches]
  pairs = [p for ps in host for p in ps]
  assert len(pairs) == 11
  expected = rouge.rouge_f1(pairs)
  assert set(out) == {"dev_rouge1", "dev_rouge2", "dev_rougeLsum", "dev_rouge_count",
                      "dev_repeated_trigrams", "two_rouge1", "two_rouge_count",
                      "two_repeated_trigrams"}
  assert out["dev_repeated_trigrams"] == pytest.approx(
      np.mean([rouge.repetition_rate(h.split()) for h, _ in pairs]))
  for t in ("rouge1", "rouge2", "rougeLsum"):
    assert out[f"dev_{t}"] == pytest.approx(expected[t])
  assert out["dev_rouge_count"] == 11.0 and out["two_rouge_count"] == 8.0
  assert out["two_rouge1"] == pytest.approx(
      rouge.rouge_f1(pairs[:8], ["rouge1"], use_stemmer=False)["rouge1"])
  # A text function that scores the padded rows too is caught.
  bad = evaluators.build_evaluators(
      {"dev": dict(type="rouge", split="dev", texts="all", pred="beam")},
      predict_fns={"beam": jax.jit(_decode)}, data_fn=lambda split, bs: iter(batches),
      mesh=sharding_lib.make_mesh(),
      text_fns={"all": lambda b, o: [("a", "a")] * len(b["mask"])})[0]
  with pytest.raises(ValueError, match="gave 4 pairs for batch 2, which has 3 real rows"):
    bad.run(_state())
  # A split without real rows is an error, not ROUGE 0 (as the other evaluators).
  padded = [dict(b, mask=np.zeros_like(b["mask"])) for b in batches]
  empty = evaluators.build_evaluators(
      {"dev": dict(type="rouge", split="dev", texts="words", pred="beam")},
      predict_fns={"beam": jax.jit(_decode)}, data_fn=lambda split, bs: iter(padded),
      mesh=sharding_lib.make_mesh(), text_fns={"words": _texts})[0]
  with pytest.raises(ValueError, match=r"^config.evals.dev: the split has no real rows"):
    empty.run(_state())


def test_config_errors_are_one_line_and_name_the_entry():
  fns = {"predict": jax.jit(_decode)}
  cases = [
      ({"e": dict(type="rouge", split="dev", texts="nope")}, {"echo": _texts},
       "config.evals.e.texts='nope' is not a text function of this task; known: ['echo']."),
      ({"e": dict(type="rouge", split="dev")}, {"echo": _texts},
       "config.evals.e has no 'texts'"),
      ({"e": dict(type="rouge", split="dev", texts="echo")}, None,
       "config.evals.e.texts='echo' is not a text function of this task; known: []."),
      ({"e": dict(type="rouge", split="dev", texts="echo", rouge_types=["rouge4", "bleu"])},
       {"echo": _texts}, "config.evals.e.rouge_types="),
  ]
  for evals, text_fns, message in cases:
    with pytest.raises(ValueError) as err:
      evaluators.build_evaluators(evals, predict_fns=fns, data_fn=lambda s, b: [],
                                  mesh=sharding_lib.make_mesh(), text_fns=text_fns)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
  # Without the task's names (a task's validate_config), only a missing 'texts' is caught.
  evaluators.validate_evals({"e": dict(type="rouge", split="dev", texts="any")})
  with pytest.raises(ValueError, match="has no 'texts'"):
    evaluators.validate_evals({"e": dict(type="rouge", split="dev")})


def _echo(batch, outputs):
  assert isinstance(outputs, np.ndarray) and outputs.shape == batch["y"].shape
  return [(f"value w{int(np.round(o))}\nsign {'plus' if o > 0 else 'minus'}",
           f"value w{int(np.round(o))}\nsign {'plus' if o > 0 else 'minus'}") for o in outputs]


def test_rouge_through_the_training_loop(tmp_path, monkeypatch):
  """A task's text function reaches the rouge evaluator through train_and_evaluate; a
  perfect echo scores 100; an unknown text function name fails before training."""
  monkeypatch.setattr(toy_task, "TASK", toy_task.with_parts(text_fns=lambda config: {"echo": _echo}))
  config = toy_task.default_config()
  config.update(dict(num_steps=4, eval_every=2))
  config.evals.dev = dict(type="rouge", split="dev", texts="echo", pred="predict", every=2,
                          batches=2)
  summary = training.train_and_evaluate(config, str(tmp_path / "ok"), toy_task.TASK)
  assert summary["dev_rouge1"] == summary["dev_rouge2"] == summary["dev_rougeLsum"] == 100.0
  assert summary["dev_rouge_count"] == 16.0  # 2 batches of 8 rows
  records = [json.loads(line) for line in open(tmp_path / "ok" / "metrics.jsonl")]
  assert [r["step"] for r in records if "dev_rougeLsum" in r] == [2, 4]

  config.evals.dev.texts = "ehco"
  with pytest.raises(ValueError) as err:
    training.train_and_evaluate(config, str(tmp_path / "bad"), toy_task.TASK)
  assert str(err.value) == ("config.evals.dev.texts='ehco' is not a text function of this "
                            "task; known: ['echo'].")

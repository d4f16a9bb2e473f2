"""The synthetic summarization task: its examples against the definition, the pointer-generator
batches (extended ids of article OOVs), the texts the ROUGE evaluator scores, config checks."""

import types

import numpy as np
import pytest

import tasks
from rumjax.evaluators import rouge
from tasks import summ_synthetic, summarization
from tasks.configs import summ_synthetic as summ_synthetic_config

TASK = summ_synthetic.TASK


def _config(**fields):
  c = summ_synthetic_config.get_config("decrum")
  c.update(num_train=64, num_eval=8, batch_size=4, **fields)
  summ_synthetic.validate_config(c)
  return c


def test_examples_follow_the_definition():
  c = _config()
  for ex in summ_synthetic.examples(c, "test"):
    sents = ex["article_sentences"]
    marked = [i for i, s in enumerate(sents) if s[0] == summ_synthetic.MARKER]
    assert len(marked) == 1 and marked[0] < len(sents) - 1
    assert ex["summary"] == [sents[marked[0]][1:]]
    assert ex["article"] == [t for s in sents for t in s]
    assert 4 <= len(sents) <= 8 and all(s[-1] == "." for s in sents)
  again = summ_synthetic.examples(c, "test")
  assert again == summ_synthetic.examples(c, "test")            # (seed, split, index) only
  assert again != summ_synthetic.examples(c, "dev")


def test_data_seed_fixes_the_examples_across_seeds():
  """``data_seed`` None: the data follow ``config.seed`` (as every run before the field);
  set, the examples are the same for every seed."""
  train = lambda **f: summ_synthetic.data(_config(**f)).splits["train"]
  same = lambda a, b: all(np.array_equal(a[k], b[k]) for k in a)
  assert same(train(seed=0), train(seed=0, data_seed=0))
  assert not same(train(seed=0), train(seed=1))
  assert same(train(seed=1, data_seed=0), train(seed=0))
  assert same(train(seed=2, data_seed=5), train(seed=5))


def test_hard_examples_follow_the_definition():
  """The hard task: every ``key`` sentence in order (marker dropped), the ``key not``
  distractors left out, 2-3 rare words per sentence, articles within max_enc_steps."""
  c = summ_synthetic_config.get_config("allrum_hard")
  c.update(num_train=64, num_eval=50, batch_size=4)
  summ_synthetic.validate_config(c)
  assert (c.difficulty, c.configuration, c.model.encoder_cell) == ("hard", "allrum", "rum")
  counts = []
  for ex in summ_synthetic.examples(c, "test"):
    sents = ex["article_sentences"]
    keys = [s[1:] for s in sents if s[0] == "key" and s[1] != "not"]
    distractors = [s for s in sents if s[:2] == ["key", "not"]]
    assert ex["summary"] == keys and 2 <= len(keys) <= 3 and 1 <= len(distractors) <= 2
    assert 8 <= len(sents) <= 12 and ex["article"] == [t for s in sents for t in s]
    assert len(ex["article"]) <= c.max_enc_steps
    assert sum(len(s) for s in keys) + 1 <= c.max_dec_steps
    for s in sents:
      body = s[2:] if s[:2] == ["key", "not"] else (s[1:] if s[0] == "key" else s)
      counts.append(sum(w.startswith("r") for w in body[:-1]))
  assert set(counts) <= {2, 3} and {2, 3} <= set(counts)


def test_batches_point_to_the_article_oovs():
  c = _config()
  d = summ_synthetic.data(c)
  assert len(d.vocab) <= c.vocab_size
  batch = next(iter(TASK.eval_data(c, "dev")))
  V = len(d.vocab)
  for r in range(4):
    ex = d.example(batch["key"][r])
    n = batch["article_lengths"][r]
    assert n == len(ex["article"])
    ext, base = batch["article_ext"][r][:n], batch["article"][r][:n]
    np.testing.assert_array_equal(base[ext >= V], d.vocab.unk_id)
    words = summarization.decoded_words(batch["targets"][r], d.vocab, ex["oovs"])
    assert words == summarization.summary_tokens(ex)   # every summary word copyable
    assert batch["dec_inputs"][r][0] == d.vocab.bos_id
  assert any(len(d.example(k)["oovs"]) for k in batch["key"])  # rare words are OOVs


def test_text_fns_give_rouge_100_for_the_reference_and_a_lead3_baseline():
  c = _config()
  d = summ_synthetic.data(c)
  fns = TASK.text_fns(c)
  batch = next(iter(TASK.eval_data(c, "test")))
  pairs = fns["summary"](batch, {"sequences": batch["targets"]})
  assert len(pairs) == 4 and all(h == r for h, r in pairs)
  assert rouge.rouge_f1(pairs)["rouge1"] == pytest.approx(100.0)
  lead = fns["lead3"](batch, None)
  assert all(h.count("\n") == 2 for h, _ in lead)
  del d


def test_config_errors():
  task = tasks.get_task("summ_synthetic")
  assert task is TASK and task.variants == ("lead", "encrum", "decrum", "allrum",
                                            "lead_hard", "encrum_hard", "decrum_hard",
                                            "allrum_hard")
  assert task.get_config("encrum").model.encoder_cell == "rum"
  with pytest.raises(ValueError, match=r"unknown summ_synthetic variant 'bothrum'; known "
                     r"variants are \['lead', 'encrum', 'decrum', 'allrum', 'lead_hard'"):
    task.get_config("bothrum")
  with pytest.raises(ValueError, match=r"unknown summ_synthetic split 'valid'; known splits "
                     r"are \['dev', 'test'\]"):
    task.eval_data(_config(), "valid")
  for field, value, match in [("configuration", "bothrum", "configuration"),
                              ("min_dec_steps", 20, "min_dec_steps=20 must be <="),
                              ("cov_loss_wt", -1.0, "cov_loss_wt"),
                              ("cov_loss_wt", None, r"cov_loss_wt=None must be >= 0"),
                              ("difficulty", "medium", "difficulty='medium' must be one of"),
                              ("data_seed", -1, "data_seed=-1"),
                              ("model.decoder_cell", "lstmx", "not a registered cell"),
                              # these reached the model build (after the data) or, for
                              # embed_dim=0, a ZeroDivisionError in an initializer
                              ("model.embed_dim", 0, r"^config.model.embed_dim=0 must be"),
                              ("model.hidden_size", 0, r"^config.model.hidden_size=0 must"),
                              ("model.lam", -1.0, r"^config.model.lam: "),
                              ("model.activation", "bogus", r"^config.model.activation=")]:
    c = task.get_config()
    c.update_from_flattened_dict({field: value})
    with pytest.raises(ValueError, match=match):
      task.validate_config(c)


@pytest.mark.parametrize("normalization", ["example", "token"])
def test_loss_normalization_against_a_loop(normalization):
  """``example`` (See et al.'s _mask_and_avg): the mean over rows of each row's mean over
  its steps, coverage loss included; ``token``: the mean over all real steps."""
  c = _config(loss_normalization=normalization, cov_loss_wt=0.5)
  c.model.coverage = True
  batch = next(iter(TASK.eval_data(c, "dev")))
  B, T = batch["targets"].shape
  S = batch["article"].shape[1]
  rng = np.random.default_rng(0)
  probs = rng.dirichlet(np.ones(c.vocab_size + c.max_oovs), size=(B, T)).astype(np.float32)
  attention = rng.dirichlet(np.ones(S), size=(B, T)).astype(np.float32)
  coverage = rng.uniform(0, 2, size=(B, T, S)).astype(np.float32)
  batch["target_lengths"][1] = 2          # rows of different lengths
  batch = summarization.batch_maker({k: v for k, v in batch.items()
                                     if k not in ("coverage_weight", "step_weight", "mask")},
                                    0.5, normalization)(np.arange(B))
  batch["mask"] = np.ones((B,), np.float32)
  # Every even step, padded steps included, puts its largest probability on the target.
  even = np.arange(T) % 2 == 0
  probs[:, even] += np.eye(probs.shape[-1], dtype=np.float32)[batch["targets"][:, even]]
  probs /= probs.sum(-1, keepdims=True)
  loss, metrics = summarization.loss_and_metrics(
      {"probs": probs, "attention": attention, "coverage": coverage}, batch)
  per_row, all_steps = [], []
  sums = {"nll": 0.0, "coverage_loss": 0.0, "accuracy": 0.0}
  for b in range(B):
    steps = []
    for t in range(int(batch["target_lengths"][b])):
      nll = -np.log(probs[b, t, batch["targets"][b, t]] + 1e-12)
      cov = sum(min(attention[b, t, i], coverage[b, t, i]) for i in range(S))
      steps.append(nll + 0.5 * cov)
      sums["nll"] += nll
      sums["coverage_loss"] += cov
      sums["accuracy"] += float(np.argmax(probs[b, t]) == batch["targets"][b, t])
    per_row.append(np.mean(steps))
    all_steps += steps
  expected = np.mean(per_row) if normalization == "example" else np.mean(all_steps)
  np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
  total, count = metrics["loss"]
  np.testing.assert_allclose(float(total) / float(count), expected, rtol=1e-5)
  assert sums["accuracy"] >= len(all_steps) // 2   # the even steps are right
  for name, value in sums.items():   # summed over the real steps only
    np.testing.assert_allclose(float(metrics[name][0]), value, rtol=1e-5, err_msg=name)
    assert float(metrics[name][1]) == len(all_steps)
  with pytest.raises(ValueError, match="loss_normalization"):
    _config(loss_normalization="row")


@pytest.mark.slow   # ~70 s: trains until the beam copies; tests/test_decoding tests the search
def test_beam_decoding_of_a_tiny_trained_model_copies_the_marked_sentence():
  """A tiny LEAD pointer-generator fitted to 16 articles (plain optax loop, full batch)
  decodes their summaries with the task's beam search (size 4) and greedy decoders,
  rare words copied from the article through the extended vocabulary."""
  import jax
  import optax
  c = summ_synthetic_config.get_config("lead")
  c.update(num_train=16, num_eval=8, batch_size=16, vocab_size=60, min_dec_steps=0)
  c.model.update(hidden_size=32, embed_dim=16, encoder_cell="lstm", decoder_cell="lstm")
  d = summ_synthetic.data(c)
  model = TASK.build_model(c)
  batch = summarization.batch_maker(d.splits["train"], 0.0, "token")(np.arange(16))
  batch["mask"] = np.ones((16,), np.float32)
  params = jax.jit(model.init)(jax.random.key(0), batch)["params"]  # jit: eager init is 2x slower
  tx = optax.adam(1e-2)
  opt = tx.init(params)

  @jax.jit
  def step(params, opt):
    loss, grads = jax.value_and_grad(lambda p: summarization.loss_and_metrics(
        model.apply({"params": p}, batch), batch)[0])(params)
    updates, opt = tx.update(grads, opt)
    return optax.apply_updates(params, updates), opt, loss

  for _ in range(300):
    params, opt, loss = step(params, opt)
  assert float(loss) < 0.05, float(loss)
  fns = TASK.predict_fns(c, model)
  references = [summarization.summary_tokens(d.example(k)) for k in batch["key"]]
  for pred in ("beam", "greedy"):
    seqs = np.asarray(jax.jit(fns[pred])(params, batch, None)[0]["sequences"])
    words = [summarization.decoded_words(s, d.vocab, d.example(k)["oovs"])
             for s, k in zip(seqs, batch["key"])]
    exact = [w == r for w, r in zip(words, references)]
    assert sum(exact) >= 14, (pred, sum(exact))
    copied = [w for w, ok, k in zip(words, exact, batch["key"]) if ok
              and set(w) & set(d.example(k)["oovs"])]
    assert copied, "no exact summary contains an article OOV: nothing was copied"


def test_too_few_copy_slots_is_a_one_line_error_not_a_nan():
  """An article with more OOVs than ``max_oovs`` would point past the final distribution
  (a NaN loss at step 1): building the model says which field to raise and to what."""
  c = _config(max_oovs=3)
  needed = summ_synthetic.data(c).max_oovs()
  assert needed > 3
  with pytest.raises(ValueError, match=rf"^an article has {needed} words outside the "
                     rf".*config.max_oovs: set --config.max_oovs={needed} \(or more\)\.$"):
    TASK.build_model(c)


@pytest.mark.slow   # ~90 s: the paper-size model
def test_the_hard_tasks_first_loss_is_finite_at_its_sizes():
  """Every example of the hard task's real data fits the copy slots, and the first
  training batch's loss and gradients are finite (at max_oovs 20 it was NaN at step 1)."""
  import jax
  c = summ_synthetic_config.get_config("lead_hard")
  d = summ_synthetic.data(c)
  assert d.max_oovs() <= c.max_oovs
  batch = next(iter(TASK.train_data(c)))
  assert int(np.max(batch["targets"])) < len(d.vocab) + c.max_oovs
  model = TASK.build_model(c)
  params = model.init(jax.random.key(0), batch, train=False)["params"]

  def loss(p):
    return TASK.loss_and_metrics(model.apply({"params": p}, batch, train=False), batch)[0]

  value, grads = jax.value_and_grad(loss)(params)
  assert np.isfinite(float(value))
  assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))


def test_summ_synthetic_eval_splits_have_num_eval_examples():
  cfg = types.SimpleNamespace(seed=0, num_train=5, num_eval=2, num_common=20, num_rare=10,
                              difficulty="easy")
  assert len(summ_synthetic.examples(cfg, "dev")) == 2
  assert len(summ_synthetic.examples(cfg, "train")) == 5

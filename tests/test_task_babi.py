"""bAbI (task C): the TFDS builder on a tiny fixture, the task's data and models, early
stopping, and (``-m slow``) the question counts of ../shared/data/babi/en-10k."""

import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rumjax import training
from rumjax.cells import make_cell
from rumjax.models.babi import SentenceQA, dot_attention
import tasks
from tasks import babi
from tasks.configs import babi as babi_config
from tasks.datasets import babi as babi_builder

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_BABI = os.path.normpath(os.path.join(REPO, os.pardir, "shared", "data", "babi"))

# Two stories, three questions; a space before the tab as in the real files.
TRAIN = """\
1 Mary moved to the bathroom.
2 John went to the hallway.
3 Where is Mary? \tbathroom\t1
4 Daniel went back to the hallway.
5 Sandra moved to the garden.
6 Where is Daniel? \thallway\t4
1 Sandra travelled to the office.
2 Sandra went to the bathroom.
3 Where is Sandra? \tbathroom\t2
"""
TEST = """\
1 John moved to the kitchen.
2 Mary went to the garden.
3 Where is John? \tkitchen\t1
"""


def _write_fixture(root, train=TRAIN, test=TEST, version="en-10k", task=1):
  paths = babi_builder.relative_paths(version, task)
  os.makedirs(os.path.join(root, version), exist_ok=True)
  for split, text in (("train", train), ("test", test)):
    if text is not None:
      with open(os.path.join(root, paths[split]), "w") as f:
        f.write(text)
  return str(root)


@pytest.fixture(scope="module")
def fixture_dirs(tmp_path_factory):
  base = tmp_path_factory.mktemp("babi")
  return {"manual_dir": _write_fixture(base / "manual"), "data_dir": str(base / "tfds")}


def _prepare(manual_dir, data_dir, name="en-10k_qa1", allow_download=False):
  import tensorflow_datasets as tfds
  builder = babi_builder.Babi(config=name, data_dir=data_dir, file_format="array_record",
                              allow_download=allow_download)
  builder.download_and_prepare(
      download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
  return builder


# ----------------------------------------------------------------------------- parsing


def test_parse_story_lines_and_questions():
  qs = babi_builder.parse_lines(TRAIN.splitlines(keepends=True), "train.txt")
  assert [q["question"] for q in qs] == ["Where is Mary?", "Where is Daniel?",
                                         "Where is Sandra?"]
  assert [q["answer"] for q in qs] == ["bathroom", "hallway", "bathroom"]
  # The second question sees sentences 1, 2, 4, 5: not the first question (3), nothing later.
  assert qs[1]["story"] == ["Mary moved to the bathroom.", "John went to the hallway.",
                            "Daniel went back to the hallway.", "Sandra moved to the garden."]
  assert qs[1]["story_line_ids"] == [1, 2, 4, 5]
  assert qs[0]["story_line_ids"] == [1, 2]
  # The second story starts afresh.
  assert qs[2]["story"] == ["Sandra travelled to the office.", "Sandra went to the bathroom."]
  assert [q["supporting_facts"] for q in qs] == [[1], [4], [2]]
  assert [q["story_index"] for q in qs] == [0, 0, 1]
  assert [q["question_index"] for q in qs] == [0, 1, 2]


@pytest.mark.parametrize("line, message", [
    ("x Mary moved.", "line id"),
    ("5 Mary moved.", "does not follow 2"),
    ("3 Where is Mary?\tbathroom", "3 tab-separated fields"),
    ("3 Where is Mary?\tbathroom\tone", "not integers"),
    ("3 Where is Mary?\tbathroom\t7", "not statements"),
])
def test_malformed_line_names_file_and_line(line, message):
  lines = ["1 Mary moved to the bathroom.\n", "2 John went to the hallway.\n", line + "\n"]
  with pytest.raises(babi_builder.BabiFormatError, match=message) as err:
    babi_builder.parse_lines(lines, "qa1_train.txt")
  assert "qa1_train.txt, line 3" in str(err.value)


def test_dev_split_is_fixed_and_takes_whole_stories():
  assert babi_builder.dev_indices([0, 1, 2]).tolist() == [2]
  stories = [i // 5 for i in range(10_000)]           # 2,000 stories of 5 questions
  dev = babi_builder.dev_indices(stories)
  assert len(dev) == 1000 and dev[:5].tolist() == [75, 76, 77, 78, 79]
  assert babi_builder.dev_indices(stories).tolist() == dev.tolist()   # fixed
  in_dev = {stories[i] for i in dev}
  assert all((i in set(dev.tolist())) == (stories[i] in in_dev) for i in range(10_000))
  assert len(babi_builder.dev_indices([i // 3 for i in range(1000)])) == 100
  assert babi_builder.dev_indices([0, 0, 0]).tolist() == [2]   # one story: its last question
  assert babi_builder.dev_indices([0, 0, 1]).tolist() == [2]   # the story that fits


# ----------------------------------------------------------------------------- builder


def test_builder_examples_and_splits(fixture_dirs):
  builder = _prepare(**fixture_dirs)
  assert {s: builder.info.splits[s].num_examples for s in ("train", "dev", "test")} == {
      "train": 2, "dev": 1, "test": 1}
  data = babi.load_questions("en-10k", 1, **fixture_dirs)
  train, dev, test = data["train"], data["dev"], data["test"]
  assert [q["question"] for q in train] == ["Where is Mary?", "Where is Daniel?"]
  assert [q["answer"] for q in train] == ["bathroom", "hallway"]
  assert train[1]["story_line_ids"] == [1, 2, 4, 5]
  assert train[1]["supporting_facts"] == [4]
  assert dev == [{"story": ["Sandra travelled to the office.",
                            "Sandra went to the bathroom."],
                  "story_line_ids": [1, 2], "question": "Where is Sandra?",
                  "answer": "bathroom", "supporting_facts": [2], "story_index": 1,
                  "question_index": 2}]
  assert [(q["story"], q["answer"]) for q in test] == [
      (["John moved to the kitchen.", "Mary went to the garden."], "kitchen")]


def test_missing_folder_says_which_files_go_where(tmp_path):
  missing = str(tmp_path / "nowhere")
  with pytest.raises(FileNotFoundError) as err:
    _prepare(missing, str(tmp_path / "tfds"))
  text = str(err.value)
  assert missing in text and "does not exist" in text
  assert os.path.join(missing, "en-10k", "qa1_single-supporting-fact_train.txt") in text
  assert os.path.join(missing, "en-10k", "qa1_single-supporting-fact_test.txt") in text
  # Through the task: the config check names the field.
  config = babi_config.get_config()
  config.manual_dir = missing
  with pytest.raises(ValueError, match="config.manual_dir"):
    babi.validate_config(config)


def test_missing_file_is_named(tmp_path):
  manual = _write_fixture(tmp_path / "manual", test=None)
  with pytest.raises(FileNotFoundError, match="missing file") as err:
    _prepare(manual, str(tmp_path / "tfds"))
  assert os.path.join(manual, "en-10k", "qa1_single-supporting-fact_test.txt") in str(err.value)


def test_malformed_file_through_the_builder(tmp_path):
  bad = TRAIN.replace("6 Where is Daniel? \thallway\t4", "6 Where is Daniel? hallway 4\tx")
  manual = _write_fixture(tmp_path / "manual", train=bad)
  with pytest.raises(babi_builder.BabiFormatError) as err:
    _prepare(manual, str(tmp_path / "tfds"))
  assert "qa1_single-supporting-fact_train.txt, line 6" in str(err.value)


# ------------------------------------------------------------------------ task and models


def _config(fixture_dirs, variant=None, lam=None, **overrides):
  config = babi_config.get_config(variant)
  config.update(manual_dir=fixture_dirs["manual_dir"], data_dir=fixture_dirs["data_dir"],
                batch_size=2, num_steps=3, eval_every=2, checkpoint_every=0, log_every=1)
  config.model.update(hidden_size=8, embed_dim=4)
  if lam is not None:
    config.model.lam = lam
  config.update(overrides)
  babi.validate_config(config)
  return config


def test_encoding_and_batches(fixture_dirs):
  config = _config(fixture_dirs)
  data = babi.encoded(config)
  assert data.answers == ("bathroom", "hallway", "kitchen")
  assert data.vocab[0] == babi.PAD and "?" in data.vocab and "kitchen" in data.vocab
  arrays = data.splits["train"]
  # "mary moved to the bathroom . john went to the hallway . where is mary ?": 16 tokens.
  assert arrays["lengths"].tolist() == [16, 29]
  assert babi.to_text(config, {k: v for k, v in arrays.items()}, 0) == (
      "mary moved to the bathroom . john went to the hallway . where is mary ? -> bathroom")
  batch = next(babi.train_data(config))
  assert batch["inputs"].shape == (2, 29) and batch["mask"].tolist() == [1.0, 1.0]
  sentence = _config(fixture_dirs, "sentence")
  s = babi.encoded(sentence).splits["train"]
  assert s["story_lengths"].tolist() == [2, 4] and s["story"].shape[2] == 7
  evals = list(babi.eval_data(sentence, "test"))
  assert len(evals) == 1 and evals[0]["mask"].tolist() == [1.0, 0.0]
  assert evals[0]["subtask"].tolist() == [1, 1]


@pytest.mark.parametrize("variant", [None, *babi_config.VARIANTS])
def test_every_variant_validates(variant):
  task = tasks.get_task("babi")
  assert task is babi.TASK and task.variants == ("word", "sentence", "sentence_attention")
  config = task.get_config(variant)
  task.validate_config(config)
  assert config.level == ("word" if variant in (None, "word") else "sentence")
  assert config.model.name == babi_config.MODEL_OF_LEVEL[config.level]
  assert config.model.get("attention", False) == (variant == "sentence_attention")
  assert (config.batch_size, config.num_steps, config.eval_every) == (32, 20 * 282, 282)
  with pytest.raises(ValueError, match=r"unknown babi variant 'words'; known variants are "
                     r"\['word', 'sentence', 'sentence_attention'\]"):
    task.get_config("words")


def test_level_and_model_must_agree():
  config = babi_config.get_config()
  config.level = "sentence"
  with pytest.raises(ValueError, match="config.model.name='sentence_qa'"):
    babi.validate_config(config)
  config = babi_config.get_config("sentence_attention")
  assert config.model.name == "sentence_qa" and config.model.attention is True
  config.model.name = "classifier"
  with pytest.raises(ValueError, match="config.model.name='sentence_qa'"):
    babi.validate_config(config)
  config = babi_config.get_config()
  config.babi_task = 21
  with pytest.raises(ValueError, match="config.babi_task"):
    babi.validate_config(config)


def test_dot_attention_masks():
  hs = jnp.arange(24.0).reshape(2, 3, 4) / 10
  query = jnp.ones((2, 4))
  mask = jnp.array([[True, True, False], [False, False, False]])
  context, weights = dot_attention(hs, query, mask)
  np.testing.assert_allclose(weights.sum(-1), [1.0, 0.0], rtol=1e-6)
  assert weights[0, 2] == 0
  scores = hs[0, :2] @ query[0]
  p = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
  np.testing.assert_allclose(context[0], p @ hs[0, :2], rtol=1e-5)
  np.testing.assert_array_equal(context[1], np.zeros(4))


def test_sentence_model_ignores_padding():
  """A row's logits do not depend on how far the batch is padded, and equal the model on
  that row alone without any padding (with attention, which also reads the padding)."""
  rng = np.random.default_rng(0)
  story = rng.integers(1, 10, size=(2, 5, 4)).astype(np.int32)
  story[:, :, 3] = 0                      # padded words
  story[0, 2:] = 0                        # row 0 has 2 sentences
  question = rng.integers(1, 10, size=(2, 4)).astype(np.int32)
  question[0, 3] = 0                      # row 0's question has 3 words
  batch = {"story": story, "story_lengths": np.array([2, 5], np.int32), "question": question}
  model = SentenceQA(cell=make_cell("rum", 6, lam=1), vocab_size=10, num_classes=3,
                     embed_dim=4, attention=True)
  variables = jax.jit(model.init)(jax.random.key(0), batch)
  apply = jax.jit(model.apply)
  full = apply(variables, batch)
  cut = apply(variables, dict(batch, story=story[:, :3], story_lengths=np.array(
      [2, 3], np.int32)))
  alone = apply(variables, {"story": story[:1, :2], "story_lengths": np.array([2]),
                            "question": question[:1, :3]})
  np.testing.assert_allclose(full[0], cut[0], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(full[0], alone[0], rtol=1e-5, atol=1e-6)


def test_word_model_uses_the_last_real_step(fixture_dirs):
  """Word level: the logits of the bucketed batch equal those padded to the maximum."""
  config = _config(fixture_dirs)
  arrays = babi.encoded(config).splits["train"]
  idx = np.array([0, 0])  # both rows 16 tokens: bucket 16 < the maximum 29
  cut = babi.batch_maker(arrays, "word", bucket=True)(idx)
  full = babi.batch_maker(arrays, "word", bucket=False)(idx)
  assert cut["inputs"].shape == (2, 16) and full["inputs"].shape == (2, 29)
  model = babi.build_model(config)
  variables = jax.jit(model.init)(jax.random.key(0), full)
  apply = jax.jit(model.apply)
  np.testing.assert_allclose(apply(variables, cut), apply(variables, full), rtol=1e-5,
                             atol=1e-6)


@pytest.mark.parametrize("variant", ["sentence", "sentence_attention"])
def test_sentence_level_trains(fixture_dirs, tmp_path, variant):
  config = _config(fixture_dirs, variant, lam=0, num_steps=2, eval_every=1)
  summary = training.train_and_evaluate(config, str(tmp_path / variant), babi.TASK)
  assert summary["step"] == 2
  assert np.isfinite(summary["train_loss"])
  assert {"eval_accuracy", "test_accuracy", "test_subtask_accuracy_qa1"} <= set(summary)
  # The fixture's only sub-task: its accuracy is the overall one.
  assert summary["test_subtask_accuracy_qa1"] == pytest.approx(summary["test_accuracy"])
  names = set(summary["params"])
  assert {"embed", "rnn", "head"} <= names
  assert ("attention_dense" in names) == (variant == "sentence_attention")


@pytest.mark.slow
@pytest.mark.parametrize("task", range(1, 21))
def test_shared_en10k_question_counts(task, tmp_path):
  if not os.path.isdir(os.path.join(SHARED_BABI, "en-10k")):
    pytest.skip(f"{SHARED_BABI}/en-10k is not here")
  train_file = os.path.join(SHARED_BABI, babi_builder.relative_paths("en-10k", task)["train"])
  if not os.path.exists(train_file):
    # Known gap (../shared/data/README.md): en-10k qa3 train is missing; the builder must
    # say so, naming the file.
    with pytest.raises(FileNotFoundError, match="missing file") as err:
      _prepare(SHARED_BABI, str(tmp_path), name=babi_builder.config_name("en-10k", task))
    assert train_file in str(err.value)
    pytest.skip(f"{train_file} is missing here (known gap); the builder names it")
  builder = _prepare(SHARED_BABI, str(tmp_path), name=babi_builder.config_name("en-10k", task))
  counts = {s: builder.info.splits[s].num_examples for s in ("train", "dev", "test")}
  # Dev takes whole stories, none of them in train.
  assert counts["train"] + counts["dev"] == 10_000 and counts["test"] == 1000
  assert 1000 <= counts["dev"] <= 1010, counts
  stories = {s: {int(ex["story_index"]) for ex in builder.as_data_source(split=s)}
             for s in ("train", "dev")}
  assert stories["train"] and stories["dev"] and not stories["train"] & stories["dev"]


def test_babi_sentence_bucket_holds_the_longest_story():
  arrays = {"story": np.ones((2, 20, 4), np.int32),
            "story_lengths": np.asarray([2, 12], np.int32),
            "question": np.ones((2, 4), np.int32), "targets": np.zeros(2, np.int32)}
  batch = babi.batch_maker(arrays, "sentence", True)(np.arange(2))
  assert batch["story"].shape[1] == 16


def test_babi_sizes_cover_every_split_and_the_question():
  q = lambda story, question: {"story": story, "question": question, "answer": "a"}
  questions = {"train": [q(["b c ."], "d ?")],
               "test": [q(["b c .", "b c .", "b c ."], "what is b c d e f ?")]}
  enc = babi.encode(questions, "sentence")
  assert enc.splits["test"]["story_lengths"].tolist() == [3]
  assert enc.splits["test"]["question"].shape[1] >= 8
  word = babi.encode(questions, "word")
  assert word.splits["test"]["lengths"].tolist() == [17]   # 3 x "b c ." + 8 question tokens


@pytest.mark.usefixtures("float32_matmuls")   # compared with a float64 recomputation
def test_sentence_attention_reads_only_the_story_sentences():
  """The attention layer reads [c; h_q]: c attends over the states of the real story
  sentences only (not the question's step), and is 0 for a story without sentences."""
  rng = np.random.default_rng(1)
  story = rng.integers(1, 10, size=(3, 4, 3)).astype(np.int32)
  lengths = np.array([2, 4, 0], np.int32)
  story[np.arange(4)[None] >= lengths[:, None]] = 0
  batch = {"story": story, "story_lengths": lengths,
           "question": rng.integers(1, 10, size=(3, 3)).astype(np.int32)}
  model = SentenceQA(cell=make_cell("rum", 6, lam=1), vocab_size=10, num_classes=3,
                     embed_dim=4, attention=True)
  variables = jax.jit(model.init)(jax.random.key(0), batch)

  @jax.jit
  def run(variables, batch):
    seen = {}
    def record(f, args, kwargs, context):
      out = f(*args, **kwargs)
      if context.module.name == "rnn":
        seen["hs"] = out
      elif context.module.name == "attention_dense":
        seen["attention_in"] = args[0]
      return out
    with nn.intercept_methods(record):
      model.apply(variables, batch)
    return seen

  seen = run(variables, batch)
  for b, n in enumerate(lengths):
    hs = np.asarray(seen["hs"][b], np.float64)
    h_q = hs[n]
    context = np.zeros(6)
    if n:
      scores = hs[:n] @ h_q
      p = np.exp(scores - scores.max())
      context = (p / p.sum()) @ hs[:n]
    np.testing.assert_allclose(seen["attention_in"][b], np.concatenate([context, h_q]),
                               rtol=1e-5, atol=1e-6)

"""The data-backed summarization tasks ``cnn_dailymail`` and ``stories`` on fixture folders,
the decoded-text helpers, and the one-command paths: train, coverage continuation from a
checkpoint (``init_from``), and decoded/reference summaries written by ``launch.predict``."""

import json
import os
import subprocess
import sys

import pytest

import tasks
from tasks import cnn_dailymail, stories
from tasks import summarization as summ
from tasks.configs import summarization as summ_config
from tests import test_datasets_summarization as fixtures

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cnn_config(tmp_path, **fields):
  task = tasks.get_task("cnn_dailymail")
  c = task.get_config("decrum")
  c.manual_dir = fixtures._cnndm(tmp_path / "cnndm")
  c.data_dir = str(tmp_path / "tfds")
  c.update(batch_size=2, **fields)
  task.validate_config(c)
  return task, c


@pytest.mark.parametrize("name", ["summ_synthetic", "cnn_dailymail", "stories"])
def test_the_summarization_tasks_are_task_objects_with_beam_submissions(name):
  task = tasks.get_task(name)
  assert task.name == name and task.submission_pred == "beam"
  assert None not in (task.predict_fns, task.text_fns, task.submission, task.to_text)
  assert task.eval_splits == ("dev", "test")
  hard = tuple(f"{v}_hard" for v in summ_config.VARIANTS) if name == "summ_synthetic" else ()
  assert task.variants == tuple(summ_config.VARIANTS) + hard
  for variant, cells in summ_config.VARIANTS.items():
    c = task.get_config(variant)
    assert c.configuration == variant and c.variant == variant
    assert (c.model.encoder_cell, c.model.decoder_cell) == (cells["encoder_cell"],
                                                            cells["decoder_cell"])
  c = task.get_config()
  assert c.variant is None and c.configuration == "lead" and c.model.encoder_cell == "lstm"


def test_token_sentences_and_decoded_text():
  assert summ.token_sentences("a b . c ! d".split()) == [["a", "b", "."], ["c", "!"], ["d"]]
  assert summ.token_sentences([]) == []
  assert summ.decoded_text("a . b ?".split()) == "a .\nb ?"


def test_text_example_lowercases_tokenises_and_drops_empty_sentences():
  ex = summ.text_example(["The cat's hat.", "  ", "It fell!"], ["Cat loses hat.", ""])
  assert ex["article_sentences"] == [["the", "cat", "'s", "hat", "."], ["it", "fell", "!"]]
  assert ex["article"] == ["the", "cat", "'s", "hat", ".", "it", "fell", "!"]
  assert ex["summary"] == [["cat", "loses", "hat", "."]]
  assert summ.text_example([], []) == {"article": [], "summary": [], "article_sentences": []}


def test_cnn_dailymail_splits_texts_and_lead3(tmp_path):
  task, c = _cnn_config(tmp_path)
  d = cnn_dailymail.data(c)
  assert {s: len(x) for s, x in d.examples.items()} == {"train": 3, "dev": 1, "test": 1}
  from tasks.datasets import cnn_dailymail as cnndm
  raw = cnndm.load_splits(c.manual_dir, c.data_dir)["validation"][0]
  ex = d.examples["dev"][0]
  assert summ.reference_text(ex) == "\n".join(
      " ".join(s) for s in (summ.text_example([], raw["highlights"].split("\n"))["summary"]))
  assert all(t == t.lower() for t in ex["article"])
  batch = next(iter(task.eval_data(c, "dev")))
  assert batch["article_lengths"][0] == len(ex["article"])
  lead = task.text_fns(c)["lead3"](batch, None)
  assert len(lead) == 1
  assert lead[0][0] == "\n".join(" ".join(s) for s in ex["article_sentences"][:3])


def test_cnn_dailymail_csv_training_and_missing_split(tmp_path):
  csv_path = tmp_path / "train.csv"
  csv_path.write_text(',id,article,highlights\n0,a1,"One sentence. Two.","First.\nSecond."\n'
                      '1,a2,"Three here.","Third."\n', encoding="utf-8")
  task, c = _cnn_config(tmp_path, train_csv=str(csv_path))
  os.remove(os.path.join(c.manual_dir, "url_lists", "all_test.txt"))
  d = cnn_dailymail.data(c)
  assert len(d.examples["train"]) == 2
  assert d.examples["train"][0]["summary"] == [["first", "."], ["second", "."]]
  with pytest.raises(ValueError, match=r"all_test\.txt was missing.*split=dev"):
    task.eval_data(c, "test")
  bad = tmp_path / "bad.csv"
  bad.write_text("id,text\n1,x\n")
  c.train_csv = str(bad)
  with pytest.raises(ValueError, match=r"lacks the column\(s\) \['article', 'highlights'\]"):
    cnn_dailymail.read_csv(str(bad))
  for field, value, match in [("train_csv", str(tmp_path / "no.csv"), "is not a file"),
                              ("malformed_stories", "drop", "malformed_stories")]:
    c2 = task.get_config()
    c2.manual_dir = c.manual_dir
    c2[field] = value
    with pytest.raises(ValueError, match=match):
      task.validate_config(c2)


def _stories_config(tmp_path, subtask, **fields):
  task = tasks.get_task("stories")
  c = task.get_config("lead")
  c.manual_dir = fixtures._stories(tmp_path / "sd")
  c.data_dir = str(tmp_path / "tfds")
  c.update(subtask=subtask, batch_size=2, **fields)
  task.validate_config(c)
  return task, c


@pytest.mark.parametrize("subtask", ["s2s", "sh2s", "s2t"])
def test_stories_subtasks(tmp_path, subtask):
  task, c = _stories_config(tmp_path, subtask)
  d = stories.data(c)
  assert {s: len(x) for s, x in d.examples.items()} == {"train": 2, "dev": 1, "test": 1}
  first = d.examples["train"][0]             # STORY5: "One." ... "Five." -> count
  words = [s[0] for s in first["article_sentences"]]
  assert sorted(words) == sorted(["one", "two", "three", "four", "five"])
  if subtask == "sh2s":
    assert words != ["one", "two", "three", "four", "five"]      # this seed shuffles it
    assert stories.data(c).examples["train"][0] == first           # fixed per example
    # config.data_seed: another training seed, the same shuffled sources.
    _, other = _stories_config(tmp_path, subtask, seed=c.seed + 1, data_seed=c.seed)
    assert stories.data(other).examples == d.examples
    _, other = _stories_config(tmp_path, subtask, seed=c.seed + 1)
    assert stories.data(other).examples["train"] != d.examples["train"]
  else:
    assert words == ["one", "two", "three", "four", "five"]
  expected = [["count"]] if subtask == "s2t" else [["numbers", "."]]
  assert first["summary"] == expected


def test_stories_oods2s_evaluates_on_the_other_dataset_and_errors(tmp_path):
  other = fixtures._stories(tmp_path / "other", files={
      "validation.jsonl": [{"story": "Rivers flow.", "summary": "Water.", "title": "R"}]})
  task, c = _stories_config(tmp_path, "oods2s", ood_manual_dir=other)
  d = stories.data(c)
  assert d.examples["dev"][0]["summary"] == [["water", "."]]
  assert len(d.examples["train"]) == 2
  with pytest.raises(ValueError, match=r"test\.jsonl was missing"):
    task.eval_data(c, "test")
  for fields, match in [(dict(subtask="s2s"), "oods2s needs"),
                        (dict(ood_manual_dir=""), "oods2s needs"),
                        (dict(manual_dir=""), "has no download"),
                        (dict(subtask="s2x", ood_manual_dir=""), "subtask='s2x'")]:
    c2 = task.get_config()
    c2.update(manual_dir=c.manual_dir, ood_manual_dir=other, subtask="oods2s")
    c2.update(**fields)
    with pytest.raises(ValueError, match=match):
      task.validate_config(c2)


def test_submission_puts_decoded_next_to_reference(tmp_path):
  task, c = _cnn_config(tmp_path)
  d = cnn_dailymail.data(c)
  batch = next(iter(task.eval_data(c, "dev")))
  rows = task.submission(c, [(batch, {"sequences": batch["targets"]})])
  assert len(rows) == 1                                     # the padded row is dropped
  assert rows[0]["decoded"] == rows[0]["reference"] == summ.reference_text(d.examples["dev"][0])
  assert rows[0]["split"] == "dev" and rows[0]["index"] == 0
  assert task.to_text(c, batch, 0) == f"{rows[0]['article']} -> {rows[0]['reference']}"


def _env():
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env.pop("XLA_FLAGS", None)
  return env


def _run(module, *args):
  proc = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=_env(),
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc


@pytest.mark.slow   # five processes, each compiling the model: ~4 min on one busy core
def test_train_coverage_continuation_and_decode_from_one_command_each(tmp_path):
  """cnn_dailymail decRUM trains from one command on the fixture (test evaluators moved to
  dev), a coverage run continues from it (``init_from``: every weight kept, ``w_c`` new),
  and ``launch.predict`` writes its beam and greedy summaries beside the references."""
  _, c = _cnn_config(tmp_path)
  small = ["--task=cnn_dailymail", "--variant=decrum", f"--config.manual_dir={c.manual_dir}",
           f"--config.data_dir={c.data_dir}", "--batch_size=2", "--steps=2",
           "--config.model.hidden_size=8", "--config.model.embed_dim=8",
           "--config.max_enc_steps=30", "--config.max_dec_steps=8",
           "--config.min_dec_steps=2", "--config.max_decode_steps=5",
           "--config.evals.test.split=dev", "--config.evals.lead3.split=dev",
           "--config.loss_normalization=token"]      # so loss = nll + w * coverage below
  first, cov = tmp_path / "first", tmp_path / "coverage"
  out = _run("launch.train", f"--workdir={first}", *small)
  final = json.loads(open(first / "metrics.jsonl").read().splitlines()[-1])
  assert {"test_rouge1", "test_rouge2", "test_rougeLsum", "lead3_rouge1"} <= set(final)
  out = _run("launch.train", f"--workdir={cov}", *small, f"--config.init_from={first}",
             "--config.model.coverage=True")
  assert "attn_coverage" in out.stderr                    # logged as a new parameter
  for run, weight in ((first, 0.0), (cov, 1.0)):            # loss = nll + w * coverage loss
    train = [json.loads(x) for x in open(run / "metrics.jsonl") if "train_loss" in x][-1]
    assert train["train_loss"] == pytest.approx(
        train["train_nll"] + weight * train["train_coverage_loss"], rel=1e-5)
  assert train["train_coverage_loss"] > 0
  for pred in ("beam", "greedy"):
    path = tmp_path / f"{pred}.jsonl"
    out = _run("launch.predict", f"--workdir={cov}", "--split=dev", f"--pred={pred}",
               f"--output={path}")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 1 and set(rows[0]) == {"split", "index", "decoded", "reference",
                                               "article"}
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["pred"] == pred and report["rows"] == 1
    assert len(rows[0]["decoded"].split()) <= 5

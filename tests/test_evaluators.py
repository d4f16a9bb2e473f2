"""Evaluators: the registry and config checks, sums over splits against NumPy, carried
state, grouped accuracy, and sharded == unsharded evaluation."""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from rumjax import evaluators
from rumjax import sharding as sharding_lib
from rumjax.training.state import TrainState

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _state(params):
  return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=(),
                    rng=jnp.zeros((2,), jnp.uint32))


def _batches(seed=0, n=5, rows=4, padded_rows=1):
  rng = np.random.default_rng(seed)
  out = []
  for i in range(n):
    mask = np.ones(rows, np.float32)
    if i == n - 1:
      mask[rows - padded_rows:] = 0
    out.append({"x": rng.normal(size=(rows, 3)).astype(np.float32),
                "targets": rng.integers(0, 3, size=rows).astype(np.int32),
                "group": rng.integers(0, 4, size=rows).astype(np.int32), "mask": mask})
  return out


def _logits(params, batch, model_state):
  return batch["x"] @ params, model_state


def _metrics(params, batch, model_state):
  logits, _ = _logits(params, batch, model_state)
  correct = (jnp.argmax(logits, -1) == batch["targets"]) * batch["mask"]
  sq = jnp.sum(logits ** 2, -1) * batch["mask"]
  return {"accuracy": (correct.sum(), batch["mask"].sum()),
          "sq": (sq.sum(), batch["mask"].sum())}, model_state


def test_registry_and_config_checks():
  assert {"loss", "grouped_accuracy"} <= set(evaluators.EVALUATORS.names())
  good = {"eval": evaluators.eval_entry("loss", "dev", every=5, batches=2)}
  evaluators.validate_evals(good, predict_names=["metrics"], splits=["dev"])
  bad = [
      ({"e": dict(split="dev")}, "config.evals.e has no 'type'"),
      ({"e": dict(type="los", split="dev")}, "did you mean 'loss'"),
      ({"e": dict(type="loss")}, "config.evals.e has no 'split'"),
      ({"e": dict(type="loss", split="train")}, "config.evals.e.split='train'"),
      ({"e": dict(type="loss", split="dev", every=-1)}, "config.evals.e.every=-1"),
      ({"e": dict(type="loss", split="dev", batches=1.5)}, "config.evals.e.batches=1.5"),
      ({"e": dict(type="loss", split="dev", pred="beam")}, "config.evals.e.pred='beam'"),
      # An option of another evaluator type (was a TypeError when the loop built it).
      ({"e": dict(type="loss", split="dev", num_groups=4)},
       "that a 'loss' evaluator does not take; its options: "),
  ]
  for evals, message in bad:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
      evaluators.validate_evals(evals, predict_names=["metrics"], splits=["dev"])


def test_every_task_entry_has_batches_at_end_so_a_saved_run_loads_into_any_variant(tmp_path):
  """A run saved with ``batches_at_end`` set (the small PTB setting) loaded into another
  variant's config failed ("not a field of this task's config"): every task's entries carry
  the field, ``None`` (= ``batches``) unless set."""
  import tasks
  from rumjax import configs
  for name in tasks.task_names():
    task = tasks.get_task(name)
    for variant in (None, *task.variants):
      config = task.get_config(variant)
      for key, entry in config.evals.items():
        assert "batches_at_end" in entry, (name, variant, key)
        configs.set_fields(config, {f"evals.{key}.batches_at_end": 3})
        assert config.evals[key].batches_at_end == 3
  # The small PTB setting reads the whole valid stream at the end; the variants' final run
  # reads what an experiment lets them read while training (char_ptb: 20 windows).
  assert tasks.get_task("ptb").get_config().evals.eval.batches_at_end == 0
  for variant in tasks.get_task("ptb").variants:
    assert tasks.get_task("ptb").get_config(variant).evals.eval.batches_at_end is None
    saved = json.loads(tasks.get_task("ptb").get_config(variant).to_json())
    saved["evals"]["eval"]["batches_at_end"] = 5
    (tmp_path / "config.json").write_text(json.dumps(saved))
    _, config = configs.load_workdir_config(str(tmp_path), tasks.get_task)
    assert config.evals.eval.batches_at_end == 5


def test_loss_evaluator_sums_like_numpy_and_caps_batches():
  params = jnp.asarray(np.random.default_rng(1).normal(size=(3, 3)), jnp.float32)
  batches = _batches()
  mesh = sharding_lib.make_mesh()
  evals = evaluators.build_evaluators(
      ml_collections.ConfigDict({"all": dict(type="loss", split="dev"),
                                 "two": dict(type="loss", split="dev", batches=2)}),
      predict_fns={"metrics": jax.jit(_metrics)}, data_fn=lambda split, bs: iter(batches),
      mesh=mesh)
  out = {}
  for ev in evals:
    out.update(ev.run(_state(params)))
  def reference(bs):
    x = np.concatenate([b["x"] for b in bs])
    m = np.concatenate([b["mask"] for b in bs]).astype(bool)
    logits = x[m] @ np.asarray(params)
    y = np.concatenate([b["targets"] for b in bs])[m]
    return (logits.argmax(-1) == y).mean(), (logits ** 2).sum(-1).mean()
  acc, sq = reference(batches)
  assert out["all_accuracy"] == pytest.approx(acc)
  assert out["all_sq"] == pytest.approx(sq, rel=1e-5)
  acc2, sq2 = reference(batches[:2])
  assert out["two_accuracy"] == pytest.approx(acc2) and out["two_sq"] == pytest.approx(sq2,
                                                                                       rel=1e-5)


def test_carried_state_flows_from_batch_to_batch_and_restarts_each_run():
  """A running count carried as the model state: the evaluator must pass the state of
  batch i to batch i + 1 and start from ``model_state()`` at every run."""
  def counting(params, batch, count):
    count = count + 1.0
    return {"count": (jnp.sum(count), jnp.asarray(count.size, jnp.float32))}, count
  batches = _batches(n=3, padded_rows=0)
  ev = evaluators.build_evaluators(
      {"s": dict(type="loss", split="dev")}, predict_fns={"metrics": jax.jit(counting)},
      data_fn=lambda split, bs: iter(batches), mesh=sharding_lib.make_mesh(),
      model_state_fn=lambda bs: jnp.zeros((4,)))[0]
  assert ev.run(_state(None))["s_count"] == pytest.approx((1 + 2 + 3) / 3)
  assert ev.run(_state(None))["s_count"] == pytest.approx(2.0)  # restarted from zeros


def test_grouped_accuracy_matches_numpy():
  params = jnp.asarray(np.random.default_rng(2).normal(size=(3, 3)), jnp.float32)
  batches = _batches(n=6)
  ev = evaluators.build_evaluators(
      {"test": dict(type="grouped_accuracy", split="test", group_key="group", num_groups=4,
                    name_format="qa{}")},
      predict_fns={"predict": jax.jit(_logits)}, data_fn=lambda split, bs: iter(batches),
      mesh=sharding_lib.make_mesh())[0]
  out = ev.run(_state(params))
  x = np.concatenate([b["x"] for b in batches])
  m = np.concatenate([b["mask"] for b in batches]).astype(bool)
  y = np.concatenate([b["targets"] for b in batches])
  g = np.concatenate([b["group"] for b in batches])
  correct = (x @ np.asarray(params)).argmax(-1) == y
  assert out["test_accuracy"] == pytest.approx(correct[m].mean())
  for k in range(4):
    sel = m & (g == k)
    if sel.any():
      assert out[f"test_accuracy_qa{k}"] == pytest.approx(correct[sel].mean())
    else:
      assert f"test_accuracy_qa{k}" not in out


def _grouped(batches, **options):
  entry = dict(type="grouped_accuracy", split="test", group_key="group", num_groups=4)
  entry.update(options)
  return evaluators.build_evaluators(
      {"test": entry}, predict_fns={"predict": jax.jit(_logits)},
      data_fn=lambda split, bs: iter(batches), mesh=sharding_lib.make_mesh())[0]


def test_grouped_accuracy_refuses_what_it_cannot_count():
  """Ids outside 0 .. num_groups - 1 (1-based ids with num_groups = their count) counted in
  no group and vanished from the overall accuracy; bad options failed after the whole
  split was evaluated, or gave 0.0; an empty split gave 0.0."""
  params = _state(jnp.eye(3, dtype=jnp.float32))
  batches = _batches(n=2)
  batches[1]["group"] = batches[1]["group"] + 1      # ids 1 .. 4 with num_groups=4
  with pytest.raises(ValueError, match=r"^config.evals.test: \d+ rows have a 'group' outside "
                     r"0 .. 3; set num_groups to the largest id \+ 1\.$"):
    _grouped(batches).run(params)
  for options, message in [
      (dict(num_groups=0), r"^config.evals.test.num_groups=0 must be an integer >= 1"),
      (dict(num_groups=2.7), r"^config.evals.test.num_groups=2.7 must be an integer"),
      (dict(name_format="qa{n}"), r"^config.evals.test.name_format='qa\{n\}' cannot name "
                                  r"a group \(KeyError"),
  ]:
    with pytest.raises(ValueError, match=message):
      _grouped(_batches(n=2), **options)
  with pytest.raises(ValueError, match=r"^config.evals.test.group_key='subtask' is not a "
                     r"field of the batches; they have \['group', 'mask', 'targets', 'x'\]"):
    _grouped(_batches(n=2), group_key="subtask").run(params)
  with pytest.raises(ValueError, match=r"^config.evals.test: the split has no real rows"):
    _grouped([]).run(params)


def test_an_empty_split_is_an_error_not_a_score():
  """The loss evaluator returned {} for a split without batches, and perplexity 1.0 (BPC
  0) for a split whose every position is padding."""
  from rumjax.evaluators.perplexity import PerplexityEvaluator
  mesh = sharding_lib.make_mesh()
  loss = evaluators.build_evaluators(
      {"dev": dict(type="loss", split="dev")}, predict_fns={"metrics": jax.jit(_metrics)},
      data_fn=lambda split, bs: iter([]), mesh=mesh)[0]
  with pytest.raises(ValueError, match=r"^config.evals.dev: the split gave no batches"):
    loss.run(_state(jnp.eye(3, dtype=jnp.float32)))
  padded = [dict(b, mask=np.zeros_like(b["mask"])) for b in _batches(n=2)]
  loss = evaluators.build_evaluators(
      {"dev": dict(type="loss", split="dev")}, predict_fns={"metrics": jax.jit(_metrics)},
      data_fn=lambda split, bs: iter(padded), mesh=mesh)[0]
  with pytest.raises(ValueError, match=r"^config.evals.dev: the split has no real rows"):
    loss.run(_state(jnp.eye(3, dtype=jnp.float32)))   # was loss 0.0: a perfect dev loss
  nll = lambda params, batch, state: ({"nll": (jnp.zeros(()), jnp.sum(batch["mask"]))}, state)
  padded = [dict(b, mask=np.zeros_like(b["mask"])) for b in _batches(n=2)]
  ppl = PerplexityEvaluator(jax.jit(nll), data=lambda: iter(padded), mesh=mesh, prefix="test")
  with pytest.raises(ValueError, match=r"^config.evals.test: the split has no target tokens"):
    ppl.run(_state(jnp.eye(3, dtype=jnp.float32)))


def sharded_metrics() -> dict:
  """The loss and grouped evaluators' metrics on this process's mesh (all its devices)."""
  params = jnp.asarray(np.random.default_rng(3).normal(size=(3, 3)), jnp.float32)
  batches = _batches(n=4, rows=8, padded_rows=3)
  evals = evaluators.build_evaluators(
      {"e": dict(type="loss", split="dev"),
       "g": dict(type="grouped_accuracy", split="dev", group_key="group", num_groups=4)},
      predict_fns={"metrics": jax.jit(_metrics), "predict": jax.jit(_logits)},
      data_fn=lambda s, b: iter(batches), mesh=sharding_lib.make_mesh())
  out = {"devices": jax.device_count()}
  for ev in evals:
    out.update(ev.run(_state(params)))
  return out


def test_sharded_evaluation_equals_one_device():
  """The batch split over 4 CPU devices gives the metrics of one device."""
  code = "import json; from tests import test_evaluators as t; print(json.dumps(t.sharded_metrics()))"
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
             JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, text=True,
                        capture_output=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  four = json.loads(proc.stdout.strip().splitlines()[-1])
  one = sharded_metrics()
  assert (four.pop("devices"), one.pop("devices")) == (4, 1)
  assert four == pytest.approx(one, rel=1e-6)


def test_grouped_accuracy_ignores_a_correct_padded_row():
  x = np.eye(3, dtype=np.float32)[[0, 1, 2, 0]]        # logits = x: argmax 0, 1, 2, 0
  batch = {"x": x, "targets": np.asarray([1, 1, 2, 0], np.int32),
           "group": np.asarray([0, 0, 1, 0], np.int32),
           "mask": np.asarray([1, 1, 1, 0], np.float32)}  # the last row: right, padding
  ev = evaluators.build_evaluators(
      {"t": dict(type="grouped_accuracy", split="test", group_key="group", num_groups=2)},
      predict_fns={"predict": jax.jit(lambda p, b, s: (b["x"] @ p, s))},
      data_fn=lambda split, bs: iter([batch]), mesh=sharding_lib.make_mesh())[0]
  state = TrainState(step=jnp.zeros((), jnp.int32), params=jnp.eye(3), opt_state=(),
                     rng=jnp.zeros((2,), jnp.uint32))
  out = ev.run(state)
  assert out["t_accuracy"] == pytest.approx(2 / 3)
  assert out["t_accuracy_0"] == pytest.approx(1 / 2)

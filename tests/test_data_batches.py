"""tasks.data.batches: shuffled training batches, eval batches, padding and buckets."""

import json

import numpy as np
import pytest

from tasks import data


def _identity(idx):
  return {"idx": np.asarray(idx)}


def test_process_rows():
  assert data.process_rows(8, 0, 1) == slice(0, 8)
  assert data.process_rows(8, 3, 4) == slice(6, 8)
  with pytest.raises(ValueError, match="batch_size=6 is not divisible by process_count=4"):
    data.process_rows(6, 0, 4)
  with pytest.raises(ValueError, match="process_index=2 must be in"):
    data.process_rows(8, 2, 2)


def test_shuffled_batches_follow_the_documented_order():
  it = data.ShuffledBatches(10, _identity, seed=3, batch_size=4)
  got = np.concatenate([next(it)["idx"] for _ in range(5)])  # 20 = two epochs
  perm0 = np.random.default_rng([3, 0]).permutation(10)
  perm1 = np.random.default_rng([3, 1]).permutation(10)
  np.testing.assert_array_equal(got, np.concatenate([perm0, perm1]))
  assert next(it)["mask"].tolist() == [1.0] * 4


def test_shuffled_batches_sharding_resume_and_epochs():
  full = data.ShuffledBatches(10, _identity, seed=0, batch_size=4)
  shards = [data.ShuffledBatches(10, _identity, seed=0, batch_size=4, process_index=p,
                                 process_count=2) for p in (0, 1)]
  for _ in range(6):
    np.testing.assert_array_equal(next(full)["idx"],
                                  np.concatenate([next(s)["idx"] for s in shards]))
  state = json.loads(json.dumps(full.get_state()))
  resumed = data.ShuffledBatches(10, _identity, seed=0, batch_size=4)
  resumed.set_state(state)
  np.testing.assert_array_equal(next(resumed)["idx"], next(full)["idx"])
  with pytest.raises(ValueError, match="seed=0 but this iterator has seed=1"):
    data.ShuffledBatches(10, _identity, seed=1, batch_size=4).set_state(state)
  # pass_epochs: step 2 covers examples k = 8..11, epochs 0, 0, 1, 1.
  seen = []
  it = data.ShuffledBatches(10, lambda idx, ep: seen.append(ep.tolist()) or {}, seed=0,
                            batch_size=4, pass_epochs=True)
  it.set_state({"step": 2})
  assert "mask" in next(it) and seen == [[0, 0, 1, 1]]


def test_eval_batches_pad_the_last_batch():
  batches = list(data.eval_batches(10, _identity, batch_size=4))
  assert len(batches) == 3
  assert batches[2]["idx"].tolist() == [8, 9, 0, 0]
  assert batches[2]["mask"].tolist() == [1, 1, 0, 0]
  assert len(list(data.eval_batches(10, _identity, batch_size=4, max_batches=2))) == 2
  halves = [list(data.eval_batches(10, _identity, batch_size=4, process_index=p,
                                   process_count=2)) for p in (0, 1)]
  assert halves[1][2]["mask"].tolist() == [0, 0]


def test_pad_to_length():
  ids, lengths = data.pad_to_length([[5, 6], [7], []], 3)
  assert ids.dtype == lengths.dtype == np.int32
  assert ids.tolist() == [[5, 6, 0], [7, 0, 0], [0, 0, 0]] and lengths.tolist() == [2, 1, 0]
  ids, lengths = data.pad_to_length([np.array([1, 2, 3]), [4]], pad_id=9)
  assert ids.tolist() == [[1, 2, 3], [4, 9, 9]] and lengths.tolist() == [3, 1]
  with pytest.raises(ValueError, match="a sequence has 3 ids but length=2"):
    data.pad_to_length([[1, 2, 3]], 2)
  ids, lengths = data.pad_to_length([[1, 2, 3]], 2, truncate=True)
  assert ids.tolist() == [[1, 2]] and lengths.tolist() == [2]


def test_bucket_length():
  assert data.bucket_length(17, 16, 100) == 32
  assert data.bucket_length(3, 16, 100) == 16
  assert data.bucket_length(16, 16, 100) == 16
  assert data.bucket_length(90, 16, 100) == 100
  assert data.bucket_length(0, 1, 8) == 1


def test_a_bucketed_batch_has_one_width_on_every_process():
  """A batch maker that pads to the bucket of its rows' longest sequence (sst, snli, babi,
  clue, summarization): each process's part of a global batch has the global batch's
  width, and the parts together are the one-process batch. (Each process padded its own
  rows before: widths 8 and 12 in one step, which jax.make_array_from_process_local_data
  cannot join.)"""
  lengths = np.array([2, 2, 2, 2, 2, 12, 3, 2])

  def make(idx):
    width = data.bucket_length(int(lengths[idx].max()), 8, 16)
    return {"inputs": np.stack([np.arange(width) < lengths[i] for i in idx]).astype(np.int32),
            "idx": np.asarray(idx)}

  def check(parts, whole):
    assert len({p["inputs"].shape for p in parts}) == 1
    for key in whole:
      np.testing.assert_array_equal(np.concatenate([p[key] for p in parts]), whole[key])

  single = data.ShuffledBatches(len(lengths), make, seed=0, batch_size=4)
  shards = [data.ShuffledBatches(len(lengths), make, seed=0, batch_size=4, process_index=p,
                                 process_count=2) for p in range(2)]
  widths = set()
  for _ in range(6):   # three epochs
    whole = next(single)
    widths.add(whole["inputs"].shape[1])
    check([next(s) for s in shards], whole)
  assert widths == {8, 16}
  evals = [list(data.eval_batches(len(lengths) - 1, make, batch_size=4, process_index=p,
                                  process_count=2)) for p in range(2)]
  for b, whole in enumerate(data.eval_batches(len(lengths) - 1, make, batch_size=4)):
    check([evals[0][b], evals[1][b]], whole)
  with pytest.raises(ValueError, match=r"entries \{'n': \(\)\} do not have the batch's 4 "
                     "rows first"):
    next(data.ShuffledBatches(8, lambda idx: {"n": np.int32(1)}, seed=0, batch_size=4))


def test_eval_batches_never_read_past_the_split():
  made = list(data.eval_batches(5, lambda idx: {"x": idx}, batch_size=2, max_batches=10))
  assert len(made) == 3

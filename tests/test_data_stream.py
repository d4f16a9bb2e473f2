"""tasks.data.stream: the truncated-BPTT layout, resume, sharding, and exact eval coverage."""

import collections
import json

import numpy as np
import pytest

from tasks import data


def _rows(batches, key="inputs"):
  """Each row's concatenation over consecutive batches, <int>[rows, windows * T]."""
  return np.concatenate([b[key] for b in batches], axis=1)


def test_train_layout_is_contiguous_rows_with_next_token_targets():
  n, b, t = 103, 4, 5  # L = 102 // 4 = 25 steps per row, 5 windows per epoch
  tokens = np.arange(n) * 7 % 101  # distinct values, not sorted
  it = data.StreamBatches(tokens, batch_size=b, seq_len=t)
  assert (it.steps_per_row, it.windows_per_epoch) == (25, 5)
  epoch = [next(it) for _ in range(5)]
  for batch in epoch:
    assert batch["inputs"].shape == batch["targets"].shape == batch["weights"].shape == (b, t)
    assert batch["inputs"].dtype == batch["targets"].dtype == np.int32
    assert batch["weights"].dtype == batch["mask"].dtype == np.float32
    assert np.all(batch["weights"] == 1) and np.all(batch["mask"] == 1)
  inputs, targets = _rows(epoch), _rows(epoch, "targets")
  for row in range(b):
    np.testing.assert_array_equal(inputs[row], tokens[row * 25:row * 25 + 25])
    np.testing.assert_array_equal(targets[row], tokens[row * 25 + 1:row * 25 + 26])
  # Window w + 1 continues window w in every row; the target of a token is the next one.
  for prev, nxt in zip(epoch, epoch[1:]):
    np.testing.assert_array_equal(prev["targets"][:, -1], nxt["inputs"][:, 0])
  np.testing.assert_array_equal(targets[:, :-1], inputs[:, 1:])
  # Reset on the first window of each epoch; the next epoch repeats the first one.
  assert [bool(x["reset"].all()) for x in epoch] == [True, False, False, False, False]
  assert not any(x["reset"].any() for x in epoch[1:])
  again = next(it)
  assert again["reset"].dtype == bool and again["reset"].all() and it.epoch == 1
  np.testing.assert_array_equal(again["inputs"], epoch[0]["inputs"])


def test_train_drops_a_partial_window_and_the_stream_tail():
  it = data.StreamBatches(np.arange(30), batch_size=2, seq_len=4)  # L = 14: 3 windows
  rows = _rows([next(it) for _ in range(it.windows_per_epoch)])
  assert it.windows_per_epoch == 3
  np.testing.assert_array_equal(rows, [np.arange(12), 14 + np.arange(12)])


def test_resume_mid_epoch_gives_the_same_batches():
  tokens = np.random.default_rng(0).integers(0, 50, size=400)
  it = data.StreamBatches(tokens, batch_size=4, seq_len=7)  # 14 windows per epoch
  for _ in range(17):
    next(it)
  state = json.loads(json.dumps(it.get_state()))
  assert (state["step"], state["epoch"], state["window"]) == (17, 1, 3)
  resumed = data.StreamBatches(tokens, batch_size=4, seq_len=7)
  resumed.set_state(state)
  for _ in range(15):  # across the next epoch boundary
    a, b = next(it), next(resumed)
    for key in a:
      np.testing.assert_array_equal(a[key], b[key])


def test_state_of_another_stream_is_refused():
  tokens = np.arange(100)
  state = data.StreamBatches(tokens, batch_size=2, seq_len=5).get_state()
  with pytest.raises(ValueError, match="seq_len=5 but this stream has seq_len=6"):
    data.StreamBatches(tokens, batch_size=2, seq_len=6).set_state(state)
  other = tokens.copy()
  other[50] = 0
  with pytest.raises(ValueError, match="checksum=.*another data set"):
    data.StreamBatches(other, batch_size=2, seq_len=5).set_state(state)
  with pytest.raises(ValueError, match="step=-1"):
    data.StreamBatches(tokens, batch_size=2, seq_len=5).set_state({"step": -1})


def test_process_sharding_gives_the_global_rows():
  tokens = np.arange(500)
  full = data.StreamBatches(tokens, batch_size=4, seq_len=6)
  shards = [data.StreamBatches(tokens, batch_size=4, seq_len=6, process_index=p,
                               process_count=2) for p in (0, 1)]
  for _ in range(25):
    whole, parts = next(full), [next(s) for s in shards]
    for key in whole:
      np.testing.assert_array_equal(whole[key],
                                    np.concatenate([p[key] for p in parts]))
  with pytest.raises(ValueError, match="batch_size=4 is not divisible by process_count=3"):
    data.StreamBatches(tokens, batch_size=4, seq_len=6, process_index=0, process_count=3)


def test_errors_name_the_problem():
  with pytest.raises(ValueError, match="has 20 tokens, too few .* needs batch_size \\* "
                     "seq_len \\+ 1 = 21"):
    data.StreamBatches(np.arange(20), batch_size=4, seq_len=5)
  with pytest.raises(ValueError, match="^the stream of /d/ptb.train.txt has 20 tokens"):
    data.StreamBatches(np.arange(20), batch_size=4, seq_len=5, source="/d/ptb.train.txt")
  with pytest.raises(ValueError, match="1-D integer array"):
    data.StreamBatches(np.zeros((2, 10), np.int32), batch_size=1, seq_len=2)
  with pytest.raises(ValueError, match="seq_len=0"):
    data.StreamBatches(np.arange(20), batch_size=1, seq_len=0)
  with pytest.raises(ValueError, match="at least 2"):
    list(data.eval_stream([1], batch_size=1, seq_len=2))


@pytest.mark.parametrize("n, b, t", [(101, 1, 7), (101, 4, 5), (23, 3, 4), (6, 8, 3),
                                     (50, 5, 100), (2, 1, 1)])
def test_eval_covers_every_target_exactly_once(n, b, t):
  tokens = np.random.default_rng(n).integers(0, 5, size=n)  # repeats: a real multiset
  batches = list(data.eval_stream(tokens, batch_size=b, seq_len=t, pad_id=0))
  per_row = -(-(n - 1) // b)
  assert len(batches) == -(-per_row // t)
  assert sum(float(x["weights"].sum()) for x in batches) == n - 1
  pairs = collections.Counter()
  for x in batches:
    assert x["inputs"].shape == (b, t) and x["weights"].dtype == np.float32
    real = x["weights"] > 0
    pairs.update(zip(x["inputs"][real].tolist(), x["targets"][real].tolist()))
    np.testing.assert_array_equal(x["mask"], real.any(axis=1))
  assert pairs == collections.Counter(zip(tokens[:-1].tolist(), tokens[1:].tolist()))
  assert [bool(x["reset"].all()) for x in batches] == [True] + [False] * (len(batches) - 1)


def test_eval_rows_are_contiguous_and_shard_by_process():
  n, b, t = 40, 4, 3  # 39 targets, 10 per row (the last row 9), 4 windows
  positions = np.arange(n)
  batches = list(data.eval_stream(positions, batch_size=b, seq_len=t))
  inputs, weights = _rows(batches), _rows(batches, "weights")
  for row in range(b):
    real = inputs[row][weights[row] > 0]
    np.testing.assert_array_equal(real, np.arange(row * 10, min(row * 10 + 10, n - 1)))
  np.testing.assert_array_equal(_rows(batches, "targets")[weights > 0],
                                inputs[weights > 0] + 1)
  shards = [list(data.eval_stream(positions, batch_size=b, seq_len=t, process_index=p,
                                  process_count=2)) for p in (0, 1)]
  for whole, p0, p1 in zip(batches, *shards):
    for key in whole:
      np.testing.assert_array_equal(whole[key], np.concatenate([p0[key], p1[key]]))

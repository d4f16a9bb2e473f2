"""tasks.data.mlm: dynamic masking (determinism, rate, pads, uniform replacements)."""

import numpy as np
import pytest

from tasks import data

VOCAB = 50


def _examples(n=64, t=40, seed=0):
  """Random examples of ids in [4, VOCAB) right-padded with 0 to random lengths."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(4, VOCAB, size=(n, t))
  lengths = rng.integers(1, t + 1, size=n)
  tokens[np.arange(t)[None, :] >= lengths[:, None]] = 0
  return tokens.astype(np.int32), lengths


def _mask(tokens, epoch=0, seed=1, **kw):
  return data.mask_tokens(tokens, indices=np.arange(len(tokens)), epochs=epoch, seed=seed,
                          vocab_size=VOCAB, **kw)


def test_shapes_targets_and_weights():
  tokens, _ = _examples()
  out = _mask(tokens)
  assert set(out) == {"inputs", "targets", "weights"}
  assert out["inputs"].dtype == out["targets"].dtype == np.int32
  assert out["weights"].dtype == np.float32 and out["weights"].shape == tokens.shape
  np.testing.assert_array_equal(out["targets"], tokens)  # the original tokens
  changed = out["inputs"] != tokens
  assert np.all(out["weights"][changed] == 1)  # every change is a weighted position
  assert np.all(out["inputs"][out["weights"] == 0] == tokens[out["weights"] == 0])


def test_deterministic_per_seed_epoch_and_index_and_new_each_epoch():
  tokens, _ = _examples()
  a, b = _mask(tokens, epoch=3), _mask(tokens, epoch=3)
  for key in a:
    np.testing.assert_array_equal(a[key], b[key])
  assert not np.array_equal(_mask(tokens, epoch=4)["weights"], a["weights"])
  assert not np.array_equal(_mask(tokens, epoch=3, seed=2)["weights"], a["weights"])
  # A row's mask depends on its index only: not on the batch, its order or padding width.
  order = np.array([5, 2, 9])
  sub = data.mask_tokens(tokens[order], indices=order, epochs=3, seed=1, vocab_size=VOCAB)
  np.testing.assert_array_equal(sub["inputs"], a["inputs"][order])
  wider = np.pad(tokens[order], ((0, 0), (0, 7)))
  sub = data.mask_tokens(wider, indices=order, epochs=[3, 3, 3], seed=1, vocab_size=VOCAB)
  np.testing.assert_array_equal(sub["weights"][:, :40], a["weights"][order])
  assert not sub["weights"][:, 40:].any()


def test_rate_close_to_p_and_pads_never_masked():
  tokens, lengths = _examples(n=2000, t=50)
  for p in (0.3, 0.15):
    out = _mask(tokens, p=p)
    real = tokens != 0
    rate = out["weights"][real].mean()
    assert abs(rate - p) < 0.01, rate  # ~75k real positions: std ~0.002
    assert not out["weights"][~real].any()
    np.testing.assert_array_equal(out["inputs"][~real], 0)
  assert not _mask(tokens, p=0.0)["weights"].any()
  assert _mask(tokens, p=1.0)["weights"].sum() == lengths.sum()


def test_replacements_are_uniform_over_the_allowed_ids():
  tokens, _ = _examples(n=2000, t=50)
  out = _mask(tokens, p=0.5, exclude_ids=(1, 2, 3))
  picks = out["inputs"][out["weights"] == 1]
  assert picks.min() >= 4  # pad (0) and the excluded ids are never drawn
  counts = np.bincount(picks, minlength=VOCAB)[4:]
  expected = len(picks) / len(counts)
  chi2 = ((counts - expected) ** 2 / expected).sum()
  assert chi2 < 100, chi2  # 45 degrees of freedom: mean 45, P(chi2 > 100) ~ 1e-6
  # Without exclusions the special ids (except pad) are drawn too.
  full = _mask(tokens, p=0.5)
  assert set(np.unique(full["inputs"][full["weights"] == 1])) == set(range(1, VOCAB))


def test_protected_ids_and_examples_without_a_mask():
  tokens = np.array([[2, 7, 8, 9, 0, 0], [2, 0, 0, 0, 0, 0]], np.int32)
  out = _mask(tokens, p=1.0, protected_ids=(2,))
  assert out["weights"].tolist() == [[0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]]
  np.testing.assert_array_equal(out["inputs"][1], tokens[1])  # left as is, weight 0
  out = _mask(tokens, p=1.0, pad_id=None)
  assert out["weights"].all()


def test_errors():
  with pytest.raises(ValueError, match="p=1.5"):
    _mask(np.ones((1, 3), np.int32), p=1.5)
  with pytest.raises(ValueError, match="indices has 1 entries for 2 rows"):
    data.mask_tokens(np.ones((2, 3)), indices=[0], epochs=0, seed=0, vocab_size=5)
  with pytest.raises(ValueError, match="leaves no id"):
    data.mask_tokens(np.ones((1, 3)), indices=[0], epochs=0, seed=0, vocab_size=2,
                     exclude_ids=[1])
  with pytest.raises(ValueError, match="<int>\\[n, T\\]"):
    _mask(np.ones(3, np.int32))

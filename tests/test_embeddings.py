"""tasks.text.embeddings: the GloVe/word2vec loader (found rows, N(0, 1) OOV rows, header,
gzip, errors) and the first-epoch row scaling of the LSTMN paper under jit."""

import gzip
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tasks.text import embeddings

VECTORS = {"the": [0.5, -1.0, 2.0], "cat": [1.5, 0.25, -3.0], ",": [0.0, 1e-3, -2e2],
           "sat": [4.0, 5.0, 6.0]}


def _write(path, lines, gz=False):
  data = "".join(line + "\n" for line in lines).encode("utf-8")
  with (gzip.open if gz else open)(path, "wb") as f:
    f.write(data)
  return str(path)


def _glove_lines(vectors=VECTORS):
  return [" ".join([w] + [repr(float(v)) for v in vec]) for w, vec in vectors.items()]


# ----------------------------------------------------------------------------- loading


@pytest.mark.parametrize("header, gz", [(False, False), (True, False), (True, True)])
def test_found_rows_equal_the_file(tmp_path, header, gz):
  lines = (["4 3"] if header else []) + _glove_lines()
  path = _write(tmp_path / ("v.txt.gz" if gz else "v.txt"), lines, gz=gz)
  vocab = ["<pad>", "<unk>", "the", "dog", "cat", ",", "Cat"]
  matrix, pretrained = embeddings.load_word_vectors(path, vocab)
  assert matrix.shape == (7, 3) and matrix.dtype == np.float32
  assert pretrained.tolist() == [False, False, True, False, True, True, False]
  for i, word in enumerate(vocab):
    if pretrained[i]:
      np.testing.assert_array_equal(matrix[i], np.float32(VECTORS[word]))
  # The same with dim given, and in float64.
  again, _ = embeddings.load_word_vectors(path, vocab, 3, dtype=np.float64)
  assert again.dtype == np.float64
  np.testing.assert_array_equal(again.astype(np.float32), matrix)


def test_oov_rows_are_seeded_normal_and_independent_of_the_file(tmp_path):
  vocab = ["the"] + [f"w{i}" for i in range(3999)]
  full = _write(tmp_path / "full.txt", _glove_lines())
  only_cat = _write(tmp_path / "cat.txt", _glove_lines({"cat": VECTORS["cat"]}))
  a, found_a = embeddings.load_word_vectors(full, vocab, seed=3)
  b, found_b = embeddings.load_word_vectors(only_cat, vocab, seed=3)
  c, _ = embeddings.load_word_vectors(full, vocab, seed=4)
  assert found_a.sum() == 1 and found_b.sum() == 0
  # Deterministic: a row of an OOV word depends on (seed, V, D, row) only.
  np.testing.assert_array_equal(a[1:], b[1:])
  np.testing.assert_array_equal(
      a[1:], np.random.default_rng(3).standard_normal((4000, 3))[1:].astype(np.float32))
  assert not np.allclose(a[1:], c[1:])
  # ~N(0, 1): 12k samples, mean within 4 sigma of 0, std within 3%.
  oov = a[1:].ravel()
  assert abs(oov.mean()) < 4 / np.sqrt(oov.size) and abs(oov.std() - 1) < 0.03


def test_words_with_spaces_trailing_spaces_and_duplicates(tmp_path):
  path = _write(tmp_path / "v.txt", ["the 1 2", ". . . 3 4", "cat 5 6 ", "the 7 8", "", ""])
  matrix, pretrained = embeddings.load_word_vectors(path, ["the", ". . .", "cat"])
  assert pretrained.all()
  np.testing.assert_array_equal(matrix, [[1, 2], [3, 4], [5, 6]])   # the first "the"


@pytest.mark.parametrize("lines, dim, message", [
    (["the 1 2 3", "cat 1 2"], None, "line 2: 2 values after the word, expected 3"),
    (["the 1 2", "cat 1 2 3"], None, "line 2: 3 numbers after the word, expected 2"),
    (["the 1 2 3"], 2, "line 1: 3 numbers after the word, expected 2"),
    (["2 3", "the 1 2 3", "cat 1 x 3"], None, "line 3: value 'x' is not a number"),
    (["2 3", "the 1 2 3"], 4, "line 1: the header says dimension 3 but dim=4"),
    (["the 1 nan"], None, "line 1: the vector of 'the' is not finite"),
    (["the"], None, "line 1: a word without a vector"),
])
def test_malformed_lines_name_the_line(tmp_path, lines, dim, message):
  path = _write(tmp_path / "v.txt", lines)
  with pytest.raises(embeddings.WordVectorsFormatError, match=message) as err:
    embeddings.load_word_vectors(path, ["the", "cat"], dim)
  assert str(err.value).startswith(f"{path}, line ") and "\n" not in str(err.value)


def test_missing_empty_and_undecodable_files(tmp_path):
  missing = str(tmp_path / "glove.txt")
  with pytest.raises(FileNotFoundError, match=f"word-vector file {missing} does not exist"):
    embeddings.load_word_vectors(missing, ["the"])
  empty = _write(tmp_path / "empty.txt", [""])
  with pytest.raises(embeddings.WordVectorsFormatError, match="holds no vectors"):
    embeddings.load_word_vectors(empty, ["the"])
  bad = tmp_path / "bad.txt"
  bad.write_bytes(b"the 1 2\n\xff\xfe 1 2\n")
  with pytest.raises(embeddings.WordVectorsFormatError, match="line 2: not UTF-8"):
    embeddings.load_word_vectors(str(bad), ["the"])
  with pytest.raises(ValueError, match="dim=0"):
    embeddings.load_word_vectors(empty, ["the"], 0)


# ----------------------------------------------------------------------------- row scaling


def test_row_scales_and_epoch_steps():
  pretrained = np.array([True, False, True])
  np.testing.assert_array_equal(embeddings.sst_row_scale(pretrained), np.float32([0.35, 1, 0.35]))
  np.testing.assert_array_equal(embeddings.snli_row_scale(pretrained), [0.0, 1.0, 0.0])
  assert embeddings.sst_row_scale(pretrained).dtype == np.float32
  assert embeddings.steps_per_epoch(8544, 5) == 1709
  assert embeddings.steps_per_epoch(10, 5) == 2


def _params(v=4, d=3):
  return {"encoder": {"embed": {"embedding": jnp.ones((v, d))},
                      "dense": {"kernel": jnp.ones((d, 2)), "bias": jnp.ones((2,))}},
          "head": {"kernel": jnp.ones((2, 5))}}


def test_scaling_before_until_step_and_identity_after_under_jit():
  params = _params()
  row_scale = np.array([0.0, 0.35, 1.0, 2.0], np.float32)
  tx = embeddings.scale_embedding_rows("embed/embedding", row_scale, until_step=2)
  state = tx.init(params)
  update = jax.jit(tx.update)
  grads = jax.tree.map(lambda p: jnp.full_like(p, 3.0), params)
  for step in range(4):
    out, state = update(grads, state)
    emb = np.asarray(out["encoder"]["embed"]["embedding"])
    want = row_scale[:, None] * 3.0 if step < 2 else np.full((4, 3), 3.0)
    np.testing.assert_allclose(emb, np.broadcast_to(want, (4, 3)), rtol=1e-6)
    # Every other parameter untouched.
    for path in (("encoder", "dense", "kernel"), ("encoder", "dense", "bias"),
                 ("head", "kernel")):
      leaf = out
      for k in path:
        leaf = leaf[k]
      np.testing.assert_array_equal(leaf, 3.0)
    assert int(state.count) == step + 1


def test_predicate_target_and_freezing_under_adam():
  """SNLI's option under Adam: the pre-trained rows do not move in the first epoch."""
  params = _params()
  pretrained = np.array([True, False, True, False])
  is_embedding = lambda path, leaf: path[-1] == "embedding"
  tx = optax.chain(
      embeddings.scale_embedding_rows(is_embedding, embeddings.snli_row_scale(pretrained),
                                      until_step=3),
      optax.adam(0.1))
  state = tx.init(params)

  @jax.jit
  def step(params, state, key):
    grads = jax.tree.map(lambda p: jax.random.normal(key, p.shape), params)
    updates, state = tx.update(grads, state, params)
    return optax.apply_updates(params, updates), state

  start = params["encoder"]["embed"]["embedding"]
  for i in range(3):
    params, state = step(params, state, jax.random.PRNGKey(i))
  emb = params["encoder"]["embed"]["embedding"]
  np.testing.assert_array_equal(emb[pretrained], start[pretrained])      # frozen
  assert np.all(np.abs(emb[~pretrained] - start[~pretrained]) > 1e-3)    # OOV rows learn
  assert np.all(np.abs(params["head"]["kernel"] - 1.0) > 1e-3)
  params, state = step(params, state, jax.random.PRNGKey(9))             # epoch 2
  assert np.all(np.abs(params["encoder"]["embed"]["embedding"][pretrained] - 1.0) > 1e-3)


def test_target_errors():
  params = _params()
  with pytest.raises(ValueError, match="target 'embedding/table' picks no parameter.*"
                     "encoder/embed/embedding"):
    embeddings.scale_embedding_rows("embedding/table", np.ones(4), 1).init(params)
  with pytest.raises(ValueError, match="has shape \\(4, 3\\) but row_scale has 5 rows"):
    embeddings.scale_embedding_rows("embedding", np.ones(5), 1).init(params)
  with pytest.raises(ValueError, match="<float>\\[V\\]"):
    embeddings.scale_embedding_rows("embedding", np.ones((4, 1)), 1)
  with pytest.raises(ValueError, match="until_step=-1"):
    embeddings.scale_embedding_rows("embedding", np.ones(4), -1)
  with pytest.raises(ValueError, match="key path"):
    embeddings.scale_embedding_rows("", np.ones(4), 1)
  # A tuple of keys works like the string.
  tx = embeddings.scale_embedding_rows(("embed", "embedding"), np.zeros(4), 1)
  out, _ = tx.update(params, tx.init(params))
  assert float(jnp.abs(out["encoder"]["embed"]["embedding"]).sum()) == 0.0


# ----------------------------------------------------------------- config.word_vectors


def test_the_tasks_word_vector_plumbing(tmp_path):
  """check_word_vectors, config_word_vectors (loaded once), embedding_init and
  wrap_first_epoch: what sst, snli and the CLUE tasks share."""
  import ml_collections
  from tasks.text.vocabulary import Vocabulary
  path = _write(tmp_path / "v.txt", _glove_lines())
  vocab = Vocabulary.build([["the", "dog", "cat"]], bos=None, eos=None)
  config = ml_collections.ConfigDict(dict(word_vectors=path, seed=3, batch_size=2,
                                          model=dict(embed_dim=3)))
  embeddings.check_word_vectors(config)
  matrix, pretrained = embeddings.config_word_vectors(config, vocab)
  assert pretrained.tolist() == [t in VECTORS for t in vocab.tokens]
  np.testing.assert_array_equal(matrix, embeddings.load_word_vectors(path, vocab.tokens, 3,
                                                                     seed=3)[0])
  assert embeddings.config_word_vectors(config, vocab)[0] is matrix   # read once
  init = embeddings.embedding_init(config, vocab)
  np.testing.assert_array_equal(init(jax.random.key(0), matrix.shape), matrix)
  # The first epoch (2 steps of 2 out of 4 examples): only OOV rows move (snli's scale).
  data = lambda c: types.SimpleNamespace(vocab=vocab, size={"train": 4}.get)
  tx = embeddings.wrap_first_epoch(config, optax.sgd(1.0), data, embeddings.snli_row_scale)
  params = {"embed": {"embedding": jnp.zeros(matrix.shape)}}
  grads = {"embed": {"embedding": jnp.ones(matrix.shape)}}
  state = tx.init(params)
  moved = []
  for _ in range(3):
    updates, state = tx.update(grads, state, params)
    moved.append(np.asarray(updates["embed"]["embedding"][:, 0] != 0).tolist())
  assert moved == [(~pretrained).tolist()] * 2 + [[True] * len(vocab)]
  config.word_vectors = ""
  assert embeddings.embedding_init(config, vocab) is None
  plain = optax.sgd(1.0)
  assert embeddings.wrap_first_epoch(config, plain, data, embeddings.snli_row_scale) is plain
  embeddings.check_word_vectors(config)
  for bad, match in [(3, "config.word_vectors=3 must be a path or ''"),
                     (str(tmp_path / "no.txt"), "is not a file; give a GloVe/word2vec text")]:
    with pytest.raises(ValueError, match=match) as err:
      embeddings.check_word_vectors({"word_vectors": bad})
    assert "\n" not in str(err.value)


def test_target_matches_the_whole_key_path():
  params = {"embed": {"embedding": np.ones((3, 2), np.float32)},
            "decoder": {"embedding": np.ones((3, 2), np.float32)}}
  tx = embeddings.scale_embedding_rows("embed/embedding", np.array([0.0, 1.0, 1.0]), 5)
  out, _ = tx.update(params, tx.init(params))
  np.testing.assert_array_equal(out["embed"]["embedding"][0], [0, 0])
  np.testing.assert_array_equal(out["decoder"]["embedding"], params["decoder"]["embedding"])

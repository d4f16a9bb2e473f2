r"""Pre-trained word vectors and the LSTMN paper's first-epoch embedding-gradient options.

Loading (GloVe / word2vec text format)::

    >>> matrix, pretrained = load_word_vectors("glove.840B.300d.txt", vocab.tokens, 300)
    >>> matrix.shape, pretrained.mean()        # <float32>[V, 300], fraction found
    # params["embed"]["embedding"] = matrix    (e.g. through nn.Embed's embedding_init)

The first-epoch options of Cheng, Dong and Lapata (2016), "Long Short-Term Memory-Networks
for Machine Reading" (../shared/papers/003_f1725593a1f1f189.txt):

* §5.2 (SST): "We used pre-trained 300-D Glove 840B vectors ... to initialize the word
  embeddings. The gradient for words with Glove embeddings, was scaled by 0.35 in the
  first epoch after which all word embeddings were updated normally." ->
  :func:`sst_row_scale`.
* §5.3 (SNLI): "Out-of-vocabulary (OOV) words were initialized randomly with Gaussian
  samples (µ=0, s=1). We only updated OOV vectors in the first epoch, after which all word
  embeddings were updated normally." -> :func:`snli_row_scale` (and the N(0, 1) rows of
  :func:`load_word_vectors`).

:func:`scale_embedding_rows` is the ``optax`` transformation that applies such a row scale
while ``step < until_step`` (the first epoch: :func:`steps_per_epoch`)::

    tx = optax.chain(
        optimizer,                               # after the optimizer: scales the steps
        scale_embedding_rows("embed/embedding", sst_row_scale(pretrained),
                             until_step=steps_per_epoch(num_train, batch_size)))

(the ``sst`` and ``snli`` tasks do this in their ``wrap_optimizer`` through
:func:`wrap_first_epoch`; :func:`config_word_vectors`, :func:`embedding_init` and
:func:`check_word_vectors` are the ``config.word_vectors`` plumbing the text tasks share).

Placement: before the optimizer it scales the *gradients* (the paper's wording); after
it, the *updates* (the step of those rows). Under Adam these differ: Adam divides by the
running RMS of the gradients it sees, so a constant factor on a row's gradients leaves its
steps unchanged in epoch 1 (x0.35 before Adam: step ratio 1.00 measured) and makes them
larger for a while after ``until_step`` (1.4-1.5x over the next ~100 steps with steady
gradients in our check: the second moment still holds the scaled gradients); x0.35 after
Adam gives steps x0.35 in epoch 1 and x1.00 right after. A factor 0 freezes the rows
either way (before Adam their moments stay 0, so their first steps after ``until_step``
are larger than usual).
"""

import functools
import gzip
import math
import os
import re
from typing import Any, Callable, NamedTuple, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rumjax.models.text_classifier import pretrained_init

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


# --------------------------------------------------------------------------- loading


class WordVectorsFormatError(ValueError):
  """A malformed line of a word-vector file; the message names the file and line."""


def _open_lines(path: str):
  """The file's lines as ``bytes`` (``.gz`` decompressed)."""
  if path.endswith(".gz"):
    return gzip.open(path, "rb")
  return open(path, "rb")


def _is_header(fields: Sequence[str]) -> bool:
  """word2vec's first line ``"<count> <dim>"``: two non-negative integers."""
  return len(fields) == 2 and all(f.isdigit() for f in fields)


def load_word_vectors(path: Union[str, os.PathLike], vocab_tokens: Sequence[str], dim: Optional[int] = None, *,
                      seed: int = 0, dtype: Any = np.float32
                      ) -> tuple[np.ndarray, np.ndarray]:
  """The embedding matrix of a vocabulary from a GloVe / word2vec text file.

  The file holds one ``word v1 ... vD`` per line (fields separated by single spaces),
  optionally after word2vec's header line ``"<count> <dim>"`` (skipped), plain or gzipped
  (``.gz``). Rows of ``vocab_tokens`` found in the file are its vector (the first line of a
  word that occurs twice); the other rows are drawn N(0, 1) (the LSTMN paper's OOV
  initialisation, §5.3). A word may hold spaces (GloVe 840B has a few, e.g. ``". . ."``):
  the last ``D`` fields of a line are the vector. Words are matched exactly (lower-case
  the vocabulary or pick a cased file to match the task's tokens). Only the lines of
  vocabulary words are converted to numbers; every line's field count is checked.

  Args:
    path: the text file (``.gz`` allowed; ``~`` expanded).
    vocab_tokens: the tokens of the rows, ``V`` of them (e.g. ``Vocabulary.tokens``).
      Special tokens get random rows like any OOV word; zero the padding row if wanted.
    dim: the vector size ``D``; ``None`` takes it from the header or the first line.
    seed: the NumPy generator seed of the random rows: ``default_rng(seed)`` draws one
      standard normal <float64>[V, D] and the found rows overwrite theirs, so a row of an
      OOV word depends only on ``(seed, V, D, its row)``, not on the file's contents.
    dtype: of the returned matrix.

  Returns:
    ``(matrix <dtype>[V, D], pretrained <bool>[V])``: ``pretrained[i]`` is True where
    ``vocab_tokens[i]`` was found in the file.

  Raises:
    FileNotFoundError: naming ``path``.
    WordVectorsFormatError: naming ``path`` and the 1-based line (a vector of another
      size, values that are not numbers, an empty file, undecodable bytes).
  """
  if dim is not None and (not isinstance(dim, (int, np.integer)) or dim < 1):
    raise ValueError(f"dim={dim!r} must be a positive integer or None (from the file).")
  path = os.path.expanduser(os.fspath(path))
  if not os.path.isfile(path):
    raise FileNotFoundError(f"word-vector file {path} does not exist; give the path of a "
                            "GloVe/word2vec text file (.txt or .txt.gz).")
  rows: dict[str, list[int]] = {}
  for i, token in enumerate(vocab_tokens):
    rows.setdefault(token, []).append(i)
  found: dict[str, np.ndarray] = {}
  lineno = 0

  def fail(msg: str):
    raise WordVectorsFormatError(f"{path}, line {lineno}: {msg}; a word-vector line is "
                                 "'<word> <v1> ... <vD>' (an optional first line "
                                 "'<count> <dim>' is skipped).")

  with _open_lines(path) as f:
    for lineno, raw in enumerate(f, start=1):
      try:
        line = raw.decode("utf-8").rstrip("\r\n")
      except UnicodeDecodeError as err:
        fail(f"not UTF-8 ({err.reason} at byte {err.start})")
      if not line.strip():
        continue
      fields = line.rstrip(" ").split(" ")
      if lineno == 1 and _is_header(fields):
        if dim is not None and int(fields[1]) != dim:
          fail(f"the header says dimension {fields[1]} but dim={dim}")
        dim = int(fields[1])
        if dim < 1:
          fail("the header says dimension 0")
        continue
      if dim is None:
        dim = len(fields) - 1
        if dim < 1:
          fail("a word without a vector")
      if len(fields) < dim + 1:
        fail(f"{len(fields) - 1} values after the word, expected {dim}")
      extra = fields[1:len(fields) - dim]
      if extra and all(_NUMBER.fullmatch(x) for x in extra):
        fail(f"{len(fields) - 1} numbers after the word, expected {dim}")
      word = " ".join(fields[:len(fields) - dim])
      if word in rows and word not in found:
        try:
          found[word] = np.asarray(fields[len(fields) - dim:], np.float64)
        except ValueError:
          bad = next(x for x in fields[len(fields) - dim:] if not _is_float(x))
          fail(f"value {bad[:20]!r} is not a number")
        if not np.isfinite(found[word]).all():
          fail(f"the vector of {word!r} is not finite")
  if dim is None:
    raise WordVectorsFormatError(f"{path}: the file holds no vectors; a word-vector file "
                                 "has one '<word> <v1> ... <vD>' per line.")
  matrix = np.random.default_rng(seed).standard_normal((len(vocab_tokens), dim))
  pretrained = np.zeros(len(vocab_tokens), bool)
  for word, vector in found.items():
    matrix[rows[word]] = vector
    pretrained[rows[word]] = True
  return matrix.astype(dtype), pretrained


def _is_float(x: str) -> bool:
  try:
    float(x)
    return True
  except ValueError:
    return False


# --------------------------------------------------------------------------- row scaling


def sst_row_scale(pretrained) -> np.ndarray:
  """<float32>[V]: 0.35 for pre-trained rows, 1 for the others (SST, LSTMN paper §5.2)."""
  return np.where(np.asarray(pretrained, bool), 0.35, 1.0).astype(np.float32)


def snli_row_scale(pretrained) -> np.ndarray:
  """<float32>[V]: 0 for pre-trained rows, 1 for OOV rows (SNLI, LSTMN paper §5.3: only
  OOV vectors are updated in the first epoch)."""
  return np.where(np.asarray(pretrained, bool), 0.0, 1.0).astype(np.float32)


def steps_per_epoch(num_examples: int, batch_size: int) -> int:
  """``ceil(num_examples / batch_size)``: the steps of the first epoch, ``until_step`` of
  :func:`scale_embedding_rows` (the step that holds the epoch's last examples included)."""
  if num_examples < 1 or batch_size < 1:
    raise ValueError(f"num_examples={num_examples} and batch_size={batch_size} must be "
                     ">= 1.")
  return math.ceil(num_examples / batch_size)


class ScaleRowsState(NamedTuple):
  """The state of :func:`scale_embedding_rows`: the number of updates seen so far."""
  count: jax.Array   # <int32>[]


PathPredicate = Callable[[tuple, Any], bool]


def _key_name(key) -> str:
  for attr in ("key", "name", "idx"):
    if hasattr(key, attr):
      return str(getattr(key, attr))
  return str(key)


def _path_predicate(target: Union[str, Sequence[str], PathPredicate]) -> PathPredicate:
  """A predicate ``(path: tuple[str, ...], leaf) -> bool`` from a target description."""
  if callable(target):
    return target
  want = tuple(target.strip("/").split("/")) if isinstance(target, str) else tuple(target)
  if not want or not all(isinstance(k, str) and k for k in want):
    raise ValueError(f"target={target!r} must be a key path like 'embed/embedding', a "
                     "tuple of keys, or a predicate (path, leaf) -> bool.")
  return lambda path, leaf: path[-len(want):] == want


def _selected(tree, predicate: PathPredicate):
  """A tree of bools (same structure): which leaves ``predicate`` picks."""
  return jax.tree_util.tree_map_with_path(
      lambda path, leaf: bool(predicate(tuple(_key_name(k) for k in path), leaf)), tree)


def scale_embedding_rows(target: Union[str, Sequence[str], PathPredicate], row_scale,
                         until_step: int) -> optax.GradientTransformation:
  """Multiplies the rows of the embedding's gradient (or update) by ``row_scale`` while
  ``step < until_step``; identity afterwards and for every other parameter.

  Args:
    target: which parameter: a key path matched against the end of each leaf's path
      (``"embed/embedding"`` picks ``params["embed"]["embedding"]`` and
      ``params["encoder"]["embed"]["embedding"]``; a tuple of keys works too), or a
      predicate ``(path: tuple[str, ...], leaf) -> bool``. Every picked leaf must be
      <float>[V, D]; at least one must be picked (checked at ``init``).
    row_scale: <float>[V], the factor of each row (e.g. :func:`sst_row_scale`).
    until_step: the number of updates that are scaled (steps 0 .. until_step - 1; the first
      epoch is :func:`steps_per_epoch`); 0 scales nothing.

  Returns:
    An ``optax.GradientTransformation`` whose state (:class:`ScaleRowsState`) counts the
    updates, so a restored checkpoint resumes the schedule. Chain it before the optimizer
    to scale gradients, after it to scale updates (see the module docstring).
  """
  predicate = _path_predicate(target)
  row_scale = np.asarray(row_scale, np.float32)
  if row_scale.ndim != 1:
    raise ValueError(f"row_scale has shape {row_scale.shape}; it must be <float>[V], one "
                     "factor per embedding row.")
  if not isinstance(until_step, (int, np.integer)) or until_step < 0:
    raise ValueError(f"until_step={until_step!r} must be an integer >= 0 (the number of "
                     "scaled steps, e.g. steps_per_epoch(num_train, batch_size)).")
  until_step = int(until_step)

  def check(params):
    leaves = [("/".join(_key_name(k) for k in path), leaf)
              for path, leaf in jax.tree_util.tree_leaves_with_path(params)]
    picked = [(name, leaf) for name, leaf in leaves
              if predicate(tuple(name.split("/")), leaf)]
    if not picked:
      names = [name for name, _ in leaves]
      raise ValueError(f"scale_embedding_rows: target {target!r} picks no parameter; the "
                       f"parameters are {names[:20]}{' ...' if len(names) > 20 else ''}.")
    for name, leaf in picked:
      if np.ndim(leaf) != 2 or np.shape(leaf)[0] != row_scale.shape[0]:
        raise ValueError(f"scale_embedding_rows: parameter {name} has shape "
                         f"{tuple(np.shape(leaf))} but row_scale has {row_scale.shape[0]} "
                         "rows; it must be the <float>[V, D] embedding of that vocabulary.")

  def init_fn(params):
    check(params)
    return ScaleRowsState(count=jnp.zeros([], jnp.int32))

  def update_fn(updates, state, params=None):
    del params
    picked = _selected(updates, predicate)
    active = state.count < until_step
    scale = jnp.where(active, jnp.asarray(row_scale), 1.0)[:, None]
    new = jax.tree.map(lambda u, on: (u * scale).astype(u.dtype) if on else u, updates,
                       picked)
    return new, ScaleRowsState(count=optax.safe_int32_increment(state.count))

  return optax.GradientTransformation(init_fn, update_fn)


def scale_first_epoch(tx: optax.GradientTransformation, row_scale, num_train: int,
                      batch_size: int, target="embed/embedding") -> optax.GradientTransformation:
  """``tx`` followed by :func:`scale_embedding_rows` of ``row_scale`` for the first epoch
  (``steps_per_epoch(num_train, batch_size)`` steps): after the optimizer, so the rows'
  steps are scaled (see the module docstring); the tasks' ``wrap_optimizer``."""
  return optax.chain(tx, scale_embedding_rows(
      target, row_scale, until_step=steps_per_epoch(num_train, batch_size)))


# ------------------------------------------------------------- config.word_vectors


def check_word_vectors(config, what: str = "GloVe/word2vec text file (.txt or .txt.gz)"
                       ) -> None:
  """``ValueError`` (one line) unless ``config.word_vectors`` is ``""`` or an existing file
  (``what`` says which kind)."""
  path = config["word_vectors"]
  if not isinstance(path, str):
    raise ValueError(f"config.word_vectors={path!r} must be a path or ''.")
  if path and not os.path.isfile(os.path.expanduser(path)):
    raise ValueError(f"config.word_vectors={path!r} is not a file; give a {what} or '' "
                     "(embeddings trained from scratch).")


@functools.lru_cache(maxsize=2)
def _cached_vectors(path: str, tokens: tuple, dim: int, seed: int):
  return load_word_vectors(path, tokens, dim, seed=seed)


def config_word_vectors(config, vocab) -> tuple[np.ndarray, np.ndarray]:
  """``(matrix <float32>[V, embed_dim], pretrained <bool>[V])`` of the file
  ``config.word_vectors`` for ``vocab`` (a :class:`tasks.text.Vocabulary`), loaded once per
  process and (file, vocabulary, ``config.model.embed_dim``, ``config.seed``); OOV rows
  N(0, 1) drawn from ``config.seed`` (:func:`load_word_vectors`)."""
  return _cached_vectors(os.path.expanduser(config.word_vectors), tuple(vocab.tokens),
                         config.model.embed_dim, config.seed)


def embedding_init(config, vocab) -> Optional[Callable]:
  """The embedding's initializer: ``None`` (the model's default) without
  ``config.word_vectors``, else the file's matrix
  (:func:`rumjax.models.text_classifier.pretrained_init`, read when parameters are
  initialised)."""
  if not config.word_vectors:
    return None
  return pretrained_init(lambda: config_word_vectors(config, vocab)[0])


def wrap_first_epoch(config, tx: optax.GradientTransformation, data: Callable[[Any], Any],
                     row_scale: Callable[[np.ndarray], np.ndarray]
                     ) -> optax.GradientTransformation:
  """A text task's ``wrap_optimizer``: ``tx`` unchanged without ``config.word_vectors``;
  with them, :func:`scale_first_epoch` of ``row_scale(pretrained)`` (e.g.
  :func:`sst_row_scale`) for the first epoch of ``data(config)`` (the task's encoded data:
  ``.vocab`` and ``.size("train")``) in batches of ``config.batch_size``."""
  if not config.word_vectors:
    return tx
  d = data(config)
  _, pretrained = config_word_vectors(config, d.vocab)
  return scale_first_epoch(tx, row_scale(pretrained), d.size("train"), config.batch_size)

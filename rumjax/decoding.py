"""Greedy and beam search over any recurrent state pytree (jit-compatible, batched).

Contract (DESIGN.md section 3.5, after Flax's examples/wmt and t5x)::

    tokens_to_logits(tokens <int>[n], state) -> (logits <float>[n, vocab], new_state)

``state`` is any pytree (RUM's ``(R, h)``, a coverage vector, an LSTMN tape, ...) whose
leaves all have the leading axis ``n``. ``init_state`` has leading axis ``batch``; beam
search repeats every example over its beams (``n = batch * beam``, example-major) and
reorders the state with :func:`gather_beams` whenever beams are re-ranked. The search
applies ``jax.nn.log_softmax`` to the logits itself (a no-op on log-probabilities).

* ``sequences`` hold the generated tokens WITHOUT ``bos``, best first; every position
  after the first ``eos`` is ``eos``. A hypothesis is complete when it emits ``eos``
  (its length counts the ``eos``) or when it reaches ``max_len`` tokens without one.
* ``eos`` gets log-probability ``-inf`` (no renormalisation) at the positions
  ``0 .. min_len - 1``: a hypothesis has at least ``min_len`` tokens before its ``eos``.
* ``scores`` are the ranking scores ``log p(y) / penalty(len(y))``, with ``log p(y)``
  the summed log-probability of the returned tokens up to and including ``eos`` (all
  ``max_len`` tokens if there is none); see :func:`length_penalty`. A score of ``-inf``
  marks an empty slot (fewer than ``beam_size`` hypotheses have non-zero probability).

Differences from Flax wmt (see :func:`beam_search`): an ``eos`` candidate joins the
finished set only if it ranks among the best ``beam_size`` candidates of its step (as in
fairseq and Hugging Face; wmt takes any of the best ``2 * beam_size``), which makes beam 1
exactly greedy; and a hypothesis reaching ``max_len`` without ``eos`` is finished and
competes with the others (wmt keeps it only if no ``eos`` hypothesis exists). With
``beam_size >= vocab ** (max_len - 1)`` the search is exhaustive (tests check this).

Usage with RUM (``lam=1``: the state is the tuple ``(R, h)``)::

    def tokens_to_logits(tokens, state):               # state: (<f>[n, N, N], <f>[n, N])
      state, h = cell.apply(cell_params, state, embedding[tokens])
      return h @ w_out, state
    init = (jnp.broadcast_to(jnp.eye(N), (B, N, N)), jnp.zeros((B, N)))
    seqs, scores = beam_search(tokens_to_logits, init, batch_size=B, beam_size=4,
                               bos_id=1, eos_id=2, max_len=50, length_normalization="wmt")

References: Flax examples/wmt ``decode.py`` (alive/finished beams, brevity penalty);
t5x ``decoding.py`` (the same search over a cache pytree); See, Liu and Manning (ACL 2017),
"Get To The Point", section 3 and their released decoder: finished hypotheses ranked by
average log-probability per token, ``<s>`` counted (:func:`length_penalty`).
"""

import functools
import operator
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

Array = jax.Array
PyTree = Any
TokensToLogits = Callable[[Array, PyTree], tuple[Array, PyTree]]

LENGTH_NORMALIZATIONS = (None, "average", "wmt")
NEG_INF = -jnp.inf


# ------------------------------------------------------------------- beam axis helpers


def add_beam_dim(tree: PyTree, beam_size: int) -> PyTree:
  """Repeats every example over the beams: leaves ``[batch, ...] -> [batch, beam, ...]``."""
  def add(x):
    x = jnp.asarray(x)
    return jnp.broadcast_to(x[:, None], (x.shape[0], beam_size) + x.shape[1:])
  return jax.tree.map(add, tree)


def flatten_beam_dim(tree: PyTree) -> PyTree:
  """Leaves ``[batch, beam, ...] -> [batch * beam, ...]`` (example-major)."""
  return jax.tree.map(lambda x: x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:]), tree)


def unflatten_beam_dim(tree: PyTree, batch_size: int, beam_size: int) -> PyTree:
  """Leaves ``[batch * beam, ...] -> [batch, beam, ...]``; inverse of flatten_beam_dim."""
  return jax.tree.map(lambda x: x.reshape((batch_size, beam_size) + x.shape[1:]), tree)


def gather_beams(tree: PyTree, beam_indices: Array) -> PyTree:
  """``out[b, k] = tree[b, beam_indices[b, k]]`` for every leaf.

  Args:
    tree: pytree of leaves <any>[batch, old_beam, ...].
    beam_indices: <int>[batch, new_beam] indices into ``old_beam``.

  Returns:
    The pytree with leaves <any>[batch, new_beam, ...].
  """
  batch = jnp.arange(beam_indices.shape[0])[:, None]
  return jax.tree.map(lambda x: x[batch, beam_indices], tree)


# ------------------------------------------------------------------------ ranking


def length_penalty(length, length_normalization: Optional[str], alpha: float = 0.6):
  """The divisor of the summed log-probability in the ranking score.

  ``length`` is the number of generated tokens, counting ``eos`` (``max_len`` for a
  hypothesis without one); ``bos`` is not among them.

  * ``None``: 1 (rank by the summed log-probability).
  * ``"average"``: ``length + 1`` (the average log-probability per token as See et al.'s
    released decoder takes it, ``log_prob / len(tokens)`` over a hypothesis whose tokens
    begin with ``<s>``: the start token counts, its log-probability 0).
  * ``"wmt"``: ``((5 + length) / 6) ** alpha`` (Flax wmt's ``brevity_penalty``, GNMT).
  """
  if length_normalization is None:
    return jnp.float32(1.0)
  length = jnp.asarray(length, jnp.float32)
  if length_normalization == "average":
    return length + 1.0
  return ((5.0 + length) / 6.0) ** alpha


def _integer(value) -> Optional[int]:
  """``value`` as a Python int if it is an integer (``int``, ``np.int64``, a 0-d integer
  array; not a bool), else ``None``."""
  if isinstance(value, (bool, np.bool_)):
    return None
  try:
    return operator.index(value)
  except TypeError:
    return None


def check_search_args(*, batch_size, beam_size, max_len, min_len,
                      length_normalization=None) -> tuple[int, int, int, int]:
  """Raises a one-line ``ValueError`` naming the first invalid argument; returns
  ``(batch_size, beam_size, max_len, min_len)`` as Python ints (NumPy integers are
  accepted: they are static shapes and loop bounds)."""
  out = []
  for name, value, low in (("batch_size", batch_size, 1), ("beam_size", beam_size, 1),
                           ("max_len", max_len, 1)):
    number = _integer(value)
    if number is None or number < low:
      raise ValueError(f"{name}={value!r} is invalid: it must be an int >= {low}.")
    out.append(number)
  number = _integer(min_len)
  if number is None or not 0 <= number <= out[2]:
    raise ValueError(
        f"min_len={min_len!r} is invalid: it must be an int with 0 <= min_len <= "
        f"max_len={out[2]}.")
  if length_normalization not in LENGTH_NORMALIZATIONS:
    raise ValueError(
        f"length_normalization={length_normalization!r} is unknown; accepted values are "
        f"{list(LENGTH_NORMALIZATIONS)}.")
  return (*out, number)


def check_token_ids(eos_id, bos_id) -> tuple[int, int]:
  """``(eos_id, bos_id)`` as Python ints; a one-line ``ValueError`` unless each is an
  integer (NumPy integers accepted, not bools) and ``bos_id >= 0`` (the vocabulary's
  bound on ``eos_id`` is checked once the model is traced)."""
  out = []
  for name, value in (("eos_id", eos_id), ("bos_id", bos_id)):
    number = _integer(value)
    if number is None or number < 0:
      raise ValueError(f"{name}={value!r} is invalid: it must be a token id, an int >= 0.")
    out.append(number)
  return out[0], out[1]


def _check_alpha(alpha) -> float:
  if (isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, (int, float, np.number))
      or not np.isfinite(alpha)):
    raise ValueError(f"alpha={alpha!r} is invalid: it must be a finite real number (the "
                     "exponent of the 'wmt' length penalty).")
  return float(alpha)


def _check_init_state(init_state, batch_size) -> None:
  for leaf in jax.tree.leaves(init_state):
    if jnp.ndim(leaf) < 1 or jnp.shape(leaf)[0] != batch_size:
      raise ValueError(
          f"every init_state leaf needs the leading axis batch_size={batch_size}; got "
          f"shape {jnp.shape(leaf)}.")


def _check_model(tokens_to_logits, tokens, state, eos_id, bos_id) -> int:
  """Traces one call (no FLOPs); checks shapes and state round-trip; returns vocab."""
  n = tokens.shape[0]
  logits, new_state = jax.eval_shape(tokens_to_logits, tokens, state)
  if len(logits.shape) != 2 or logits.shape[0] != n:
    raise ValueError(
        f"tokens_to_logits must return logits of shape [n, vocab] = [{n}, vocab]; got "
        f"{logits.shape}.")
  vocab = logits.shape[1]
  if not 0 <= eos_id < vocab:
    raise ValueError(f"eos_id={eos_id!r} is outside the vocabulary [0, {vocab}).")
  spec = lambda t: [(tuple(x.shape), x.dtype) for x in jax.tree.leaves(t)]
  if (jax.tree.structure(new_state) != jax.tree.structure(state)
      or spec(new_state) != spec(state)):
    raise ValueError(
        "tokens_to_logits must return a new state with the structure, shapes and dtypes "
        f"of its input state; got {jax.tree.structure(new_state)} {spec(new_state)} for "
        f"{jax.tree.structure(state)} {spec(state)}.")
  return vocab


def _log_probs(tokens_to_logits, tokens, state, step, eos_id, min_len):
  """Model log-probs <float32>[n, vocab] with ``eos`` at -inf before ``min_len``."""
  logits, new_state = tokens_to_logits(tokens, state)
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  log_probs = log_probs.at[:, eos_id].set(
      jnp.where(step < min_len, NEG_INF, log_probs[:, eos_id]))
  return log_probs, new_state


# ---------------------------------------------------------------------- beam search


def _beam_step(carry, *, tokens_to_logits, batch_size, beam_size, eos_id, max_len,
               min_len, length_normalization, alpha):
  """One step of beam search: expand, keep the live top-k, merge into finished."""
  (step, live_lp, live_seqs, live_tokens, state,
   fin_scores, fin_seqs) = carry
  log_probs, state = _log_probs(tokens_to_logits, flatten_beam_dim(live_tokens), state,
                                step, eos_id, min_len)
  vocab = log_probs.shape[-1]
  log_probs = unflatten_beam_dim(log_probs, batch_size, beam_size)
  # Top-2k expansion: at most k candidates end in eos (one per live beam), so at least
  # k of the 2k continue (fewer only if vocab == 1).
  candidates = (live_lp[..., None] + log_probs).reshape(batch_size, beam_size * vocab)
  num_cand = min(2 * beam_size, beam_size * vocab)
  cand_lp, cand_index = lax.top_k(candidates, num_cand)          # [B, C], best first
  cand_beam, cand_token = cand_index // vocab, cand_index % vocab
  cand_seqs = gather_beams(live_seqs, cand_beam).at[:, :, step].set(cand_token)
  cand_eos = cand_token == eos_id

  # Live: the best k candidates that do not end in eos; the state follows its beam.
  live_lp, pick = lax.top_k(jnp.where(cand_eos, NEG_INF, cand_lp), beam_size)
  live_seqs, live_tokens, parent = gather_beams((cand_seqs, cand_token, cand_beam), pick)
  state = unflatten_beam_dim(state, batch_size, beam_size)
  state = flatten_beam_dim(gather_beams(state, parent))

  # Finished: eos candidates ranked among the best k of all candidates (as in fairseq
  # and Hugging Face; so beam 1 is exactly greedy), and at max_len every live beam.
  length = step + 1
  eos_scores = jnp.where(cand_eos & (jnp.arange(num_cand) < beam_size),
                         cand_lp / length_penalty(length, length_normalization, alpha),
                         NEG_INF)
  end_scores = jnp.where(length == max_len,
                         live_lp / length_penalty(max_len, length_normalization, alpha),
                         NEG_INF)
  all_scores = jnp.concatenate([fin_scores, eos_scores, end_scores], axis=1)
  all_seqs = jnp.concatenate([fin_seqs, cand_seqs, live_seqs], axis=1)
  fin_scores, pick = lax.top_k(all_scores, beam_size)
  fin_seqs = gather_beams(all_seqs, pick)
  return (step + 1, live_lp, live_seqs, live_tokens, state, fin_scores, fin_seqs)


def _all_done(carry, *, max_len, length_normalization, alpha):
  """No live beam can still beat the worst finished one (for every example).

  Log-probs are <= 0, so a live beam's final log-prob is at most its current ``lp`` and
  its final score at most ``max(lp / penalty(L))`` over the reachable lengths
  ``L in [step + 1, max_len]``; the penalty is monotone in ``L``, so the two ends suffice.
  """
  step, live_lp, *_, fin_scores, _ = carry
  best_lp = live_lp[:, 0]
  bound = jnp.maximum(
      best_lp / length_penalty(jnp.minimum(step + 1, max_len), length_normalization, alpha),
      best_lp / length_penalty(max_len, length_normalization, alpha))
  return jnp.all((bound < fin_scores[:, -1]) | (best_lp == NEG_INF))


def beam_search(tokens_to_logits: TokensToLogits, init_state: PyTree, *, batch_size: int,
                beam_size: int, bos_id: int, eos_id: int, max_len: int, min_len: int = 0,
                length_normalization: Optional[str] = None,
                alpha: float = 0.6) -> tuple[Array, Array]:
  """Beam search with live and finished beams (Flax wmt), early exit, any state pytree.

  Each step expands the ``beam_size`` live beams over the vocabulary and takes the best
  ``2 * beam_size`` candidates by summed log-probability. The best ``beam_size`` of them
  that do not end in ``eos`` stay live (their states gathered from their parents); those
  that end in ``eos`` and rank among the best ``beam_size`` candidates join the finished
  set, where they compete with the earlier finished hypotheses by ranking score
  (:func:`length_penalty`). At ``max_len`` the live beams are complete too and compete
  in the same way. The ``lax.while_loop`` stops early once no live beam can beat the
  worst finished hypothesis of any example (see :func:`_all_done`). If an example has
  no finished hypothesis with a finite score, its live beams are returned (as in wmt;
  here that happens only when every hypothesis has probability 0).

  Args:
    tokens_to_logits: ``(tokens <int32>[n], state) -> (logits <float>[n, vocab],
      new_state)``, ``n = batch_size * beam_size``; pure, jit-compatible.
    init_state: pytree, every leaf <any>[batch_size, ...].
    batch_size: number of examples.
    beam_size: number of hypotheses kept per example (live and finished).
    bos_id: the first input token (never part of the output).
    eos_id: the end token.
    max_len: maximum number of generated tokens (``eos`` included).
    min_len: ``eos`` is forbidden at positions ``< min_len``.
    length_normalization: ``None``, ``"average"`` or ``"wmt"``; see
      :func:`length_penalty`.
    alpha: the exponent of the ``"wmt"`` brevity penalty.

  Returns:
    ``sequences`` <int32>[batch, beam, max_len] (best first, eos-padded) and ``scores``
    <float32>[batch, beam]: the normalised ranking scores ``log p / penalty(length)``
    (``-inf`` for empty slots).
  """
  batch_size, beam_size, max_len, min_len = check_search_args(
      batch_size=batch_size, beam_size=beam_size, max_len=max_len, min_len=min_len,
      length_normalization=length_normalization)
  eos_id, bos_id = check_token_ids(eos_id, bos_id)
  alpha = _check_alpha(alpha)
  _check_init_state(init_state, batch_size)
  n = batch_size * beam_size
  state = flatten_beam_dim(add_beam_dim(init_state, beam_size))
  _check_model(tokens_to_logits, jnp.zeros((n,), jnp.int32), state, eos_id, bos_id)

  # Only beam 0 is live at the start, so the first expansion has no duplicates.
  live_lp = jnp.tile(jnp.array([0.0] + [NEG_INF] * (beam_size - 1), jnp.float32),
                     (batch_size, 1))
  seqs = jnp.full((batch_size, beam_size, max_len), eos_id, jnp.int32)
  carry = (jnp.int32(0), live_lp, seqs, jnp.full((batch_size, beam_size), bos_id, jnp.int32),
           state, jnp.full((batch_size, beam_size), NEG_INF, jnp.float32), seqs)
  options = dict(max_len=max_len, length_normalization=length_normalization, alpha=alpha)
  step_fn = functools.partial(
      _beam_step, tokens_to_logits=tokens_to_logits, batch_size=batch_size,
      beam_size=beam_size, eos_id=eos_id, min_len=min_len, **options)
  cond_fn = lambda c: (c[0] < max_len) & ~_all_done(c, **options)
  step, live_lp, live_seqs, _, _, fin_scores, fin_seqs = lax.while_loop(
      cond_fn, step_fn, carry)

  fin_seqs = jnp.where((fin_scores > NEG_INF)[..., None], fin_seqs, eos_id)
  live_scores = live_lp / length_penalty(step, length_normalization, alpha)
  none_finished = jnp.all(fin_scores == NEG_INF, axis=1)
  sequences = jnp.where(none_finished[:, None, None], live_seqs, fin_seqs)
  scores = jnp.where(none_finished[:, None], live_scores, fin_scores)
  return sequences, scores


# --------------------------------------------------------------------------- greedy


def greedy_search(tokens_to_logits: TokensToLogits, init_state: PyTree, *, batch_size: int,
                  bos_id: int, eos_id: int, max_len: int,
                  min_len: int = 0) -> tuple[Array, Array]:
  """Argmax decoding: ``y_t = argmax_v log p(v | y_<t)`` until ``eos`` or ``max_len``.

  The same contract as :func:`beam_search` without the beam axis; equal to
  ``beam_search(..., beam_size=1, length_normalization=None)`` (up to exact ties).

  Args:
    tokens_to_logits: ``(tokens <int32>[batch], state) -> (logits <float>[batch,
      vocab], new_state)``.
    init_state: pytree, every leaf <any>[batch_size, ...].
    batch_size: number of examples.
    bos_id: the first input token (never part of the output).
    eos_id: the end token.
    max_len: maximum number of generated tokens (``eos`` included).
    min_len: ``eos`` is forbidden at positions ``< min_len``.

  Returns:
    ``sequences`` <int32>[batch, max_len] (eos-padded) and ``scores`` <float32>[batch],
    the summed log-probability of the tokens up to and including ``eos``.
  """
  batch_size, _, max_len, min_len = check_search_args(
      batch_size=batch_size, beam_size=1, max_len=max_len, min_len=min_len)
  eos_id, bos_id = check_token_ids(eos_id, bos_id)
  _check_init_state(init_state, batch_size)
  init_state = jax.tree.map(jnp.asarray, init_state)
  _check_model(tokens_to_logits, jnp.zeros((batch_size,), jnp.int32), init_state, eos_id,
               bos_id)

  def step_fn(carry):
    step, tokens, seqs, scores, done, state = carry
    log_probs, state = _log_probs(tokens_to_logits, tokens, state, step, eos_id, min_len)
    tokens = jnp.where(done, eos_id, jnp.argmax(log_probs, axis=-1).astype(jnp.int32))
    token_lp = jnp.take_along_axis(log_probs, tokens[:, None], axis=-1)[:, 0]
    scores = jnp.where(done, scores, scores + token_lp)
    seqs = seqs.at[:, step].set(tokens)
    return step + 1, tokens, seqs, scores, done | (tokens == eos_id), state

  carry = (jnp.int32(0), jnp.full((batch_size,), bos_id, jnp.int32),
           jnp.full((batch_size, max_len), eos_id, jnp.int32),
           jnp.zeros((batch_size,), jnp.float32), jnp.zeros((batch_size,), bool), init_state)
  cond_fn = lambda c: (c[0] < max_len) & ~jnp.all(c[4])
  _, _, seqs, scores, _, _ = lax.while_loop(cond_fn, step_fn, carry)
  return seqs, scores

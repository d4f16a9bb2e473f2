"""The pointer-generator network with coverage (See, Liu and Manning, ACL 2017), as the RUM
paper configures it for summarization (Dangovski et al., TACL 2019, section 4 E): any
registered cell in the encoder and the decoder (LEAD = LSTM/LSTM, encRUM, decRUM, allRUM).

One step of the decoder, with ``h_i`` <[2H]> the encoder outputs, ``s_t`` the decoder's
state, ``c^t`` the coverage and ``x_t`` the merged decoder input (see "Decoder input")::

    x_t     = W_x [emb(y_{t-1}), h*_{t-1}] + b_x                       (h*_{-1} = 0)
    s_t, o_t = cell(s_{t-1}, x_t)                                      (o_t: cell output)
    e_i^t   = v^T tanh(W_h h_i + W_s s_t + w_c c_i^t + b_attn)         (w_c: coverage only)
    a^t     = softmax(e^t) over the real source positions (renormalised, see below)
    h*_t    = sum_i a_i^t h_i                                          (context vector)
    c^{t+1} = c^t + a^t,  c^0 = 0,  so  c^t = sum_{t' < t} a^{t'}
    P_vocab = softmax(V' (V [o_t, h*_t] + b) + b')                     <[vocab_size]>
    p_gen   = sigmoid(w_h*^T h*_t + w_s^T s_t + w_x^T x_t + b_ptr)
    P(w)    = p_gen P_vocab(w) + (1 - p_gen) sum_{i: w_i = w} a_i^t    <[vocab_size + max_oovs]>

``P_vocab`` is zero on the ``max_oovs`` extended slots; the copy term is scattered to the
article's extended ids ``batch["article_ext"]`` (:meth:`Vocabulary.encode_extended`:
the k-th OOV of an article has id ``vocab_size + k``) with ``.at[].add``, so duplicated
source words add up. ``pointer=False`` is the plain attention seq2seq baseline:
``P(w) = P_vocab(w)`` (zero on the extended slots) and ``p_gen = 1``.

Decisions, each checked against See et al.'s released TensorFlow code (abisee/
pointer-generator: ``attention_decoder.py``, ``model.py``) and the RUM authors' fork
(rdangovs/rotational-unit-of-memory, ``tasks/summarization``):

* Decoder input: as in the reference, the word embedding is merged with the PREVIOUS
  step's context vector through a linear layer of the embedding's size before the cell
  (``x = linear([inp, context_vector], input_size)``); ``x_t`` is that merged vector, and
  it is the ``x_t`` of ``p_gen``. ``h*_{-1} = 0``. The reference's decode mode instead
  recomputes the first step's previous context from the initial state
  (``initial_state_attention=True``), so its training and decoding differ at step 0; here
  the previous context and the coverage are carried in the decoder state and the
  decoding step is the training step (the same module; equal up to float rounding).
* ``s_t`` in ``W_s s_t`` and in ``p_gen`` is the concatenation of the decoder carry's
  vector components: ``[c, h]`` for the LSTM (the reference's ``linear(decoder_state)``
  and ``linear([context, state.c, state.h, x])``), ``h`` for GRU and RUM. RUM's
  associative memory ``R`` <[H, H]> (``lam=1``) is not read (the RUM authors flatten it
  into the state, H^2 inputs). ``o_t`` (the cell's output, ``h``) feeds ``V[o_t, h*_t]``.
* Initial decoder state (the reference's ``_reduce_states``): each vector component of the
  decoder carry (a leaf <[B, H]>) is ``ReLU(W [fwd, bwd] + b)`` of the encoder's final
  forward and backward states. When the encoder and decoder carries have the same number
  of vector components (LSTM/LSTM: ``c <- [c_fw, c_bw]``, ``h <- [h_fw, h_bw]``; RUM/RUM,
  GRU/RUM: ``h <- [h_fw, h_bw]``), component k is reduced from component k; otherwise
  every decoder component reads all of them, ``[vectors_fw..., vectors_bw...]`` (encRUM:
  ``c`` and ``h`` of the LSTM decoder both from ``[h_fw, h_bw]``, as the RUM authors'
  ``w_lift_h_to_c``; decRUM: RUM's ``h`` from ``[c_fw, h_fw, c_bw, h_bw]``, one layer where
  the RUM authors use two). Other carry leaves (RUM's ``R`` for ``lam=1``) start at the
  decoder cell's ``initialize_carry`` value (``R_0 = 1``). Parameters: ``reduce/
  component_<k>``.
* Attention mask: the scores of padding positions are set to a large negative number
  before the softmax, then ``a = softmax(e) * mask / (sum(softmax(e) * mask) + eps)``: the
  reference's softmax-mask-renormalise (identical in exact arithmetic) without its 0/0 when
  every real score underflows. An article with no real position (length 0) gets zero
  attention and ``p_gen = 1`` (all mass on ``P_vocab``). Encoder outputs at padding are
  zeroed, so token ids there change nothing.
* ``W_h h_i`` (the attention's encoder features, size ``2H`` as in the reference) is
  computed once by :meth:`PointerGenerator.encode` and carried in the state with the
  encoder outputs, not recomputed at every step.
* ``w_c`` is initialised to zeros (the reference: Glorot uniform), so switching coverage on
  for a continuation run (``init_from``; ``w_c`` is then new) starts from the same model.
* Article ids ``>= vocab_size + max_oovs`` (an article with more OOVs than ``max_oovs``)
  copy onto ``unk_id``; decoder inputs ``>= vocab_size`` (copied OOVs) are embedded as
  ``unk_id``, as the reference's decoder does.
* The encoder runs its cells under ``nn.RNN`` with ``seq_lengths`` (the backward one with
  ``reverse=True, keep_order=True``, so it starts at each article's last real token), not
  through ``rum_scan`` (which has neither lengths nor reverse). ``nn.RNN`` stacks every
  step's carry to pick each row's final one: with RUM ``lam=1`` that is <[S, B, H, H]>.
* No dropout (See et al. use none); ``train`` is accepted for the task contract.

Batches (right-padded; ``S`` source, ``T`` decoder steps)::

    {"article": <int>[B, S] base ids (OOV -> unk), "article_ext": <int>[B, S] extended ids,
     "article_lengths"?: <int>[B] (all S positions are real without it),
     "dec_inputs": <int>[B, T] bos + summary (extended ids allowed)}

Usage::

    >>> model = build_model({"name": "pointer_generator", "encoder_cell": "lstm",
    ...                      "decoder_cell": "rum", "hidden_size": 256},
    ...                     vocab_size=50_000, max_oovs=20)                # decRUM
    >>> variables = model.init(jax.random.key(0), batch)
    >>> out = model.apply(variables, batch)          # out["probs"] <[B, T, 50_020]>
    >>> loss = nll_loss(out["probs"], batch["targets"], batch["dec_mask"]) + coverage_loss(
    ...     out["attention"], out["coverage"], batch["dec_mask"])
    >>> fn, init = make_tokens_to_logits(model, variables["params"], batch)
    >>> seqs, scores = rumjax.decoding.beam_search(fn, init, batch_size=B, beam_size=4, ...)

Analysis (RUM paper, Figure 6; :mod:`rumjax.analysis.summarization`):

* ``"state_norm"`` <[B, T]>: ``||h_t||_2``, the L2 norm of the decoder's hidden state (the
  cell's output) after step ``t`` ("norm of the last hidden state", Figure 6b; an LSTM's
  cell state ``c`` is left out, as the authors log ``out_state.h`` and ``out_state.c``
  apart); computed under ``stop_gradient`` (a diagnostic, never differentiated). The task's metric
  ``last_state_norm`` reads it at each row's last real step (Figure 6b).
* Intermediate gradients with :meth:`flax.linen.Module.perturb` (collection
  ``"perturbations"``): ``"encoder_outputs"`` <[B, S, 2H]> is added to the encoder outputs
  ``h_i`` (after padding is zeroed, before ``W_h h_i``: its gradient is the total
  derivative through the attention features and the context), and
  ``"decoder"/"decoder_outputs"`` <[B, T, H]> to the decoder output
  ``V [o_t, h*_t] + b`` (See et al.'s decoder output, before ``V'``), one slice per step
  (the decoder scan stacks the per-step variables on axis 1). No perturbation is created by
  ``init``; ``model.apply({"params": p}, batch, mutable=["perturbations"])`` returns the
  zeros, and ``jax.grad`` of the loss of ``model.apply({"params": p, "perturbations":
  z}, batch)`` w.r.t. ``z`` gives ``d loss / d h_i`` and ``d loss / d output_t`` (Figure
  6c,d). Without a ``"perturbations"`` collection (training, :func:`make_tokens_to_logits`,
  beam search) ``perturb`` is the identity. The collection is for :meth:`__call__` only
  (``decode_step`` would read one step's <[B, H]> slice).

Parameters: ``embed`` (shared by the encoder and the decoder), ``encoder_fw/cell``,
``encoder_bw/cell``, ``reduce/component_<k>``, ``attn_encoder`` (``W_h``), and
``decoder/{input_merge, cell, attn_state (W_s, b_attn), attn_v, attn_coverage?,
pointer?, attn_output (V, b), vocab (V', b')}``.

Precision (:mod:`rumjax.models.precision`): ``dtype`` is the computation dtype of the
embedding, the dense layers and the cells (``param_dtype`` the parameters'); the attention
scores and distribution, ``P_vocab`` (its logits are cast first), ``p_gen``, the final
distribution, the coverage and the context vector carried between decoder steps are
float32 whatever ``dtype`` is, and the decoder carry keeps the dtypes of the cell's
``initialize_carry``.
"""

from typing import Any, Callable, Mapping, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp

from rumjax.cells import cell_from_config
from rumjax.layers.dense import Dense
from rumjax.models import precision
from rumjax.models.registry import register_model

Array = jax.Array
PyTree = Any

# Added to the attention's renormalising sum (see the module docstring).
ATTENTION_EPS = 1e-12
# Added to probabilities before a log (losses, tokens_to_logits).
PROB_EPS = 1e-12


# -------------------------------------------------------------------------- helpers


def vector_leaves(carry: PyTree, batch_ndim: int = 1) -> list:
  """The leaves of a cell's carry that are one vector per example, <float>[*batch, n]
  (LSTM: ``[c, h]``; GRU, RUM: ``[h]``; RUM's memory ``R`` <[*batch, H, H]> is not one)."""
  return [x for x in jax.tree.leaves(carry) if jnp.ndim(x) == batch_ndim + 1]


def masked_attention(scores: Array, mask: Array, eps: float = ATTENTION_EPS) -> Array:
  """The attention distribution over the real source positions.

  ``a_i = exp(e_i) m_i / (sum_j exp(e_j) m_j + eps)``, computed as the reference's
  ``softmax(e) * m / sum(softmax(e) * m)`` with the padding scores set to the dtype's
  most negative number first (no
  underflow of the real positions' weights) and ``eps`` in the denominator (an all-padding
  row gives zeros, not NaN).

  Args:
    scores: <float>[B, S] the scores ``e_i``.
    mask: <float or bool>[B, S], 1 at real positions.
    eps: added to the renormalising sum.

  Returns:
    <float>[B, S], zero at padding, summing to 1 over the real positions.
  """
  mask = jnp.asarray(mask, scores.dtype)
  masked = jnp.where(mask > 0, scores, jnp.finfo(scores.dtype).min)
  weights = jax.nn.softmax(masked, axis=-1) * mask
  return weights / (jnp.sum(weights, axis=-1, keepdims=True) + eps)


def final_distribution(p_vocab: Array, attention: Array, p_gen: Array, article_ext: Array,
                       num_extended: int) -> Array:
  """``P(w) = p_gen P_vocab(w) + (1 - p_gen) sum_{i: ext_i = w} a_i`` (See et al. eq. 9).

  Args:
    p_vocab: <float>[B, V] the vocabulary distribution.
    attention: <float>[B, S] the attention distribution.
    p_gen: <float>[B] the generation probability.
    article_ext: <int>[B, S] extended source ids, each in ``[0, num_extended)``.
    num_extended: ``V + max_oovs``.

  Returns:
    <float>[B, V + max_oovs]; ``P_vocab`` padded with zeros on the extended slots plus the
    copy distribution scattered with ``.at[].add`` (duplicates add up).
  """
  batch, vocab = p_vocab.shape
  gen = jnp.pad(p_gen[:, None] * p_vocab, ((0, 0), (0, num_extended - vocab)))
  rows = jnp.arange(batch)[:, None]
  copy = (1.0 - p_gen)[:, None] * attention
  return gen.at[rows, article_ext].add(copy, mode="drop")


def _perturb(module: nn.Module, name: str, value: Array) -> Array:
  """``module.perturb(name, value)`` (``value`` plus the ``"perturbations"`` variable
  ``name`` when that collection is passed; the identity otherwise), skipped by ``init`` so
  the initial variables stay ``{"params"}`` (RUM paper, Figure 6c,d)."""
  if module.is_initializing():
    return value
  return module.perturb(name, value)


# --------------------------------------------------------------------------- losses


def _average(values: Array, mask: Array, normalization: str) -> Array:
  """Masked average of per-step values <float>[B, T] (see :func:`nll_loss`)."""
  mask = jnp.asarray(mask, values.dtype)
  values = jnp.where(mask > 0, values, 0.0)  # padding steps may hold anything, even NaN
  if normalization == "token":
    return jnp.sum(values * mask) / jnp.maximum(jnp.sum(mask), 1.0)
  if normalization == "example":
    lengths = jnp.sum(mask, axis=1)
    per_example = jnp.sum(values * mask, axis=1) / jnp.maximum(lengths, 1.0)
    has_steps = (lengths > 0).astype(values.dtype)
    return jnp.sum(per_example * has_steps) / jnp.maximum(jnp.sum(has_steps), 1.0)
  raise ValueError(f"normalization={normalization!r} is unknown; accepted values are "
                   "['example', 'token'].")


def nll_loss(probs: Array, targets: Array, mask: Array, *, eps: float = PROB_EPS,
             normalization: str = "example") -> Array:
  """The negative log-likelihood of the targets under the final distribution.

  ``loss_t = -log(P(y_t) + eps)``: ``eps`` keeps it finite when the gold probability is 0
  (a target OOV the article does not contain, or ``pointer=False`` with an extended id;
  the reference's ``-tf.log(gold_probs)`` is infinite there).

  The reference has two normalisations (``model.py``): the pointer-generator's
  ``_mask_and_avg`` (each example's mean over its real steps, then the mean over the batch;
  ``normalization="example"``) and the baseline's ``tf.contrib.seq2seq.sequence_loss``
  (the sum over all real tokens of the batch divided by their number;
  ``normalization="token"``). The default is ``"example"``, as :func:`coverage_loss`'s,
  so that the two add up as the reference's total loss. They agree when all summaries have the
  same length. Rows without a real step count in neither (the reference divides by 0).

  Args:
    probs: <float>[B, T, V + max_oovs] the final distributions.
    targets: <int>[B, T] the gold extended ids.
    mask: <float or bool>[B, T], 1 at real target tokens.
    eps: added to the gold probability inside the log.
    normalization: ``"token"`` or ``"example"``.

  Returns:
    The scalar loss.
  """
  gold = jnp.take_along_axis(probs, jnp.asarray(targets, jnp.int32)[..., None], axis=-1)
  return _average(-jnp.log(gold[..., 0] + eps), mask, normalization)


def coverage_loss(attention: Array, coverage: Array, mask: Array, *,
                  normalization: str = "example") -> Array:
  """See et al.'s coverage loss (eq. 12): ``covloss_t = sum_i min(a_i^t, c_i^t)``.

  ``c^t = sum_{t' < t} a^{t'}`` is the coverage BEFORE step ``t`` (the model's
  ``"coverage"`` output; zero at ``t = 0``). Averaged as the reference's
  ``_coverage_loss`` does (``_mask_and_avg``: each example's mean over its real decoder
  steps, then the mean over the batch; ``normalization="example"``, the default) or over
  all real steps of the batch (``"token"``); see :func:`nll_loss`. The reference weights
  it by ``cov_loss_wt = 1.0`` in the total loss.

  Args:
    attention: <float>[B, T, S] the attention distributions ``a^t``.
    coverage: <float>[B, T, S] the coverage vectors ``c^t``.
    mask: <float or bool>[B, T], 1 at real decoder steps.
    normalization: ``"example"`` or ``"token"``.

  Returns:
    The scalar loss.
  """
  return _average(jnp.sum(jnp.minimum(attention, coverage), axis=-1), mask, normalization)


# --------------------------------------------------------------------------- modules


class ReduceStates(nn.Module):
  """The decoder's initial carry from the encoder's final forward/backward carries.

  See the module docstring ("Initial decoder state"); parameters ``component_<k>``, one
  ``Dense`` per vector component of the decoder carry (at the matmul ``precision``).
  """
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  precision: Any = None

  @nn.compact
  def __call__(self, fw_carry: PyTree, bw_carry: PyTree, template: PyTree) -> PyTree:
    """Args: the encoder's final carries and the decoder's ``initialize_carry`` value
    (its structure and the values of its non-vector leaves); returns the decoder carry."""
    fw, bw = vector_leaves(fw_carry), vector_leaves(bw_carry)
    leaves, treedef = jax.tree.flatten(template)
    slots = [k for k, x in enumerate(leaves) if jnp.ndim(x) == 2]
    out = list(leaves)
    for j, k in enumerate(slots):
      if len(slots) == len(fw):
        inputs = [fw[j], bw[j]]
      else:
        inputs = fw + bw
      dense = Dense(leaves[k].shape[-1], dtype=self.dtype, param_dtype=self.param_dtype,
                       precision=self.precision, name=f"component_{j}")
      out[k] = nn.relu(dense(jnp.concatenate(inputs, axis=-1))).astype(leaves[k].dtype)
    return jax.tree.unflatten(treedef, out)


class AttentionDecoderStep(nn.Module):
  """One decoder step: merged input, cell, coverage attention, ``P_vocab``, ``p_gen``, the
  final distribution (module docstring). Training scans it; decoding calls it per token.

  The state is a dict, every leaf with leading axis B:
  ``carry`` (the cell's), ``context`` <[B, 2H]> (``h*_{t-1}``), ``coverage`` <[B, S]>
  (``c^t``), ``enc_outputs`` <[B, S, 2H]>, ``enc_features`` <[B, S, 2H]> (``W_h h_i``),
  ``mask`` <float>[B, S], ``article_ext`` <int32>[B, S]. ``precision``: the matmul
  precision of every ``Dense`` and ``einsum`` of the step (the cell has its own).
  """
  cell: nn.RNNCellBase
  vocab_size: int
  max_oovs: int
  embed_dim: int
  pointer: bool = True
  coverage: bool = False
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  precision: Any = None

  @nn.compact
  def __call__(self, state: Mapping[str, Any], inputs: Array):
    """``(state, inputs <float>[B, embed_dim]) -> (new_state, outputs)``, outputs
    ``{"probs" <[B, V + max_oovs]>, "attention" <[B, S]>, "coverage" <[B, S]> (before
    this step), "p_gen" <[B]>, "state_norm" <[B]>}``; ``state_norm`` is ``||s_t||_2``
    of this step's new decoder state (the RUM paper's Figure 6b; no gradient). The
    decoder output ``V [o_t, h*_t] + b`` is perturbed as ``"decoder_outputs"`` (Figure
    6d; module docstring)."""
    enc_outputs, enc_features = state["enc_outputs"], state["enc_features"]
    mask, coverage = state["mask"], state["coverage"]
    dense = lambda n, name: Dense(n, dtype=self.dtype, param_dtype=self.param_dtype,
                                     precision=self.precision, name=name)
    x = dense(self.embed_dim, "input_merge")(
        jnp.concatenate([inputs, jnp.asarray(state["context"], inputs.dtype)], axis=-1))
    carry, cell_out = self.cell(state["carry"], x)
    carry = precision.carry_like(carry, state["carry"])   # the carry keeps its dtype
    s = jnp.concatenate(vector_leaves(carry), axis=-1)
    # Figure 6b: the norm of the hidden state h_t (the cell's output; an LSTM's c is not in
    # it, as the authors log out_state.h and out_state.c apart).
    state_norm = jnp.linalg.norm(
        jax.lax.stop_gradient(precision.float32_logits(cell_out)), axis=-1)

    features = enc_features + dense(enc_features.shape[-1], "attn_state")(s)[:, None]
    if self.coverage:
      w_c = self.param("attn_coverage", nn.initializers.zeros_init(),
                       (enc_features.shape[-1],), self.param_dtype)
      features = features + (coverage[..., None] * w_c).astype(features.dtype)
    v = self.param("attn_v", nn.initializers.lecun_normal(), (enc_features.shape[-1], 1),
                   self.param_dtype)
    # Attention scores, distribution and context in float32 (the precision policy).
    acc = jnp.promote_types(jnp.result_type(features, v), jnp.float32)
    scores = jnp.einsum("bsd,dk->bsk", jnp.tanh(features), jnp.asarray(v, features.dtype),
                        precision=self.precision, preferred_element_type=acc)[..., 0]
    attention = masked_attention(scores, mask)
    context = jnp.einsum("bs,bsd->bd", attention, enc_outputs, precision=self.precision,
                         preferred_element_type=acc)
    context = jnp.asarray(context, state["context"].dtype)

    output = dense(self.cell.features, "attn_output")(
        jnp.concatenate([cell_out, jnp.asarray(context, cell_out.dtype)], axis=-1))
    output = _perturb(self, "decoder_outputs", output)
    head = lambda n, name: precision.output_dense(n, dtype=self.dtype,
                                                  param_dtype=self.param_dtype,
                                                  precision=self.precision, name=name)
    p_vocab = jax.nn.softmax(head(self.vocab_size, "vocab")(output), axis=-1)
    num_extended = self.vocab_size + self.max_oovs
    if self.pointer:
      p_gen = jax.nn.sigmoid(head(1, "pointer")(
          jnp.concatenate([jnp.asarray(context, s.dtype), s, jnp.asarray(x, s.dtype)],
                          axis=-1))[:, 0])
      # No real source position: nothing to copy, all mass on P_vocab.
      p_gen = jnp.where(jnp.any(mask > 0, axis=-1), p_gen, 1.0)
      probs = final_distribution(p_vocab, attention, p_gen, state["article_ext"],
                                 num_extended)
    else:
      p_gen = jnp.ones(p_vocab.shape[:1], p_vocab.dtype)
      probs = jnp.pad(p_vocab, ((0, 0), (0, num_extended - self.vocab_size)))
    new_state = dict(state, carry=carry, context=context, coverage=coverage + attention)
    outputs = {"probs": probs, "attention": attention, "coverage": coverage,
               "p_gen": p_gen, "state_norm": state_norm}
    return new_state, outputs


def _decoder_scan(step: AttentionDecoderStep, state, xs):
  return step(state, xs)


@register_model("pointer_generator")
class PointerGenerator(nn.Module):
  """See et al.'s pointer-generator with coverage; any registered cells (module docstring).

  Attributes:
    vocab_size: the base vocabulary ``V`` (ids ``[0, V)``).
    max_oovs: the static number of article-OOV slots; distributions have ``V + max_oovs``
      entries.
    embed_dim: the shared word embedding's size (128 in the paper).
    hidden_size: ``H`` of every cell (256); encoder outputs have ``2H``.
    encoder_cell, decoder_cell: registered cell names ("lstm", "rum", "gru", ...).
    pointer: the pointer-generator (True) or the plain attention seq2seq baseline.
    coverage: the coverage feature ``w_c c_i`` in the attention scores (its loss is
      :func:`coverage_loss`, added by the task).
    unk_id: the id OOV inputs are embedded as (``Vocabulary`` puts ``<unk>`` at 1).
    lam, learn_lam, eta, activation, update_gate: the cells' options (passed by
      :func:`rumjax.cells.cell_from_config` to the cells that have them; RUM "without time
      normalization" is ``eta=None``).
    dtype, param_dtype: the precision policy (module docstring; None: float32), passed
      to every layer and cell.
    precision: the matmul precision of every layer and cell (None: the backend's
      default; :mod:`rumjax.models.precision`).
  """
  vocab_size: int
  max_oovs: int
  embed_dim: int = 128
  hidden_size: int = 256
  encoder_cell: str = "lstm"
  decoder_cell: str = "lstm"
  pointer: bool = True
  coverage: bool = False
  unk_id: int = 1
  lam: float = 0
  learn_lam: bool = False
  eta: Optional[float] = None
  activation: Union[str, Callable] = "relu"
  update_gate: bool = True
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  precision: Any = None

  def _make_cell(self, name: str) -> nn.RNNCellBase:
    options = {"lam": self.lam, "learn_lam": self.learn_lam, "eta": self.eta,
               "activation": self.activation,
               "update_gate": self.update_gate, "dtype": self.dtype,
               "param_dtype": self.param_dtype, "precision": self.precision}
    return cell_from_config(name, self.hidden_size, options)

  def setup(self):
    if self.max_oovs < 0:
      raise ValueError(f"max_oovs={self.max_oovs!r} must be >= 0.")
    policy = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    self.embed = nn.Embed(self.vocab_size, self.embed_dim, **policy)
    self.encoder_fw = nn.RNN(self._make_cell(self.encoder_cell), return_carry=True)
    self.encoder_bw = nn.RNN(self._make_cell(self.encoder_cell), return_carry=True,
                             reverse=True, keep_order=True)
    self.reduce = ReduceStates(**policy, precision=self.precision)
    self.attn_encoder = Dense(2 * self.hidden_size, use_bias=False, **policy,
                                 precision=self.precision)
    self.decoder = AttentionDecoderStep(
        self._make_cell(self.decoder_cell), vocab_size=self.vocab_size,
        max_oovs=self.max_oovs, embed_dim=self.embed_dim, pointer=self.pointer,
        coverage=self.coverage, **policy, precision=self.precision)

  def _embed_base(self, tokens: Array) -> Array:
    """Embeds ids, extended ids ``>= vocab_size`` as ``unk_id``."""
    tokens = jnp.asarray(tokens, jnp.int32)
    return self.embed(jnp.where(tokens >= self.vocab_size, self.unk_id, tokens))

  def encode(self, batch: Mapping[str, Any]) -> dict:
    """The bidirectional encoder and the decoder's initial state.

    Args:
      batch: ``{"article": <int>[B, S], "article_ext": <int>[B, S],
        "article_lengths"?: <int>[B]}``.

    Returns:
      The decoder state (see :class:`AttentionDecoderStep`), every leaf with leading
      axis B: the reduced carry, ``context`` 0, ``coverage`` 0, the encoder outputs and
      features (zero at padding, plus the ``"encoder_outputs"`` perturbation when one is
      passed: RUM paper Figure 6c, module docstring), the source mask and the extended
      ids.
    """
    article = jnp.asarray(batch["article"], jnp.int32)
    bsz, steps = article.shape
    lengths = batch.get("article_lengths")
    if lengths is None:
      lengths = jnp.full((bsz,), steps, jnp.int32)
    lengths = jnp.asarray(lengths, jnp.int32)
    mask = (jnp.arange(steps)[None, :] < lengths[:, None]).astype(jnp.float32)
    xs = self._embed_base(article)
    fw_carry, fw_out = self.encoder_fw(xs, seq_lengths=lengths)
    bw_carry, bw_out = self.encoder_bw(xs, seq_lengths=lengths)
    # nn.RNN reads the final carry at index length - 1, the last step for length 0: an
    # empty article's final states are the initial ones instead.
    empty = lengths == 0
    initial = self.encoder_fw.cell.initialize_carry(jax.random.key(0), xs[:, 0].shape)
    fw_carry, bw_carry = (jax.tree.map(
        lambda c, c0: jnp.where(empty.reshape((-1,) + (1,) * (c.ndim - 1)), c0, c),
        carry, initial) for carry in (fw_carry, bw_carry))
    enc_outputs = jnp.where(mask[..., None] > 0,
                            jnp.concatenate([fw_out, bw_out], axis=-1), 0.0)
    enc_outputs = _perturb(self, "encoder_outputs", enc_outputs)   # Figure 6c
    enc_features = self.attn_encoder(enc_outputs)
    template = self.decoder.cell.initialize_carry(jax.random.key(0),
                                                  (bsz, self.embed_dim))
    carry = self.reduce(fw_carry, bw_carry, template)
    ext = jnp.asarray(batch["article_ext"], jnp.int32)
    ext = jnp.where(ext < self.vocab_size + self.max_oovs, ext, self.unk_id)
    acc = jnp.promote_types(enc_outputs.dtype, jnp.float32)  # the carried context, coverage
    return {"carry": carry,
            "context": jnp.zeros((bsz, 2 * self.hidden_size), acc),
            "coverage": jnp.zeros((bsz, steps), acc),
            "enc_outputs": enc_outputs, "enc_features": enc_features, "mask": mask,
            "article_ext": ext}

  def decode_step(self, tokens: Array, state: Mapping[str, Any]):
    """One decoder step on the previous tokens ``<int>[n]`` (extended ids allowed).

    Returns:
      ``(outputs, new_state)``: ``outputs`` as :class:`AttentionDecoderStep` (``"probs"``
      <[n, V + max_oovs]>, ...), ``new_state`` with the structure of ``state``.
    """
    new_state, outputs = self.decoder(state, self._embed_base(tokens))
    return outputs, new_state

  def __call__(self, batch: Mapping[str, Any], train: bool = False) -> dict:
    """Teacher-forced outputs of every decoder step.

    Args:
      batch: as :meth:`encode`, plus ``"dec_inputs"`` <int>[B, T] (bos + summary;
        extended ids are embedded as unk).
      train: accepted for the task contract (the model has no dropout).

    Returns:
      ``{"probs": <float>[B, T, V + max_oovs], "attention": <float>[B, T, S],
      "coverage": <float>[B, T, S] (before step t), "p_gen": <float>[B, T],
      "state_norm": <float>[B, T] (``||h_t||_2``, RUM paper Figure 6b)}``.

    The per-step ``"decoder_outputs"`` perturbations are stacked on axis 1 (the time
    axis): ``perturbations["decoder"]["decoder_outputs"]`` <[B, T, H]> (Figure 6d).
    """
    del train
    state = self.encode(batch)
    xs = self._embed_base(batch["dec_inputs"])
    scan = nn.scan(_decoder_scan, variable_broadcast="params",
                   variable_axes={"perturbations": 1},
                   split_rngs={"params": False}, in_axes=1, out_axes=1)
    _, outputs = scan(self.decoder, state, xs)
    return outputs


def make_tokens_to_logits(model: PointerGenerator, params: Mapping[str, Any],
                          batch: Mapping[str, Any]):
  """The decoder as :mod:`rumjax.decoding`'s ``tokens_to_logits`` and its initial state.

  Args:
    model: a :class:`PointerGenerator`.
    params: its ``"params"`` collection (or the whole variables dict).
    batch: the encoder's inputs (see :meth:`PointerGenerator.encode`).

  Returns:
    ``(tokens_to_logits, init_state)``: ``tokens_to_logits(tokens <int>[n], state) ->
    (log(P + 1e-12) <float>[n, V + max_oovs], new_state)`` (extended ids ``>= V`` are
    embedded as unk; a copied OOV's id maps back to its word with ``Vocabulary.to_text(...,
    oovs=oovs)``) and ``init_state`` (leading axis B) from :meth:`PointerGenerator.encode`.
  """
  variables = params if "params" in params else {"params": params}
  # Figure 6's perturbations are <[B, T, ...]> teacher-forcing variables: never decoded.
  variables = {k: v for k, v in variables.items() if k != "perturbations"}
  init_state = model.apply(variables, batch, method=PointerGenerator.encode)

  def tokens_to_logits(tokens, state):
    outputs, state = model.apply(variables, tokens, state,
                                 method=PointerGenerator.decode_step)
    return jnp.log(outputs["probs"] + PROB_EPS), state

  return tokens_to_logits, init_state

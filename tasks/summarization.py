"""What the summarization tasks share (RUM paper, TACL 2019, §4 E; See et al. 2017): the
pointer-generator's batches, loss, beam decoder and ROUGE texts. Not a task itself:
:func:`make_task` binds its functions (``functools.partial``) to a task's ``data(config)``
(``summ_synthetic``, ``cnn_dailymail``, ``stories``); the configs are
:mod:`tasks.configs.summarization`'s.

An example is ``{"article": [tokens], "summary": [[tokens of sentence 1], ...],
"article_sentences": [[tokens], ...]}`` (lower-cased words). From the training examples:
a vocabulary of the ``vocab_size`` most frequent words (``<pad>`` 0, ``<unk>`` 1, ``<s>``,
``</s>`` included; 50k in the paper). Per example (See et al.'s ``Example``):

* ``article`` <int32>[S]: the first ``max_enc_steps`` tokens, OOV -> ``<unk>``;
  ``article_ext``: the same over the article-extended vocabulary (its k-th OOV is
  ``vocab_size + k``, :meth:`Vocabulary.encode_extended`); ``article_lengths``;
* ``dec_inputs`` <int32>[T] = ``<s>`` + summary and ``targets`` = summary + ``</s>``
  (the summary's OOVs that occur in the article get their extended ids, others
  ``<unk>``), cut to ``max_dec_steps`` (no ``</s>`` when cut, as the reference);
  ``target_lengths``;
* ``key`` <int32>: ``split code * 2^24 + index``, so host code finds the example's text and
  OOVs (text cannot ride in a sharded batch); ``coverage_weight`` <float32>: the coverage
  loss weight of the run (``cov_loss_wt`` if ``model.coverage`` else 0) and ``step_weight``
  <float32>: the weight of each of the row's decoder steps in the loss (``1 / L`` for
  ``loss_normalization="example"``, 1 for ``"token"``), so the loss needs no config.

Loss: ``l_bt = -log(P(gold) + eps)`` (NaN-proof) ``+ coverage_weight x sum_i min(a_i,
c_i)`` (the coverage loss) at the real decoder steps, averaged as
``sum_bt w_b l_bt / sum_bt w_b`` with ``w_b = step_weight``: with
``loss_normalization="example"`` (the default) that is the mean over the rows of each row's
mean over its ``L_b`` steps, See et al.'s ``_mask_and_avg`` (the reference's loss, and its
coverage loss alike); with ``"token"`` the mean over all real steps of the batch.
Decoding: :func:`rumjax.decoding.beam_search` (``beam_size`` 4, ``min_len``, ``max_len``,
top-2k expansion inside the search, finished hypotheses ranked by average
log-probability), the state carries the decoder's carry, context and coverage. ROUGE
(:mod:`rumjax.evaluators.rouge`): the decoded ids back to words (extended ids -> the
article's OOVs), ``</s>`` and after dropped, compared with the reference summary sentences
(one per line, for ``rougeLsum``); ``lead3``: the first three article sentences.
"""

import functools
from typing import Any, Callable, Mapping, Sequence

import jax.numpy as jnp
import numpy as np

from rumjax import decoding
from rumjax.models import build_model as build_registered
from rumjax.models import pointer_generator as pg
from tasks import common
from tasks.base import Task
from tasks.configs import summarization as config_lib
from tasks.data import ShuffledBatches, bucket_length, eval_batches
from tasks.text import summaries as summaries_lib
from tasks.text import tokenizers
from tasks.text.vocabulary import Vocabulary

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPLIT_CODES = {"train": 0, "dev": 1, "test": 2}
KEY_SHIFT = 1 << 24
EVAL_SPLITS = ("dev", "test")
SENTENCE_ENDS = (".", "!", "?")
MISSING_SPLIT_HINT = " Or evaluate on dev: --config.evals.<name>.split=dev."


# --------------------------------------------------------------------------- config


def validate_config(config, name: str, variants=config_lib.VARIANTS) -> None:
  """``ValueError`` naming the first bad field of the summarization task ``name`` (whose
  variants are ``variants``): the loop's fields (:func:`tasks.common.validate_common`) and
  :func:`validate_fields`."""
  common.check_task(config, name, variants)
  common.validate_common(config, EVAL_SPLITS)
  validate_fields(config)


def validate_real_data_config(config, name: str) -> None:
  """:func:`validate_config` and the fields of
  :func:`tasks.configs.summarization.real_data_config`."""
  validate_config(config, name)
  common.check_int(config, "rouge_every", 0)
  common.check_int(config, "rouge_batches", 1)


def validate_fields(config) -> None:
  """``ValueError`` naming the first bad summarization field."""
  if config["configuration"] not in config_lib.CONFIGURATIONS:
    raise ValueError(f"config.configuration={config['configuration']!r} must be one of "
                     f"{list(config_lib.CONFIGURATIONS)}.")
  for field, low in (("vocab_size", 5), ("max_oovs", 0), ("max_enc_steps", 1),
                     ("max_dec_steps", 1), ("beam_size", 1), ("min_dec_steps", 0),
                     ("max_decode_steps", 1)):
    common.check_int(config, field, low)
  if config["min_dec_steps"] > config["max_decode_steps"]:
    raise ValueError(f"config.min_dec_steps={config['min_dec_steps']} must be <= "
                     f"config.max_decode_steps={config['max_decode_steps']}.")
  if config.get("loss_normalization") not in ("example", "token"):
    raise ValueError(f"config.loss_normalization={config.get('loss_normalization')!r} "
                     "must be 'example' (See et al.) or 'token'.")
  if not (common._is_number(config["cov_loss_wt"]) and config["cov_loss_wt"] >= 0):
    raise ValueError(f"config.cov_loss_wt={config['cov_loss_wt']!r} must be >= 0.")
  m = config.model
  if m.name != "pointer_generator":
    raise ValueError(f"config.model.name={m.name!r}: summarization needs "
                     "'pointer_generator'.")
  from rumjax.cells import cell_names
  for field in ("encoder_cell", "decoder_cell"):
    if m[field] not in cell_names():
      raise ValueError(f"config.model.{field}={m[field]!r} is not a registered cell; known: "
                       f"{cell_names()}.")
  for field in ("embed_dim", "hidden_size"):
    common.check_int(m, field, 1, "config.model")
  common.check_rum_fields(m, bools=("pointer", "coverage", "update_gate", "learn_lam"))


# ----------------------------------------------------------------------------- data


class Data:
  """The vocabulary and the encoded splits of a summarization data set.

  Attributes:
    vocab: the :class:`Vocabulary` (``vocab_size`` entries at most).
    splits: ``{split: {"article", "article_ext", "article_lengths", "dec_inputs",
      "targets", "target_lengths", "key"}}`` NumPy arrays.
    examples: ``{split: [example dicts]}`` (module docstring) with their ``"oovs"``.
    missing: ``{split: message}`` of the splits a task expected but the data lacks (set by
      the task; :func:`eval_split_batches` raises the message).
  """

  def __init__(self, vocab, splits, examples):
    self.vocab, self.splits, self.examples = vocab, splits, examples
    self.missing = {}

  def size(self, split: str) -> int:
    return len(self.examples[split])

  def max_oovs(self) -> int:
    """The most article words outside the vocabulary in one example of any split: the
    copy slots of the extended vocabulary the model needs (``config.max_oovs``)."""
    return max((len(ex["oovs"]) for exs in self.examples.values() for ex in exs), default=0)

  def example(self, key: int) -> dict:
    code, index = divmod(int(key), KEY_SHIFT)
    split = {v: k for k, v in SPLIT_CODES.items()}[code]
    return self.examples[split][index]


def summary_tokens(example: Mapping[str, Any]) -> list:
  return [t for sentence in example["summary"] for t in sentence]


def encode(examples: Mapping[str, Sequence[dict]], *, vocab_size: int, max_enc_steps: int,
           max_dec_steps: int) -> Data:
  """Encodes every split (module docstring); the vocabulary from ``examples["train"]``."""
  vocab = Vocabulary.build(
      ([*ex["article"], *summary_tokens(ex)] for ex in examples["train"]),
      max_size=vocab_size, pad=PAD, unk=UNK, bos=BOS, eos=EOS)
  splits, kept = {}, {}
  for split, exs in examples.items():
    n = len(exs)
    s_max = max(1, min(max_enc_steps, max((len(ex["article"]) for ex in exs), default=1)))
    arrays = {"article": np.zeros((n, s_max), np.int32),
              "article_ext": np.zeros((n, s_max), np.int32),
              "article_lengths": np.zeros((n,), np.int32),
              "dec_inputs": np.zeros((n, max_dec_steps), np.int32),
              "targets": np.zeros((n, max_dec_steps), np.int32),
              "target_lengths": np.zeros((n,), np.int32),
              "key": SPLIT_CODES[split] * KEY_SHIFT + np.arange(n, dtype=np.int32)}
    kept[split] = []
    for i, ex in enumerate(exs):
      article = list(ex["article"])[:max_enc_steps]
      ext, oovs = vocab.encode_extended(article)
      arrays["article"][i, :len(article)] = vocab.encode(article)
      arrays["article_ext"][i, :len(article)] = ext
      arrays["article_lengths"][i] = len(article)
      summary = vocab.encode_with_oovs(summary_tokens(ex), oovs)
      inputs = np.concatenate([[vocab.bos_id], summary])[:max_dec_steps]
      targets = np.concatenate([summary, [vocab.eos_id]])[:max_dec_steps]
      arrays["dec_inputs"][i, :len(inputs)] = inputs
      arrays["targets"][i, :len(targets)] = targets
      arrays["target_lengths"][i] = len(targets)
      kept[split].append({**ex, "oovs": oovs})
    for v in arrays.values():
      v.flags.writeable = False
    splits[split] = arrays
  return Data(vocab, splits, kept)


def batch_maker(arrays: Mapping[str, np.ndarray], coverage_weight: float,
                normalization: str = "example"):
  """``idx -> batch`` of rows ``idx``, articles cut to the power-of-two bucket of the
  longest real one (:func:`tasks.data.bucket_length`, at least 16, at most the split's
  width: few shapes, so few compilations), with the per-row ``coverage_weight`` and
  ``step_weight`` (module docstring)."""

  def make(idx):
    batch = {k: v[idx] for k, v in arrays.items()}
    width = bucket_length(int(batch["article_lengths"].max()), 16, arrays["article"].shape[1])
    for k in ("article", "article_ext"):
      batch[k] = np.ascontiguousarray(batch[k][:, :width])
    batch["coverage_weight"] = np.full((len(idx),), coverage_weight, np.float32)
    lengths = batch["target_lengths"].astype(np.float32)
    batch["step_weight"] = (1.0 / np.maximum(lengths, 1.0) if normalization == "example"
                            else np.ones_like(lengths))
    return batch

  return make


def coverage_weight(config) -> float:
  return float(config.cov_loss_wt) if config.model.coverage else 0.0


def loss_normalization(config) -> str:
  """``config.loss_normalization`` (runs saved before the field existed: ``"token"``)."""
  return config.get("loss_normalization", "token")


def _split_batch_maker(config, d: Data, split: str):
  return batch_maker(d.splits[split], coverage_weight(config), loss_normalization(config))


def train_data(config, *, data: Callable[[Any], Data], process_index: int = 0,
               process_count: int = 1) -> ShuffledBatches:
  """Endless shuffled training batches of ``data(config)``, deterministic in
  ``(seed, step)``, resumable."""
  d = data(config)
  return ShuffledBatches(d.size("train"), _split_batch_maker(config, d, "train"),
                         seed=config.seed, batch_size=config.batch_size,
                         process_index=process_index, process_count=process_count)


def eval_data(config, split: str, *, data: Callable[[Any], Data], name: str,
              process_index: int = 0, process_count: int = 1):
  """The examples of ``split`` (one of :data:`EVAL_SPLITS`) of ``data(config)`` in order,
  each once (padded rows of the last batch: mask 0); a split the task ``name`` expected
  but its data lacks is the one-line message of ``Data.missing``."""
  if split not in EVAL_SPLITS:
    raise ValueError(f"unknown {name} split {split!r}; known splits are "
                     f"{list(EVAL_SPLITS)}.")
  d = data(config)
  if split in d.missing:
    raise ValueError(d.missing[split])
  return eval_batches(d.size(split), _split_batch_maker(config, d, split),
                      batch_size=config.batch_size, process_index=process_index,
                      process_count=process_count)


# ---------------------------------------------------------------------------- model


def build_model(config, *, data: Callable[[Any], Data]):
  """The pointer-generator of ``config.model`` over the vocabulary of ``data(config)``.

  Raises:
    ValueError: when an article has more words outside the vocabulary than the model has
      copy slots (``config.max_oovs``): their extended ids would point past the final
      distribution (a NaN loss at the first step).
  """
  d = data(config)
  vocab, needed = d.vocab, d.max_oovs()
  if needed > config.max_oovs:
    raise ValueError(f"an article has {needed} words outside the {len(vocab)}-word "
                     f"vocabulary, more than the {config.max_oovs} copy slots of "
                     f"config.max_oovs: set --config.max_oovs={needed} (or more).")
  return build_registered(config.model, vocab_size=len(vocab), max_oovs=config.max_oovs,
                          unk_id=vocab.unk_id)


def loss_and_metrics(outputs, batch):
  """``nll + coverage_weight * coverage_loss`` averaged with the rows' ``step_weight``
  (module docstring), and the metrics ``loss`` (the same average), ``nll``,
  ``coverage_loss`` and ``accuracy`` (argmax of the final distribution equals the target;
  these three per real decoder step, the token mean), as ``(sum, count)`` pairs over real
  rows.

  ``last_state_norm`` (the RUM paper's Figure 6b, "norm of the last hidden state"):
  ``||s_{L-1}||_2``, the model's ``state_norm`` (the L2 norm of the decoder state, the
  concatenated vector leaves of its carry) at each row's last real decoder step
  ``L - 1`` (``L = target_lengths``), as ``(sum over real rows with L > 0, their
  number)``; the loop logs it as ``train_last_state_norm``. Without ``state_norm`` in
  ``outputs`` the metric is left out."""
  targets = batch["targets"]
  rows = batch.get("mask", jnp.ones(targets.shape[:1], jnp.float32))
  steps = (jnp.arange(targets.shape[1])[None] < batch["target_lengths"][:, None]) * rows[:, None]
  gold = jnp.take_along_axis(outputs["probs"], targets[..., None], axis=-1)[..., 0]
  nll = -jnp.log(gold + pg.PROB_EPS)
  cov = jnp.sum(jnp.minimum(outputs["attention"], outputs["coverage"]), axis=-1)
  n = jnp.sum(steps)
  weighted = steps * batch["step_weight"][:, None]
  total = jnp.sum((nll + batch["coverage_weight"][:, None] * cov) * weighted)
  denominator = jnp.sum(weighted)
  correct = jnp.sum((jnp.argmax(outputs["probs"], axis=-1) == targets) * steps)
  metrics = {"loss": (total, denominator), "nll": (jnp.sum(nll * steps), n),
             "coverage_loss": (jnp.sum(cov * steps), n), "accuracy": (correct, n)}
  if "state_norm" in outputs:
    lengths = jnp.asarray(batch["target_lengths"], jnp.int32)
    last = jnp.clip(lengths - 1, 0, targets.shape[1] - 1)
    norm = jnp.take_along_axis(outputs["state_norm"], last[:, None], axis=1)[:, 0]
    real = rows * (lengths > 0)
    metrics["last_state_norm"] = (jnp.sum(jnp.where(real > 0, norm, 0.0)), jnp.sum(real))
  return total / jnp.maximum(denominator, 1.0), metrics


def decoder(config, model, vocab: Vocabulary, *, beam_size: int):
  """``fn(params, batch, model_state) -> ({"sequences": <int>[B, L]}, model_state)``: the
  best hypothesis of a beam search of ``beam_size`` (1: greedy)."""
  bos, eos = vocab.bos_id, vocab.eos_id

  def decode(params, batch, model_state):
    fn, init = pg.make_tokens_to_logits(model, params, batch)
    kwargs = dict(batch_size=batch["article"].shape[0], bos_id=bos, eos_id=eos,
                  max_len=config.max_decode_steps, min_len=config.min_dec_steps)
    if beam_size == 1:
      seqs, _ = decoding.greedy_search(fn, init, **kwargs)
    else:
      seqs, _ = decoding.beam_search(fn, init, beam_size=beam_size,
                                     length_normalization="average", **kwargs)
      seqs = seqs[:, 0]
    return {"sequences": seqs}, model_state

  return decode


def predict_fns(config, model, *, data: Callable[[Any], Data]) -> dict:
  """``"beam"`` (``config.beam_size``) and ``"greedy"`` decoders over the vocabulary of
  ``data(config)``."""
  vocab = data(config).vocab
  return {"beam": decoder(config, model, vocab, beam_size=config.beam_size),
          "greedy": decoder(config, model, vocab, beam_size=1)}


# ------------------------------------------------------------------------- texts


def decoded_words(ids, vocab: Vocabulary, oovs: Sequence[str]) -> list:
  """Decoded ids as words: extended ids -> the article's OOVs, stop at ``</s>``."""
  return vocab.to_tokens(np.asarray(ids), oovs=oovs)


def reference_text(example) -> str:
  return "\n".join(" ".join(s) for s in example["summary"])


def token_sentences(tokens: Sequence[str]) -> list:
  """Tokens cut into sentences after each ``.``, ``!`` or ``?`` token (See et al.'s
  ``decode.py`` cuts decoded summaries at ``.`` before ROUGE); a rest without one is the
  last sentence."""
  out, current = [], []
  for t in tokens:
    current.append(t)
    if t in SENTENCE_ENDS:
      out.append(current)
      current = []
  return out + ([current] if current else [])


def decoded_text(words: Sequence[str]) -> str:
  """Decoded words as ROUGE-Lsum text: one sentence (:func:`token_sentences`) per line."""
  return "\n".join(" ".join(s) for s in token_sentences(words))


def text_example(article_sentences: Sequence[str], summary_sentences: Sequence[str]) -> dict:
  """An example (module docstring) from raw text: each sentence lower-cased and tokenised
  by :func:`tasks.text.tokenizers.treebank_words` (See et al. lower-case the
  Stanford-tokenised text); sentences with no token are dropped (an empty article or
  summary gives an empty list: the model and the loss cope with length 0)."""
  article = [s for s in (tokenizers.treebank_words(x) for x in article_sentences) if s]
  summary = [s for s in (tokenizers.treebank_words(x) for x in summary_sentences) if s]
  return {"article": [t for s in article for t in s], "summary": summary,
          "article_sentences": article}


def decoded_rows(d: Data, batch, outputs) -> list:
  """``(key, example, decoded text)`` of each real row (mask > 0) of ``batch`` whose
  decoder ``outputs`` hold ``"sequences"`` (:func:`decoded_text` of the words)."""
  seqs = np.asarray(outputs["sequences"])
  out = []
  for r, (key, m) in enumerate(zip(batch["key"], batch["mask"])):
    if m > 0:
      ex = d.example(key)
      out.append((int(key), ex, decoded_text(decoded_words(seqs[r], d.vocab, ex["oovs"]))))
  return out


def submission(config, rows, *, data: Callable[[Any], Data]) -> list:
  """The rows of :func:`rumjax.training.predict_checkpoint` with a decoder's
  ``"sequences"`` as jsonl records, decoded and reference summaries side by side:
  ``{"split", "index", "decoded", "reference", "article"}`` (texts one sentence per line);
  padded rows dropped."""
  d, names = data(config), {v: k for k, v in SPLIT_CODES.items()}
  out = []
  for batch, outputs in rows:
    for key, ex, decoded in decoded_rows(d, batch, outputs):
      code, index = divmod(key, KEY_SHIFT)
      out.append({"split": names[code], "index": index, "decoded": decoded,
                  "reference": reference_text(ex), "article": " ".join(ex["article"])})
  return out


def summary_texts(batch, outputs, *, d: Data) -> list:
  """(decoded summary, reference) of each real row, one sentence per line
  (:func:`decoded_text`)."""
  return [(decoded, reference_text(ex)) for _, ex, decoded in decoded_rows(d, batch, outputs)]


def lead3_texts(batch, outputs, *, d: Data) -> list:
  """(the first three article sentences, reference) of each real row: the LEAD-3
  baseline."""
  del outputs
  examples = [d.example(k) for k, m in zip(batch["key"], batch["mask"]) if m > 0]
  return [(summaries_lib.lead([" ".join(s) for s in ex["article_sentences"]], 3),
           reference_text(ex)) for ex in examples]


def text_fns(config, *, data: Callable[[Any], Data]) -> dict:
  """The ROUGE evaluators' texts of ``data(config)``: ``"summary"``
  (:func:`summary_texts`) and ``"lead3"`` (:func:`lead3_texts`)."""
  d = data(config)
  return {"summary": functools.partial(summary_texts, d=d),
          "lead3": functools.partial(lead3_texts, d=d)}


def to_text(config, batch, row: int = 0, *, data: Callable[[Any], Data]) -> str:
  """Row ``row`` of ``batch`` as ``"<article> -> <reference summary>"``."""
  ex = data(config).example(batch["key"][row])
  return f"{' '.join(ex['article'])} -> {reference_text(ex)}"


# ------------------------------------------------------------------------- task


def make_task(*, name: str, get_config: Callable, validate_config: Callable,
              data: Callable[[Any], Data],
              variants: tuple = config_lib.CONFIGURATIONS) -> Task:
  """The :class:`tasks.base.Task` of a summarization task whose ``data(config)`` gives its
  :class:`Data`: this module's batches, pointer-generator, loss, ``"beam"`` / ``"greedy"``
  decoders (``launch.predict`` writes the beam's by default), ROUGE texts, submission rows
  and ``to_text``, each bound to ``data`` (and ``eval_data`` to ``name``, for its
  errors); ``variants``: the names ``get_config`` takes (default: the configurations)."""
  bind = functools.partial
  return Task(
      name=name, get_config=get_config, validate_config=validate_config,
      train_data=bind(train_data, data=data), eval_data=bind(eval_data, data=data, name=name),
      build_model=bind(build_model, data=data), loss_and_metrics=loss_and_metrics,
      variants=tuple(variants), eval_splits=EVAL_SPLITS,
      predict_fns=bind(predict_fns, data=data), text_fns=bind(text_fns, data=data),
      submission=bind(submission, data=data), submission_pred="beam",
      submission_preds=("beam", "greedy"),
      to_text=bind(to_text, data=data))

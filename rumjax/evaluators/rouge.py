"""The ``rouge`` evaluator: ROUGE F1 of generated texts (e.g. decoded summaries) against
references, computed by Google's ``rouge-score`` package (``rouge_score.rouge_scorer``),
not by a re-implementation.

The predict function (default ``"predict"``; a summarization task names its beam decoder)
runs jit-compiled on each batch, sharded on the mesh like the ``loss`` evaluator's; its
outputs come back to the host and the task's text function (the ``texts`` option, a name
of the task's ``text_fns(config)``, see :mod:`rumjax.evaluators.base`) turns them, with
the host batch, into one ``(hypothesis, reference)`` pair per real row (``mask`` 1), in
plain Python (e.g. extended-vocabulary ids -> the article's OOV words).

What is reported, as ``f"{prefix}_{rouge_type}"`` for each of ``rouge_types`` (default
``rouge1``, ``rouge2``, ``rougeLsum``) and ``f"{prefix}_rouge_count"``:

* the mean over the pairs of the per-pair **F1** (``fmeasure``), **in percent** (0-100),
  as the RUM paper and See et al. (2017) report it; ``_rouge_count`` is the number of pairs
  (a split without real rows is an error, as for the other evaluators, not a score of 0);
* tokens are rouge-score's: lowercased runs of ``[a-z0-9]`` (other characters, including
  non-ASCII letters, separate tokens and are dropped); **Porter stemming is on by
  default** (``use_stemmer=True``; rouge-score stems tokens longer than 3 characters; the
  stemmer is code in nltk and needs no nltk data download);
* ``f"{prefix}_repeated_trigrams"``: the mean over the hypotheses of
  :func:`repetition_rate` (the fraction of a text's whitespace-token trigrams that repeat an
  earlier one of the same text), the repetition that See et al.'s coverage reduces;
* ``rougeLsum`` is the summary-level LCS: hypothesis and reference are split into
  sentences on ``"\\n"`` (so text functions must separate sentences with newlines), the
  union LCS of every reference sentence against all hypothesis sentences is counted; it
  equals ``rougeL`` (the LCS of the whole texts as one sequence) for one-sentence texts.

Multi-process: not supported. This evaluator assumes one process (any number of local
devices) and raises at construction when ``jax.process_count() > 1``: each process would
have to score its own rows and the means be combined weighted by their counts, which is
not implemented.
"""

import re
from typing import Any, Callable, Hashable, Iterable, Mapping, Optional, Sequence

import jax
import numpy as np

from rumjax.evaluators.base import register_evaluator
from rumjax import sharding as sharding_lib

DEFAULT_ROUGE_TYPES = ("rouge1", "rouge2", "rougeLsum")
# The types rouge-score knows: rouge1 .. rouge9 (n-grams), rougeL, rougeLsum.
_ROUGE_TYPE = re.compile(r"rouge([1-9]|L|Lsum)")


def _rouge_types(rouge_types) -> tuple[str, ...]:
  if isinstance(rouge_types, str):
    rouge_types = (rouge_types,)
  rouge_types = tuple(rouge_types)
  bad = [t for t in rouge_types if not (isinstance(t, str) and _ROUGE_TYPE.fullmatch(t))]
  if bad or not rouge_types:
    raise ValueError(f"rouge_types={rouge_types!r}: each must be one of rouge1 .. rouge9, "
                     "rougeL, rougeLsum (and there must be at least one).")
  return rouge_types


def _scorer(rouge_types: Sequence[str], use_stemmer: bool):
  """rouge-score's scorer (imported here: nltk takes seconds to import)."""
  try:
    from rouge_score import rouge_scorer  # pylint: disable=g-import-not-at-top
  except ImportError as err:
    raise ImportError("the rouge evaluator needs Google's rouge-score package: "
                      "pip install 'rouge-score>=0.1.2'.") from err
  return rouge_scorer.RougeScorer(list(rouge_types), use_stemmer=use_stemmer)


def rouge_f1(pairs: Iterable[tuple[str, str]],
             rouge_types: Sequence[str] = DEFAULT_ROUGE_TYPES,
             use_stemmer: bool = True) -> dict[str, float]:
  """Mean ROUGE F1, in percent, over ``(hypothesis, reference)`` pairs.

  Args:
    pairs: ``(hypothesis, reference)`` strings, sentences separated by ``"\\n"``.
    rouge_types: rouge-score types (``rouge1`` .. ``rouge9``, ``rougeL``, ``rougeLsum``).
    use_stemmer: Porter stemming of tokens (rouge-score's ``use_stemmer``).

  Returns:
    ``{rouge_type: mean F1 * 100}`` (0.0 for every type when there is no pair). Each pair
    is scored as ``RougeScorer.score(target=reference, prediction=hypothesis)``.
  """
  rouge_types = _rouge_types(rouge_types)
  scorer = _scorer(rouge_types, use_stemmer)
  sums = dict.fromkeys(rouge_types, 0.0)
  count = 0
  for i, pair in enumerate(pairs):
    if (not isinstance(pair, (tuple, list)) or len(pair) != 2
        or not all(isinstance(s, str) for s in pair)):
      raise TypeError(f"pair {i} is {pair!r:.80}; expected (hypothesis, reference) strings.")
    hypothesis, reference = pair
    scores = scorer.score(reference, hypothesis)
    for t in rouge_types:
      sums[t] += scores[t].fmeasure
    count += 1
  return {t: 100.0 * s / count if count else 0.0 for t, s in sums.items()}


def repetition_rate(tokens: Sequence[Hashable], n: int = 3) -> float:
  """The fraction of the ``n``-grams of ``tokens`` that repeat an earlier ``n``-gram of the
  same sequence (0 for fewer than ``n`` tokens).

  With ``m = len(tokens) - n + 1`` n-grams of which ``u`` are distinct, the rate is
  ``(m - u) / m``: ``a b c a b c`` has trigrams ``abc bca cab abc``, one repeated: 0.25.
  """
  if isinstance(tokens, str):
    raise TypeError("repetition_rate takes a sequence of tokens, not a string (e.g. "
                    "text.split()).")
  if not isinstance(n, int) or isinstance(n, bool) or n < 1:
    raise ValueError(f"n={n!r} must be an integer >= 1.")
  tokens = list(tokens)
  grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
  if not grams:
    return 0.0
  return (len(grams) - len(set(grams))) / len(grams)


def _real_rows(batch: Mapping[str, Any]) -> int:
  """Rows with ``mask`` 1 (all rows when the batch has no mask)."""
  if "mask" in batch:
    return int(np.count_nonzero(np.asarray(batch["mask"])))
  leaves = jax.tree.leaves(batch)
  return int(np.shape(leaves[0])[0]) if leaves else 0


@register_evaluator("rouge")
class RougeEvaluator:
  """ROUGE F1 (percent) of the task's text pairs over the batches of a split.

  Args:
    predict_fn: ``(params, batch, model_state) -> (outputs, model_state)``, e.g. a beam
      decoder giving ``{"sequences": <int>[B, L]}``.
    data, mesh, prefix, batches, model_state: see :mod:`rumjax.evaluators.base`.
    text_fns: the task's ``text_fns(config)`` (passed by ``build_evaluators``).
    texts: the name of the text function ``fn(batch, outputs) -> [(hypothesis,
      reference), ...]`` (one pair per real row) in ``text_fns``; required.
    rouge_types: the ROUGE types reported (default ``rouge1``, ``rouge2``, ``rougeLsum``).
    use_stemmer: Porter stemming (default True).
  """
  default_pred = "predict"
  uses_text_fns = True

  def __init__(self, predict_fn, *, data, mesh, prefix: str, batches: Optional[int] = None,
               model_state=None, text_fns: Optional[Mapping[str, Callable]] = None,
               texts: Optional[str] = None,
               rouge_types: Sequence[str] = DEFAULT_ROUGE_TYPES, use_stemmer: bool = True):
    where = f"config.evals.{prefix}"
    if jax.process_count() > 1:
      raise NotImplementedError(
          f"{where}: the rouge evaluator runs on one process only (jax.process_count()="
          f"{jax.process_count()}); combining per-process means is not implemented.")
    text_fns = dict(text_fns or {})
    if texts not in text_fns:
      raise ValueError(f"{where}.texts={texts!r} is not a text function of this task; "
                       f"known: {sorted(text_fns)}.")
    if not isinstance(use_stemmer, bool):
      raise ValueError(f"{where}.use_stemmer={use_stemmer!r} must be True or False.")
    try:
      self.rouge_types = _rouge_types(rouge_types)
    except ValueError as err:
      raise ValueError(f"{where}.{err}") from None
    _scorer(self.rouge_types, use_stemmer)  # fails now if rouge-score is missing
    self.predict_fn, self.data, self.mesh = predict_fn, data, mesh
    self.prefix, self.batches, self.model_state = prefix, batches, model_state
    self.texts, self.text_fn, self.use_stemmer = texts, text_fns[texts], use_stemmer

  def pairs(self, state) -> list[tuple[str, str]]:
    """The ``(hypothesis, reference)`` pairs of the split's real rows, in order."""
    out = []
    model_state = self.model_state() if self.model_state is not None else None
    for i, batch in enumerate(self.data()):
      if self.batches and i >= self.batches:
        break
      outputs, model_state = self.predict_fn(
          state.params, sharding_lib.shard_batch(batch, self.mesh), model_state)
      outputs = jax.tree.map(np.asarray, jax.device_get(outputs))
      pairs = list(self.text_fn(batch, outputs))
      rows = _real_rows(batch)
      if len(pairs) != rows:
        raise ValueError(f"evaluator {self.prefix!r}: the text function {self.texts!r} gave "
                         f"{len(pairs)} pairs for batch {i}, which has {rows} real rows "
                         "(mask 1); it must give one (hypothesis, reference) per real row.")
      out.extend(pairs)
    return out

  def run(self, state) -> dict[str, float]:
    pairs = self.pairs(state)
    if not pairs:
      raise ValueError(f"config.evals.{self.prefix}: the split has no real rows (check its "
                       "split, batches and batch_size).")
    scores = rouge_f1(pairs, self.rouge_types, self.use_stemmer)
    out = {f"{self.prefix}_{t}": v for t, v in scores.items()}
    out[f"{self.prefix}_rouge_count"] = float(len(pairs))
    out[f"{self.prefix}_repeated_trigrams"] = (
        float(np.mean([repetition_rate(h.split()) for h, _ in pairs])))
    return out

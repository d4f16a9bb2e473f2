"""The ``perplexity`` evaluator: bits per character and perplexity over a whole stream.

The predict function (default ``"metrics"``) must report ``"nll": (total negative
log-likelihood in nats, number of target tokens)`` per batch (with the model's state
carried from window to window: see :mod:`rumjax.evaluators.loss`). Over the split::

    bpc = total NLL / (tokens * ln 2)        ppl = exp(total NLL / tokens)

reported as ``f"{prefix}_bpc"``, ``f"{prefix}_ppl"``, ``f"{prefix}_nll"`` (nats per token)
and ``f"{prefix}_tokens"`` (the count, so that a reader can check that the whole stream
was read: it equals the split's number of targets).
"""

import math
from rumjax.evaluators.base import register_evaluator
from rumjax.evaluators.loss import LossEvaluator


@register_evaluator("perplexity")
class PerplexityEvaluator(LossEvaluator):
  """Total NLL and token count over a split -> BPC, perplexity, NLL per token, tokens.

  Args: as :class:`rumjax.evaluators.loss.LossEvaluator`.
  """

  def run(self, state) -> dict[str, float]:
    totals = self.sums(state)
    if "nll" not in totals:
      raise ValueError(f"evaluator {self.prefix!r}: the predict function reports no 'nll' "
                       f"(it has {sorted(totals)}); the task's loss_and_metrics must give "
                       "'nll': (total NLL in nats, tokens).")
    nll, tokens = (float(v) for v in totals["nll"])
    if not tokens:
      raise ValueError(f"config.evals.{self.prefix}: the split has no target tokens (every "
                       "position is padding); check its split and the data.")
    per_token = nll / tokens
    return {f"{self.prefix}_nll": per_token, f"{self.prefix}_bpc": per_token / math.log(2),
            f"{self.prefix}_ppl": math.exp(min(per_token, 700.0)),
            f"{self.prefix}_tokens": tokens}

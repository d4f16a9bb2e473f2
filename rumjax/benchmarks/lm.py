"""Training steps of the PTB language models side by side (FS-RUM-2 vs FS-LSTM-2, RUM 1000
vs LN-LSTM 1000, ..., and ``flax_lstm1000``: Flax's ``OptimizedLSTMCell(1000)`` as core):
forward and backward of the mean cross-entropy on random tokens, dropout and zoneout on.

The variants' configs come from the ``ptb`` task, which the caller passes in
(``get_config``: ``tasks.configs.ptb.get_config``, ``build_core``: ``tasks.ptb.build_core``):
the library never imports a task. ``dtype`` (a name: float32 or bfloat16) is the models'
``config.model.dtype``, the precision policy.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from rumjax import metrics
from rumjax.benchmarks import timing
from rumjax.cells.base import resolve_dtype
from rumjax.models import lm

LM_VOCAB = 50
LM_SIZES = ("hidden_size", "fast_size", "slow_size")


def parse_lm_shape(text, scale):
  """``(B, T)`` of ``BxT``; ``scale`` must be positive."""
  shape = timing.parse_dims(text, 2)
  if shape is None or scale <= 0:
    raise ValueError(f"lm_shape {text!r} is not BxT or lm_scale "
                     f"{scale} is not positive.")
  return shape


def lm_model(name, scale, get_config, build_core, dtype="float32"):
  """``(LanguageModel, base)`` of a ``ptb`` variant or ``flax_lstm1000``, hidden sizes
  divided by ``scale``, computing in ``dtype`` (a name); ``base`` is the candidate its ratio
  is taken to. ``get_config(variant)`` and ``build_core(model)``: the ``ptb`` task's."""
  variant = "lstm1000" if name == "flax_lstm1000" else name
  m = get_config(variant).model
  for field in LM_SIZES:
    if field in m:
      m[field] = max(1, round(m[field] / scale))
  m["dtype"] = jnp.dtype(resolve_dtype(dtype)).name
  core = (nn.OptimizedLSTMCell(m.hidden_size, dtype=resolve_dtype(dtype)) if name != variant
          else build_core(m))
  model = lm.LanguageModel(core, LM_VOCAB, embed_dim=m.embed_dim, dropout_rate=m.dropout_rate,
                           dtype=resolve_dtype(dtype))
  return model, "fs_lstm2" if m.core == "fast_slow" else "lstm1000"


def make_lm_step(model, b, t):
  """``(jitted step, (params, carry, tokens, key))``: the gradient of the mean
  cross-entropy w.r.t. the parameters, and the carry after the window."""
  tokens = jax.random.randint(jax.random.key(0), (b, t + 1), 0, LM_VOCAB)
  carry = lm.initial_state(model, b)
  params = model.init(jax.random.key(1), {"inputs": tokens[:, :-1]}, model_state=carry)

  def loss(p, carry, tokens, key):
    logits, carry = model.apply(p, {"inputs": tokens[:, :-1]}, train=True,
                                model_state=carry, rngs={"dropout": key})
    return metrics.cross_entropy(logits, tokens[:, 1:]).mean(), carry
  step = jax.jit(jax.value_and_grad(loss, has_aux=True))
  return step, (params, carry, tokens, jax.random.key(2))


def run_lm(names, shape, scale, repeats, get_config, build_core, dtype="float32"):
  """Times the language models' training steps in ``dtype``, alternated per round."""
  b, t = shape
  runs, rows = {}, {}
  for name in names:
    model, base = lm_model(name, scale, get_config, build_core, dtype)
    f, args = make_lm_step(model, b, t)
    runs[name], compile_s, _ = timing.compile_and_run(f, *args)
    rows[name] = {"base": base, "compile_s": compile_s,
                  "params": sum(x.size for x in jax.tree.leaves(args[0]))}
  timing.time_alternated(runs, rows, repeats)
  for r in rows.values():
    r["tokens_per_s"] = 1e3 * b * t / r["ms"]
    if r["base"] in rows:
      r[f"ratio_{r['base']}"] = r["ms"] / rows[r["base"]]["ms"]
  return rows


def format_lm(shape, rows):
  """The language-model table (header and one line per candidate)."""
  lines = [f"{'shape BxT':>10} {'cand':>14} {'params':>11} {'ms/step':>9} {'tokens/s':>9} "
           f"{'x fs_lstm2':>10} {'x lstm1000':>10} {'compile s':>9}"]
  for name, r in rows.items():
    ratios = [r.get(f"ratio_{base}") for base in ("fs_lstm2", "lstm1000")]
    ratios = " ".join(f"{'-':>10}" if x is None else f"{x:10.2f}" for x in ratios)
    lines.append(f"{shape:>10} {name:>14} {r['params']:11,d} {r['ms']:9.2f} "
                 f"{r['tokens_per_s']:9.0f} {ratios} {r['compile_s']:9.2f}")
  return "\n".join(lines)

"""Training steps of the attention encoders side by side (StarSaber vs Transformer vs
ReZero at equal layers and hidden size): forward and backward of the mean cross-entropy of
a 2-class ``classify`` model, dropout on, random full-length rows, in a computation dtype
(the models' ``dtype`` field, the precision policy; float32 parameters)."""

import jax
import jax.numpy as jnp
import numpy as np

from rumjax import metrics, models
from rumjax.benchmarks import timing
from rumjax.cells.base import resolve_dtype

ENCODER_VOCAB = 5000


def parse_encoder_args(shapes, size, names=()):
  """``([(B, T), ...], (L, D))`` of ``BxT`` strings and an ``LxD`` string; ``names`` must
  be models of :data:`rumjax.models.encoders.ENCODER_MODELS` (a ``ValueError`` before
  anything is timed: another model failed with a ``KeyError`` after the matmul peak)."""
  from rumjax.models.encoders import ENCODER_MODELS
  unknown = [n for n in names if n not in ENCODER_MODELS]
  if unknown:
    raise ValueError(f"--encoders: {unknown} are not encoder models; use some of "
                     f"{list(ENCODER_MODELS)}.")
  parsed = [timing.parse_dims(x, 2) for x in shapes]
  layers_d = timing.parse_dims(size, 2)
  if None in parsed or layers_d is None:
    raise ValueError(f"encoder_shapes {shapes} must be BxT and encoder_size "
                     f"{size!r} LxD (positive integers).")
  return parsed, layers_d


def make_encoder_step(name, layers, d, b, t, dtype="float32"):
  """``(jitted step, args)``: the gradient of the mean cross-entropy of a ``classify``
  encoder model (2 classes, dropout on, computing in ``dtype``, a name) w.r.t. its
  parameters; ``args[0]``: the parameters."""
  model = models.build_model({"name": name, "num_layers": layers, "hidden_size": d,
                              "embed_dim": d, "num_heads": 8, "ffn_size": None,
                              "dropout_rate": 0.1, "objective": "classify",
                              "dtype": jnp.dtype(resolve_dtype(dtype)).name},
                             vocab_size=ENCODER_VOCAB, num_classes=2)
  batch = {"inputs": jax.random.randint(jax.random.key(0), (b, t), 1, ENCODER_VOCAB),
           "lengths": np.full((b,), t, np.int32)}
  targets = jax.random.randint(jax.random.key(1), (b,), 0, 2)
  params = model.init(jax.random.key(2), batch, train=False)

  def loss(p, batch, targets, key):
    logits = model.apply(p, batch, train=True, rngs={"dropout": key})
    return metrics.cross_entropy(logits, targets).mean()
  step = jax.jit(jax.value_and_grad(loss))
  return step, (params, batch, targets, jax.random.key(3))


def _count(tree):
  return sum(x.size for x in jax.tree.leaves(tree))


def run_encoders(names, shapes, layers, d, repeats, dtype="float32"):
  """Times the encoders' training steps per shape in ``dtype``, alternated per round."""
  out = {}
  for shape in shapes:
    b, t = shape
    runs, rows = {}, {}
    for name in names:
      f, args = make_encoder_step(name, layers, d, b, t, dtype)
      runs[name], compile_s, _ = timing.compile_and_run(f, *args)
      rows[name] = {"compile_s": compile_s, "params": _count(args[0]),
                    "encoder_params": _count(args[0]["params"]["encoder"])}
    timing.time_alternated(runs, rows, repeats)
    for r in rows.values():
      r["tokens_per_s"] = 1e3 * b * t / r["ms"]
      if "transformer" in rows:
        r["ratio_transformer"] = r["ms"] / rows["transformer"]["ms"]
    out[f"{b}x{t}"] = rows
  return out


def format_encoders(size, tables):
  """The encoder table (header and one line per shape and candidate)."""
  lines = [f"{'LxD':>7} {'BxT':>7} {'cand':>18} {'params':>11} {'ms/step':>9} "
           f"{'tokens/s':>9} {'x transformer':>13} {'compile s':>9}"]
  for shape, rows in tables.items():
    for name, r in rows.items():
      ratio = r.get("ratio_transformer")
      ratio = f"{'-':>13}" if ratio is None else f"{ratio:13.2f}"
      lines.append(f"{size:>7} {shape:>7} {name:>18} {r['params']:11,d} {r['ms']:9.2f} "
                   f"{r['tokens_per_s']:9.0f} {ratio} {r['compile_s']:9.2f}")
  return "\n".join(lines)

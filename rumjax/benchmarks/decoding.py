"""Greedy vs beam search decoding: ms per decoded batch of a one-cell decoder (GRU or RUM
lam 0/1; embed, one cell step, dense to the vocabulary) with random parameters. ``eos`` is
never picked (output bias -1e9), so every search runs to ``max_len``. The embedding, the
cell and the projection compute in ``dtype`` (float32 parameters); the logits the search
scores are float32 (the precision policy)."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from rumjax import decoding
from rumjax.cells import RUMCell
from rumjax.benchmarks import timing
from rumjax.cells.base import resolve_dtype
from rumjax.registry import Registry

BOS, EOS = 1, 2

# The decoder cells by name: ``(hidden_size, dtype=...) -> a Flax cell``.
DECODER_CELLS = Registry("decoder cell")
DECODER_CELLS.register("gru", nn.GRUCell)
DECODER_CELLS.register("rum0", functools.partial(RUMCell, lam=0))
DECODER_CELLS.register("rum1", functools.partial(RUMCell, lam=1))


def parse_decode_shape(text):
  """``(B, Nh, V, T)`` of ``BxNhxVxT``."""
  shape = timing.parse_dims(text, 4)
  if shape is None:
    raise ValueError(f"decode_shape {text!r} is not BxNhxVxT.")
  return shape


def parse_beam_sizes(items) -> list[int]:
  """``["4", "8"]`` (``--beam_sizes``) -> ``[4, 8]``; each a positive integer."""
  sizes = [timing.parse_dims(item, 1) for item in items]
  if not items or None in sizes:
    raise ValueError(f"beam_sizes {list(items)} must be positive integers, e.g. 4,8.")
  return [s[0] for s in sizes]


def make_decoder(cell_name, b, nh, vocab, dtype=jnp.float32):
  """``(tokens_to_logits(params, tokens, carry), params, initial carry)``: embed, one cell
  step (:data:`DECODER_CELLS` ``cell_name``), dense to the vocabulary, computing in
  ``dtype`` (float32 logits); random parameters, eos's output bias at -1e9."""
  make_cell = DECODER_CELLS.get(cell_name)
  dtype = resolve_dtype(dtype)
  cell = make_cell(nh, dtype=dtype)
  embed, out = nn.Embed(vocab, nh, dtype=dtype), nn.Dense(vocab, dtype=dtype)
  k_embed, k_cell, k_out = jax.random.split(jax.random.key(1), 3)
  carry, x = cell.initialize_carry(k_cell, (b, nh)), jnp.zeros((b, nh))
  params = {"embed": embed.init(k_embed, jnp.zeros((b,), jnp.int32)),
            "cell": cell.init(k_cell, carry, x), "out": out.init(k_out, x)}
  bias = params["out"]["params"]["bias"]
  params["out"]["params"]["bias"] = bias.at[EOS].set(-1e9)

  def tokens_to_logits(p, tokens, carry):
    carry, h = cell.apply(p["cell"], carry, embed.apply(p["embed"], tokens))
    return out.apply(p["out"], h).astype(jnp.float32), carry
  return tokens_to_logits, params, carry


def make_search(tokens_to_logits, beam, b, max_len, min_len):
  """Jitted ``search(params, carry) -> best sequences <int>[b, max_len]``; greedy if
  ``beam == 0``."""
  opts = dict(batch_size=b, bos_id=BOS, eos_id=EOS, max_len=max_len, min_len=min_len)

  def search(params, carry):
    f = functools.partial(tokens_to_logits, params)
    if not beam:
      return decoding.greedy_search(f, carry, **opts)[0]
    return decoding.beam_search(f, carry, beam_size=beam, length_normalization="average",
                              **opts)[0][:, 0]
  return jax.jit(search)


def run_decoding(shape, cells, beams, min_len, repeats, dtype=jnp.float32):
  """Times greedy and beam search per decoder cell in ``dtype``, alternated per round."""
  b, nh, vocab, max_len = shape
  runs, rows = {}, {}
  for cell in cells:
    tokens_to_logits, params, carry = make_decoder(cell, b, nh, vocab, dtype)
    for k in [0] + beams:
      name = f"{cell}/{f'beam{k}' if k else 'greedy'}"
      f = make_search(tokens_to_logits, k, b, max_len, min(min_len, max_len))
      runs[name], compile_s, seqs = timing.compile_and_run(f, params, carry)
      rows[name] = {"cell": cell, "beam": k, "compile_s": compile_s,
                    "tokens": int((seqs != EOS).sum())}
  timing.time_alternated(runs, rows, repeats)
  for r in rows.values():
    r["tokens_per_s"] = 1e3 * r["tokens"] / r["ms"]
  for r in rows.values():
    r["ratio_greedy"] = r["ms"] / rows[f"{r['cell']}/greedy"]["ms"]
    gru = rows.get("gru/" + (f"beam{r['beam']}" if r["beam"] else "greedy"))
    if gru:
      r["ratio_gru"] = r["ms"] / gru["ms"]
  return rows


def format_decoding(name, rows):
  """The decoding table (header and one line per cell and search)."""
  lines = [f"{'shape BxNhxVxT':>18} {'cell':>5} {'search':>7} {'ms/batch':>9} "
           f"{'x greedy':>8} {'x GRU':>6} {'compile s':>9} {'tokens/s':>9}"]
  for r in rows.values():
    search = f"beam{r['beam']}" if r["beam"] else "greedy"
    ratio = f"{r['ratio_gru']:6.2f}" if "ratio_gru" in r else f"{'-':>6}"
    lines.append(f"{name:>18} {r['cell']:>5} {search:>7} {r['ms']:9.2f} "
                 f"{r['ratio_greedy']:8.2f} {ratio} {r['compile_s']:9.2f} "
                 f"{r['tokens_per_s']:9.0f}")
  return "\n".join(lines)

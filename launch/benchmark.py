r"""Times training steps of RUM against Flax's GRU and LSTM at the paper's shapes.

A training step is ``jax.grad`` (w.r.t. the parameters) of ``sum(hs ** 2)`` over all hidden
states, jit-compiled. All candidates run in one process and are alternated (one step of
each per round), so the ratios compare like with like on a shared machine; the table
reports the median over ``--repeats`` rounds.

Also reported: compile time (first call, includes lowering and one run), XLA's buffer
sizes of the compiled step (``memory_analysis()``: arguments + outputs + temporaries, a
static bound of the step's peak), optionally the peak RSS (VmHWM) of a fresh subprocess that
runs only that candidate: build, compile and one step (``--rss``), the machine's matmul throughput (a large f32 matmul timed
in the same run) and the step's matmul FLOPs (counted from the shapes) as a fraction of it.

    python -m launch.benchmark --shapes=recall,copying --repeats=5 --output=/tmp/bench.json
    python -m launch.benchmark --shapes=ptb --candidates=gru,rum0 --repeats=3
    python -m launch.benchmark --shapes=32x520x10x100,32x2080x10x100 --candidates=rum1 --rss

Device modes. ``--cpu_devices`` (default: one per core) sets how many CPU devices JAX
exposes. A plain candidate (``gru``) runs on one device, where XLA spreads each operation
over the cores (intra-op threads); a candidate with the suffix ``:dp`` (``rum1:dp``)
splits the batch over all devices, as the training loop does (``launch.train
--cpu_devices``), so the cores run the shards concurrently. ``x GRU`` is the ratio to GRU
in the same mode, ``x best GRU`` to the faster of ``gru`` and ``gru:dp``, ``x LSTM`` to
Flax's ``OptimizedLSTMCell`` in the same mode (in the JSON).

The LSTMN (``lstmn``: :func:`rumjax.lstmn_scan` with its hand-written backward, attention
size = Nh; ``lstmn_ref``: autodiff) attends over all earlier positions, O(T^2 Nh) per
sequence, so its ratio to the LSTM grows with T (the LSTMN issue asks for Nh 300, T 50
and 200)::

    python -m launch.benchmark --shapes=16x50x300x300,16x200x300x300 --candidates=lstm,lstmn

Decoding (``--decoding``, instead of the training table): jit-compiled ``greedy_search``
and ``beam_search`` (``--beam_sizes``, ranked by average log-probability as the
pointer-generator does) of a decoder that embeds the token, runs one cell step (GRU or
RUM lam 0/1; the state is the cell's carry) and projects to the vocabulary, with random
parameters from a fixed key, at ``--decode_shape`` BxNhxVxT (default: the RUM paper's
summarization decoder: batch 16, hidden 256, vocabulary 50k, max_len 100, ``--min_len``
35). The output bias of ``eos`` is -1e9, so no search ever picks it: all searches run to
max_len (no early exit) and do the same number of steps. Candidates are alternated per
round; reported: ms per decoded batch (median), compile time (with the first run),
tokens/s (tokens of the best sequences), ``x greedy`` (beam k / greedy, same cell) and
``x GRU`` (same search).

    python -m launch.benchmark --decoding --decode_shape=8x128x10000x50 --repeats=3

Language models (``--lm``, ``--lm_shape`` or ``--lm_scale`` given: this table instead of
the training table): a training step of :class:`rumjax.models.lm.LanguageModel` (forward
and backward of the mean cross-entropy, jit-compiled, on random tokens of a vocabulary of
50, from a carried initial state, ``train=True``: dropout and zoneout on) for each
``tasks.ptb`` variant's ``config.model`` (the papers' configs: FS-RUM-2 vs FS-LSTM-2, RUM
1000 vs LN-LSTM 1000, ...), and ``flax_lstm1000``: ``lstm1000``'s model with Flax's
``nn.OptimizedLSTMCell(1000)`` as core (no layer norm, no zoneout). ``--lm_scale`` divides
every hidden size (``hidden_size``, ``fast_size``, ``slow_size``) to time the same
comparison smaller. Reported: ms/step, tokens/s (B T per step), parameters, compile time,
``x fs_lstm2`` (FS variants) or ``x lstm1000`` (the others).

    python -m launch.benchmark --lm=fs_rum2,fs_lstm2 --lm_shape=32x150 --lm_scale=2

Attention encoders (``--encoders``, ``--encoder_shapes`` or ``--encoder_size`` given): a
training step (forward and backward of the mean cross-entropy of a 2-class ``classify``
model, dropout on, random tokens of a vocabulary of 5,000, every row full length) of the
StarSaber paper's models at equal layers and hidden size (``--encoder_size=LxD``; the
Transformer and ReZero with 8 heads and FFN 4 x D): the paper's efficiency claim, measured.
Reported: parameters (with the embedding; ``encoder_params`` in the JSON: the layers only), ms/step, tokens/s, ``x transformer``.

    python -m launch.benchmark --encoders=starsaber,transformer,rezero \
        --encoder_shapes=32x64,32x256 --encoder_size=4x256
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_list("shapes", ["recall", "copying"],
                  "Named shapes (recall, copying, ptb) or BxTxNxxNh, e.g. 32x2080x10x100.")
flags.DEFINE_string("cpu_devices", "auto", "CPU devices for JAX: a number or 'auto' (one "
                    "per core); the ':dp' candidates split the batch over them.")
flags.DEFINE_list("candidates", ["gru", "lstm", "rum0", "rum1", "gru:dp", "rum0:dp",
                                 "rum1:dp"],
                  "Any of gru, lstm, rum0, rum1 (fast rum_scan, lam 0/1), rum0_ref, rum1_ref "
                  "(the autodiff reference scan), lstmn, lstmn_ref.")
flags.DEFINE_integer("repeats", 3, "Timed rounds (median reported).")
flags.DEFINE_integer("max_rum1_hidden", 256,
                     "Skip lam=1 candidates above this Nh (R is B Nh^2 per copy).")
flags.DEFINE_integer("matmul_size", 2048, "Size n of the n x n x n f32 matmul for the peak.")
flags.DEFINE_bool("rss", False, "Also measure peak RSS in a subprocess per candidate.")
flags.DEFINE_string("output", None, "Write the results as JSON here.")
flags.DEFINE_bool("decoding", False, "Time greedy vs beam search decoding instead of "
                  "training steps.")
flags.DEFINE_string("decode_shape", "16x256x50000x100",
                    "Decoding shape BxNhxVxT: batch, hidden, vocabulary, max_len.")
flags.DEFINE_integer("min_len", 35, "Decoding min_len (no eos before it), capped at max_len.")
flags.DEFINE_list("beam_sizes", ["4"], "Beam sizes timed against greedy search.")
flags.DEFINE_list("decode_cells", ["gru", "rum0", "rum1"],
                  "Decoder cells: gru (flax GRUCell), rum0, rum1 (RUMCell lam 0/1).")
flags.DEFINE_list("lm", ["fs_rum2", "fs_lstm2", "rum1000", "lstm1000"],
                  "Language-model candidates: tasks.ptb variants or flax_lstm1000.")
flags.DEFINE_string("lm_shape", "128x150", "Language-model shape BxT: batch, window length.")
flags.DEFINE_float("lm_scale", 1.0, "Divide the language models' hidden sizes by this.")
flags.DEFINE_list("encoders", ["starsaber", "transformer", "rezero"],
                  "Attention encoders (registered models of rumjax.models.encoders) timed "
                  "side by side (--encoders, --encoder_shapes or --encoder_size given: "
                  "this table instead of the training table).")
flags.DEFINE_list("encoder_shapes", ["32x64", "32x256"], "Encoder shapes BxT.")
flags.DEFINE_string("encoder_size", "4x256", "Encoder size LxD: layers, hidden size.")
flags.DEFINE_string("_rss_child", None, "Internal: candidate@shape to run once for --rss.")

SHAPES = {  # name: (B, T, Nx, Nh)
    "recall": (128, 53, 36, 50),
    "copying": (128, 520, 10, 100),
    "ptb": (128, 150, 128, 1000),
}


def parse_shape(name):
  if name in SHAPES:
    return SHAPES[name]
  dims = tuple(int(v) for v in name.lower().split("x"))
  if len(dims) != 4:
    raise ValueError(f"shape {name!r} is neither {sorted(SHAPES)} nor BxTxNxxNh.")
  return dims


def matmul_flops(cand, b, t, nx, nh):
  """Matmul FLOPs of one training step (forward + parameter gradients), from the shapes."""
  cand = cand.split(":")[0]
  if cand.startswith("lstmn"):
    gates = 2 * b * (nx + nh) * 4 * nh * 3                       # forward + 2 gradients
    attn = 2 * b * (nh + nx + nh) * nh * 3                       # W_h h_t, W_x x_t, W_h~ h~
    tape = 2 * b * (t + 1) / 2 * (nh + 2 * nh) * 3               # v^T tanh, summaries
    return t * (gates + attn + tape)
  if cand in ("gru", "lstm"):
    g = 3 if cand == "gru" else 4
    fwd = 2 * b * (nx + nh) * g * nh
    bwd = 2 * b * (g * nh * nh + nh * g * nh + nx * g * nh)     # dh, dW_h, dW_x
    return t * (fwd + bwd)
  fwd = 2 * b * (nx * 3 * nh + nh * 2 * nh)
  bwd = 2 * b * (2 * nh * nh + nh * 2 * nh + nx * 3 * nh)        # dh, dK_h, dK_x
  if cand.startswith("rum1"):
    fwd += 2 * b * 3 * nh * nh                                   # R [d, b, x]
    bwd += 2 * b * 7 * nh * nh                                   # Q [d, a], Q^T, R^T [3]
  return t * (fwd + bwd)


def make_step(cand, shape):
  """``(jitted grad function, params, xs)`` for a candidate at a shape.

  ``<name>:dp``: the batch split over all devices, parameters replicated (the loop's
  data parallelism)."""
  import flax.linen as nn
  import jax
  import jax.numpy as jnp
  import rumjax
  from rumjax.training import sharding

  cand, _, mode = cand.partition(":")
  if mode not in ("", "dp"):
    raise ValueError(f"candidate suffix must be ':dp', got {mode!r}.")
  b, t, nx, nh = shape
  key = jax.random.key(0)
  xs = jax.random.normal(key, (b, t, nx), jnp.float32)
  if cand not in ("gru", "lstm", "rum0", "rum1", "rum0_ref", "rum1_ref", "lstmn",
                  "lstmn_ref"):
    raise ValueError(f"unknown candidate {cand!r}: gru, lstm, rum0, rum1, rum0_ref, "
                     "rum1_ref, lstmn, lstmn_ref, optionally with ':dp'.")
  if cand in ("gru", "lstm"):
    cell = nn.GRUCell(nh) if cand == "gru" else nn.OptimizedLSTMCell(nh)
    model = nn.RNN(cell)
    params = model.init(jax.random.key(1), xs)
    loss = lambda p, x: jnp.sum(model.apply(p, x) ** 2)
  elif cand.startswith("lstmn"):
    impl = "reference" if cand.endswith("_ref") else "fast"
    params = rumjax.init_lstmn_params(jax.random.key(1), nx, nh, nh)
    loss = lambda p, x: jnp.sum(rumjax.lstmn_scan(p, x, impl=impl)[0] ** 2)
  else:
    lam = 1 if cand.startswith("rum1") else 0
    impl = "reference" if cand.endswith("_ref") else "fast"
    params = rumjax.init_rum_params(jax.random.key(1), nx, nh)
    loss = lambda p, x: jnp.sum(rumjax.rum_scan(p, x, lam=lam, impl=impl)[1] ** 2)
  if mode == "dp":
    mesh = sharding.make_mesh()
    sharding.check_batch_size(b, mesh)
    xs = jax.device_put(xs, sharding.batch_sharding(mesh))
    params = jax.device_put(params, sharding.replicated(mesh))
  return jax.jit(jax.grad(loss)), params, xs


def peak_matmul(n, repeats):
  import jax
  import jax.numpy as jnp
  a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
  f = jax.jit(lambda x: x @ x)
  f(a).block_until_ready()
  times = []
  for _ in range(max(3, repeats)):
    t0 = time.perf_counter()
    f(a).block_until_ready()
    times.append(time.perf_counter() - t0)
  return 2 * n**3 / min(times)


def rss_child(spec):
  import jax
  cand, shape = spec.split("@")
  f, params, xs = make_step(cand, parse_shape(shape))
  jax.block_until_ready(f(params, xs))
  print(json.dumps({"maxrss_mb": peak_rss_mb()}))


def peak_rss_mb():
  """Peak RSS of this process: VmHWM (Linux; unlike ``ru_maxrss`` it is not inherited from
  the parent across fork + exec), else ``getrusage``."""
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith("VmHWM:"):
          return int(line.split()[1]) / 1024
  except OSError:
    pass
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_rss(cand, shape_name):
  out = subprocess.run(
      [sys.executable, "-m", "launch.benchmark", f"--_rss_child={cand}@{shape_name}",
       f"--cpu_devices={FLAGS.cpu_devices}"],
      capture_output=True, text=True, check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])["maxrss_mb"]


def compile_and_run(f, *args):
  """``((compiled, args), compile_s, first output)``: compile time includes one run."""
  import jax
  t0 = time.perf_counter()
  compiled = f.lower(*args).compile()
  out = jax.block_until_ready(compiled(*args))
  return (compiled, args), time.perf_counter() - t0, out


def time_alternated(runs, rows, repeats):
  """Runs every ``runs[name] = (compiled, args)`` once per round for ``repeats`` rounds
  (alternated, so the candidates share the machine's state); sets ``rows[name]``'s
  ``times_ms`` and their median ``ms``."""
  import jax
  for r in rows.values():
    r["times_ms"] = []
  for _ in range(repeats):
    for name, (compiled, args) in runs.items():
      t0 = time.perf_counter()
      jax.block_until_ready(compiled(*args))
      rows[name]["times_ms"].append(1e3 * (time.perf_counter() - t0))
  for r in rows.values():
    r["ms"] = statistics.median(r["times_ms"])


def run_shape(name, shape, candidates, repeats, peak):
  b, t, nx, nh = shape
  cands = [c for c in candidates
           if not (c.startswith("rum1") and nh > FLAGS.max_rum1_hidden)]
  runs, rows = {}, {}
  for c in cands:
    f, params, xs = make_step(c, shape)
    runs[c], compile_s, _ = compile_and_run(f, params, xs)
    mem = runs[c][0].memory_analysis()
    rows[c] = {
        "compile_s": compile_s,
        "xla_mb": (mem.temp_size_in_bytes + mem.argument_size_in_bytes
                   + mem.output_size_in_bytes) / 2**20,
        "xla_temp_mb": mem.temp_size_in_bytes / 2**20,
        "matmul_gflop": matmul_flops(c, b, t, nx, nh) / 1e9,
    }
  time_alternated(runs, rows, repeats)
  for c in cands:
    r = rows[c]
    r["matmul_ms_at_peak"] = 1e3 * r["matmul_gflop"] * 1e9 / peak
    r["matmul_fraction"] = r["matmul_ms_at_peak"] / r["ms"]
    if FLAGS.rss:
      r["rss_mb"] = measure_rss(c, name)
  grus = {c: rows[c]["ms"] for c in ("gru", "gru:dp") if c in rows}
  for c in cands:
    same = "gru:dp" if c.endswith(":dp") else "gru"
    if same in grus:
      rows[c]["ratio_gru"] = rows[c]["ms"] / grus[same]
    lstm = "lstm:dp" if c.endswith(":dp") else "lstm"
    if lstm in rows:
      rows[c]["ratio_lstm"] = rows[c]["ms"] / rows[lstm]["ms"]
    if grus:
      rows[c]["ratio_best_gru"] = rows[c]["ms"] / min(grus.values())
  return rows


BOS, EOS = 1, 2


def make_decoder(cell_name, b, nh, vocab):
  """``(tokens_to_logits(params, tokens, carry), params, initial carry)``: embed, one cell
  step, dense to the vocabulary; random parameters, eos's output bias at -1e9."""
  import flax.linen as nn
  import jax
  import jax.numpy as jnp
  import rumjax

  if cell_name not in ("gru", "rum0", "rum1"):
    raise ValueError(f"unknown decoder cell {cell_name!r}: gru, rum0, rum1.")
  cell = nn.GRUCell(nh) if cell_name == "gru" else rumjax.RUMCell(nh, lam=int(cell_name[3]))
  embed, out = nn.Embed(vocab, nh), nn.Dense(vocab)
  k_embed, k_cell, k_out = jax.random.split(jax.random.key(1), 3)
  carry, x = cell.initialize_carry(k_cell, (b, nh)), jnp.zeros((b, nh))
  params = {"embed": embed.init(k_embed, jnp.zeros((b,), jnp.int32)),
            "cell": cell.init(k_cell, carry, x), "out": out.init(k_out, x)}
  bias = params["out"]["params"]["bias"]
  params["out"]["params"]["bias"] = bias.at[EOS].set(-1e9)

  def tokens_to_logits(p, tokens, carry):
    carry, h = cell.apply(p["cell"], carry, embed.apply(p["embed"], tokens))
    return out.apply(p["out"], h), carry
  return tokens_to_logits, params, carry


def make_search(tokens_to_logits, beam, b, max_len, min_len):
  """Jitted ``search(params, carry) -> best sequences <int>[b, max_len]``; greedy if
  ``beam == 0``."""
  import functools
  import jax
  import rumjax
  opts = dict(batch_size=b, bos_id=BOS, eos_id=EOS, max_len=max_len, min_len=min_len)

  def search(params, carry):
    f = functools.partial(tokens_to_logits, params)
    if not beam:
      return rumjax.greedy_search(f, carry, **opts)[0]
    return rumjax.beam_search(f, carry, beam_size=beam, length_normalization="average",
                              **opts)[0][:, 0]
  return jax.jit(search)


def run_decoding(shape, cells, beams, min_len, repeats):
  """Times greedy and beam search per decoder cell, alternated per round."""
  b, nh, vocab, max_len = shape
  runs, rows = {}, {}
  for cell in cells:
    tokens_to_logits, params, carry = make_decoder(cell, b, nh, vocab)
    for k in [0] + beams:
      name = f"{cell}/{f'beam{k}' if k else 'greedy'}"
      f = make_search(tokens_to_logits, k, b, max_len, min(min_len, max_len))
      runs[name], compile_s, seqs = compile_and_run(f, params, carry)
      rows[name] = {"cell": cell, "beam": k, "compile_s": compile_s,
                    "tokens": int((seqs != EOS).sum())}
  time_alternated(runs, rows, repeats)
  for r in rows.values():
    r["tokens_per_s"] = 1e3 * r["tokens"] / r["ms"]
  for r in rows.values():
    r["ratio_greedy"] = r["ms"] / rows[f"{r['cell']}/greedy"]["ms"]
    gru = rows.get("gru/" + (f"beam{r['beam']}" if r["beam"] else "greedy"))
    if gru:
      r["ratio_gru"] = r["ms"] / gru["ms"]
  return rows


def print_decoding(name, rows):
  print(f"{'shape BxNhxVxT':>18} {'cell':>5} {'search':>7} {'ms/batch':>9} {'x greedy':>8} "
        f"{'x GRU':>6} {'compile s':>9} {'tokens/s':>9}")
  for r in rows.values():
    search = f"beam{r['beam']}" if r["beam"] else "greedy"
    ratio = f"{r['ratio_gru']:6.2f}" if "ratio_gru" in r else f"{'-':>6}"
    print(f"{name:>18} {r['cell']:>5} {search:>7} {r['ms']:9.2f} {r['ratio_greedy']:8.2f} "
          f"{ratio} {r['compile_s']:9.2f} {r['tokens_per_s']:9.0f}")


LM_VOCAB = 50
LM_SIZES = ("hidden_size", "fast_size", "slow_size")


def lm_model(name, scale):
  """``(LanguageModel, base)`` of a ``tasks.ptb`` variant or ``flax_lstm1000``, hidden
  sizes divided by ``scale``; ``base`` is the candidate its ratio is taken to."""
  import flax.linen as nn
  from rumjax.models import lm
  from tasks import ptb
  variant = "lstm1000" if name == "flax_lstm1000" else name
  m = ptb.default_config(variant).model
  for field in LM_SIZES:
    if field in m:
      m[field] = max(1, round(m[field] / scale))
  core = nn.OptimizedLSTMCell(m.hidden_size) if name != variant else ptb.build_core(m)
  model = lm.LanguageModel(core, LM_VOCAB, embed_dim=m.embed_dim, dropout_rate=m.dropout_rate)
  return model, "fs_lstm2" if m.core == "fast_slow" else "lstm1000"


def make_lm_step(model, b, t):
  """``(jitted step, (params, carry, tokens, key))``: the gradient of the mean
  cross-entropy w.r.t. the parameters, and the carry after the window."""
  import jax
  from rumjax import metrics
  from rumjax.models import lm
  tokens = jax.random.randint(jax.random.key(0), (b, t + 1), 0, LM_VOCAB)
  carry = lm.initial_state(model, b)
  params = model.init(jax.random.key(1), {"inputs": tokens[:, :-1]}, model_state=carry)

  def loss(p, carry, tokens, key):
    logits, carry = model.apply(p, {"inputs": tokens[:, :-1]}, train=True,
                                model_state=carry, rngs={"dropout": key})
    return metrics.cross_entropy(logits, tokens[:, 1:]).mean(), carry
  step = jax.jit(jax.value_and_grad(loss, has_aux=True))
  return step, (params, carry, tokens, jax.random.key(2))


def run_lm(names, shape, scale, repeats):
  """Times the language models' training steps, alternated per round."""
  import jax
  b, t = shape
  runs, rows = {}, {}
  for name in names:
    model, base = lm_model(name, scale)
    f, args = make_lm_step(model, b, t)
    runs[name], compile_s, _ = compile_and_run(f, *args)
    rows[name] = {"base": base, "compile_s": compile_s,
                  "params": sum(x.size for x in jax.tree.leaves(args[0]))}
  time_alternated(runs, rows, repeats)
  for r in rows.values():
    r["tokens_per_s"] = 1e3 * b * t / r["ms"]
    if r["base"] in rows:
      r[f"ratio_{r['base']}"] = r["ms"] / rows[r["base"]]["ms"]
  return rows


def print_lm(shape, rows):
  print(f"{'shape BxT':>10} {'cand':>14} {'params':>11} {'ms/step':>9} {'tokens/s':>9} "
        f"{'x fs_lstm2':>10} {'x lstm1000':>10} {'compile s':>9}")
  for name, r in rows.items():
    ratios = [r.get(f"ratio_{base}") for base in ("fs_lstm2", "lstm1000")]
    ratios = " ".join(f"{'-':>10}" if x is None else f"{x:10.2f}" for x in ratios)
    print(f"{shape:>10} {name:>14} {r['params']:11,d} {r['ms']:9.2f} "
          f"{r['tokens_per_s']:9.0f} {ratios} {r['compile_s']:9.2f}")


ENCODER_VOCAB = 5000


def make_encoder_step(name, layers, d, b, t):
  """``(jitted step, args, params)``: the gradient of the mean cross-entropy of a
  ``classify`` encoder model (2 classes, dropout on) w.r.t. its parameters."""
  import jax
  import numpy as np
  from rumjax import metrics, models
  model = models.build_model({"name": name, "num_layers": layers, "hidden_size": d,
                              "embed_dim": d, "num_heads": 8, "ffn_size": None,
                              "dropout_rate": 0.1, "objective": "classify"},
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


def run_encoders(names, shapes, layers, d, repeats):
  """Times the encoders' training steps per shape, alternated per round."""
  import jax
  out = {}
  for shape in shapes:
    b, t = shape
    runs, rows = {}, {}
    for name in names:
      f, args = make_encoder_step(name, layers, d, b, t)
      runs[name], compile_s, _ = compile_and_run(f, *args)
      rows[name] = {"compile_s": compile_s,
                    "params": sum(x.size for x in jax.tree.leaves(args[0])),
                    "encoder_params": sum(x.size for x in
                                          jax.tree.leaves(args[0]["params"]["encoder"]))}
    time_alternated(runs, rows, repeats)
    for r in rows.values():
      r["tokens_per_s"] = 1e3 * b * t / r["ms"]
      if "transformer" in rows:
        r["ratio_transformer"] = r["ms"] / rows["transformer"]["ms"]
    out[f"{b}x{t}"] = rows
  return out


def print_encoders(size, tables):
  print(f"{'LxD':>7} {'BxT':>7} {'cand':>18} {'params':>11} {'ms/step':>9} {'tokens/s':>9} "
        f"{'x transformer':>13} {'compile s':>9}")
  for shape, rows in tables.items():
    for name, r in rows.items():
      ratio = r.get("ratio_transformer")
      ratio = f"{'-':>13}" if ratio is None else f"{ratio:13.2f}"
      print(f"{size:>7} {shape:>7} {name:>18} {r['params']:11,d} {r['ms']:9.2f} "
            f"{r['tokens_per_s']:9.0f} {ratio} {r['compile_s']:9.2f}")


def encoders_requested():
  return any(FLAGS[f].present for f in ("encoders", "encoder_shapes", "encoder_size"))


def lm_requested():
  return any(FLAGS[f].present for f in ("lm", "lm_shape", "lm_scale"))


def main(argv):
  del argv
  from rumjax.training import sharding
  sharding.use_cpu_devices(FLAGS.cpu_devices)
  if FLAGS._rss_child:
    rss_child(FLAGS._rss_child)
    return
  import jax
  peak = peak_matmul(FLAGS.matmul_size, FLAGS.repeats)
  print(f"jax {jax.__version__}, {jax.device_count()} x {jax.devices()[0].device_kind} "
        f"device(s), {os.cpu_count()} cores, peak f32 matmul ({FLAGS.matmul_size}^3, one "
        f"device): {peak / 1e9:.1f} GFLOP/s")
  results = {"peak_gflops": peak / 1e9, "repeats": FLAGS.repeats, "shapes": {},
             "devices": jax.device_count(), "cores": os.cpu_count()}
  if FLAGS.decoding:
    shape = tuple(int(v) for v in FLAGS.decode_shape.lower().split("x"))
    if len(shape) != 4:
      raise ValueError(f"decode_shape {FLAGS.decode_shape!r} is not BxNhxVxT.")
    rows = run_decoding(shape, FLAGS.decode_cells, [int(k) for k in FLAGS.beam_sizes],
                        FLAGS.min_len, FLAGS.repeats)
    results["decoding"] = {"B_Nh_V_T": shape, "min_len": min(FLAGS.min_len, shape[3]),
                           "candidates": rows}
    print_decoding(FLAGS.decode_shape, rows)
  elif encoders_requested():
    try:
      shapes = [tuple(int(v) for v in x.lower().split("x")) for x in FLAGS.encoder_shapes]
      layers, d = (int(v) for v in FLAGS.encoder_size.lower().split("x"))
      assert all(len(x) == 2 for x in shapes)
    except (ValueError, AssertionError):
      raise ValueError(f"encoder_shapes {FLAGS.encoder_shapes} must be BxT and encoder_size "
                       f"{FLAGS.encoder_size!r} LxD.") from None
    tables = run_encoders(FLAGS.encoders, shapes, layers, d, FLAGS.repeats)
    results["encoders"] = {"L_D": (layers, d), "vocab": ENCODER_VOCAB, "shapes": tables}
    print_encoders(FLAGS.encoder_size, tables)
  elif lm_requested():
    shape = tuple(int(v) for v in FLAGS.lm_shape.lower().split("x"))
    if len(shape) != 2 or FLAGS.lm_scale <= 0:
      raise ValueError(f"lm_shape {FLAGS.lm_shape!r} is not BxT or lm_scale "
                       f"{FLAGS.lm_scale} is not positive.")
    rows = run_lm(FLAGS.lm, shape, FLAGS.lm_scale, FLAGS.repeats)
    results["lm"] = {"B_T": shape, "vocab": LM_VOCAB, "scale": FLAGS.lm_scale,
                     "candidates": rows}
    print_lm(FLAGS.lm_shape, rows)
  else:
    run_training(results, peak)
  if FLAGS.output:
    with open(FLAGS.output, "w") as f:
      json.dump(results, f, indent=1)


def run_training(results, peak):
  """The training-step table over ``--shapes``."""
  head = (f"{'shape':>16} {'cand':>9} {'ms/step':>9} {'x GRU':>6} {'x best':>6} "
          f"{'x LSTM':>6} {'compile s':>9} {'XLA MB':>8} {'RSS MB':>7} {'mm GFLOP':>8} {'mm@peak ms':>10} "
          f"{'mm frac':>7}")
  print(head)
  for name in FLAGS.shapes:
    shape = parse_shape(name)
    rows = run_shape(name, shape, FLAGS.candidates, FLAGS.repeats, peak)
    results["shapes"][name] = {"B_T_Nx_Nh": shape, "candidates": rows}
    for c, r in rows.items():
      rss = f"{r['rss_mb']:7.0f}" if "rss_mb" in r else f"{'-':>7}"
      ratio = f"{r['ratio_gru']:6.2f}" if "ratio_gru" in r else f"{'-':>6}"
      best = f"{r['ratio_best_gru']:6.2f}" if "ratio_best_gru" in r else f"{'-':>6}"
      lstm = f"{r['ratio_lstm']:6.2f}" if "ratio_lstm" in r else f"{'-':>6}"
      print(f"{name:>16} {c:>9} {r['ms']:9.2f} {ratio} {best} {lstm} {r['compile_s']:9.2f} "
            f"{r['xla_mb']:8.1f} {rss} {r['matmul_gflop']:8.2f} "
            f"{r['matmul_ms_at_peak']:10.2f} {r['matmul_fraction']:7.2f}")


if __name__ == "__main__":
  app.run(main)

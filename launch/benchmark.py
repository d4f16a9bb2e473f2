r"""Times training steps of RUM against Flax's GRU and LSTM at the paper's shapes.

A training step is ``jax.grad`` (w.r.t. the parameters) of ``sum(hs ** 2)`` over all hidden
states, jit-compiled. All candidates run in one process and are alternated (two steps of
each per round, the second timed: the step a training loop repeats), so the ratios
compare like with like on a shared machine; the table reports the median over
``--repeats`` rounds.

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
in the same mode (of the medians), ``GRU IQR`` the quartiles of the ratios of the single
rounds (the two steps timed back to back: how much the machine's noise moves one
round's ratio), ``x best GRU`` to the faster of ``gru`` and ``gru:dp``, ``x LSTM`` to
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

Precision (``--dtype``, every table): ``float32`` (the default) or ``bfloat16``, the
computation dtype of the precision policy (``config.model.dtype``): inputs, matmuls and
hidden states in it, parameters float32, losses and logits float32, RUM's rotation path
and the unitary cells' float32 as in training. On a CPU bfloat16 is emulated (slower than
float32); the point is that an accelerator gets the policy::

    python -m launch.benchmark --shapes=recall --candidates=gru,lstm,rum1 --dtype=bfloat16

On a GPU (``.ci/accelerator`` runs this): the fused kernel (``rum1_kernel``), the XLA scan
(``rum1``), its cheap levers (``rum1_unroll8``; XLA's command buffers for while loops through
``XLA_FLAGS=--xla_gpu_enable_command_buffer=...,WHILE``, a separate run) and PyTorch's cuDNN
GRU and LSTM (``torch_gru``, ``torch_lstm``, only where PyTorch is importable: never a
dependency); ``x torch GRU`` is every candidate's ratio to PyTorch's GRU::

    python -m launch.benchmark --shapes=copying \
        --candidates=torch_gru,torch_lstm,gru,rum1,rum1_unroll8,rum1_kernel --repeats=10

The forward pass alone (``--forward``: the loss's value, no gradient; PyTorch's under
``torch.no_grad()``), what inference costs, and with the training table the split of a
step between its forward and backward passes::

    python -m launch.benchmark --shapes=copying --forward --candidates=gru,rum0,rum1

The measurements live in ``rumjax.benchmarks`` (one module per table); this file parses the
flags, runs them and prints.
"""

import os
import sys

import jax
from absl import flags

import launch

from rumjax.benchmarks import cells, decoding, encoders, lm, timing, torch_anchor
from rumjax.cells.base import DTYPES, resolve_dtype
from rumjax import sharding, utils
from tasks import ptb

FLAGS = flags.FLAGS
flags.DEFINE_list("shapes", ["recall", "copying"],
                  "Named shapes (recall, copying, ptb) or BxTxNxxNh, e.g. 32x2080x10x100.")
flags.DEFINE_string("cpu_devices", "auto", "CPU devices for JAX: a number or 'auto' (one "
                    "per core); the ':dp' candidates split the batch over them.")
flags.DEFINE_list("candidates", list(cells.DEFAULT_CANDIDATES),
                  "Any of gru, lstm, rum0, rum1 (rum_scan's XLA fast path, lam 0/1), "
                  "rum0_ref, rum1_ref (the autodiff reference scan), rum0_kernel, "
                  "rum1_kernel (the fused Pallas kernel), rum0_unroll8, rum1_unroll8 "
                  "(lax.scan unroll=8), lstmn, lstmn_ref, and where PyTorch is importable "
                  "torch_gru, torch_lstm (cuDNN on a GPU); ':dp' splits the batch.")
flags.DEFINE_bool("forward", False, "Training table: time the forward pass alone (the "
                  "loss's value, no gradient: inference) instead of the training step.")
flags.DEFINE_integer("repeats", 3, "Timed rounds (median reported).")
flags.DEFINE_string("dtype", "float32", "Computation dtype of every table, the precision "
                    f"policy: one of {', '.join(DTYPES)} (parameters stay float32).")
flags.DEFINE_integer("max_rum1_hidden", 256,
                     "Skip lam=1 candidates above this Nh (R is B Nh^2 per copy).")
flags.DEFINE_integer("matmul_size", 2048, "Size n of the n x n x n f32 matmul for the peak.")
flags.DEFINE_float("max_step_ms", None, "Training table: a candidate whose warm step takes "
                   "longer is reported with that one step and not repeated.")
flags.DEFINE_bool("rss", False, "Also measure peak RSS in a subprocess per candidate.")
flags.DEFINE_string("output", None, "Write the results as JSON here (not inside a run's "
                    "folder; an existing file only with --overwrite).")
flags.DEFINE_bool("overwrite", False, launch.OVERWRITE_HELP)
flags.DEFINE_bool("decoding", False, "Time greedy vs beam search decoding instead of "
                  "training steps.")
flags.DEFINE_string("decode_shape", "16x256x50000x100",
                    "Decoding shape BxNhxVxT: batch, hidden, vocabulary, max_len.")
flags.DEFINE_integer("min_len", 35, "Decoding min_len (no eos before it), capped at max_len.")
flags.DEFINE_list("beam_sizes", ["4"], "Beam sizes timed against greedy search.")
flags.DEFINE_list("decode_cells", ["gru", "rum0", "rum1"],
                  "Decoder cells: gru (flax GRUCell), rum0, rum1 (RUMCell lam 0/1).")
flags.DEFINE_list("lm", ["fs_rum2", "fs_lstm2", "rum1000", "lstm1000"],
                  "Language-model candidates: ptb variants (tasks/configs/ptb.py) or "
                  "flax_lstm1000.")
flags.DEFINE_string("lm_shape", "128x150", "Language-model shape BxT: batch, window length.")
flags.DEFINE_float("lm_scale", 1.0, "Divide the language models' hidden sizes by this.")
flags.DEFINE_list("encoders", ["starsaber", "transformer", "rezero"],
                  "Attention encoders (registered models of rumjax.models.encoders) timed "
                  "side by side (--encoders, --encoder_shapes or --encoder_size given: "
                  "this table instead of the training table).")
flags.DEFINE_list("encoder_shapes", ["32x64", "32x256"], "Encoder shapes BxT.")
flags.DEFINE_string("encoder_size", "4x256", "Encoder size LxD: layers, hidden size.")


# The flags only one table reads (the others: --repeats, --dtype, --matmul_size,
# --cpu_devices, --output are every table's).
TABLE_FLAGS = {
    "training": ("shapes", "candidates", "forward", "rss", "max_rum1_hidden", "max_step_ms"),
    "decoding": ("decode_shape", "min_len", "beam_sizes", "decode_cells"),
    "encoders": ("encoders", "encoder_shapes", "encoder_size"),
    "lm": ("lm", "lm_shape", "lm_scale"),
}


def table() -> str:
  """The table this command times: ``--decoding``, else the encoders' or the language
  models' table when one of their flags is given, else the training table."""
  if FLAGS.decoding:
    return "decoding"
  if encoders_requested():
    return "encoders"
  return "lm" if lm_requested() else "training"


def unused_flag_problem() -> None:
  """A ``ValueError`` for a flag of another table than the one timed (it would be
  silently ignored)."""
  timed = table()
  for name, names in TABLE_FLAGS.items():
    for flag in names:
      if name != timed and FLAGS[flag].present:
        raise ValueError(f"--{flag} is a flag of the {name} table, but this command times "
                         f"the {timed} table; leave it out.")


def encoders_requested():
  return any(FLAGS[f].present for f in ("encoders", "encoder_shapes", "encoder_size"))


def lm_requested():
  return any(FLAGS[f].present for f in ("lm", "lm_shape", "lm_scale"))


def main(argv):
  del argv
  launch.check_outputs(launch.output_problem("output", FLAGS.output, suffix=".json", runs=(),
                                             overwrite=FLAGS.overwrite))
  try:
    for name in ("repeats", "matmul_size"):
      if FLAGS[name].value < 1:
        raise ValueError(f"--{name}={FLAGS[name].value} must be >= 1.")
    resolve_dtype(FLAGS.dtype)
    unused_flag_problem()
    if FLAGS.decoding:                         # the arguments first, then minutes of timing
      decoding.parse_decode_shape(FLAGS.decode_shape)
      decoding.parse_beam_sizes(FLAGS.beam_sizes)
    elif encoders_requested():
      encoders.parse_encoder_args(FLAGS.encoder_shapes, FLAGS.encoder_size,
                                  FLAGS.encoders)
    elif lm_requested():
      lm.parse_lm_shape(FLAGS.lm_shape, FLAGS.lm_scale)
    else:
      for name in FLAGS.shapes:
        cells.parse_shape(name)
      cells.check_candidates(FLAGS.candidates)
    sharding.use_cpu_devices(FLAGS.cpu_devices)
    save(run())
  except ValueError as err:
    sys.exit(f"error: {err}")


def save(results):
  """Writes the results so far to ``--output`` (after each shape too: a run stopped at a
  time limit keeps the shapes it finished)."""
  if FLAGS.output:
    utils.write_json(FLAGS.output, results)


def run():
  """The requested table, printed; returns the results for ``--output``."""
  peak = timing.peak_matmul(FLAGS.matmul_size, FLAGS.repeats)
  print(timing.peak_line(peak, FLAGS.matmul_size))
  print(f"computation dtype: {FLAGS.dtype} (parameters float32)")
  results = {"peak_gflops": peak / 1e9, "repeats": FLAGS.repeats, "shapes": {},
             "devices": jax.device_count(), "cores": os.cpu_count(), "dtype": FLAGS.dtype}
  {"decoding": run_decoding, "encoders": run_encoders, "lm": run_lm,
   "training": lambda r: run_training(r, peak)}[table()](results)
  return results


def run_decoding(results):
  """The decoding table at ``--decode_shape``."""
  shape = decoding.parse_decode_shape(FLAGS.decode_shape)
  rows = decoding.run_decoding(shape, FLAGS.decode_cells,
                               decoding.parse_beam_sizes(FLAGS.beam_sizes),
                               FLAGS.min_len, FLAGS.repeats, FLAGS.dtype)
  results["decoding"] = {"B_Nh_V_T": shape, "min_len": min(FLAGS.min_len, shape[3]),
                         "candidates": rows}
  print(decoding.format_decoding(FLAGS.decode_shape, rows))


def run_encoders(results):
  """The encoder table over ``--encoder_shapes``."""
  shapes, (layers, d) = encoders.parse_encoder_args(FLAGS.encoder_shapes, FLAGS.encoder_size)
  tables = encoders.run_encoders(FLAGS.encoders, shapes, layers, d, FLAGS.repeats,
                                 FLAGS.dtype)
  results["encoders"] = {"L_D": (layers, d), "vocab": encoders.ENCODER_VOCAB,
                         "shapes": tables}
  print(encoders.format_encoders(FLAGS.encoder_size, tables))


def run_lm(results):
  """The language-model table at ``--lm_shape``."""
  shape = lm.parse_lm_shape(FLAGS.lm_shape, FLAGS.lm_scale)
  rows = lm.run_lm(FLAGS.lm, shape, FLAGS.lm_scale, FLAGS.repeats, ptb.TASK.get_config,
                   ptb.build_core, FLAGS.dtype)
  results["lm"] = {"B_T": shape, "vocab": lm.LM_VOCAB, "scale": FLAGS.lm_scale,
                   "candidates": rows}
  print(lm.format_lm(FLAGS.lm_shape, rows))


def run_training(results, peak):
  """The training-step table over ``--shapes``."""
  if any(c.startswith("torch_") for c in FLAGS.candidates):
    print(torch_anchor.torch_version())
  results["step"] = "forward" if FLAGS.forward else "train"
  if FLAGS.forward:
    print("timed: the forward pass alone (the loss, no gradient)")
  print(cells.format_header())
  for name in FLAGS.shapes:
    shape = cells.parse_shape(name)
    rows = cells.run_shape(name, shape, FLAGS.candidates, FLAGS.repeats, peak,
                           max_rum1_hidden=FLAGS.max_rum1_hidden, rss=FLAGS.rss,
                           cpu_devices=FLAGS.cpu_devices, dtype=FLAGS.dtype,
                           max_step_ms=FLAGS.max_step_ms, forward=FLAGS.forward)
    results["shapes"][name] = {"B_T_Nx_Nh": shape, "candidates": rows}
    print(cells.format_rows(name, rows))
    save(results)


if __name__ == "__main__":
  launch.run_app(main)

"""The benchmarks' pure pieces (rumjax/benchmarks/): shape parsing, FLOP counts, ratios and
table formatting on fake rows. No timings are asserted; launch/benchmark.py end to end is in
test_launch.py."""

import json
import os
import re
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rumjax import rum_scan, utils
from rumjax.benchmarks import cells, decoding, encoders, lm, timing

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------- parsing


def test_parse_shape_named_and_explicit():
  assert cells.parse_shape("copying") == (128, 520, 10, 100)
  assert cells.parse_shape("4X5x3x4") == (4, 5, 3, 4)


@pytest.mark.parametrize("name", ["4x5x3", "4x5x3x4x1"])
def test_parse_shape_wrong_rank(name):
  with pytest.raises(ValueError, match="is neither .* nor BxTxNxxNh"):
    cells.parse_shape(name)


@pytest.mark.parametrize("name", ["recal", "foo", "4x5x3xa", "4x0x3x4", "4x-5x3x4"])
def test_parse_shape_not_positive_numbers(name):
  """A misspelt name or a bad number: the one-line error that names both forms, not
  ``int()``'s "invalid literal"."""
  with pytest.raises(ValueError, match="is neither .* nor BxTxNxxNh"):
    cells.parse_shape(name)


def test_parse_decode_lm_and_encoder_shapes():
  assert decoding.parse_decode_shape("2x8x32x6") == (2, 8, 32, 6)
  with pytest.raises(ValueError, match="is not BxNhxVxT"):
    decoding.parse_decode_shape("2x8x32")
  assert lm.parse_lm_shape("2x5", 100.0) == (2, 5)
  with pytest.raises(ValueError, match="is not BxT or lm_scale"):
    lm.parse_lm_shape("2x5", 0.0)
  for text in ("2x5x1", "2xfive", "0x5"):
    with pytest.raises(ValueError, match="is not BxT or lm_scale"):
      lm.parse_lm_shape(text, 1.0)
  with pytest.raises(ValueError, match="is not BxNhxVxT"):
    decoding.parse_decode_shape("2x8x32xsix")
  assert decoding.parse_beam_sizes(["4", "8"]) == [4, 8]
  for items in (["four"], ["0"], []):
    with pytest.raises(ValueError, match="must be positive integers"):
      decoding.parse_beam_sizes(items)
  assert encoders.parse_encoder_args(["2x8", "4x16"], "1x16") == ([(2, 8), (4, 16)], (1, 16))
  for shapes, size in [(["2x8x1"], "1x16"), (["2x8"], "16"), (["ax8"], "1x16")]:
    with pytest.raises(ValueError, match="must be BxT and encoder_size"):
      encoders.parse_encoder_args(shapes, size)
  # A model that is not an encoder was a KeyError after the matmul peak (review).
  assert encoders.parse_encoder_args(["2x8"], "1x16", ["starsaber", "bilstm"])
  with pytest.raises(ValueError, match=r"^--encoders: \['tagger'\] are not encoder models; "
                                       r"use some of \['starsaber'"):
    encoders.parse_encoder_args(["2x8"], "1x16", ["starsaber", "tagger"])


def test_make_step_rejects_unknown_candidates():
  with pytest.raises(ValueError, match="suffix must be ':dp'"):
    cells.make_step("gru:tp", (2, 3, 2, 2))
  with pytest.raises(ValueError, match="unknown candidate 'rnn'"):
    cells.make_step("rnn", (2, 3, 2, 2))
  for bad in ("rum1_kernel_x", "rum1_kernel_r", "rum1_kernel_t3", "rum2_kernel_t"):
    with pytest.raises(ValueError, match="unknown candidate"):
      cells.make_step(bad, (2, 3, 2, 2))


def test_kernel_candidates_name_kernel_scan_options():
  assert cells.kernel_options("kernel_t_pf") == dict(transposed=True, prefetch=True)
  assert cells.kernel_options("kernel_r32_w16_sp") == dict(rows=32, num_warps=16,
                                                           save_plane=True)
  assert cells.kernel_options("kernel_bb16") == dict(block=16)
  assert cells.kernel_options("kernel_wr0_r0") == dict(w_rows=None, rows=None)   # whole
  assert cells.kernel_options("kernel") is None and cells.kernel_options("unroll8") is None


# ---------------------------------------------------------------------------- FLOPs


def test_matmul_flops_gru_by_hand():
  # B = T = Nx = Nh = 1, 3 gates: forward x W_x (1x3) and h W_h (1x3): 2 * 3 each;
  # backward dh = dg W_h^T, dW_h = h^T dg, dW_x = x^T dg: 2 * 3 each. Per step 30.
  assert cells.matmul_flops("gru", 1, 1, 1, 1) == 12 + 18
  assert cells.matmul_flops("gru", 1, 7, 1, 1) == 7 * 30
  assert cells.matmul_flops("gru:dp", 2, 3, 4, 5) == cells.matmul_flops("gru", 2, 3, 4, 5)


def test_matmul_flops_lstm_and_rum():
  # LSTM: 4 gates instead of 3, same structure.
  assert cells.matmul_flops("lstm", 1, 1, 1, 1) == 2 * 2 * 4 + 2 * 3 * 4
  # RUM lam=0: forward x (Nx x 3Nh), h (Nh x 2Nh): 2 (3 + 2); backward 2 (2 + 2 + 3).
  assert cells.matmul_flops("rum0", 1, 1, 1, 1) == 10 + 14
  # lam=1 adds the associative memory: 3 forward and 7 backward Nh^2 products per example.
  b, t, nx, nh = 3, 4, 5, 6
  extra = cells.matmul_flops("rum1", b, t, nx, nh) - cells.matmul_flops("rum0", b, t, nx, nh)
  assert extra == t * 2 * b * 10 * nh * nh
  assert cells.matmul_flops("rum1_ref", b, t, nx, nh) == cells.matmul_flops("rum1", b, t, nx, nh)


def test_matmul_flops_of_the_forward_pass_by_hand():
  # GRU, B=T=Nx=Nh=1: x W_x and h W_h, 3 gates: 2 * 2 * 3; RUM: x W_x (3 Nh), h W_h (2 Nh).
  assert cells.matmul_flops("gru", 1, 1, 1, 1, forward=True) == 12
  assert cells.matmul_flops("torch_lstm", 1, 1, 1, 1, forward=True) == 16
  assert cells.matmul_flops("rum0", 1, 1, 1, 1, forward=True) == 10
  b, t, nx, nh = 2, 3, 4, 5                       # lam=1 adds R [u, q, Rot h]: 3 Nh^2
  assert (cells.matmul_flops("rum1", b, t, nx, nh, forward=True)
          - cells.matmul_flops("rum0", b, t, nx, nh, forward=True)) == t * 2 * b * 3 * nh * nh
  assert (cells.matmul_flops("lstmn", b, t, nx, nh, forward=True) * 3
          == cells.matmul_flops("lstmn", b, t, nx, nh))


@pytest.mark.parametrize("cand", ["gru", "rum0", "rum1_kernel"])
def test_a_forward_step_is_the_loss_of_the_training_step(cand):
  """``forward=True`` times the loss the training step differentiates: its value is
  ``sum(hs ** 2)`` of the candidate's own scan (float32, exact on a CPU), and no
  gradient is computed."""
  shape = (2, 3, 2, 5)
  f, params, xs = cells.make_step(cand, shape, forward=True)
  value = f(params, xs)
  assert value.shape == () and value.dtype == jnp.float32
  if cand == "gru":
    hs = nn.RNN(nn.GRUCell(5)).apply(params, xs)
  else:
    lam, impl = (1, "kernel") if cand == "rum1_kernel" else (0, "fast")
    _, hs = rum_scan(params, xs, lam=lam, impl=impl)
  np.testing.assert_allclose(value, jnp.sum(hs ** 2), rtol=1e-6)
  train, _, _ = cells.make_step(cand, shape)
  dots = lambda g: g.lower(params, xs).as_text().count("dot_general")
  assert dots(f) < dots(train)


def test_matmul_flops_lstmn_grows_quadratically_in_t():
  f = lambda t: cells.matmul_flops("lstmn", 2, t, 3, 4)   # the tape term is O(T^2)
  assert f(10) > 10 * f(1) > 0


# ---------------------------------------------------------------------------- rows


def _row(ms, **extra):
  return dict(ms=ms, compile_s=0.5, xla_mb=1.25, matmul_gflop=0.01, matmul_ms_at_peak=0.1,
              matmul_fraction=0.07, **extra)


def test_add_ratios_same_mode_and_best():
  rows = {"gru": _row(2.0), "lstm": _row(4.0), "rum1": _row(6.0), "gru:dp": _row(1.0),
          "rum1:dp": _row(3.0)}
  cells.add_ratios(rows)
  assert rows["rum1"]["ratio_gru"] == 3.0 and rows["rum1:dp"]["ratio_gru"] == 3.0
  assert rows["rum1"]["ratio_best_gru"] == 6.0 and rows["gru"]["ratio_best_gru"] == 2.0
  assert rows["rum1"]["ratio_lstm"] == 1.5 and "ratio_lstm" not in rows["rum1:dp"]


def _trivial_steps(monkeypatch):
  """Every JAX candidate's step replaced by a trivial jitted function (compiles at once):
  these tests check the table's bookkeeping, not the steps."""
  monkeypatch.setattr(cells, "make_step", lambda c, shape, dtype, forward=False: (
      jax.jit(lambda p, x: p + jnp.sum(x)), jnp.float32(0), jnp.ones(shape[:3])))


def test_a_failing_candidate_gets_its_error_and_the_table_goes_on(monkeypatch):
  _trivial_steps(monkeypatch)
  def broken(*args, **kwargs):
    raise RuntimeError("Triton: out of resources\nsecond line")
  monkeypatch.setattr(cells.torch_anchor, "make_step", broken)
  rows = cells.run_shape("2x3x2x4", (2, 3, 2, 4), ["gru", "torch_gru"], 2, peak=1e9)
  assert rows["torch_gru"] == {"error": "RuntimeError: Triton: out of resources"}
  assert len(rows["gru"]["times_ms"]) == 2 and "ratio_torch_gru" not in rows["gru"]
  line = cells.format_rows("2x3x2x4", rows).split("\n")[1]
  assert line.split()[:3] == ["2x3x2x4", "torch_gru", "failed:"]


def test_a_candidate_slower_than_max_step_ms_is_not_repeated(monkeypatch):
  _trivial_steps(monkeypatch)
  rows = cells.run_shape("2x3x2x4", (2, 3, 2, 4), ["gru", "rum0"], 3, peak=1e9,
                         max_step_ms=0.0)
  for r in rows.values():
    assert r["too_slow"] and r["ms"] > 0 and "times_ms" not in r
  assert rows["rum0"]["ratio_gru"] == rows["rum0"]["ms"] / rows["gru"]["ms"]
  assert "too slow" in cells.format_rows("2x3x2x4", rows)


def test_time_alternated_sets_times_and_median():
  calls = []
  run = lambda name: (lambda x: calls.append(name) or x + 1, (jnp.zeros(2),))
  runs = {name: run(name) for name in ("a", "b")}
  rows = {"a": {}, "b": {}}
  timing.time_alternated(runs, rows, repeats=3)
  for r in rows.values():
    assert len(r["times_ms"]) == 3 and r["ms"] == sorted(r["times_ms"])[1]
  assert calls == ["a", "a", "b", "b"] * 3       # alternated; each timed after its own call


def test_the_first_line_names_the_host_processor():
  line = timing.peak_line(2.5e11, 64)
  assert f"({utils.host_cpu()})" in line and "250.0 GFLOP/s" in line


def test_peak_rss_is_positive():
  assert timing.peak_rss_mb() > 0


# ---------------------------------------------------------------------------- tables


def _check_table(lines, placeholders):
  """Every line as wide as the header; the missing ratios printed as '-'."""
  assert all(len(line) == len(lines[0]) for line in lines), lines
  assert sum(line.split().count("-") for line in lines[1:]) == placeholders


def test_format_training_table():
  rows = {"gru": _row(1.5, ratio_gru=1.0, ratio_best_gru=1.0),
          "rum1:dp": _row(2.5, ratio_best_gru=1.7, ratio_lstm=0.9, rss_mb=345.6,
                          ratio_torch_gru=2.25),
          "rum0": _row(1.2, ratio_gru=0.8, ratio_gru_iqr=(0.75, 0.875))}
  lines = [cells.format_header()] + cells.format_rows("4x5x3x4", rows).split("\n")
  assert lines[0].split()[:3] == ["shape", "cand", "ms/step"]
  assert lines[2].split() == ["4x5x3x4", "rum1:dp", "2.50", "-", "-", "1.70", "0.90", "2.25",
                              "0.50", "1.2", "346", "0.01", "0.10", "0.07"]
  assert lines[3].split()[3:5] == ["0.80", "0.75-0.88"]
  # gru: IQR, x LSTM, x torch GRU, RSS; rum1:dp: x GRU, IQR; rum0: x best, x LSTM,
  # x torch GRU, RSS
  _check_table(lines, placeholders=10)


def test_round_ratio_quartiles_pair_the_rounds():
  rows = {"gru": _row(2.0, times_ms=[2.0, 2.0, 4.0, 2.0, 2.0]),
          "rum0": _row(1.0, times_ms=[1.0, 1.2, 2.0, 0.8, 1.0]),
          "lstm": _row(3.0, times_ms=[3.0])}
  cells.add_ratios(rows)
  # per-round ratios 0.5, 0.6, 0.5, 0.4, 0.5: quartiles (exclusive method) 0.45, 0.55
  assert rows["rum0"]["ratio_gru_iqr"] == pytest.approx((0.45, 0.55))
  assert "ratio_gru_iqr" not in rows["gru"] and "ratio_gru_iqr" not in rows["lstm"]
  assert cells.round_ratio_quartiles([1.0], [2.0]) is None


def test_add_ratios_to_the_torch_gru_where_it_ran():
  rows = {"torch_gru": _row(2.0), "rum1_kernel": _row(3.0), "gru": _row(8.0)}
  cells.add_ratios(rows)
  assert rows["rum1_kernel"]["ratio_torch_gru"] == 1.5 and rows["gru"]["ratio_torch_gru"] == 4.0
  rows = {"gru": _row(2.0), "rum1": _row(3.0)}
  cells.add_ratios(rows)
  assert "ratio_torch_gru" not in rows["rum1"]


@pytest.mark.parametrize("cand,impl,unroll", [("rum1_kernel", "kernel", 1),
                                              ("rum0_unroll8", "fast", 8),
                                              ("rum1_ref", "reference", 1),
                                              ("rum0", "fast", 1)])
def test_rum_candidates_reach_their_implementation(cand, impl, unroll, monkeypatch):
  """Each RUM candidate calls rum_scan with its impl and unroll."""
  seen = []
  real = cells.core.rum_scan
  monkeypatch.setattr(cells.core, "rum_scan",
                      lambda *a, **kw: seen.append((kw["impl"], kw["unroll"])) or real(*a, **kw))
  loss, params = cells._loss_and_params(cand, jnp.ones((2, 3, 4)), 5)
  loss(params, jnp.ones((2, 3, 4)))
  assert seen == [(impl, unroll)]


def test_kernel_tuning_candidates_run_the_kernel_with_their_options(monkeypatch):
  """rum1_kernel_w16 calls kernel_scan (time-major, rum_scan's defaults) with 16 warps,
  rum0_kernel_bb32 with blocks of 32 examples."""
  seen = []

  def kernel_scan(params, xs, carry, **kw):
    seen.append((xs.shape, carry[0].shape if kw["lam"] else carry.shape, kw))
    return carry, jnp.zeros(xs.shape[:2] + (5,))

  monkeypatch.setattr(cells.rum_kernel, "kernel_scan", kernel_scan)
  loss, params = cells._loss_and_params("rum1_kernel_w16", jnp.ones((2, 3, 4)), 5)
  loss(params, jnp.ones((2, 3, 4)))
  assert seen == [((3, 2, 4), (2, 5, 5), dict(lam=1, eta=None, activation=jax.nn.relu,
                                              update_gate=True, num_warps=16))]
  loss, params = cells._loss_and_params("rum0_kernel_bb32", jnp.ones((2, 3, 4)), 5)
  loss(params, jnp.ones((2, 3, 4)))
  assert seen[1][2]["block"] == 32 and seen[1][2]["lam"] == 0
  loss, params = cells._loss_and_params("rum1_kernel_sp", jnp.ones((2, 3, 4)), 5)
  loss(params, jnp.ones((2, 3, 4)))
  assert seen[2][2]["save_plane"] and seen[2][2]["lam"] == 1


def test_kernel_scan_refuses_warps_that_are_not_a_power_of_2():
  params = cells.core.init_rum_params(jax.random.key(0), 4, 5)
  with pytest.raises(ValueError, match="power of 2"):
    cells.rum_kernel.kernel_scan(params, jnp.ones((3, 2, 4)), jnp.zeros((2, 5)), lam=0,
                                 eta=None, activation=jax.nn.relu, update_gate=True,
                                 num_warps=3)


def test_format_decoding_table():
  rows = {"gru/greedy": dict(cell="gru", beam=0, ms=1.234, ratio_greedy=1.0, ratio_gru=1.0,
                             compile_s=0.5, tokens_per_s=1234.5),
          "rum1/beam4": dict(cell="rum1", beam=4, ms=12.3, ratio_greedy=3.0, compile_s=2.5,
                             tokens_per_s=34.5)}
  lines = decoding.format_decoding("2x8x32x6", rows).split("\n")
  assert "x greedy" in lines[0]
  assert lines[1].split() == ["2x8x32x6", "gru", "greedy", "1.23", "1.00", "1.00", "0.50",
                              "1234"]
  assert lines[2].split()[:3] == ["2x8x32x6", "rum1", "beam4"]
  _check_table(lines, placeholders=1)


def test_format_lm_table():
  rows = {"fs_rum2": dict(params=123456, ms=3.2, tokens_per_s=999.0, ratio_fs_lstm2=1.5,
                          compile_s=3.0),
          "rum1000": dict(params=7, ms=3.2, tokens_per_s=9.0, ratio_lstm1000=1.0,
                          compile_s=3.0)}
  lines = lm.format_lm("2x5", rows).split("\n")
  assert "x fs_lstm2" in lines[0] and "123,456" in lines[1]
  _check_table(lines, placeholders=2)


def test_lm_model_builds_the_ptb_variants_scaled_down():
  """The language models of ``launch.benchmark --lm``: the ptb task's configs, hidden sizes
  divided by the scale, each with the candidate its ratio is taken to."""
  from tasks import ptb
  fs, base = lm.lm_model("fs_rum2", 100.0, ptb.TASK.get_config, ptb.build_core, "bfloat16")
  assert base == "fs_lstm2" and fs.dtype == jnp.bfloat16 and fs.embed_dim == 128
  assert [c.features for c in fs.cell.fast_cells] == [7, 7] and fs.cell.slow_cell.features == 10
  rum, base = lm.lm_model("rum1000", 100.0, ptb.TASK.get_config, ptb.build_core)
  assert base == "lstm1000" and rum.cell.features == 10 and rum.cell.layer_norm
  flax_lstm, base = lm.lm_model("flax_lstm1000", 100.0, ptb.TASK.get_config, ptb.build_core)
  assert base == "lstm1000" and type(flax_lstm.cell).__name__ == "OptimizedLSTMCell"
  assert flax_lstm.cell.features == 10


def test_format_encoders_table():
  tables = {"2x8": {"starsaber": dict(params=1025, ms=1.0, tokens_per_s=16.0, compile_s=1.0),
                    "transformer": dict(params=5_000_000, ms=2.0, tokens_per_s=8.0,
                                        ratio_transformer=1.0, compile_s=1.0)}}
  lines = encoders.format_encoders("1x16", tables).split("\n")
  assert "x transformer" in lines[0] and "5,000,000" in lines[2]
  _check_table(lines, placeholders=1)


@pytest.mark.parametrize("args,message", [
    (["--shapes=32x5"], "error: shape '32x5' is neither"),
    (["--candidates=gru,rum2,torch_gru:dp"], "error: unknown candidate(s) ['rum2', "
                                             "'torch_gru:dp']; known: gru, lstm,"),
    (["--decoding", "--beam_sizes=four"], "error: beam_sizes ['four'] must be positive"),
    (["--decoding", "--decode_shape=2x3"], "error: decode_shape '2x3' is not BxNhxVxT"),
    (["--encoder_size=4"], "error: encoder_shapes"),
    (["--lm_shape=ax2"], "error: lm_shape 'ax2' is not BxT"),
])
def test_the_command_reports_bad_input_in_one_line_before_timing(args, message):
  proc = subprocess.run([sys.executable, "-m", "launch.benchmark", *args,
                         "--matmul_size=8", "--repeats=1", "--cpu_devices=1"], cwd=REPO,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1].startswith(message)
  assert "peak f32 matmul" not in proc.stdout                 # nothing ran


@pytest.mark.parametrize("flag", ["--repeats=0", "--matmul_size=0"])
def test_nonpositive_repeats_or_matmul_size_is_a_one_line_error_before_timing(flag):
  """--matmul_size=0 was a ZeroDivisionError; --repeats=0 failed after the peak matmul."""
  proc = subprocess.run([sys.executable, "-m", "launch.benchmark", "--matmul_size=8",
                         "--repeats=1", "--cpu_devices=1", flag], cwd=REPO,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == f"error: {flag} must be >= 1."
  assert "peak f32 matmul" not in proc.stdout


def test_output_in_a_missing_folder_is_created(tmp_path):
  """--output in a folder that did not exist failed after the first shape was timed."""
  out = tmp_path / "new" / "sub" / "bench.json"
  proc = subprocess.run([sys.executable, "-m", "launch.benchmark", "--shapes=2x3x2x4",
                         "--candidates=gru", "--matmul_size=8", "--repeats=1",
                         "--cpu_devices=1", f"--output={out}"], cwd=REPO,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "2x3x2x4" in json.loads(out.read_text())["shapes"]


def test_output_never_replaces_a_file_or_writes_into_a_run(tmp_path):
  """--output replaced any file, a run's config.json included (review: launch.evaluate then
  failed on that run); now an existing file needs --overwrite and a run's folder is refused,
  before anything is timed."""
  run = tmp_path / "run"
  run.mkdir()
  (run / "config.json").write_text('{"task": "copying"}')
  kept = tmp_path / "bench.json"
  kept.write_text('{"mine": 1}')
  for out, message in [(run / "config.json", r"the folder of a run \(it holds config.json\)"),
                       (run / "bench.json", r"the folder of a run"),
                       (kept, r"already exists; pass --overwrite to replace it")]:
    proc = subprocess.run([sys.executable, "-m", "launch.benchmark", "--shapes=2x3x2x4",
                           "--candidates=gru", "--repeats=1", f"--output={out}"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert re.search(message, proc.stderr.strip().splitlines()[-1]), proc.stderr[-500:]
  assert (run / "config.json").read_text() == '{"task": "copying"}'
  assert kept.read_text() == '{"mine": 1}' and not (run / "bench.json").exists()


def test_a_flag_of_another_table_is_refused():
  """--forward and --decode_shape beside --encoders were silently ignored (review)."""
  proc = subprocess.run([sys.executable, "-m", "launch.benchmark", "--encoders=rezero",
                         "--encoder_size=1x8", "--encoder_shapes=2x4", "--repeats=1",
                         "--decode_shape=abc"], cwd=REPO, capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode != 0 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == (
      "error: --decode_shape is a flag of the decoding table, but this command times the "
      "encoders table; leave it out.")
  assert "peak f32 matmul" not in proc.stdout


def test_check_candidates_accepts_every_listed_form():
  cells.check_candidates(cells.DEFAULT_CANDIDATES)
  cells.check_candidates(["rum1_kernel_r32_w8", "rum0_kernel_r0", "rum1:dp", "torch_lstm",
                          "lstmn_ref:dp"])
  for bad in (["rum1:tp"], ["torch_gru:dp"], ["rum1_kernel_x3"]):
    with pytest.raises(ValueError, match="unknown candidate"):
      cells.check_candidates(bad)


def test_help_exits_0_and_lists_the_candidates():
  """Issue 46, item 4, for this launcher too: --help exits 0 (absl's own help exits 1)."""
  proc = subprocess.run([sys.executable, "-m", "launch.benchmark", "--help"], cwd=REPO,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "--candidates" in proc.stdout and "rum1_kernel" in proc.stdout


# ---------------------------------------------------------------------------- precision


def _dot_dtypes(f, *args):
  """The result dtypes of the dot_generals of ``f`` lowered at ``args``."""
  return set(re.findall(r"stablehlo\.dot_general .*-> tensor<[\dx]*x?(\w+)>",
                        f.lower(*args).as_text()))


@pytest.mark.parametrize("cand", ["gru", "lstm", "rum1", "lstmn"])
def test_make_step_computes_in_the_requested_dtype(cand):
  """bfloat16: inputs and (some) matmuls in bfloat16, parameters and gradients float32
  and finite; float32 (the default): no bfloat16 anywhere."""
  f, params, xs = cells.make_step(cand, (2, 3, 2, 4), "bfloat16")
  assert xs.dtype == jnp.bfloat16 and "bf16" in _dot_dtypes(f, params, xs)
  grads = f(params, xs)
  assert {g.dtype for g in jax.tree.leaves((params, grads))} == {jnp.dtype(jnp.float32)}
  assert all(np.all(np.isfinite(np.asarray(g))) for g in jax.tree.leaves(grads))
  f, params, xs = cells.make_step(cand, (2, 3, 2, 4))
  assert xs.dtype == jnp.float32 and _dot_dtypes(f, params, xs) == {"f32"}


def test_decoder_logits_float32_in_bfloat16():
  tokens_to_logits, params, carry = decoding.make_decoder("gru", 2, 8, 32, "bfloat16")
  logits, _ = tokens_to_logits(params, jnp.ones((2,), jnp.int32), carry)
  assert logits.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(logits)))


def test_unknown_dtype_name_is_a_one_line_error():
  with pytest.raises(ValueError, match=r"^dtype='bf16' is not a known dtype name; choose "
                     r"one of float32, bfloat16\.$"):
    cells.make_step("gru", (2, 3, 2, 4), "bf16")
  proc = subprocess.run([sys.executable, "-m", "launch.benchmark", "--dtype=float16",
                         "--matmul_size=8", "--repeats=1", "--cpu_devices=1"], cwd=REPO,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().splitlines()[-1] == (
      "error: dtype='float16' is not a known dtype name; choose one of float32, bfloat16.")


def _run_tiny_table(tmp_path, *flags, candidates="gru,rum1"):
  """``launch.benchmark`` at a tiny shape with ``flags``: (stdout, the JSON results)."""
  out = tmp_path / "bench.json"
  proc = subprocess.run([sys.executable, "-m", "launch.benchmark", *flags,
                         "--shapes=2x3x2x4", f"--candidates={candidates}", "--matmul_size=8",
                         "--repeats=1", "--cpu_devices=1", f"--output={out}"], cwd=REPO,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stdout, json.loads(out.read_text())


def test_the_command_times_in_bfloat16(tmp_path):
  """``--dtype=bfloat16`` reaches the table: printed, in the JSON, every row timed."""
  stdout, result = _run_tiny_table(tmp_path, "--dtype=bfloat16")
  assert "computation dtype: bfloat16" in stdout
  assert result["dtype"] == "bfloat16"
  assert set(result["shapes"]["2x3x2x4"]["candidates"]) == {"gru", "rum1"}


def test_the_command_times_the_forward_pass(tmp_path):
  """``--forward`` reaches the table: said in the output and the JSON, every row timed,
  the matmul FLOPs those of the forward pass."""
  stdout, result = _run_tiny_table(tmp_path, "--forward", candidates="gru,rum0")
  assert "timed: the forward pass alone" in stdout
  assert result["step"] == "forward"
  rows = result["shapes"]["2x3x2x4"]["candidates"]
  assert set(rows) == {"gru", "rum0"} and all(r["ms"] > 0 for r in rows.values())
  assert rows["gru"]["matmul_gflop"] == cells.matmul_flops("gru", 2, 3, 2, 4, True) / 1e9


def test_the_gpu_script_names_only_known_candidates():
  """``.ci/accelerator`` runs once per GPU session, with minutes to spare: a misspelt
  candidate there would cost a whole table. Every ``--candidates`` list and ``CANDS`` in
  it names a candidate of the cell benchmark."""
  with open(os.path.join(REPO, ".ci", "accelerator"), encoding="utf-8") as f:
    script = re.sub(r"\$\(\s*\)", "", f.read())          # "$(\n  )" joins a long list
  lists = re.findall(r"(?:--candidates=|CANDS=)([\w,$]+)", script)
  names = {c for l in lists for c in l.split(",") if c and not c.startswith("$")}
  assert len(lists) >= 4 and {"rum1_kernel", "torch_gru", "rum1_kernel_qr16"} <= names
  assert sorted(c for c in names if not cells.is_candidate(c)) == []

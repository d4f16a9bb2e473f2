"""rumjax/benchmarks/kernel_resources.py: the Triton modules of the RUM kernels lowered for
CUDA on a CPU, and the reading of ptxas's report. (Compiling them needs the optional
triton package; ``launch.kernel_resources`` does that.)"""

import os
import subprocess
import sys

import pytest

from rumjax.benchmarks import cells, kernel_resources


def test_a_training_step_has_a_forward_and_a_backward_triton_module():
  fn, params, xs = cells.make_step("rum1_kernel_wr16", (4, 3, 2, 20))
  modules = kernel_resources.triton_modules(fn, params, xs)
  assert len(modules) == 2
  for m in modules:
    assert "tt.func" in m and "scf.for" in m and "loc(" not in m   # the time loop, no locs
  # Again (cached lowerings are cleared): the same modules.
  assert kernel_resources.triton_modules(fn, params, xs) == modules


def test_ptxas_report_is_read():
  text = ("ptxas info    : Function properties for rum_scan\n"
          "    560 bytes stack frame, 556 bytes spill stores, 572 bytes spill loads\n"
          "ptxas info    : Used 255 registers, used 1 barriers, 560 bytes cumulative stack")
  assert kernel_resources.parse_ptxas(text) == dict(registers=255, spill_stores=556,
                                                    spill_loads=572, stack=560)
  with pytest.raises(ValueError, match="registers"):
    kernel_resources.parse_ptxas("ptxas fatal: no input")


def test_only_kernel_candidates_are_compiled():
  with pytest.raises(ValueError, match="not a RUM kernel candidate"):
    kernel_resources.candidate_resources("rum1", (4, 3, 2, 5))


@pytest.mark.slow    # compiles two kernels with the triton package (extra kernel-tools)
def test_launch_prints_the_resources_of_both_kernels():
  pytest.importorskip("triton", reason="pip install -e '.[kernel-tools]' (CI installs it)")
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run([sys.executable, "-m", "launch.kernel_resources",
                         "--shapes=4x3x2x20", "--candidates=rum0_kernel"], cwd=repo,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-2000:]
  lines = [l.split() for l in proc.stdout.splitlines() if "rum0_kernel" in l]
  assert [l[2] for l in lines] == ["forward", "backward"]
  for l in lines:
    registers, spill_stores, spill_loads, barriers = map(int, l[4:8])
    assert 0 < registers <= 255 and spill_stores >= 0 and barriers > 0


def test_a_capability_below_70_is_a_one_line_error():
  """--capability=0 aborted the interpreter inside Triton's LLVM (rc 134)."""
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run([sys.executable, "-m", "launch.kernel_resources", "--capability=0"],
                        cwd=repo, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
  assert proc.stderr.strip().splitlines()[-1] == (
      "error: --capability=0: give a CUDA compute capability of 70 or above, e.g. 80 (A100) "
      "or 90 (H100, H200).")

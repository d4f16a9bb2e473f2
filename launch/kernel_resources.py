r"""Registers, spills and barriers of the fused RUM kernels, compiled here for a GPU.

No GPU needed: the kernels are lowered for CUDA and compiled with the ``triton`` package
(``pip install -e '.[kernel-tools]'``) for sm_90 (H100/H200), and ``ptxas -v`` reports
what each thread needs (``rumjax.benchmarks.kernel_resources``: a proxy for comparing
variants of a kernel, not a timing)::

    python -m launch.kernel_resources --shapes=copying \
        --candidates=rum0_kernel,rum1_kernel,rum1_kernel_w16,rum1_kernel_r64
    python -m launch.kernel_resources --shapes=256x520x64x256 --candidates=rum1_kernel
"""

import sys

from absl import flags

import launch
from rumjax.benchmarks import cells, kernel_resources

flags.DEFINE_list("shapes", ["copying"], "Shapes: names of launch.benchmark "
                  f"({', '.join(cells.SHAPES)}) or BxTxNxxNh.")
flags.DEFINE_list("candidates", ["rum0_kernel", "rum1_kernel"],
                  "RUM kernel candidates of launch.benchmark (rum{0,1}_kernel[_<options>]).")
flags.DEFINE_integer("capability", 90, "CUDA compute capability to compile for.")
FLAGS = flags.FLAGS


def main(argv):
  del argv
  rows = []
  try:
    if FLAGS.capability < 70:   # below, Triton's LLVM aborts the interpreter
      raise ValueError(f"--capability={FLAGS.capability}: give a CUDA compute capability "
                       "of 70 or above, e.g. 80 (A100) or 90 (H100, H200).")
    for name in FLAGS.shapes:
      shape = cells.parse_shape(name)
      for cand in FLAGS.candidates:
        for r in kernel_resources.candidate_resources(cand, shape, FLAGS.capability):
          rows.append({"shape": name, "candidate": cand, **r})
  except (ValueError, ImportError) as err:
    sys.exit(f"error: {err}")
  print(kernel_resources.format_table(rows))


if __name__ == "__main__":
  launch.run_app(main)

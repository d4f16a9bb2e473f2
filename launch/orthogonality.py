r"""Issue 26's picture: RUM's memory drift from orthogonality against T, per precision.

    python -m launch.orthogonality --overwrite   # -> docs/figures/orthogonality_drift.png
    python -m launch.orthogonality --ts=10,100 --nh=8 --nx=8 --out_dir=/tmp/drift   # a try

Runs :func:`rumjax.benchmarks.orthogonality.run_drift` (float32, bfloat16 with the safe
rotation path, and bfloat16 computed naively), prints the table (T against
``max|R^T R - I|``) and writes the PNG and the JSON of the numbers to ``--out_dir``
(files there are replaced only with ``--overwrite``: the default folder holds the committed
figure). A few minutes on one CPU core.
"""

import os
import sys

import launch
from absl import flags

from rumjax import plotting, utils
from rumjax.benchmarks import orthogonality

NAME = "orthogonality_drift"   # the PNG's and the JSON's name in --out_dir


def define_flags(flag_values=flags.FLAGS) -> None:
  """The command-line flags (defined only when run as a script, or on ``flag_values``)."""
  f = dict(flag_values=flag_values)
  flags.DEFINE_list("ts", ["10", "100", "1000", "4000", "10000"],
                    "Lengths T at which to record the error (one pass to the largest).", **f)
  flags.DEFINE_integer("nh", 64, "Hidden size Nh.", **f)
  flags.DEFINE_integer("nx", 64, "Input size Nx.", **f)
  flags.DEFINE_integer("batch", 4, "Batch size.", **f)
  flags.DEFINE_float("eta", 1.0, "Time normalization eta.", **f)
  flags.DEFINE_integer("seed", 0, "Seed of the parameters and inputs.", **f)
  flags.DEFINE_enum("impl", "fast", ["fast", "reference"], "rum_scan implementation.", **f)
  flags.DEFINE_string("out_dir", "docs/figures", "Where the PNG and the JSON go.", **f)
  flags.DEFINE_bool("overwrite", False, launch.OVERWRITE_HELP, **f)


def run(values) -> dict:
  try:
    ts = [int(t) for t in values.ts]
  except ValueError:
    sys.exit(f"error: --ts={','.join(values.ts)}: give positive integers, e.g. "
             "--ts=10,100,1000")
  if not ts or min(ts) < 1:
    sys.exit(f"error: --ts={','.join(values.ts)}: give positive integers.")
  for name in ("nh", "nx", "batch"):
    if values[name].value < 1:
      sys.exit(f"error: --{name}={values[name].value}: give a positive integer.")
  png, path = (os.path.join(values.out_dir, NAME + ext) for ext in (".png", ".json"))
  launch.check_outputs(launch.output_problem("out_dir", values.out_dir, folder=True,
                                             files=[png, path], runs=(),
                                             overwrite=values.overwrite))
  try:
    result = orthogonality.run_drift(ts, nh=values.nh, nx=values.nx, batch=values.batch,
                                     eta=values.eta, seed=values.seed, impl=values.impl)
  except ValueError as err:                  # e.g. eta <= 0, from rum_scan's checks
    sys.exit(f"error: {err}")
  os.makedirs(values.out_dir, exist_ok=True)
  png = plotting.save_orthogonality_drift(result, png)
  utils.write_json(path, result)
  print(orthogonality.format_table(result))
  print({k: round(v, 1) for k, v in result["seconds"].items()}, "seconds")
  print(png, path, sep="\n")
  return result


def main(argv):
  del argv
  run(flags.FLAGS)


if __name__ == "__main__":
  define_flags()
  launch.run_app(main)

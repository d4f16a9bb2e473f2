r"""Figure 8 of the RUM paper: loss landscapes of trained RUM and GORU recall models.

    python -m launch.landscape --rum_workdir=/tmp/landscape_rum \
        --goru_workdir=/tmp/landscape_goru --overwrite   # -> docs/figures/landscape_*.png

For each workdir (a ``launch.train`` run: ``config.json`` and checkpoints, the latest
checkpoint used; Figure 8's are recall runs, and a run of any task with a RUM or GORU cell
works the same way, on its own task's loss) the loss on the first training batch is
evaluated along ``w* + alpha d1`` (``--points`` values of ``alpha`` in
``[-span, span]``) and over ``w* + alpha d1 + beta d2`` (a ``--grid`` x ``--grid`` plane),
where ``d1, d2`` are filter-normalised random directions (Li et al., 2018) over the
rotation weights only (:mod:`rumjax.analysis.landscape`: RUM's ``W^tau_xh``, ``W~_xh``,
``W^tau_hh``; GORU's angles ``thetas``). Writes ``landscape_1d.png``,
``landscape_2d.png`` and ``landscape.json`` (curves, grids, local-minimum counts) to
``--out_dir`` and prints the counts. Existing outputs are replaced only with
``--overwrite``; no output goes into either workdir.
"""

import os
import sys

from absl import flags

import launch
import tasks
from rumjax import utils
from rumjax.analysis import landscape
from rumjax.plotting import landscape as plotting_landscape


OUTPUTS = ("landscape_1d.png", "landscape_2d.png", "landscape.json")   # in --out_dir


def define_flags(flag_values=flags.FLAGS) -> None:
  """The command-line flags (defined only when run as a script, or on ``flag_values``)."""
  f = dict(flag_values=flag_values)
  flags.DEFINE_string("rum_workdir", None, "Training workdir of a RUM run (recall for Figure 8).",
                      required=True, **f)
  flags.DEFINE_string("goru_workdir", None, "Training workdir of a GORU run (recall for Figure 8).",
                      required=True, **f)
  flags.DEFINE_string("out_dir", "docs/figures", "Where the PNGs and landscape.json go.",
                      **f)
  flags.DEFINE_integer("points", 51, "Points of the 1-D line.", **f)
  flags.DEFINE_integer("grid", 21, "Points per axis of the 2-D plane.", **f)
  flags.DEFINE_float("span", 1.0, "alpha and beta range over [-span, span].", **f)
  flags.DEFINE_integer("seed", 0, "Seed of the random directions.", **f)
  flags.DEFINE_bool("overwrite", False, launch.OVERWRITE_HELP, **f)


def run(values) -> dict:
  """Computes, draws and writes the landscapes for parsed flag ``values``."""
  outputs = [os.path.join(values.out_dir, name) for name in OUTPUTS]
  launch.check_outputs(launch.output_problem(
      "out_dir", values.out_dir, folder=True, files=outputs,
      runs=[values.rum_workdir, values.goru_workdir], overwrite=values.overwrite))
  results = {}
  try:
    for cell, workdir in (("rum", values.rum_workdir), ("goru", values.goru_workdir)):
      results[cell] = landscape.landscape_of_run(
          workdir, tasks.get_task, cell=cell, points=values.points, grid=values.grid,
          span=values.span, seed=values.seed)
  except ValueError as err:
    sys.exit(f"error: {err}")
  paths = [plotting_landscape.plot_landscape_1d(results, outputs[0]),
           plotting_landscape.plot_landscape_2d(results, outputs[1])]
  settings = {k: values[k].value for k in ("points", "grid", "span", "seed")}
  utils.write_json(outputs[2], {"settings": settings, **results})
  for cell, r in results.items():
    print(f"{r['label']} step {r['step']}: local minima {r['local_minima_1d']} along the "
          f"line, {r['local_minima_2d']} on the plane ({r['num_varied']} weights varied, "
          f"{r['seconds']:.1f} s)")
  print("\n".join(paths + [outputs[2]]))
  return results


if __name__ == "__main__":
  launch.run_cli(define_flags, run)

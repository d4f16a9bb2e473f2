r"""Figure 5 of the RUM paper for RUM model workdirs (:func:`rumjax.plotting.plot_rum_model`).

    python -m launch.plot --workdir=/tmp/repro/recall_T30/rum_lam1
    python -m launch.plot --workdir=/tmp/repro/recall_T30          # every RUM model in it
    python -m launch.plot --workdir=/tmp/repro/recall_T30/rum_lam1 --params=params.npz

For a RUM model workdir (a ``train_and_evaluate`` workdir with the ``config.json`` that
``launch.reproduce`` writes) this draws

* ``kernel_tau.png``: the heat map of the target-memory kernel ``W^tau_hh`` (the first
  ``Nh`` columns of ``kernel_h``; Figure 5a) of the latest checkpoint (or of ``--params``,
  a ``.npz`` saved by :func:`rumjax.analysis.save_params_npz`, e.g. ``params.npz``);
* ``cos_theta.png``: the distribution over the time steps of the mini-batch mean of
  ``cos(theta_t)`` at several points of training (Figure 5b,c). The values come from
  ``cos_theta.jsonl`` (recorded by ``launch.reproduce`` every --eval_every steps on a
  fixed test batch); without it they are computed from the checkpoints kept in the workdir;
* with ``--kernels``, also ``kernels.png``: every kernel of the RUM cell (``W^tau_xh``,
  ``W^u_xh``, ``W_xh``, ``W^tau_hh``, ``W^u_hh``), the RUM conference paper's Figures 7
  and 8.
"""

import os
import sys
from typing import Optional

import launch
from absl import flags

import tasks
from rumjax import plotting

flags.DEFINE_string("workdir", None, "A RUM model workdir (with config.json, from "
                    "launch.reproduce), or an experiment directory holding several.",
                    required=True)
flags.DEFINE_string("params", None, "A .npz of the parameters of the one model at "
                    "--workdir (a relative path not found here is looked up in the "
                    "workdir; default: <workdir>/params.npz, else the latest checkpoint).")
flags.DEFINE_integer("step", None, "Checkpoint step for the kernel heat map.")
flags.DEFINE_string("out_dir", None, "Where to write the PNGs (default: the workdir, "
                    "whose figures are redrawn; elsewhere: not inside another run, an "
                    "existing PNG only with --overwrite).")
flags.DEFINE_bool("kernels", False, "Also kernels.png: every kernel of the RUM cell "
                  "(Figures 7 and 8 of the RUM conference paper).")
flags.DEFINE_bool("overwrite", False, launch.OVERWRITE_HELP + " (With --out_dir.)")

FLAGS = flags.FLAGS


def out_dir_problem(dirs) -> Optional[str]:
  """Why ``--out_dir`` cannot take the figures of the models ``dirs``, or ``None``: the
  models' own folders redraw their figures (the default); any other folder must not hold a
  run (another model's figures would be replaced) and keeps its PNGs without
  ``--overwrite``."""
  if not FLAGS.out_dir:
    return None
  names = ["kernel_tau.png", "cos_theta.png"] + (["kernels.png"] if FLAGS.kernels else [])
  for d in dirs:
    out = FLAGS.out_dir if len(dirs) == 1 else os.path.join(FLAGS.out_dir, os.path.basename(d))
    if os.path.realpath(out) == os.path.realpath(d):
      continue
    problem = launch.output_problem("out_dir", out, folder=True, runs=(),
                                    files=[os.path.join(out, n) for n in names],
                                    overwrite=FLAGS.overwrite)
    if problem:
      return problem
  return None


def main(argv):
  del argv
  launch.check_outputs(launch.output_problem("out_dir", FLAGS.out_dir, folder=True))
  dirs = plotting.rum_model_dirs(FLAGS.workdir)
  if not dirs:
    sys.exit(f"error: no RUM model workdir (config.json with cell 'rum') at "
             f"{FLAGS.workdir}.")
  launch.check_outputs(out_dir_problem(dirs))
  if FLAGS.params and len(dirs) > 1:
    sys.exit(f"error: --params={FLAGS.params} names one model's parameters, but "
             f"{FLAGS.workdir} holds {len(dirs)} RUM models; give the workdir of one of "
             "them, or leave --params out (each model's params.npz or checkpoint).")
  for d in dirs:
    out = FLAGS.out_dir
    if out and len(dirs) > 1:
      out = os.path.join(out, os.path.basename(d))
    try:
      config = plotting.load_config(d)
      tasks.import_modules(config.get("imports"))   # a task of the user's own (--imports)
      task = tasks.get_task(config["task"])
      for p in plotting.plot_rum_model(d, out, FLAGS.params, FLAGS.step, task=task):
        print(p)
      if FLAGS.kernels:
        print(plotting.plot_rum_kernels(d, out, FLAGS.params, FLAGS.step))
    except ValueError as err:                # e.g. a --step that was not saved
      sys.exit(f"error: {err}")


if __name__ == "__main__":
  launch.run_app(main)

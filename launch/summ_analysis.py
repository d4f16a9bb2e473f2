r"""Figure 6 of the RUM paper: gradients and hidden-state norms of summarization runs.

    python -m launch.summ_analysis --workdirs=/tmp/summ/synth_lead,/tmp/summ/synth_decrum \
        --labels=LEAD,decRUM --out_dir=docs/figures --batch_index=0 --overwrite
        # -> docs/figures/summ_figure6.png, docs/figures/summ_figure6.json

For each workdir (a ``launch.train`` run of a summarization task: ``config.json``,
checkpoints, ``metrics.jsonl``; the latest checkpoint is used) :mod:`rumjax.analysis.summarization`
reads (a) ``train_grad_norm`` and (b) ``train_last_state_norm`` over training from
``metrics.jsonl``, and computes on batch number ``--batch_index`` of the task's
``eval_data(config, --split)`` (c) the mean ``|d loss / d h_i|`` per encoder step over the
bi-directional encoder outputs and (d) the mean ``|d loss / d output_t|`` per decoder step
over the decoder outputs (each averaged over the batch's real rows and the hidden
dimension). Writes the four panels as ``summ_figure6.png`` and every number as
``summ_figure6.json`` to ``--out_dir`` (not a run's folder; files there are replaced
only with ``--overwrite``) and prints one line per run.
"""

import os
import sys

from absl import flags

import launch
import tasks
from rumjax import utils
from rumjax.plotting import summarization as plotting_summ
from rumjax.analysis import summarization as summ_analysis

JSON_NAME = "summ_figure6.json"


def define_flags(flag_values=flags.FLAGS) -> None:
  """The command-line flags of the Figure 6 command (defined only when run as a script,
  or on ``flag_values``)."""
  f = dict(flag_values=flag_values)
  flags.DEFINE_list("workdirs", None, "Training workdirs of summarization runs, comma "
                    "separated.", required=True, **f)
  flags.DEFINE_list("labels", None, "One legend label per workdir (default: the run's "
                    "configuration, e.g. LEAD, decRUM).", **f)
  flags.DEFINE_string("out_dir", "docs/figures", "Where summ_figure6.png and "
                      "summ_figure6.json go.", **f)
  flags.DEFINE_integer("batch_index", 0, "Which batch of the split (from 0) panels (c, d) "
                       "are evaluated on.", **f)
  flags.DEFINE_string("split", "dev", "The split of the task's eval_data for (c, d).", **f)
  flags.DEFINE_bool("overwrite", False, launch.OVERWRITE_HELP, **f)


def run(values) -> dict:
  """Computes, draws and writes Figure 6 for parsed flag ``values``; returns
  ``{label: result}`` (:func:`rumjax.analysis.summarization.figure6_of_run`)."""
  launch.check_outputs(
      launch.list_problem("workdirs", values.workdirs),
      launch.output_problem("out_dir", values.out_dir, folder=True, runs=values.workdirs,
                            files=[os.path.join(values.out_dir, name)
                                   for name in (plotting_summ.FILENAME, JSON_NAME)],
                            overwrite=values.overwrite))
  workdirs, labels = values.workdirs, values.labels
  if labels is not None and len(labels) != len(workdirs):
    sys.exit(f"error: --labels has {len(labels)} label(s) for {len(workdirs)} workdir(s); "
             "pass one per workdir.")
  results = {}
  try:
    if labels is None:   # the runs' own names; every config is checked before any work
      labels = [summ_analysis.run_label(summ_analysis.load_config(w, tasks.get_task)[1])
                for w in workdirs]
    if len(set(labels)) < len(labels):
      sys.exit(f"error: two runs are labelled alike ({', '.join(labels)}); pass distinct "
               "--labels.")
    for label, workdir in zip(labels, workdirs):
      result = summ_analysis.figure6_of_run(workdir, tasks.get_task,
                                            batch_index=values.batch_index,
                                            split=values.split)
      results[label] = dict(result, label=label)
  except ValueError as err:
    sys.exit(f"error: {err}")
  out = values.out_dir
  paths = plotting_summ.plot_figure6(results, out)
  settings = {"batch_index": values.batch_index, "split": values.split}
  json_path = os.path.join(out, JSON_NAME)
  utils.write_json(json_path, {"settings": settings, "runs": results})
  for label, r in results.items():
    grad = [v for v in r["curves"]["grad_norm"] if v is not None]
    state = [v for v in r["curves"]["state_norm"] if v is not None]
    dec = r["gradients"]["decoder"]
    active = sum(1 for v in dec if v > 0)
    print(f"{label} step {r['step']}: loss {r['loss']:.4g} on {r['split']} batch "
          f"{r['batch_index']} ({r['batch_rows']} rows); last grad norm "
          f"{grad[-1] if grad else float('nan'):.4g}, last state norm "
          f"{state[-1] if state else float('nan'):.4g}; mean |dL/dh| encoder "
          f"{sum(r['gradients']['encoder']) / max(len(r['gradients']['encoder']), 1):.3g}, "
          f"decoder {sum(dec) / max(len(dec), 1):.3g} ({active}/{len(dec)} decoder steps "
          f"non-zero)")
  print("\n".join(paths + [json_path]))
  return results


if __name__ == "__main__":
  launch.run_cli(define_flags, run)

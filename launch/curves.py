r"""One metric of several training runs against steps and against training time.

    python -m launch.curves --workdirs=/tmp/wordptb/lstm_base,/tmp/wordptb/lstmn_base \
        --labels="LSTM 300,LSTMN 300" --metric=eval_ppl --out=docs/figures/word_ptb_curves.png \
        --overwrite

Reads each workdir's ``metrics.jsonl`` (:func:`rumjax.analysis.runs.metric_curves`; the
training time is summed from the logged ``steps_per_sec``, evaluation left out), draws
:func:`rumjax.plotting.save_steps_and_time` and writes the curves beside the PNG as JSON
(workdirs recorded without machine paths). Neither may lie in a run's folder, and an
existing file is replaced only with ``--overwrite`` (e.g. a figure of ``docs/figures``).
"""

import os
import sys

from absl import flags

import launch
from rumjax import plotting, utils
from rumjax.analysis import runs


def define_flags(flag_values=flags.FLAGS) -> None:
  f = dict(flag_values=flag_values)
  flags.DEFINE_list("workdirs", None, "Training workdirs.", required=True, **f)
  flags.DEFINE_list("labels", None, "One label per workdir (default: the folder names).",
                    **f)
  flags.DEFINE_string("metric", "eval_loss", "The metric of metrics.jsonl to draw.", **f)
  flags.DEFINE_string("title", "", "The figure's title.", **f)
  flags.DEFINE_string("out", "docs/figures/curves.png", "The PNG to write (and the JSON "
                      "beside it).", **f)
  flags.DEFINE_bool("overwrite", False, launch.OVERWRITE_HELP, **f)


def json_path(png: str) -> str:
  """The JSON of the curves, beside the PNG."""
  return os.path.splitext(png)[0] + ".json"


def run(values) -> str:
  launch.check_outputs(
      launch.list_problem("workdirs", values.workdirs),
      launch.output_problem("out", values.out, suffix=".png", files=[json_path(values.out)],
                            runs=values.workdirs, overwrite=values.overwrite))
  labels = values.labels or [os.path.basename(os.path.normpath(w)) for w in values.workdirs]
  try:
    if len(labels) != len(values.workdirs):
      raise ValueError(f"--labels has {len(labels)} entries for {len(values.workdirs)} "
                       "workdirs; give one label per workdir.")
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:   # one curve would replace the other
      raise ValueError(f"the label(s) {repeated} name several workdirs; pass --labels "
                       "with one distinct label per workdir.")
    curves = {label: runs.metric_curves(w, values.metric)
              for label, w in zip(labels, values.workdirs)}
  except ValueError as err:
    sys.exit(f"error: {err}")
  path = plotting.save_steps_and_time(
      {k: (c["steps"], c["values"]) for k, c in curves.items()},
      {k: (c["seconds"], c["values"]) for k, c in curves.items()},
      values.metric, values.out, values.title)
  utils.write_json(json_path(path), {
      "metric": values.metric, "workdirs": [runs.recorded_path(w) for w in values.workdirs],
      "curves": curves})
  print(path)
  return path


if __name__ == "__main__":
  launch.run_cli(define_flags, run)

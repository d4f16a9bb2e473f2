r"""The intra-attention of a trained LSTMN on one sentence (Cheng et al., 2016, Figures 4-5).

    python -m launch.attention --workdir=/tmp/sst/binary_lstmn \
        --sentence="it 's tough to watch but it 's a fantastic movie"
        # -> docs/figures/lstmn_attention.png

``--workdir`` is a ``launch.train`` run of ``sst`` or ``snli`` with an LSTMN model
(``config.json`` and checkpoints; the latest checkpoint unless ``--step``). The sentence is
tokenised by the task (``task.sentence_batch``: SST's lower-cased treebank tokens; words
not in the run's vocabulary are ``<unk>``), read by the model's LSTMN
(:func:`rumjax.models.text_classifier.intra_attention`), and ``--layer``'s weights are drawn
by :func:`rumjax.plotting.attention.plot_intra_attention`. For SNLI the sentence is the
premise (and the hypothesis, unless ``--hypothesis``); ``--role=hypothesis`` draws the
hypothesis encoder's attention (``lstmn`` only).
"""

import sys

import numpy as np
from absl import flags

import launch
import tasks
from rumjax.analysis import runs
from rumjax.plotting import attention as plotting_attention
from rumjax.models import text_classifier

PAPER_SENTENCE = "it 's tough to watch but it 's a fantastic movie"


def define_flags(flag_values=flags.FLAGS) -> None:
  """The command-line flags (defined only when run as a script, or on ``flag_values``)."""
  f = dict(flag_values=flag_values)
  flags.DEFINE_string("workdir", None, "Training workdir of an sst or snli LSTMN run.",
                      required=True, **f)
  flags.DEFINE_string("sentence", PAPER_SENTENCE, "The sentence to read (Figure 5's first).",
                      **f)
  flags.DEFINE_string("hypothesis", None, "SNLI: the hypothesis (default: the sentence).",
                      **f)
  flags.DEFINE_enum("role", "premise", ["premise", "hypothesis"],
                    "SNLI: whose encoder's attention to draw.", **f)
  flags.DEFINE_integer("layer", -1, "LSTMN layer (0 = bottom, -1 = top).", **f)
  flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).", **f)
  flags.DEFINE_string("out", "docs/figures/lstmn_attention.png", "The PNG to write.", **f)


def run(values) -> str:
  """Computes and draws the attention for parsed flag ``values``; returns the PNG's path."""
  try:
    task, config, step, params = runs.load_run(values.workdir, tasks.get_task,
                                                 values.step)
    if task.sentence_batch is None:
      raise ValueError(f"task {config.task!r} has no sentence_batch: attention pictures "
                       "are for the sst and snli tasks.")
    tokens, batch = task.sentence_batch(config, values.sentence, values.hypothesis)
    if "inputs" not in batch and values.role == "hypothesis":
      tokens = task.tokenize(values.hypothesis or values.sentence)
    sentence = None if "inputs" in batch else values.role
    layers = text_classifier.intra_attention(task.build_model(config), params, batch,
                                             sentence)
    if not -len(layers) <= values.layer < len(layers):
      raise ValueError(f"--layer={values.layer}: the model has {len(layers)} LSTMN "
                       "layer(s).")
  except ValueError as err:
    sys.exit(f"error: {err}")
  k = values.layer % len(layers)
  where = f"{sentence} encoder, " if sentence else ""
  title = (f"{config.task} {config.model.name} (step {step}): {where}layer {k + 1} of "
           f"{len(layers)}")
  path = plotting_attention.plot_intra_attention(tokens, np.asarray(layers[k][0]),
                                                 values.out, title)
  print(path)
  return path


if __name__ == "__main__":
  launch.run_cli(define_flags, run)

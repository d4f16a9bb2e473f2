r"""The intra-attention of a trained LSTMN on one sentence (Cheng et al., 2016, Figures 4-5).

    python -m launch.attention --workdir=/tmp/sst/binary_lstmn \
        --sentence="it 's tough to watch but it 's a fantastic movie"
        # -> docs/figures/lstmn_attention.png

    python -m launch.attention --workdir=/tmp/wordptb/lstmn \
        --sentence="he sits down at the piano and plays" --out=docs/figures/ptb_lstmn_attention.png

An existing ``--out`` is replaced only with ``--overwrite``; it may not lie in the workdir.

``--workdir`` is a ``launch.train`` run of ``sst`` or ``snli`` with an LSTMN model, or of
``ptb`` with an LSTMN language model (``--variant=word_lstmn1``)
(``config.json`` and checkpoints; the latest checkpoint unless ``--step``). The sentence is
tokenised by the task (``task.sentence_batch``: SST's lower-cased treebank tokens; words
not in the run's vocabulary are ``<unk>``), read by the model's LSTMN
(:func:`rumjax.models.text_classifier.intra_attention`), and ``--layer``'s weights are drawn
by :func:`rumjax.plotting.attention.plot_intra_attention`. For SNLI the sentence is the
premise (and the hypothesis, unless ``--hypothesis``); ``--role=hypothesis`` draws the
hypothesis encoder's attention (``lstmn`` only). For ``ptb`` the sentence is a line of the
validation set (Figure 4's four are), read after the stream before it so that slot 0 holds
the carried state, as in evaluation (:mod:`rumjax.analysis.lm_attention`); beside it the
mean attention by distance over the first ``--profile_windows`` windows of the validation
stream, also printed as JSON.
"""

import json

import sys

import numpy as np
from absl import flags

import launch
import tasks
from tasks import ptb
from rumjax.analysis import lm_attention, runs
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
  flags.DEFINE_bool("overwrite", False, launch.OVERWRITE_HELP, **f)
  flags.DEFINE_integer("profile_windows", 50, "ptb: validation windows read for the mean "
                       "attention by distance.", **f)


def run(values) -> str:
  """Computes and draws the attention for parsed flag ``values``; returns the PNG's path."""
  launch.check_outputs(launch.output_problem("out", values.out, suffix=".png",
                                             runs=[values.workdir],
                                             overwrite=values.overwrite))
  try:
    task, config, step, params = runs.load_run(values.workdir, tasks.get_task,
                                                 values.step)
    given = launch.given_flags(values)
    if config.task == "ptb":
      pair = [f"--{n}" for n in ("role", "hypothesis") if n in given]
      if pair:
        raise ValueError(f"{', '.join(pair)}: ptb reads one sentence; they are for snli's "
                         "premise and hypothesis.")
      return _run_lm(values, task, config, step, params)
    if "profile_windows" in given:
      raise ValueError(f"--profile_windows is ptb's (the language model's attention by "
                       f"distance); {config.task} has none: leave it out.")
    if task.sentence_batch is None:
      raise ValueError(f"task {config.task!r} has no sentence_batch: attention pictures "
                       "are for the sst and snli tasks.")
    tokens, batch = task.sentence_batch(config, values.sentence, values.hypothesis)
    if "inputs" in batch and values.role != "premise":   # one sentence: no roles
      raise ValueError(f"--role={values.role}: {config.task} reads one sentence; --role is "
                       "for snli's premise and hypothesis.")
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


def _run_lm(values, task, config, step, params) -> str:
  """The ptb branch of :func:`run` (module docstring)."""
  context, ids = ptb.sentence_in_context(config, values.sentence)
  span = config.model.get("memory_span")
  layers = lm_attention.sentence_attention(params, context, ids, config.seq_len,
                                           memory_span=span)
  if not -len(layers) <= values.layer < len(layers):
    raise ValueError(f"--layer={values.layer}: the model has {len(layers)} LSTMN layer(s).")
  k = values.layer % len(layers)
  profiles = lm_attention.profile(params, task.eval_data(config, "valid"),
                                  max_windows=values.profile_windows, memory_span=span)
  print(json.dumps({"step": step, "context_tokens": len(context), "profile": profiles}))
  tokens = task.to_text(config, ids).split()
  where = "after its context" if len(context) else "alone (not a validation line)"
  path = plotting_attention.plot_lm_attention(
      tokens, layers[k], profiles[k], values.out,
      f"ptb {config.variant or ''} (step {step}), layer {k + 1}: a sentence read {where}",
      f"mean over {profiles[k]['windows']} validation windows of {config.seq_len} x "
      f"{config.eval_batch_size}")
  print(path)
  return path


if __name__ == "__main__":
  launch.run_cli(define_flags, run)

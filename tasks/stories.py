"""Story / summary / title summarization (RUM paper, TACL 2019, §4 E, the Science-Daily
tasks of Table 4): the pointer-generator of :mod:`tasks.summarization` on the data of
:mod:`tasks.datasets.stories` (``train.jsonl`` / ``validation.jsonl`` / ``test.jsonl`` in
``manual_dir``; there is no download and no copy in ``../shared/data``).

``config.subtask`` picks the paper's task (:func:`tasks.datasets.stories.source_target`):
``s2s`` story -> summary, ``sh2s`` the story's paragraphs shuffled (fixed per example, split
and ``config.data_seed``; None: ``config.seed``) -> summary, ``s2t`` story -> title,
``oods2s`` story -> summary trained on ``manual_dir`` and evaluated on the ``validation`` /
``test`` splits of ``ood_manual_dir`` (another dataset; the vocabulary comes from the
training data only).
Text: the source's sentences (:func:`tasks.text.summaries.split_sentences`, paragraph
breaks end sentences) and the target's, lower-cased and tokenised
(:func:`tasks.summarization.text_example`). Splits ``train`` / ``dev`` (``validation``) /
``test``.

The model, optimiser, decoding and evaluators are those of :mod:`tasks.cnn_dailymail`
(the config is :mod:`tasks.configs.stories`: the paper's settings; variants ``lead``,
``encrum``, ``decrum``, ``allrum``). Titles are short: for ``s2t`` set
``--config.min_dec_steps=0 --config.max_decode_steps=30`` (the defaults, 35 and 120, are
the summaries').
"""

import functools
import os

from tasks import cnn_dailymail
from tasks import common
from tasks import summarization as summ
from tasks.configs import stories as config_lib
from tasks.text import summaries as summaries_lib

NAME = config_lib.NAME
SUBTASKS = config_lib.SUBTASKS
EVAL_SPLITS = summ.EVAL_SPLITS
BUILDER_SPLITS = cnn_dailymail.BUILDER_SPLITS


def validate_config(config) -> None:
  """Raises ``ValueError`` naming the first bad field."""
  summ.validate_real_data_config(config, NAME)
  if config.subtask not in SUBTASKS:
    raise ValueError(f"config.subtask={config.subtask!r} must be one of {list(SUBTASKS)}.")
  if config.get("data_seed") is not None:
    common.check_int(config, "data_seed", 0)
  if not config.manual_dir:
    raise ValueError("config.manual_dir is empty: the stories task has no download; give the "
                     "folder of train.jsonl, validation.jsonl, test.jsonl "
                     "(--config.manual_dir=<folder>).")
  common.check_data_folders(config, "train.jsonl, validation.jsonl and test.jsonl")
  if (config.subtask == "oods2s") != bool(config.ood_manual_dir):
    raise ValueError(f"config.ood_manual_dir={config.ood_manual_dir!r} with "
                     f"subtask={config.subtask!r}: oods2s needs the folder of the "
                     "out-of-domain evaluation data, the other subtasks none.")
  if config.ood_manual_dir and not os.path.isdir(os.path.expanduser(config.ood_manual_dir)):
    raise ValueError(f"config.ood_manual_dir={config.ood_manual_dir!r} is not a folder.")


# ----------------------------------------------------------------------------- data


def pair_example(source: str, target: str) -> dict:
  """An example of :mod:`tasks.summarization` from a source and a target text."""
  return summ.text_example(summaries_lib.split_sentences(source),
                           summaries_lib.split_sentences(target))


@functools.lru_cache(maxsize=2)
def _data(manual_dir, ood_manual_dir, data_dir, subtask, seed, vocab_size, max_enc,
          max_dec) -> summ.Data:
  from tasks.datasets import prepare, stories as builder_lib
  try:
    builders = {"train": builder_lib.prepare(manual_dir, data_dir)}
    eval_builder = (builder_lib.prepare(ood_manual_dir, data_dir) if ood_manual_dir
                    else builders["train"])
  except FileNotFoundError as err:   # one line; a ValueError and still a FileNotFoundError
    raise prepare.MissingSourceError(" ".join(str(err).split())) from None
  builders.update(dev=eval_builder, test=eval_builder)
  examples, missing = {}, {}
  for split, name in BUILDER_SPLITS.items():
    if name not in builder_lib.available_splits(builders[split]):
      missing[split] = builder_lib.missing_split_message(builders[split], name)
      continue
    examples[split] = [pair_example(*builder_lib.source_target(r, subtask, seed, name))
                       for r in builder_lib.read_split(builders[split], name)]
  if "train" not in examples:
    raise ValueError(missing["train"])
  data = summ.encode(examples, vocab_size=vocab_size, max_enc_steps=max_enc,
                     max_dec_steps=max_dec)
  data.missing = {s: m + summ.MISSING_SPLIT_HINT for s, m in missing.items()}
  return data


def data(config) -> summ.Data:
  """The encoded splits of ``config`` (built once per process); ``sh2s`` shuffles with
  ``config.data_seed`` (None: ``config.seed``)."""
  data_seed = config.get("data_seed")
  return _data(config.manual_dir, config.ood_manual_dir, config.data_dir, config.subtask,
               int(config.seed if data_seed is None else data_seed), config.vocab_size,
               config.max_enc_steps, config.max_dec_steps)


TASK = summ.make_task(name=NAME, get_config=config_lib.get_config,
                      validate_config=validate_config, data=data)

"""CNN/DailyMail summarization (RUM paper, TACL 2019, §4 E, Table 4; See et al. 2017): the
pointer-generator of :mod:`tasks.summarization` on the non-anonymised stories.

Data: :mod:`tasks.datasets.cnn_dailymail` (the ``.story`` files and url lists in
``manual_dir``, or the download), splits ``train`` / ``dev`` (the release's
``validation``) / ``test``. Text: every article sentence (:func:`tasks.text.summaries.
split_sentences` of the cased text) and highlight lower-cased and tokenised
(:func:`tasks.summarization.text_example`); the reference summary is the highlights, one
per line. ``train_csv`` (optional) trains on a CSV with ``article`` and ``highlights``
columns instead (the Hugging Face / Kaggle layout, e.g. the 100-row sample in
``../shared/data/cnn_dailymail_sample/hf_train_sample100``); the builder's splits are then
only evaluated. Builder options: ``allow_missing_stories`` and ``malformed_stories``
(``"error"``, ``"skip"``, ``"keep"``: kept stories with no article train on an empty
source, which the model and loss handle).

The configuration is the paper's (:mod:`tasks.configs.cnn_dailymail`): hidden
256, embedding 128, vocabulary 50k, 400/100 encoder/decoder steps, Adagrad 0.15
(accumulator 0.1), batch 16, clip 2.0, beam 4 with ``min_dec_steps`` 35 and 120 decoding
steps; variants ``lead``, ``encrum``, ``decrum``, ``allrum``. Coverage: continue a run with
``--config.init_from=<workdir> --config.model.coverage=True`` (the coverage weight
``w_c`` starts at zero; the loss adds ``cov_loss_wt`` x the coverage loss).

Evaluators: ``eval`` (dev loss, every ``eval_every``), ``dev`` (ROUGE of beam search on the
first ``rouge_batches`` dev batches, every ``rouge_every``; 0: at the end only), ``test``
(ROUGE of beam search on test, at the end) and ``lead3`` (the LEAD-3 baseline on test).
ROUGE-1/2/Lsum are F1 in percent (:mod:`rumjax.evaluators.rouge`, Google's
``rouge-score``, stemming on). ``launch.predict`` writes decoded and reference summaries
side by side (:func:`tasks.summarization.submission`).
"""

import csv
import functools
import os

from tasks import common
from tasks import summarization as summ
from tasks.configs import cnn_dailymail as config_lib
from tasks.text import summaries as summaries_lib

NAME = config_lib.NAME
EVAL_SPLITS = summ.EVAL_SPLITS
BUILDER_SPLITS = {"train": "train", "dev": "validation", "test": "test"}


def validate_config(config) -> None:
  """Raises ``ValueError`` naming the first bad field."""
  summ.validate_real_data_config(config, NAME)
  common.check_data_folders(config, "cnn_stories/ (or dailymail_stories/) and url_lists/")
  if config.train_csv and not os.path.isfile(os.path.expanduser(config.train_csv)):
    raise ValueError(f"config.train_csv={config.train_csv!r} is not a file; give a CSV with "
                     "'article' and 'highlights' columns, or '' to train on the stories.")
  if config.malformed_stories not in ("error", "skip", "keep"):
    raise ValueError(f"config.malformed_stories={config.malformed_stories!r} must be "
                     "'error', 'skip' or 'keep'.")


# ----------------------------------------------------------------------------- data


def story_example(article: str, highlights: str) -> dict:
  """An example of :mod:`tasks.summarization` from a story's article and highlights
  (one per line)."""
  return summ.text_example(summaries_lib.split_sentences(article),
                           [h for h in highlights.split("\n") if h.strip()])


def read_csv(path: str) -> list:
  """The examples of a CSV with ``article`` and ``highlights`` columns."""
  with open(os.path.expanduser(path), newline="", encoding="utf-8") as f:
    reader = csv.DictReader(f)
    missing = {"article", "highlights"} - set(reader.fieldnames or ())
    if missing:
      raise ValueError(f"{path} lacks the column(s) {sorted(missing)}; it needs 'article' "
                       "and 'highlights' (the Hugging Face cnn_dailymail layout).")
    examples = []
    for line, row in enumerate(reader, start=2):    # line 1 is the header
      if row["article"] is None or row["highlights"] is None:
        raise ValueError(f"{path}, line {line}: the row has no 'article' or no "
                         "'highlights' value (too few fields); fix or drop the row.")
      examples.append(story_example(row["article"], row["highlights"]))
    return examples


@functools.lru_cache(maxsize=2)
def _data(manual_dir, data_dir, train_csv, allow_missing, malformed, vocab_size, max_enc,
          max_dec) -> summ.Data:
  from tasks.datasets import cnn_dailymail as builder_lib, prepare
  try:
    builder = builder_lib.prepare(manual_dir, data_dir, allow_missing_stories=allow_missing,
                                  malformed_stories=malformed)
  except FileNotFoundError as err:   # one line; a ValueError and still a FileNotFoundError
    raise prepare.MissingSourceError(" ".join(str(err).split())) from None
  built = builder_lib.available_splits(builder)
  examples = {}
  for split, name in BUILDER_SPLITS.items():
    if name in built and not (split == "train" and train_csv):
      examples[split] = [story_example(r["article"], r["highlights"])
                         for r in builder_lib.read_split(builder, name)]
  if train_csv:
    examples["train"] = read_csv(train_csv)
  if "train" not in examples:
    raise ValueError(builder_lib.missing_split_message(builder, "train") +
                     " Or train on a CSV: --config.train_csv=<file>.")
  data = summ.encode(examples, vocab_size=vocab_size, max_enc_steps=max_enc,
                     max_dec_steps=max_dec)
  data.missing = {s: builder_lib.missing_split_message(builder, BUILDER_SPLITS[s]) +
                  summ.MISSING_SPLIT_HINT for s in EVAL_SPLITS if s not in examples}
  return data


def data(config) -> summ.Data:
  """The encoded splits of ``config`` (built once per process)."""
  return _data(config.manual_dir, config.data_dir, config.train_csv,
               bool(config.allow_missing_stories), config.malformed_stories,
               config.vocab_size, config.max_enc_steps, config.max_dec_steps)


TASK = summ.make_task(name=NAME, get_config=config_lib.get_config,
                      validate_config=validate_config, data=data)

"""The papers' runs as data: the experiments of ``launch.reproduce`` (one module per task,
e.g. :mod:`tasks.experiments.recall`: models as dotted-field overrides, the paper's numbers,
smoke-test sizes, the table's columns and the figure) and the bAbI set-ups of
``launch.babi_all`` (:mod:`tasks.experiments.babi`).

    >>> exp = tasks.experiments.EXPERIMENTS["recall_T30"]
    >>> rumjax.experiments.run_experiment(exp, "/tmp/repro", ["rum_lam1", "gru"])
"""

from tasks.experiments import clue, copying, lam, ptb, recall, sst, summarization

EXPERIMENTS = {**clue.EXPERIMENTS, **copying.EXPERIMENTS, **lam.EXPERIMENTS, **ptb.EXPERIMENTS, **recall.EXPERIMENTS,
               **sst.EXPERIMENTS, **summarization.EXPERIMENTS}

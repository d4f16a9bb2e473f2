"""Benchmarks behind ``launch/benchmark.py``: side-by-side step times of the model families.

- ``timing``: the machine's matmul peak, compile-and-first-run, alternated timing rounds,
  peak RSS.
- ``cells``: training steps of RUM vs Flax's GRU/LSTM (and the LSTMN) at the papers' shapes.
- ``decoding``: greedy vs beam search of a one-cell decoder.
- ``lm``: the PTB language models' training steps (FS-RUM-2 vs FS-LSTM-2, ...).
- ``encoders``: StarSaber vs Transformer vs ReZero training steps.

Each module's ``run_*`` returns rows (dicts, as written to the JSON) and its ``format_*``
the printed table. Submodules are imported explicitly (``from rumjax.benchmarks import
cells``), so the RSS subprocess loads only what it measures.
"""

"""Batching shared by the tasks: example sets, padding, token streams, MLM masking.

* :mod:`tasks.data.batches`: :class:`ShuffledBatches` (deterministic, process-sharded,
  resumable training batches of a fixed data set), :func:`eval_batches`,
  :func:`process_rows`, :func:`pad_to_length`, :func:`bucket_length`;
* :mod:`tasks.data.stream`: :class:`StreamBatches` and :func:`eval_stream` for truncated
  back-propagation through time over one token stream (language models);
* :mod:`tasks.data.mlm`: :func:`mask_tokens`, dynamic masked-LM corruption (StarSaber).
"""

from tasks.data.batches import (Batch, ShuffledBatches, bucket_length, eval_batches,
                                pad_to_length, process_rows)
from tasks.data.mlm import mask_tokens, replacement_ids
from tasks.data.stream import StreamBatches, eval_stream

__all__ = ["Batch", "ShuffledBatches", "StreamBatches", "bucket_length", "eval_batches",
           "eval_stream", "mask_tokens", "pad_to_length", "process_rows", "replacement_ids"]

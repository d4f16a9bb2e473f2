"""Models by name (``config.model.name``; see ``registry``): sequence models built from a
recurrent cell chosen by name (``sequence``) and the sentence-level bAbI model (``babi``)."""

from rumjax.models.registry import MODELS, build_model, model_fields, register_model
from rumjax.models.sequence import (SequenceClassifier, SequenceTagger, TokenInput,
                                    TokenSequenceModel, build_sequence_model,
                                    run_recurrence)
from rumjax.models import babi, lm  # noqa: F401  (register "sentence_qa", "lm")

__all__ = ["MODELS", "SequenceClassifier", "SequenceTagger", "TokenInput", "build_model",
           "TokenSequenceModel", "build_sequence_model", "model_fields", "register_model",
           "run_recurrence"]

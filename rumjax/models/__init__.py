"""Models by name (``config.model.name``; see ``registry``): sequence models built from a
recurrent cell chosen by name (``sequence``) and the sentence-level bAbI model (``babi``).

Unregistered building blocks: the LSTMN layers (``lstmn``: ``LSTMN``, ``StackedLSTMN``) and
the two-sequence LSTMN models (``fusion``: ``ShallowFusion``, ``DeepFusion``)."""

from rumjax.models.registry import MODELS, build_model, model_fields, register_model
from rumjax.models.sequence import (SequenceClassifier, SequenceTagger, TokenInput,
                                    TokenSequenceModel, build_sequence_model,
                                    run_recurrence)
from rumjax.models import babi, lm  # noqa: F401  (register "sentence_qa", "lm")
from rumjax.models import text_classifier  # noqa: F401  ("lstm", "lstmn", "lstmn_*")
from rumjax.models import encoders  # noqa: F401
from rumjax.models import pointer_generator  # noqa: F401
from rumjax.models.fusion import DeepFusion, FusionOutputs, ShallowFusion
from rumjax.models.lstmn import LSTMN, StackedLSTMN

__all__ = ["DeepFusion", "FusionOutputs", "LSTMN", "MODELS", "SequenceClassifier",
           "ShallowFusion", "StackedLSTMN", "SequenceTagger", "TokenInput", "build_model",
           "TokenSequenceModel", "build_sequence_model", "model_fields", "register_model",
           "run_recurrence"]

"""Models by name, built from the ``model`` part of a config.

    >>> @register_model("tagger")
    ... class SequenceTagger(nn.Module):
    ...   cell: nn.RNNCellBase
    ...   vocab_size: int
    ...   ...
    >>> model = build_model(config.model, vocab_size=10, num_classes=9)

``config.model`` holds ``name`` (the registered model) and the model's own fields; for a
model with a ``cell`` field also ``cell`` (a registered cell name), ``hidden_size`` and the
cell's options (``lam``, ``eta``, ``zoneout``, ...; see
:func:`rumjax.cells.cell_from_config`). What the data decides (``vocab_size``,
``num_classes``) is passed by the task as keyword arguments.
"""

import dataclasses
from typing import Any, Mapping

from rumjax.cells import cell_from_config
from rumjax.models import precision
from rumjax.registry import Registry

MODELS = Registry("model")


def register_model(name: str, cls=None):
  """Registers a Flax module class under ``name`` (usable as a decorator)."""
  return MODELS.register(name, cls)


def model_fields(cls) -> list[str]:
  """The constructor fields of a Flax module class (besides ``parent`` and ``name``)."""
  return [f.name for f in dataclasses.fields(cls) if f.init and f.name not in ("parent",
                                                                               "name")]


def build_model(model_config: Mapping[str, Any], **kwargs: Any):
  """The model ``model_config["name"]``.

  Its fields are taken from ``kwargs`` first, then from ``model_config`` (keys that are
  not fields of the model, such as the cell's options, are ignored); a ``cell`` field is
  built with :func:`rumjax.cells.cell_from_config` from ``model_config["cell"]``,
  ``model_config["hidden_size"]`` and the cell's options in ``model_config``.

  The precision policy ``model_config["dtype"]``/``["param_dtype"]`` (names such as
  ``"bfloat16"``, see :mod:`rumjax.models.precision`) is resolved to jnp dtypes, and
  ``model_config["precision"]`` (``"default"``, ``"high"``, ``"highest"``) to a
  ``lax.Precision`` or None, and passed to the model and to its cell, as their
  ``dtype``/``param_dtype``/``precision`` fields.
  """
  cls = MODELS.get(model_config["name"])
  fields = model_fields(cls)
  unknown = sorted(set(kwargs) - set(fields))
  if unknown:
    raise ValueError(f"model {model_config['name']!r} has no field(s) {unknown}; "
                     f"its fields: {fields}.")
  model_config = precision.resolve(model_config)
  args = {f: model_config[f] for f in fields if f in model_config and f != "cell"}
  if "cell" in fields and "cell" not in kwargs:
    args["cell"] = cell_from_config(model_config["cell"], model_config["hidden_size"],
                                    model_config)
  args.update(kwargs)
  return cls(**args)

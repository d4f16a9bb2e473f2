"""What the tasks share: the common config fields and their checks.

Batching lives in :mod:`tasks.data` (``ShuffledBatches``, ``eval_batches``, streams,
padding), text handling in :mod:`tasks.text` (tokenizers, ``Vocabulary``).
"""

import os
from typing import Any, Mapping, Optional

import ml_collections
import numpy as np
from ml_collections import config_dict

from rumjax import evaluators, models, registry
from rumjax.core import rum as rum_lib
from rumjax.cells import cell_names
from rumjax.models import precision
from rumjax.training import optim

Batch = dict[str, np.ndarray]


# --------------------------------------------------------------------------- config


def base_config(task: str, variant: Optional[str]) -> ml_collections.ConfigDict:
  """The fields of the loop and the optimizer, with neutral defaults (a task overrides them).

  The model's fields live in ``config.model`` (e.g. :func:`cell_model_config`), the
  evaluators in ``config.evals`` (see :mod:`rumjax.evaluators`; their ``every`` usually
  refers to ``config.eval_every``, so ``--eval_every`` sets them all).

  ``l2`` adds ``l2 * w`` to every gradient (0 is off). ``grad_clip`` is ``None`` (a typed float placeholder, so ``--config.grad_clip=1.0``
  works): None (or 0) switches gradient clipping (by global norm) off.
  ``lr_boundaries``/``lr_values`` empty means a constant ``learning_rate``; else
  ``lr_values`` has one more entry than ``lr_boundaries`` (piecewise constant, in steps).
  ``lr_plateau_factor`` < 1 multiplies the learning rate by it whenever the evaluator
  metric ``lr_plateau_metric`` has not improved (by more than ``lr_plateau_min_delta``)
  for ``lr_plateau_patience`` evaluations (``lr_plateau_mode`` "min" or "max"); 1.0 is off.
  """
  c = ml_collections.ConfigDict()
  c.task = task
  c.variant = config_dict.placeholder(str)
  c.variant = variant
  # The modules imported before the task is looked up (launch.train --imports: a task, cell
  # or model of your own); recorded so that evaluate, predict and the analyses find them.
  c.imports = ""
  # Optimisation (checked by rumjax.training.optim.validate_config).
  c.optimizer = "rmsprop"
  c.learning_rate = 1e-3
  c.rmsprop_decay = 0.9
  c.adagrad_init = 0.1
  c.grad_clip = config_dict.placeholder(float)
  c.warmup_steps = 0        # linear warm-up of the rate over these steps (0: none)
  c.l2 = 0.0
  c.lr_boundaries = []
  c.lr_values = []
  c.lr_plateau_factor = 1.0
  c.lr_plateau_metric = ""
  c.lr_plateau_mode = "min"
  c.lr_plateau_patience = 1
  c.lr_plateau_min_delta = 0.0
  c.batch_size = 128
  c.num_steps = 1000
  c.seed = 0
  # Bookkeeping.
  c.eval_every = 100
  c.log_every = 50
  c.init_from = ""  # a workdir whose latest checkpoint's params initialise the model
  # > 0: every parameter drawn from U(-init_uniform, init_uniform) instead of the modules'
  # initialisers (the Torch language-model code of Zaremba et al. 2014 and of the LSTMN
  # authors: 0.05 / 0.1); 0 keeps the modules' own.
  c.init_uniform = 0.0
  # Early stopping (off when the metric is ""): the best checkpoint is kept in
  # <workdir>/best (rumjax.training.hooks.EarlyStopping; launch.evaluate --best reads it).
  c.early_stopping_metric = ""
  c.early_stopping_mode = "max"
  c.early_stopping_patience = 5
  c.checkpoint_every = 1000
  c.keep_checkpoints = 3
  c.evals = ml_collections.ConfigDict()
  return c


def check_variant(name: str, variant: Optional[str], variants) -> None:
  """A one-line ``ValueError`` unless ``variant`` is None (the small set-up) or one of
  ``variants`` (a task config's ``get_config``)."""
  if variant is not None and variant not in variants:
    raise ValueError(f"unknown {name} variant {variant!r}; known variants are "
                     f"{list(variants)} (or None for the small default).")


def cell_model_config(name: str, **fields: Any) -> ml_collections.ConfigDict:
  """``config.model`` of a model built around a recurrent cell (``rumjax.models``).

  ``name`` is the registered model (``"tagger"``, ``"classifier"``, ``"sentence_qa"``);
  ``cell`` a registered cell and ``hidden_size`` its size; the cell's options (``lam``,
  ``eta``, ``activation``, ``update_gate``, ``layer_norm``, ``zoneout``) are passed to
  the cells that have them (``learn_lam``: RUM's ``lam`` trained, from ``lam``). ``eta`` is
  a typed float placeholder: ``None`` switches time
  normalization off, ``--config.model.eta=1.0`` sets it. ``embed_dim`` ``None`` means
  one-hot inputs. ``dtype``/``param_dtype``/``precision``: the precision policy
  (:func:`add_precision`).
  ``fields`` override the defaults (and may add the model's own fields).
  """
  m = ml_collections.ConfigDict()
  m.name = name
  m.cell = "rum"
  m.hidden_size = 100
  m.lam = 1.0   # a float, so that --config.model.lam=0.5 parses (any real >= 0)
  m.learn_lam = False   # RUM: lam a trained parameter from m.lam, kept >= 0
  m.eta = config_dict.placeholder(float)
  m.activation = "relu"
  m.update_gate = True
  m.layer_norm = False
  m.zoneout = 0.0
  m.embed_dim = config_dict.placeholder(int)
  add_precision(m)
  m.update(fields)
  return m


def add_precision(model: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Adds the mixed-precision fields to a ``config.model`` (returned for chaining):
  ``dtype`` the computation (``"float32"`` or ``"bfloat16"``, e.g.
  ``--config.model.dtype=bfloat16``), ``param_dtype`` the parameters (``"float32"``) and
  ``precision`` the matmul precision of every ``Dense``, ``Einsum`` and ``dot_general``
  of the model and its cells (``"default"``: the backend's, TF32 on an NVIDIA GPU and
  one bfloat16 pass on a TPU; ``"high"``; ``"highest"``: true float32 everywhere, e.g.
  ``--config.model.precision=highest``); see :mod:`rumjax.models.precision` for what
  stays float32 and at HIGHEST whatever they say."""
  model.dtype = "float32"
  model.param_dtype = "float32"
  model.precision = "default"
  return model


def eval_entry(split: str, every, batches: int = 0, *, type: str = "loss",
               **options) -> dict:
  """One ``config.evals`` entry (``every`` may be a reference to ``config.eval_every``);
  :func:`rumjax.evaluators.eval_entry` with a task's usual argument order. Every entry has
  ``batches_at_end`` (an int placeholder, ``None`` = ``batches``), so that a run saved with
  it set loads into any variant's config and the command line can set it."""
  options.setdefault("batches_at_end", config_dict.placeholder(int))
  return evaluators.eval_entry(type, split, every=every, batches=batches, **options)


def _is_int(x) -> bool:
  return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _is_number(x) -> bool:
  return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def check_int(config, field: str, minimum: int, prefix: str = "config") -> int:
  value = config[field]
  if not _is_int(value) or value < minimum:
    raise ValueError(f"{prefix}.{field}={value!r} must be an integer >= {minimum}.")
  return int(value)


def validate_common(config: Mapping[str, Any], splits=None) -> None:
  """Checks the fields of :func:`base_config` and ``config.evals``; ``ValueError`` names
  the field. ``splits``: the task's evaluation splits."""
  optim.validate_config(config)
  check_int(config, "batch_size", 1)
  check_int(config, "num_steps", 0)
  check_int(config, "seed", 0)
  check_int(config, "eval_every", 0)
  check_int(config, "log_every", 0)
  check_int(config, "checkpoint_every", 0)
  check_int(config, "keep_checkpoints", 1)
  if not _is_number(config.get("init_uniform", 0.0)) or config.get("init_uniform", 0.0) < 0:
    raise ValueError(f"config.init_uniform={config['init_uniform']!r} must be a number >= 0 "
                     "(0: the modules' initialisers).")
  if "early_stopping_metric" in config:
    if not isinstance(config["early_stopping_metric"], str):
      raise ValueError(f"config.early_stopping_metric={config['early_stopping_metric']!r} "
                       "must be a metric name such as 'eval_accuracy', or '' (off).")
    if config["early_stopping_mode"] not in ("max", "min"):
      raise ValueError(f"config.early_stopping_mode={config['early_stopping_mode']!r} must "
                       "be 'max' or 'min'.")
    check_int(config, "early_stopping_patience", 1)
  evaluators.validate_evals(config["evals"], splits=splits)
  if "model" in config:
    precision.check_model_precision(config["model"])


def check_rum_fields(model: Mapping[str, Any],
                     bools: tuple = ("update_gate", "learn_lam")) -> None:
  """Checks a model config's RUM fields (``lam``, ``eta``, ``activation`` and the flags
  ``bools``); ``ValueError`` names the field."""
  try:
    rum_lib.check_lam(model["lam"])
  except ValueError as e:
    raise ValueError(f"config.model.lam: {e}") from None
  try:
    rum_lib.check_eta(model["eta"])
  except ValueError as e:
    raise ValueError(f"config.model.eta: {e}") from None
  if model["activation"] not in rum_lib.ACTIVATIONS:
    raise ValueError(f"config.model.activation={model['activation']!r} is unknown; accepted "
                     f"names are {sorted(rum_lib.ACTIVATIONS)}.")
  for field in bools:
    if not isinstance(model[field], bool):
      raise ValueError(f"config.model.{field}={model[field]!r} must be True or False.")


def validate_cell_model(model: Mapping[str, Any]) -> None:
  """Checks the fields of :func:`cell_model_config`; ``ValueError`` names the field."""
  if model["name"] not in models.MODELS:
    raise ValueError("config.model.name: " + registry.unknown_name_message(
        "model", model["name"], models.MODELS.names()))
  if model["cell"] not in cell_names():
    raise ValueError("config.model.cell: " + registry.unknown_name_message(
        "cell", model["cell"], cell_names()))
  check_int(model, "hidden_size", 1, "config.model")
  check_rum_fields(model, bools=("update_gate", "layer_norm", "learn_lam"))
  if not _is_number(model["zoneout"]) or not 0 <= model["zoneout"] < 1:
    raise ValueError(f"config.model.zoneout={model['zoneout']!r} must be in [0, 1).")
  if model.get("embed_dim") is not None:
    check_int(model, "embed_dim", 1, "config.model")


_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shared_data_dir(name: str) -> str:
  """``../shared/data/<name>`` next to the checkout if it exists, else ``""`` (download)."""
  path = os.path.normpath(os.path.join(_REPO_ROOT, os.pardir, "shared", "data", name))
  return path if os.path.isdir(path) else ""


def check_data_folders(config: Mapping[str, Any], expected: str) -> None:
  """Checks ``config.manual_dir`` and ``config.data_dir`` (strings; ``manual_dir`` an
  existing folder or ``""``); ``expected`` says what ``manual_dir`` must hold."""
  for field in ("manual_dir", "data_dir"):
    if not isinstance(config[field], str):
      raise ValueError(f"config.{field}={config[field]!r} must be a string (a folder, or "
                       "'' for the default).")
  if config["manual_dir"] and not os.path.isdir(os.path.expanduser(config["manual_dir"])):
    raise ValueError(f"config.manual_dir={config['manual_dir']!r} is not a folder; it must "
                     f"hold {expected}, or be '' to download them.")
  data_dir = os.path.expanduser(config["data_dir"])
  while data_dir and not os.path.exists(data_dir):   # the part of the path that exists
    data_dir = os.path.dirname(data_dir.rstrip(os.sep))
  if data_dir and not os.path.isdir(data_dir):
    raise ValueError(f"config.data_dir={config['data_dir']!r}: {data_dir} is a file; pass a "
                     "folder for the prepared data (it is created if missing), or '' for "
                     "the default.")


def check_task(config, name: str, variants) -> None:
  if config["task"] != name:
    raise ValueError(f"config.task={config['task']!r} but this is the {name!r} task.")
  if config["variant"] is not None and config["variant"] not in variants:
    raise ValueError(f"config.variant={config['variant']!r} is unknown; known variants "
                     f"are {list(variants)} (or None).")

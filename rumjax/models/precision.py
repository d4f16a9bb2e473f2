"""The zoo's mixed-precision policy, Flax style: ``dtype`` computes, ``param_dtype`` stores.

``config.model.dtype`` (``"float32"``, the default, or ``"bfloat16"``) is the dtype of the
computation of every model: embeddings, ``Dense`` layers, attention projections, the
recurrent cells' gate matmuls and hidden states. ``config.model.param_dtype`` (default
and only accepted value ``"float32"``) is the dtype the parameters are created and
stored in (so the optimizer state and the checkpoints are float32). :func:`rumjax.models.build_model` resolves both
names (:func:`resolve`) and passes them to the model and to its cells.

Every hidden ``Dense`` is :class:`rumjax.layers.dense.Dense` and every cell and layer of
the zoo adds its biases and residual weights with :func:`rumjax.core.precision.add_bias`
and :func:`~rumjax.core.precision.scale`: in float32, so that their gradients (sums over
the batch and time) are accumulated in float32 (Flax's own ``GRUCell``,
``OptimizedLSTMCell`` and ``MultiHeadDotProductAttention`` add theirs in ``dtype``).

Whatever the policy, these stay float32 (as in Flax's own modules and recurrentgemma):
the logits the models return (their output layers are :func:`output_dense`: a float32
product and bias, so the logits and the gradients summed over the rows are float32; other
logits are cast before any softmax / loss, :func:`float32_logits`),
attention logits and softmax (StarSaber, the Transformer's ``force_fp32_for_softmax``,
LSTMN, the pointer-generator's attention, pointer distribution and coverage),
layer-norm statistics (``nn.LayerNorm`` reduces in float32), the losses and metrics
(:mod:`rumjax.metrics`), beam-search scores (:mod:`rumjax.decoding`) and RUM's rotation
path (:mod:`rumjax.core.rum`). A state carried between windows or decoder steps keeps the
dtypes of its cell's ``initialize_carry`` (:func:`carry_like`), so a jitted step sees
the same types at every call.

``config.model.precision`` is the matmul precision of every ``Dense``, ``Einsum`` and
``dot_general`` of the model and its cells (Flax's ``precision=``), a name of
:data:`rumjax.core.precision.PRECISIONS`: ``"default"`` (the backend's default, ``None``
as in Flax: float32 on a CPU, TF32 on an NVIDIA GPU from Ampere on, one bfloat16 pass on
a TPU), ``"high"``, or ``"highest"`` (true float32 on every backend). :func:`resolve`
turns it into a ``lax.Precision`` or None; :func:`rumjax.models.build_model` passes it to
the model and its cells as their ``precision`` field. RUM's rotation path and the
unitary cells' are at ``HIGHEST`` whatever it says.
"""

from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from rumjax.core.precision import PRECISIONS, at_least_float32, resolve_precision
from rumjax.cells.base import DTYPES   # the one table of policy names (cells use it too)
from rumjax.layers.dense import promote_keeping_bias

FIELDS = ("dtype", "param_dtype")
# The matmul precision's field (names of PRECISIONS; "default" when a config lacks it).
PRECISION_FIELD = "precision"


def get_dtype(name: Any, field: str = "dtype") -> Any:
  """The jnp dtype of a policy name; a one-line ``ValueError`` naming the choices.

  >>> get_dtype("bfloat16")   # jnp.bfloat16
  """
  if not isinstance(name, str) or name not in DTYPES:
    raise ValueError(f"config.model.{field}={name!r} is unknown; accepted names are "
                     f"{list(DTYPES)}.")
  if field == "param_dtype" and name != "float32":
    # bfloat16 parameters: the recurrent cells' carries would change dtype between steps
    # (float32 inputs) and the orthogonal initialisers' QR has no bfloat16 kernel.
    raise ValueError(f"config.model.param_dtype={name!r} is not supported: the parameters, "
                     "the optimizer state and checkpoints are float32; for a bfloat16 "
                     "computation set config.model.dtype='bfloat16'.")
  return DTYPES[name]


def get_precision(name: Any) -> Any:
  """The ``lax.Precision`` (or None, the backend's default) of a matmul precision name of
  :data:`~rumjax.core.precision.PRECISIONS`; a one-line ``ValueError`` naming the
  choices.

  >>> get_precision("highest")   # jax.lax.Precision.HIGHEST
  """
  try:
    return resolve_precision(name)
  except ValueError:
    raise ValueError(f"config.model.precision={name!r} is unknown; accepted names are "
                     f"{list(PRECISIONS)}.") from None


def check_model_precision(model: Mapping[str, Any]) -> None:
  """Checks ``config.model.dtype``, ``param_dtype`` and ``precision`` (when present)."""
  for field in FIELDS:
    if field in model:
      get_dtype(model[field], field)
  if PRECISION_FIELD in model:
    get_precision(model[PRECISION_FIELD])


def resolve(model: Mapping[str, Any]) -> dict:
  """``dict(model)`` with the names of ``dtype``/``param_dtype`` (when present) replaced
  by jnp dtypes and that of ``precision`` by a ``lax.Precision`` or None, ready to be
  passed to modules and cells."""
  out = dict(model)
  for field in FIELDS:
    if isinstance(out.get(field), str):
      out[field] = get_dtype(out[field], field)
  if PRECISION_FIELD in out:
    out[PRECISION_FIELD] = get_precision(out[PRECISION_FIELD])
  return out


def float32_logits(logits: jax.Array) -> jax.Array:
  """Logits in float32, or wider if they are (the policy: what feeds a softmax or a loss
  is never bfloat16; float64 stays float64)."""
  return jnp.asarray(logits, at_least_float32(logits))


def _float32_dot(lhs, rhs, dimension_numbers, precision=None, **kwargs):
  """``lax.dot_general`` with a float32 (or wider) result: the products of bfloat16
  operands are summed in float32 and not rounded back to bfloat16."""
  kwargs["preferred_element_type"] = at_least_float32(jnp.result_type(lhs, rhs))
  return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision, **kwargs)


def output_dense(features: int, *, dtype: Any, param_dtype: Any, precision: Any,
                 name: str) -> nn.Dense:
  """A model's output layer (its logits): ``nn.Dense`` (the same parameters, ``kernel``
  and ``bias``) whose product runs in ``dtype`` with a float32 result and whose bias is
  added in float32, so the logits are float32 (:func:`float32_logits` is then a no-op)
  and the gradients of its kernel and bias are sums over the rows (batch, and time for a
  sequence's outputs) in float32. Flax's ``Dense`` in bfloat16 sums them in bfloat16: over
  240 rows the bias gradient was 1.3% off the exact sum of the same cotangents, and a step
  sharded over two devices differed from the unsharded one by that much."""
  return nn.Dense(features, dtype=dtype, param_dtype=param_dtype, precision=precision,
                  dot_general=_float32_dot, promote_dtype=promote_keeping_bias, name=name)


def carry_like(carry: Any, template: Any) -> Any:
  """``carry`` with every leaf cast to the dtype of ``template``'s (a state carried
  between windows or decoder steps keeps the dtypes it started with)."""
  return jax.tree.map(lambda c, t: jnp.asarray(c, t.dtype), carry, template)

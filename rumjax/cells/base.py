"""What the comparison cells share: the precision policy, the zero carry, zoneout.

``RecurrentCell`` is the base of the cells in this package (EURNN, GORU, uRNN, FW-LN,
LN-LSTM). A subclass declares ``features`` (the hidden size) as its first field and its
own options after it; the base adds three keyword-only fields, so ``features`` stays the
first positional field as in ``nn.GRUCell``::

    @register_cell("mycell")
    class MyCell(RecurrentCell):
      features: int
      alpha: float = 0.5

      @nn.compact
      def __call__(self, carry, inputs):
        kernel = self.param("kernel_x", init, (inputs.shape[-1], self.features),
                            self.param_dtype)
        inputs, h, (kernel,) = self.promote(inputs, kernel, carry, kernel)
        h = jnp.tanh(inputs @ kernel + self.alpha * h)
        return h, h

The default carry is ``h_0 = carry_init(rng, (*batch, N))``; a cell with a structured
carry (``(A, h)``, ``(c, h)``) overrides ``initialize_carry`` and builds each state with
:meth:`RecurrentCell.hidden_carry`.

Precision policy (Flax's, as ``nn.GRUCell``; DESIGN.md section 3.5). ``param_dtype``
(float32 by default) is the dtype the parameters are created and stored in; ``dtype`` is
the dtype of the computation (``None``: the promotion of the inputs, the first kernel and
the carry, Flax's rule), so under ``dtype=jnp.bfloat16`` the matmuls of the inputs and of
the gates run in bfloat16 and the hidden outputs are bfloat16. What stays float32:

- layer-norm statistics (``nn.LayerNorm`` reduces in float32 whatever its ``dtype``);
- the unitary path of the unitary cells (``UNITARY = True``: EURNN, GORU, uRNN): the
  rotation angles' cos/sin and the Givens layers (elementwise), the products with the
  orthogonal matrix (``precision=HIGHEST``), and their recurrent state, which is carried
  in :func:`precise` of the computation dtype (float32 under bfloat16, as recurrentgemma
  carries its recurrent state) so that no rounding to bfloat16 accumulates over time.

The carry of the other cells is in the computation dtype (``dtype`` when set, else
``param_dtype``), so that a scan's carry keeps one dtype from step to step.

Matmul precision (Flax's ``precision=``; DESIGN.md section 3.5): every cell has a
``precision`` field, ``None`` or ``"default"`` (the backend's default: float32 on a CPU,
TF32 on an NVIDIA GPU, one bfloat16 pass on a TPU), ``"high"``, ``"highest"`` or a
``jax.lax.Precision`` (:data:`rumjax.core.precision.PRECISIONS`). It applies to the
cell's gate and input matmuls (:func:`matmul`); the unitary and rotation paths stay at
``HIGHEST`` whatever it says.
"""

import dataclasses
from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from rumjax.core import precision as precision_lib

Array = jax.Array

# The names a config may give a dtype by (``config.model.dtype``, ``--dtype``).
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
# The precision of every dot product on a unitary / rotation path (:mod:`rumjax.core.precision`).
HIGHEST = precision_lib.HIGHEST
resolve_precision = precision_lib.resolve_precision


def matmul(a: Array, b: Array, precision: Any = None) -> Array:
  """``a @ b`` at the matmul precision ``precision`` (a name of
  :data:`~rumjax.core.precision.PRECISIONS`, a ``lax.Precision`` or None: the backend's
  default), as Flax's ``Dense(precision=...)`` computes it."""
  return jnp.matmul(a, b, precision=resolve_precision(precision))


# A jax.default_matmul_precision context for code without a precision argument.
matmul_precision = precision_lib.matmul_precision


def resolve_dtype(value: Any, field: str = "dtype") -> Any:
  """``value`` as a dtype: a name of ``DTYPES`` (``"bfloat16"``), a dtype, or ``None``.

  Raises a one-line ``ValueError`` naming the field and the accepted names otherwise.
  """
  if value is None:
    return None
  if isinstance(value, str):
    if value not in DTYPES:
      raise ValueError(f"{field}={value!r} is not a known dtype name; choose one of "
                       f"{', '.join(DTYPES)}.")
    return DTYPES[value]
  try:
    if jnp.issubdtype(jnp.dtype(value), jnp.floating):
      return value
  except TypeError:
    pass
  raise ValueError(f"{field}={value!r} is not a floating dtype; choose one of "
                   f"{', '.join(DTYPES)}.")


def precise(dtype: Any) -> Any:
  """At least float32: the dtype of a unitary path or state under computation ``dtype``
  (``bfloat16 -> float32``, ``float32 -> float32``, ``float64 -> float64``)."""
  return precision_lib.at_least_float32(dtype)


def precise_state(state: Array, dtype: Any) -> Array:
  """``state`` in the dtype a unitary cell carries it in: :func:`precise` of the
  computation ``dtype``, never below ``state``'s own dtype."""
  return jnp.asarray(state, jnp.promote_types(precise(dtype), state.dtype))


def check_probability(name: str, p: float) -> None:
  """``ValueError`` naming ``name`` unless ``0 <= p < 1``."""
  if not 0.0 <= p < 1.0:
    raise ValueError(f"{name}={p!r} must be a probability in [0, 1).")


def zoneout(module: nn.Module, rate: float, prev: Array, new: Array, *,
            deterministic: bool) -> Array:
  """Zoneout (Krueger et al., 2017) of one state, <float>[..., N] -> <float>[..., N].

  Training (``deterministic=False``): each unit keeps its previous value with probability
  ``rate``, ``h_t = where(m, h_{t-1}, h~_t)`` with ``m ~ Bernoulli(rate)`` per unit, drawn
  from ``module``'s ``"dropout"`` RNG. Evaluation: the expectation
  ``rate * h_{t-1} + (1 - rate) * h~_t``. ``rate = 0`` returns ``new`` (no RNG is used).

  Args:
    module: the cell (its ``make_rng("dropout")`` draws the mask).
    rate: the zoneout probability, in [0, 1).
    prev: the previous state ``h_{t-1}``.
    new: the updated state ``h~_t``, same shape.
    deterministic: evaluation mode.
  """
  if rate == 0:
    return new
  if deterministic:
    return rate * prev + (1.0 - rate) * new
  keep = jax.random.bernoulli(module.make_rng("dropout"), rate, new.shape)
  return jnp.where(keep, prev, new)


def promote(dtype: Optional[Any], inputs: Array, kernel: Array, carry: Any, *params: Array):
  """:meth:`RecurrentCell.promote` as a pure function of the computation ``dtype`` (the
  pure step functions of the cells, shared by the Linen and NNX front ends, call it)."""
  dtype = nn.dtypes.canonicalize_dtype(inputs, kernel, *jax.tree.leaves(carry), dtype=dtype)
  return jax.tree.map(lambda a: jnp.asarray(a, dtype), (inputs, carry, params))


class RecurrentCell(nn.RNNCellBase):
  """Base of the comparison cells: ``dtype``/``param_dtype``/``carry_init`` and helpers.

  Attributes:
    dtype: the dtype of the computation (keyword only); ``None`` promotes the inputs,
      the first kernel and the carry (Flax's rule).
    param_dtype: the dtype of the parameters (keyword only; float32).
    carry_init: initializer of the hidden state ``h_0`` (keyword only; zeros), created in
      :attr:`carry_dtype`.
    precision: the matmul precision of the gate and input matmuls (keyword only; None
      or ``"default"``: the backend's default; ``"high"``, ``"highest"``, a
      ``lax.Precision``); the unitary path is at ``HIGHEST`` whatever it says.

  A unitary cell sets the class attribute ``UNITARY = True``: its carry is then in
  :func:`precise` of the computation dtype (see the module docstring).
  """
  UNITARY = False
  dtype: Optional[Any] = dataclasses.field(default=None, kw_only=True)
  param_dtype: Any = dataclasses.field(default=jnp.float32, kw_only=True)
  carry_init: Callable = dataclasses.field(default=nn.initializers.zeros_init(),
                                           kw_only=True)
  precision: Any = dataclasses.field(default=None, kw_only=True)

  def promote(self, inputs: Array, kernel: Array, carry: Any, *params: Array):
    """Casts ``inputs``, ``carry`` (any pytree) and ``params`` to the computation dtype.

    The dtype is ``self.dtype`` if set, else the promotion of ``inputs``, ``kernel`` and
    the leaves of ``carry`` (``nn.dtypes.canonicalize_dtype``).

    Returns:
      ``(inputs, carry, params)``, ``params`` a tuple in the order given.
    """
    return promote(self.dtype, inputs, kernel, carry, *params)

  @property
  def carry_dtype(self) -> Any:
    """The dtype of the initial carry: ``dtype`` if set, else ``param_dtype``; at least
    float32 for a unitary cell (``UNITARY``)."""
    dtype = self.param_dtype if self.dtype is None else self.dtype
    return precise(dtype) if self.UNITARY else jnp.dtype(dtype)

  @nn.nowrap
  def hidden_carry(self, rng, input_shape) -> Array:
    """``carry_init(rng)`` <carry_dtype>[..., N] for inputs of shape ``(..., N_x)``."""
    return self.carry_init(rng, tuple(input_shape[:-1]) + (self.features,), self.carry_dtype)

  @nn.nowrap
  def initialize_carry(self, rng, input_shape):
    """``h_0`` <float>[..., N] (zeros by default) for inputs of shape ``(..., N_x)``."""
    return self.hidden_carry(rng, input_shape)

  @property
  def num_feature_axes(self) -> int:
    return 1

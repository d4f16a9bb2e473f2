"""The registered cells as ``flax.nnx`` recurrent cells, on the Linen cells' pure steps.

Each cell is built like Flax's NNX cells (``nnx.GRUCell``)::

    Cell(in_features, hidden_features, *, <the Linen cell's options>, dtype=None,
         param_dtype=jnp.float32, carry_init=zeros, rngs)

and runs inside ``nnx.RNN`` and ``nnx.Bidirectional``. The equations are not written
here: ``__call__`` reads the ``nnx.Param``s and calls the same pure step function as the
Linen cell (``rum_step``, ``eurnn_step``, ``goru_step``, ``urnn_step``, ``fwln_step``,
``lnlstm_step``). The parameters carry the Linen cell's names (``kernel_x``, ``kernel_h``,
``bias``, ...; a layer norm ``ln`` holds ``scale`` and ``bias``), so
``nnx.state(cell, nnx.Param)`` has the layout of the Linen cell's ``variables["params"]``
(:mod:`rumjax.nnx.convert` moves weights both ways).

Zoneout (``RUMCell``, ``LNLSTMCell``) draws its masks from the ``"dropout"`` stream of the
``rngs`` given at construction (forked, as ``nnx.Dropout`` does); ``deterministic=True``
(or ``model.eval()``) uses the expectation instead.
"""

import functools
from typing import Any, Callable, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import nnx

from rumjax.cells import base
from rumjax.cells import eurnn as eurnn_lib
from rumjax.cells import fwln as fwln_lib
from rumjax.cells import goru as goru_lib
from rumjax.cells import lnlstm as lnlstm_lib
from rumjax.cells import urnn as urnn_lib
from rumjax.cells import rum as rum_cell_lib
from rumjax.core import initializers
from rumjax.core import rum as rum_lib
from rumjax.core.precision import add_bias, at_least_float32
from rumjax.registry import Registry

Array = jax.Array
zeros = nn.initializers.zeros_init()

NNX_CELLS = Registry("nnx cell")


def register_cell(name: str, cls: Optional[type] = None):
  """Registers the NNX cell ``cls`` under ``name`` (the Linen cell's name); a decorator."""
  return NNX_CELLS.register(name, cls)


def cell_names() -> list[str]:
  """The registered NNX cell names, sorted (those of ``rumjax.cells.cell_names()``)."""
  return NNX_CELLS.names()


def get_cell_class(name: str) -> type:
  """The NNX cell class registered as ``name``; ``ValueError`` naming the known ones."""
  return NNX_CELLS.get(name)


def make_cell(name: str, in_features: int, hidden_features: int, *, rngs: nnx.Rngs,
              **options: Any) -> nnx.RNNCellBase:
  """Builds the NNX cell ``name`` (``dtype``/``param_dtype`` may be names, "bfloat16")."""
  from rumjax.cells.registry import resolve_dtypes  # pylint: disable=import-outside-toplevel
  initializers.check_sizes(in_features=in_features, hidden_features=hidden_features)
  return get_cell_class(name)(in_features, hidden_features, rngs=rngs,
                              **resolve_dtypes(options))


def _key(rngs) -> Array:
  """A key for ``carry_init`` from ``rngs`` (``Rngs``: its ``carry`` stream), as Flax's
  cells take it; ``None`` gives a fixed key (the default zero carry ignores it)."""
  if isinstance(rngs, nnx.Rngs):
    return rngs.carry()
  if isinstance(rngs, nnx.RngStream):
    return rngs()
  return jax.random.key(0) if rngs is None else rngs


class _RngSource:
  """``make_rng(name)`` over an NNX stream: the zoneout of :mod:`rumjax.cells.base`
  draws its masks through it, as it does through a Linen cell."""

  def __init__(self, stream):
    self.stream = stream

  def make_rng(self, name: str) -> Array:
    del name
    return self.stream()


class LayerNorm(nnx.Module):
  """Linen's ``nn.LayerNorm`` with ``nnx.Param``s ``scale`` and ``bias``.

  The same function as the Linen cells' layer norms (it applies ``nn.LayerNorm`` to the
  stored parameters), including ``feature_axes=(-2, -1)`` (the LN-LSTM's per-gate gains),
  which ``nnx.LayerNorm`` does not take.
  """

  def __init__(self, feature_shape: tuple, *, reduction_axes=-1, feature_axes=-1,
               epsilon: float = 1e-6, dtype=None, param_dtype=jnp.float32):
    self.epsilon = epsilon
    self.scale = nnx.Param(jnp.ones(feature_shape, param_dtype))
    self.bias = nnx.Param(jnp.zeros(feature_shape, param_dtype))
    self.reduction_axes, self.feature_axes = reduction_axes, feature_axes
    self.dtype, self.param_dtype = dtype, param_dtype

  def __call__(self, x: Array) -> Array:
    ln = nn.LayerNorm(epsilon=self.epsilon, reduction_axes=self.reduction_axes,
                      feature_axes=self.feature_axes, dtype=self.dtype,
                      param_dtype=self.param_dtype)
    return ln.apply({"params": {"scale": self.scale[...], "bias": self.bias[...]}}, x)


class Cell(nnx.RNNCellBase):
  """What the NNX cells share: sizes, the precision policy, the zero carry.

  ``dtype``/``param_dtype``/``precision`` as in :class:`rumjax.cells.base.RecurrentCell`;
  the carry is in ``dtype`` (``param_dtype`` if None), at least float32 for a unitary
  cell.
  """
  UNITARY = False

  def _init_common(self, in_features, hidden_features, dtype, param_dtype, carry_init,
                   precision=None):
    initializers.check_sizes(in_features=in_features, hidden_features=hidden_features)
    self.in_features, self.hidden_features = in_features, hidden_features
    self.dtype, self.param_dtype, self.carry_init = dtype, param_dtype, carry_init
    self.precision = base.resolve_precision(precision)

  @property
  def carry_dtype(self) -> Any:
    dtype = self.param_dtype if self.dtype is None else self.dtype
    return base.precise(dtype) if self.UNITARY else jnp.dtype(dtype)

  def hidden_carry(self, input_shape, key, carry_init=None) -> Array:
    """``h_0`` drawn by ``carry_init`` (None: the cell's, as Flax's NNX cells take it)."""
    shape = tuple(input_shape[:-1]) + (self.hidden_features,)
    return (carry_init or self.carry_init)(key, shape, self.carry_dtype)

  def initialize_carry(self, input_shape, rngs=None, carry_init=None):
    """``h_0`` <float>[..., hidden_features] (``carry_init``, else the cell's: zeros by
    default) for inputs of shape ``(..., in_features)``."""
    return self.hidden_carry(input_shape, _key(rngs), carry_init)

  @property
  def num_feature_axes(self) -> int:
    return 1


def _param(init, rngs, shape, dtype) -> nnx.Param:
  return nnx.Param(init(rngs.params(), shape, dtype))


def _dropout_stream(rngs: nnx.Rngs, *rates: float):
  """The forked ``"dropout"`` stream for zoneout (None without zoneout); a one-line error
  if ``rngs`` has none (even with ``deterministic=True``: ``model.train()`` may follow)."""
  if not any(r > 0 for r in rates):
    return nnx.data(None)
  try:
    return rngs.dropout.fork()
  except AttributeError:
    raise ValueError("zoneout needs rngs with a 'dropout' stream at construction (masks "
                     "in training): Cell(..., rngs=nnx.Rngs(0)) or nnx.Rngs(params=0, "
                     "dropout=1).") from None


@register_cell("rum")
class RUMCell(Cell):
  """The RUM cell (Algorithm 1, eqs. (1)-(2)) for ``flax.nnx``; see
  :class:`rumjax.cells.RUMCell` for the options and the precision policy.

  Parameters ``kernel_x`` <[in, 3 N]>, ``kernel_h`` <[N, 2 N]>, ``bias`` <[3 N]>: the
  layout of :func:`rumjax.init_rum_params`, so ``rum_scan({k: v[...] ...}, xs)`` computes
  the hidden states of ``nnx.RNN(cell)`` (without layer norm and zoneout). With
  ``layer_norm``: ``ln_tau``, ``ln_u`` (with ``update_gate``), ``ln_h``
  (:class:`LayerNorm`); with ``learn_lam``:
  ``lam``, a scalar ``nnx.Param`` initialised at ``lam``.

  Example::

      rnn = nnx.RNN(RUMCell(8, 64, lam=1, eta=1.0, rngs=nnx.Rngs(0)))
      hs = rnn(xs)                                   # xs <float>[batch, time, 8]
  """

  def __init__(self, in_features: int, hidden_features: int, *, lam: float = 0,
               learn_lam: bool = False,
               eta: Optional[float] = None, activation: Union[str, Callable] = "relu",
               update_gate: bool = True, layer_norm: bool = False, zoneout: float = 0.0,
               deterministic: bool = True,
               kernel_x_init: Callable = rum_lib.rum_kernel_init(3),
               kernel_h_init: Callable = rum_lib.rum_kernel_init(2),
               bias_init: Callable = rum_lib.rum_bias_init, dtype: Optional[Any] = None,
               param_dtype: Any = jnp.float32, carry_init: Callable = zeros,
               precision: Any = None, rngs: nnx.Rngs):
    rum_lib.check_lam(lam)
    rum_lib.check_eta(eta)
    rum_lib.get_activation(activation)
    base.check_probability("zoneout", zoneout)
    self._init_common(in_features, hidden_features, dtype, param_dtype, carry_init,
                      precision)
    n = hidden_features
    self.eta, self.activation, self.update_gate = eta, activation, update_gate
    # learn_lam: lam is the nnx.Param ``lam`` (a scalar, as the Linen cell's params["lam"];
    # keep it >= 0 with rumjax.cells.keep_lam_nonnegative around your optax optimizer).
    self.learn_lam = learn_lam
    self.lam = nnx.Param(jnp.full((), lam, param_dtype)) if learn_lam else lam
    self.layer_norm, self.zoneout, self.deterministic = layer_norm, zoneout, deterministic
    self.kernel_x = _param(kernel_x_init, rngs, (in_features, 3 * n), param_dtype)
    self.kernel_h = _param(kernel_h_init, rngs, (n, 2 * n), param_dtype)
    self.bias = _param(bias_init, rngs, (3 * n,), param_dtype)
    if layer_norm:   # ln_u only with the update gate, as the Linen cell (rum_step reads it)
      ln = functools.partial(LayerNorm, (n,), dtype=dtype, param_dtype=param_dtype)
      self.ln_tau, self.ln_h = ln(), ln()
      if update_gate:
        self.ln_u = ln()
    self.rngs = _dropout_stream(rngs, zoneout)

  def __call__(self, carry, inputs):
    """One RUM step (:func:`rumjax.core.rum.rum_step`): ``(carry, x_t) -> (carry, h_t)``,
    the carry ``h`` (``lam=0``) or ``(R, h)`` (``lam > 0``)."""
    lam = self.lam[...] if self.learn_lam else self.lam
    inputs, kernel_x, kernel_h, bias, carry = rum_cell_lib.cast_step_inputs(
        inputs, self.kernel_x[...], self.kernel_h[...], self.bias[...], carry, lam=lam,
        dtype=self.dtype)
    norms = {}
    if self.layer_norm:
      norms = dict(norm_tau=self.ln_tau, norm_h=self.ln_h)
      if self.update_gate:
        norms["norm_u"] = self.ln_u
    new_carry, (h, _) = rum_lib.rum_step(
        carry, add_bias(base.matmul(inputs, kernel_x, self.precision), bias), kernel_h,
        lam=lam, eta=self.eta, activation=rum_lib.get_activation(self.activation),
        update_gate=self.update_gate, precision=self.precision, **norms)
    if self.zoneout > 0:
      h_prev = carry[1] if self.has_memory else carry
      h = base.zoneout(_RngSource(self.rngs), self.zoneout, h_prev, h,
                       deterministic=self.deterministic)
      new_carry = (new_carry[0], h) if self.has_memory else h
    return new_carry, h

  @property
  def has_memory(self) -> bool:
    """Whether the carry holds the memory ``R`` (``lam > 0`` or a learned ``lam``)."""
    return self.learn_lam or rum_lib.has_memory(self.lam)

  def initialize_carry(self, input_shape, rngs=None, carry_init=None):
    """``h_0`` (``carry_init``, else the cell's: 0) and ``R_0 = 1`` in at least float32
    for ``lam > 0``."""
    h = (carry_init or self.carry_init)(
        _key(rngs), tuple(input_shape[:-1]) + (self.hidden_features,),
        self.dtype or self.param_dtype)
    if not self.has_memory:
      return h
    eye = jnp.eye(self.hidden_features, dtype=at_least_float32(h.dtype))
    return jnp.broadcast_to(eye, h.shape[:-1] + eye.shape), h

  def rum_params(self) -> dict:
    """``{"kernel_x", "kernel_h", "bias"}`` as arrays: the argument of ``rum_scan``."""
    return {k: getattr(self, k)[...] for k in ("kernel_x", "kernel_h", "bias")}


@register_cell("eurnn")
class EURNNCell(Cell):
  """The EURNN (:class:`rumjax.cells.EURNNCell`, :func:`rumjax.cells.eurnn.eurnn_step`)
  for ``flax.nnx``: parameters ``thetas``, ``kernel_x``, ``bias``."""
  UNITARY = True

  def __init__(self, in_features: int, hidden_features: int, *, capacity: int = 2,
               fft: bool = False,
               kernel_x_init: Callable = eurnn_lib.symmetric_uniform(0.01),
               theta_init: Callable = eurnn_lib.uniform_angles, bias_init: Callable = zeros,
               dtype: Optional[Any] = None, param_dtype: Any = jnp.float32,
               carry_init: Callable = zeros,
               precision: Any = None, rngs: nnx.Rngs):
    eurnn_lib.check_eunn(hidden_features, capacity, fft)
    self._init_common(in_features, hidden_features, dtype, param_dtype, carry_init,
                      precision)
    n = hidden_features
    self.capacity, self.fft = capacity, fft
    self.thetas = _param(theta_init, rngs, (eurnn_lib.eunn_num_angles(n, capacity, fft),),
                         param_dtype)
    self.kernel_x = _param(kernel_x_init, rngs, (in_features, n), param_dtype)
    self.bias = _param(bias_init, rngs, (n,), param_dtype)

  def __call__(self, carry, inputs):
    params = dict(thetas=self.thetas[...], kernel_x=self.kernel_x[...], bias=self.bias[...])
    return eurnn_lib.eurnn_step(params, carry, inputs, capacity=self.capacity,
                                fft=self.fft, dtype=self.dtype,
                                precision=self.precision)


@register_cell("goru")
class GORUCell(Cell):
  """The GORU (:class:`rumjax.cells.GORUCell`, :func:`rumjax.cells.goru.goru_step`) for
  ``flax.nnx``: parameters ``kernel_x``, ``kernel_h``, ``bias``, ``mod_bias``, ``thetas``."""
  UNITARY = True

  def __init__(self, in_features: int, hidden_features: int, *, capacity: int = 2,
               fft: bool = False,
               kernel_x_init: Callable = eurnn_lib.symmetric_uniform(0.01),
               kernel_h_init: Callable = eurnn_lib.symmetric_uniform(0.01),
               theta_init: Callable = eurnn_lib.uniform_angles,
               bias_init: Callable = goru_lib.goru_bias_init,
               mod_bias_init: Callable = nn.initializers.constant(2.0),
               dtype: Optional[Any] = None, param_dtype: Any = jnp.float32,
               carry_init: Callable = zeros,
               precision: Any = None, rngs: nnx.Rngs):
    eurnn_lib.check_eunn(hidden_features, capacity, fft)
    self._init_common(in_features, hidden_features, dtype, param_dtype, carry_init,
                      precision)
    n, p = hidden_features, param_dtype
    self.capacity, self.fft = capacity, fft
    self.kernel_x = _param(kernel_x_init, rngs, (in_features, 3 * n), p)
    self.kernel_h = _param(kernel_h_init, rngs, (n, 2 * n), p)
    self.bias = _param(bias_init, rngs, (2 * n,), p)
    self.mod_bias = _param(mod_bias_init, rngs, (n,), p)
    self.thetas = _param(theta_init, rngs, (eurnn_lib.eunn_num_angles(n, capacity, fft),), p)

  def __call__(self, carry, inputs):
    params = {k: getattr(self, k)[...]
              for k in ("kernel_x", "kernel_h", "bias", "mod_bias", "thetas")}
    return goru_lib.goru_step(params, carry, inputs, capacity=self.capacity, fft=self.fft,
                              dtype=self.dtype, precision=self.precision)


@register_cell("urnn")
class URNNCell(Cell):
  """The full-capacity uRNN (:class:`rumjax.cells.URNNCell`,
  :func:`rumjax.cells.urnn.urnn_step`) for ``flax.nnx``: parameters
  ``recurrent_orthogonal`` (at least float32), ``kernel_x``, ``bias``. Keep ``W``
  orthogonal with ``nnx.Optimizer(model, make_urnn_optimizer(tx, lr), wrt=nnx.Param)``
  (the Cayley step finds the parameter by its name; flax >= 0.12: 0.11's ``nnx.Optimizer``
  cannot hold the masked state of ``optax.multi_transform``)."""
  UNITARY = True

  def __init__(self, in_features: int, hidden_features: int, *,
               recurrent_init: Callable = nn.initializers.orthogonal(),
               kernel_x_init: Callable = nn.initializers.glorot_uniform(),
               bias_init: Callable = zeros, dtype: Optional[Any] = None,
               param_dtype: Any = jnp.float32, carry_init: Callable = zeros,
               precision: Any = None, rngs: nnx.Rngs):
    self._init_common(in_features, hidden_features, dtype, param_dtype, carry_init,
                      precision)
    n = hidden_features
    self.recurrent_orthogonal = _param(recurrent_init, rngs, (n, n), base.precise(param_dtype))
    self.kernel_x = _param(kernel_x_init, rngs, (in_features, n), param_dtype)
    self.bias = _param(bias_init, rngs, (n,), param_dtype)

  def __call__(self, carry, inputs):
    params = {urnn_lib.ORTHOGONAL_NAME: self.recurrent_orthogonal[...],
              "kernel_x": self.kernel_x[...], "bias": self.bias[...]}
    return urnn_lib.urnn_step(params, carry, inputs, dtype=self.dtype,
                              precision=self.precision)


@register_cell("fwln")
class FWLNCell(Cell):
  """Fast weights with layer norm (:class:`rumjax.cells.FWLNCell`,
  :func:`rumjax.cells.fwln.fwln_step`) for ``flax.nnx``: parameters ``kernel_h``,
  ``kernel_x``, ``bias``, ``ln``; the carry ``(A, h)``."""

  def __init__(self, in_features: int, hidden_features: int, *, decay: float = 0.95,
               fast_lr: float = 0.5, inner_steps: int = 1,
               activation: Union[str, Callable] = "relu",
               kernel_h_init: Callable = fwln_lib.scaled_identity(0.05),
               kernel_x_init: Callable = nn.initializers.glorot_uniform(),
               bias_init: Callable = zeros, dtype: Optional[Any] = None,
               param_dtype: Any = jnp.float32, carry_init: Callable = zeros,
               precision: Any = None, rngs: nnx.Rngs):
    fwln_lib.check_inner_steps(inner_steps)
    rum_lib.get_activation(activation)
    self._init_common(in_features, hidden_features, dtype, param_dtype, carry_init,
                      precision)
    n = hidden_features
    self.decay, self.fast_lr, self.inner_steps = decay, fast_lr, inner_steps
    self.activation = activation
    self.kernel_h = _param(kernel_h_init, rngs, (n, n), param_dtype)
    self.kernel_x = _param(kernel_x_init, rngs, (in_features, n), param_dtype)
    self.bias = _param(bias_init, rngs, (n,), param_dtype)
    self.ln = LayerNorm((n,), dtype=dtype, param_dtype=param_dtype)

  def __call__(self, carry, inputs):
    params = {k: getattr(self, k)[...] for k in ("kernel_h", "kernel_x", "bias")}
    return fwln_lib.fwln_step(params, carry, inputs, ln=self.ln, decay=self.decay,
                              fast_lr=self.fast_lr, inner_steps=self.inner_steps,
                              activation=self.activation, dtype=self.dtype,
                              precision=self.precision)

  def initialize_carry(self, input_shape, rngs=None, carry_init=None):
    """``(A_0, h_0)``: the fast weights 0, ``h_0`` from ``carry_init`` (else the cell's:
    0)."""
    n = self.hidden_features
    a = jnp.zeros(tuple(input_shape[:-1]) + (n, n), self.carry_dtype)
    return a, self.hidden_carry(input_shape, _key(rngs), carry_init)


@register_cell("lnlstm")
class LNLSTMCell(Cell):
  """LSTM with layer norm and zoneout (:class:`rumjax.cells.LNLSTMCell`,
  :func:`rumjax.cells.lnlstm.lnlstm_step`) for ``flax.nnx``: parameters ``kernel_x``,
  ``kernel_h``, ``ln_gates`` (<[4, N]> gains and biases), ``ln_c``; the carry ``(c, h)``;
  ``epsilon`` as the Linen cell's."""

  def __init__(self, in_features: int, hidden_features: int, *, forget_bias: float = 1.0,
               zoneout: float = 0.0, zoneout_c: float = 0.0, deterministic: bool = True,
               epsilon: float = 1e-6,
               kernel_x_init: Callable = initializers.in_float32(nn.initializers.orthogonal()),
               kernel_h_init: Callable = initializers.in_float32(nn.initializers.orthogonal()),
               dtype: Optional[Any] = None, param_dtype: Any = jnp.float32,
               carry_init: Callable = zeros,
               precision: Any = None, rngs: nnx.Rngs):
    base.check_probability("zoneout", zoneout)
    base.check_probability("zoneout_c", zoneout_c)
    self._init_common(in_features, hidden_features, dtype, param_dtype, carry_init,
                      precision)
    n = hidden_features
    self.forget_bias, self.zoneout, self.zoneout_c = forget_bias, zoneout, zoneout_c
    self.deterministic = deterministic
    self.kernel_x = _param(kernel_x_init, rngs, (in_features, 4 * n), param_dtype)
    self.kernel_h = _param(kernel_h_init, rngs, (n, 4 * n), param_dtype)
    self.ln_gates = LayerNorm((4, n), feature_axes=(-2, -1), epsilon=epsilon, dtype=dtype,
                              param_dtype=param_dtype)
    self.ln_c = LayerNorm((n,), epsilon=epsilon, dtype=dtype, param_dtype=param_dtype)
    self.rngs = _dropout_stream(rngs, zoneout, zoneout_c)

  def __call__(self, carry, inputs):
    params = dict(kernel_x=self.kernel_x[...], kernel_h=self.kernel_h[...])
    return lnlstm_lib.lnlstm_step(
        params, carry, inputs, ln_gates=self.ln_gates, ln_c=self.ln_c,
        forget_bias=self.forget_bias, zoneout_h=self.zoneout, zoneout_c=self.zoneout_c,
        deterministic=self.deterministic, rng_source=_RngSource(self.rngs),
        dtype=self.dtype, precision=self.precision)

  def initialize_carry(self, input_shape, rngs=None, carry_init=None):
    """``(c_0, h_0)``, each from ``carry_init`` (else the cell's: 0)."""
    c_key, h_key = jax.random.split(_key(rngs))
    return (self.hidden_carry(input_shape, c_key, carry_init),
            self.hidden_carry(input_shape, h_key, carry_init))


class _FlaxCellPrecision:
  """Flax's NNX cell with the policy's ``precision`` (keyword only; None: the backend's
  default): its step runs under :func:`rumjax.cells.base.matmul_precision`, as the Linen
  "gru" and "lstm" (:mod:`rumjax.cells.flax_cells`)."""

  def __init__(self, *args, precision: Any = None, **kwargs):
    super().__init__(*args, **kwargs)
    self.precision = base.resolve_precision(precision)

  def __call__(self, carry, inputs):
    with base.matmul_precision(self.precision):
      return super().__call__(carry, inputs)


class OptimizedLSTMCell(_FlaxCellPrecision, nnx.OptimizedLSTMCell):
  """``nnx.OptimizedLSTMCell`` with ``precision``."""


class GRUCell(_FlaxCellPrecision, nnx.GRUCell):
  """``nnx.GRUCell`` with ``precision``."""


# Flax's own NNX cells, as the Linen registry takes Flax's Linen ones.
register_cell("lstm", OptimizedLSTMCell)
register_cell("gru", GRUCell)

"""``RUMCell``: the RUM cell of Algorithm 1 (Dangovski et al., TACL 2019) for ``flax.linen``."""

import functools
from typing import Any, Callable, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from rumjax.core import rum as rum_lib
from rumjax.core.precision import add_bias, at_least_float32
from rumjax.cells import base
from rumjax.cells.registry import register_cell, register_optimizer_wrapper

# The parameter of a learned lam (``RUMCell(learn_lam=True)``), kept >= 0 by
# :func:`keep_lam_nonnegative`.
LAM_PARAM = "lam"


def cast_step_inputs(inputs, kernel_x, kernel_h, bias, carry, *, lam, dtype):
  """The inputs, kernels and carry of one RUM cell step in the computation dtype (``dtype``,
  or Flax's promotion of the inputs, ``kernel_x`` and ``h`` when None); the memory ``R``
  stays in at least float32 (never rounded to a bfloat16 policy), and so does ``bias``
  (the step adds it with :func:`rumjax.core.precision.add_bias`: its gradient is summed
  over the batch in float32). Shared by the Linen and NNX ``RUMCell``."""
  memory = rum_lib.has_memory(lam)
  r, h = carry if memory else (None, carry)
  dtype = nn.dtypes.canonicalize_dtype(inputs, kernel_x, h, dtype=dtype)
  inputs, kernel_x, kernel_h, h = jax.tree.map(
      lambda a: jnp.asarray(a, dtype), (inputs, kernel_x, kernel_h, h))
  bias = jnp.asarray(bias, at_least_float32(dtype, bias))
  carry = (jnp.asarray(r, at_least_float32(dtype)), h) if memory else h
  return inputs, kernel_x, kernel_h, bias, carry


@register_cell("rum")
class RUMCell(nn.RNNCellBase):
  """The Rotational Unit of Memory as a Flax recurrent cell (Algorithm 1, eqs. (1)-(2)).

  A drop-in for ``nn.GRUCell``: ``nn.RNN(RUMCell(64, lam=1))``, ``nn.Bidirectional``,
  ``seq_lengths``, ``reverse``, ``return_carry`` and extra batch axes work the same way.
  The parameters are those of :func:`rumjax.rum_scan` (``kernel_x``, ``kernel_h``,
  ``bias``), so ``variables["params"]`` of a cell without layer norm can be passed to
  ``rum_scan`` directly.

  Attributes:
    features: the hidden size ``N_h``.
    lam: a real number >= 0, the power of the associative memory in eq. (2),
      ``R_t = (R_{t-1})^lam Rotation(e_t, tau_t)``: 0 switches it off, 1 is the paper's
      ``R_{t-1} Rotation``, any other value (e.g. 0.5 or 2) the real power of
      :func:`rumjax.rotation_power` (footnote 9; O(N_h^3) per step, and :class:`RUM`
      then runs :func:`rumjax.rum_scan`'s checkpointed scan). With ``lam > 0`` (or
      ``learn_lam``) the carry is ``(R, h)``, R <float>[..., N_h, N_h]; else it is ``h``.
    learn_lam: make ``lam`` a trained parameter, ``params["lam"]`` (a scalar in
      ``param_dtype``, initialised at ``lam``), kept >= 0 by projection after every
      optimizer step (:func:`keep_lam_nonnegative`, applied by the zoo's
      ``make_optimizer``; with your own optax optimizer chain it yourself). The loop logs
      it with every evaluation as ``params/<path>/lam``.
    eta: ``None`` or the norm ``eta > 0`` of the time-normalised hidden state.
    activation: ``f``: "relu", "tanh", "sigmoid", "softsign" or a callable.
    update_gate: if False, ``h'_t = h~_t``.
    layer_norm: layer normalisation (Ba et al., 2016) of the ``tau`` and ``u``
      pre-activations and of the pre-activation ``e + R h`` of ``h~`` (as in the
      character-level Penn Treebank set-up).
    zoneout: hidden-state zoneout probability (Krueger et al., 2017). In training
      (``deterministic=False``) each unit keeps its previous value with this
      probability, using the ``"dropout"`` RNG; at evaluation the expectation
      ``zoneout * h_{t-1} + (1 - zoneout) * h_t`` is used. Under ``nn.RNN`` pass
      ``split_rngs={"params": False, "dropout": True}`` so the mask differs per step.
    deterministic: evaluation mode for zoneout.
    dtype: the computation dtype (Flax's policy): the gate matmuls, ``tau``, ``u``,
      ``e`` and the hidden state ``h`` (carry and output). ``None``: inferred from the
      inputs, the parameters and ``h``. The rotation path (normalised vectors, cos/sin,
      ``R_t = R_{t-1} Rotation(e, tau)``) is computed in ``promote_types(dtype,
      float32)`` at ``Precision.HIGHEST`` and the memory ``R`` is carried in it (float32
      for bfloat16), so it stays orthogonal to float32 accuracy (:mod:`rumjax.core.rum`).
    param_dtype: the dtype of the parameters (float32 by default).
    precision: the matmul precision of the gate matmuls ``x @ kernel_x`` and
      ``h @ kernel_h`` (Flax's ``precision=``): None or ``"default"`` (the backend's
      default: TF32 on an NVIDIA GPU), ``"high"``, ``"highest"`` or a ``lax.Precision``
      (:data:`rumjax.core.precision.PRECISIONS`). The rotation path is at ``HIGHEST``
      whatever it says.

  ``cos(theta_t)``, the cosine of the angle between the cell's ``e_t`` and ``tau_t``
  (after layer norm, if any), is sown as ``intermediates/.../cell/cos_theta``,
  <float>[...] per step, only when the ``"intermediates"`` collection is mutable
  (``model.apply(..., mutable=["intermediates"])``; see :func:`rumjax.analysis.angles`),
  so training pays nothing for it. Under ``nn.RNN`` the collection is visible inside the
  scan only with ``variable_axes={"intermediates": <time axis>}`` (as
  :func:`rumjax.models.sequence.run_recurrence` does), which stacks the steps to
  <float>[..., T].
  """
  features: int
  lam: float = 0
  learn_lam: bool = False
  eta: Optional[float] = None
  activation: Union[str, Callable] = "relu"
  update_gate: bool = True
  layer_norm: bool = False
  zoneout: float = 0.0
  deterministic: bool = True
  kernel_x_init: Callable = rum_lib.rum_kernel_init(3)
  kernel_h_init: Callable = rum_lib.rum_kernel_init(2)
  bias_init: Callable = rum_lib.rum_bias_init
  dtype: Optional[Any] = None
  param_dtype: Any = jnp.float32
  carry_init: Callable = nn.initializers.zeros_init()
  precision: Any = None

  def _validate(self):
    rum_lib.check_lam(self.lam)
    rum_lib.check_eta(self.eta)
    rum_lib.get_activation(self.activation)
    base.check_probability("zoneout", self.zoneout)
    base.resolve_precision(self.precision)

  @nn.compact
  def __call__(self, carry, inputs, *, sow_cos: bool = True):
    """One RUM step.

    Args:
      carry: ``h`` <float>[..., features] (``lam=0``) or ``(R, h)`` (``lam > 0``).
      inputs: <float>[..., N_x].
      sow_cos: sow ``cos(theta_t)`` <float>[...] when ``"intermediates"`` is mutable
        (:class:`RUM` turns it off for the step that only declares the parameters).

    Returns:
      ``(new_carry, h_t)``.
    """
    self._validate()
    nh, nx = self.features, inputs.shape[-1]
    kernel_x = self.param("kernel_x", self.kernel_x_init, (nx, 3 * nh), self.param_dtype)
    kernel_h = self.param("kernel_h", self.kernel_h_init, (nh, 2 * nh), self.param_dtype)
    bias = self.param("bias", self.bias_init, (3 * nh,), self.param_dtype)
    lam = self.current_lam()
    inputs, kernel_x, kernel_h, bias, carry = cast_step_inputs(
        inputs, kernel_x, kernel_h, bias, carry, lam=lam, dtype=self.dtype)
    norms = {}
    if self.layer_norm:
      ln = functools.partial(nn.LayerNorm, dtype=self.dtype, param_dtype=self.param_dtype)
      norms = dict(norm_tau=ln(name="ln_tau"), norm_u=ln(name="ln_u"),
                   norm_h=ln(name="ln_h"))
    new_carry, (h, plane) = rum_lib.rum_step(
        carry, add_bias(base.matmul(inputs, kernel_x, self.precision), bias), kernel_h,
        lam=lam, eta=self.eta, activation=rum_lib.get_activation(self.activation),
        update_gate=self.update_gate, precision=base.resolve_precision(self.precision),
        **norms)
    if sow_cos and self.is_mutable_collection("intermediates"):
      self.sow("intermediates", "cos_theta", plane.cos)
    if self.zoneout > 0:
      h_prev = carry[1] if self.has_memory else carry
      h = base.zoneout(self, self.zoneout, h_prev, h, deterministic=self.deterministic)
      new_carry = (new_carry[0], h) if self.has_memory else h
    return new_carry, h

  def current_lam(self):
    """``lam``: the field, or with ``learn_lam`` the parameter ``lam`` (declared here)."""
    if not self.learn_lam:
      return self.lam
    return self.param(LAM_PARAM, lambda key, shape, dtype: jnp.full(shape, self.lam, dtype),
                      (), self.param_dtype)

  @property
  def has_memory(self) -> bool:
    """Whether the carry holds the memory ``R`` (``lam > 0`` or a learned ``lam``)."""
    return self.learn_lam or rum_lib.has_memory(self.lam)

  @nn.nowrap
  def initialize_carry(self, rng, input_shape):
    """``h_0 = 0`` (and ``R_0 = 1`` for ``lam > 0``) for inputs of shape ``(..., N_x)``.

    ``h_0`` has ``dtype`` (``param_dtype`` if ``dtype`` is None), ``R_0`` that dtype
    promoted to float32 (float32 for bfloat16).
    """
    batch = tuple(input_shape[:-1])
    h_dtype = self.dtype or self.param_dtype
    h = self.carry_init(rng, batch + (self.features,), h_dtype)
    if not self.has_memory:
      return h
    eye = jnp.eye(self.features, dtype=at_least_float32(h_dtype))
    return jnp.broadcast_to(eye, batch + eye.shape), h

  @property
  def num_feature_axes(self) -> int:
    return 1


class RUM(nn.Module):
  """A :class:`RUMCell` run over a whole sequence by :func:`rumjax.rum_scan` (fast path).

  Same parameters, at the same path (``<name>/cell/...``), and the same outputs as
  ``nn.RNN(cell, name=<name>)``, but with the input projection of the whole sequence done
  once and the hand-written backward pass of ``rum_scan``. Layer norm and zoneout act
  inside the step, so cells that use them must run under ``nn.RNN`` instead
  (:func:`supports_scan` tells).

  When the ``"intermediates"`` collection is mutable, ``cos(theta_t)`` of every step,
  <float>[*batch, T], is sown as ``intermediates/<name>/cos_theta`` (``rum_scan`` with
  ``return_cos=True``); otherwise ``rum_scan`` runs without it.

  Attributes:
    cell: the RUM cell whose options (``lam``, ``eta``, ``activation``, ...) to use.
  """
  cell: RUMCell

  @nn.compact
  def __call__(self, xs, *, initial_carry=None, return_carry: bool = False):
    """xs <float>[*batch, T, N_x] -> hs <float>[*batch, T, features] (and the carry)."""
    if not supports_scan(self.cell):
      raise ValueError("RUM (rum_scan) does not support layer_norm or zoneout; run the "
                       "cell under nn.RNN instead.")
    c = self.cell
    # One (discarded, dead-code-eliminated) step of the cell declares its parameters at
    # <name>/cell with its own initialisers; rum_scan then runs the whole sequence.
    x0 = xs[..., 0, :]
    c(c.initialize_carry(jax.random.key(0), x0.shape), x0, sow_cos=False)
    if initial_carry is None and c.carry_init is not nn.initializers.zeros:
      # A non-zero h_0 (carry_init): the cell's own, drawn as nn.RNN draws it (key 0);
      # with zeros rum_scan's own h_0 = 0, R_0 = 1 is the same.
      initial_carry = c.initialize_carry(jax.random.key(0), x0.shape)
    params = {k: c.variables["params"][k] for k in ("kernel_x", "kernel_h", "bias")}
    lam = c.variables["params"][LAM_PARAM] if c.learn_lam else c.lam
    if c.dtype is not None:
      xs = jnp.asarray(xs, c.dtype)
      params = jax.tree.map(lambda p: jnp.asarray(p, c.dtype), params)
    sow = self.is_mutable_collection("intermediates")
    final, hs, *cos = rum_lib.rum_scan(
        params, xs, lam=lam, eta=c.eta, activation=c.activation,
        update_gate=c.update_gate, h0=initial_carry, return_cos=sow,
        precision=base.resolve_precision(c.precision))
    if sow:
      self.sow("intermediates", "cos_theta", cos[0])
    return (final, hs) if return_carry else hs


def supports_scan(cell) -> bool:
  """Whether ``cell`` is a RUM cell that :class:`RUM` (``rum_scan``) can run."""
  return isinstance(cell, RUMCell) and not cell.layer_norm and not cell.zoneout


def keep_lam_nonnegative(optimizer: optax.GradientTransformation
                         ) -> optax.GradientTransformation:
  """``optimizer`` followed by the projection of every learned ``lam`` onto ``lam >= 0``:
  the update of a parameter named ``lam`` becomes ``max(lam + update, 0) - lam``
  (projected gradient descent); other parameters are untouched. The optimizer state is
  ``optimizer``'s own (the same tree), so checkpoints of models without a learned ``lam``
  are unaffected."""

  def update(updates, state, params=None):
    if params is None:
      raise ValueError("keep_lam_nonnegative needs params: call update(grads, state, params).")
    updates, state = optimizer.update(updates, state, params)

    def project(path, u, p):
      if path and getattr(path[-1], "key", None) == LAM_PARAM and jnp.ndim(p) == 0:
        return jnp.maximum(p + u, 0) - p
      return u

    return jax.tree_util.tree_map_with_path(project, updates, params), state

  return optax.GradientTransformation(optimizer.init, update)


register_optimizer_wrapper("rum_lam", lambda optimizer, learning_rate:
                           keep_lam_nonnegative(optimizer))

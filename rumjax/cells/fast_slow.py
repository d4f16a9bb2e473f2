"""``FastSlowCell``: the Fast-Slow RNN (FS-RNN-k) of Mujika, Meier, Steger (NIPS 2017).

A "fast" layer of ``k >= 2`` cells ``F_1 .. F_k``, each with its own weights, that update
ONE shared fast state ``h^F`` one after the other within a time step, and a "slow" cell
``S`` with its own state ``h^S`` that is updated once per step (Mujika et al., eqs. (1)-(5))::

    h^{F_1}_t = f^{F_1}(h^{F_k}_{t-1}, x_t)                 F_1 reads the input
    h^S_t     = f^S(h^S_{t-1}, drop(h^{F_1}_t))             S reads F_1's output
    h^{F_2}_t = f^{F_2}(h^{F_1}_t, drop(h^S_t))             F_2 reads S's output
    h^{F_i}_t = f^{F_i}(h^{F_{i-1}}_t, 0)      3 <= i <= k  no input
    y_t       = h^{F_k}_t

The first argument of each ``f`` is the state the cell starts from (the whole carry:
``(c, h)`` for an LSTM), so the fast carry goes ``F_1 -> F_2 -> ... -> F_k`` within the
step and ``F_1`` of step ``t`` starts from ``F_k`` of step ``t - 1``; the carry of this
cell is ``(fast_carry, slow_carry)``. All fast cells must therefore have the same size
and the same kind of carry; ``F_1``'s input is ``x_t`` (``N_x``), ``S``'s is ``F_1``'s
output (``fast size``), ``F_2``'s is ``S``'s output (``slow size``).

Wiring as in the authors' TensorFlow code (``amujika/Fast-Slow-LSTM``, ``FSRNN.py``):

- ``F_3 .. F_k`` get no input in the paper; as in the reference code (``"Input cannot be
  empty for many RNN cells"``: ``F_output[:, 0:1] * 0.0``) they read a zero input of
  width ONE, <float>[..., 1]. Their input kernels are then ``(1, ...)`` and never receive a
  gradient; the parameter count is that of the reference.
- ``drop`` is the non-recurrent dropout (``dropout_rate``, the probability of dropping a
  unit) on ``F_1 -> S`` and ``S -> F_2`` only: the state carried from ``F_1`` to ``F_2`` is
  NOT dropped (``F_2`` starts from ``F_1``'s undropped carry). The reference cell also
  drops its input and its output with the same rate; here the language model does that
  (:class:`rumjax.models.lm.LanguageModel`, the same ``dropout_rate`` field).
- Zoneout is each cell's own (:class:`rumjax.cells.LNLSTMCell` ``zoneout``/``zoneout_c``,
  :class:`rumjax.cells.RUMCell` ``zoneout``); in each cell the "previous" value is the
  state that cell started from, so ``F_2``'s zoneout mixes with ``F_1``'s new state, as
  in the reference code (each cell zones out against the state it was handed).

Zoneout probabilities here are Krueger et al.'s: the probability of KEEPING THE PREVIOUS
value. The reference code writes keep-probabilities of the NEW value
(``zoneout_keep_h = 0.9``, ``zoneout_keep_c = 0.5``, ``keep_prob = 0.65``), i.e.
``zoneout = 1 - keep_h = 0.1``, ``zoneout_c = 1 - keep_c = 0.5`` and
``dropout_rate = 1 - keep_prob = 0.35``; the RUM paper's Table 5 (appendix D of the
conference version) lists exactly these: cell zoneout 0.5, hidden zoneout 0.1,
non-recurrent dropout 0.35. (The TACL text, section 4 D, writes "0.5/0.9/0.35", mixing
the two conventions; Table 5 and the reference code agree on the above.)

Layer normalisation "on all states, on the LSTM gates, on the RUM update gate, and on the
target memory" (TACL section 4 D; appendix D: "to the cells and to the LSTM gates and
RUM's update gate and target memory") is the cells' own:

- :class:`rumjax.cells.LNLSTMCell` always normalises each gate's pre-activation
  (``ln_gates``, one gain/bias per gate) and the cell state ``c_t`` where it enters
  ``h_t = sigmoid(o) tanh(LN(c_t))`` (``ln_c``; the carried ``c_t`` is not normalised), as
  the reference ``LN_LSTMCell``.
- :class:`rumjax.cells.RUMCell` with ``layer_norm=True`` normalises three
  pre-activations: the target memory ``tau`` (``ln_tau``), the update gate ``u`` BEFORE
  its sigmoid (``ln_u``), and the candidate's ``e + R h`` before ``f`` (``ln_h``, the
  "state" normalisation; the authors' code's ``ln_c``). The authors' TensorFlow RUM
  normalises ``u`` AFTER its sigmoid instead (so their ``u`` may leave ``[0, 1]``);
  ours keeps ``u`` a gate.

The cell's ``deterministic`` is propagated to every sub-cell that has that field (a
sub-cell's own setting is overridden), so ``cell.clone(deterministic=not train)`` switches
dropout and every zoneout at once. Each sub-cell gets its own parameters, at
``fast_cells_0 .. fast_cells_{k-1}`` and ``slow_cell`` (also when the same cell object is
passed twice).

Example (FS-RUM-2 of the RUM paper, Table 5)::

    fast = LNLSTMCell(700, zoneout=0.1, zoneout_c=0.5)
    cell = FastSlowCell((fast, fast),
                        RUMCell(1000, lam=0, eta=1.0, layer_norm=True, zoneout=0.1),
                        dropout_rate=0.35)
    rnn = nn.RNN(cell.clone(deterministic=False),
                 split_rngs={"params": False, "dropout": True}, return_carry=True)

:func:`fast_slow_from_config` builds one from a config.
"""

from typing import Any, Mapping, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from rumjax.cells.base import check_probability
from rumjax.cells.registry import POLICY_FIELDS, cell_fields, cell_names, make_cell
from rumjax.cells.stacked import prepare_cells
from rumjax.registry import did_you_mean

# Width of the zero input of F_3 .. F_k (the reference code's ``F_output[:, 0:1] * 0.0``).
ZERO_INPUT_SIZE = 1


class FastSlowCell(nn.RNNCellBase):
  """FS-RNN-k (Mujika et al., 2017): fast cells ``F_1..F_k`` sharing one state, slow ``S``.

  Attributes:
    fast_cells: ``(F_1, ..., F_k)``, ``k >= 2`` Flax recurrent cells of the same
      ``features`` and carry structure (they update one shared fast state).
    slow_cell: ``S``, any Flax recurrent cell with a ``features`` attribute.
    dropout_rate: probability of DROPPING a unit (inverted dropout, ``"dropout"`` RNG) of
      ``F_1``'s output before ``S`` reads it and of ``S``'s output before ``F_2`` reads it.
    deterministic: evaluation mode: no dropout, and every sub-cell with a
      ``deterministic`` field (zoneout) gets this value.
    dtype: the computation dtype of every sub-cell (``None``: each sub-cell's own);
      given, it overrides theirs (the precision policy of :mod:`rumjax.cells.base`: a
      unitary or RUM slow cell keeps its own rotation path and state in float32).
    param_dtype: the parameter dtype of every sub-cell (``None``: each one's own).
    precision: the matmul precision of every sub-cell (``None`` or ``"default"``: each
      one's own); given, it overrides theirs.
  """
  fast_cells: Sequence[nn.RNNCellBase]
  slow_cell: nn.RNNCellBase
  dropout_rate: float = 0.0
  deterministic: bool = True
  dtype: Optional[Any] = None
  param_dtype: Optional[Any] = None
  precision: Optional[Any] = None

  def __post_init__(self):
    *fast, slow = prepare_cells((*self.fast_cells, self.slow_cell), self.deterministic,
                                self.dtype, self.param_dtype, self.precision)
    object.__setattr__(self, "fast_cells", tuple(fast))
    object.__setattr__(self, "slow_cell", slow)
    super().__post_init__()

  @property
  def features(self) -> int:
    """The output size: ``F_k``'s ``features`` (that of every fast cell)."""
    return self.fast_cells[-1].features

  @property
  def num_fast(self) -> int:
    """``k``, the number of fast cells."""
    return len(self.fast_cells)

  @nn.nowrap
  def _validate(self):
    if len(self.fast_cells) < 2:
      raise ValueError(f"FS-RNN needs at least 2 fast cells, got {len(self.fast_cells)}.")
    sizes = [c.features for c in self.fast_cells]
    if len(set(sizes)) != 1:
      raise ValueError(f"the fast cells share one state, so they must have one size; "
                       f"got features {sizes}.")
    check_probability("dropout_rate", self.dropout_rate)

  @nn.compact
  def __call__(self, carry, inputs):
    """One time step: ``F_1``, ``S``, ``F_2``, ..., ``F_k`` (module docstring).

    Args:
      carry: ``(fast_carry, slow_carry)`` (from :meth:`initialize_carry`): the carry of
        ``F_k`` at ``t - 1`` (e.g. ``(c, h)`` <float>[..., N_F] each for an LSTM) and
        that of ``S`` (e.g. ``h`` <float>[..., N_S] for a RUM with ``lam=0``).
      inputs: ``x_t`` <float>[..., N_x].

    Returns:
      ``((fast_carry_t, slow_carry_t), y_t)``, ``y_t = h^{F_k}_t`` <float>[..., N_F].
    """
    self._validate()
    fast, slow = carry
    drop = lambda name: nn.Dropout(self.dropout_rate, deterministic=self.deterministic,
                                   name=name)
    f1, f2, *rest = self.fast_cells
    fast, y = f1(fast, inputs)                       # h^{F_1}_t = f(h^{F_k}_{t-1}, x_t)
    slow, s = self.slow_cell(slow, drop("dropout_fast_to_slow")(y))
    fast, y = f2(fast, drop("dropout_slow_to_fast")(s))
    zero = jnp.zeros(y.shape[:-1] + (ZERO_INPUT_SIZE,), y.dtype)
    for cell in rest:                                # h^{F_i}_t = f(h^{F_{i-1}}_t), i >= 3
      fast, y = cell(fast, zero)
    return (fast, slow), y

  @nn.nowrap
  def initialize_carry(self, rng, input_shape):
    """``(fast_carry, slow_carry)`` for inputs of shape ``(..., N_x)``.

    The fast carry is ``F_1``'s for inputs ``(..., N_x)``; the slow carry ``S``'s for
    inputs ``(..., N_F)`` (``S`` reads ``F_1``'s output).
    """
    self._validate()
    fast_key, slow_key = jax.random.split(rng)
    batch = tuple(input_shape[:-1])
    fast = self.fast_cells[0].initialize_carry(fast_key, tuple(input_shape))
    slow = self.slow_cell.initialize_carry(slow_key, batch + (self.fast_cells[0].features,))
    return fast, slow

  @property
  def num_feature_axes(self) -> int:
    return 1


# Config fields of fast_slow_from_config that are not cell options.
_STRUCTURE = ("fast_cell", "fast_size", "num_fast", "slow_cell", "slow_size")


def role_options(config: Mapping[str, Any], prefix: str, cell: str) -> dict:
  """The options of the cell ``cell`` given in ``config`` as ``<prefix><option>``.

  ``fast_zoneout=0.1`` -> ``{"zoneout": 0.1}`` for ``prefix="fast_"``. An option that is a
  field of another registered cell is ignored (so one config serves every choice of
  cell, as :func:`rumjax.cells.cell_from_config`), as is a ``None`` value (the cell's
  default); one that is a field of no cell is a ``ValueError`` (a typo).
  """
  accepted = set(cell_fields(cell)) - {"features", "deterministic"}
  known = {f for name in cell_names() for f in cell_fields(name)}
  options = {}
  for key in config.keys():
    if not key.startswith(prefix) or key in _STRUCTURE:
      continue
    option, value = key[len(prefix):], config[key]
    if option in accepted:
      if value is not None:
        options[option] = value
    elif option not in known or option in ("features", "deterministic"):
      hint = did_you_mean(key, [prefix + f for f in sorted(accepted)])
      raise ValueError(f"config field {key!r}: no cell has an option {option!r} "
                       f"({cell!r} accepts {sorted(accepted)})"
                       + (f"; {hint}" if hint else "."))
  return options


def fast_slow_from_config(config: Mapping[str, Any], *,
                          dropout_rate: Optional[float] = None) -> FastSlowCell:
  """A :class:`FastSlowCell` from the fields of ``config`` (e.g. ``config.model``).

  Fields:

  - ``fast_cell``: the registered cell of ``F_1..F_k`` (default ``"lnlstm"``);
  - ``fast_size``: their hidden size ``N_F`` (required; the output size);
  - ``num_fast``: ``k >= 2`` (default 2);
  - ``slow_cell``: the registered cell of ``S`` (default ``"rum"``);
  - ``slow_size``: its hidden size ``N_S`` (required);
  - ``fast_<option>`` / ``slow_<option>``: an option of the fast (every ``F_i``) or the slow
    cell, e.g. ``fast_zoneout`` (hidden-state zoneout), ``fast_zoneout_c`` (cell-state
    zoneout), ``fast_forget_bias``, ``slow_zoneout``, ``slow_lam``, ``slow_eta``,
    ``slow_layer_norm``, ``slow_activation``, ``slow_update_gate``. Zoneout values are
    probabilities of KEEPING THE PREVIOUS value (FS-RNN code's ``keep_h = 0.9``,
    ``keep_c = 0.5`` are ``zoneout = 0.1``, ``zoneout_c = 0.5``). Unprefixed cell options
    (``lam``, ``zoneout``, ...) are NOT read: each role has its own;
  - ``dropout_rate``: the non-recurrent DROP probability on ``F_1 -> S`` and
    ``S -> F_2`` (default 0; the FS-RNN code's one ``keep_prob``, also used by the model
    on the embedding and the output: 0.35 = keep 0.65);
  - ``dtype`` / ``param_dtype`` / ``precision``: the precision policy of every sub-cell
    (names such as ``"bfloat16"``, ``"highest"``; unprefixed, unlike the cell options;
    ``fast_dtype`` / ``slow_precision`` ... override it for one role).

  Args:
    config: a mapping (``ml_collections.ConfigDict`` or dict) with the fields above.
    dropout_rate: overrides ``config["dropout_rate"]``.

  Raises:
    ValueError: a missing size, ``num_fast < 2``, an unknown cell, or a ``fast_*`` /
      ``slow_*`` option that no cell has (naming the field).

  Example (FS-RUM-2, Table 5 of the RUM paper)::

      fast_slow_from_config(dict(
          fast_cell="lnlstm", fast_size=700, num_fast=2, fast_zoneout=0.1,
          fast_zoneout_c=0.5, slow_cell="rum", slow_size=1000, slow_lam=0, slow_eta=1.0,
          slow_layer_norm=True, slow_zoneout=0.1, dropout_rate=0.35))
  """
  fast_name = config.get("fast_cell") or "lnlstm"
  slow_name = config.get("slow_cell") or "rum"
  sizes = {}
  for field in ("fast_size", "slow_size"):
    if config.get(field) is None:
      raise ValueError(f"the fast_slow cell needs the config field {field!r}.")
    sizes[field] = int(config[field])
  num_fast = config.get("num_fast")
  num_fast = 2 if num_fast is None else int(num_fast)
  if num_fast < 2:
    raise ValueError(f"num_fast={num_fast}: FS-RNN needs at least 2 fast cells.")
  policy = {f: config[f] for f in POLICY_FIELDS if config.get(f) is not None}
  fast_options = {**policy, **role_options(config, "fast_", fast_name)}
  slow_options = {**policy, **role_options(config, "slow_", slow_name)}
  fast = tuple(make_cell(fast_name, sizes["fast_size"], **fast_options)
               for _ in range(num_fast))
  slow = make_cell(slow_name, sizes["slow_size"], **slow_options)
  if dropout_rate is None:
    dropout_rate = config.get("dropout_rate") or 0.0
  return FastSlowCell(fast, slow, dropout_rate=float(dropout_rate))

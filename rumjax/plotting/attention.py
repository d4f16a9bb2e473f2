r"""The LSTMN's intra-attention as a heat map (Cheng, Dong, Lapata 2016, Figures 4-5).

Row ``t`` is the step that reads token ``t`` (1-based); column ``i`` is tape position ``i``
(0..T-1), the memory slot written when token ``i`` was read; column 0 is the empty tape
slot ``h_0 = c_0 = 0`` that every step can attend to (step 1 attends only to it). Cells
with ``i >= t`` (not yet written) are blank. The weights are those of
:func:`rumjax.lstmn_scan` with ``return_attention=True`` (``s[t - 1, i]``), e.g. from
:func:`rumjax.models.text_classifier.intra_attention`; ``launch/attention.py`` is the CLI.

As in :mod:`rumjax.plotting`: ``draw_*`` takes a Matplotlib ``Axes``, ``plot_*`` writes a
PNG through ``matplotlib.figure.Figure`` and its Agg canvas (no pyplot); Matplotlib is
imported only when drawing.
"""

from typing import Sequence

import numpy as np

from rumjax.plotting import common

EMPTY_SLOT = "<empty> (h_0)"
CARRIED_SLOT = "<carried state>"


def attention_matrix(weights, num_tokens: int) -> np.ndarray:
  """The ``[T, T]`` picture of ``weights`` <float>[T, T + 1] (or [T, T]): ``s[t - 1, i]`` for
  ``i < t``, NaN above (not yet written)."""
  w = np.asarray(weights, np.float64)
  if w.ndim != 2 or w.shape[0] != num_tokens or w.shape[1] < num_tokens:
    raise ValueError(f"weights have shape {w.shape}; for {num_tokens} tokens they must be "
                     f"[{num_tokens}, {num_tokens} + 1] (steps x tape positions 0..T).")
  w = w[:, :num_tokens].copy()
  w[np.triu_indices(num_tokens, k=1)] = np.nan   # row t - 1: positions i >= t not written
  return w


def draw_intra_attention(ax, tokens: Sequence[str], weights, title: str = "",
                         first_slot: str = EMPTY_SLOT):
  """Heat map of one sentence's intra-attention on ``ax`` (module docstring); column 0 is
  labelled ``first_slot`` (a language model's carried state: :data:`CARRIED_SLOT`)."""
  tokens = [str(t) for t in tokens]
  n = len(tokens)
  w = attention_matrix(weights, n)
  image = ax.imshow(np.ma.masked_invalid(w), cmap="Reds", vmin=0.0, vmax=1.0,
                    interpolation="nearest", aspect="auto")
  ax.set_xticks(range(n))
  ax.set_xticklabels([first_slot] + tokens[:-1], rotation=90)
  ax.set_yticks(range(n))
  ax.set_yticklabels(tokens)
  ax.set_xlabel("tape position (the memory of each earlier token)")
  ax.set_ylabel("token being read")
  ax.set_title(title)
  ax.figure.colorbar(image, ax=ax, shrink=0.85, label="attention weight")
  return ax


def plot_intra_attention(tokens: Sequence[str], weights, path: str, title: str = "") -> str:
  """Writes the heat map of :func:`draw_intra_attention` as a PNG at ``path``.

  Args:
    tokens: the ``T`` tokens of the sentence.
    weights: <float>[T, T + 1] (or [T, T]) intra-attention weights of one sentence.
    path: the PNG to write (its folder is created).
    title: the figure's title.

  Returns:
    ``path``.
  """
  size = 2.5 + 0.38 * len(tokens)
  fig, axes = common.figure(size + 1.5, size)
  draw_intra_attention(axes[0, 0], tokens, weights, title)
  return common.save(fig, path)


def draw_attention_profile(ax, layer_profile, max_distance: int = 12, title: str = ""):
  """Mean attention weight on the carried slot and on the token d back (d = 1..
  ``max_distance``), beside uniform attention over the visible positions; one layer's
  entry of :func:`rumjax.analysis.lm_attention.profile`."""
  at = [layer_profile["carried"]] + list(layer_profile["at_distance"][:max_distance])
  uniform = ([layer_profile["uniform_carried"]]
             + list(layer_profile["uniform_at_distance"][:max_distance]))
  x = np.arange(len(at))
  ax.bar(x - 0.2, at, width=0.4, label="trained LSTMN", color="tab:red")
  ax.bar(x + 0.2, uniform, width=0.4, label="uniform over visible slots", color="0.6")
  ax.set_xticks(x)
  ax.set_xticklabels(["carried"] + [str(d) for d in range(1, len(at))])
  ax.set_xlabel("attended slot: the carried state, or the token d steps back")
  ax.set_ylabel("mean attention weight")
  ax.set_title(title)
  ax.legend()
  return ax


def plot_lm_attention(tokens: Sequence[str], weights, layer_profile, path: str,
                      title: str = "", profile_title: str = "") -> str:
  """A language model's intra-attention on one sentence (carried slot first) beside its
  mean attention by distance over a stream (:func:`draw_attention_profile`); a PNG."""
  size = 2.5 + 0.38 * len(tokens)
  fig, axes = common.figure(2 * size + 3, size, ncols=2)
  draw_intra_attention(axes[0, 0], tokens, weights, title, first_slot=CARRIED_SLOT)
  draw_attention_profile(axes[0, 1], layer_profile, title=profile_title)
  return common.save(fig, path)

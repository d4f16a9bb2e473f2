"""``flax.nnx`` as a front door: every registered cell as an ``nnx.RNNCellBase``.

For users who bring their own NNX model: ``nnx.RNN(rumjax.nnx.RUMCell(8, 64, lam=1,
rngs=nnx.Rngs(0)))``. The cells call the same pure step functions as the Linen cells of
:mod:`rumjax.cells` (one source of the equations); :func:`from_linen` / :func:`to_linen`
move weights between the two. The zoo (models, training loop, launchers) stays Linen.
"""

from rumjax.nnx.cells import (NNX_CELLS, Cell, EURNNCell, FWLNCell, GORUCell, LayerNorm,
                              LNLSTMCell, RUMCell, URNNCell, cell_names, get_cell_class,
                              make_cell, register_cell)
from rumjax.nnx.convert import from_linen, to_linen

__all__ = ["NNX_CELLS", "Cell", "EURNNCell", "FWLNCell", "GORUCell", "LNLSTMCell",
           "LayerNorm", "RUMCell", "URNNCell", "cell_names", "from_linen", "get_cell_class",
           "make_cell", "register_cell", "to_linen"]

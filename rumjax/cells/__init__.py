"""Recurrent cells, one per file, each registered by a short name (see ``registry``).

Importing this package imports every cell module, so every cell and every optimizer
wrapper (the uRNN's Cayley steps) is registered.
"""

from rumjax.cells.registry import (CELLS, OPTIMIZER_WRAPPERS, cell_fields, cell_from_config,
                                   cell_names, get_cell_class, make_cell, optimizer_wrappers,
                                   register_cell, register_optimizer_wrapper)
from rumjax.cells.activations import modrelu
from rumjax.cells.base import (DTYPES, RecurrentCell, check_probability, precise,
                               resolve_dtype, zoneout)
from rumjax.cells.eurnn import EURNNCell, eunn_apply, eunn_matrix, eunn_num_angles
from rumjax.cells.fwln import FWLNCell
from rumjax.cells.goru import GORUCell
from rumjax.cells.lnlstm import LNLSTMCell
from rumjax.cells.rum import RUM, RUMCell, keep_lam_nonnegative, supports_scan
from rumjax.cells.urnn import (URNNCell, make_urnn_optimizer, stiefel_cayley,
                               stiefel_labels)
# Composite cells (built from cells, so not registered by name; config builders instead).
from rumjax.cells.stacked import StackedCells, stacked_from_config
from rumjax.cells.fast_slow import FastSlowCell, fast_slow_from_config

__all__ = ["CELLS", "DTYPES", "EURNNCell", "FWLNCell", "FastSlowCell", "GORUCell", "LNLSTMCell",
           "OPTIMIZER_WRAPPERS", "RUM", "RUMCell", "RecurrentCell", "StackedCells", "URNNCell",
           "cell_fields", "cell_from_config", "cell_names", "check_probability", "eunn_apply",
           "eunn_matrix", "eunn_num_angles", "fast_slow_from_config", "get_cell_class",
           "keep_lam_nonnegative", "make_cell", "make_urnn_optimizer", "modrelu", "optimizer_wrappers", "precise",
           "register_cell", "register_optimizer_wrapper", "resolve_dtype", "stacked_from_config",
           "stiefel_cayley", "stiefel_labels", "supports_scan", "zoneout"]

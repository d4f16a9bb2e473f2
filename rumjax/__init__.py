"""rumjax: a JAX/Flax model zoo around the Rotational Unit of Memory (RUM).

The functional core::

    from rumjax import rotation_matrix, rotate, rotation_power, rum_scan, init_rum_params, RUMCell
    from rumjax import lstmn_scan, init_lstmn_params   # the LSTMN (Cheng et al., 2016)

The equations live in ``rumjax.core``; around them ``rumjax.cells`` (recurrent cells by
name), ``rumjax.layers``, ``rumjax.models`` (models by name), ``rumjax.decoding`` (greedy and
beam search over any state), ``rumjax.evaluators``, ``rumjax.training`` (the loop, hooks,
the experiment runner), ``rumjax.analysis`` and ``rumjax.plotting`` (the papers' figures)
and ``rumjax.benchmarks``. WORKSPACE.md draws the layers and which may import which.
"""

from rumjax import decoding
from rumjax.cells import RUMCell, cell_names, make_cell, register_cell
from rumjax.decoding import beam_search, greedy_search
from rumjax.core import (ACTIVATIONS, init_lstmn_params, init_rum_params, init_starsaber_params,
                         lstmn_scan, rotate, rotation_matrix, rotation_plane, rotation_power,
                         rum_scan,
                         rum_step, starsaber_gate_layer, starsaber_layer)

__version__ = "0.1.0"

__all__ = [
    "ACTIVATIONS", "RUMCell", "beam_search", "cell_names", "decoding", "greedy_search",
    "init_lstmn_params", "init_rum_params", "init_starsaber_params", "lstmn_scan", "make_cell",
    "register_cell", "rotate", "rotation_matrix", "rotation_plane", "rotation_power", "rum_scan", "rum_step",
    "starsaber_gate_layer", "starsaber_layer",
]

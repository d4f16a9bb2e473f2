"""The papers' equations as pure JAX functions: no Flax, no state, no configs.

* :mod:`rumjax.core.rotation`: ``Rotation(a, b)`` of the RUM paper (eq. 1, Algorithm 1).
* :mod:`rumjax.core.power`: ``rotation_power(R, lam)``, the real power of a rotation
  (footnote 9 of the RUM paper; eq. (2) with a real ``lam``).
* :mod:`rumjax.core.rum`: the RUM recurrence (eqs. 2-3, Algorithm 1) as ``lax.scan``;
  :mod:`rumjax.core.rum_fast`: the same with a hand-written O(T N) memory backward pass.
* :mod:`rumjax.core.lstmn`: the LSTMN (Cheng, Dong and Lapata, 2016, eqs. 4-12).
* :mod:`rumjax.core.starsaber`: the StarSaber layer.
* shared pieces: :mod:`~rumjax.core.precision` (at least float32, ``HIGHEST``),
  :mod:`~rumjax.core.initializers` (block-orthogonal kernels),
  :mod:`~rumjax.core.attention` (the masked softmax).

Every layer above (``rumjax.cells``, ``rumjax.layers``, ``rumjax.models``) calls these.
"""

from rumjax.core.lstmn import init_lstmn_params, lstmn_scan
from rumjax.core.power import rotation_power
from rumjax.core.rotation import rotate, rotation_matrix, rotation_plane
from rumjax.core.rum import ACTIVATIONS, init_rum_params, rum_scan, rum_step
from rumjax.core.starsaber import init_starsaber_params, starsaber_gate_layer, starsaber_layer

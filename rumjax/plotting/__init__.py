"""Figures with Matplotlib, one module per figure family (matching :mod:`rumjax.analysis`).

* :mod:`rumjax.plotting.common`: figures, PNG files, curves and bars (RUM paper, Figure 4).
* :mod:`rumjax.plotting.angles`: ``W^tau_hh`` and ``cos(theta_t)`` (Figure 5).
* :mod:`rumjax.plotting.landscape`: loss landscapes (Figure 8).
* :mod:`rumjax.plotting.summarization`: gradient flow in summarization (Figure 6).
* :mod:`rumjax.plotting.attention`: LSTMN intra-attention maps (LSTMN paper, Figure 4).

Matplotlib is the optional ``plot`` extra (``pip install 'rumjax[plot]'``): it is imported
inside the functions that draw, so ``import rumjax.plotting`` works without it. The names
of ``common`` and ``angles`` are also here (``plotting.save_recall(...)``).
"""

from rumjax.plotting.common import (draw_accuracy_bars, draw_curves, figure, load_config,
                                    require_matplotlib, save, save_copying,
                                    save_lam_sweep, save_orthogonality_drift, save_steps_and_time,
                                    save_recall)
from rumjax.plotting.angles import (draw_cos_histograms, draw_cos_map, draw_kernel,
                                       is_rum_model_dir, plot_rum_kernels, plot_rum_model,
                                       rum_model_dirs, save_kernels,
                                       rum_figures, save_cos, save_kernel)

"""Looking inside trained models, one module per figure of the papers.

* :mod:`rumjax.analysis.runs`: a trained run read one way (task, config, parameters).
* :mod:`rumjax.analysis.angles`: the rotation angles of a RUM (RUM paper, Figure 5).
* :mod:`rumjax.analysis.landscape`: the loss landscape (RUM paper, Figure 8).
* :mod:`rumjax.analysis.summarization`: gradient flow in summarization (RUM paper, Figure 6).

The names of ``runs`` and ``angles`` are also here (``analysis.cos_theta(...)``).
"""

from rumjax.analysis.angles import (cos_from_checkpoints, cos_histograms, cos_theta,
                                       find_rum_params, fixed_batch, is_rum_params,
                                       kernel_blocks,
                                       mean_cos_of_params, mean_cos_per_step, metric_curve,
                                       metric_over_time,
                                       read_cos_records, read_jsonl, sown_cos, step_weights,
                                       target_kernel, training_seconds)
from rumjax.analysis.runs import (checkpoint_steps, flatten, load_checkpoint_params,
                                  load_params, load_run, recorded_path, save_params_npz,
                                  unflatten)

"""Each task's config, one module per task: ``tasks/configs/<name>.py:get_config(variant)``
(in the manner of Flax's ``examples/*/configs/default.py``), the paper's variants as data
and every task field commented where it is set. The loop's and optimizer's fields common
to all tasks are :func:`tasks.common.base_config`'s."""

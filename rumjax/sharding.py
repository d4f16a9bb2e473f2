"""Data parallelism: one ``data`` mesh axis over every device of every process.

The batch is split along its first axis over the ``data`` axis; parameters and optimizer
state are replicated. Each process feeds only its own rows of the global batch
(``jax.make_array_from_process_local_data``), so the same code runs on one CPU, a GPU box
or a multi-host TPU pod.
"""

import os

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


def use_cpu_devices(n) -> None:
  """Makes JAX expose ``n`` CPU devices (``jax_num_cpu_devices``); ``n="auto"``: one per
  core. Call before any JAX computation. Accelerator backends are unaffected.

  With one CPU device per core, the loop's data parallelism runs the batch shards on the
  cores concurrently. That suits recurrences of small per-step operations (RUM ``lam=1``
  steps are ~2x faster on 2 cores this way than with XLA's intra-op threads on one device),
  not models made of large matmuls, which XLA already spreads over the cores.
  """
  if n is None:
    return
  message = f"cpu_devices must be a positive number or 'auto', got {n!r}."
  try:
    count = (os.cpu_count() or 1) if n == "auto" else int(n)
  except ValueError:
    raise ValueError(message) from None
  if count < 1:
    raise ValueError(message)
  try:
    jax.config.update("jax_num_cpu_devices", count)
  except RuntimeError as err:
    raise RuntimeError(f"cpu_devices={n!r} must be set before JAX runs anything "
                       f"(set it first thing in the program): {err}") from err


DATA = "data"   # the mesh axis of the batch


def make_mesh() -> Mesh:
  """A 1-D mesh named ``data`` over all devices (all processes)."""
  return Mesh(np.asarray(jax.devices()), (DATA,))


def context_batch_shards() -> int:
  """How many shards the ``data`` axis of the mesh in context (``jax.set_mesh``, which the
  training loop sets) splits a batch into; 1 without such a mesh. Read while tracing, by
  code that must split the batch itself (a kernel that XLA cannot partition)."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or DATA not in mesh.axis_names:
    return 1
  return int(mesh.shape[DATA])


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P(DATA))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def check_batch_size(global_batch_size: int, mesh: Mesh) -> None:
  """The global batch must split evenly over devices and processes."""
  n_dev, n_proc = mesh.devices.size, jax.process_count()
  if global_batch_size % n_dev or global_batch_size % n_proc:
    raise ValueError(
        f"batch_size={global_batch_size} is not divisible by the number of devices "
        f"({n_dev}) and processes ({n_proc}); use a multiple of {n_dev}.")


def shard_batch(local_batch, mesh: Mesh):
  """This process's rows (a dict of NumPy arrays) -> global arrays sharded on ``data``;
  a one-line ``ValueError`` if the rows do not split evenly over this process's devices
  (e.g. ``launch.predict --batch_size=3`` on 2 devices) or a leaf has no row axis (a
  scalar: every leaf of a batch is per row)."""
  local = len(mesh.local_devices)
  for path, x in jax.tree_util.tree_leaves_with_path(local_batch):
    if not np.ndim(x):
      raise ValueError(f"batch{jax.tree_util.keystr(path)} is a scalar; every leaf of a "
                       "batch needs a leading row axis (repeat a per-batch value per row).")
    rows = np.shape(x)[0]
    if rows % local:
      raise ValueError(f"a batch of {rows} rows on this process does not split over its "
                       f"{local} devices; use a batch_size that is a multiple of "
                       f"{mesh.devices.size}.")
  sharding = batch_sharding(mesh)
  return jax.tree.map(
      lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)),
      local_batch)


def replicate(tree, mesh: Mesh):
  """Places a pytree (e.g. the train state) replicated on every device of the mesh."""
  return jax.device_put(tree, replicated(mesh))

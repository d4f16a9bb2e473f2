"""Checkpoints with ``orbax-checkpoint``: the train state plus the data iterator position.

Under ``<workdir>/checkpoints/<step>/`` each checkpoint holds ``state`` (a
:class:`~rumjax.training.state.TrainState`) and ``data`` (the JSON state of the training
iterator). Orbax writes to a temporary directory and renames it when complete, and deletes
old checkpoints (beyond ``keep``) only after a newer one is complete, so a crash never
leaves us without the last good checkpoint.

On restore, each checkpoint's tree (orbax metadata: paths and shapes) is compared with the
new run's state first: a checkpoint that does not fit the model is not corrupt, it is a
one-line :class:`StateMismatchError` and nothing is moved. A checkpoint that cannot be
read at all (partial, truncated, bad metadata) is reported in the log, moved aside to
``<workdir>/corrupt_checkpoints/`` (kept, never deleted) and the previous one is tried;
a read-only checkpointer (``launch.evaluate``) only skips it. A read that fails because of
the machine, not the files (out of memory, permission denied, a full, busy or unreachable
disk: :func:`machine_error`) moves nothing: it is a one-line :class:`CheckpointReadError`,
and the run resumes from that checkpoint once the cause is fixed.
"""

import errno

import logging as logging_std
import os
import shutil
import sys
import time
from typing import Any, Optional

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging


def _ignore_closed_loop_callbacks() -> None:
  """After a failed read, drops the ``RuntimeError: Event loop is closed`` reports of its
  other reads (installed once, for the rest of the process; every other unraisable
  exception still goes to the previous hook).

  Their cause: orbax gathers the reads of a checkpoint's arrays (tensorstore futures)
  under ``asyncio.run``; when one fails, the run ends and closes its event loop while the
  other reads are still in flight, and each of them, on completing, calls
  ``loop.call_soon_threadsafe`` on the closed loop from tensorstore's thread. Python
  reports that through ``sys.unraisablehook``: one traceback per array, meaningless
  (the failure itself is reported and handled by :meth:`Checkpointer.restore`).
  """
  previous = sys.unraisablehook
  if getattr(previous, "_rumjax_closed_loop", False):
    return

  def hook(unraisable):
    err = unraisable.exc_value
    if isinstance(err, RuntimeError) and str(err) == "Event loop is closed":
      return
    previous(unraisable)

  hook._rumjax_closed_loop = True
  sys.unraisablehook = hook


class StateMismatchError(ValueError):
  """A checkpoint that is readable but does not fit the new run's state."""


class CheckpointReadError(ValueError):
  """A checkpoint that could not be read because of the machine (:func:`machine_error`)."""


# OSError numbers that say the machine failed, not the checkpoint's files.
_MACHINE_ERRNOS = frozenset({errno.ENOMEM, errno.EACCES, errno.EPERM, errno.ENOSPC,
                             errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.EIO,
                             errno.ETIMEDOUT, errno.EDQUOT, errno.EROFS})


def machine_error(err: BaseException) -> Optional[BaseException]:
  """The exception in ``err``'s chain (``__cause__`` / ``__context__``, orbax wraps what
  tensorstore raises) that says the machine failed, not the files: a ``MemoryError`` or an
  ``OSError`` whose ``errno`` is one of :data:`_MACHINE_ERRNOS` (e.g. permission denied,
  no space, an I/O error of a network disk); ``None`` if there is none."""
  seen = set()
  while err is not None and id(err) not in seen:
    seen.add(id(err))
    if isinstance(err, MemoryError) or (isinstance(err, OSError)
                                        and err.errno in _MACHINE_ERRNOS):
      return err
    err = err.__cause__ or err.__context__
  return None


def _leaf_shapes(tree) -> dict[str, tuple]:
  """``{"params/head/kernel": shape, ...}`` of a state tree or of orbax's metadata tree
  (their containers differ: dataclasses and named tuples vs. dicts and lists)."""
  return {_path_name(p): tuple(x.shape)
          for p, x in jax.tree_util.tree_flatten_with_path(tree)[0] if hasattr(x, "shape")}


def tree_differences(saved_tree, abstract_state) -> list[str]:
  """The leaves whose path or shape differ between a checkpoint's metadata tree and the
  state a run would restore into, as ``"params/x: (8, 10) in the checkpoint, (16, 10)
  now"`` lines (sorted)."""
  saved, new = _leaf_shapes(saved_tree), _leaf_shapes(abstract_state)
  out = []
  for name in sorted(set(saved) | set(new)):
    a, b = saved.get(name), new.get(name)
    if a != b:
      out.append(f"{name}: {'absent' if a is None else a} in the checkpoint, "
                 f"{'absent' if b is None else b} now")
  return out


class Checkpointer:
  """Saves and restores ``(TrainState, data_state)`` under ``<workdir>/checkpoints``.

  ``read_only=True`` (evaluation of another run's workdir): creates nothing and moves no
  unreadable checkpoint aside (it is skipped).
  """

  def __init__(self, workdir: str, *, keep: int = 3, every: int = 0,
               read_only: bool = False):
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
      raise ValueError(f"config.keep_checkpoints={keep!r} must be an integer >= 1 (orbax "
                       "keeps none at 0: a run could not resume).")
    self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
    self.corrupt_dir = os.path.abspath(os.path.join(workdir, "corrupt_checkpoints"))
    self.every = every
    self.read_only = read_only
    self._closed = False
    self.manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=not read_only,
                                             enable_async_checkpointing=False))

  def should_save(self, step: int) -> bool:
    return bool(self.every) and step % self.every == 0

  def save(self, step: int, state, data_state: dict, *, window: Optional[dict] = None,
           force: bool = False) -> None:
    """Saves ``state``, ``data_state`` (the data iterator's position) and, if given,
    ``window`` (JSON: the loop's training metrics since its last record) at ``step``."""
    if step in self.manager.all_steps():
      return
    items = {"state": ocp.args.StandardSave(state), "data": ocp.args.JsonSave(data_state)}
    if window is not None:
      items["window"] = ocp.args.JsonSave(window)
    self.manager.save(step, args=ocp.args.Composite(**items), force=True)
    self.manager.wait_until_finished()
    logging.info("Saved checkpoint at step %d in %s.", step, self.directory)

  def restore(self, abstract_state, step: Optional[int] = None
              ) -> Optional[tuple[Any, dict, int, Optional[dict]]]:
    """The latest loadable ``(state, data_state, step, window)`` (or that of ``step``
    only), or ``None`` if there is none. ``window`` is what :meth:`save` was given (``None``
    for a checkpoint saved without it, e.g. before session 33)."""
    _ignore_closed_loop_callbacks()
    steps = sorted(self.manager.all_steps(), reverse=True)
    if step is not None:
      steps = [s for s in steps if s == step]
    for step in steps:
      try:
        saved_tree = self.state_metadata(step)
      except Exception as err:  # orbax raises many types for unreadable files
        self._quarantine(step, err)
        continue
      self.check_fits(step, saved_tree, abstract_state)
      try:
        items = {"state": ocp.args.StandardRestore(abstract_state),
                 "data": ocp.args.JsonRestore()}
        if os.path.isdir(os.path.join(self.directory, str(step), "window")):
          items["window"] = ocp.args.JsonRestore()
        restored = self.manager.restore(step, args=ocp.args.Composite(**items))
        return restored.state, restored.data, step, restored.get("window")
      except Exception as err:  # orbax raises many types for unreadable files
        self._quarantine(step, err)
    return None

  def state_metadata(self, step: int):
    """The metadata tree (paths, shapes, dtypes) of the state saved at ``step``; raises
    if it cannot be read."""
    path = os.path.join(self.directory, str(step), "state")
    quiet = _DropMessages("_CHECKPOINT_METADATA")
    logger = logging_std.getLogger("absl")
    logger.addFilter(quiet)
    try:
      item = ocp.PyTreeCheckpointer().metadata(path).item_metadata
    finally:
      logger.removeFilter(quiet)
    tree = getattr(item, "tree", None)
    if not isinstance(tree, dict) or "params" not in tree:
      raise ValueError(f"the metadata of {path} cannot be read")
    return tree

  def check_fits(self, step: int, saved_tree, abstract_state) -> None:
    """One-line :class:`StateMismatchError` if the checkpoint at ``step`` does not fit
    ``abstract_state`` (another model or optimizer): not corruption, nothing is moved."""
    diffs = tree_differences(saved_tree, abstract_state)
    if diffs:
      more = f" (and {len(diffs) - 5} more)" if len(diffs) > 5 else ""
      raise StateMismatchError(
          f"the checkpoint at step {step} in {self.directory} does not fit this model: "
          f"{'; '.join(diffs[:5])}{more}. Resume with the config that run used, pass a new "
          "--workdir, or fine-tune from it in a new --workdir with "
          f"--config.init_from={os.path.dirname(self.directory)}.")

  def _quarantine(self, step: int, err: Exception) -> None:
    src = os.path.join(self.directory, str(step))
    cause = machine_error(err)
    if cause is not None:
      raise CheckpointReadError(
          f"the checkpoint at step {step} in {src} could not be read: "
          f"{type(cause).__name__}: {str(cause)[:300]}. That is the machine, not the "
          "checkpoint: nothing was moved; fix the cause (memory, permissions, disk) and "
          "run the same command again to resume from it.") from err
    if self.read_only:
      logging.error("Checkpoint at step %d in %s cannot be read (%s: %s); trying the "
                    "previous one.", step, src, type(err).__name__, str(err)[:300])
      self.manager.reload()
      return
    dst = os.path.join(self.corrupt_dir, f"{step}-{int(time.time())}")
    logging.error("Checkpoint at step %d in %s cannot be restored (%s: %s); moving it to %s "
                  "and falling back to the previous checkpoint.", step, src,
                  type(err).__name__, str(err)[:300], dst)
    if jax.process_index() == 0:
      os.makedirs(self.corrupt_dir, exist_ok=True)
      shutil.move(src, dst)
    self.manager.reload()

  def latest_step(self) -> Optional[int]:
    return self.manager.latest_step()

  def close(self) -> None:
    """Waits for any pending write and closes the manager (once; later calls do
    nothing)."""
    if self._closed:
      return
    self._closed = True
    try:
      self.manager.wait_until_finished()
    finally:
      self.manager.close()


def checkpoint_steps(workdir: str) -> list[int]:
  """The steps of the complete checkpoints under ``<workdir>/checkpoints`` (or under
  ``workdir`` itself if it is such a folder)."""
  directory = _checkpoints_dir(workdir)
  if not os.path.isdir(directory):
    return []
  return sorted(int(d) for d in os.listdir(directory)
                if d.isdigit() and os.path.isdir(os.path.join(directory, d, "state")))


def _checkpoints_dir(workdir: str) -> str:
  inner = os.path.join(workdir, "checkpoints")
  return inner if os.path.isdir(inner) else workdir


class _DropMessages(logging_std.Filter):
  def __init__(self, text: str):
    super().__init__()
    self.text = text

  def filter(self, record) -> bool:
    return self.text not in record.getMessage()


def read_params(workdir: str, step: Optional[int] = None) -> tuple[int, Any]:
  """``(step, params)`` of a checkpoint (the latest by default) as NumPy arrays, without
  knowing the model: the one reader of parameters from checkpoints (any saving topology).

  Args:
    workdir: a training workdir, its ``checkpoints`` folder, or a ``best`` folder.
    step: the checkpoint's step (default: the latest).

  Raises:
    ValueError: no checkpoint (at ``step``) there, naming the folder and the steps found.
  """
  directory = _checkpoints_dir(workdir)
  steps = checkpoint_steps(workdir)
  if not steps or (step is not None and int(step) not in steps):
    at = "" if step is None else f" at step {step}"
    raise ValueError(f"no checkpoint found{at} in {directory!r} (steps there: {steps}).")
  step = steps[-1] if step is None else int(step)
  path = os.path.join(os.path.abspath(directory), str(step), "state")
  checkpointer = ocp.PyTreeCheckpointer()
  # The step-level metadata file sits one level up (written by the CheckpointManager);
  # reading the item alone makes orbax warn about it on every call.
  quiet = _DropMessages("_CHECKPOINT_METADATA")
  logger = logging_std.getLogger("absl")
  logger.addFilter(quiet)
  try:
    tree = checkpointer.metadata(path).item_metadata.tree
    as_numpy = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
    params = checkpointer.restore(path, restore_args=as_numpy)["params"]
  finally:
    logger.removeFilter(quiet)
  return step, jax.tree.map(np.asarray, params)


def _path_name(path) -> str:
  """``"params/head/kernel"`` for a dict key, sequence index or attribute path."""
  return "/".join(str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k))))
                  for k in path)


def restore_params(checkpoint_dir: str, abstract_params, step: Optional[int] = None):
  """The parameters from another run's checkpoint (e.g. pretraining), for initialising a
  model; ``checkpoint_dir`` is a workdir or its ``checkpoints`` folder.

  Every parameter of ``abstract_params`` whose path (e.g. ``encoder/layer_0/U``) is also
  in the checkpoint takes the checkpoint's value; the others keep their value from
  ``abstract_params`` (a fine-tuning head on a pretrained encoder), and checkpoint
  parameters the model lacks (a pretraining head) are left out. Both lists are logged.
  Read as host arrays (:func:`read_params`), so any saving topology works.

  Raises:
    ValueError: no checkpoint there, a shared path whose shape differs, or no shared
      path at all (one line each).
  """
  try:
    _, params = read_params(checkpoint_dir, step)
  except ValueError as err:
    raise ValueError(f"cannot initialise from {checkpoint_dir!r}: {err}") from None
  saved = {_path_name(p): x for p, x in jax.tree_util.tree_flatten_with_path(params)[0]}
  leaves, treedef = jax.tree_util.tree_flatten_with_path(abstract_params)
  restored, kept = [], []
  for path, ref in leaves:
    name = _path_name(path)
    if name not in saved:
      kept.append(name)
      restored.append(ref)
      continue
    value = saved.pop(name)
    if tuple(value.shape) != tuple(ref.shape):
      raise ValueError(f"cannot initialise from {checkpoint_dir!r}: parameter {name} has "
                       f"shape {tuple(value.shape)} there but {tuple(ref.shape)} in this "
                       "model; use the same model sizes (and vocabulary) as that run.")
    restored.append(jax.numpy.asarray(value, ref.dtype))
  if len(kept) == len(leaves):
    raise ValueError(f"cannot initialise from {checkpoint_dir!r}: none of its parameters "
                     f"({sorted(saved)[:5]}...) is a parameter of this model; is it a run "
                     "of the same model?")
  logging.info("init_from %s: %d of %d parameter arrays restored; kept at initialisation: "
               "%s; in the checkpoint but not in this model: %s", checkpoint_dir,
               len(leaves) - len(kept), len(leaves), kept or "none", sorted(saved) or "none")
  return jax.tree_util.tree_unflatten(treedef, restored)

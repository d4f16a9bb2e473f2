"""A workdir belongs to one run: its lock, and the resume check against its saved config.

The lock is ``<workdir>/run.lock``, held with ``fcntl.flock`` by the run's primary process
(``jax.process_index() == 0``; the other processes of a multi-host run share the workdir).
The operating system releases it when that process ends, however it ends, so a lock is
never stale on the host that held it; the file also names its holder (host, pid, start
time) for the message a second run gets, and is emptied on a clean release, so a
non-empty file that can be locked was left by a process that died (taken over with a
warning). Orbax has no such lock (its CheckpointManager assumes one writer), hence this.

On a file system without ``flock`` the holder record alone decides: a live pid on this
host, or any other host, is refused (the message names the file to delete if that run is
gone); a dead pid on this host is taken over.

``check_resume`` refuses, before anything is written, a run whose config differs from the
workdir's ``config.json`` in a field that shapes the state or the run
(:data:`rumjax.configs.RESUME_MAY_CHANGE` lists the fields that may change).
"""

import datetime
import errno
import json
import os
import socket
from typing import Optional

from absl import logging

from rumjax import configs, utils

try:
  import fcntl
except ImportError:  # not POSIX
  fcntl = None

LOCK_FILE = "run.lock"


class WorkdirError(ValueError):
  """A run that must not go on in this workdir (busy, or another run's config)."""


def check_writable(workdir: str) -> None:
  """Makes ``workdir`` (and its parents); a one-line :class:`WorkdirError` if it is a file
  or cannot be written. Nothing in it is touched (the probe file is this process's own)."""
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise WorkdirError(f"workdir {workdir!r} is a file, not a folder; pass a --workdir "
                       "folder (a new path is created).")
  try:
    os.makedirs(workdir, exist_ok=True)
    probe = os.path.join(workdir, f".write_test_{socket.gethostname()}_{os.getpid()}")
    with open(probe, "w") as f:
      f.write("ok")
    os.remove(probe)
  except OSError as err:
    raise WorkdirError(f"workdir {workdir!r} is not writable ({err.strerror}); pass a "
                       "--workdir you can write to.") from err


def _experiment_mark(workdir: str) -> Optional[str]:
  """What makes ``workdir`` (without a ``config.json``) the folder of an experiment, or
  ``None``: its ``results.json`` (``launch.reproduce``'s experiment, ``launch.babi_all``),
  an experiment's ``<name>/results.json`` one level down (``launch.reproduce``'s root) or
  ``comparison.md`` (``launch.babi_all --cells``)."""
  if not os.path.isdir(workdir) or os.path.exists(os.path.join(workdir, "config.json")):
    return None
  for name in ("results.json", "comparison.md"):
    if os.path.isfile(os.path.join(workdir, name)):
      return name
  for sub in sorted(os.listdir(workdir)):
    if (os.path.isfile(os.path.join(workdir, sub, "results.json"))
        and not os.path.exists(os.path.join(workdir, sub, "config.json"))):
      return os.path.join(sub, "results.json")
  return None


def check_not_experiment(workdir: str) -> None:
  """A one-line :class:`WorkdirError` if ``workdir`` is the folder of an experiment
  (:func:`_experiment_mark`): its runs are its subfolders, and a run written beside them
  would be taken for one of them (``launch.plot`` drew it instead of the experiment's
  models)."""
  mark = _experiment_mark(workdir)
  if mark:
    raise WorkdirError(f"workdir {workdir!r} holds {mark}: it is the folder of an "
                       "experiment (launch.reproduce, launch.babi_all) whose runs are its "
                       "subfolders; pass a new --workdir, or one of those runs to resume it.")


def check_not_run(root: str) -> None:
  """A one-line :class:`WorkdirError` if ``root``, the folder of an experiment's runs
  (``launch.reproduce``, ``launch.babi_all``), is a training run's workdir (it holds
  ``config.json`` or ``checkpoints/``): the experiment's runs would mix with its files."""
  for name in ("config.json", "checkpoints"):
    if os.path.exists(os.path.join(root, name)):
      raise WorkdirError(f"workdir {root!r} holds {name}: it is a training run's workdir; "
                         "pass a new --workdir for the experiment (its runs are made in "
                         "subfolders).")


def _holder_text(holder: dict) -> str:
  return (f"host {holder.get('host')}, pid {holder.get('pid')}, started "
          f"{holder.get('start')}")


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


class WorkdirLock:
  """The run lock of ``workdir``: ``acquire()`` or a one-line :class:`WorkdirError`;
  ``release()`` (idempotent) at the end, also as a context manager."""

  def __init__(self, workdir: str):
    self.path = os.path.join(workdir, LOCK_FILE)
    self._fd = None

  def __enter__(self):
    self.acquire()
    return self

  def __exit__(self, *exc):
    self.release()

  def _read(self, fd) -> dict:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 4096).decode("utf-8", "replace").strip()
    try:
      return json.loads(text) if text else {}
    except json.JSONDecodeError:
      return {"host": "?", "pid": "?", "start": f"? (unreadable {self.path})"}

  def _busy(self, holder: dict, hint: str = "") -> WorkdirError:
    return WorkdirError(
        f"workdir {os.path.dirname(self.path)!r} is in use by another run "
        f"({_holder_text(holder)}){hint}; wait for it to end, stop it, or pass another "
        "--workdir.")

  def acquire(self) -> None:
    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      holder = self._read(fd)
      locked = self._flock(fd, holder)
      if holder:
        if not locked:
          self._check_record(holder)
        logging.warning("Taking over the lock of a run that ended without releasing it "
                        "(%s): %s.", _holder_text(holder), self.path)
      me = {"host": socket.gethostname(), "pid": os.getpid(),
            "start": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds")}
      os.ftruncate(fd, 0)
      os.lseek(fd, 0, os.SEEK_SET)
      os.write(fd, json.dumps(me).encode())
      os.fsync(fd)
    except BaseException:
      os.close(fd)
      raise
    self._fd = fd

  def _flock(self, fd, holder: dict) -> bool:
    """Whether ``flock`` took the lock (False: not supported here); a busy lock raises."""
    if fcntl is None:
      return False
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      return True
    except BlockingIOError:
      holder = holder or self._read(fd) or {"host": "?", "pid": "?", "start": "?"}
      raise self._busy(holder) from None
    except OSError as err:
      if err.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
        return False
      raise

  def _check_record(self, holder: dict) -> None:
    """Without ``flock``: refuse a holder that may be alive."""
    same_host = holder.get("host") == socket.gethostname()
    pid = holder.get("pid")
    if same_host and isinstance(pid, int) and not _alive(pid):
      return
    raise self._busy(holder, f"; this file system has no flock, so if that run is gone "
                     f"delete {self.path}")

  def release(self) -> None:
    if self._fd is None:
      return
    try:
      os.ftruncate(self._fd, 0)
    finally:
      os.close(self._fd)   # closing the file releases the flock
      self._fd = None


def holder(workdir: str) -> Optional[dict]:
  """The recorded holder of ``workdir``'s lock (``None`` if it is free and clean)."""
  path = os.path.join(workdir, LOCK_FILE)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    text = f.read().strip()
  return json.loads(text) if text else None


def check_resume(config, workdir: str) -> None:
  """One-line :class:`WorkdirError` if ``workdir`` has checkpoints and its ``config.json``
  differs from ``config`` in a field that may not change on resume (see
  :data:`rumjax.configs.RESUME_MAY_CHANGE`); reads only."""
  from rumjax.training import checkpoint as checkpoint_lib
  path = os.path.join(workdir, "config.json")
  if not checkpoint_lib.checkpoint_steps(workdir) or not os.path.isfile(path):
    return
  saved = utils.read_json(path)
  diffs = configs.resume_differences(saved, configs.as_json(config))
  if diffs:
    raise WorkdirError(
        f"workdir {workdir!r} holds a run with another config: "
        f"{configs.format_differences(diffs)}. Resume it with its own config, pass a new "
        f"--workdir, or fine-tune from it in a new --workdir with "
        f"--config.init_from={workdir} (a resumed run may change only num_steps, the "
        "evaluation, logging and checkpoint cadence, and data locations: "
        "rumjax.configs.RESUME_MAY_CHANGE).")


def remove_unused(workdir: str, remove_folder: bool) -> list[str]:
  """Undoes what a run refused at its start left in a ``workdir`` that was empty or absent
  before it: an empty ``run.lock`` and empty folders (e.g. ``checkpoints/``), then, with
  ``remove_folder``, the workdir itself if nothing else is left. A file with content is
  never removed (a run that wrote something keeps it), nor anything while ``run.lock``
  names a holder (another run took the workdir). Returns the paths removed."""
  removed = []
  lock = os.path.join(workdir, LOCK_FILE)
  if os.path.isfile(lock):
    if os.path.getsize(lock):   # held by another run (this one was refused): its folder
      return removed
    os.remove(lock)
    removed.append(lock)
  for root, dirs, _ in os.walk(workdir, topdown=False):
    for name in dirs:
      path = os.path.join(root, name)
      if not os.listdir(path):
        os.rmdir(path)
        removed.append(path)
  if remove_folder and os.path.isdir(workdir) and not os.listdir(workdir):
    os.rmdir(workdir)
    removed.append(workdir)
  return removed


def check_steps(config, workdir: str) -> None:
  """One-line :class:`WorkdirError` if ``workdir``'s latest checkpoint is past
  ``config.num_steps`` (e.g. ``--steps=300`` over a finished 500-step run): a run cannot go
  back, and going on would rewrite ``config.json`` and log a second final evaluation.
  Reads only."""
  from rumjax.training import checkpoint as checkpoint_lib
  steps = checkpoint_lib.checkpoint_steps(workdir)
  if steps and steps[-1] > config.num_steps:
    raise WorkdirError(
        f"workdir {workdir!r} holds a run at step {steps[-1]}, past num_steps="
        f"{config.num_steps} (--steps): a run does not go back; pass --steps={steps[-1]} or "
        f"more to resume it, evaluate it with python -m launch.evaluate --workdir={workdir}, "
        "or pass a new --workdir.")

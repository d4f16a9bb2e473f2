"""The generic training loop and what it needs (state, sharding, checkpoints, metrics,
hooks, progress)."""

from rumjax.training import hooks
from rumjax.training.checkpoint import (Checkpointer, CheckpointReadError, StateMismatchError,
                                        restore_params)
from rumjax.training.workdir import WorkdirError, WorkdirLock, check_not_run, check_writable
from rumjax.training.hooks import EarlyStopping, Periodic, TimeBudget, check_budget_minutes
from rumjax.training.loop import (NonFiniteError, StopRequest, count_model_params, evaluate_checkpoint,
                                  predict_checkpoint,
                                  make_evaluators, predict_fns, train_and_evaluate,
                                  train_step)
from rumjax.training.optim import make_optimizer, make_schedule
from rumjax.sharding import make_mesh, replicate, shard_batch
from rumjax.training.state import TrainState

__all__ = ["Checkpointer", "CheckpointReadError", "StateMismatchError", "WorkdirError", "WorkdirLock", "check_not_run", "check_writable", "EarlyStopping", "NonFiniteError", "StopRequest", "Periodic", "TimeBudget", "check_budget_minutes",
           "TrainState", "count_model_params", "evaluate_checkpoint", "hooks", "make_evaluators", "make_mesh",
           "make_optimizer", "make_schedule", "predict_checkpoint", "predict_fns", "replicate", "restore_params",
           "shard_batch", "train_and_evaluate", "train_step"]

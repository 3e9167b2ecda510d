"""A run's lifecycle: create it, train it, resume it, open it for reading, list them; shipped models.

A run is a folder ``runs/NAME`` whose files :class:`swarmctl.rundir.RunDir` names (config, metrics, best
and last checkpoints, curves, lock). The package:

- ``lifecycle``: configs from options, :func:`start_run` and :func:`resume_run` (one skeleton), what follows
  training (:func:`finish_runs`), and :func:`train`, the whole of `swarmctl train`;
- ``plan``: what a run is before it trains, for `train` and `sweep` alike: its default name (:func:`run_name`)
  and the refusal of a model too large for the device (:func:`parameter_count`, :func:`training_state_bytes`,
  :func:`check_training_memory`);
- ``lock``: :func:`run_lock`, one writer at a time;
- ``read``: a run's config and progress, its checkpoint, :func:`open_run` (every command that reads a run
  goes through it), :func:`evaluate_run`;
- ``shipped``: the shipped models (package data found by their JSON records; ``tools/campaigns/shipping.py``
  writes them).
"""

from swarmctl.config import RESUMABLE
from swarmctl.rundir import RunDir
from swarmctl.runs.lifecycle import (
    Finished,
    Progress,
    Trained,
    configs_from_options,
    finish_runs,
    resume_command,
    resume_run,
    run_path,
    start_run,
    train,
)
from swarmctl.runs.lock import run_lock
from swarmctl.runs.naming import check_training_memory, parameter_count, run_name, training_state_bytes
from swarmctl.runs.read import (
    Run,
    RunProgress,
    evaluate_run,
    find_checkpoint,
    list_runs,
    load_model,
    open_run,
    read_run_config,
    resolve_run,
    run_progress,
    same_run,
)
from swarmctl.runs.shipped import (
    ShippedModel,
    shipped_checkpoint,
    shipped_for,
    shipped_models,
    shipped_results_dir,
)
from swarmctl.training.device import is_main_process
from swarmctl.training.loop import FitResult

__all__ = ["RESUMABLE", "FitResult", "Finished", "Progress", "Run", "RunDir", "RunProgress", "ShippedModel", "Trained",
           "check_training_memory", "configs_from_options", "evaluate_run", "find_checkpoint",
           "finish_runs", "is_main_process", "list_runs", "load_model", "open_run", "parameter_count",
           "read_run_config", "resolve_run", "resume_command", "resume_run", "run_lock", "run_name", "run_path",
           "run_progress", "same_run", "shipped_checkpoint", "shipped_for", "shipped_models", "shipped_results_dir",
           "start_run", "train", "training_state_bytes"]

"""A run's lifecycle: create it, train it, resume it, open it for reading, list them; shipped models.
A run is a folder ``runs/NAME`` whose files :class:`swarmctl.rundir.RunDir` names.
"""

from swarmctl.runs.lifecycle import (
    Finished,
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
from swarmctl.runs.shipped import shipped_checkpoint, shipped_for, shipped_models, shipped_results_dir
from swarmctl.training.loop import FitResult

__all__ = ["FitResult", "Finished", "Run", "check_training_memory", "configs_from_options", "evaluate_run",
           "find_checkpoint", "finish_runs", "list_runs", "load_model", "open_run", "parameter_count",
           "read_run_config", "resolve_run", "resume_command", "resume_run", "run_lock", "run_name", "run_path",
           "run_progress", "same_run", "shipped_checkpoint", "shipped_for", "shipped_models", "shipped_results_dir",
           "start_run", "train", "training_state_bytes"]

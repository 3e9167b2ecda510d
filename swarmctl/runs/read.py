"""Reading runs: a run's config and progress, finding its checkpoint, and opening it (or a shipped model)
for a study. Every command that reads a run goes through :func:`open_run`."""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from swarmctl.config import RESUMABLE, ModelConfig, current_sections
from swarmctl.devices import resolve_device
from swarmctl.errors import CheckpointError, ConfigError, DataError, ResourceError, SwarmctlError, SwarmctlWarning
from swarmctl.files import check_regular_file, read_json, shipped_folder
from swarmctl.models import count_parameters, create_model, paper_code
from swarmctl.rundir import BEST, CONFIG, LAST, RunDir
from swarmctl.runs.shipped import shipped_for, shipped_results_dir
from swarmctl.tasks import DataProgress, Task, get_task, require_study
from swarmctl.training.checkpoint import Checkpoint, TrainState, load_checkpoint
from swarmctl.training.device import full_precision, tf32_scope, tf32_trains


def read_run_config(run_dir: Path) -> dict[str, Any]:
    """The run's config; CheckpointError when it is damaged."""
    path = RunDir(run_dir).config
    try:
        return current_sections(read_json(path, "a swarmctl run config"))  # every field known and in range
    except (TypeError, KeyError, AttributeError, ConfigError, DataError, ResourceError):
        raise CheckpointError(f"{path} is damaged (not a swarmctl run config); the run cannot be used") from None


def same_run(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two run configs describe the same run: model, data and every train option a resume cannot change."""
    def fixed(c: dict[str, Any]) -> Any:
        with contextlib.suppress(SwarmctlError, KeyError, TypeError, AttributeError):
            c = current_sections(c)
        train = {k: v for k, v in c.get("train", {}).items() if k not in RESUMABLE}
        return c.get("model"), c.get("data"), train
    return fixed(a) == fixed(b)


def check_belongs(checkpoint: Path, ckpt_config: dict[str, Any], run: RunDir) -> None:
    """Refuse a checkpoint in ``run`` whose config is not the run's own (copied from another run, or left
    by an earlier run of the same name)."""
    if not same_run(ckpt_config, read_run_config(run.path)):
        _check_fields_present(checkpoint, ckpt_config, run)
        raise CheckpointError(f"{checkpoint} does not belong to run {run.path} (its config differs from "
                              f"{run.config.name}); remove it or copy the run's own checkpoint back")


def _check_fields_present(checkpoint: Path, ckpt_config: dict[str, Any], run: RunDir) -> None:
    """Refuse a run whose ``config.json`` lacks a field its checkpoint records, naming the value to add."""
    raw = read_json(run.config, "a swarmctl run config")
    missing = [(section, field, value) for section in ("model", "train", "data")
               for field, value in (ckpt_config.get(section) or {}).items()
               if isinstance(raw.get(section), dict) and field not in raw[section]]
    if missing:
        section, field, value = missing[0]
        more = f" (and {len(missing) - 1} more field(s))" if len(missing) > 1 else ""
        raise CheckpointError(f"{run.config} lacks the field {section}.{field}{more} (an older layout?); add "
                              f"\"{field}\": {json.dumps(value)} to its \"{section}\" section, as {checkpoint.name} "
                              "records it")


@dataclass(frozen=True)
class RunProgress:
    """Where a run folder stands: ``new`` (no config), ``empty`` (no checkpoint: it starts again from
    scratch), ``stopped`` (resume it) or ``finished``; with its config and last training state."""

    status: str
    config: dict[str, Any] | None = None
    state: TrainState | None = None


def run_progress(run_dir: Path) -> RunProgress:
    """:class:`RunProgress` of ``run_dir``; CheckpointError when its config or last checkpoint is damaged."""
    run = RunDir(run_dir)
    if not run.has_run():
        return RunProgress("new")
    if run.is_dead():  # its config is not read: a fresh start writes it again
        return RunProgress("empty")
    config = read_run_config(run.path)
    state = load_checkpoint(run.last).state
    return RunProgress("finished" if state.finished else "stopped", config, state)


def resolve_run(run: str | Path, runs_dir: Path, *, shipped: bool = False) -> Path:
    """A run given as a folder path or as a name inside ``runs_dir``; a file in its place is refused, naming
    what to give instead (with ``shipped``: leaving `run` out for the shipped model too)."""
    candidates = (RunDir(Path(run)), RunDir(Path(runs_dir) / str(run)))
    for candidate in candidates:
        if candidate.has_run():
            return candidate.path
    if Path(run).is_file():
        folder = RunDir(Path(run).parent)
        instead = (f"give its run folder {folder.path}" if folder.has_run() else
                   f"give a run name or a run folder (the folder holding {CONFIG})")
        raise CheckpointError(f"{run} is a file; this command takes a run, not a checkpoint file: {instead}"
                              + (", or leave out `run` for the shipped model" if shipped else ""))
    raise CheckpointError(f"no run {str(run)!r} (looked for {candidates[0].config} and {candidates[1].path}); "
                          f"list runs with `ls {runs_dir}`")


def list_runs(runs_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every run folder in ``runs_dir`` with its config; a damaged one is skipped with a warning."""
    out = []
    for run in RunDir.all_in(runs_dir):
        try:
            out.append((run.path, read_run_config(run.path)))
        except CheckpointError as exc:
            warnings.warn(f"skipped: {exc}", SwarmctlWarning, stacklevel=2)
    return out


def find_checkpoint(target: str | Path, runs_dir: Path) -> Path:
    """A checkpoint file, a run folder (its best checkpoint, else its last) or a run name in ``runs_dir``."""
    path = Path(target)
    if path.is_file():
        return path
    run = RunDir(resolve_run(target, runs_dir))
    for checkpoint in run.checkpoints():
        check_regular_file(checkpoint)  # a FIFO or folder in its place is an error, not a missing file
        if checkpoint.is_file():
            check_belongs(checkpoint, load_checkpoint(checkpoint).config, run)
            return checkpoint
    names = " or ".join(p.name for p in run.checkpoints())
    raise CheckpointError(f"run {run.path} has no checkpoint yet (no {names})")


def load_model(checkpoint: Path, device: torch.device | str = "cpu") -> tuple[nn.Module, Checkpoint]:
    """The model a checkpoint's config builds, its weights loaded, in eval mode."""
    ckpt = load_checkpoint(checkpoint, map_location=device)
    model = create_model(ckpt.model_config)
    model.load_state_dict(ckpt.model)
    return model.to(device).eval(), ckpt


@dataclass(frozen=True)
class Run:
    """A trained run opened for reading: its model (weights loaded, eval mode) and what it was trained on.
    ``dir`` is where results computed from it go (``runs/pretrained-NAME`` for a shipped model)."""

    dir: Path
    checkpoint: Path
    model: nn.Module
    ckpt: Checkpoint
    model_cfg: ModelConfig
    device: torch.device
    shipped: bool = False

    @property
    def config(self) -> dict[str, Any]:
        return self.ckpt.config

    @property
    def task(self) -> Task:
        return get_task(self.ckpt.task)

    @property
    def label(self) -> str:
        """e.g. ``swarm (192-10-1)``."""
        return f"{self.model_cfg.name} ({paper_code(self.model_cfg)})"

    def data_path(self, data: Path | None = None) -> Path:
        return Path(data or self.config["data"]["path"])


def open_run(target: str | Path | None, runs_dir: Path, device: str = "auto", *, study: str = "eval",
             dataset: str | None = None, data: Path | None = None, progress: DataProgress | None = None,
             needs_data: bool = True, announce: Callable[[str], None] | None = None) -> Run:
    """Open a run (:func:`find_checkpoint`) on ``device`` for ``study``, which must be able to use its task.
    ``target`` None opens the shipped model for ``study`` (and ``dataset``; ``announce`` is told), its default
    dataset generated when missing unless the caller names its own ``data`` or needs none (``needs_data``)."""
    dev = resolve_device(device)
    checkpoint = shipped_for(study, dataset) if target is None else find_checkpoint(target, runs_dir)
    model, ckpt = load_model(checkpoint, dev)
    require_study(get_task(ckpt.task), study, str(checkpoint))
    shipped = checkpoint.resolve().parent == shipped_folder().resolve()
    folder = shipped_results_dir(checkpoint, runs_dir) if shipped else checkpoint.parent
    run = Run(folder, checkpoint, model, ckpt, ckpt.model_config, dev, shipped)
    if shipped and needs_data and data is None:
        run.task.ensure_data(ckpt.data_config, progress)
    if shipped and announce is not None:
        announce(f"using the shipped model {checkpoint}")
    return run


def scored_position(checkpoint: Path, state: TrainState) -> str:
    """Which checkpoint is scored, where in training it stands and why that one, e.g. "no best.pt yet:
    scoring last.pt, epoch 0 batch 18 (no finished epoch)"; never an epoch -1."""
    if checkpoint.name == BEST:
        return f"{BEST}, epoch {state.best_epoch}"
    if checkpoint.name != LAST:
        return f"{checkpoint.name}, epoch {state.epoch - 1}"
    where = (f"epoch {state.epoch} batch {state.cursor}" if state.cursor or not state.epoch
             else f"end of epoch {state.epoch - 1}")
    why = " (no finished epoch)" if state.best_epoch < 0 else ""
    if not RunDir(checkpoint.parent).best.exists():
        return f"no {BEST} yet: scoring {LAST}, {where}{why}"
    return f"{LAST}, {where}{why}"


TF32_SHOWN = 1e-4  # a score with TF32 products is recorded beside the full-precision one when they differ by more


def evaluate_run(run: Run, data: Path | None = None, split: str | None = None,
                 progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Score an opened run with its task's metric on ``split`` (default: the task's), in full precision; JSON
    types only. Where training on the run's device uses TF32 (CUDA), the numbers scored with it that differ by
    more than ``TF32_SHOWN`` are recorded under ``tf32``."""
    state, task = run.ckpt.state, run.task
    split = split or task.default_split
    with full_precision():
        metrics = task.score(run.model, run.ckpt, data, split, run.device, progress=progress)
    if tf32_trains(run.device):
        with full_precision(), tf32_scope(run.device):  # TF32 as training uses it, no autocast
            fast = task.score(run.model, run.ckpt, data, split, run.device, progress=progress)
        differ = {key: value for key, value in fast.items() if _number(value) and _number(metrics.get(key))
                  and abs(value - metrics[key]) > TF32_SHOWN}
        if differ:
            metrics["tf32"] = differ
    return {
        "model": run.model_cfg.name,
        "task": task.name,
        "code": paper_code(run.model_cfg),
        "parameters": count_parameters(run.model),
        "checkpoint": str(run.checkpoint),
        "epoch": epoch if (epoch := state.best_epoch if run.checkpoint.name == BEST else state.epoch - 1) >= 0
        else None,  # None: no finished epoch (an interrupted first epoch's last.pt)
        "scored": scored_position(run.checkpoint, state),
        "net_minutes": state.net_seconds / 60,
        **metrics,
    }


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)

"""A run's training: configs from options, start and resume (one skeleton), and what follows training
(the curves of finished runs, how to continue an interrupted one). :func:`train` is the whole of
`swarmctl train`."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from swarmctl.config import RESUMABLE, DataConfig, ModelConfig, TrainConfig, from_dict, to_dict
from swarmctl.devices import memory_limit, resolve_device
from swarmctl.errors import (
    CheckpointError,
    ConfigError,
    DataError,
    ResourceError,
    SwarmctlError,
    SwarmctlWarning,
    describe_os_error,
    either,
    shell_command,
)
from swarmctl.files import atomic_write_text, check_output_folder, check_regular_file
from swarmctl.models import check_fields, complete_config, count_parameters, create_model, paper_code
from swarmctl.rundir import RunDir
from swarmctl.runs.lock import writing
from swarmctl.runs.naming import LOWER_SIZES, check_training_memory, parameter_count, run_name
from swarmctl.runs.read import check_belongs, read_run_config, resolve_run
from swarmctl.signals import StopSignals
from swarmctl.tasks import DataProgress, Task, task_of
from swarmctl.training.checkpoint import RunWriter, load_checkpoint
from swarmctl.training.device import DistContext, barrier, init_distributed, is_main_process, seed_everything
from swarmctl.training.loop import FitResult, ProgressHook, TrainingData, any_rank, fit
from swarmctl.training.modes import Choice, resolve_step, resumed_step


class Progress(ProgressHook, DataProgress, Protocol):
    """What a caller may pass to show progress: epochs and batches, and generation of missing data."""


MAX_NAME_BYTES = 255  # the longest file name Linux, macOS and Windows file systems take


def configs_from_options(model: str, model_options: dict[str, Any], train_options: dict[str, Any],
                         data: Path | None = None, dataset: str | None = None,
                         data_dir: Path | None = None) -> tuple[ModelConfig, TrainConfig, DataConfig]:
    """The three configs of a new run from the train command's options (None: the default)."""
    task = task_of(model)
    given = {k: v for k, v in model_options.items() if v is not None}
    check_fields(model, set(given))
    data_cfg = task.data_config(data, dataset, data_dir)
    model_cfg = ModelConfig(name=model, dataset=data_cfg.dataset, **given)
    return model_cfg, task.train_config(**train_options), data_cfg


def run_path(name: str, runs_dir: Path) -> Path:
    """``runs_dir/name`` for a run name that stays inside ``runs_dir`` (sub-folders allowed)."""
    parts = name.replace("\\", "/").split("/")
    if not name.strip() or name.startswith("/") or any(p in ("", ".", "..") for p in parts) \
            or any(not (c.isprintable() or "\udc80" <= c <= "\udcff") for c in name):  # a byte the locale
        # could not decode arrives as a lone surrogate (PEP 383): it is part of the name, not a control character
        raise ConfigError(f"`name` {name!r} must stay inside `runs_dir`: plain names such as exp1 or "
                          "group/exp1, without '..', '.', a leading '/' or control characters")
    if any(len(os.fsencode(p)) > MAX_NAME_BYTES for p in parts):
        raise ConfigError(f"`name` {name[:40]!r}... has a part longer than {MAX_NAME_BYTES} bytes, more than a "
                          "file system allows; choose a shorter name")
    return Path(runs_dir) / name


def resume_command(model: str, run_dir: Path, runs_dir: Path, default_runs_dir: Path = Path("runs")) -> str:
    """The shell command that continues ``run_dir``, quoted."""
    try:
        target, where = str(Path(run_dir).relative_to(runs_dir)), Path(runs_dir)
    except ValueError:
        target, where = str(run_dir), Path(default_runs_dir)
    extra = {"runs_dir": where} if where != Path(default_runs_dir) else {}
    return shell_command("train", model, resume=target, **extra)


# ---- start and resume: one skeleton ---------------------------------------------------------------------

@dataclass(frozen=True)
class _Plan:
    """What a start or a resume has settled, under the run's lock, before it trains."""

    model: nn.Module
    prepared: TrainingData
    train_cfg: TrainConfig
    config: dict[str, Any]  # the run's config, as written
    task: Task
    device: torch.device
    step: Choice  # the step mode and why, for the run's first line
    resume: bool  # continue from the last checkpoint; False: train from scratch
    restarted: bool  # a folder that never saved a checkpoint is trained again from scratch (a warning)
    new: bool  # a start: a failure before the first checkpoint removes the run's files again


def _train_locked(run: RunDir, runs_dir: Path, plan: _Plan, ctx: DistContext, signals: StopSignals,
                  progress: Progress | None, announce: Callable[[str], None] | None) -> FitResult:
    """Under the lock: say what trains where, clear a run trained from scratch, write its config, train. A file
    that cannot be written (a full disk) ends training with one line naming it and how to continue."""
    if ctx.is_main:
        if announce is not None:
            announce(f"{'training' if plan.new else 'continuing'} {run.name}: {plan.config['model']['name']} "
                     f"({plan.config['run'].get('code', '?')}) on {_where(plan.device)}, {plan.step.mode.name} step "
                     f"({plan.step.reason})")
        if plan.restarted:
            warnings.warn(f"run {run.path} never saved a checkpoint (stopped in its first epoch): training it "
                          "again from scratch", SwarmctlWarning, stacklevel=3)
        if not plan.resume:
            _clear_for_restart(run)
        atomic_write_text(run.config, json.dumps(plan.config, indent=2) + "\n")
    try:
        return fit(plan.model, plan.prepared, plan.train_cfg, RunWriter(run.path, plan.config, plan.task.name),
                   device=plan.device, resume=plan.resume, ctx=ctx, progress=progress, signals=signals)
    except BaseException as exc:
        if isinstance(exc, OSError) and exc.filename is not None:  # not standard output, which the caller names
            kept = f"its {run.last.name} from before is kept" if run.last.is_file() else "no epoch was saved yet"
            raise CheckpointError(f"{describe_os_error(exc)}; training stopped ({kept}); continue with: "
                                  f"{resume_command(plan.config['model']['name'], run.path, runs_dir)}") from None
        if not isinstance(exc, CheckpointError) and plan.new and ctx.is_main and not run.last.exists():
            _clear_for_restart(run)  # out of memory in the first steps, say: a new run without a checkpoint goes
            run.config.unlink(missing_ok=True)
        raise


def _clear_for_restart(run: RunDir) -> None:
    for path in run.restartable():
        path.unlink(missing_ok=True)


def _checked(check: Callable[[], Any], ctx: DistContext, device: torch.device) -> Any:
    """``check()`` on every rank; when it raises on rank 0, every rank raises (rank 0 its own error)."""
    error, value = None, None
    try:
        value = check()
    except SwarmctlError as exc:
        error = exc
    if any_rank((error is not None,), ctx, device)[0]:
        raise error or CheckpointError("rank 0 could not open the run for writing; see its message")
    return value


def start_run(
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    data_cfg: DataConfig,
    runs_dir: Path,
    name: str | None = None,
    progress: Progress | None = None,
    announce: Callable[[str], None] | None = None,
) -> FitResult:
    """Start a new run ``runs_dir/name`` (default: :func:`run_name`) and train it, everything validated
    before the folder is created; ``announce`` is told where it trains and its step mode. Under torchrun,
    rank 0 makes missing default data first. A folder holding a run that never saved a checkpoint is started
    again from scratch."""
    ctx = init_distributed(train_cfg.device)
    model_cfg = complete_config(model_cfg)
    task = task_of(model_cfg.name)
    run = RunDir(run_path(run_name(model_cfg, train_cfg.seed) if name is None else name, runs_dir))
    check_output_folder(run.path)
    device = resolve_device(train_cfg.device, ctx.local_rank)
    train_cfg, step = resolve_step(train_cfg, device, task.name, task.proven_modes)
    check_training_memory(model_cfg, parameter_count(model_cfg, LOWER_SIZES), memory_limit(device), LOWER_SIZES)
    seed_everything(train_cfg.seed)
    model = create_model(model_cfg)  # validates the hyper-parameters
    if ctx.is_main:
        task.ensure_data(data_cfg, progress)
    barrier(ctx)  # the data exists before any rank opens it
    prepared = task.prepare(train_cfg, data_cfg)
    config = {
        "model": to_dict(model_cfg),
        "train": to_dict(train_cfg),
        "data": to_dict(dataclasses.replace(data_cfg, checksum=prepared.checksum)),
        "run": {"name": run.name, "task": task.name, "parameters": count_parameters(model),
                "code": paper_code(model_cfg), "device": str(device), "world_size": ctx.world_size,
                "hardware": [hardware(device, ctx.world_size)]},
    }

    def free() -> bool:
        """Whether the folder may take the run; True when it holds one that never saved a checkpoint."""
        for path in run.own_files():  # no link, FIFO or folder in place of a file the run writes
            check_regular_file(path, follow=False)
        if run.config.exists() and not run.is_dead():
            raise CheckpointError(f"run {run.path} exists; continue it with "
                                  f"{resume_command(model_cfg.name, run.path, runs_dir)} or pick another `name`")
        return run.config.exists()

    with StopSignals() as signals, writing(run, ctx):
        restarted = _checked(free, ctx, device)
        plan = _Plan(model, prepared, train_cfg, config, task, device, step, resume=False, restarted=bool(restarted),
                     new=True)
        return _train_locked(run, runs_dir, plan, ctx, signals, progress, announce)


def check_resumable(given: Sequence[str]) -> None:
    """The one rule of what a resume may change: a ConfigError naming each of the settings ``given`` (by
    parameter or config field) that is not one of :data:`RESUMABLE`, as the run keeps its own settings."""
    fixed = [name for name in dict.fromkeys(given) if name not in RESUMABLE]
    if fixed:
        raise ConfigError(f"{either((f'`{k}`' for k in fixed), 'and')} cannot change when resuming (the run keeps "
                          f"its own); drop {'it' if len(fixed) == 1 else 'them'}, or start a new run with `name`. "
                          f"Only {either((f'`{k}`' for k in RESUMABLE), 'and')} may change.")


def resume_run(
    run: str | Path,
    runs_dir: Path,
    model_name: str | None = None,
    progress: Progress | None = None,
    announce: Callable[[str], None] | None = None,
    **changes: Any,
) -> FitResult:
    """Continue a run from its last checkpoint with its saved config; ``changes`` are options of
    :data:`RESUMABLE` (None: keep the run's; ``minutes`` and ``max_epochs`` replace the totals). A run that
    never saved a checkpoint starts again from scratch with its config."""
    check_resumable(list(changes))
    changes = {k: v for k, v in changes.items() if v is not None}
    device = changes.get("device")
    ctx = init_distributed(device or "auto")
    folder = RunDir(resolve_run(run, runs_dir))
    check_output_folder(folder.path)
    dev = resolve_device(device or "auto", ctx.local_rank)
    with StopSignals() as signals, writing(folder, ctx):
        config, from_scratch = _checked(lambda: _resume_config(folder), ctx, dev)
        model_cfg = from_dict(ModelConfig, config["model"])
        if model_name is not None and model_name != model_cfg.name:
            raise CheckpointError(f"run {folder.name} trains model {model_cfg.name!r}, not {model_name!r}; "
                                  f"use {resume_command(model_cfg.name, folder.path, runs_dir)}")
        task = task_of(model_cfg.name)
        train_cfg = dataclasses.replace(from_dict(TrainConfig, config["train"]), **changes)
        dev = resolve_device(train_cfg.device, ctx.local_rank)  # the run's own device, unless `device` changes it
        seen = list(config.get("run", {}).get("hardware", []))  # every session's hardware, for the report
        config = {**config, "train": to_dict(train_cfg), "run": {
            **config.get("run", {}), "hardware": seen + [h for h in [hardware(dev, ctx.world_size)] if h not in seen]}}
        data_cfg = from_dict(DataConfig, config["data"])
        prepared = task.prepare(train_cfg, data_cfg)
        if prepared.checksum != data_cfg.checksum:
            raise DataError(f"{data_cfg.path} changed since run {folder.name} started (checksum differs); "
                            "resume with the original file")
        seed_everything(train_cfg.seed)
        model = create_model(model_cfg)
        step = resumed_step(train_cfg, dev.type)  # on every rank: refused here where the mode cannot run
        plan = _Plan(model, prepared, train_cfg, config, task, dev, step, resume=not from_scratch,
                     restarted=from_scratch, new=False)
        return _train_locked(folder, runs_dir, plan, ctx, signals, progress, announce)


def _where(device: torch.device) -> str:
    """The device for a run's first line; on the CPU with the threads it uses (swarmctl/threads.py)."""
    if device.type != "cpu":
        return str(device)
    n = torch.get_num_threads()
    return f"cpu, {n} thread{'s' * (n != 1)}"


def hardware(device: torch.device, world_size: int = 1) -> str:
    """What a run trains on, as the report names it: "cpu, 1 thread", or the card ("NVIDIA H200"; "4 x
    NVIDIA H200" for four processes under torchrun)."""
    if device.type != "cuda":
        return _where(device)
    name = torch.cuda.get_device_name(device)
    return name if world_size == 1 else f"{world_size} x {name}"


def _resume_config(run: RunDir) -> tuple[dict[str, Any], bool]:
    """The config a resume continues with, and whether it starts from scratch (no last checkpoint); a
    checkpoint copied in from another run is refused."""
    for path in run.own_files():  # no link, FIFO or folder in place of a file the run writes
        check_regular_file(path, follow=False)
    if run.is_dead():
        return read_run_config(run.path), True
    config = load_checkpoint(run.last).config
    check_belongs(run.last, config, run)
    if run.best.is_file():
        check_belongs(run.best, load_checkpoint(run.best).config, run)
    return config, False


# ---- after training -------------------------------------------------------------------------------------

DrawCurves = Callable[[Path], "Path | None"]  # run folder -> the curves it drew (None: no epoch logged yet)


@dataclass(frozen=True)
class Finished:
    """What :func:`finish_runs` did: the curves it drew, and the interrupted run with how to continue."""

    curves: tuple[Path, ...] = ()
    interrupted: FitResult | None = None
    message: str | None = None  # for an interrupted run: its saved checkpoint and how to continue


def finish_runs(results: Sequence[FitResult | None], continue_with: str, finished: Sequence[Path] = (),
                draw: DrawCurves | None = None) -> Finished:
    """What follows training: ``draw`` the curves of every run in ``results`` not interrupted (None: not
    trained now) and of the ``finished`` runs that lack them; say how to continue when the last result was
    interrupted. A figure that cannot be written is a ResourceError saying that the training is saved."""
    to_draw = [r.run_dir for r in results if r is not None and not r.interrupted]
    to_draw += [Path(d) for d in finished if not RunDir(d).curves.exists()]
    drawn = []
    for run_dir in to_draw if draw is not None else []:
        try:
            path = draw(run_dir)
        except (OSError, SwarmctlError) as exc:
            why = describe_os_error(exc) if isinstance(exc, OSError) else str(exc)
            raise ResourceError(f"{why}; the training finished and is saved in {run_dir}; draw its curves again "
                                f"with: {continue_with}") from None
        if path is not None:
            drawn.append(path)
    last = results[-1] if results else None
    if last is None or not last.interrupted:
        return Finished(tuple(drawn))
    message = (f"{last.stop_reason}: saved {RunDir(last.run_dir).last} {saved_position(last)}; "
               f"continue with: {continue_with}")
    return Finished(tuple(drawn), last, message)


def saved_position(result: FitResult) -> str:
    """Where an interrupted run's last checkpoint stands: its epoch and batch, and the net budget it used."""
    e, b, n = result.epochs, result.batch, result.epoch_batches
    if b == 0:
        where = f"at the start of epoch {e} ({e} epoch{'s' * (e != 1)} done)"
    elif b < n:
        where = f"at epoch {e}, batch {b} of {n}"
    else:
        where = f"at epoch {e}, after its {n} batches and before its validation"
    if math.isfinite(result.budget_seconds):
        where += f", net {result.net_seconds / 60:.1f} of {result.budget_seconds / 60:g} min used"
    return where


@dataclass(frozen=True)
class Trained:
    """What :func:`train` did: the trainer's result, the run, the command that continues it, and
    :func:`finish_runs`' work."""

    result: FitResult
    run: RunDir
    continue_with: str
    finished: Finished

    @property
    def interrupted(self) -> bool:
        return self.result.interrupted

    @property
    def files(self) -> tuple[Path, ...]:
        """The run's files that exist now."""
        return tuple(p for p in self.run.own_files() if p.is_file())


def train(model: str, model_options: dict[str, Any], train_options: dict[str, Any], runs_dir: Path, *,
          data: Path | None = None, dataset: str | None = None, data_dir: Path | None = None,
          name: str | None = None, resume: str | Path | None = None,
          display: Callable[[Task], AbstractContextManager[Progress]] | None = None,
          draw: DrawCurves | None = None, on_continue: Callable[[str], None] | None = None,
          announce: Callable[[str], None] | None = None, default_runs_dir: Path = Path("runs")) -> Trained | None:
    """`swarmctl train`: start a run of ``model`` from the options (:func:`configs_from_options`,
    :func:`start_run`), or continue run ``resume`` (:func:`resume_run`: a given option that is not one of
    :data:`RESUMABLE` is a ConfigError, :func:`check_resumable`), then :func:`finish_runs`. ``display(task)``
    makes the progress display (rank 0 only); ``on_continue`` is told the command that continues the run as
    soon as training returns (a caller stopped while the curves are drawn can print it). None on every rank
    but rank 0, which alone writes and reports."""
    if resume is not None:  # before anything loads: a setting the run cannot take is refused, never dropped
        named = {"data": data, "dataset": dataset, "data_dir": data_dir, "name": name}
        check_resumable([k for k, v in {**model_options, **train_options, **named}.items() if v is not None])
    main = is_main_process()
    task = task_of(model)
    show = display(task) if display is not None and main else contextlib.nullcontext()
    with show as progress:
        if resume is not None:
            changes = {k: v for k, v in train_options.items() if v is not None}
            result = resume_run(resume, runs_dir, model_name=model, progress=progress, announce=announce, **changes)
        else:
            configs = configs_from_options(model, model_options, train_options, data, dataset, data_dir)
            result = start_run(*configs, runs_dir, name, progress=progress, announce=announce)
    if not main:
        return None
    continue_with = resume_command(model, result.run_dir, runs_dir, default_runs_dir)
    if on_continue is not None:
        on_continue(continue_with)
    return Trained(result, RunDir(result.run_dir), continue_with, finish_runs([result], continue_with, draw=draw))

"""A run's lifecycle: create it, train it, resume it, open it for reading, list them.

A run is a folder ``runs/NAME`` holding config.json, metrics.jsonl, best.pt and last.pt (and curves.png,
drawn from metrics.jsonl by :func:`swarmctl.plots.curves.save_run_curves`).
Every command that reads a run goes through :func:`open_run`.

Shipped models: checkpoints trained on a GPU, weights only (float32) with their config and training
state, each with a JSON record, in the package's ``pretrained/`` folder (package data, so every install
has them; SWARMCTL_PRETRAINED names another folder). They are found by their records. :func:`open_run`
opens one when no run is named, so eval, plot-entropy and sample work on a fresh install; what is
computed from it goes to ``runs/pretrained-NAME/``, never into the package.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import shlex
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from swarmctl.config import DataConfig, ModelConfig, TrainConfig, check_memory, current_sections, from_dict, to_dict
from swarmctl.devices import memory_limit, resolve_device
from swarmctl.errors import CheckpointError, ConfigError, DataError, ResourceError, SwarmctlError, SwarmctlWarning
from swarmctl.files import (
    LOCK_FILE,
    atomic_write_text,
    check_output_folder,
    check_plain_file,
    check_regular_file,
    describe_os_error,
    holding,
    open_lock_file,
    read_bytes,
    remove_orphan_temps,
    shipped_folder,
)
from swarmctl.models import check_fields, complete_config, count_parameters, create_model, paper_code
from swarmctl.tasks import DataProgress, Task, get_task, require_study, task_of, tasks_for
from swarmctl.training.checkpoint import Checkpoint, RunWriter, load_checkpoint, save_checkpoint
from swarmctl.training.device import (
    DistContext,
    barrier,
    init_distributed,
    is_main_process,
    seed_everything,
)
from swarmctl.training.loop import FitResult, ProgressHook, StopSignals, any_rank, fit

__all__ = ["RESUMABLE", "FitResult", "Progress", "Run", "RunProgress", "ShippedModel", "configs_from_options",
           "evaluate_run", "export_weights", "find_checkpoint", "is_main_process", "list_runs", "load_model",
           "open_run", "read_run_config", "resolve_run", "resume_command", "resume_run", "run_lock", "run_path",
           "run_progress", "shipped_checkpoint", "shipped_for", "shipped_models", "shipped_results_dir", "start_run"]


class Progress(ProgressHook, DataProgress, Protocol):
    """What a caller may pass to show progress: epochs and batches, and generation of missing data."""


# ---- create and train ----------------------------------------------------------------------------------

def _default_run_name(model_cfg: ModelConfig, seed: int) -> str:
    """e.g. ``swarm-192-10-1-s0``."""
    return f"{model_cfg.name}-{paper_code(model_cfg)}-s{seed}"


def configs_from_options(model: str, model_options: dict[str, Any], train_options: dict[str, Any],
                         data: Path | None = None, dataset: str | None = None,
                         data_dir: Path | None = None) -> tuple[ModelConfig, TrainConfig, DataConfig]:
    """The three configs of a new run from the train command's options (None: the model's or the task's
    default). ``model_options`` holds ModelConfig fields (``models.HYPERPARAMETERS``)."""
    task = task_of(model)
    given = {k: v for k, v in model_options.items() if v is not None}
    check_fields(model, set(given))
    data_cfg = task.data_config(data, dataset, data_dir)
    model_cfg = ModelConfig(name=model, dataset=data_cfg.dataset, **given)
    return model_cfg, task.train_config(**train_options), data_cfg


LOCK = LOCK_FILE  # runs/NAME/.lock: flock-ed by the process writing the run, holds its PID
RESTARTABLE = ("metrics.jsonl", "best.pt", "last.pt", "curves.png")  # what a restart from scratch clears


MAX_NAME_BYTES = 255  # the longest file name Linux, macOS and Windows file systems take


def run_path(name: str, runs_dir: Path) -> Path:
    """``runs_dir/name`` for a run name that stays inside ``runs_dir`` (sub-folders allowed)."""
    parts = name.replace("\\", "/").split("/")
    if not name.strip() or name.startswith("/") or any(p in ("", ".", "..") for p in parts) \
            or any(not (c.isprintable() or "\udc80" <= c <= "\udcff") for c in name):  # a byte the locale
        # could not decode arrives as a lone surrogate (PEP 383): it is part of the name, not a control character
        raise ConfigError(f"run name {name!r} must stay inside --runs-dir: plain names such as exp1 or "
                          "group/exp1, without '..', '.', a leading '/' or control characters")
    if any(len(os.fsencode(p)) > MAX_NAME_BYTES for p in parts):
        raise ConfigError(f"run name {name[:40]!r}... has a part longer than {MAX_NAME_BYTES} bytes, more than a "
                          "file system allows; choose a shorter name")
    return Path(runs_dir) / name


def _check_training_memory(model_cfg: ModelConfig, device: torch.device) -> None:
    """Refuse a model whose weights, gradients and Adam state alone would not fit the device's memory,
    before anything is allocated (the model is built on the meta device to count its parameters)."""
    try:
        with torch.device("meta"):
            n = count_parameters(create_model(model_cfg))
    except RuntimeError:  # a size whose byte count overflows even on the meta device
        raise ResourceError(f"model {model_cfg.name} ({paper_code(model_cfg)}) is too large to build on any machine; "
                          "lower --hidden, --layers or --inducing") from None
    check_memory(16 * n, memory_limit(device), f"model {model_cfg.name} ({paper_code(model_cfg)}) with "
                 f"{n:,} parameters (weights, gradients and Adam state)", "lower --hidden, --layers or --inducing")


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir``'s exclusive lock (``fcntl.flock`` on ``run_dir/.lock``; the OS releases it when
    the process dies, however it dies) and remove temporary files that killed writers left behind.
    A second writer gets a CheckpointError naming the holder's PID. When the block fails, the lock file and
    the folders this call created are removed again (a failed command leaves nothing new behind)."""
    made = [p for p in (run_dir, *run_dir.parents) if not p.exists()]  # innermost first
    run_dir.mkdir(parents=True, exist_ok=True)
    lock_made = not (run_dir / LOCK).exists()
    fh = open_lock_file(run_dir / LOCK)  # never through a link, never a FIFO or folder
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read(64).decode(errors="replace").strip() or "another process"
            raise CheckpointError(f"run {run_dir} is being written by process {holder}; wait for it to end "
                                  f"or stop it (kill {holder}) first") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n".encode())
        fh.flush()
        remove_orphan_temps(run_dir, held=True)
        try:
            with holding(run_dir):
                yield
        except BaseException:
            _remove_made(run_dir / LOCK if lock_made else None, made)
            raise
    finally:
        fh.close()  # releases the lock; the file stays, so every writer locks the same file


def _remove_made(lock: Path | None, folders: list[Path]) -> None:
    """Remove a lock file and the (then empty) folders a failed command created, innermost first."""
    if lock is not None:
        lock.unlink(missing_ok=True)
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty (something else lives there now) or already gone
            break


@contextmanager
def _writing(run_dir: Path, ctx: DistContext) -> Iterator[None]:
    """Rank 0 holds the run's lock (the other ranks write nothing)."""
    with run_lock(run_dir) if ctx.is_main else contextlib.nullcontext():
        yield


def _agree(error: SwarmctlError | None, ctx: DistContext, device: torch.device) -> None:
    """Raise ``error`` on rank 0 and an error on every other rank, when rank 0 has one."""
    if any_rank((error is not None,), ctx, device)[0]:
        raise error or CheckpointError("rank 0 could not open the run for writing; see its message")


def _is_dead(run_dir: Path) -> bool:
    """A run folder with a config but no checkpoint: killed or failed in its first epoch."""
    return (run_dir / "config.json").is_file() and not (run_dir / "last.pt").is_file()


def _check_run_files(run_dir: Path) -> None:
    """Refuse a run whose own files are links, folders, FIFOs or other special files (planted, or left by
    another tool), before anything in it is read, removed or written."""
    for name in ("config.json", *RESTARTABLE):
        check_plain_file(run_dir / name)


def _clear_for_restart(run_dir: Path) -> None:
    for name in RESTARTABLE:
        (run_dir / name).unlink(missing_ok=True)


def _write_config(run_dir: Path, config: dict[str, Any]) -> None:
    atomic_write_text(run_dir / "config.json", json.dumps(config, indent=2) + "\n")


def start_run(
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    data_cfg: DataConfig,
    runs_dir: Path,
    name: str | None = None,
    progress: Progress | None = None,
) -> FitResult:
    """Start a new run ``runs_dir/name`` (default name from model, paper code and seed) and train it.

    Everything is validated before the run folder is created, so a bad option leaves nothing behind.
    Under torchrun, rank 0 makes missing default data before any rank reads it. The run's lock is held
    and SIGINT/SIGTERM only stop training cleanly from before the first file is written; a folder holding
    a run that never saved a checkpoint (killed in its first epoch) is started again from scratch.
    """
    ctx = init_distributed(train_cfg.device)
    model_cfg = complete_config(model_cfg)
    task = task_of(model_cfg.name)
    run_dir = run_path(_default_run_name(model_cfg, train_cfg.seed) if name is None else name, runs_dir)
    check_output_folder(run_dir)
    device = resolve_device(train_cfg.device, ctx.local_rank)
    _check_training_memory(model_cfg, device)
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
        "run": {"name": run_dir.name, "task": task.name, "parameters": count_parameters(model),
                "code": paper_code(model_cfg), "device": str(device), "world_size": ctx.world_size},
    }
    with StopSignals() as signals, _writing(run_dir, ctx):
        error = None
        try:
            _check_run_files(run_dir)
        except SwarmctlError as exc:
            error = exc
        if error is None and (run_dir / "config.json").exists() and not _is_dead(run_dir):
            error = CheckpointError(f"run {run_dir} exists; continue it with "
                                    f"{resume_command(model_cfg.name, run_dir, runs_dir)} or pick another --name")
        _agree(error, ctx, device)
        if ctx.is_main:
            if (run_dir / "config.json").exists():
                warnings.warn(f"run {run_dir} never saved a checkpoint (stopped in its first epoch): starting it "
                              "again from scratch", SwarmctlWarning, stacklevel=2)
            _clear_for_restart(run_dir)
            _write_config(run_dir, config)
        try:
            with _write_failures_keep_the_run(run_dir, model_cfg.name, runs_dir):
                return fit(model, prepared, train_cfg, RunWriter(run_dir, config, task.name), device=device, ctx=ctx,
                           progress=progress, signals=signals)
        except CheckpointError:  # a file that could not be written: the run stays, with how to continue
            raise
        except BaseException:  # out of memory in the first steps, say: a run without a checkpoint goes
            if ctx.is_main and not (run_dir / "last.pt").exists():
                _clear_for_restart(run_dir)
                (run_dir / "config.json").unlink(missing_ok=True)
            raise


RESUMABLE = ("minutes", "max_epochs", "device")  # the train options a resume may change


@contextmanager
def _write_failures_keep_the_run(run_dir: Path, model: str, runs_dir: Path) -> Iterator[None]:
    """A checkpoint or metrics line that cannot be written (a full disk, a file-size limit) ends training
    with one line: the file and the cause, and how to continue. The atomic writes keep the previous
    last.pt, so the run loses at most the epoch in progress."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:  # not a file of the run (standard output, say): the caller names it
            raise
        kept = "its last.pt from before is kept" if (run_dir / "last.pt").is_file() else "no epoch was saved yet"
        raise CheckpointError(f"{describe_os_error(exc)}; training stopped ({kept}); continue with: "
                              f"{resume_command(model, run_dir, runs_dir)}") from None


def resume_command(model: str, run_dir: Path, runs_dir: Path, default_runs_dir: Path = Path("runs")) -> str:
    """The shell command that continues ``run_dir``, quoted so that it works as printed."""
    try:
        target, where = str(Path(run_dir).relative_to(runs_dir)), Path(runs_dir)
    except ValueError:
        target, where = str(run_dir), Path(default_runs_dir)
    extra = f" --runs-dir {shlex.quote(str(where))}" if where != Path(default_runs_dir) else ""
    return f"swarmctl train {shlex.quote(model)} --resume {shlex.quote(target)}{extra}"


def resume_run(
    run: str | Path,
    runs_dir: Path,
    model_name: str | None = None,
    minutes: float | None = None,
    max_epochs: int | None = None,
    device: str | None = None,
    progress: Progress | None = None,
) -> FitResult:
    """Continue a run from its ``last.pt``; its saved config is used, budget included (``minutes`` and
    ``max_epochs`` replace the totals when given, e.g. to extend a finished run). A run that never saved
    a checkpoint (killed in its first epoch) starts again from scratch with its config.json."""
    ctx = init_distributed(device or "auto")
    run_dir = resolve_run(run, runs_dir)
    check_output_folder(run_dir)
    with StopSignals() as signals:
        dev = resolve_device(device or "auto", ctx.local_rank)
        with _writing(run_dir, ctx):
            error = None
            try:
                config, from_scratch = _resume_config(run_dir)
            except SwarmctlError as exc:
                error, config, from_scratch = exc, {}, False
            _agree(error, ctx, dev)
            model_cfg = from_dict(ModelConfig, config["model"])
            if model_name is not None and model_name != model_cfg.name:
                raise CheckpointError(f"run {run_dir.name} trains model {model_cfg.name!r}, not {model_name!r}; "
                                      f"use {resume_command(model_cfg.name, run_dir, runs_dir)}")
            task = task_of(model_cfg.name)
            changes = {k: v for k, v in zip(RESUMABLE, (minutes, max_epochs, device), strict=True) if v is not None}
            train_cfg = dataclasses.replace(from_dict(TrainConfig, config["train"]), **changes)
            config = {**config, "train": to_dict(train_cfg)}
            data_cfg = from_dict(DataConfig, config["data"])
            dev = resolve_device(train_cfg.device, ctx.local_rank)
            prepared = task.prepare(train_cfg, data_cfg)
            if prepared.checksum != data_cfg.checksum:
                raise DataError(f"{data_cfg.path} changed since run {run_dir.name} started (checksum differs); "
                                "resume with the original file")
            seed_everything(train_cfg.seed)
            model = create_model(model_cfg)
            if ctx.is_main:
                if from_scratch:
                    warnings.warn(f"run {run_dir} never saved a checkpoint (stopped in its first epoch): "
                                  "training it from scratch", SwarmctlWarning, stacklevel=2)
                    _clear_for_restart(run_dir)
                _write_config(run_dir, config)
            with _write_failures_keep_the_run(run_dir, model_cfg.name, runs_dir):
                return fit(model, prepared, train_cfg, RunWriter(run_dir, config, task.name), device=dev,
                           resume=not from_scratch, ctx=ctx, progress=progress, signals=signals)


def _same_run(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two run configs describe the same run: model, data and every train option a resume cannot change."""
    def fixed(c: dict[str, Any]) -> Any:
        train = {k: v for k, v in c.get("train", {}).items() if k not in RESUMABLE}
        return c.get("model"), c.get("data"), train
    return fixed(a) == fixed(b)


def read_run_config(run_dir: Path) -> dict[str, Any]:
    """``run_dir/config.json``; CheckpointError when it is damaged."""
    path = Path(run_dir) / "config.json"
    try:
        return current_sections(json.loads(read_bytes(path)))  # every field known and in range
    except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError, ConfigError, ResourceError):
        raise CheckpointError(f"{path} is damaged (not a swarmctl run config); the run cannot be used") from None


def _resume_config(run_dir: Path) -> tuple[dict[str, Any], bool]:
    """The config a resume continues with, and whether it starts from scratch (no last.pt). last.pt and
    best.pt must belong to the run: a checkpoint copied in from another run is refused."""
    _check_run_files(run_dir)
    if _is_dead(run_dir):
        return read_run_config(run_dir), True
    config = load_checkpoint(run_dir / "last.pt").config
    _check_belongs(run_dir / "last.pt", config, run_dir)
    if (run_dir / "best.pt").is_file():
        _check_belongs(run_dir / "best.pt", load_checkpoint(run_dir / "best.pt").config, run_dir)
    return config, False


def _check_belongs(checkpoint: Path, ckpt_config: dict[str, Any], run_dir: Path) -> None:
    """Refuse a checkpoint in ``run_dir`` whose config is not the run's config.json (copied from another
    run, or left by an earlier run of the same name)."""
    if not _same_run(ckpt_config, read_run_config(run_dir)):
        raise CheckpointError(f"{checkpoint} does not belong to run {run_dir} (its config differs from "
                              "config.json); remove it or copy the run's own checkpoint back")


@dataclass(frozen=True)
class RunProgress:
    """Where a run folder stands: ``new`` (no config.json), ``empty`` (a config.json and no checkpoint:
    stopped in its first epoch, so it starts again from scratch), ``stopped`` (an unfinished last.pt:
    resume it) or ``finished``; with its config.json and last.pt's training state (stopped and finished)."""

    status: str
    config: dict[str, Any] | None = None
    state: dict[str, Any] | None = None


def run_progress(run_dir: Path) -> RunProgress:
    """:class:`RunProgress` of ``run_dir``; CheckpointError when its config.json or last.pt is damaged."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.json").is_file():
        return RunProgress("new")
    if _is_dead(run_dir):  # its config.json is not read: a fresh start writes it again
        return RunProgress("empty")
    config = read_run_config(run_dir)
    state = load_checkpoint(run_dir / "last.pt").state
    return RunProgress("finished" if state.get("finished") else "stopped", config, state)


# ---- open and read -------------------------------------------------------------------------------------

def resolve_run(run: str | Path, runs_dir: Path) -> Path:
    """A run given as a folder path or as a name inside ``runs_dir``."""
    for candidate in (Path(run), Path(runs_dir) / str(run)):
        if (candidate / "config.json").is_file():
            return candidate
    raise CheckpointError(f"no run {str(run)!r} (looked for {run}/config.json and {Path(runs_dir) / str(run)}); "
                          f"list runs with `ls {runs_dir}`")


def list_runs(runs_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every run folder in ``runs_dir`` with its config.json, by name; a run whose config.json is damaged
    is skipped with a warning naming it."""
    out = []
    for path in sorted(Path(runs_dir).glob("*/config.json")):
        try:
            out.append((path.parent, read_run_config(path.parent)))
        except CheckpointError as exc:
            warnings.warn(f"skipped: {exc}", SwarmctlWarning, stacklevel=2)
    return out


def find_checkpoint(target: str | Path, runs_dir: Path) -> Path:
    """A checkpoint file, a run folder (its best.pt) or a run name in ``runs_dir``."""
    path = Path(target)
    if path.is_file():
        return path
    run_dir = resolve_run(target, runs_dir)
    for name in ("best.pt", "last.pt"):
        check_regular_file(run_dir / name)  # a FIFO or folder in its place is an error, not a missing file
        if (run_dir / name).is_file():
            _check_belongs(run_dir / name, load_checkpoint(run_dir / name).config, run_dir)
            return run_dir / name
    raise CheckpointError(f"run {run_dir} has no checkpoint yet (no best.pt or last.pt)")


def load_model(checkpoint: Path, device: torch.device | str = "cpu") -> tuple[nn.Module, Checkpoint]:
    """Rebuild a model from a checkpoint alone (its config), weights loaded, in eval mode. load_checkpoint
    has checked that the weights fit the model and that the model solves the checkpoint's task."""
    ckpt = load_checkpoint(checkpoint, map_location=device)
    model = create_model(ckpt.model_config)
    model.load_state_dict(ckpt.model)
    return model.to(device).eval(), ckpt


# ---- shipped models ------------------------------------------------------------------------------------

def _pretrained_dir() -> Path:
    """The folder of shipped models: SWARMCTL_PRETRAINED, else the package's own ``pretrained/`` (package
    data: present in every install, editable or not). No command writes there but :func:`export_weights`."""
    return shipped_folder()


def _is_shipped(checkpoint: Path) -> bool:
    return Path(checkpoint).resolve().parent == _pretrained_dir().resolve()


@dataclass(frozen=True)
class ShippedModel:
    """A shipped model's record (the JSON beside its checkpoint): what is looked up without reading weights."""

    checkpoint: Path
    task: str
    dataset: str | None  # image models: the dataset it models
    record: dict[str, Any]  # the whole record: command, card, minutes, its evaluation, config


def shipped_models() -> list[ShippedModel]:
    """The records of the shipped models, by file name. A record that cannot be read, or whose checkpoint
    is missing, and a checkpoint without a record are skipped with a warning naming them."""
    folder, found, recorded = _pretrained_dir(), [], set()
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            record = json.loads(read_bytes(path))
            checkpoint = folder / record["file"]
            task, model = record["task"], record["config"]["model"]
            if not (isinstance(record["file"], str) and Path(record["file"]).name == record["file"]
                    and isinstance(task, str) and isinstance(model, dict)):
                raise TypeError("malformed record")
            dataset = model.get("dataset")
        except (OSError, ValueError, TypeError, KeyError, AttributeError, ConfigError, ResourceError):
            warnings.warn(f"skipped shipped model record {path}: not a readable record", SwarmctlWarning,
                          stacklevel=2)
            continue
        recorded.add(checkpoint.name)
        if not checkpoint.is_file():
            warnings.warn(f"skipped shipped model record {path}: its checkpoint {checkpoint} is missing",
                          SwarmctlWarning, stacklevel=2)
            continue
        found.append(ShippedModel(checkpoint, task, dataset if isinstance(dataset, str) else None, record))
    for path in sorted(folder.glob("*.pt")) if folder.is_dir() else []:
        if path.name not in recorded:
            warnings.warn(f"skipped {path}: a shipped model needs its record ({path.stem}.json) beside it",
                          SwarmctlWarning, stacklevel=2)
    return found


def shipped_checkpoint(tasks: Task | list[Task], dataset: str | None = None) -> Path:
    """The shipped checkpoint of the first of ``tasks`` that has one (and, for image models, for
    ``dataset``), found by the records alone; CheckpointError if none."""
    tasks = [tasks] if isinstance(tasks, Task) else tasks
    models = shipped_models()
    for task in tasks:
        for model in models:
            if model.task == task.name and (dataset is None or model.dataset == dataset):
                return model.checkpoint
    what = " or ".join(t.name for t in tasks) + (f" ({dataset})" if dataset else "")
    raise CheckpointError(f"no shipped {what} model in {_pretrained_dir()}; name a run, or train one with "
                          "`swarmctl train`")


def shipped_for(study: str, dataset: str | None = None) -> Path:
    """The shipped checkpoint :func:`open_run` uses for ``study`` when no run is named."""
    return shipped_checkpoint(tasks_for(study), dataset)


def shipped_results_dir(checkpoint: Path, runs_dir: Path) -> Path:
    """Where results computed from a shipped checkpoint go: ``runs_dir/pretrained-NAME``."""
    return Path(runs_dir) / f"pretrained-{Path(checkpoint).stem}"


def export_weights(checkpoint: Path, dest: Path, data_path: str | None = None,
                   record: dict[str, Any] | None = None) -> None:
    """Write ``checkpoint`` as a shipped model: ``dest`` without its optimizer state (float32 weights,
    config, training state) and its record ``dest.json`` (model, task, dataset, size, net minutes, best
    epoch, config, plus ``record``: e.g. the command, the card, the epochs and the evaluation).
    ``data_path`` replaces the dataset path recorded in its config."""
    dest = Path(dest)
    ckpt = load_checkpoint(checkpoint).weights_only(data_path)
    cfg = ckpt.model_config
    with torch.device("meta"):
        parameters = count_parameters(create_model(cfg))
    base = {"file": dest.name, "model": cfg.name, "code": paper_code(cfg), "task": ckpt.task, "dataset": cfg.dataset,
            "parameters": parameters, "net_minutes": round(ckpt.state["net_seconds"] / 60, 2),
            "best_epoch": ckpt.state["best_epoch"], "config": ckpt.config}
    with holding(dest.parent):  # the one writer of a folder of shipped models
        save_checkpoint(dest, ckpt)
        atomic_write_text(dest.with_suffix(".json"), json.dumps({**base, **(record or {})}, indent=2) + "\n")


# ---- open and read (continued) -------------------------------------------------------------------------

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
        """``data`` when given, else the dataset the run was trained on."""
        return Path(data or self.config["data"]["path"])


def open_run(target: str | Path | None, runs_dir: Path, device: str = "auto", *, study: str = "eval",
             dataset: str | None = None, data: Path | None = None, progress: DataProgress | None = None,
             needs_data: bool = True) -> Run:
    """Open a run (name or folder: its best.pt, else last.pt) or a checkpoint file, on ``device``, for
    ``study`` (the command that will use it): a run of a task the study cannot use is refused.

    ``target`` None opens the shipped model of the first task (in registry order) that ``study`` can use
    and that has one (for ``dataset``, when given); the default dataset it was scored on is generated
    first when missing (a fresh install has none), unless the caller names its own ``data`` or
    ``needs_data`` is False (a study that reads none of it, such as `swarmctl cluster`).
    """
    dev = resolve_device(device)
    checkpoint = shipped_for(study, dataset) if target is None else find_checkpoint(target, runs_dir)
    model, ckpt = load_model(checkpoint, dev)
    require_study(get_task(ckpt.task), study, str(checkpoint))
    shipped = _is_shipped(checkpoint)
    folder = shipped_results_dir(checkpoint, runs_dir) if shipped else checkpoint.parent
    run = Run(folder, checkpoint, model, ckpt, ckpt.model_config, dev, shipped)
    if shipped and needs_data and data is None:
        run.task.ensure_data(ckpt.data_config, progress)
    return run


def evaluate_run(run: Run, data: Path | None = None, split: str | None = None) -> dict[str, Any]:
    """Score an opened run with its task's metric on ``split`` (default: the task's); JSON types only."""
    state, task = run.ckpt.state, run.task
    metrics = task.score(run.model, run.ckpt, data, split or task.default_split, run.device)
    return {
        "model": run.model_cfg.name,
        "task": task.name,
        "code": paper_code(run.model_cfg),
        "parameters": count_parameters(run.model),
        "checkpoint": str(run.checkpoint),
        "epoch": state["best_epoch"] if run.checkpoint.name == "best.pt" else state["epoch"] - 1,
        "net_minutes": state["net_seconds"] / 60,
        **metrics,
    }

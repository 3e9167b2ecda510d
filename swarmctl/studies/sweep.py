"""Sweeps: a TOML spec of hyper-parameter grids (its keys: docs/experiments.md; examples: ``sweeps/*.toml``),
expanded into runs named ``MODEL-CODE-sSEED`` (seed by seed, each over the grids in file order), split into
shards (shard I of N takes runs I, I + N, ...) and trained one after another with the usual trainer. Not a
scheduler: several machines each run their own ``--shard I/N``.
"""

from __future__ import annotations

import itertools
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmctl.config import RESUMABLE, SWEEP_KEYS, DataConfig, ModelConfig, TrainConfig, check_types, has_type
from swarmctl.devices import memory_limit, resolve_device
from swarmctl.errors import CheckpointError, ConfigError, DataError, ResourceError, SpecError, command_line
from swarmctl.files import read_bytes
from swarmctl.models import HYPERPARAMETERS, complete_config, get_spec, list_models, paper_code
from swarmctl.runs import check_training_memory, parameter_count, resume_run, run_name, run_progress, start_run
from swarmctl.tasks import Task, get_task

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# a grid's keys name hyper-parameters as train's options do; a grid takes those of its model's paper code
GRID_KEYS = {h.option: h for h in HYPERPARAMETERS}
TOP_KEYS = {"name", "seeds", "data", "grid", *SWEEP_KEYS}  # a spec's own keys and the TrainConfig fields it may set


@dataclass(frozen=True)
class SweepSpec:
    name: str
    task: str  # the task of every model in the spec (one whose data is one file or drawn fresh)
    configs: tuple[ModelConfig, ...]  # complete, distinct, in file order; each builds a model
    parameters: tuple[int, ...]  # of each configuration, counted on the meta device
    seeds: tuple[int, ...]
    data: str | None
    train: dict[str, Any]  # the TrainConfig fields the spec sets (minutes always); the task's defaults the rest

    @property
    def folder(self) -> str:
        return f"sweep-{self.name}"

    @property
    def minutes(self) -> float:
        return float(self.train["minutes"])

    @property
    def device(self) -> str:
        return train_config(self, self.seeds[0]).device


@dataclass(frozen=True)
class SweepRun:
    name: str  # MODEL-CODE-sSEED
    model: ModelConfig
    seed: int


def parse_spec(text: str, default_name: str) -> SweepSpec:
    """A spec from TOML text, every run's TrainConfig built; every problem is a ConfigError naming the key."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}") from None
    name, seeds, train = _top_level(raw, default_name)
    task, configs = _expand_grids(raw.get("grid"))
    spec = SweepSpec(name=name, task=task, configs=configs, parameters=tuple(parameter_count(c) for c in configs),
                     seeds=seeds, data=_data_file(raw.get("data"), task), train=train)
    for seed in spec.seeds:  # every run's TrainConfig is valid
        train_config(spec, seed)
    return spec


def _top_level(raw: dict[str, Any], default_name: str) -> tuple[str, tuple[int, ...], dict[str, Any]]:
    """The spec's name, its seeds and the TrainConfig fields it sets (their types checked)."""
    unknown = sorted(set(raw) - TOP_KEYS)
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(unknown)}; a spec has {', '.join(sorted(TOP_KEYS))}")
    name = str(raw.get("name", default_name))
    if not name or not all(ch.isalnum() or ch in "-_." for ch in name) or name.startswith("."):
        raise ConfigError(f"name {name!r}: use letters, digits, '-', '_' and '.' only")
    seeds = raw.get("seeds", [0])
    seeds = seeds if isinstance(seeds, list) else [seeds]
    if not seeds or not all(has_type(s, "int") for s in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds must be distinct integers, got {raw.get('seeds')!r}")
    train = {key: raw[key] for key in SWEEP_KEYS if key in raw}
    if "minutes" not in train:
        raise ConfigError("minutes (net budget per run) is missing; give a number > 0")
    check_types(TrainConfig, train)
    return name, tuple(seeds), train


def _expand_grids(grids: Any) -> tuple[str, tuple[ModelConfig, ...]]:
    """The task of the spec's grids and their configurations: complete, distinct, in file order."""
    if not isinstance(grids, list) or not grids:
        raise ConfigError("no [[grid]] tables; add at least one with model = \"...\" and its hyper-parameters")
    configs: dict[tuple[str, str], ModelConfig] = {}
    task = None
    for g_no, grid in enumerate(grids, 1):
        model, grid_task = _grid_model(g_no, grid)
        if task is not None and grid_task != task:
            raise ConfigError(f"grid {g_no}: {model} solves {grid_task!r}, an earlier grid {task!r}; one task per "
                              "spec")
        task = grid_task
        for cfg in _grid_configs(g_no, grid):
            configs.setdefault((model, paper_code(cfg)), cfg)
    return str(task), tuple(configs.values())


def _grid_model(g_no: int, grid: Any) -> tuple[str, str]:
    """A grid's model and its task (one a sweep can train)."""
    if not isinstance(grid, dict):
        raise ConfigError(f"grid {g_no} is {grid!r}, not a table; write each grid as a [[grid]] table with "
                          "model = \"...\" and its hyper-parameters")
    model = grid.get("model")
    if not isinstance(model, str):
        raise ConfigError(f"grid {g_no}: model must be a name, got {model!r}; choose from {', '.join(list_models())}")
    if model not in list_models():
        raise ConfigError(f"grid {g_no}: model {model!r} is not registered; choose from {', '.join(list_models())}")
    task = get_spec(model).task
    if not get_task(task).sweepable:
        raise ConfigError(f"grid {g_no}: {model} is a {task} model; sweeps train models whose data is one file or "
                          "drawn fresh")
    return model, task


def _grid_configs(g_no: int, grid: dict[str, Any]) -> list[ModelConfig]:
    """One grid's Cartesian product of the values of its model's paper-code fields, each completed."""
    model = grid["model"]
    spec = get_spec(model)
    allowed = {k for k, h in GRID_KEYS.items() if h.field in spec.code_fields}
    bad = sorted(set(grid) - allowed - {"model"})
    spec_wide = [k for k in bad if k in TOP_KEYS]
    if spec_wide:  # a training setting: the runs' names (MODEL-CODE-sSEED) hold the grid's keys only
        k = spec_wide[0]
        raise ConfigError(f"grid {g_no}: {k} is set for the whole spec, not per grid; move `{k} = ...` above the "
                          f"first [[grid]] (one value a spec; another value is another spec)")
    if bad:
        raise ConfigError(f"grid {g_no}: {model} has no {', '.join(bad)}; its code is {spec.code_format} "
                          f"(keys: {', '.join(sorted(allowed))})")
    fields = {GRID_KEYS[k].field: _values(g_no, k, v) for k, v in sorted(grid.items()) if k != "model"}
    return [complete_config(ModelConfig(name=model, **dict(zip(fields, combo, strict=True))))
            for combo in itertools.product(*fields.values())]


def _values(grid_no: int, key: str, value: Any) -> list[Any]:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise ConfigError(f"grid {grid_no}: {key} is an empty list; give at least one value")
    for v in values:
        if not has_type(v, "int") or v < 1:
            raise ConfigError(f"grid {grid_no}: {key} values must be integers >= 1, got {v!r}")
    return values


def _data_file(data: Any, task: str) -> str | None:
    """The spec's data file (None: the task's default)."""
    if data is not None and (not isinstance(data, str) or not data.strip()):
        raise ConfigError(f"data must name a file, got {data!r}; leave it out for the task's default")
    if data is not None and get_task(task).default_data is None:
        raise ConfigError(f"data: {task} models draw their tasks fresh and take no data file; remove data")
    return data


def train_config(spec: SweepSpec, seed: int) -> TrainConfig:
    """The TrainConfig of the spec's runs of ``seed`` (the task's defaults, the values the spec sets)."""
    return get_task(spec.task).train_config(**spec.train, seed=seed)


def load_spec(path: Path) -> SweepSpec:
    path = Path(path)
    try:
        text = read_bytes(path).decode("utf-8")  # a folder or a FIFO is refused at once, never waited on
    except (FileNotFoundError, NotADirectoryError):
        raise SpecError(f"{path}: no such sweep spec; see sweeps/*.toml for examples") from None
    except ConfigError as exc:
        raise SpecError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte {exc.start}); save the spec as UTF-8") from None
    try:
        return parse_spec(text, path.stem)
    except (ConfigError, ResourceError) as exc:
        raise SpecError(f"{path}: {exc}") from None


def expand(spec: SweepSpec) -> list[SweepRun]:
    """All runs of the spec: seed by seed, each over the configurations in file order."""
    return [SweepRun(run_name(cfg, seed), cfg, seed) for seed in spec.seeds for cfg in spec.configs]


def parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` with 0 <= I < N (a Slurm array ``--array=0-(N-1)`` gives I = $SLURM_ARRAY_TASK_ID)."""
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise ConfigError(f"`shard` must look like I/N (e.g. 0/4), got {text!r}") from None
    if n < 1 or not 0 <= i < n:
        raise ConfigError(f"`shard` {text}: need 0 <= I < N (shards are numbered from 0)")
    return i, n


def shard(runs: list[SweepRun], index: int, count: int) -> list[SweepRun]:
    """Shard ``index`` of ``count``: runs index, index + count, ..."""
    return runs[index::count]


def _run_status(run_dir: Path, spec: SweepSpec) -> str:
    """``new`` (nothing there), ``done`` (finished within the spec's budget), ``partial`` (resume it) or
    ``empty`` (a folder without a checkpoint: killed before its first epoch ended, start it again)."""
    try:
        progress = run_progress(run_dir)
    except CheckpointError as exc:
        raise CheckpointError(f"{exc}; move {run_dir} away and run the sweep again to train it anew") from None
    if progress.status in ("new", "empty"):
        return progress.status
    want_data = data_path(spec)
    if progress.config["data"].get("path") != want_data:
        raise DataError(f"run {run_dir} was trained on {progress.config['data'].get('path')}, the spec says "
                        f"{want_data}; give the spec another name or move the run away")
    train = progress.config["train"]
    same_budget = math.isclose(train["minutes"], spec.minutes) and (
        spec.train.get("max_epochs") is None or train["max_epochs"] == spec.train["max_epochs"])
    return "done" if progress.status == "finished" and same_budget else "partial"


def format_minutes(minutes: float) -> str:
    return f"{minutes:,.0f} min ({minutes / 60:,.1f} h)" if minutes >= 60 else f"{minutes:g} min"


def data_path(spec: SweepSpec) -> str | None:
    """The spec's data file, or its task's default (None: tasks drawn fresh)."""
    return spec.data if spec.data is not None else get_task(spec.task).default_data


def _check_runs(spec: SweepSpec, runs: list[SweepRun], runs_dir: Path) -> dict[str, str]:
    """Checks before anything trains: the data file exists (the task's default is generated when missing),
    and every run of ``runs`` already in ``runs_dir`` is readable and trained on the spec's data. Returns
    each run's :func:`_run_status` by name."""
    data = data_path(spec)
    if data is not None and data != get_task(spec.task).default_data and not Path(data).exists():
        raise DataError(f"{data}: no such data file; create it with {command_line('gen-data', out=data)} or fix "
                        "the spec's data")
    folder = Path(runs_dir) / spec.folder
    return {run.name: _run_status(folder / run.name, spec) for run in runs}


@dataclass(frozen=True)
class SweepPlan:
    """A spec and the runs one shard of it trains."""

    spec: SweepSpec
    all_runs: list[SweepRun]
    runs: list[SweepRun]  # this shard's
    folder: Path  # RUNS_DIR/sweep-NAME
    index: int = 0
    count: int = 1

    @property
    def task(self) -> Task:
        """The task the spec's models train on (its words on the progress line)."""
        return get_task(self.spec.task)


def plan_sweep(spec_file: Path, runs_dir: Path, index: int = 0, count: int = 1) -> SweepPlan:
    """Read the spec and pick shard ``index`` of ``count`` of its runs."""
    spec = load_spec(spec_file)
    all_runs = expand(spec)
    return SweepPlan(spec, all_runs, shard(all_runs, index, count), Path(runs_dir) / spec.folder, index, count)


@dataclass(frozen=True)
class DryRunRow:
    """One configuration in the ``--dry-run`` table (each configuration runs every seed of the spec)."""

    config: ModelConfig
    parameters: int
    here: int  # runs of this shard
    done: int
    partial: int


def dry_run(plan: SweepPlan) -> tuple[list[DryRunRow], int]:
    """The dry-run table's rows, and how many of this shard's runs are not finished, after the checks of
    :func:`_check_runs` (the memory check is left to the machine that trains). One pass over the runs: a grid
    may have 10,000 configurations."""
    status = _check_runs(plan.spec, plan.runs, plan.folder.parent)
    states: dict[ModelConfig, list[str]] = {cfg: [] for cfg in plan.spec.configs}
    for r in plan.runs:
        states[r.model].append(status[r.name])
    rows = [DryRunRow(cfg, n, len(states[cfg]), states[cfg].count("done"), states[cfg].count("partial"))
            for cfg, n in zip(plan.spec.configs, plan.spec.parameters, strict=True)]
    return rows, sum(1 for s in status.values() if s != "done")


def train_sweep(
    spec: SweepSpec,
    runs: list[SweepRun],
    runs_dir: Path,
    on_run: Any = None,
    progress: Any = None,
    announce: Any = None,
) -> list[tuple[SweepRun, str, Any]]:
    """Train ``runs`` of ``spec`` in turn into ``runs_dir/sweep-NAME/``: a finished run is skipped, a partial
    one resumed, one killed before its first checkpoint started again. Everything that can be checked is
    checked first (:func:`_check_runs`, and each configuration's training memory on the spec's device).
    A run's files are touched only under its lock, so a second sweep of the same shard is refused on the live
    run. Stops at the first interrupted run. ``on_run(k, total, run, status)`` is called before each run. Returns
    (run, status, FitResult or None) for every run looked at."""
    _check_runs(spec, runs, runs_dir)
    limit = memory_limit(resolve_device(spec.device))
    params = dict(zip(spec.configs, spec.parameters, strict=True))
    for cfg in dict.fromkeys(run.model for run in runs):
        check_training_memory(cfg, params[cfg], limit, "remove it from the spec or use a larger device")
    folder = Path(runs_dir) / spec.folder
    data_cfg = DataConfig(path=data_path(spec))
    done = []
    for k, run in enumerate(runs):
        run_dir = folder / run.name
        status = _run_status(run_dir, spec)
        if on_run is not None:
            on_run(k, len(runs), run, status)
        if status == "done":
            done.append((run, status, None))
            continue
        if status == "partial":
            changes = {k: v for k, v in spec.train.items() if k in RESUMABLE}  # the spec's budget and device
            result = resume_run(run_dir, folder, model_name=run.model.name, progress=progress, announce=announce,
                                **changes)
        else:  # new, or empty: start_run starts a run that never saved a checkpoint again from scratch
            result = start_run(run.model, train_config(spec, run.seed), data_cfg, folder, run.name, progress=progress,
                               announce=announce)
        done.append((run, status, result))
        if result.interrupted:
            break
    return done

"""`swarmctl sweep`: train a TOML spec's grid of configurations, one run folder each, resumable and sharded."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from swarmctl.cli._app import app
from swarmctl.cli._options import console, err_console, user_errors
from swarmctl.cli._progress import EpochProgress, task_progress
from swarmctl.errors import ConfigError, DataError
from swarmctl.models import paper_code
from swarmctl.studies.sweep import (
    data_path,
    expand,
    format_minutes,
    load_spec,
    parameter_count,
    parse_shard,
    run_status,
    shard,
    train_sweep,
)

INTERRUPTED_EXIT = 130
ACTIONS = {"new": "training", "partial": "resuming", "empty": "starting again (no checkpoint)", "done": "finished"}


def _ensure_data(path: str | None, default: str | None) -> None:
    if path is None or Path(path).exists():
        return
    if path != default:
        raise DataError(f"{path}: no such data file; create it with `swarmctl gen-data --out {path}` or fix the "
                        "spec's data")
    from swarmctl.data.hdf5 import generate_dataset
    from swarmctl.data.tasks import ClusteringParams

    params = ClusteringParams()
    console.print(f"{path} is missing: generating the paper's dataset (seed 0, {params.n_tasks:,} tasks) first")
    with task_progress("generating tasks") as progress:
        bar = progress.add_task("generating tasks", total=params.n_tasks)
        generate_dataset(Path(path), params, seed=0, progress=lambda k: progress.update(bar, completed=k))


@app.command("sweep")
def sweep_cmd(
    spec_file: Annotated[Path, typer.Argument(metavar="SPEC", help="TOML sweep spec, e.g. sweeps/paper.toml.")],
    shard_text: Annotated[str, typer.Option("--shard", help="I/N: train only shard I of N (0 <= I < N); N "
                                                            "machines with I = 0..N-1 cover the grid once.")] = "0/1",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List the configurations, parameter counts, run "
                                                            "states and the budget; train nothing.")] = False,
    runs_dir: Annotated[Path, typer.Option(help="Folder holding the runs; the sweep's go to RUNS_DIR/sweep-NAME/.")]
    = Path("runs"),
) -> None:
    """Train every configuration of a sweep spec for every seed, one after another, with the usual trainer.

    Runs are named RUNS_DIR/sweep-NAME/MODEL-CODE-sSEED. Re-running the same command is safe: finished runs
    are skipped, an interrupted one resumes from its last.pt. `swarmctl report RUNS_DIR/sweep-NAME` gives the
    table and the frontier figure. With a scheduler, give each job its own --shard, e.g. in a Slurm array
    (--array=0-7): --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT.
    """
    try:
        index, count = parse_shard(shard_text)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc).removeprefix("--shard "), param_hint="--shard") from None
    with user_errors():
        spec = load_spec(spec_file)
        all_runs = expand(spec)
        runs = shard(all_runs, index, count)
        folder = runs_dir / spec.folder
        where = f"shard {index}/{count}: " if count > 1 else ""
        if dry_run:
            _dry_run(spec, all_runs, runs, folder, where)
            return
        from swarmctl.training.runs import TASKS

        _ensure_data(data_path(spec), TASKS[spec.task].default_data)
        console.print(f"sweep {spec.name}: {where}{len(runs)} of {len(all_runs)} runs, "
                      f"{format_minutes(spec.minutes)} each -> {folder}", highlight=False)

        def on_run(k: int, total: int, run, status: str) -> None:
            console.print(f"[bold][{k + 1}/{total}] {run.name}[/]: {ACTIONS[status]}", highlight=False)

        with EpochProgress() as progress:
            results = train_sweep(spec, runs, runs_dir, on_run=on_run, progress=progress)
    last = results[-1][2] if results else None
    if last is not None and last.interrupted:
        err_console.print(f"{last.stop_reason}: saved {last.run_dir / 'last.pt'}; continue the sweep with the same "
                          f"command: swarmctl sweep {spec_file}"
                          + (f" --shard {index}/{count}" if count > 1 else "")
                          + (f" --runs-dir {runs_dir}" if runs_dir != Path("runs") else ""),
                          highlight=False, soft_wrap=True)
        raise typer.Exit(INTERRUPTED_EXIT)
    trained = sum(1 for _, status, _ in results if status != "done")
    console.print(f"sweep {spec.name}: {where}{trained} run(s) trained, {len(results) - trained} already finished "
                  f"-> {folder}; summarise with: swarmctl report {folder}", highlight=False, soft_wrap=True)


def _dry_run(spec, all_runs, runs, folder: Path, where: str) -> None:
    table = Table(title=f"sweep {spec.name}: {where}{len(runs)} of {len(all_runs)} runs -> {folder}")
    for col in ("model", "code", "parameters", "seeds", "runs here", "done", "partial"):
        table.add_column(col, justify="left" if col in ("model", "code", "seeds") else "right", no_wrap=True)
    mine = {r.name for r in runs}
    for cfg in spec.configs:
        cfg_runs = [r for r in all_runs if r.model == cfg]
        here = [r for r in cfg_runs if r.name in mine]
        states = [run_status(folder / r.name, spec) for r in here]
        params = parameter_count(cfg)
        table.add_row(cfg.name, f"({paper_code(cfg)})",
                      f"{params:,}", ",".join(str(r.seed) for r in cfg_runs), str(len(here)),
                      str(states.count("done")), str(states.count("partial")))
    console.print(table)
    left = sum(1 for r in runs if run_status(folder / r.name, spec) != "done")
    console.print(f"{len(spec.configs)} configurations x {len(spec.seeds)} seeds = {len(all_runs)} runs; "
                  f"budget {len(all_runs)} x {spec.minutes:g} min = {format_minutes(len(all_runs) * spec.minutes)} net "
                  f"(validation and checkpoints extra); {where}{len(runs)} runs, "
                  f"{format_minutes(len(runs) * spec.minutes)}, {left} not finished; data {data_path(spec)}, "
                  f"device {spec.device}", highlight=False, soft_wrap=True)

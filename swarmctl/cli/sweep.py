"""`swarmctl sweep`: train a TOML spec's grid of configurations, one run folder each, resumable and sharded."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from swarmctl.cli._app import app
from swarmctl.cli._options import RUNS_DIR, argument, console, err_console, option, say, user_errors
from swarmctl.cli._progress import EpochProgress
from swarmctl.errors import ConfigError
from swarmctl.models import paper_code
from swarmctl.plots.curves import save_run_curves
from swarmctl.studies.sweep import (
    check_sweep,
    data_path,
    expand,
    format_minutes,
    load_spec,
    parse_shard,
    shard,
    train_sweep,
)
from swarmctl.tasks import get_task

INTERRUPTED_EXIT = 130
ACTIONS = {"new": "training", "partial": "resuming", "empty": "starting again (no checkpoint)", "done": "finished"}


@app.command("sweep")
def sweep_cmd(
    spec_file: Annotated[Path, argument(metavar="SPEC", help="TOML sweep spec, e.g. sweeps/paper.toml.")],
    shard_text: Annotated[str, option("--shard", help="I/N: train only shard I of N (0 <= I < N); N "
                                                            "machines with I = 0..N-1 cover the grid once.")] = "0/1",
    dry_run: Annotated[bool, option("--dry-run", help="List the configurations, parameter counts, run "
                                                            "states and the budget; train nothing.")] = False,
    runs_dir: Annotated[Path, option(help="Folder holding the runs; the sweep's go to RUNS_DIR/sweep-NAME/.")]
    = RUNS_DIR,
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
            _dry_run(spec, all_runs, runs, folder, where, check_sweep(spec, runs, runs_dir))
            return
        def on_run(k: int, total: int, run, status: str) -> None:
            if k == 0:  # every check passed
                say(f"sweep {spec.name}: {where}{len(runs)} of {len(all_runs)} runs, {format_minutes(spec.minutes)} "
                    f"each -> {folder}")
            say(f"[{k + 1}/{total}] {run.name}: {ACTIONS[status]}")

        with EpochProgress(get_task(spec.task)) as progress:
            results = train_sweep(spec, runs, runs_dir, on_run=on_run, progress=progress)
        for _, _, result in results:  # the trainer draws no figures
            if result is not None:
                save_run_curves(result.run_dir)
    last = results[-1][2] if results else None
    if last is not None and last.interrupted:
        err_console.print(f"{last.stop_reason}: saved {last.run_dir / 'last.pt'}; continue the sweep with the same "
                          f"command: swarmctl sweep {spec_file}"
                          + (f" --shard {index}/{count}" if count > 1 else "")
                          + (f" --runs-dir {runs_dir}" if runs_dir != RUNS_DIR else ""),
                          markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(INTERRUPTED_EXIT)
    trained = sum(1 for _, status, _ in results if status != "done")
    say(f"sweep {spec.name}: {where}{trained} run(s) trained, {len(results) - trained} already finished "
        f"-> {folder}; summarise with: swarmctl report {folder}")


_PLAIN = dict(markup=False, highlight=False, soft_wrap=True)


def _dry_run(spec, all_runs, runs, folder: Path, where: str, states: dict[str, str]) -> None:
    """One line per configuration, in plain aligned columns (a grid may have 10,000 configurations)."""
    by_config: dict = {cfg: ([], []) for cfg in spec.configs}  # cfg -> (every run, this shard's states)
    for r in all_runs:
        by_config[r.model][0].append(r)
        if r.name in states:
            by_config[r.model][1].append(states[r.name])
    header = ("model", "code", "parameters", "seeds", "runs here", "done", "partial")
    rows = [header]
    for cfg, params in zip(spec.configs, spec.parameters, strict=True):
        cfg_runs, here = by_config[cfg]
        rows.append((cfg.name, f"({paper_code(cfg)})", f"{params:,}", ",".join(str(r.seed) for r in cfg_runs),
                     str(len(here)), str(here.count("done")), str(here.count("partial"))))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    left_aligned = {0, 1, 3}
    lines = console.print  # plain text, long lines kept whole (soft wrap)
    lines(f"sweep {spec.name}: {where}{len(runs)} of {len(all_runs)} runs -> {folder}", **_PLAIN)
    table = ["  ".join(cell.ljust(w) if i in left_aligned else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip() for row in rows]
    lines("\n".join(table), **_PLAIN)
    left = sum(1 for state in states.values() if state != "done")
    lines(f"{len(spec.configs)} configurations x {len(spec.seeds)} seeds = {len(all_runs)} runs; "
          f"budget {len(all_runs)} x {spec.minutes:g} min = {format_minutes(len(all_runs) * spec.minutes)} net "
          f"(validation and checkpoints extra); {where}{len(runs)} runs, {format_minutes(len(runs) * spec.minutes)}, "
          f"{left} not finished; data {data_path(spec) or 'drawn fresh'}, device {spec.device}", **_PLAIN)

"""`swarmctl sweep`: train a TOML spec's grid of configurations, one run folder each, resumable and sharded."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from swarmctl.cli import continue_with
from swarmctl.cli._app import app
from swarmctl.cli._options import RUNS_DIR, argument, option, say, stop_if_interrupted
from swarmctl.cli._table import print_table, table_format

if TYPE_CHECKING:
    from swarmctl.studies.sweep import SweepPlan

ACTIONS = {"new": "training", "partial": "resuming", "empty": "starting again (no checkpoint)", "done": "finished"}


@app.command("sweep")
def sweep_cmd(
    spec_file: Annotated[Path, argument(metavar="SPEC", help="TOML sweep spec, e.g. sweeps/paper.toml.")],
    shard: Annotated[str, option("--shard", help="I/N: train only shard I of N (0 <= I < N); N "
                                                            "machines with I = 0..N-1 cover the grid once.")] = "0/1",
    dry_run_only: Annotated[bool, option("--dry-run", help="List the configurations, parameter counts, run "
                                                                 "states and the budget; train nothing.")] = False,
    runs_dir: Annotated[Path, option(help="Folder holding the runs; the sweep's go to RUNS_DIR/sweep-NAME/.")]
    = RUNS_DIR,
    as_json: Annotated[bool, option("--json", help="With --dry-run: print the table as JSON (a list of objects, "
                                                   "one per configuration).")] = False,
    as_csv: Annotated[bool, option("--csv", help="With --dry-run: print the table as CSV.")] = False,
) -> None:
    """Train every configuration of a sweep spec for every seed, one after another, with the usual trainer.

    Runs are named RUNS_DIR/sweep-NAME/MODEL-CODE-sSEED. Re-running the same command is safe: finished runs
    are skipped, an interrupted one resumes from its last.pt. `swarmctl report --runs-dir RUNS_DIR/sweep-NAME` gives the
    table and the frontier figure. With a scheduler, give each job its own --shard, e.g. in a Slurm array
    (--array=0-7): --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT.
    """
    from swarmctl.studies.sweep import format_minutes, parse_shard, plan_sweep, train_sweep

    fmt = table_format(as_json, as_csv)
    if fmt != "text" and not dry_run_only:
        raise typer.BadParameter("lists the plan of --dry-run; add --dry-run (training prints no table)",
                                 param_hint=f"--{fmt}")
    index, count = parse_shard(shard)  # a ConfigError: exit 2, naming --shard
    from swarmctl.cli._progress import EpochProgress
    from swarmctl.plots.curves import save_run_curves
    from swarmctl.runs import finish_runs

    hint = shlex.join(["swarmctl", "sweep", str(spec_file)] + (["--shard", f"{index}/{count}"] if count > 1 else [])
                      + (["--runs-dir", str(runs_dir)] if runs_dir != RUNS_DIR else []))
    continue_with(hint)
    plan = plan_sweep(spec_file, runs_dir, index, count)
    where = f"shard {index}/{count}: " if count > 1 else ""
    if dry_run_only:
        _print_dry_run(plan, where, fmt)
        return
    spec = plan.spec
    if not plan.runs:  # more shards than runs: this one trains nothing and makes no folder
        say(f"sweep {spec.name}: {where}nothing to train ({len(plan.all_runs)} run(s) in {count} shards; this "
            "shard has none)")
        return

    def on_run(k: int, total: int, run, status: str) -> None:
        if k == 0:  # every check passed
            say(f"sweep {spec.name}: {where}{len(plan.runs)} of {len(plan.all_runs)} runs, "
                f"{format_minutes(spec.minutes)} each -> {plan.folder}")
        say(f"[{k + 1}/{total}] {run.name}: {ACTIONS[status]}")

    with EpochProgress(plan.task) as progress:
        results = train_sweep(spec, plan.runs, runs_dir, on_run=on_run, progress=progress, announce=say)
    done = [plan.folder / run.name for run, status, _ in results if status == "done"]  # curves a signal stopped
    stop_if_interrupted(finish_runs([result for _, _, result in results], hint, done,
                                    draw=save_run_curves).message)
    trained = sum(1 for _, status, _ in results if status != "done")
    say(f"sweep {spec.name}: {where}{trained} run(s) trained, {len(results) - trained} already finished "
        f"-> {plan.folder}; summarise with: swarmctl report --runs-dir {plan.folder}")


DRY_RUN_LEGEND = ("runs here: this shard's runs of the configuration (all its seeds when there is one shard); "
                  "done: finished; partial: started and not finished (the sweep resumes it)")


def _print_dry_run(plan: SweepPlan, where: str, fmt: str) -> None:
    """The grid as one table (a row per configuration; a grid may have 10,000), a legend, and the summary once."""
    from swarmctl.models import paper_code
    from swarmctl.studies.sweep import data_path, dry_run, format_minutes

    spec = plan.spec
    rows, left = dry_run(plan)
    hidden = sum(1 for r in rows if not r.here)  # a shard lists the configurations it trains (one shard: all)
    rows = [r for r in rows if r.here]
    columns = ("model", "code", "parameters", "runs here", "done", "partial")  # the seeds: once, in the summary
    table = [(r.config.name, paper_code(r.config), f"{r.parameters:,}", str(r.here), str(r.done), str(r.partial))
             for r in rows]
    records = [{"model": r.config.name, "code": paper_code(r.config), "parameters": r.parameters,
                "seeds": list(spec.seeds), "runs_here": r.here, "done": r.done, "partial": r.partial} for r in rows]
    title = f"sweep {spec.name}{where and ', ' + where.removesuffix(': ')} -> {plan.folder}"
    print_table(columns, table, title=title, right=("parameters", "runs here", "done", "partial"), records=records,
                fmt=fmt)
    if fmt != "text":
        return
    n_all, n_here, seeds = len(plan.all_runs), len(plan.runs), ",".join(map(str, spec.seeds))
    say(DRY_RUN_LEGEND)
    if hidden:
        say(f"{hidden} configurations with no run in this shard are not listed")
    say(f"{len(spec.configs)} configurations x {len(spec.seeds)} seeds ({seeds}) = {n_all} runs of {spec.minutes:g} "
        f"min = {format_minutes(n_all * spec.minutes)} net (validation and checkpoints extra); "
        + (f"{where}{n_here} runs, {format_minutes(n_here * spec.minutes)}, " if plan.count > 1 else "")
        + f"{left} not finished; data {data_path(spec) or 'drawn fresh'}, device {spec.device}")

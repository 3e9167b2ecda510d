"""`swarmctl sweep`: train a TOML spec's grid of configurations, one run folder each, resumable and sharded."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from swarmctl.cli._app import app
from swarmctl.cli._options import RUNS_DIR, argument, console, option, say, user_errors

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
) -> None:
    """Train every configuration of a sweep spec for every seed, one after another, with the usual trainer.

    Runs are named RUNS_DIR/sweep-NAME/MODEL-CODE-sSEED. Re-running the same command is safe: finished runs
    are skipped, an interrupted one resumes from its last.pt. `swarmctl report --runs-dir RUNS_DIR/sweep-NAME` gives the
    table and the frontier figure. With a scheduler, give each job its own --shard, e.g. in a Slurm array
    (--array=0-7): --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT.
    """
    from swarmctl.studies.sweep import format_minutes, parse_shard, plan_sweep, train_sweep

    with user_errors() as interruption:
        index, count = parse_shard(shard)  # a ConfigError: exit 2, naming --shard
        from swarmctl.cli._fit import after_fit
        from swarmctl.cli._progress import EpochProgress

        interruption.hint = shlex.join(["swarmctl", "sweep", str(spec_file)]
                                       + (["--shard", f"{index}/{count}"] if count > 1 else [])
                                       + (["--runs-dir", str(runs_dir)] if runs_dir != RUNS_DIR else []))
        plan = plan_sweep(spec_file, runs_dir, index, count)
        where = f"shard {index}/{count}: " if count > 1 else ""
        if dry_run_only:
            _print_dry_run(plan, where)
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
        after_fit([result for _, _, result in results], interruption.hint,
                  finished=[plan.folder / run.name for run, status, _ in results if status == "done"])
    trained = sum(1 for _, status, _ in results if status != "done")
    say(f"sweep {spec.name}: {where}{trained} run(s) trained, {len(results) - trained} already finished "
        f"-> {plan.folder}; summarise with: swarmctl report --runs-dir {plan.folder}")


_PLAIN = dict(markup=False, highlight=False, soft_wrap=True)


def _print_dry_run(plan: SweepPlan, where: str) -> None:
    """One line per configuration, in plain aligned columns (a grid may have 10,000 configurations)."""
    from swarmctl.models import paper_code
    from swarmctl.studies.sweep import data_path, dry_run, format_minutes

    spec = plan.spec
    rows, left = dry_run(plan)
    table = [("model", "code", "params", "seeds", "here", "done", "partial")]
    table += [(r.config.name, f"({paper_code(r.config)})", f"{r.parameters:,}", ",".join(map(str, r.seeds)),
               str(r.here), str(r.done), str(r.partial)) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    left_aligned = {0, 1, 3}
    console.print(f"sweep {spec.name}: {where}{len(plan.runs)} of {len(plan.all_runs)} runs -> {plan.folder}",
                  **_PLAIN)
    console.print("\n".join("  ".join(cell.ljust(w) if i in left_aligned else cell.rjust(w)
                                       for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()
                            for row in table), **_PLAIN)
    n_all, n_here = len(plan.all_runs), len(plan.runs)
    console.print(f"{len(spec.configs)} configurations x {len(spec.seeds)} seeds = {n_all} runs; budget {n_all} x "
                  f"{spec.minutes:g} min = {format_minutes(n_all * spec.minutes)} net (validation and checkpoints "
                  f"extra); {where}{n_here} runs, {format_minutes(n_here * spec.minutes)}, {left} not finished; data "
                  f"{data_path(spec) or 'drawn fresh'}, device {spec.device}", **_PLAIN)

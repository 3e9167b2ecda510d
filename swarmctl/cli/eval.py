"""`swarmctl eval`: score a checkpoint on a dataset split with its task's metric."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from swarmctl.catalog import per_task, tasks
from swarmctl.cli._app import app
from swarmctl.cli._options import RUNS_DIR, Device, RunsDir, argument, flush_output, option, say
from swarmctl.cli._table import print_table


@app.command("eval", help="Evaluate a checkpoint with its task's metric (the paper's).\n\n" + "\n\n".join(
    f"{t['name']}: {t['metric_help']}." for t in tasks() if t["metric_help"]))
def eval_cmd(
    target: Annotated[str | None, argument(metavar="RUN_OR_CHECKPOINT",
                                           help="Run name, run folder (uses best.pt) or checkpoint file "
                                                f"[default: the shipped model of the first task that has one "
                                                f"({', '.join(t['name'] for t in tasks())})].")] = None,
    data: Annotated[Path | None, option(help=f"Dataset to score on [default: {per_task('eval_data_help')}].")]
    = None,
    data_dir: Annotated[Path | None, option(help="Image models: the folder holding the files (e.g. DIR/MNIST/raw/) "
                                                 "[default: the run's].")] = None,
    split: Annotated[str | None, option(help=f"Split to score [default: {per_task('default_split')}].")] = None,
    runs_dir: RunsDir = RUNS_DIR,
    device: Device = "auto",
    out: Annotated[Path | None, option(help="JSON output [default: eval-SPLIT.json beside the checkpoint; "
                                            "runs/pretrained-NAME/ for a shipped model].")]
    = None,
    force: Annotated[bool, option("--force", help="Replace an existing --out file.")] = False,
) -> None:
    from swarmctl.cli._progress import DataGenerationProgress, DelayedBar
    from swarmctl.studies.evaluation import evaluation, net_minutes

    with DelayedBar("scoring") as bar, \
            evaluation(target, runs_dir, device, data, split, out, progress=DataGenerationProgress(), announce=say,
                       force=force, scoring=lambda k, n: bar(k / n), data_dir=data_dir) as scored:
        bar.close()
        res = scored.result  # the file appears once the table is printed, or never
        title = f"{res['model']} ({res['code']}) on {res['data']} [{res['split']}], {res['tasks']:,} {scored.unit}"
        print_table(scored.columns, scored.rows, title=title, right=scored.columns[1:])
        whole = scored.whole_run
        of_run = "" if whole is None else \
            f" of its run's {net_minutes(whole['net_minutes'])} net min and {whole['epochs']} epochs"
        say(f"{res['parameters']:,} parameters, checkpoint {res['checkpoint']} ({res['scored']}, saved at "
            f"{net_minutes(res['net_minutes'])} net min{of_run}) -> {scored.path}")
        flush_output()

"""`swarmctl eval`: score a checkpoint on a dataset split with its task's metric."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from rich.markup import escape
from rich.table import Table

from swarmctl.cli._app import app
from swarmctl.cli._options import RUNS_DIR, Device, RunsDir, argument, console, flush_output, option, say, user_errors
from swarmctl.cli._progress import DataGenerationProgress
from swarmctl.files import atomic_write_text, check_output_file, check_output_folder, staged_writes
from swarmctl.runs import evaluate_run, open_run
from swarmctl.tasks import TASKS, get_task


def _per_task(attribute: str) -> str:
    """Each task's value of ``attribute``, e.g. ``clustering: val; mog: test; image: test``."""
    return "; ".join(f"{t.name}: {getattr(t, attribute)}" for t in TASKS.values())


@app.command("eval", help="Evaluate a checkpoint with its task's metric (the paper's).\n\n" + "\n\n".join(
    f"{t.name}: {t.metric_help}." for t in TASKS.values() if t.metric_help))
def eval_cmd(
    target: Annotated[str | None, argument(metavar="RUN_OR_CHECKPOINT",
                                           help="Run name, run folder (uses best.pt) or checkpoint file "
                                                f"[default: the shipped model of the first task that has one "
                                                f"({', '.join(TASKS)})].")] = None,
    data: Annotated[Path | None, option(help=f"Dataset to score on [default: {_per_task('eval_data_help')}].")]
    = None,
    split: Annotated[str | None, option(help=f"Split to score [default: {_per_task('default_split')}].")] = None,
    runs_dir: RunsDir = RUNS_DIR,
    device: Device = "auto",
    out: Annotated[Path | None, option(help="JSON output [default: eval-SPLIT.json beside the checkpoint; "
                                            "runs/pretrained-NAME/ for a shipped model].")]
    = None,
) -> None:
    with user_errors():
        if out is not None:
            check_output_file(out, inputs=[data])
        elif target is None:
            check_output_folder(runs_dir)  # before a fresh checkout's dataset is generated for the shipped model
        opened = open_run(target, runs_dir, device, data=data, progress=DataGenerationProgress())
        if opened.shipped:
            say(f"scoring the shipped model {opened.checkpoint}")
        if out is None:
            check_output_folder(opened.dir)
        inputs = [opened.checkpoint, data]
        if out is not None:
            check_output_file(out, inputs)  # never over the checkpoint it reads, nor a run's own files
        res = evaluate_run(opened, data, split)
        out_path = out or opened.dir / f"eval-{res['split']}.json"
        with staged_writes(inputs):  # the file appears once the table is printed, or not at all
            atomic_write_text(out_path, json.dumps(res, indent=2) + "\n")
            _print_table(res, out_path)
            flush_output()


def _print_table(res: dict[str, Any], out_path: Path) -> None:
    task = get_task(res["task"])
    columns, rows = task.eval_table(res)
    table = Table(title=escape(f"{res['model']} ({res['code']}) on {res['data']} [{res['split']}], "
                               f"{res['tasks']:,} {task.unit}"))
    for k, col in enumerate(columns):
        table.add_column(col, justify="right" if k else "left")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    say(f"{res['parameters']:,} parameters, checkpoint {res['checkpoint']} (epoch {res['epoch']}, "
        f"{res['net_minutes']:.1f} net min) -> {out_path}")

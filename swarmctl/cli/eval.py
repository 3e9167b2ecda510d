"""`swarmctl eval`: score a checkpoint on a dataset split with its task's metric."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from swarmctl.cli._app import app
from swarmctl.cli._options import console, user_errors
from swarmctl.cli._progress import ensure_default_data
from swarmctl.files import atomic_write_text
from swarmctl.pretrained import is_shipped, missing_data, results_dir, shipped_checkpoint
from swarmctl.training.runs import evaluate_run, find_checkpoint


@app.command("eval")
def eval_cmd(
    target: Annotated[str | None, typer.Argument(metavar="RUN_OR_CHECKPOINT",
                                                 help="Run name, run folder (uses best.pt) or checkpoint file "
                                                      "\\[default: the shipped SWARM clustering model].")] = None,
    data: Annotated[Path | None, typer.Option(help="HDF5 dataset [default: clustering: the run's; mog: the "
                                                   "fixed 10,000-task test set].")] = None,
    split: Annotated[str | None, typer.Option(help="Split to score [default: val; mog: test].")] = None,
    runs_dir: Annotated[Path, typer.Option(help="Folder holding the runs.")] = Path("runs"),
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    out: Annotated[Path | None, typer.Option(help="JSON output [default: eval-SPLIT.json beside the checkpoint].")]
    = None,
) -> None:
    """Evaluate a checkpoint with the paper's metric and the true generating mixture's oracle.

    Clustering: Hungarian-matched loss and matched accuracy. MoG parameters: log-likelihood per point.
    Images: bits per dimension on the test split.
    """
    with user_errors():
        if target is None:
            target = str(shipped_checkpoint())
            console.print(f"no run named: scoring the shipped model {target}", highlight=False)
        checkpoint = find_checkpoint(target, runs_dir)
        shipped = is_shipped(checkpoint)
        if data is None and (missing := missing_data(checkpoint)) is not None:
            ensure_default_data(missing)  # a fresh checkout has no data yet
        res = evaluate_run(target, runs_dir, data, split, device)
        folder = results_dir(res["checkpoint"], runs_dir) if shipped else Path(res["checkpoint"]).parent
        out_path = out or folder / f"eval-{res['split']}.json"
        atomic_write_text(out_path, json.dumps(res, indent=2) + "\n")
    unit = "images" if res["task"] == "image" else "tasks"
    table = Table(title=f"{res['model']} ({res['code']}) on {res['data']} [{res['split']}], {res['tasks']:,} {unit}")
    table.add_column("")
    if res["task"] == "clustering":
        table.add_column("loss (nats/entity)", justify="right")
        table.add_column("matched accuracy", justify="right")
        table.add_row("model", f"{res['loss']:.4f}", f"{res['accuracy']:.2%}")
        table.add_row("oracle (true mixture)", f"{res['oracle_loss']:.4f}", f"{res['oracle_accuracy']:.2%}")
    elif res["task"] == "image":
        table.add_column("cross-entropy (nats/sub-pixel)", justify="right")
        table.add_column("bits/dim", justify="right")
        table.add_row("model (class-conditional)", f"{res['loss']:.4f}", f"{res['bits_per_dim']:.4f}")
    else:
        table.add_column("log-likelihood (nats/point)", justify="right")
        table.add_row("model", f"{res['log_likelihood']:.4f}")
        table.add_row("oracle (true parameters)", f"{res['oracle_log_likelihood']:.4f}")
    console.print(table)
    console.print(f"{res['parameters']:,} parameters, checkpoint {res['checkpoint']} (epoch {res['epoch']}, "
                  f"{res['net_minutes']:.1f} net min) -> {out_path}", highlight=False)

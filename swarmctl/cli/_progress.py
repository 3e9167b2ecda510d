"""Rich progress bars for long-running library calls (the library reports through plain callbacks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from swarmctl.cli._options import console
from swarmctl.data.hdf5 import generate_dataset
from swarmctl.data.tasks import ClusteringParams


def task_progress(description: str) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TimeRemainingColumn(), console=console, transient=False,
    )


def ensure_default_data(path: Path) -> None:
    """Generate the paper's clustering dataset (seed 0) at ``path`` when it is missing, with a progress bar."""
    if path.exists():
        return
    params = ClusteringParams()
    console.print(f"{path} is missing: generating the paper's dataset (seed 0, {params.n_tasks:,} tasks) first",
                  highlight=False)
    with task_progress("generating tasks") as progress:
        bar = progress.add_task("generating tasks", total=params.n_tasks)
        generate_dataset(path, params, seed=0, progress=lambda k: progress.update(bar, completed=k))


class EpochProgress:
    """A progress bar per epoch (running train loss) and one summary line per epoch."""

    def __init__(self) -> None:
        self._progress = Progress(
            TextColumn("[bold]epoch {task.fields[epoch]}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"), TimeElapsedColumn(), console=console, transient=True,
        )
        self._task: Any = None

    def __enter__(self) -> EpochProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.__exit__(*exc)

    def epoch_start(self, epoch: int, n_batches: int, done: int) -> None:
        if self._task is not None:
            self._progress.remove_task(self._task)
        self._task = self._progress.add_task("train", total=n_batches, completed=done, epoch=epoch, loss="-")

    def batch_end(self, mean_loss: float | None) -> None:
        if mean_loss is None:  # not read this step (the trainer reads it every few steps on a GPU)
            self._progress.update(self._task, advance=1)
        else:
            self._progress.update(self._task, advance=1, loss=f"{mean_loss:.4f}")

    def epoch_end(self, r: dict[str, Any]) -> None:
        val = "nan" if r["val_loss"] is None else f"{r['val_loss']:.4f}"
        best = "-" if r["best_val"] is None else f"{r['best_val']:.4f}"
        note = "  [red]backtrack[/]" if r["backtracked"] else ""
        if "val_bits_per_dim" in r:
            val += f" ({r['val_bits_per_dim']:.3f} bits/dim)"
        self._progress.console.print(
            f"epoch {r['epoch']:>3}  train {r['train_loss']:.4f}  val {val}  best {best}  lr {r['lr']:.3g}  "
            f"net {r['net_seconds'] / 60:.1f} min{note}", highlight=False, soft_wrap=True,
        )

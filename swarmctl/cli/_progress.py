"""Rich progress bars for long-running library calls (the library reports to a display object)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from swarmctl.cli._options import console


class _Task(Protocol):
    """What a progress display asks of a task (:class:`swarmctl.tasks.Task`)."""

    def progress_note(self, record: dict[str, Any]) -> str: ...


def task_progress(description: str) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TimeRemainingColumn(), console=console, transient=False,
    )


@contextmanager
def generating(message: str, total: int) -> Iterator[Callable[[int], None]]:
    """A bar for data generation, after ``message`` (when not empty); yields the update function."""
    if message:
        console.print(message, markup=False, highlight=False, soft_wrap=True)
    with task_progress("generating tasks") as progress:
        bar = progress.add_task("generating tasks", total=total)
        yield lambda k: progress.update(bar, completed=k)


class DataGenerationProgress:
    """The display `swarmctl gen-data` passes to the library."""

    def generating(self, message: str, total: int) -> AbstractContextManager[Callable[[int], None]]:
        return generating(message, total)


class EpochProgress:
    """A progress bar per epoch (running train loss) and one summary line per epoch, in the words of
    ``task``; a bar for generating missing data before the first epoch."""

    def __init__(self, task: _Task) -> None:
        self._note = task.progress_note
        self._progress = Progress(
            TextColumn("[bold]epoch {task.fields[epoch]}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"), TimeElapsedColumn(), console=console, transient=True,
        )
        self._started = False
        self._task: Any = None

    def __enter__(self) -> EpochProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._started:
            self._progress.__exit__(*exc)

    def generating(self, message: str, total: int) -> AbstractContextManager[Callable[[int], None]]:
        return generating(message, total)

    def epoch_start(self, epoch: int, n_batches: int, done: int) -> None:
        if not self._started:
            self._progress.__enter__()
            self._started = True
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
        val += escape(self._note(r))
        self._progress.console.print(
            f"epoch {r['epoch']:>3}  train {r['train_loss']:.4f}  val {val}  best {best}  lr {r['lr']:.3g}  "
            f"net {r['net_seconds'] / 60:.1f} min{note}", highlight=False, soft_wrap=True,
        )


class DelayedBar:
    """A bar for one long library call that reports ``progress(fraction_done)``: shown only once the call
    has taken ``delay`` seconds, so that quick calls print nothing."""

    def __init__(self, description: str, delay: float = 1.0) -> None:
        self._description = description
        self._delay = delay
        self._start = time.monotonic()
        self._progress: Progress | None = None
        self._bar: Any = None

    def __enter__(self) -> DelayedBar:
        self._start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def __call__(self, fraction: float) -> None:
        if self._progress is None:
            if time.monotonic() - self._start < self._delay:
                return
            self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                      TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(),
                                      TimeRemainingColumn(), console=console, transient=True)
            self._progress.__enter__()
            self._bar = self._progress.add_task(escape(self._description), total=1.0)
        self._progress.update(self._bar, completed=fraction)


class StepBar:
    """A bar for one library call that reports ``progress(done, total)``: shown from the first report on,
    until :meth:`close` or the end of the block (a call that reports nothing shows nothing)."""

    def __init__(self, description: str) -> None:
        self._description = description
        self._progress: Progress | None = None
        self._bar: Any = None

    def __enter__(self) -> StepBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.__exit__(None, None, None)
            self._progress = None

    def __call__(self, done: int, total: int) -> None:
        if self._progress is None:
            self._progress = task_progress(escape(self._description))
            self._progress.__enter__()
            self._bar = self._progress.add_task(escape(self._description), total=total)
        self._progress.update(self._bar, completed=done, total=total)

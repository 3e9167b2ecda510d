"""Rich progress bars for long-running library calls (the library reports to a display object)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Column

from swarmctl.cli._options import console

if TYPE_CHECKING:
    from swarmctl.training.loop import TrainingStart


class _Task(Protocol):
    """What a progress display asks of a task (:class:`swarmctl.tasks.Task`)."""

    def progress_note(self, record: dict[str, Any]) -> str: ...
    def usual_epochs(self, steps_per_epoch: int) -> tuple[int, str]: ...


def task_progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TimeRemainingColumn(), console=console, transient=False,
    )


class DataGenerationProgress:
    """The display `swarmctl gen-data` passes to the library (and, through :class:`EpochProgress`, training)."""

    @contextmanager
    def generating(self, message: str, total: int) -> Iterator[Callable[[int], None]]:
        """A bar for data generation, after ``message`` (when not empty); yields the update function."""
        if message:
            console.print(message, markup=False, highlight=False, soft_wrap=True)
        with task_progress() as progress:
            bar = progress.add_task("generating tasks", total=total)
            yield lambda k: progress.update(bar, completed=k)


class EpochProgress(DataGenerationProgress):
    """A progress bar per epoch and one summary line per epoch, in the words of ``task``; once the first steps
    are timed, one line saying what the budget buys."""

    def __init__(self, task: _Task, out: Console | None = None) -> None:
        self._task_info = task
        # the facts last, cut at the terminal's edge (the device first) rather than squeezing the counts
        self._progress = Progress(
            TextColumn("[bold]epoch {task.fields[epoch]}"), BarColumn(bar_width=12), MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"),
            TextColumn("{task.fields[facts]}", table_column=Column(no_wrap=True, overflow="ellipsis")),
            console=out or console, transient=True,
        )
        self._started = False
        self._task: Any = None
        self._run: TrainingStart | None = None
        self._best: float | None = None
        self._epoch, self._n_batches, self._done = 0, 0, 0
        self._timed: tuple[float, int] | None = None  # (net seconds, steps) at the first step this process read
        self._steps = 0  # steps this process ran
        self._rate: float | None = None  # net seconds per step
        self._net = (0.0, 0)  # (net seconds, steps) at the last step read
        self._told = False  # the line on what the budget buys

    def __enter__(self) -> EpochProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._started:
            self._progress.__exit__(*exc)

    def begin(self, start: TrainingStart) -> None:
        self._run, self._best = start, start.best_val
        self._timed, self._steps, self._rate, self._told = None, 0, None, False
        self._net = (start.net_seconds, 0)
        if start.resumed:
            where = (f"epoch {start.epoch}, batch {start.cursor}" if start.cursor else
                     f"the start of epoch {start.epoch}")
            left = start.budget_seconds - start.net_seconds
            rest = (f"{_minutes(left)} left" if left > 0 else
                    "nothing left: it stops at once; raise the budget to train on")
            self._say(f"resuming at {where}: net {_minutes(start.net_seconds)} of {_minutes(start.budget_seconds)} "
                      f"used, {rest}")

    def epoch_start(self, epoch: int, n_batches: int, done: int) -> None:
        if not self._started:
            self._progress.__enter__()
            self._started = True
        if self._task is not None:
            self._progress.remove_task(self._task)
        self._epoch, self._n_batches, self._done = epoch, n_batches, done
        self._task = self._progress.add_task("train", total=n_batches, completed=done, epoch=epoch, loss="-",
                                             facts=self._facts(None))

    def batch_end(self, mean_loss: float | None, net_seconds: float) -> None:
        self._done += 1
        self._steps += 1
        if mean_loss is None:  # not read this step (on a GPU, once an epoch): the net time lags the queued steps
            guess = None if self._rate is None else self._net[0] + (self._steps - self._net[1]) * self._rate
            self._progress.update(self._task, advance=1, facts=self._facts(guess))
            return
        self._net = (net_seconds, self._steps)
        self._time(net_seconds)
        self._progress.update(self._task, advance=1, loss=f"{mean_loss:.4f}", facts=self._facts(net_seconds))
        if not self._told and self._rate is not None and self._steps >= 3 \
                and (net_seconds - self._timed[0] >= 10 or self._steps >= 20):
            self._tell(net_seconds)

    def epoch_end(self, r: dict[str, Any]) -> None:
        self._best = r["best_val"]
        self._net = (r["net_seconds"], self._steps)
        if self._rate is None:  # an accelerator reads the time at the end of the epoch only
            self._time(r["net_seconds"])
        if not self._told and self._rate is not None:
            self._tell(r["net_seconds"])
        val = "nan" if r["val_loss"] is None else f"{r['val_loss']:.4f}"
        best = "-" if r["best_val"] is None else f"{r['best_val']:.4f}"
        note = "  [red]backtrack[/]" if r["backtracked"] else ""
        val += escape(self._task_info.progress_note(r))
        self._progress.console.print(
            f"epoch {r['epoch']:>3}  train {r['train_loss']:.4f}  val {val}  best {best}  lr {r['lr']:.3g}  "
            f"{escape(self._budget(r['net_seconds']))}{note}", highlight=False, soft_wrap=True,
        )

    # ---- what the lines say --------------------------------------------------------------------------------

    def _say(self, text: str) -> None:
        self._progress.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def _time(self, net_seconds: float) -> None:
        """Net seconds per step since the first step this process ran (its warm-up left out)."""
        if self._timed is None:
            if self._steps <= 1:
                self._timed = (net_seconds, self._steps)
                return
            # the first read came after several steps (an accelerator): time from zero
            self._timed = (self._run.net_seconds if self._run is not None else 0.0, 0)
        seconds, steps = net_seconds - self._timed[0], self._steps - self._timed[1]
        if steps > 0 and seconds > 0:
            self._rate = seconds / steps

    def _facts(self, net_seconds: float | None) -> str:
        """The bar's facts: the budget, when the epoch (or the budget) ends, the best so far, the device."""
        run = self._run
        if run is None:
            return ""
        used = run.net_seconds if net_seconds is None else net_seconds
        left = max(run.budget_seconds - used, 0.0)
        parts = [f"net {used / 60:.1f}/{_minutes(run.budget_seconds)}"]
        if self._rate is not None:
            epoch_left = (self._n_batches - self._done) * self._rate
            parts.append(f"epoch ends in ~{_clock(epoch_left)}" if epoch_left <= left else
                         f"budget ends in ~{_clock(left)}")
        else:
            parts.append("ETA -")
        parts.append(f"best {'-' if self._best is None else f'{self._best:.4f}'}")
        parts.append(run.device)
        return escape(", ".join(parts))

    def _budget(self, net_seconds: float) -> str:
        """The per-epoch line's facts: the budget used and left, the next epoch's net time, the device."""
        run = self._run
        if run is None:
            return f"net {net_seconds / 60:.1f} min"
        left = max(run.budget_seconds - net_seconds, 0.0)
        text = f"net {net_seconds / 60:.1f}/{_minutes(run.budget_seconds)} ({_minutes(left)} left)"
        if self._rate is not None and self._n_batches:
            text += f", ~{_clock(self._n_batches * self._rate)} net per epoch"
        return f"{text}, {run.device}"

    def _tell(self, net_seconds: float) -> None:
        """Once: what the budget buys at the measured step time, beside the task's default run."""
        run, rate, n = self._run, self._rate, self._n_batches
        if run is None or rate is None or not n or not math.isfinite(run.budget_seconds):
            return
        self._told = True
        per_step = f"{rate:.2f} s/step" if rate >= 0.1 else f"{rate * 1000:.3g} ms/step"
        steps_left = max(run.budget_seconds - net_seconds, 0.0) / rate
        # epochs done, the part of this one done and what the rest of the budget buys
        epochs = self._epoch + self._done / n + steps_left / n
        if run.resumed:
            text = (f"at {per_step}, the {_minutes(run.budget_seconds - run.net_seconds)} of net budget left buy about "
                    f"{_count(epochs - run.epoch - run.cursor / n)} more epochs of {n} steps")
        else:
            text = (f"at {per_step}, the net budget of {_minutes(run.budget_seconds)} buys about {_count(epochs)} "
                    f"epochs of {n} steps")
        if epochs >= run.max_epochs:
            rest = (run.max_epochs - self._epoch - self._done / n) * n * rate
            if rest < QUIET_S:  # a short run: what the budget would buy is beside the point
                return
            text += (f"; its limit of {run.max_epochs} epochs ends it first, after about "
                     f"{_minutes(rest + net_seconds)} net")
        else:
            usual, where = self._task_info.usual_epochs(n)
            if epochs < usual / 3:
                text += (f"; far fewer than the task's usual run (about {usual} epochs: {where}): "
                         "expect a less trained model, or give it more time or a GPU")
            if run.lr_decay_epoch is not None and epochs < run.lr_decay_epoch:
                text += f"; the learning-rate decay at epoch {run.lr_decay_epoch} comes after the budget ends"
        self._say(text)


QUIET_S = 60.0  # a run its epoch limit ends within this many net seconds gets no line on what the budget buys


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 600 else f"{seconds / 60:.0f} min"


def _clock(seconds: float) -> str:
    """h:mm:ss or m:ss."""
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _count(epochs: float) -> str:
    return f"{epochs:.1f}" if epochs < 10 else f"{epochs:.0f}"


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
        self.close()

    def close(self) -> None:
        """End the bar (before what follows the call is printed); the next report starts no new one."""
        if self._progress is not None:
            self._progress.__exit__(None, None, None)
        self._progress, self._delay = None, math.inf

    def _new_progress(self) -> Progress:
        return Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                        TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True)

    def __call__(self, done: float, total: float = 1.0) -> None:
        if self._progress is None:
            if time.monotonic() - self._start < self._delay:
                return
            self._progress = self._new_progress()
            self._progress.__enter__()
            self._bar = self._progress.add_task(escape(self._description), total=total)
        self._progress.update(self._bar, completed=done, total=total)


class StepBar(DelayedBar):
    """A bar for one library call that reports ``progress(done, total)``, from the first report on, left on the
    screen."""

    def __init__(self, description: str) -> None:
        super().__init__(description, delay=0.0)

    def _new_progress(self) -> Progress:
        return task_progress()

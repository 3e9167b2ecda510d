"""What `train` and `sweep` do after the trainer returns (:func:`swarmctl.runs.finish_runs`), with the
plotting function that draws a run's curves, and the line and exit code of an interrupted run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import typer

from swarmctl import signals
from swarmctl.cli._options import err_console
from swarmctl.plots.curves import save_run_curves
from swarmctl.runs import Finished, FitResult, finish_runs


def after_fit(results: Sequence[FitResult | None], continue_with: str, finished: Sequence[Path] = ()) -> None:
    """Draw the curves of the runs trained now and of ``finished`` runs that lack them; when the last
    result was interrupted, print how to continue (``continue_with``, a command) and exit 130."""
    report_interrupted(finish_runs(results, continue_with, finished, draw=save_run_curves))


def report_interrupted(done: Finished) -> None:
    """For an interrupted run: print where it was saved and how to continue, and exit 130."""
    if done.message is not None:
        err_console.print(done.message, markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(signals.EXIT_CODE)

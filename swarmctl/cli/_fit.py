"""What `train` and `sweep` do after the trainer returns: draw each finished run's curves.png, and for an
interrupted run say where its last.pt is and how to continue, then exit 130."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import typer

from swarmctl.cli._options import INTERRUPTED_EXIT, err_console, user_errors
from swarmctl.plots.curves import save_run_curves
from swarmctl.runs import FitResult


def after_fit(results: Sequence[FitResult | None], continue_with: str, finished: Sequence[Path] = ()) -> None:
    """Draw the curves of every run in ``results`` that was not interrupted (None: a run not trained), and
    of the ``finished`` runs not trained now that lack their curves.png (a signal stopped the drawing the
    last time); when the last result was interrupted, print how to continue (``continue_with``, a command)
    and exit 130."""
    for result in results:
        if result is not None and not result.interrupted:
            _draw_curves(result.run_dir, continue_with)
    for run_dir in finished:
        if not (Path(run_dir) / "curves.png").exists():
            _draw_curves(run_dir, continue_with)
    last = results[-1] if results else None
    if last is not None and last.interrupted:
        err_console.print(f"{last.stop_reason}: saved {last.run_dir / 'last.pt'} after {last.epochs} epoch(s); "
                          f"continue with: {continue_with}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(INTERRUPTED_EXIT)


def _draw_curves(run_dir: Path, continue_with: str) -> None:
    """curves.png after training; a failure to write it (a full disk) is one line, then one that says the
    training itself is saved and how to draw the curves again."""
    try:
        with user_errors():
            save_run_curves(run_dir)
    except typer.Exit:
        err_console.print(f"the training finished and is saved in {run_dir}; draw its curves again with: "
                          f"{continue_with}", markup=False, highlight=False, soft_wrap=True)
        raise

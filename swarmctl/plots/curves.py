"""Training curves from metrics.jsonl records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from swarmctl.files import read_metrics
from swarmctl.plots.style import literal, new_figure, save_figure
from swarmctl.rundir import RunDir


def save_run_curves(run_dir: Path) -> Path | None:
    """The run's curves from its metrics (RUN/curves.png from RUN/metrics.jsonl); None when no epoch is
    logged yet."""
    run = RunDir(run_dir)
    records = read_metrics(run.metrics)
    if not records:
        return None
    return save_figure(plot_curves(records, title=run.name), run.curves)


def plot_curves(records: list[dict[str, Any]], title: str = "") -> Figure:
    """Train and validation loss per epoch (backtracks marked), and the learning rate."""
    fig = new_figure(7.0, 4.5)
    ax, ax_lr = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1])
    epochs = [r["epoch"] for r in records]
    ax.plot(epochs, [r["train_loss"] for r in records], label="train", color="tab:blue")
    ax.plot(epochs, [r["val_loss"] if r["val_loss"] is not None else float("nan") for r in records],
            label="validation", color="tab:orange")
    ax.plot(epochs, [r["best_val"] if r["best_val"] is not None else float("nan") for r in records],
            label="best validation", color="tab:orange", linestyle=":")
    back = [r for r in records if r["backtracked"]]
    if back:
        ax.scatter([r["epoch"] for r in back], [r["val_loss"] or float("nan") for r in back], marker="x",
                   color="tab:red", label="backtrack", zorder=3)
    ax.set_ylabel("loss (nats)")
    ax.legend(loc="upper right", fontsize="small")
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(literal(title))
    ax_lr.plot(epochs, [r["lr"] for r in records], color="tab:gray")
    ax_lr.set_yscale("log")
    ax_lr.set_ylabel("lr")
    ax_lr.set_xlabel("epoch")
    ax_lr.grid(alpha=0.3)
    return fig

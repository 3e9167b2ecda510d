"""Violin plot of the per-task relative standard deviation of the loss over entity orderings."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from swarmctl.plots.style import new_figure
from swarmctl.studies.results import ShuffleVarianceResult


def plot_shuffle_variance(results: list[ShuffleVarianceResult]) -> Figure:
    """One violin per run; equivariant models sit at float-rounding level (drawn on a symlog axis)."""
    fig = new_figure(1.6 + 1.8 * len(results), 4.2)
    ax = fig.subplots()
    data = [r.rel_std for r in results]
    parts = ax.violinplot(data, showmedians=True, showextrema=True)
    for body in parts["bodies"]:
        body.set_alpha(0.6)
    rng = np.random.default_rng(0)
    for k, d in enumerate(data, start=1):
        ax.scatter(k + rng.uniform(-0.08, 0.08, len(d)), d, s=6, color="black", alpha=0.5, zorder=3)
    ax.set_xticks(range(1, len(results) + 1), [r.label for r in results])
    ax.set_yscale("symlog", linthresh=1e-4)
    ax.set_ylabel("relative std of the loss over orderings")
    n = results[0].n_shuffles
    ax.set_title(f"loss under {n:,} random orderings, {len(results[0].sizes)} tasks", fontsize="medium")
    ax.grid(alpha=0.3, axis="y")
    return fig

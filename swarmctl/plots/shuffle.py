"""Violin plot of the per-task relative standard deviation of the loss over entity orderings."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from swarmctl.plots.style import literal, new_figure
from swarmctl.studies.results import ShuffleVarianceResult

FLOOR = 1e-12  # relative spreads below this (exact zeros included) are drawn at the floor


def plot_shuffle_variance(results: list[ShuffleVarianceResult]) -> Figure:
    """One violin per run on a log axis (of log10 values, so that float-rounding spreads of equivariant
    models and the percent-level spreads of order-dependent ones share one picture); medians labelled."""
    fig = new_figure(1.6 + 1.8 * len(results), 4.2)
    ax = fig.subplots()
    data = [np.log10(np.clip(r.rel_std, FLOOR, None)) for r in results]
    parts = ax.violinplot(data, showmedians=True, showextrema=True)
    for body in parts["bodies"]:
        body.set_alpha(0.6)
    rng = np.random.default_rng(0)
    for k, (d, r) in enumerate(zip(data, results, strict=True), start=1):
        ax.scatter(k + rng.uniform(-0.08, 0.08, len(d)), d, s=6, color="black", alpha=0.5, zorder=3)
        ax.annotate(f"median {np.median(r.rel_std):.2g}", (k, d.max()), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize="x-small")
    ax.set_xticks(range(1, len(results) + 1), [literal(r.label) for r in results])
    lo, hi = np.floor(min(d.min() for d in data)) - 0.5, np.ceil(max(d.max() for d in data)) + 0.5
    ax.set_ylim(lo, hi)
    ticks = np.arange(np.ceil(lo), hi, 2 if hi - lo > 8 else 1)
    ax.set_yticks(ticks, [f"$10^{{{int(t)}}}$" for t in ticks])
    ax.set_ylabel("relative std of the loss over orderings")
    n = results[0].n_shuffles
    # two short lines: one violin's figure is 3.4 inches wide, narrower than the title on one line
    ax.set_title(f"loss under {n:,} random\norderings of {len(results[0].sizes)} tasks", fontsize="medium")
    ax.grid(alpha=0.3, axis="y")
    return fig

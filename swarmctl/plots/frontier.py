"""The paper's frontier figure: parameters (log axis) against best validation loss, per family only the
Pareto-optimal configurations, one panel per dataset the runs trained on (see :class:`FrontierPanel`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from swarmctl.plots.style import literal, new_figure
from swarmctl.studies.report import ConfigSummary, FrontierPanel


def plot_frontier(panels: Sequence[FrontierPanel], title: str | None = None) -> Figure:
    """One panel per dataset, side by side (two to a row); each family keeps its colour in every panel.
    Error bars (one standard deviation over seeds) only on the points with two or more seeds; the paper's
    results as hollow stars in the family's colour, labelled "paper"."""
    cols = min(len(panels), 2) or 1
    rows = math.ceil(len(panels) / cols) or 1
    fig = new_figure(7.5 * cols, 4.8 * rows)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    families = sorted({m for p in panels for m in (*p.frontiers, *p.paper)})
    colors = {m: f"C{k % 10}" for k, m in enumerate(families)}
    for ax, panel in zip(axes, panels, strict=False):
        _draw_panel(ax, panel, colors)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(literal(title), fontsize="medium")
    return fig


def _draw_panel(ax: Axes, panel: FrontierPanel, colors: dict[str, str]) -> None:
    for k, model in enumerate(sorted(set(panel.frontiers) | set(panel.paper))):
        color = colors[model]
        rows = panel.frontiers.get(model, [])
        if rows:
            xs, ys = [r.parameters for r in rows], [r.val_mean for r in rows]
            ax.plot(xs, ys, marker="o", linestyle="--", color=color, lw=1, label=literal(_legend(model, rows)))
            spread = [r for r in rows if r.error is not None]
            if spread:
                ax.errorbar([r.parameters for r in spread], [r.val_mean for r in spread],
                            yerr=[r.error for r in spread], fmt="none", ecolor=color, capsize=2)
            largest = panel.largest.get(model, 0)
            if largest > xs[-1]:
                ax.plot([xs[-1], largest], [ys[-1], ys[-1]], linestyle="--", color=color, lw=1)
            if largest:
                ax.plot([largest], [ys[-1]], marker="|", markersize=14, markeredgewidth=2, color=color)
            for r in rows:
                ax.annotate(literal(f"({r.code})"), (r.parameters, r.val_mean), textcoords="offset points",
                            xytext=(4, 4 if k % 2 else -10), fontsize="x-small", color=color)  # less overlap
        for p in panel.paper.get(model, []):
            ax.plot([p.parameters], [p.loss], marker="*", markersize=11, linestyle="none", markerfacecolor="none",
                    color=color, label=literal(f"{model} (paper)"))
            ax.annotate(literal(f"paper ({p.code})"), (p.parameters, p.loss), textcoords="offset points",
                        xytext=(6, -3), fontsize="x-small", color=color)
    ax.set_xscale("log")
    ax.set_xlabel("trainable parameters")
    ax.set_ylabel("best validation loss (nats)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="x-small")
    ax.set_title(literal(panel.title), fontsize="small")


def _legend(model: str, rows: list[ConfigSummary]) -> str:
    """A family's legend entry: its hardware, mean net minutes and mean epochs per configuration (a range
    where its frontier's configurations differ)."""
    hardware = "; ".join(dict.fromkeys(h for r in rows for h in (r.hardware or r.devices)))
    return f"{model} ({hardware}): {_span([r.net_minutes for r in rows], '.1f')} net min, " \
           f"{_span([r.epochs for r in rows], '.0f')} epochs"


def _span(values: list[float], fmt: str) -> str:
    low, high = format(min(values), fmt), format(max(values), fmt)
    return low if low == high else f"{low}-{high}"

"""The paper's frontier figure: parameters (log axis) against best validation loss, per family only the
Pareto-optimal configurations, joined by dashed lines and labelled with their codes, and a bar marker at
the size of the family's largest explored model."""

from __future__ import annotations

from matplotlib.figure import Figure

from swarmctl.plots.style import literal, new_figure
from swarmctl.studies.report import ConfigSummary


def plot_frontier(fronts: dict[str, list[ConfigSummary]], largest: dict[str, int] | None = None,
                  title: str | None = None) -> Figure:
    """``largest[family]``: its largest explored model's parameters; the dashed line continues at the
    family's best loss to a bar marker there."""
    fig = new_figure(7.5, 4.8)
    ax = fig.subplots()
    for k, (model, rows) in enumerate(sorted(fronts.items())):
        xs, ys = [r.parameters for r in rows], [r.val_mean for r in rows]
        errs = [r.val_std for r in rows]
        color = f"C{k}"
        ax.errorbar(xs, ys, yerr=errs, fmt="o", color=color, label=literal(model), capsize=2)
        ax.plot(xs, ys, linestyle="--", color=color, lw=1)
        if largest and largest.get(model, 0) > xs[-1]:
            ax.plot([xs[-1], largest[model]], [ys[-1], ys[-1]], linestyle="--", color=color, lw=1)
        if largest and model in largest:
            ax.plot([largest[model]], [ys[-1]], marker="|", markersize=14, markeredgewidth=2, color=color)
        for r in rows:
            ax.annotate(literal(f"({r.code})"), (r.parameters, r.val_mean), textcoords="offset points",
                        xytext=(4, 4 if k % 2 else -10), fontsize="x-small", color=color)  # alternate: less overlap
    ax.set_xscale("log")
    ax.set_xlabel("trainable parameters")
    ax.set_ylabel("best validation loss (nats)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small")
    if title:
        ax.set_title(literal(title), fontsize="medium")
    return fig

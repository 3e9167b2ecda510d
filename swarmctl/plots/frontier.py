"""The paper's frontier figure: parameters (log axis) against best validation loss, per family only the
Pareto-optimal configurations, joined by dashed lines and labelled with their codes, a bar marker at the
size of the family's largest explored model, and the paper's own results for those families."""

from __future__ import annotations

from matplotlib.figure import Figure

from swarmctl.plots.style import literal, new_figure
from swarmctl.studies.report import ConfigSummary, PaperPoint


def plot_frontier(fronts: dict[str, list[ConfigSummary]], largest: dict[str, int] | None = None,
                  title: str | None = None, paper: dict[str, list[PaperPoint]] | None = None) -> Figure:
    """``largest[family]``: its largest explored model's parameters; the dashed line continues at the
    family's best loss to a bar marker there. Error bars (one standard deviation over seeds) only on the
    points with two or more seeds. ``paper[family]``: the paper's results, drawn as hollow stars in the
    family's colour and labelled "paper"."""
    fig = new_figure(7.5, 4.8)
    ax = fig.subplots()
    families = sorted(set(fronts) | set(paper or {}))
    for k, model in enumerate(families):
        color = f"C{k}"
        rows = fronts.get(model, [])
        if rows:
            xs, ys = [r.parameters for r in rows], [r.val_mean for r in rows]
            ax.plot(xs, ys, marker="o", linestyle="--", color=color, lw=1, label=literal(model))
            spread = [r for r in rows if r.error is not None]
            if spread:
                ax.errorbar([r.parameters for r in spread], [r.val_mean for r in spread],
                            yerr=[r.error for r in spread], fmt="none", ecolor=color, capsize=2)
            if largest and largest.get(model, 0) > xs[-1]:
                ax.plot([xs[-1], largest[model]], [ys[-1], ys[-1]], linestyle="--", color=color, lw=1)
            if largest and model in largest:
                ax.plot([largest[model]], [ys[-1]], marker="|", markersize=14, markeredgewidth=2, color=color)
            for r in rows:
                ax.annotate(literal(f"({r.code})"), (r.parameters, r.val_mean), textcoords="offset points",
                            xytext=(4, 4 if k % 2 else -10), fontsize="x-small", color=color)  # less overlap
        for p in (paper or {}).get(model, []):
            ax.plot([p.parameters], [p.loss], marker="*", markersize=11, linestyle="none", markerfacecolor="none",
                    color=color, label=literal(f"{model} (paper)"))
            ax.annotate(literal(f"paper ({p.code})"), (p.parameters, p.loss), textcoords="offset points",
                        xytext=(6, -3), fontsize="x-small", color=color)
    ax.set_xscale("log")
    ax.set_xlabel("trainable parameters")
    ax.set_ylabel("best validation loss (nats)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small")
    if title:
        ax.set_title(literal(title), fontsize="medium")
    return fig

"""The points of `swarmctl cluster`, coloured by cluster, faint where the model is unsure."""

from __future__ import annotations

import numpy as np
from matplotlib.colors import to_rgba_array
from matplotlib.figure import Figure

from swarmctl.plots.style import literal, new_figure

MAX_DRAWN = 200_000  # points drawn at most (a seeded random subset beyond): a scatter of millions says no more


def plot_clusters(values: np.ndarray, names: tuple[str, ...], cluster: np.ndarray, probability: np.ndarray,
                  title: str) -> Figure:
    """The first two coordinates of ``values`` (N, D) in the user's units (one coordinate: against the
    probability), each point in its cluster's colour with alpha = its probability."""
    n = len(values)
    idx = np.arange(n) if n <= MAX_DRAWN else np.sort(np.random.default_rng(0).choice(n, MAX_DRAWN, replace=False))
    palette = to_rgba_array([f"C{k % 10}" for k in range(int(cluster.max()) + 1)])
    colors = palette[cluster[idx]]
    colors[:, 3] = np.clip(probability[idx], 0.05, 1.0)
    fig = new_figure(7.6, 5.6)
    ax = fig.subplots()
    x, xlabel = _readable(values[idx, 0], literal(names[0]))
    if values.shape[1] > 1:
        y, ylabel = _readable(values[idx, 1], literal(names[1]))
    else:
        y, ylabel = probability[idx], "probability of its cluster"
    size = float(np.clip(2e4 / max(len(idx), 1), 0.5, 16.0))
    ax.scatter(x, y, c=colors, s=size, linewidths=0, rasterized=len(idx) > 5000)
    ax.set_xlabel(xlabel)  # column names and file names are drawn as written
    ax.set_ylabel(ylabel)
    _fit_limits(ax, x, y, equal=values.shape[1] == 2)
    sizes = np.bincount(cluster)
    for k, count in enumerate(sizes[:10]):
        ax.scatter([], [], color=palette[k], s=20, label=f"{k}: {count:,}")
    ax.legend(title="cluster: points", fontsize="small", title_fontsize="small", loc="upper left",
              bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)  # beside the axes, never on the points
    if len(sizes) > 10:
        ax.text(1.02, 0.0, f"({len(sizes) - 10} more)", transform=ax.transAxes, fontsize="small", va="bottom")
    drawn = "" if len(idx) == n else f", {len(idx):,} drawn"
    extra = f", first 2 of {values.shape[1]} coordinates" if values.shape[1] > 2 else ""
    ax.set_title(f"{literal(title)}\n{n:,} points{drawn}, {len(sizes)} clusters{extra}; alpha = probability",
                 fontsize="medium")
    return fig


def _readable(v: np.ndarray, label: str) -> tuple[np.ndarray, str]:
    """A coordinate as drawn, and its axis label: as given, unless its spread is too small for matplotlib's
    axes to show (below a millionth of its size, where they would widen to a fixed span around it, or of
    a size below 1e-100), then drawn less its smallest value in units of a power of ten the label names;
    coordinates beyond 1e100 are drawn in units of a power of ten too."""
    lo, hi = float(v.min()), float(v.max())
    span, size = 2 * (hi / 2 - lo / 2), max(abs(lo), abs(hi))
    if size > 1e100:  # matplotlib's ticks fail near float64's end: drawn in units of a power of ten
        power = int(np.floor(np.log10(size)))
        return v / 10.0**power, f"{label} (x 1e{power})"
    if span == 0 or (span >= 1e-6 * size and size >= 1e-100):
        return v, label
    shift = lo if span < 1e-6 * size else 0.0
    power = max(int(np.floor(np.log10(span))), -300)
    shifted = f"{label} - {shift:.17g}" if shift else label
    return (v - shift) / 10.0**power, f"{shifted} (x 1e{power})"


def _fit_limits(ax, x: np.ndarray, y: np.ndarray, equal: bool, margin: float = 0.04) -> None:
    """Axis limits on the data (a small margin each side). With ``equal`` (two coordinates in one unit)
    the axes box takes the data's aspect, never the limits: no axis runs far past the points, and a set
    many times longer than wide gets a flat box (down to 1:20) instead of an axis stretched to match."""
    lo = np.array([x.min(), y.min()], dtype=float)
    hi = np.array([x.max(), y.max()], dtype=float)
    half = hi / 2 - lo / 2  # halved first: the span of coordinates near 1e308 overflows float64
    half = np.where(half > 0, half, np.maximum(np.abs(hi), 1.0) / 2)
    mid, reach, most = lo / 2 + hi / 2, half * (1 + 2 * margin), np.finfo(float).max
    low, high = np.clip(mid - reach, -most, most), np.clip(mid + reach, -most, most)
    ax.set_xlim(low[0], high[0])
    ax.set_ylim(low[1], high[1])
    if equal:
        ax.set_box_aspect(float(np.clip(half[1] / half[0], 0.05, 20.0)))

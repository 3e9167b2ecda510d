"""The paper's entropy-map and per-class probability figures for one task (the paper, sec. 4.1.4, Results). The
model's classes are drawn in the colour of the true cluster each one overlaps most (Hungarian matching), so
the truth and the model's panels compare at a glance."""

from __future__ import annotations

import numpy as np
from matplotlib.colors import LinearSegmentedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Ellipse

from swarmctl.plots.style import literal, new_figure
from swarmctl.studies.results import EntropyMapResult

PALETTE = [f"C{k}" for k in range(10)]  # tab10


def match_clusters(labels: np.ndarray, assignment: np.ndarray, n_classes: int) -> np.ndarray:
    """The colour index of each of the model's ``n_classes`` classes: the true cluster it shares the most
    points with, one class per cluster (Hungarian matching on the (class, cluster) overlap counts); a class
    matched to no cluster takes a colour no cluster uses. labels, assignment (N,) ints -> (n_classes,)."""
    from scipy.optimize import linear_sum_assignment  # here: its import takes half a second

    size = max(n_classes, int(labels.max(initial=-1)) + 1, int(assignment.max(initial=-1)) + 1)
    overlap = np.zeros((size, size), dtype=np.int64)
    np.add.at(overlap, (assignment, labels), 1)  # overlap[class, cluster]: points in both
    rows, cols = linear_sum_assignment(overlap, maximize=True)
    colour = np.empty(size, dtype=np.int64)
    colour[rows] = cols
    return colour[:n_classes]


def _ellipses(ax, means: np.ndarray, covs: np.ndarray, color, n_std: float = 2.0) -> None:
    for mu, cov in zip(means, covs, strict=True):
        vals, vecs = np.linalg.eigh(cov)
        angle = np.degrees(np.arctan2(vecs[1, 1], vecs[0, 1]))
        w, h = 2 * n_std * np.sqrt(vals[::-1])
        ax.add_patch(Ellipse(mu, w, h, angle=angle, fill=False, color=color, lw=1.0))


def _extent(r: EntropyMapResult) -> list[float]:
    return [r.grid_x[0], r.grid_x[-1], r.grid_y[0], r.grid_y[-1]]


def plot_entropy_map(r: EntropyMapResult) -> Figure:
    """Left: points by true cluster with 2-std ellipses of the generating Gaussians. Right: points by the
    model's assignment over a grey map of the entropy of x*'s class distribution (darker = less sure)."""
    fig = new_figure(10.0, 4.8)
    left, right = fig.subplots(1, 2, sharex=True, sharey=True)
    left.scatter(r.points[:, 0], r.points[:, 1], c=[PALETTE[k] for k in r.labels], s=6)
    _ellipses(left, r.means, r.covs, "black")
    left.set_title(f"task {r.task_index}: {len(r.means)} clusters, {len(r.points)} points (truth)", fontsize="medium")
    im = right.imshow(r.entropy, origin="lower", extent=_extent(r), cmap="Greys", vmin=0, vmax=np.log(10),
                      aspect="auto", interpolation="nearest")
    colour = match_clusters(r.labels, r.assignment, r.probs.shape[-1])
    right.scatter(r.points[:, 0], r.points[:, 1], c=[PALETTE[colour[k] % 10] for k in r.assignment], s=6)
    right.set_title(literal(f"{r.label}: assignment and entropy of x* ({r.method})"), fontsize="medium")
    fig.colorbar(im, ax=right, label="entropy (nats)")
    for ax in (left, right):
        ax.set_xlim(r.grid_x[0], r.grid_x[-1])
        ax.set_ylim(r.grid_y[0], r.grid_y[-1])
        ax.set_aspect("equal", adjustable="box")
    return fig


def plot_class_maps(r: EntropyMapResult) -> Figure:
    """One panel per output class: that class's probability for x*, black (0) to its colour (1; the colour
    of the true cluster it is matched to, as in the entropy map), generating ellipses in white."""
    C = r.probs.shape[-1]
    colour = match_clusters(r.labels, r.assignment, C)
    cols = 5
    rows = int(np.ceil(C / cols))
    fig = new_figure(3.0 * cols, 3.0 * rows)
    axes = np.atleast_1d(fig.subplots(rows, cols, sharex=True, sharey=True)).ravel()
    for k, ax in enumerate(axes):
        if k >= C:
            ax.set_axis_off()
            continue
        cmap = LinearSegmentedColormap.from_list(f"class{k}", ["black", PALETTE[colour[k] % 10]])
        ax.imshow(r.probs[..., k], origin="lower", extent=_extent(r), cmap=cmap, vmin=0, vmax=1, aspect="equal",
                  interpolation="nearest")
        _ellipses(ax, r.means, r.covs, "white")
        ax.set_title(f"class {k}", fontsize="small")
        ax.tick_params(labelsize="x-small")
    fig.suptitle(literal(f"{r.label}: class probabilities of x* ({r.method})"), fontsize="medium")
    return fig

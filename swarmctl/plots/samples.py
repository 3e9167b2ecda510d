"""A grid of class-conditional samples: one row per class."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from swarmctl.plots.style import literal, new_figure


def plot_samples(images: np.ndarray, title: str = "") -> Figure:
    """images (n_classes, per_class, C, H, W) uint8 -> one figure, class k in row k."""
    rows, cols, C, H, W = images.shape
    canvas = np.ones((rows * (H + 2), cols * (W + 2), C), dtype=np.uint8) * 255
    for r in range(rows):
        for c in range(cols):
            canvas[r * (H + 2) + 1 : r * (H + 2) + 1 + H, c * (W + 2) + 1 : c * (W + 2) + 1 + W] = (
                images[r, c].transpose(1, 2, 0))
    fig = new_figure(max(4.0, 0.5 + 0.45 * cols), 0.5 + 0.45 * rows)
    ax = fig.subplots()
    ax.imshow(canvas[..., 0] if C == 1 else canvas, cmap="gray" if C == 1 else None, vmin=0, vmax=255,
              interpolation="nearest")
    ax.set_yticks([r * (H + 2) + H / 2 for r in range(rows)], [str(r) for r in range(rows)], fontsize="x-small")
    ax.set_xticks([])
    if title:
        ax.set_title(literal(title), fontsize="x-small", wrap=True)
    return fig

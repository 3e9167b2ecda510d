"""A grid of class-conditional samples: one column per class, its samples below each other; ten classes
fold into two bands of five columns where that keeps the grid near square."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from swarmctl.plots.style import literal, new_figure

PAD = 2  # white pixels between images


def sample_canvas(images: np.ndarray) -> tuple[np.ndarray, int]:
    """images (n_classes, per_class, C, H, W) uint8 -> (canvas (rows*(H+PAD), cols*(W+PAD), C), classes per
    band): class k in column k mod cols of band k // cols, its samples top to bottom; ``cols``, a divisor of
    ``n_classes``, the one whose grid of (n_classes / cols * per_class) rows by cols images is nearest a square."""
    n_classes, per_class, C, H, W = images.shape
    cols = min((c for c in range(1, n_classes + 1) if n_classes % c == 0),
               key=lambda c: (abs(np.log(n_classes // c * per_class / c)), -c))
    rows = n_classes // cols * per_class
    canvas = np.full((rows * (H + PAD), cols * (W + PAD), C), 255, dtype=np.uint8)
    for k in range(n_classes):
        band, col = divmod(k, cols)
        for s in range(per_class):
            top, left = (band * per_class + s) * (H + PAD) + PAD // 2, col * (W + PAD) + PAD // 2
            canvas[top : top + H, left : left + W] = images[k, s].transpose(1, 2, 0)
    return canvas, cols


def plot_samples(images: np.ndarray, title: str = "") -> Figure:
    """images (n_classes, per_class, C, H, W) uint8 -> one figure, each class's number above its column."""
    n_classes, per_class, C, H, W = images.shape
    canvas, cols = sample_canvas(images)
    bands = n_classes // cols
    fig = new_figure(max(3.0, 0.3 + 0.5 * cols), 0.5 + bands * (0.25 + 0.5 * per_class))
    axes = np.atleast_1d(fig.subplots(bands, 1))
    band_height = per_class * (H + PAD)
    for band, ax in enumerate(axes):
        part = canvas[band * band_height : (band + 1) * band_height]
        ax.imshow(part[..., 0] if C == 1 else part, cmap="gray" if C == 1 else None, vmin=0, vmax=255,
                  interpolation="nearest")
        ax.xaxis.tick_top()
        ax.set_xticks([c * (W + PAD) + (W + PAD) / 2 for c in range(cols)],
                      [str(band * cols + c) for c in range(cols)], fontsize="x-small")
        ax.tick_params(length=0, pad=1)
        ax.set_yticks([])
    if title:
        fig.suptitle(literal(title), fontsize="x-small", wrap=True)
    return fig

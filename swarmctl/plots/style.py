"""Shared figure style and saving (Agg backend, never plt.show)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from swarmctl.files import atomic_write  # noqa: E402


def new_figure(width: float = 6.0, height: float = 4.0, **kwargs) -> Figure:
    """A figure not registered with pyplot (no global state, no GUI)."""
    return Figure(figsize=(width, height), layout="constrained", **kwargs)


def save_figure(fig: Figure, path: Path, dpi: int = 120) -> Path:
    """Save as PNG atomically (temporary file, then rename); returns the path written."""
    path = Path(path).with_suffix(".png")
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format="png"))
    return path

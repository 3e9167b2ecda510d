"""Shared figure style and saving (Agg backend, never plt.show)."""

from __future__ import annotations

import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from swarmctl.files import atomic_write  # noqa: E402


def new_figure(width: float = 6.0, height: float = 4.0, **kwargs) -> Figure:
    """A figure not registered with pyplot (no global state, no GUI)."""
    return Figure(figsize=(width, height), layout="constrained", **kwargs)


def literal(text: object) -> str:
    """``text`` (a run name, a title, a label read from a file) as matplotlib draws it literally: every
    ``$`` escaped, so no part of it is read as mathtext (which could fail to parse, or render as math),
    and the bytes of a file name the locale could not decode (lone surrogates, PEP 383: a UTF-8 name in
    a C locale) read as UTF-8, with anything else that is no character drawn as U+FFFD (matplotlib
    cannot draw a lone surrogate at all)."""
    text = str(text).encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return text.replace("$", r"\$")


def save_figure(fig: Figure, path: Path, dpi: int = 120) -> Path:
    """Save as PNG atomically; returns the path written: ``path`` when it ends in .png in any case, else with
    .png in place of its suffix. Characters the font lacks are drawn as boxes without a warning per glyph."""
    path = Path(path)
    if path.suffix.lower() != ".png":
        path = path.with_suffix(".png")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from", category=UserWarning)
        warnings.filterwarnings("ignore", message=r"Matplotlib currently does not support", category=UserWarning)
        atomic_write(path, lambda fh: fig.savefig(fh, dpi=dpi, format="png"))
    return path

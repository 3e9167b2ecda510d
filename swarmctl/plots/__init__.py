"""Figures drawn from saved results (never imports torch).

matplotlib keeps its configuration and font cache under ``~/.config`` and ``~/.cache`` (or
``$MPLCONFIGDIR``); where those cannot be written (an unwritable HOME or $MPLCONFIGDIR) it prints two lines of warnings
and rebuilds its font cache in a new temporary folder every time. Before it loads, such a process gets
a private folder of its own instead (``$TMPDIR/swarmctl-UID/matplotlib``), kept between runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from swarmctl.files import private_temp_folder


def _writable_folder(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)


def _matplotlib_folders() -> list[Path] | None:
    """The folders matplotlib would use by itself (None: it could not find a home folder)."""
    try:
        home = Path.home()
    except RuntimeError:
        return None
    if sys.platform.startswith(("linux", "freebsd")):
        config = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
        cache = Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache")
        return [config / "matplotlib", cache / "matplotlib"]
    return [home / ".matplotlib"]


if "matplotlib" not in sys.modules:  # a $MPLCONFIGDIR that cannot be written is replaced too
    _folders = [Path(os.environ["MPLCONFIGDIR"])] if os.environ.get("MPLCONFIGDIR") else _matplotlib_folders()
    if _folders is None or not all(_writable_folder(f) for f in _folders):
        os.environ["MPLCONFIGDIR"] = str(private_temp_folder("matplotlib"))

"""Atomic file writes: write beside the target, then rename, so no reader sees a half-written file."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swarmctl.errors import ResourceError, SwarmctlWarning


def atomic_write(path: Path, write: Callable[[str], None]) -> None:
    """Call ``write(tmp_path)`` on a temporary file in ``path``'s folder, then rename it to ``path``.

    On any error (or interruption) the temporary file is removed and ``path`` is left untouched.
    """
    path = Path(path)
    check_output_file(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:  # the writer's PID in the name: remove_orphan_temps leaves a live writer's file alone
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}-", suffix=".tmp", dir=path.parent)
    except OSError as exc:  # name the file asked for, not the temporary one
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def check_output_folder(folder: Path, target: Path | None = None) -> None:
    """Refuse, before any work, a folder that cannot be created or written: a file in its place or above
    it, or no write permission where it would be made. ``target``: what is written there, for the message."""
    folder = Path(folder)
    target = folder if target is None else Path(target)
    for parent in [folder, *folder.parents]:
        if parent.exists():
            if not parent.is_dir():
                raise ResourceError(f"cannot write {target}: {parent} is a file, not a folder; choose another path")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise ResourceError(f"cannot write {target}: {parent} is not writable; choose a folder you can "
                                  "write to")
            return


def check_output_file(path: Path) -> None:
    """Refuse, before any work, an output file path that is a folder or whose folder cannot be written."""
    path = Path(path)
    if path.is_dir():
        raise ResourceError(f"cannot write {path}: it is a folder; give a file path")
    check_output_folder(path.parent, path)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def remove_orphan_temps(folder: Path, prefix: str = ".", *, held: bool = False) -> list[Path]:
    """Delete the temporary files (``PREFIX*.tmp``) that :func:`atomic_write` leaves in ``folder`` when its
    process is killed (SIGKILL, power loss). ``held``: the caller holds the folder's lock, so no other
    writer is active and every such file is an orphan; otherwise a file whose writer (the PID in its
    name) is still alive is kept."""
    removed = []
    for tmp in Path(folder).glob(f"{glob.escape(prefix)}*.tmp"):
        if held or not _writer_alive(tmp.name):
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
                removed.append(tmp)
    return removed


def _writer_alive(name: str) -> bool:
    match = re.search(r"\.(\d+)-[^.]*\.tmp$", name)
    if match is None:
        return False  # not written by this version's atomic_write: nobody is writing it
    try:
        os.kill(int(match.group(1)), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


METRICS_KEYS = ("epoch", "train_loss", "val_loss", "best_val", "lr", "net_seconds", "backtracked")  # metrics.jsonl


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """A run's metrics.jsonl (none: []), damaged lines skipped with a warning (see :func:`read_jsonl`)."""
    return read_jsonl(path, METRICS_KEYS) if Path(path).is_file() else []


def read_jsonl(path: Path, keys: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The JSON objects of ``path``, one a line, each holding ``keys``. A line that is not one (a partial
    last line left by a process killed while appending, a damaged byte) is skipped with a
    :class:`SwarmctlWarning`."""
    records, bad = [], []
    for number, line in enumerate(Path(path).read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            record = None
        if isinstance(record, dict) and all(k in record for k in keys):
            records.append(record)
        else:
            bad.append(number)
    if bad:
        lines = ", ".join(map(str, bad[:5])) + (" ..." if len(bad) > 5 else "")
        warnings.warn(f"{path}: skipped {len(bad)} damaged line(s) ({lines})", SwarmctlWarning, stacklevel=2)
    return records

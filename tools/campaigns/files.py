"""The file operations only a campaign needs, on top of :mod:`swarmctl.files` (whose rules they keep: never
through a link, never over a special file, staged with the other writes of a :func:`swarmctl.files.staged_outputs`
block): copy a file, remove one, create a member of an unpacked archive, open a child process's log."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from swarmctl.errors import ResourceError
from swarmctl.files import _check_writable_target, _open_regular, _staging, atomic_write, read_bytes


def copy_file(source: Path, path: Path) -> None:
    """Copy the regular file ``source`` to ``path`` through :func:`swarmctl.files.atomic_write` (staged inside
    :func:`swarmctl.files.staged_outputs`)."""
    atomic_write(path, lambda fh: fh.write(read_bytes(source)), replace=None)


def remove_file(path: Path) -> None:
    """Remove the file ``path``: inside :func:`swarmctl.files.staged_outputs` when the block ends without
    error, with the block's other files (and put back if publishing fails); outside one, at once. The target
    is checked as for a write; a missing file is no error."""
    path = Path(path)
    stage = _staging.get()
    _check_writable_target(path, stage.inputs if stage else ())
    if stage is not None:
        stage.pending.append((None, path, True))
    elif os.path.lexists(path):
        os.unlink(path)


def create_exclusive(path: Path) -> BinaryIO:
    """A new file ``path`` to fill, created exclusively (FileExistsError when the name exists, never
    through a link): for a file in a private folder of this process, such as an archive unpacked member by
    member."""
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    return os.fdopen(fd, "wb")


def open_log_file(path: Path) -> BinaryIO:
    """Open (create) the log ``path`` for appending, as a child process's output, never through a link or
    into a special file (ResourceError)."""
    path = Path(path)
    _check_writable_target(path)
    fd = _open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                       lambda what: ResourceError(f"cannot write {path}: it is {what}; remove it"))
    return os.fdopen(fd, "ab")

"""The file operations only a campaign needs, on top of :mod:`swarmctl.files` (whose rules they keep: never
through a link, never over a special file): copy a file, remove one, a group of changes all made or all undone,
create a member of an unpacked archive, open a child process's log."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from swarmctl.files import atomic_write, check_output_file, open_regular, read_bytes, remove_folders


def copy_file(source: Path, path: Path) -> None:
    """Copy the regular file ``source`` to ``path`` through :func:`swarmctl.files.atomic_write` (staged inside
    :func:`swarmctl.files.staged_outputs`)."""
    atomic_write(path, lambda fh: fh.write(read_bytes(source)), replace=None)


def remove_file(path: Path) -> None:
    """Remove the file ``path`` (checked as for a write; a missing file is no error)."""
    check_output_file(path)
    Path(path).unlink(missing_ok=True)


@contextlib.contextmanager
def all_or_none(paths: Iterable[Path]) -> Iterator[None]:
    """The campaign commit's all or nothing: when the block fails, even part-way through publishing the
    :func:`swarmctl.files.staged_outputs` block inside it, each of ``paths`` is put back as it was (each
    existing file is kept under a second name, a hard link, until then) and the folders made for them go."""
    paths = [Path(p) for p in paths]
    made = sorted({q for p in paths for q in itertools.takewhile(lambda q: not q.exists(), p.parents)},
                  key=lambda q: len(q.parts))
    kept: dict[Path, Path] = {}
    try:
        for path in filter(os.path.lexists, paths):
            kept[path] = path.with_name(f".{path.name}.{os.getpid()}-kept.tmp")
            kept[path].unlink(missing_ok=True)
            os.link(path, kept[path])
        yield
    except BaseException:
        for path in paths:
            with contextlib.suppress(OSError):
                os.replace(kept[path], path) if path in kept else path.unlink()
        remove_folders(made)
        raise
    finally:
        for second in kept.values():
            second.unlink(missing_ok=True)


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
    check_output_file(path)
    return os.fdopen(open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, "a log file"), "ab")

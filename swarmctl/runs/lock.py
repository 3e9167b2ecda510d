"""The lock of a run: one writer at a time, whatever happened to the last one."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from swarmctl.errors import CheckpointError
from swarmctl.files import holding, make_folders, open_regular, remove_folders, remove_orphan_temps
from swarmctl.rundir import RunDir
from swarmctl.training.device import DistContext


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir``'s exclusive lock (``fcntl.flock`` on its :attr:`RunDir.lock`; the OS releases it
    when the process dies, however it dies) and remove temporary files that killed writers left behind.
    A second writer gets a CheckpointError naming the holder's PID. When the block fails, the lock file and
    the folders this call created are removed again (a failed command leaves nothing new behind)."""
    run_dir = Path(run_dir)
    lock = RunDir(run_dir).lock
    made = make_folders(run_dir)
    lock_made = not lock.exists()
    fh = os.fdopen(open_regular(lock, os.O_RDWR | os.O_CREAT, "a lock file"), "r+b")
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read(64).decode(errors="replace").strip() or "another process"
            raise CheckpointError(f"run {run_dir} is being written by process {holder}; wait for it to end "
                                  f"or stop it (kill {holder}) first") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n".encode())
        fh.flush()
        remove_orphan_temps(run_dir, held=True)
        try:
            with holding(run_dir):
                yield
        except BaseException:
            if lock_made:
                lock.unlink(missing_ok=True)
            remove_folders(made)
            raise
    finally:
        fh.close()  # releases the lock; the file stays, so every writer locks the same file


@contextmanager
def writing(run: RunDir, ctx: DistContext) -> Iterator[None]:
    """Rank 0 holds the run's lock (the other ranks write nothing)."""
    with run_lock(run.path) if ctx.is_main else contextlib.nullcontext():
        yield

"""Fault injection shared by the robustness tests: byte-level faults, special files (links, FIFOs,
folders) in place of a file, failing writes (EFBIG, ENOSPC), the CLI runner, and the contract every
failing command must keep (its one exit code, no traceback, at most 3 lines, no new or changed file)."""

from __future__ import annotations

import contextlib
import errno
import os
import random
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

from swarmctl.cli import app

runner = CliRunner()


@dataclass(frozen=True)
class Fault:
    """One generated fault: ``apply(path)`` damages the file at ``path`` in place."""

    name: str
    apply: Callable[[Path], None]


def cli(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes), hidden ones included."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(Path(root).rglob("*")) if p.is_file()}


def assert_clean_failure(result, root: Path, before: dict[str, bytes], code: int = 1) -> None:
    """The promise for bad input: exit ``code`` (1 for a bad file or value, 2 for a bad option), no
    traceback, a message of at most 3 lines, and every file under ``root`` as it was (no file added,
    removed or changed)."""
    out = result.output
    assert result.exit_code == code, f"exit {result.exit_code}, expected {code}: {out}"
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in out, out
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert 1 <= len(lines) <= 3, out
    after = snapshot(root)
    assert sorted(after) == sorted(before), f"files added or removed: {set(after) ^ set(before)}"
    changed = [k for k in before if after[k] != before[k]]
    assert not changed, f"files changed: {changed}"


# ---- byte-level faults, for any file -------------------------------------------------------------

def truncate(rng: random.Random) -> Fault:
    frac = rng.random()

    def apply(path: Path) -> None:
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * frac)])
    return Fault(f"truncate-{frac:.2f}", apply)


def flip_bits(rng: random.Random) -> Fault:
    n = rng.randint(1, 8)
    picks = [(rng.random(), rng.randrange(8)) for _ in range(n)]

    def apply(path: Path) -> None:
        data = bytearray(path.read_bytes())
        for where, bit in picks:
            data[int(where * len(data))] ^= 1 << bit
        path.write_bytes(bytes(data))
    return Fault(f"flip-{n}-bits", apply)


def overwrite_block(rng: random.Random) -> Fault:
    where, size, seed = rng.random(), rng.choice([16, 64, 512]), rng.randrange(2**32)

    def apply(path: Path) -> None:
        data = bytearray(path.read_bytes())
        start = int(where * max(0, len(data) - size))
        data[start:start + size] = random.Random(seed).randbytes(min(size, len(data) - start))
        path.write_bytes(bytes(data))
    return Fault(f"overwrite-{size}-bytes", apply)


BYTE_FAULTS = (truncate, flip_bits, overwrite_block)


def cases(families: dict[str, Callable[[random.Random], Fault]], seeds: range) -> list[tuple[str, int]]:
    """(family, seed) pairs for pytest.mark.parametrize."""
    return [(name, seed) for name in families for seed in seeds]


# ---- special files in place of a file a command reads or writes ----------------------------------------

PLANTED = ("symlink", "fifo", "folder")


def plant(path: Path, kind: str, outside: Path) -> None:
    """Put ``kind`` in place of the file ``path`` (removed first): a symbolic link to ``outside`` (a file
    outside the command's folders, whose bytes must never change), a FIFO (opening it blocks for ever),
    or a folder."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        path.symlink_to(outside)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


def file_state(path: Path) -> tuple[bytes, int]:
    """Bytes and modification time of ``path``: a file that must be left alone."""
    return path.read_bytes(), path.stat().st_mtime_ns


def assert_no_traceback(result, code: int | None = None) -> None:
    """No traceback, at most 3 lines of output, and exit ``code`` (any of 0 and 1 when None)."""
    out = result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in out, out
    expected = (0, 1) if code is None else (code,)
    assert result.exit_code in expected, f"exit {result.exit_code}: {out}"
    if result.exit_code:
        assert 1 <= len([ln for ln in out.splitlines() if ln.strip()]) <= 3, out


@contextlib.contextmanager
def deadline(seconds: int = 120):
    """Fail (instead of hanging for ever) when the block runs longer than ``seconds``: a command that
    opens a FIFO blocks until a writer comes."""
    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: blocked on a FIFO?")
    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _fd_path(fd: int) -> str:
    """The path an open file descriptor writes to ("" when it has none)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


@contextlib.contextmanager
def failing_writes(name: str, err: int = errno.EFBIG, nth: int = 1):
    """Make the ``nth`` and every later write to a file called ``name`` (or to its temporary sibling
    ``.name.*.tmp``) fail with ``err``, as a full disk (ENOSPC) or a file-size limit (EFBIG, ``ulimit
    -f``) does: the OS's write call itself fails, under every writer swarmctl has."""
    real = os.write
    seen = {"n": 0}

    def write(fd, data):
        target = os.path.basename(_fd_path(fd))
        if target == name or (target.startswith(f".{name}.") and target.endswith(".tmp")):
            seen["n"] += 1
            if seen["n"] >= nth:
                raise OSError(err, os.strerror(err))
        return real(fd, data)

    os.write = write
    try:
        yield seen
    finally:
        os.write = real


@contextlib.contextmanager
def competing_writer(name: str, content: bytes):
    """Another process that creates the file ``name`` (with ``content``) while a command runs: at the first
    write to the command's temporary file for ``name`` (``.name.*.tmp``), after every up-front check."""
    real = os.write
    seen = {"written": False}

    def write(fd, data):
        path = _fd_path(fd)
        base = os.path.basename(path)
        if not seen["written"] and base.startswith(f".{name}.") and base.endswith(".tmp"):
            seen["written"] = True
            with open(os.path.join(os.path.dirname(path), name), "xb") as fh:
                fh.write(content)
        return real(fd, data)

    os.write = write
    try:
        yield seen
    finally:
        os.write = real

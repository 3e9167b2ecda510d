"""The file rules of docs/guarantees.md, in the one module that writes. Each rule names its promise: the
section of docs/guarantees.md ("Outputs", "Input files", "Runs and training", "Terminals and environment")."""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import dataclasses
import errno
import glob
import io
import itertools
import json
import os
import re
import shutil
import stat
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from swarmctl.errors import ConfigError, DataError, OutputExists, ResourceError, SwarmctlWarning
from swarmctl.rundir import LOCK, METRICS_KEYS, is_run_file

_held: set[Path] = set()  # the folders whose one writer this process is (:func:`holding`)
_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFLNK: "a symbolic link", stat.S_IFIFO: "a FIFO (named pipe)",
          stat.S_IFSOCK: "a socket"}


def shipped_folder() -> Path:
    """The folder of shipped models: ``$SWARMCTL_PRETRAINED``, else the package's own ``pretrained/``."""
    return Path(os.environ.get("SWARMCTL_PRETRAINED") or Path(__file__).resolve().parent / "pretrained")


@contextlib.contextmanager
def holding(folder: Path) -> Iterator[None]:
    """"Outputs": a run's own files and shipped models are written only by their folder's one writer."""
    folder = Path(folder).resolve()
    _held.add(folder)
    try:
        yield
    finally:
        _held.discard(folder)


def _refuse_special(path: Path | int, message: str, name: Path | None = None, follow: bool = False) -> None:
    """ResourceError(``message``) when ``path`` (or a descriptor) is no regular file; ``follow``: through a link."""
    try:
        mode = os.fstat(path).st_mode if isinstance(path, int) else (os.stat if follow else os.lstat)(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    if not stat.S_ISREG(mode):
        raise ResourceError(message.format(path=name or path, what=_KINDS.get(stat.S_IFMT(mode), "a device file")))


_UNREADABLE = "cannot read {path}: it is {what}, not a regular file; replace it with the file"


def check_regular_file(path: Path) -> None:
    """"Input files": a FIFO, folder or device file in place of a file a command reads (links are followed)."""
    _refuse_special(path, _UNREADABLE, follow=True)


def read_bytes(path: Path) -> bytes:
    """The regular file ``path``, opened without waiting on a FIFO (:func:`check_regular_file`)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        _refuse_special(fd, _UNREADABLE, Path(path))
        os.set_blocking(fd, True)
        return fh.read()


def check_plain_files(*paths: Path) -> None:
    """"Outputs": no link, FIFO or folder in place of a run's own files (before the run is read or written)."""
    for path in paths:
        _refuse_special(path, "{path} is {what}, not a file swarmctl wrote; remove it (or move it away) and try again")


def _resolved(path: Path) -> Path:
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):  # a link loop: compare as given
        return Path(os.path.abspath(path))


def check_output_folder(folder: Path, target: Path | None = None) -> None:
    """"Outputs": an output path that lies under a file or cannot be written is refused, before any work."""
    for parent in filter(os.path.exists, [Path(folder), *Path(folder).parents]):
        if not parent.is_dir():
            raise ResourceError(f"cannot write {target or folder}: {parent} is a file, not a folder; choose another "
                                "path")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise ResourceError(f"cannot write {target or folder}: {parent} is not writable; choose a folder you can "
                                "write to")
        return


def check_output_file(path: Path, inputs: Iterable[Path | None] = ()) -> None:
    """"Outputs": refused with or without --force, before any work: a link, FIFO or folder in its place, an
    input, a run's lock, a run's own file or a shipped model (unless this process holds its folder)."""
    path = Path(path)
    if os.path.isdir(path) and not os.path.islink(path):
        raise ResourceError(f"cannot write {path}: it is a folder; give a file path")
    _refuse_special(path, "cannot write {path}: it is {what}, which swarmctl never writes through or replaces; "
                          "remove it or choose another path")
    target = _resolved(path)
    for source in filter(None, inputs):
        if _resolved(Path(source)) == target or os.path.exists(path) and os.path.exists(source) and \
                os.path.samefile(path, source):  # one file under two names
            raise ResourceError(f"cannot write {path}: it is an input of this command ({source}); choose another "
                                "output path")
    if target.name == LOCK:
        raise ResourceError(f"cannot write {path}: {LOCK} is the name of a run's lock file, which swarmctl never "
                            "replaces; choose another output path")
    if target.parent not in _held and is_run_file(target):
        raise ResourceError(f"cannot write {path}: it is a file of the run in {path.parent}, which only training "
                            "writes; choose another output path")
    if target.parent not in _held and target.parent in {_resolved(Path(__file__).parent / "pretrained"),
                                                         _resolved(shipped_folder())}:
        raise ResourceError(f"cannot write {path}: it is in the folder of shipped models ({target.parent}), which "
                            "swarmctl never writes over; choose another output path")
    check_output_folder(path.parent, path)


def _check_new(path: Path, replace: bool) -> None:
    """"Outputs": an output you named that exists is replaced only with --force."""
    if not replace and os.path.lexists(path):
        raise OutputExists(f"{path} exists; pass `force` to overwrite it or choose another path")


def check_png(path: Path | None, name: str) -> Path | None:
    """Refuse a figure path (from the parameter ``name``) that does not end in .png: a value wrong in itself."""
    if path is not None and Path(path).suffix.lower() != ".png":
        raise ConfigError(f"{path} does not end in .png; `{name}` is a PNG file: give a name such as figure.png")
    return path


# ---- a command's outputs, all or none ----------------------------------------------------------------------

@dataclasses.dataclass
class Outputs:
    """The files of one :func:`staged_outputs` block; each output is checked when the command names it."""

    inputs: list[Path]
    replace: bool
    pending: list[tuple[str, Path, bool]] = dataclasses.field(default_factory=list)  # (temporary file, target,
    # may it replace a file)
    created: list[Path] = dataclasses.field(default_factory=list)  # folders made, outermost first
    named: dict[Path, tuple[Path, str | None, bool]] = dataclasses.field(default_factory=dict)  # resolved ->
    # (path, the parameter naming it, may it replace a file)

    def input(self, *paths: Path | None) -> None:
        """Files the command reads; the outputs named so far are checked against them too."""
        self.inputs.extend(new := [Path(p) for p in paths if p is not None])
        for path, _, _ in self.named.values():
            check_output_file(path, new)

    def folder(self, folder: Path | str) -> Path:
        check_output_folder(Path(folder))
        return Path(folder)

    def file(self, path: Path | str, name: str | None = None, *, replace: bool | None = None) -> Path:
        """Check the output ``path`` (``replace``: the block's unless given); ``name``: the parameter naming it."""
        path, may_replace = Path(path), self.replace if replace is None else replace
        check_output_file(path, self.inputs)
        earlier = self.named.setdefault(_resolved(path), (path, name, may_replace))[1]
        if None not in (earlier, name) and earlier != name:  # "Option values": `cluster --out` and `--plot`
            raise ConfigError(f"`{earlier}` and `{name}` name the same file {path}; give each its own path")
        _check_new(path, may_replace)
        return path


_staging: contextvars.ContextVar[Outputs | None] = contextvars.ContextVar("swarmctl_staging", default=None)


@contextlib.contextmanager
def staged_outputs(inputs: Iterable[Path | None] = (), *, replace: bool = True) -> Iterator[Outputs]:
    """"Outputs": a command's several outputs are renamed only once all are written, and a command that fails
    leaves no new file or folder. ``replace`` False (no --force): no file is replaced."""
    stage = Outputs([Path(p) for p in inputs if p is not None], replace)
    token, done = _staging.set(stage), False
    try:
        yield stage
        _publish(stage.pending)
        done = True
    finally:
        _staging.reset(token)
        for tmp, _, _ in stage.pending:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)  # after a hard link, its second name
        if not done:
            remove_folders(stage.created)


@contextlib.contextmanager
def immediate_writes() -> Iterator[None]:
    """Inside :func:`staged_outputs`, a write that appears at once: a file the command reads next."""
    token = _staging.set(None)
    try:
        yield
    finally:
        _staging.reset(token)


def _publish(pending: list[tuple[str, Path, bool]]) -> None:
    """Give each temporary file its target's name, then sync the folders. The new files first, by hard link
    ("Outputs": an output that another process creates meanwhile is never replaced without --force); when one
    cannot take its name, those already published go again ("a command that fails leaves no new file")."""
    linked: list[Path] = []
    try:
        for tmp, path, replace in sorted(pending, key=lambda p: p[2]):
            if replace:
                _rename(tmp, path)
            else:
                _link_new(tmp, path)
                linked.append(path)
    except BaseException:
        for path in linked:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise
    for folder in {path.parent for _, path, _ in pending}:
        with contextlib.suppress(OSError):  # where the file system can sync a folder: the new names too
            fd = os.open(folder, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _rename(tmp: str, path: Path) -> None:
    os.replace(tmp, path)


def _link_new(tmp: str, path: Path) -> None:
    """``tmp`` as the new file ``path`` (where the file system has no hard links: the name taken with
    O_EXCL, then replaced); OutputExists when the name exists."""
    try:
        try:
            os.link(tmp, path)
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
                raise
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
            os.replace(tmp, path)
    except FileExistsError:
        raise OutputExists(f"{path} exists (it appeared while this command ran); pass `force` to overwrite it "
                           "or choose another path") from None
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None


# ---- one file ------------------------------------------------------------------------------------------------

def atomic_write(path: Path, write: Callable[[BinaryIO], None], *, replace: bool | None = None) -> None:
    """"Outputs": every file is written to a temporary file (synced) and renamed; ``write(buffer)`` fills
    a buffer, so that no library opens the target. ``replace``: see :func:`staged_outputs` (None: the
    block's, outside one True). A failed write is an OSError naming ``path`` ("A full disk ...")."""
    path, stage = Path(path), _staging.get()
    named = stage.named.get(_resolved(path)) if stage else None
    if replace is None:
        replace = stage is None or stage.replace or bool(named and named[2])
    check_output_file(path, stage.inputs if stage else ())
    _check_new(path, replace)
    buffer = io.BytesIO()
    write(buffer)
    _write_beside(path, lambda fd, tmp: _write_all(fd, buffer.getbuffer(), path), replace)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda fh: fh.write(text.encode()))


def atomic_write_file(path: Path, write: Callable[[str], None]) -> None:
    """:func:`atomic_write` for a writer that needs a file name (the kernel compiler): ``write(tmp)``."""
    path, stage = Path(path), _staging.get()
    check_output_file(path, stage.inputs if stage else ())
    _write_beside(path, lambda fd, tmp: write(tmp), True)


def _write_all(fd: int, data: bytes | memoryview, path: Path) -> None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:  # named after the file asked for, not the temporary one
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def _write_beside(path: Path, fill: Callable[[int, str], None], replace: bool) -> None:
    """A temporary file beside ``path`` (the writer's PID in its name, for :func:`remove_orphan_temps`),
    filled and synced, published when the block ends (outside one: a block of its own)."""
    stage = _staging.get()
    if stage is None:
        with staged_outputs():
            return _write_beside(path, fill, replace)
    stage.created.extend(make_folders(path.parent))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}-", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        try:
            fill(fd, tmp)
            os.umask(mask := os.umask(0))
            os.fchmod(fd, 0o666 & ~mask)  # mkstemp creates 0600; give the file the usual permissions
            os.fsync(fd)  # the content is on the disk before the name is
        finally:
            os.close(fd)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)  # the compiler may have removed it
        raise
    stage.pending.append((tmp, path, replace))


def make_folders(folder: Path) -> list[Path]:
    """``mkdir -p folder``; the folders it created, outermost first."""
    missing = list(itertools.takewhile(lambda p: not p.exists(), [folder, *folder.parents]))
    folder.mkdir(parents=True, exist_ok=True)
    return missing[::-1]


def remove_folders(created: list[Path]) -> None:
    """Remove the folders :func:`make_folders` created, innermost first, while they are empty."""
    for folder in reversed(created):
        with contextlib.suppress(OSError):
            folder.rmdir()


def open_regular(path: Path, flags: int, what_file: str) -> int:
    """"Outputs": never writes through a symbolic link, never waits on a FIFO: ``path`` opened with ``flags``,
    a link, FIFO, folder or device in its place refused as not ``what_file`` (one put there meanwhile: ELOOP)."""
    _refuse_special(path, "cannot open {path}: it is {what}, not " + what_file + "; remove it and try again")
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)


def append_line(path: Path, line: str) -> None:
    """Append ``line`` to the log ``path`` (metrics.jsonl); a failed write truncates the file back, so that
    the next line does not join a partial one ("Runs and training")."""
    check_output_file(path)
    fd = open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, "a log file")
    try:
        size = os.fstat(fd).st_size
        try:
            _write_all(fd, (line + "\n").encode(), Path(path))
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


def remove_orphan_temps(folder: Path, prefix: str = ".", *, held: bool = False) -> None:
    """"Runs and training": temporary files a killed writer left are removed (``held``: the caller holds the
    folder's lock, so all are; else those whose writer, the PID in the name, is gone)."""
    for tmp in Path(folder).glob(f"{glob.escape(prefix)}*.tmp"):
        pid = re.search(r"\.(\d+)-[^.]*\.tmp$", tmp.name)
        try:
            if not held and pid is not None:
                os.kill(int(pid[1]), 0)
                continue  # its writer is alive
        except ProcessLookupError:
            pass
        except (OSError, OverflowError):  # another user's process, or no process at all
            continue
        tmp.unlink(missing_ok=True)


def private_temp_folder(name: str) -> Path:
    """"Terminals and environment": ``$TMPDIR/swarmctl-UID/name`` if it is this user's alone, else a fresh
    private folder removed at exit."""
    base = Path(tempfile.gettempdir()) / f"swarmctl-{os.getuid()}"
    with contextlib.suppress(OSError):
        for folder in (base, base / name):
            folder.mkdir(mode=0o700, exist_ok=True)
            st = os.lstat(folder)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
                raise PermissionError(folder)  # planted or foreign
        return base / name
    private = Path(tempfile.mkdtemp(prefix=f"swarmctl-{name}-"))
    atexit.register(shutil.rmtree, private, True)
    return private


# ---- readers -------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def read_errors(path: Path, what: str) -> Iterator[None]:
    """"Input files": an OSError reading ``path`` (which should be ``what``) as one line naming it and the fix."""
    try:
        yield
    except FileNotFoundError:
        raise DataError(f"{path} does not exist; check the path") from None
    except IsADirectoryError:
        raise DataError(f"{path} is a folder; give {what}") from None
    except PermissionError:
        raise DataError(f"{path} is not readable (permission denied); check its permissions") from None
    except OSError as exc:
        raise DataError(f"{path} cannot be read ({exc.strerror or exc}); check the file") from None


def read_json(path: Path, what: str, *, finite: bool = True) -> Any:
    """The JSON value in ``path``, which should be ``what`` (:func:`read_errors`, :func:`parse_json`)."""
    with read_errors(path, what):
        data = read_bytes(path)
    return parse_json(data, f"{path} ({what})", finite=finite)


def parse_json(data: bytes, what: str, *, finite: bool = True) -> Any:
    """``data`` as JSON, in UTF-8, with ``finite`` no NaN or infinity ("Input files"); else a DataError."""
    def reject(text: str) -> float:
        raise ValueError(f"{text} is not a finite number")

    def number(text: str) -> float:
        return reject(text) if abs(value := float(text)) == float("inf") else value

    try:
        return json.loads(data.decode("utf-8"), **({"parse_constant": reject, "parse_float": number} if finite else {}))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise DataError(f"{what} is not valid JSON ({' '.join(str(exc).split())[:100]}); restore or replace "
                        "it") from None


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """A run's metrics.jsonl (none: []); a damaged line is skipped with a warning ("Runs and training")."""
    if not Path(path).exists():
        return []
    records, bad = [], []
    for number, line in enumerate(read_bytes(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:  # UnicodeDecodeError is one
            record = None
        if isinstance(record, dict) and all(k in record for k in METRICS_KEYS):
            records.append(record)
        else:
            bad.append(number)
    if bad:
        lines = ", ".join(map(str, bad[:5])) + (" ..." if len(bad) > 5 else "")
        warnings.warn(f"{path}: skipped {len(bad)} damaged line(s) ({lines})", SwarmctlWarning, stacklevel=2)
    return records

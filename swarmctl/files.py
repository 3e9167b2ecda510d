"""Every file swarmctl writes or reads back goes through here: atomic writes (beside the target, then a
rename) that never follow a link or replace a special file or an input, all-or-nothing groups of
outputs, log appends, the run lock, and reads that refuse a FIFO or folder instead of hanging."""

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

# ---- what may be written, and how it is read --------------------------------------------------------

_held: set[Path] = set()  # folders this process is the writer of (see :func:`holding`)


def shipped_folder() -> Path:
    """The folder of shipped models: ``$SWARMCTL_PRETRAINED``, else the package's own ``pretrained/``."""
    env = os.environ.get("SWARMCTL_PRETRAINED")
    return Path(env) if env else Path(__file__).resolve().parent / "pretrained"


@contextlib.contextmanager
def holding(folder: Path) -> Iterator[None]:
    """Mark ``folder`` as held by this process for the block (its one writer): only then may a run's own
    files be written there, or a shipped model when it is a folder of shipped models."""
    folder = Path(folder).resolve()
    _held.add(folder)
    try:
        yield
    finally:
        _held.discard(folder)


_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFLNK: "a symbolic link", stat.S_IFIFO: "a FIFO (named pipe)",
          stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device file", stat.S_IFBLK: "a device file"}


def _kind(mode: int) -> str | None:
    """None for a regular file, else what the file is, for a message."""
    return None if stat.S_ISREG(mode) else _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _existing_kind(path: Path, stat_call: Callable[[Path], os.stat_result]) -> str | None:
    """What ``path`` is when it exists and is not a regular file (``stat_call``: os.stat follows a link,
    os.lstat looks at the link itself); None for a regular file or nothing."""
    try:
        return _kind(stat_call(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return None


def check_regular_file(path: Path) -> None:
    """Refuse to read ``path`` when it exists but is not a regular file (a folder, a FIFO, a device):
    opening a FIFO blocks for ever. Links are followed (data may be linked in). A missing file passes:
    the reader says what to do about it."""
    what = _existing_kind(path, os.stat)
    if what is not None:
        raise ResourceError(f"cannot read {path}: it is {what}, not a regular file; replace it with the file")


def check_plain_files(*paths: Path) -> None:
    """Refuse a link (never followed), a folder or a special file at any of ``paths``, a run's own files: only
    swarmctl writes them, never through a link, so one planted or left by another tool is refused before
    anything in the run is read, removed or written. A regular file or nothing passes."""
    for path in paths:
        what = _existing_kind(path, os.lstat)
        if what is not None:
            raise ResourceError(f"{path} is {what}, not a file swarmctl wrote; remove it (or move it away) and try "
                                "again")


def read_bytes(path: Path) -> bytes:
    """The content of the regular file ``path`` (a link is followed). A folder, a FIFO or a device is
    refused at once, without blocking (ResourceError); a missing file is FileNotFoundError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        what = _kind(os.fstat(fd).st_mode)
        if what is not None:
            raise ResourceError(f"cannot read {path}: it is {what}, not a regular file; replace it with the file")
        os.set_blocking(fd, True)
        return fh.read()


def _check_writable_target(path: Path, inputs: Iterable[Path] = ()) -> None:
    """Refuse a file ``path`` that a command would replace, before any work, whatever ``--force`` says: a
    link, folder or special file in its place, one of ``inputs`` (the same resolved path, or the same file
    under another name), a run's lock anywhere, or, while this process does not hold the folder, a run's own
    file or a file in a folder of shipped models."""
    path = Path(path)
    what = _existing_kind(path, os.lstat)
    if what == "a folder":
        raise ResourceError(f"cannot write {path}: it is a folder; give a file path")
    if what is not None:
        raise ResourceError(f"cannot write {path}: it is {what}, which swarmctl never writes through or replaces; "
                          "remove it or choose another path")
    target = _resolved(path)
    for source in inputs:
        if source is not None and (_resolved(Path(source)) == target or _same_file(path, Path(source))):
            raise ResourceError(f"cannot write {path}: it is an input of this command ({source}); choose another "
                              "output path")
    if target.name == LOCK:
        raise ResourceError(f"cannot write {path}: {LOCK} is the name of a run's lock file, which swarmctl never "
                          "replaces; choose another output path")
    if target.parent in _held:
        return
    if is_run_file(target):
        raise ResourceError(f"cannot write {path}: it is a file of the run in {path.parent}, which only training "
                          "writes; choose another output path")
    if target.parent in {_resolved(Path(__file__).parent / "pretrained"), _resolved(shipped_folder())}:
        raise ResourceError(f"cannot write {path}: it is in the folder of shipped models ({target.parent}), which "
                          "swarmctl never writes over; choose another output path")


def _same_file(path: Path, other: Path) -> bool:
    """Whether ``path`` is ``other`` under another name (a hard link); False when either is missing."""
    try:
        return os.path.samefile(path, other)
    except OSError:
        return False


def _check_new_target(path: Path, replace: bool) -> None:
    if not replace and os.path.lexists(path):
        raise OutputExists(f"{path} exists; pass `force` to overwrite it or choose another path")


def _resolved(path: Path) -> Path:
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):  # a link loop: compare as given
        return Path(os.path.abspath(path))


# ---- atomic writes --------------------------------------------------------------------------------------

@dataclasses.dataclass
class Outputs:
    """The writes of one :func:`staged_outputs` block, and the outputs and inputs the command names to it
    as it learns them: each output is checked when named, before any work."""

    inputs: list[Path]
    replace: bool
    pending: list[tuple[str | None, Path, bool]] = dataclasses.field(default_factory=list)  # (temporary file or
    # None: remove, target, may replace a file)
    created: list[Path] = dataclasses.field(default_factory=list)  # folders, outermost first
    replaceable: set[Path] = dataclasses.field(default_factory=set)  # may replace a file whatever ``replace`` says
    named: dict[Path, tuple[Path, str | None]] = dataclasses.field(default_factory=dict)  # resolved path ->
    # (path, the parameter naming it)

    def input(self, *paths: Path | None) -> None:
        """Files the command reads, never written; the outputs named so far are checked against them too."""
        new = [Path(p) for p in paths if p is not None]
        self.inputs.extend(new)
        for path, _ in self.named.values():
            check_output_file(path, new)

    def folder(self, folder: Path | str) -> Path:
        check_output_folder(Path(folder))
        return Path(folder)

    def file(self, path: Path | str, name: str | None = None, *, replace: bool | None = None) -> Path:
        """Refuse an output file that may not be written (:func:`check_output_file`), one this block already
        names for another parameter ``name``, and without ``replace`` (the block's unless given: a command's
        default output in a run's own folder is replaced on each run) an existing file; returns it."""
        path = Path(path)
        check_output_file(path, self.inputs)
        key = _resolved(path)
        earlier = self.named.setdefault(key, (path, name))[1]
        if earlier is not None and name is not None and earlier != name:
            raise ConfigError(f"`{earlier}` and `{name}` name the same file {path}; give each its own path")
        may_replace = self.replace if replace is None else replace
        if may_replace:
            self.replaceable.add(key)
        _check_new_target(path, may_replace)
        return path


_staging: contextvars.ContextVar[Outputs | None] = contextvars.ContextVar("swarmctl_staging", default=None)


@contextlib.contextmanager
def staged_outputs(inputs: Iterable[Path | None] = (), *, replace: bool = True) -> Iterator[Outputs]:
    """Make the files written in this block appear together when it ends without error, or not at all
    (docs/design.md, "Files"): every :func:`atomic_write` inside writes its temporary file at once and
    publishes it at the end; on any error every temporary file, published file and created folder goes
    again. No file of ``inputs`` may be written; ``replace`` False (no ``--force``): no file is replaced.
    Yields the block's :class:`Outputs`."""
    stage = Outputs([Path(p) for p in inputs if p is not None], replace)
    token = _staging.set(stage)
    done = False
    try:
        yield stage
        for _, path, _ in stage.pending:
            _check_writable_target(path, stage.inputs)  # nothing was put in its place meanwhile
        _publish(stage.pending)
        done = True
    finally:
        _staging.reset(token)
        for tmp, _, _ in stage.pending:
            if tmp is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        if not done:
            remove_folders(stage.created)


@contextlib.contextmanager
def immediate_writes() -> Iterator[None]:
    """Inside :func:`staged_outputs`, writes in this block publish at once: for a file the command goes on
    to read, such as a dataset generated on first use."""
    token = _staging.set(None)
    try:
        yield
    finally:
        _staging.reset(token)


def check_png(path: Path | None, name: str) -> Path | None:
    """Refuse a figure path that does not end in .png (any case): swarmctl draws PNG files. ``name`` is the
    parameter the path came from, for the message (ConfigError: a value wrong in itself)."""
    if path is not None and Path(path).suffix.lower() != ".png":
        raise ConfigError(f"{path} does not end in .png; `{name}` is a PNG file: give a name such as figure.png")
    return path


def _publish(pending: list[tuple[str | None, Path, bool]]) -> None:
    """Give each temporary file its target's name: first those that may not replace a file, each created
    exclusively, then the others (a rename; a temporary file None removes the target). On an error every target
    is put back as it was. The temporary files are the caller's to remove."""
    created: list[tuple[Path, os.stat_result]] = []
    replaced: list[tuple[Path, str | None]] = []  # (target, where its old file is kept; None: there was none)
    try:
        for tmp, path, replace in sorted(pending, key=lambda p: p[2]):
            if not replace:
                _create_exclusively(tmp, path)
                created.append((path, os.lstat(path)))
                continue
            if tmp is None and not os.path.lexists(path):
                continue  # nothing to remove
            kept = _keep_aside(path, move=tmp is None)
            replaced.append((path, kept))
            if tmp is not None:
                _rename(tmp, path)
    except BaseException:
        for path, st in created:
            with contextlib.suppress(OSError):
                if os.path.samestat(os.lstat(path), st):  # still ours
                    os.unlink(path)
        for path, kept in reversed(replaced):
            with contextlib.suppress(OSError):
                if kept is not None:
                    os.replace(kept, path)
                elif os.path.lexists(path):
                    os.unlink(path)
        raise
    for _, kept in replaced:
        if kept is not None:
            with contextlib.suppress(OSError):
                os.unlink(kept)


def _rename(tmp: str, path: Path) -> None:
    """Publish the temporary file ``tmp`` as ``path`` (the one rename that replaces a file; a test makes
    it fail)."""
    os.replace(tmp, path)


def _keep_aside(path: Path, move: bool) -> str | None:
    """A second name beside ``path`` for the file there (a hard link; a copy where the file system has
    none), or with ``move`` the file itself renamed to it; None when there is no file."""
    if not os.path.lexists(path):
        return None
    fd, kept = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}-", suffix=".tmp", dir=path.parent)
    os.close(fd)
    if move:
        os.replace(path, kept)
        return kept
    os.unlink(kept)
    try:
        os.link(path, kept)
    except OSError:  # a file system without hard links
        shutil.copy2(path, kept)
    return kept


def _create_exclusively(tmp: str, path: Path) -> None:
    """Publish ``tmp`` as ``path`` only if no file has that name: a hard link (atomic, and it fails when
    the name exists); where the file system has no hard links, the name is taken with O_EXCL first and
    then replaced by the temporary file."""
    try:
        try:
            os.link(tmp, path)
            return
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
                raise  # FileExistsError included
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        raise OutputExists(f"{path} exists (it appeared while this command ran); pass `force` to overwrite it "
                           "or choose another path") from None
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    os.replace(tmp, path)  # the name is ours now: hand it the content at once


def make_folders(folder: Path) -> list[Path]:
    """``mkdir -p folder``; the folders it created, outermost first."""
    missing = list(itertools.takewhile(lambda p: not p.exists(), [folder, *folder.parents]))
    folder.mkdir(parents=True, exist_ok=True)
    return missing[::-1]


def remove_folders(created: list[Path]) -> None:
    """Remove the folders :func:`make_folders` created, while they are empty."""
    for folder in reversed(created):  # innermost first; only when empty
        with contextlib.suppress(OSError):
            folder.rmdir()


def atomic_write(path: Path, write: Callable[[BinaryIO], None], *, replace: bool | None = None) -> None:
    """Write ``path`` atomically (docs/design.md, "Files"): ``write(buffer)`` fills an in-memory buffer whose
    bytes go to a temporary file beside ``path``, published as ``path`` (inside :func:`staged_outputs`, when
    the block ends). ``replace`` False: an existing file is refused, and one that appears meanwhile too
    (:class:`OutputExists`); None: as the block says (outside one: replace). A failed write is an OSError
    naming ``path`` and leaves it as it was."""
    path = Path(path)
    stage = _staging.get()
    if replace is None:
        replace = stage is None or stage.replace or _resolved(path) in stage.replaceable
    check_output_file(path, stage.inputs if stage else ())
    _check_new_target(path, replace)
    buffer = io.BytesIO()
    write(buffer)
    _write_beside(path, lambda fd, tmp: _write_all(fd, buffer.getbuffer(), path), replace)


def _write_all(fd: int, data: bytes | memoryview, path: Path) -> None:
    """Write all of ``data`` to ``fd``; an error names ``path`` (the file asked for, not a temporary one)."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def atomic_write_file(path: Path, write: Callable[[str], None]) -> None:
    """:func:`atomic_write` for a writer that needs a file name (a compiler): ``write(tmp)`` writes the
    temporary file, created exclusively beside ``path``, which is then renamed to ``path``. Its errors
    are its own; the target is checked as for :func:`atomic_write`."""
    path = Path(path)
    stage = _staging.get()
    check_output_file(path, stage.inputs if stage else ())
    _write_beside(path, lambda fd, tmp: write(tmp), True)


def _write_beside(path: Path, fill: Callable[[int, str], None], replace: bool) -> None:
    """Create a temporary file beside ``path``, ``fill(fd, tmp)`` it, then publish it (or stage that)."""
    stage = _staging.get()
    created = make_folders(path.parent)
    if stage is not None:
        stage.created.extend(created)
    tmp = None
    try:
        try:  # the writer's PID in the name: remove_orphan_temps leaves a live writer's file alone
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}-", suffix=".tmp", dir=path.parent)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        try:
            fill(fd, tmp)
            mask = os.umask(0)
            os.umask(mask)
            os.fchmod(fd, 0o666 & ~mask)  # mkstemp creates 0600; give the file the usual permissions
        finally:
            os.close(fd)
        if stage is not None:
            stage.pending.append((tmp, path, replace))
        else:
            _publish([(tmp, path, replace)])
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)  # after a hard link, its second name
    except BaseException:
        if tmp is not None and (stage is None or (tmp, path, replace) not in stage.pending):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        if stage is None:
            remove_folders(created)
        raise


def append_line(path: Path, line: str) -> None:
    """Append ``line`` and a newline to the log ``path``, never through a link or into a special file. A
    failed write (a full disk) truncates the file back, so no partial line is left."""
    path = Path(path)
    _check_writable_target(path)
    fd = _open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                       lambda what: ResourceError(f"cannot write {path}: it is {what}; remove it"))
    try:
        size = os.fstat(fd).st_size
        try:
            _write_all(fd, (line + "\n").encode(), path)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


def _open_regular(path: Path, flags: int, refuse: Callable[[str], Exception]) -> int:
    """A descriptor of ``path`` opened with ``flags``, never through a link: a link, folder, FIFO or other
    special file in its place is ``refuse(what it is)``."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise refuse(_kind(os.lstat(path).st_mode) or "not a regular file") from None
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    what = _kind(os.fstat(fd).st_mode)
    if what is not None:
        os.close(fd)
        raise refuse(what)
    os.set_blocking(fd, True)
    return fd


def open_lock_file(path: Path) -> BinaryIO:
    """Open (create) the lock file ``path`` for reading and writing, never through a link."""
    path = Path(path)
    fd = _open_regular(path, os.O_RDWR | os.O_CREAT, lambda what: ResourceError(
        f"cannot lock {path}: it is {what}, not a lock file; remove it and try again"))
    return os.fdopen(fd, "r+b")


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


def check_output_file(path: Path, inputs: Iterable[Path | None] = ()) -> None:
    """Refuse, before any work, an output file that may not be written (:func:`_check_writable_target`) or
    whose folder cannot be written."""
    path = Path(path)
    _check_writable_target(path, [p for p in inputs if p is not None])
    check_output_folder(path.parent, path)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda fh: fh.write(text.encode()))


def private_temp_folder(name: str) -> Path:
    """A folder ``name`` of this user's own under the temporary folder (``$TMPDIR/swarmctl-UID/name``),
    kept between runs when it is a real folder of this user that nobody else can write; else a fresh
    private folder, removed at exit. For caches whose usual place cannot be written."""
    base = Path(tempfile.gettempdir()) / f"swarmctl-{os.getuid()}"
    try:
        base.mkdir(mode=0o700, exist_ok=True)
        folder = base / name
        folder.mkdir(mode=0o700, exist_ok=True)
        for path in (base, folder):
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
                raise PermissionError(f"{path} is not a private folder")
        return folder
    except OSError:
        private = Path(tempfile.mkdtemp(prefix=f"swarmctl-{name}-"))  # planted or foreign: a folder of our own
        atexit.register(shutil.rmtree, private, True)
        return private


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


@contextlib.contextmanager
def read_errors(path: Path, what: str) -> Iterator[None]:
    """An OSError reading ``path`` (which should be ``what``) as a one-line DataError naming it and the fix."""
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
    """The JSON value in ``path``, which should be ``what`` (e.g. "a run's config"); a missing, unreadable
    or invalid file (:func:`parse_json`) is a DataError naming it and the fix."""
    with read_errors(path, what):
        data = read_bytes(path)
    return parse_json(data, f"{path} ({what})", finite=finite)


def parse_json(data: bytes, what: str, *, finite: bool = True) -> Any:
    """``data`` as JSON: UTF-8, and with ``finite`` no NaN or infinite number anywhere (NaN, Infinity,
    1e999); else a DataError naming ``what`` (a file, an archive's member) and the fix."""
    def reject(text: str) -> float:
        raise ValueError(f"{text} is not a finite number")

    def number(text: str) -> float:
        value = float(text)
        return value if value not in (float("inf"), float("-inf")) else reject(text)

    try:
        return json.loads(data.decode("utf-8"), **({"parse_constant": reject, "parse_float": number} if finite else {}))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise DataError(f"{what} is not valid JSON ({' '.join(str(exc).split())[:100]}); restore or replace "
                        "it") from None


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """A run's metrics.jsonl (none: []): the JSON objects holding :data:`METRICS_KEYS`, one a line; a line
    that is not one (cut short by a kill, damaged) is skipped with a :class:`SwarmctlWarning`."""
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

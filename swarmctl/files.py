"""The file rules of docs/guarantees.md, in the one module that writes; each rule names the section whose promise it
keeps: "Outputs", "Input files", "Runs and training" or "Terminals and environment"."""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import errno
import glob
import io
import json
import math
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
_NO_HARD_LINKS = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV)


def shipped_folder() -> Path:
    """The folder of shipped models: ``$SWARMCTL_PRETRAINED``, else the package's own ``pretrained/``."""
    return Path(os.environ.get("SWARMCTL_PRETRAINED") or Path(__file__).resolve().parent / "pretrained")


@contextlib.contextmanager
def holding(folder: Path) -> Iterator[None]:
    """"Outputs": a run's own files and shipped models are written only by their folder's one writer."""
    folder = Path(os.path.realpath(folder))
    _held.add(folder)
    try:
        yield
    finally:
        _held.discard(folder)


def check_regular_file(path: Path, what_file: str | None = None, *, follow: bool = True,
                       fd: int | None = None) -> None:
    """"Input files": no FIFO, folder or device read (``fd``: as opened); "Outputs" (not ``follow``): nor a link."""
    try:
        mode = os.stat(path if fd is None else fd, follow_symlinks=follow).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    if stat.S_ISREG(mode):
        return
    kind = _KINDS.get(stat.S_IFMT(mode), "a device file")
    if follow:
        raise ResourceError(f"cannot read {path}: it is {kind}, not a regular file; replace it with the file")
    why = f"not {what_file}" if what_file else "which swarmctl never writes through or replaces"
    raise ResourceError(f"cannot write {path}: it is {kind}, {why}; remove it or choose another path")


def read_bytes(path: Path) -> bytes:
    """The regular file ``path``, opened without waiting on a FIFO ("Input files")."""
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as fh:
        check_regular_file(path, fd=fh.fileno())  # then O_NONBLOCK changes nothing
        return fh.read()


def check_output_folder(folder: Path, target: Path | None = None) -> Path:
    """"Outputs": an output path that lies under a file or cannot be written is refused, before any work."""
    for parent in filter(os.path.exists, [Path(folder), *Path(folder).parents]):  # the nearest that exists
        if not parent.is_dir():
            raise ResourceError(f"cannot write {target or folder}: {parent} is a file, not a folder; choose another "
                                "path")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise ResourceError(f"cannot write {target or folder}: {parent} is not writable; choose a folder you can "
                                "write to")
        break
    return Path(folder)


def check_output_file(path: Path, inputs: Iterable[Path | None] = ()) -> None:
    """"Outputs": refused even with --force: a link, FIFO or folder, an input, a lock, a run's file, a shipped model."""
    def refuse(why: str) -> None:
        raise ResourceError(f"cannot write {path}: {why}; choose another output path")

    path, target = Path(path), Path(os.path.realpath(path))
    check_regular_file(path, follow=False)
    for source in filter(None, inputs):
        if os.path.realpath(source) == str(target) or os.path.exists(path) and os.path.exists(source) and \
                os.path.samefile(path, source):  # one file under two names
            refuse(f"it is an input of this command ({source})")
    if target.name == LOCK:
        refuse(f"{LOCK} is the name of a run's lock file, which swarmctl never replaces")
    if target.parent not in _held and is_run_file(target):
        refuse(f"it is a file of the run in {path.parent}, which only training writes")
    if target.parent not in _held and target.parent in {Path(os.path.realpath(p)) for p in (
            Path(__file__).parent / "pretrained", shipped_folder())}:
        refuse(f"it is in the folder of shipped models ({target.parent}), which swarmctl never writes over")
    check_output_folder(path.parent, path)


def check_png(path: Path | None, name: str) -> Path | None:
    """"Option values": a figure path (from the parameter ``name``) that does not end in .png is refused."""
    if path is not None and Path(path).suffix.lower() != ".png":
        raise ConfigError(f"{path} does not end in .png; `{name}` is a PNG file: give a name such as figure.png")
    return path


class staged_outputs:  # noqa: N801 (used as a function: ``with staged_outputs(...) as outputs``)
    """"Outputs": a command's files, each checked when named, appear all together when the block ends, or none do, nor
    the folders made for them; ``replace`` False: no --force. A block inside another publishes when it ends."""

    def __init__(self, inputs: Iterable[Path | None] = (), *, replace: bool = True) -> None:
        self.inputs, self.replace = [Path(p) for p in inputs if p is not None], replace
        self.named: dict[str, tuple[Path, bool]] = {}  # resolved path -> (the output as named, its replace)
        self.pending: list[tuple[Path, Path, bool]] = []  # (temporary file, target, replace)
        self.created: list[Path] = []  # folders made, outermost first

    def input(self, *paths: Path | None) -> None:
        """Files the command reads; the outputs named so far are checked against them too."""
        self.inputs.extend(new := [Path(p) for p in paths if p is not None])
        for path, _ in self.named.values():
            check_output_file(path, new)

    def file(self, path: Path | str, *, replace: bool | None = None) -> Path:
        """Check the output ``path``: one that exists is replaced only with --force (``replace``, else the block's)."""
        path, replace = Path(path), self.replace if replace is None else replace
        check_output_file(path, self.inputs)
        self.named.setdefault(os.path.realpath(path), (path, replace))
        if not replace and os.path.lexists(path):
            raise OutputExists(f"{path} exists; pass `force` to overwrite it or choose another path")
        return path

    folder = staticmethod(check_output_folder)

    def write(self, path: Path, fill: Callable[[int, Path], None], replace: bool | None) -> None:
        """Check ``path``, then ``fill`` a temporary file beside it named with the PID (:func:`remove_orphan_temps`)."""
        if replace is None:  # the output's own, as the command named it, else the block's
            replace = self.named.get(os.path.realpath(path), (path, self.replace))[1]
        self.file(path, replace=replace)
        self.created.extend(make_folders(path.parent))
        tmp = path.parent / f".{path.name}.{os.getpid()}-{os.urandom(4).hex()}.tmp"
        with _named_after(path):
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        try:
            fill(fd, tmp)
            os.fsync(fd)  # the content is on the disk before the name is
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        self.pending.append((tmp, path, replace))

    def __enter__(self) -> staged_outputs:
        self._token = _staging.set(self)
        return self

    def __exit__(self, failed: type[BaseException] | None, *_: object) -> None:
        _staging.reset(self._token)
        done = False
        try:
            if failed is None:
                self._publish()
                done = True
        finally:
            for tmp, _, _ in self.pending:
                tmp.unlink(missing_ok=True)  # after a hard link, its second name
            if not done:
                remove_folders(self.created)

    def _publish(self) -> None:
        """Each file takes its name, new ones first by hard link, which fails where another process took the name
        meanwhile ("Outputs": never replaced without --force; those linked go again); then the folders are synced."""
        linked: list[Path] = []
        try:
            for tmp, path, replace in sorted(self.pending, key=lambda p: p[2]):
                with _named_after(path):
                    if replace:
                        os.replace(tmp, path)
                    else:
                        try:
                            os.link(tmp, path)
                        except OSError as exc:  # no hard links on this file system: the name taken with O_EXCL
                            if exc.errno not in _NO_HARD_LINKS:
                                raise
                            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC))
                            os.replace(tmp, path)
                        linked.append(path)
        except BaseException:
            for path in linked:
                path.unlink(missing_ok=True)
            raise
        for folder in {path.parent for _, path, _ in self.pending}:
            with contextlib.suppress(OSError):  # where the file system can sync a folder: the new names too
                fd = os.open(folder, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)


_staging: contextvars.ContextVar[staged_outputs | None] = contextvars.ContextVar("swarmctl_staging", default=None)


@contextlib.contextmanager
def _named_after(path: Path) -> Iterator[None]:
    """"Outputs": a failed write names the file asked for, not its temporary file; a name taken meanwhile exists."""
    try:
        yield
    except FileExistsError:
        raise OutputExists(f"{path} exists (it appeared while this command ran); pass `force` to overwrite it "
                           "or choose another path") from None
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def atomic_write(path: Path, write: Callable[[BinaryIO], None], *, replace: bool | None = None) -> None:
    """"Outputs": ``write`` fills a buffer (no library opens the target), synced in a temporary file, renamed."""
    def fill(fd: int, tmp: Path) -> None:
        buffer = io.BytesIO()
        write(buffer)
        view = buffer.getbuffer()
        with _named_after(Path(path)):
            while view:  # os.write may take a part
                view = view[os.write(fd, view):]

    _write_beside(Path(path), fill, replace)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda fh: fh.write(text.encode()))


def atomic_write_file(path: Path, write: Callable[[str], None]) -> None:
    """:func:`atomic_write` for a writer that needs a file name (the kernel compiler): ``write(tmp)``."""
    _write_beside(Path(path), lambda fd, tmp: write(str(tmp)), True)


def _write_beside(path: Path, fill: Callable[[int, Path], None], replace: bool | None) -> None:
    """A temporary file for ``path``, published when the block ends (outside one, a block of its own)."""
    stage = _staging.get()
    with staged_outputs() if stage is None else contextlib.nullcontext(stage) as outputs:
        outputs.write(path, fill, replace)


def make_folders(folder: Path) -> list[Path]:
    """``mkdir -p folder``; the folders it created, outermost first."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    return missing[::-1]


def remove_folders(created: list[Path]) -> None:
    """Remove the folders :func:`make_folders` created, innermost first, while they are empty."""
    for folder in reversed(created):
        with contextlib.suppress(OSError):
            folder.rmdir()


def open_regular(path: Path, flags: int, what_file: str) -> int:
    """"Outputs": ``path`` opened with ``flags``, never through a link or on a FIFO (one put there meanwhile: ELOOP)."""
    check_regular_file(path, what_file, follow=False)
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)


def remove_orphan_temps(folder: Path, prefix: str = ".", *, held: bool = False) -> None:
    """"Runs and training": temporary files a killed writer left are removed (``held``: all, as the folder's lock
    holder; else those whose writer, the PID in the name, is gone)."""
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
    """"Terminals and environment": ``$TMPDIR/swarmctl-UID/name`` if this user's alone, else a private one for now."""
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
    def number(text: str) -> float:
        if not math.isfinite(value := float(text)):
            raise ValueError(f"{text} is not a finite number")
        return value

    try:
        return json.loads(data.decode("utf-8"), **({"parse_constant": number, "parse_float": number} if finite else {}))
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

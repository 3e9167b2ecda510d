"""The process's standard streams and terminal settings, made safe before a command runs, and how a failed
write to standard output is told from other errors. Imports nothing heavy: `swarmctl.cli.main` calls it
before the commands (and PyTorch) load."""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import sys

MIN_COLUMNS = 40  # a COLUMNS below this (0, 5) is ignored: the terminal's own width, or 80, is used
_SIZES = {"COLUMNS": MIN_COLUMNS, "LINES": 1, "TERMINAL_WIDTH": MIN_COLUMNS}  # variable -> least usable value
_ERROR_HANDLER = "swarmctl-escape"
STREAM_ERRNOS = {errno.EPIPE, errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG}  # what a failed write gives


def _escape(exc: UnicodeError) -> tuple[str | bytes, int]:
    """Encoding error handler for the standard streams: a byte of a file name the locale could not decode
    (a lone surrogate, PEP 383) is written back as that byte; any other character the encoding lacks
    (``é`` in an ASCII terminal) as its backslash escape."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    chunk = exc.object[exc.start:exc.end]
    if all("\udc80" <= c <= "\udcff" for c in chunk):
        return bytes(ord(c) - 0xDC00 for c in chunk), exc.end
    return chunk.encode("ascii", "backslashreplace").decode("ascii"), exc.end


codecs.register_error(_ERROR_HANDLER, _escape)


def prepare() -> None:
    """Standard streams and terminal settings a command can use: /dev/null opened on a standard stream the
    process started with closed (``cmd >&-``), so that no file swarmctl opens takes descriptor 0, 1 or 2
    (``sys.stdin`` and friends stay None: text for a closed stream is dropped, ``-`` is refused); any text
    printable on stdout and stderr (:func:`_escape`); COLUMNS, LINES or TERMINAL_WIDTH removed when not a
    whole number of a usable size (0 and 5 fold every line; Typer cannot even start on TERMINAL_WIDTH=abc)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None and hasattr(stream, "reconfigure"):
            with contextlib.suppress(ValueError, OSError):  # closed, or detached by a test harness
                stream.reconfigure(errors=_ERROR_HANDLER)
    for name, least in _SIZES.items():
        value = os.environ.get(name)
        if value is not None and not (value.strip().isdigit() and int(value) >= least):
            del os.environ[name]


def stdout_failed(exc: BaseException) -> OSError | None:
    """The error of a standard stream failing (a full disk, a closed pipe) behind ``exc``, or None: an
    OSError of a kind writes give and without a file name (every file swarmctl writes names itself in its
    errors), in ``exc`` or what it was raised while handling. Standard output is then pointed at /dev/null,
    so that text still buffered cannot fail again when the process exits."""
    error: BaseException | None = exc
    while error is not None and not (isinstance(error, OSError) and error.errno in STREAM_ERRNOS):
        error = error.__context__
    if not isinstance(error, OSError) or error.filename is not None or error.strerror is None:
        return None
    if sys.stdout is not None:
        with contextlib.suppress(OSError, ValueError, AttributeError):  # io.UnsupportedOperation: no descriptor
            sys.stdout.flush()
        with contextlib.suppress(OSError, ValueError, AttributeError):
            fd, null = sys.stdout.fileno(), os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)
    return error


def stdout_line(exc: OSError) -> str:
    """The one line for standard output that cannot be written."""
    why = (exc.strerror or "write error").lower()
    return (f"cannot write to standard output ({why}); send it somewhere that takes it (a disk with free space, "
            "a pipe that is read to the end)")

"""User-facing errors and the exit codes of docs/guarantees.md: a :class:`ConfigError` (a value wrong in itself) exits
2, like a value Typer refuses, any other :class:`SwarmctlError` (a file, a run, the machine) 1."""

import errno
import shlex
from collections.abc import Iterable

OK, ERROR, USAGE, SIGNAL = 0, 1, 2, 130  # done; a file, run or the machine; an option value; SIGINT or SIGTERM


class SwarmctlError(Exception):
    """A problem the user can fix (bad option, bad file); never a bug."""


class ConfigError(SwarmctlError):
    """A configuration value out of range, of the wrong kind, or inconsistent with another."""


class ResourceError(SwarmctlError):
    """Valid values the machine or the file system cannot serve: memory, CUDA, an output path."""


class OutputExists(ResourceError):
    """An output that may not replace a file (no ``--force``) found one at its path."""


class SpecError(SwarmctlError):
    """A sweep spec file is missing or malformed (an input file, not an option)."""


class DataError(SwarmctlError):
    """A dataset file is missing, malformed or does not match its checksum."""


class CheckpointError(SwarmctlError):
    """A checkpoint or run directory is missing or belongs to another model or version."""


class SwarmctlWarning(UserWarning):
    """Something was skipped or repaired that the user should know; the CLI prints one "warning:" line."""


_OS_FIXES = {  # the fix for a cause; where none is here, "check the path"
    errno.EISDIR: "it is a folder; give a file path",
    errno.ENOTDIR: "a part of the path is a file, not a folder; choose another path",
    errno.ENAMETOOLONG: "choose a shorter path",
    errno.ENOSPC: "the disk is full; free space or choose another folder",
    errno.EDQUOT: "free space or choose another folder",
    errno.EFBIG: "the file-size limit (ulimit -f) was reached; raise it or choose a smaller output",
    errno.ELOOP: "a link points in a circle or swarmctl refused to follow it; remove it",
    **dict.fromkeys((errno.EACCES, errno.EPERM, errno.EROFS), "choose a folder you can write to"),
}


def describe_os_error(exc: OSError) -> str:
    """An OSError as one line: the file, the cause and a fix."""
    if exc.strerror is None:  # h5py and others raise OSError with only a message
        return " ".join(str(exc).split())[:300] + "; check the path"
    what = f"{exc.filename}: " if exc.filename is not None else ""
    return f"{what}{exc.strerror.lower()}; {_OS_FIXES.get(exc.errno or 0, 'check the path')}"


def shell_command(command: str, *words: object, **options: object) -> str:
    """A swarmctl command as a shell line that works as printed: ``swarmctl train swarm --resume 'r 1'``."""
    parts = ["swarmctl", command, *(shlex.quote(str(w)) for w in words)]
    for name, value in options.items():
        parts.append("--" + name.replace("_", "-"))
        if value is not True:
            parts.append(shlex.quote(str(value)))
    return " ".join(parts)


def command_line(command: str, *words: object, **options: object) -> str:
    """A command to run next, for a message's fix: :func:`shell_command` in backticks."""
    return "`" + shell_command(command, *words, **options) + "`"


def plural(n: int, word: str) -> str:
    """``plural(1, "cluster")`` is ``1 cluster``, ``plural(1200, "point")`` ``1,200 points``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def either(words: Iterable[object], last: str = "or") -> str:
    """Values in prose: ``either(("mean", "causal"))`` is ``mean or causal``; three or more ``a, b or c``."""
    items = [str(w) for w in words]
    return f"{', '.join(items[:-1])} {last} {items[-1]}" if len(items) > 1 else "".join(items)

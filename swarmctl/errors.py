"""User-facing errors: the CLI turns these into a one-line message and an exit code.

One rule decides the code: a value (or combination of values) given as an option that is wrong in itself,
whatever the files and the machine, is a :class:`ConfigError` and exits 2, like a value Typer refuses; a
problem with a file, a run, a sweep spec or the machine (memory, a missing CUDA device, an output path that
cannot be written) exits 1.
"""


class SwarmctlError(Exception):
    """A problem the user can fix (bad option, bad file); never a bug. Exit code 1 unless a subclass says."""


class ConfigError(SwarmctlError):
    """A configuration value is out of range, of the wrong kind, or inconsistent with another: exit 2."""


class ResourceError(SwarmctlError):
    """The machine or the file system cannot do what was asked with valid values: the estimated memory
    exceeds the machine's, CUDA is not available, an output path cannot be written. Exit 1."""


class OutputExists(ResourceError):
    """An output that may not replace a file (no ``--force``) found one at its path, perhaps written by
    another command meanwhile. Exit 1."""


class SpecError(SwarmctlError):
    """A sweep spec file is missing or malformed (an input file, not an option): exit 1."""


class DataError(SwarmctlError):
    """A dataset file is missing, malformed or does not match its checksum."""


class CheckpointError(SwarmctlError):
    """A checkpoint or run directory is missing or belongs to another model or version."""


class SwarmctlWarning(UserWarning):
    """Something was skipped or repaired and the user should know (a damaged run file, say); the CLI
    prints it as one line starting with "warning:"."""

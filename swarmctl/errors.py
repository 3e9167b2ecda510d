"""User-facing errors: the CLI turns these into a one-line message and exit code 1."""


class SwarmctlError(Exception):
    """A problem the user can fix (bad option, bad file); never a bug."""


class ConfigError(SwarmctlError):
    """A configuration value is out of range or inconsistent."""


class DataError(SwarmctlError):
    """A dataset file is missing, malformed or does not match its checksum."""


class CheckpointError(SwarmctlError):
    """A checkpoint or run directory is missing or belongs to another model or version."""


class SwarmctlWarning(UserWarning):
    """Something was skipped or repaired and the user should know (a damaged run file, say); the CLI
    prints it as one line starting with "warning:"."""

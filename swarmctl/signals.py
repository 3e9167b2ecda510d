"""SIGINT and SIGTERM, one path (docs/design.md, "Signals"): from a command's start to its last line a signal
raises :class:`Interrupted` (:class:`Interruption`), so that atomic writes remove their temporary files on the
way out and `swarmctl.cli.run` ends the command with one line and exit 130; a run being trained turns them
into the flag of :class:`StopSignals`, which the trainer answers between batches with a saved last.pt.
Handlers are installed in the main thread only (elsewhere Python refuses them)."""

from __future__ import annotations

import signal
import threading
from typing import Any


def install(handler: Any) -> dict[int, Any]:
    """``handler`` for SIGINT and SIGTERM from now on; the handlers it replaced (for :func:`restore`)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}


def restore(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        if handler is not None:  # None: a handler not set from Python, which cannot be set back
            signal.signal(sig, handler)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM, raised like Ctrl-C. ``args``: the signal's name, and the report to print instead of
    the usual line (a saved run's)."""


class Interruption:
    """A command's handler: it raises :class:`Interrupted` until the command's exit code is decided (``done``;
    a signal is then dropped). ``hint``: how to continue, set by the command once it knows it; ``starting``:
    its modules still load, nothing is written yet; ``signal``: the name of the one received."""

    def __init__(self, starting: bool = False) -> None:
        self.starting, self.done = starting, False
        self.hint: str | None = None
        self.signal: str | None = None

    def __call__(self, signum: int, frame: Any) -> None:
        if not self.done:
            self.signal = signal.Signals(signum).name
            raise Interrupted(self.signal)

    def line(self, exc: BaseException | None = None) -> str:
        """The one line a command stopped by ``exc`` (or by a signal Python dropped) ends with."""
        if isinstance(exc, Interrupted) and len(exc.args) > 1:
            return exc.args[1]
        name = exc.args[0] if isinstance(exc, Interrupted) and exc.args else self.signal or "SIGINT"
        if self.starting:
            return f"error: interrupted ({name}) while starting; nothing was written"
        return (f"error: interrupted ({name}); nothing half-written was left behind"
                + (f"; continue with: {self.hint}" if self.hint else ""))


class StopSignals:
    """Signals as a flag, ``received`` (the signal's name), that the trainer checks between batches. Callers
    that write a run enter it before the run's first file, so a signal at any later point saves last.pt."""

    received: str | None = None

    def __enter__(self) -> StopSignals:
        self._previous = install(self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signal.Signals(signum).name

    def __exit__(self, *exc: object) -> None:
        restore(self._previous)

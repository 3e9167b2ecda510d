"""SIGINT and SIGTERM, one path (docs/design.md, "Signals"): raised as :class:`Interrupted` until a command's exit code
is decided, or a flag the trainer checks between batches (:class:`StopSignals`); handlers in the main thread only."""

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
    """SIGINT or SIGTERM, raised like Ctrl-C; ``args``: the signal's name, and a saved run's report to print instead."""


class Interruption:
    """A command's handler ("Signals": one line, exit 130): it raises :class:`Interrupted` until ``done``."""

    def __init__(self, starting: bool = False) -> None:
        self.starting, self.done = starting, False  # starting: the commands still load, nothing is written yet
        self.hint: str | None = None  # how to continue, once the command knows it
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
    """"Signals" in `train`: a flag, ``received``, checked between batches, so that a signal saves last.pt."""

    received: str | None = None

    def __enter__(self) -> StopSignals:
        self._previous = install(self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signal.Signals(signum).name

    def __exit__(self, *exc: object) -> None:
        restore(self._previous)

"""SIGINT and SIGTERM, one path (docs/design.md, "Signals"): from a command's start to its last line a signal
raises :class:`Interrupted` (:class:`Interruption`), so that atomic writes remove their temporary files on the
way out and `swarmctl.cli.run` ends the command with one line and exit 130; a run being trained turns them
into the flag of :class:`StopSignals`, which the trainer answers between batches with a saved last.pt.
Handlers are installed in the main thread only (elsewhere Python refuses them)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
Handler = Callable[[int, Any], None] | signal.Handlers


def install(handler: Handler) -> dict[int, Any]:
    """``handler`` for SIGINT and SIGTERM from now on; the handlers it replaced (for :func:`restore`)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, handler) for sig in SIGNALS}


def restore(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        if handler is not None:  # None: a handler not set from Python, which cannot be set back
            signal.signal(sig, handler)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM, raised like Ctrl-C so that every atomic write on the way out removes its temporary
    file. ``args``: the signal's name, and the report to print instead of the usual line (a saved run's)."""


class Interruption:
    """A command's signal handling: :meth:`handle` raises :class:`Interrupted` until the command's work has
    ended (``done``: its exit code is decided, the signal is dropped). ``hint``: how to continue, set by the
    command once it knows it; ``starting``: its modules still load, nothing is written yet."""

    def __init__(self, starting: bool = False) -> None:
        self.hint: str | None = None
        self.signal: str | None = None  # the signal received while the work ran
        self.starting, self.done = starting, False

    def handle(self, signum: int, frame: Any) -> None:
        if not self.done:
            self.signal = signal.Signals(signum).name
            raise Interrupted(self.signal)

    def unraisable(self, previous: Any) -> Any:
        """A ``sys.unraisablehook`` that stays quiet about the Interrupted raised inside code Python cannot
        raise from (a weakref callback, a ``__del__``): ``signal`` keeps it, and the command stops once its
        work returns. Anything else goes to ``previous``."""
        def hook(args: Any) -> None:
            if not issubclass(args.exc_type, Interrupted):
                previous(args)
        return hook

    def line(self, exc: KeyboardInterrupt | None = None) -> str:
        """The one line a command stopped by ``exc`` (or by the signal Python dropped) ends with."""
        if isinstance(exc, Interrupted) and len(exc.args) > 1:
            return exc.args[1]
        name = exc.args[0] if isinstance(exc, Interrupted) and exc.args else self.signal or "SIGINT"
        if self.starting:
            return f"error: interrupted ({name}) while starting; nothing was written"
        return (f"error: interrupted ({name}); nothing half-written was left behind"
                + (f"; continue with: {self.hint}" if self.hint else ""))


class StopSignals:
    """Signals turned into a flag, ``received`` (the signal's name), that the trainer checks between batches.
    Callers that write a run enter it before the run's first file, so a signal at any later point ends in a
    saved last.pt."""

    def __init__(self) -> None:
        self.received: str | None = None

    def __enter__(self) -> StopSignals:
        self._previous = install(self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signal.Signals(signum).name

    def __exit__(self, *exc: object) -> None:
        restore(self._previous)

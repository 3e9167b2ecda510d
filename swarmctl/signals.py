"""SIGINT and SIGTERM: the one module that handles them, in the three ways a swarmctl process answers them
(docs/design.md, "Signals"): :func:`install` a handler that ends the process (:func:`ignore` them during the
interpreter's teardown), raise :class:`Interrupted` through :class:`Interruption` so that atomic writes remove
their temporary files on the way out, or set the flag of :class:`StopSignals` that the trainer checks between
batches. Handlers are installed in the main thread only (elsewhere Python refuses them)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_CODE = 130  # the shell's code for a process stopped by SIGINT

Handler = Callable[[int, Any], None] | signal.Handlers


def install(handler: Handler) -> None:
    """``handler`` for SIGINT and SIGTERM from now on (main thread only)."""
    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            signal.signal(sig, handler)


def ignore() -> None:
    """SIGINT and SIGTERM ignored from now on: for the interpreter's last teardown, where Python would give
    them back their default action (an exit 143 with nothing to save)."""
    install(signal.SIG_IGN)


@contextmanager
def handled(handler: Handler) -> Iterator[None]:
    """``handler`` for SIGINT and SIGTERM inside the block (main thread only); the handlers found before
    are back afterwards."""
    old: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in SIGNALS:
            old[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def name(signum: int) -> str:
    return signal.Signals(signum).name


def interrupted_line(signal_name: str, hint: str | None = None) -> str:
    """The one line a command stopped by ``signal_name`` ends with; ``hint``: the command that continues."""
    return (f"interrupted ({signal_name}); nothing half-written was left behind"
            + (f"; continue with: {hint}" if hint else ""))


def starting_line(signal_name: str) -> str:
    """The line of a process stopped while its commands load (nothing has been written yet)."""
    return f"interrupted ({signal_name}) while starting; nothing was written"


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM, raised like Ctrl-C so that every atomic write on the way out removes its temporary
    file. ``args[0]`` is the signal's name."""


def signal_of(exc: KeyboardInterrupt) -> str:
    """The name of the signal ``exc`` stands for: an :class:`Interrupted`'s, or SIGINT (Python's own Ctrl-C)."""
    return exc.args[0] if isinstance(exc, Interrupted) and exc.args else "SIGINT"


@dataclass
class Interruption:
    """Signals raised as :class:`Interrupted` (:meth:`handle`, the handler). ``signal`` is the signal
    received, if any; ``hint``, set by a command once it knows it, is how to continue."""

    hint: str | None = None
    signal: str | None = None

    def handle(self, signum: int, frame: Any) -> None:
        self.signal = name(signum)
        raise Interrupted(self.signal)

    def unraisable(self, previous: Any) -> Any:
        """A ``sys.unraisablehook`` that stays quiet about the Interrupted a signal raised inside a callback
        Python cannot raise from (a weakref callback, a ``__del__``): the signal is recorded in ``signal``
        and the caller stops when that code returns. Anything else goes to ``previous``."""
        def hook(args: Any) -> None:
            if not issubclass(args.exc_type, Interrupted):
                previous(args)
        return hook


class StopSignals:
    """Signals turned into a flag, ``received`` (the signal's name), that the trainer checks between batches.
    Callers that write a run enter it before the run's first file, so a signal at any later point ends in a
    saved last.pt."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._scope = handled(self._handle)

    def __enter__(self) -> StopSignals:
        self._scope.__enter__()
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = name(signum)

    def __exit__(self, *exc: object) -> None:
        self._scope.__exit__(None, None, None)

"""Ctrl-C (and SIGTERM, a supervisor's stop, handled alike) held to the boundaries where stopping is safe: never
inside an import or code compiled from a string (`interrupt`), not before a command starts (`deferred`,
`raising`), not inside what a command holds (`Interrupts`)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

STRING_CODE = ("<string>", "<module>")
"""Where `exec` and `eval` run a string's code (a function it defines is named otherwise, and is safe)."""

RETRY_S = 0.05
"""How soon a Ctrl-C that landed inside an import or a string's code is sent again."""

STOPS = (signal.SIGINT, signal.SIGTERM)
"""Ctrl-C, and the stop `docker stop`, systemd and Kubernetes send: SIGTERM killed a command as SIGKILL does,
leaving `dedup run`'s state up to 2 s behind its outputs."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's KeyboardInterrupt is: everything that stops cleanly on Ctrl-C does on it
    too; the command ends with exit code 143 (128 + 15) instead of 130."""


def _stop(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _inside_an_import_or_a_string(frame: FrameType | None) -> bool:
    """Whether a KeyboardInterrupt raised in `frame` would unwind through an import or through `exec` or `eval`
    of a string (a dataclass made as its module loads, typer reading a command's annotations). The first leaves
    a module half made: scipy's failed as a TypeError with a traceback. The second, in CPython 3.11 under
    `python -m`, marks the interrupt unhandled even once it is (`_Py_UnhandledKeyboardInterrupt`, set in
    `run_eval_code_obj`): after its one line the process killed itself with SIGINT instead of exiting 130."""
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith("<frozen importlib") or (code.co_filename, code.co_name) == STRING_CODE:
            return True
        frame = frame.f_back
    return False


def interrupt(signum: int, frame: FrameType | None) -> None:
    """The handler of `STOPS` while a command runs: a KeyboardInterrupt (`Terminated` for SIGTERM) at once, except
    inside an import or code compiled from a string, where the signal is sent again `RETRY_S` later (both end
    within milliseconds)."""
    if not _inside_an_import_or_a_string(frame):
        raise _stop(signum)
    again = threading.Timer(RETRY_S, os.kill, (os.getpid(), signum))
    again.daemon = True
    again.start()


class _Deferred:
    """A stop asked for before a command started (while the modules load and typer reads the command line)."""

    signum: int | None = None

    @classmethod
    def remember(cls, signum: int, frame: FrameType | None) -> None:
        cls.signum = signum


def deferred() -> None:
    """Ctrl-C and SIGTERM remembered, not raised, until a command starts (`raising`): raised in typer's reading of
    the command line, Ctrl-C ended in a traceback or in click's "Aborted!" and exit code 1."""
    for signum in STOPS:
        signal.signal(signum, _Deferred.remember)


Handler = Callable[[int, FrameType | None], None]


@contextmanager
def _handling(handler: Handler) -> Iterator[bool]:
    """`handler` for every stop while the block runs, then what was there before: the block is told whether it
    runs in the main thread (signals reach it only; elsewhere nothing is installed). The deferral of a
    command's start ends with the command: a stop then ends an exit that hangs, as Python's own handlers do."""
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    previous = {signum: signal.signal(signum, handler) for signum in STOPS}
    try:
        yield True
    finally:
        for signum, before in previous.items():
            if before == _Deferred.remember:
                before = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
            signal.signal(signum, before)


@contextmanager
def raising() -> Iterator[None]:
    """Ctrl-C and SIGTERM raised (`interrupt`) while a command runs, at once if one came before it started."""
    with _handling(interrupt) as installed:
        if installed and _Deferred.signum is not None:
            pending, _Deferred.signum = _Deferred.signum, None
            raise _stop(pending)
        yield


class Interrupts:
    """Ctrl-C (or SIGTERM) waits while held: `dedup run` holds it while a document is decided and written and the
    state commits; `dedup publish` while librdkafka runs (its delivery callbacks are Python: a KeyboardInterrupt
    raised in one comes back as a SystemError, confluent-kafka-python#1708).

    Elsewhere (reading, parsing, embedding) it stops at once: every verdict recorded so far is then in the
    outputs, and committing the state is safe.
    """

    def __init__(self) -> None:
        self._holding = False
        self._pending: int | None = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self._holding:
            interrupt(signum, frame)
            return
        self._pending = signum

    @contextmanager
    def installed(self) -> Iterator[None]:
        with _handling(self._handle):
            yield

    def __enter__(self) -> None:
        self._holding = True

    def __exit__(self, *exc: object) -> None:
        self._holding = False
        if self._pending is not None:
            pending, self._pending = self._pending, None
            raise _stop(pending)

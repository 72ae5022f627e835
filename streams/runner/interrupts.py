"""Ctrl-C held to the boundaries where stopping is safe (`Interrupts`)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Interrupts:
    """Ctrl-C waits while held: `dedup run` holds it while a document is decided and written and while the
    state commits; `dedup publish` while librdkafka runs (its delivery callbacks are Python: a KeyboardInterrupt
    raised in one comes back as a SystemError, confluent-kafka-python#1708).

    Elsewhere (reading, parsing, embedding) it stops at once: every verdict recorded so far is then in the
    outputs, and committing the state is safe.
    """

    def __init__(self) -> None:
        self._holding = False
        self._pending = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self._holding:
            raise KeyboardInterrupt
        self._pending = True

    @contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # signals reach the main thread only
            return
        previous = signal.signal(signal.SIGINT, self._handle)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def __enter__(self) -> None:
        self._holding = True

    def __exit__(self, *exc: object) -> None:
        self._holding = False
        if self._pending:
            self._pending = False
            raise KeyboardInterrupt

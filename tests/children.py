"""Child processes for tests that kill what they run: forked from a server process started clean.

A child forked from the test process itself inherits its threads' locks in whatever state they were: after a
test that ran the embedder (onnxruntime's thread pools), a child that embeds can deadlock. The forkserver is
started once, without them, with the test modules whose functions the children run already imported.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable
from typing import Any

_CHILDREN = multiprocessing.get_context("forkserver")
_CHILDREN.set_forkserver_preload(["tests.test_random_kills", "tests.test_relink"])
KILLED = -signal.SIGKILL
"""A child's exit code when it died by SIGKILL."""


def in_child(target: Callable[..., None], *args: Any) -> int | None:
    """`target(*args)` (a module-level function, its arguments picklable) in a child process; its exit code (1: it
    raised)."""
    child = _CHILDREN.Process(target=target, args=args)
    child.start()
    child.join()
    return child.exitcode

"""The local services the tests start behave as the tests assume."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from streams.evaluation.services import freeze

BUSY = """
import threading
def spin():
    while True:
        pass
for _ in range(3):
    threading.Thread(target=spin, daemon=True).start()
print("ready", flush=True)
spin()
"""


def _states(pid: int) -> str:
    return "".join(
        stat.read_text().rpartition(")")[2].split()[0] for stat in sorted(Path(f"/proc/{pid}/task").glob("*/stat"))
    )


def test_a_frozen_process_has_every_thread_stopped_when_freeze_returns() -> None:
    """SIGSTOP only queues the stop; a busy process's threads run on until one of them takes it (a
    broker acknowledged a whole produce request that way on a loaded machine). Four spinning threads
    on this machine's cores make the window likely; `freeze` must close it every time."""
    for _ in range(20):
        process = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE)
        try:
            assert process.stdout is not None and process.stdout.readline() == b"ready\n"
            freeze(process)
            assert set(_states(process.pid)) <= {"T", "t"}, _states(process.pid)
        finally:
            process.kill()
            process.wait()

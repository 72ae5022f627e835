"""The local services the tests start behave as the tests assume."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from streams.evaluation.services import freeze
from streams.evaluation.stack import Stack

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


def test_a_stream_that_times_out_says_what_each_worker_was_doing(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    """A streaming test that fails by timing out (a worker that stopped deciding) reports each worker's
    /readyz, its last log lines and where its code waits, so a failure seen once in CI can be read."""
    stack = Stack(kafka_bootstrap, redis_url, tmp_path)
    stack.create_topics()
    stack.start_worker()
    try:
        with pytest.raises(TimeoutError) as failure:
            stack.final_links({"never-sent"}, timeout=2)
    finally:
        stack.stop()
    report = str(failure.value)
    assert report.startswith("1 documents without a link, e.g. ['never-sent']")
    assert f"--- worker {stack.name}-0 (exit code None): /readyz 200" in report
    assert "streams/kafka/pipeline.py" in report and "in _take" in report  # idle: waiting for records
    assert "LOCAL VARIABLES" not in report and len(report) < 20_000

"""The workers' metrics under a retried batch: real worker, real broker (noida-db), a Redis of the test's own.
The test is a guarantee that once broke (metrics tell the truth: each rejection counted once).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import orjson

from streams.evaluation.services import LocalRedis
from streams.evaluation.stack import Stack


def _metric(text: str, name: str) -> float:
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE))


def test_a_rejection_in_a_batch_retried_while_redis_is_down_is_counted_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Three bad lines and a good one in a batch while Redis is down: the batch fails and is retried until
    Redis is back, and every retry decided its rejections again: `dedup_rejected_total` said 9 or 15 for the
    3 rejections on the topic. Rejections are now counted once the broker has them."""
    server = LocalRedis(tmp_path / "redis")
    server.start()
    (tmp_path / "stack").mkdir()
    stack = Stack(kafka_bootstrap, server.url, tmp_path / "stack", stages="url,content,simhash")
    try:
        stack.create_topics()
        worker = stack.start_worker()
        server.stop()
        bad = [b"not json", b"[1, 2]", b'{"id": "x"}']
        good = orjson.dumps({"id": "g", "url": "https://g.example.com/a", "body": "a good article " * 20})
        stack.produce([*bad, good], key_by_id=False)
        deadline = time.monotonic() + 60
        while _metric(worker.metrics(), "dedup_batch_failures_total") < 2:
            assert time.monotonic() < deadline, "the batch never failed on the stopped Redis"
            time.sleep(0.2)
        server.start()
        rejected = stack.read(stack.settings().topics.rejected, until=3, timeout=120)
        assert len(rejected) == 3
        stack.final_links({"g"}, timeout=120)
        assert _metric(worker.metrics(), "dedup_rejected_total") == 3
    finally:
        stack.stop()
        server.stop()

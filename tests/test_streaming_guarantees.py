"""The service's guarantees under ordinary faults, all in one stream.

Two workers on four partitions at full speed, with a broker and a Redis of the test's own
(Redis with its append-only file on), while one worker is SIGSTOPped past its lease and
resumed, the broker is restarted, Redis is restarted, and an oversized article and an id
with a control character are in the feed. After the stream drains: one verdict per
document, stars (no self-link, no chain), one canonical per exact key, every canonical on
`articles.deduped`, and a replay into empty stores that restores the live state key for key
(sequence numbers by their order).
"""

from __future__ import annotations

import random
import signal
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from benchmarks.replay_speed import keys
from streams.evaluation.corpus import NtrexDocument, synthetic_articles
from streams.evaluation.services import LocalKafka, LocalRedis, freeze
from streams.evaluation.stack import Stack, assert_invariants
from streams.kafka.replay import replay_links
from tests.test_replay_scale import _by_meaning
from tests.test_streaming_faults import _copies, _same_verdict_every_time


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LocalKafka]:
    server = LocalKafka(tmp_path / "kafka")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def aof_redis(tmp_path: Path) -> Iterator[LocalRedis]:
    server = LocalRedis(tmp_path / "redis", appendonly=True)
    server.start()
    yield server
    server.stop()


def redis_state(client: redis.Redis, prefix: str) -> dict[str, Any]:
    """Every key under `prefix` with its value: what replay must give back. Not the lease, nor the sweep's
    cursor and its families' oldest stamps: where a pass over the buckets has got to (the live one may be
    mid-pass, the replay's done)."""
    return keys(client, prefix, ignore=("sweep", "oldest"))


def _oversized(ntrex: list[NtrexDocument], size: int) -> dict[str, Any]:
    """A real-text article of about `size` bytes: the length at which stage records used to be refused."""
    paragraphs: list[str] = []
    total = 0
    for number in range(10_000):
        story = ntrex[number % len(ntrex)]
        paragraph = f"{number}. " + " ".join(story.english[1:])
        paragraphs.append(paragraph)
        total += len(paragraph) + 2
        if total >= size:
            break
    return {
        "id": "long-read",
        "url": "https://longreads.example.com/feature",
        "title": ntrex[0].english[0],
        "body": "\n\n".join(paragraphs),
        "published_at": "2026-11-01T08:00:00Z",
    }


def test_guarantees_hold_through_a_stall_restarts_and_hostile_input(
    broker: LocalKafka, aof_redis: LocalRedis, tmp_path: Path, ntrex: list[NtrexDocument]
) -> None:
    records = _copies(60, random.Random(21))
    long_read = _oversized(ntrex, 700_000)
    records.append(long_read)
    records.append(dict(long_read, id="long-read-copy", url="https://mirror.example.net/feature"))
    poison = {"id": "bad\x1fid", "url": "https://e.example.com/x", "title": "T", "body": ntrex[5].english[1]}
    ids = {r["id"] for r in records}
    chunks = [records[: len(records) // 3], records[len(records) // 3 : 2 * len(records) // 3]]
    chunks.append([*records[2 * len(records) // 3 :], poison])

    folder = tmp_path / "stack"
    folder.mkdir()
    stack = Stack(broker.bootstrap, aof_redis.url, folder, partitions=4)
    stack.create_topics()
    stalled = stack.start_worker()
    stack.start_worker()
    time.sleep(3)  # both join the group and hold partitions
    links = stack.settings().topics.links
    try:
        # (a) one worker stalls past its lease (3 s) and its session (6 s), then resumes
        stack.produce(orjson.dumps(r) for r in chunks[0])
        stack.read(links, until=len(chunks[0]) // 4, timeout=180)
        freeze(stalled.process)
        time.sleep(8)
        stalled.process.send_signal(signal.SIGCONT)
        stack.produce(orjson.dumps(r) for r in chunks[1])

        # (b) the broker goes down for a while (the workers keep running) and comes back. noida-db
        # keeps its data only on a graceful stop, and even then drops records it acknowledged while
        # shutting down (6 of 9,978 in a probe); Kafka does not, so the workers are frozen for the
        # moment of the stop itself and the outage they live through starts once it is down.
        stack.read(links, until=len(chunks[0]), timeout=240)
        for worker in stack.workers:
            freeze(worker.process)  # none sends while the broker shuts down
        broker.stop()
        for worker in stack.workers:
            worker.process.send_signal(signal.SIGCONT)
        time.sleep(5)
        broker.start()

        # (c) Redis restarts with its append-only file
        stack.produce(orjson.dumps(r) for r in chunks[2])
        stack.read(links, until=len(chunks[0]) + len(chunks[1]) // 2, timeout=240)
        aof_redis.stop()
        time.sleep(2)
        aof_redis.start()

        latest, _ = stack.final_links(ids, timeout=480)
        unfed = stack.unfed(latest)
        rejected = stack.read(stack.settings().topics.rejected, until=1, timeout=60)
    finally:
        stack.stop()

    # One verdict per document, stars only.
    assert latest.keys() == ids
    assert_invariants(latest)
    assert latest["long-read-copy"]["canonical_id"] == latest["long-read"]["canonical_id"]  # one decided, one linked
    uniques = [link for link in latest.values() if link["verdict"] == "unique"]
    holders: dict[tuple[str, str], set[str]] = defaultdict(set)
    for link in uniques:
        holders[("url", link["url_hash"])].add(link["doc_id"])
        holders[("content", link["content_hash"])].add(link["doc_id"])
    assert all(len(owners) == 1 for owners in holders.values()), "an exact key got two canonicals"

    # Every canonical reached the indexers; the poisoned id was rejected with its reason.
    assert unfed == set()
    assert any("control character" in r["reason"] and "bad" in r.get("raw", "") for r in rejected), rejected

    # Replay into empty stores gives back exactly the live state.
    client = redis.Redis.from_url(aof_redis.url, decode_responses=True)
    copy = f"{stack.name}-replayed:"
    stats = replay_links(stack.settings(), client, None, prefix=copy)
    assert not stats.bad and stats.documents == len(ids)
    # Key for key, the canonicals' sequence numbers by their order: a batch fenced or stopped after drawing
    # its numbers leaves a gap live that the replay, drawing afresh in the same order, does not (1 run in 19).
    assert _by_meaning(redis_state(client, copy)) == _by_meaning(redis_state(client, f"{stack.name}:"))
    client.close()


def test_a_broker_that_hangs_mid_stream_delays_the_stream_and_loses_nothing(
    broker: LocalKafka, redis_url: str, tmp_path: Path
) -> None:
    """The broker stops answering (SIGSTOP: its connections stay open, nothing comes back) while a worker
    has batches in flight, for longer than the worker's delivery deadline, then answers again. The worker
    gives those sends up at the deadline and sends the batches again, while the first sends may still land
    once the broker answers: every document is decided, stars only, every canonical on `articles.deduped`
    (a record landing twice carries the same verdict)."""
    records = list(synthetic_articles(3000, seed=9))  # seconds of work: the hang comes mid-stream
    ids = {r["id"] for r in records}
    folder = tmp_path / "stack"
    folder.mkdir()
    stack = Stack(broker.bootstrap, redis_url, folder, partitions=2)
    stack.extra_env["DEDUP_WORKER__DELIVERY_TIMEOUT_S"] = "3"
    stack.create_topics()
    worker = stack.start_worker()
    stack.wait_assigned(stack.settings().topics.raw)
    links = stack.settings().topics.links
    try:
        stack.produce(orjson.dumps(r) for r in records)
        stack.read(links, until=len(records) // 10, timeout=180)
        broker.pause()
        time.sleep(10)  # past the deadline: sends in flight are given up and retried
        broker.resume()
        latest, every = stack.final_links(ids, timeout=300)
        unfed = stack.unfed(latest)
    finally:
        stack.stop()
    assert latest.keys() == ids
    assert_invariants(latest)
    _same_verdict_every_time(every)
    assert unfed == set()
    assert "not acknowledged within 3 s" in worker.log.read_text()

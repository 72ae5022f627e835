"""Reading a topic to its end when its last offsets hold no record a consumer is given.

A transactional producer (MirrorMaker 2 copying `dedup.links` to another cluster with exactly-once,
a Kafka Streams or Flink job writing links) ends each transaction with a commit or abort marker: an
offset of its own, counted in the end offset, never delivered. A reader that waits for the record at
`end - 1` waits for nothing: `dedup replay`, `dedup relink` and the checks that read a topic's tail
stopped after 30 s with "sent nothing ... before its end offsets", on a topic they had read whole.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
import redis
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.replay_speed import link_records, produce
from streams.config import Settings
from streams.evaluation.stack import Stack
from streams.kafka.journal import latest, newest_seq, read_to_end
from tests.conftest import mounted_tmpfs

QUICK_S = 10.0
"""Well under the reader's 30-s quiet timeout: a read that waits it out fails."""


def _topic(bootstrap: str, partitions: int = 1) -> str:
    topic = f"reads-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)
    return topic


def _link(n: int) -> tuple[bytes, bytes]:
    """A canonical's link record, as a worker writes it (the replay's reading takes it)."""
    doc_id = f"doc-{n}"
    record = {
        "doc_id": doc_id, "verdict": "unique", "canonical_id": doc_id, "stage": None, "score": None,
        "linked_at": f"2026-11-01T00:00:{n:02d}Z", "model": None, "url_hash": f"{n:064x}",
        "content_hash": f"{n + 10_000:064x}", "simhash": f"{(n * 0x9E3779B97F4A7C15) % (1 << 64):016x}",
        "language": "en", "published_at": f"2026-11-01T00:00:{n:02d}Z", "seq": n + 1,
    }  # fmt: skip
    return doc_id.encode(), orjson.dumps(record)


def _transactional(bootstrap: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"mirror-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    return producer


def _in_transaction(producer: Producer, topic: str, numbers: range, commit: bool = True) -> None:
    producer.begin_transaction()
    for n in numbers:
        key, value = _link(n)
        producer.produce(topic, key=key, value=value, partition=n % 2 if _partitions(producer, topic) > 1 else 0)
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def _partitions(producer: Producer, topic: str) -> int:
    return len(producer.list_topics(topic, timeout=10).topics[topic].partitions)


def test_a_topic_that_ends_in_a_commit_marker_is_read_whole_at_once(kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap, partitions=2)
    producer = _transactional(kafka_bootstrap)
    _in_transaction(producer, topic, range(6))
    settings = Settings(kafka_bootstrap=kafka_bootstrap)
    started = time.monotonic()
    found = latest(settings, topic)
    assert time.monotonic() - started < QUICK_S
    assert sorted(found.records) == [f"doc-{n}" for n in range(6)] and not found.bad
    assert newest_seq(settings, topic) == 6


def test_an_aborted_transaction_at_the_end_is_passed_over_not_waited_for(kafka_bootstrap: str) -> None:
    """What was committed is read; what was aborted after it is never given, so never waited for."""
    topic = _topic(kafka_bootstrap)
    producer = _transactional(kafka_bootstrap)
    _in_transaction(producer, topic, range(3))
    _in_transaction(producer, topic, range(3, 5), commit=False)
    started = time.monotonic()
    read = [
        orjson.loads(message.value())["doc_id"]
        for message in read_to_end(Settings(kafka_bootstrap=kafka_bootstrap), topic)
    ]
    assert time.monotonic() - started < QUICK_S
    assert read == ["doc-0", "doc-1", "doc-2"]


def test_a_topic_holding_only_an_aborted_transaction_reads_as_empty(kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap)
    _in_transaction(_transactional(kafka_bootstrap), topic, range(4), commit=False)
    settings = Settings(kafka_bootstrap=kafka_bootstrap)
    started = time.monotonic()
    assert newest_seq(settings, topic) == 0
    assert list(read_to_end(settings, topic)) == []
    assert time.monotonic() - started < QUICK_S


# --- `dedup replay` with no room for its sorting file ------------------------------------------------------


@pytest.fixture
def small_tmp(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs: room for the replay to start its sorting file, not for a topic's links."""
    with mounted_tmpfs(tmp_path / "small", "256k") as mount:
        yield mount


def test_a_replay_without_room_for_its_sorting_file_says_so_in_one_line_and_writes_nothing(
    make_stack: Callable[[str], Stack], small_tmp: Path
) -> None:
    stack = make_stack("url,content,simhash")
    stack.create_topics()
    settings = stack.settings()
    produce(stack.bootstrap, settings.topics.links, link_records(3_000, seed=3))
    prefix = f"{stack.name}:"
    env = {**os.environ, **stack.env(), "DEDUP_REDIS_PREFIX": prefix, "TMPDIR": str(small_tmp), "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "streams", "replay"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(said) == 1 and str(small_tmp) in said[0] and "TMPDIR" in said[0], done.stderr
    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    families = {key.removeprefix(prefix).split(":")[0] for key in client.scan_iter(f"{prefix}*")}
    assert families <= {"layout", "oldest", "lock", "replay", "{replay}"}, families  # nothing restored
    client.close()


def test_the_report_of_a_topic_keeps_each_documents_latest_decision_or_why_it_has_none(kafka_bootstrap: str) -> None:
    """The report folds each record into its decision as it reads (it never holds the records and their
    vectors); a document's latest record decides, a good one after a bad one and a bad one after a good one."""
    from streams.reporting.verdicts import read_topic

    topic = _topic(kafka_bootstrap)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    good = {n: _link(n) for n in (1, 2)}
    broken = {n: (key, orjson.dumps({**orjson.loads(value), "verdict": None})) for n, (key, value) in good.items()}
    for key, value in (good[1], broken[2], broken[1], good[2]):
        producer.produce(topic, value, key)
    producer.flush(30)
    settings = Settings(kafka_bootstrap=kafka_bootstrap)
    final = read_topic(settings.model_copy(update={"topics": settings.topics.model_copy(update={"links": topic})}))
    assert list(final.decisions) == ["doc-2"] and final.records == 4
    assert len(final.bad) == 1 and final.bad[0].startswith(f"{topic}[0]@2: "), final.bad

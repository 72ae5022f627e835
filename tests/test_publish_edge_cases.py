"""`dedup publish` at the record limit (a BOM, CRLF), beside a line the broker refuses, before the topics exist
and when the broker dies. Each test is a guarantee that once broke (every valid line reaches the topic as given,
one-line errors, an honest count). Real broker (the session's, or one of the test's own where it is killed).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streams.config import Settings, TopicSettings
from streams.evaluation.services import LocalKafka
from streams.kafka.publish import publish_files
from streams.kafka.topics import create_topics

BOM = b"\xef\xbb\xbf"
FIELDS = ("raw", "deduped", "links", "candidates", "rejected", "stage_simhash", "stage_semantic")


def _settings(bootstrap: str, **extra: object) -> Settings:
    run = uuid.uuid4().hex[:8]
    names = {name: f"a{run}.{name}" for name in FIELDS}
    return Settings(kafka_bootstrap=bootstrap, topics=TopicSettings(**names, partitions=3), **extra)


def _env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEDUP_")}
    env.update({"DEDUP_KAFKA_BOOTSTRAP": str(settings.kafka_bootstrap), "COLUMNS": "200"})
    env.update({f"DEDUP_TOPICS__{name.upper()}": getattr(settings.topics, name) for name in FIELDS})
    return env


def _publish(settings: Settings, source: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """`dedup publish SOURCE` in a process of its own, on `settings`' broker and topics."""
    command = [sys.executable, "-m", "streams", "publish", str(source)]
    return subprocess.run(command, capture_output=True, text=True, env=_env(settings), timeout=timeout, check=False)


def _read(bootstrap: str, topic: str, expected: int, timeout: float = 20) -> list[tuple[bytes | None, bytes]]:
    """(key, value) of the records of `topic`, once `expected` arrived or the time is up."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        found: list[tuple[bytes | None, bytes]] = []
        deadline = time.monotonic() + timeout
        while len(found) < expected and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=0.5):
                if message.error() is None:
                    found.append((message.key(), message.value()))
        return found
    finally:
        consumer.close()


def _article(size: int, doc_id: str) -> bytes:
    """A valid raw article of exactly `size` bytes."""
    empty = orjson.dumps({"id": doc_id, "url": f"https://example.com/{doc_id}", "body": ""})
    line = orjson.dumps({"id": doc_id, "url": f"https://example.com/{doc_id}", "body": "a" * (size - len(empty))})
    assert len(line) == size
    return line


def _topic_with_limit(bootstrap: str, name: str, max_message_bytes: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(name, 3, 1, config={"max.message.bytes": str(max_message_bytes)})]
    for future in admin.create_topics(topics).values():
        future.result(30)


# --- the reader under publish: record limit with a BOM or CRLF ------------------------------------------


def test_a_line_opened_by_a_bom_at_the_record_limit_reaches_the_topic_whole(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A file from a Windows tool: BOM, then one article of exactly max_record_bytes. It is within the
    limit, so it must reach the raw topic exactly as given (without the BOM). The BOM counted against the limit:
    the line was cut to its first KiB and sent as valid."""
    limit = 4096
    settings = _settings(kafka_bootstrap, max_record_bytes=limit)
    create_topics(settings)
    line = _article(limit, "at-limit")
    source = tmp_path / "bom.jsonl"
    source.write_bytes(BOM + line + b"\n")
    stats = publish_files(settings, [str(source)])
    assert (stats.sent, stats.acknowledged, stats.rejected, stats.failed) == (1, 1, [], [])
    ((key, value),) = _read(kafka_bootstrap, settings.topics.raw, 1)
    assert len(value) == len(line), f"sent {len(value)} of {len(line)} bytes"
    assert (key, value) == (b"at-limit", line)


def test_a_crlf_line_at_the_record_limit_is_sent_not_rejected(kafka_bootstrap: str, tmp_path: Path) -> None:
    """A CRLF file with one article of exactly max_record_bytes: the line ending is no part of the record (its
    CR was counted: rejected as one byte over)."""
    limit = 4096
    settings = _settings(kafka_bootstrap, max_record_bytes=limit)
    create_topics(settings)
    line = _article(limit, "crlf")
    source = tmp_path / "crlf.jsonl"
    source.write_bytes(line + b"\r\n" + _article(200, "small") + b"\r\n")
    stats = publish_files(settings, [str(source)])
    assert stats.rejected == [], stats.rejected
    assert (stats.sent, stats.acknowledged, stats.failed) == (2, 2, [])
    assert sorted(v for _, v in _read(kafka_bootstrap, settings.topics.raw, 2)) == sorted(
        [line, _article(200, "small")]
    )


# --- what the broker refuses -------------------------------------------------------------------------------


def test_lines_batched_with_one_the_broker_refuses_still_reach_the_raw_topic(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The raw topic takes records of at most 20,000 bytes; one line of 30,000 among 12 of 3,000. Only
    the big one may be rejected; the 12 small ones are valid and must reach the raw topic. The broker refused the
    whole batch that held the big one, and its valid lines were rejected with it."""
    settings = _settings(kafka_bootstrap)
    _topic_with_limit(kafka_bootstrap, settings.topics.raw, 20_000)
    create_topics(settings)
    small = [_article(3000, f"doc-{i}") for i in range(12)]
    big = _article(30_000, "big")
    source = tmp_path / "articles.jsonl"
    source.write_bytes(b"\n".join([*small[:6], big, *small[6:]]) + b"\n")
    stats = publish_files(settings, [str(source)])
    assert stats.rejected == [f"{source}:7: record is 30,000 bytes, more than the broker accepts"], stats.rejected
    assert stats.acknowledged == 12
    assert sorted(v for _, v in _read(kafka_bootstrap, settings.topics.raw, 12, timeout=10)) == sorted(small)


def test_publish_command_counts_a_line_the_broker_refuses_once(kafka_bootstrap: str, tmp_path: Path) -> None:
    """One line, refused by the broker (the topic's max.message.bytes): the summary is of one line (it said two)."""
    settings = _settings(kafka_bootstrap)
    _topic_with_limit(kafka_bootstrap, settings.topics.raw, 20_000)
    create_topics(settings)
    source = tmp_path / "one.jsonl"
    source.write_bytes(_article(30_000, "big") + b"\n")
    result = _publish(settings, source, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "published 0 of 1 lines" in result.stderr, result.stderr


def test_a_rejection_fits_the_rejected_topic_whose_limit_is_below_the_workers(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The raw topic refuses a line of 30,000 bytes and the rejected topic takes records of at most 10,000 (both
    below worker.max_message_bytes). The rejection was cut to the worker's limit, the rejected topic refused it
    too, and the line was in neither topic (reported failed). It is now cut to what the rejected topic accepts:
    its reason and the line's first bytes reach it."""
    settings = _settings(kafka_bootstrap)
    _topic_with_limit(kafka_bootstrap, settings.topics.raw, 20_000)
    _topic_with_limit(kafka_bootstrap, settings.topics.rejected, 10_000)
    create_topics(settings)
    source = tmp_path / "big.jsonl"
    source.write_bytes(_article(30_000, "big") + b"\n")
    stats = publish_files(settings, [str(source)])
    assert stats.failed == [], stats.failed
    assert stats.rejected == [f"{source}:1: record is 30,000 bytes, more than the broker accepts"], stats.rejected
    [(_, value)] = _read(kafka_bootstrap, settings.topics.rejected, 1, timeout=10)
    rejection = orjson.loads(value)
    assert rejection["raw_bytes"] == 30_000 and _article(30_000, "big").decode().startswith(rejection["raw"])


def test_publish_to_a_topic_that_does_not_exist_says_so_and_creates_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Before `dedup topics create`: publish must not quietly have the broker auto-create the raw topic with
    its own defaults (1 partition here, instead of the configured 3), which `topics create` then cannot fix. It
    did, and said "published 1 of 1 lines"."""
    settings = _settings(kafka_bootstrap)
    source = tmp_path / "one.jsonl"
    source.write_bytes(_article(200, "doc") + b"\n")
    result = _publish(settings, source, timeout=90)
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    created = {name: len(t.partitions) for name, t in topics.items() if name.startswith(settings.topics.raw[:10])}
    assert created == {}, f"publish created {created}; stderr: {result.stderr}"
    assert result.returncode == 2 and settings.topics.raw in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


def test_a_broker_killed_mid_publish_ends_it_soon_with_a_one_line_error(tmp_path: Path) -> None:
    """The broker dies while publish is still reading its input: the command must end with a one-line
    error about the broker, not hang until librdkafka's 5-minute message timeout (and then go on), as it did."""
    broker = LocalKafka(tmp_path / "kafka")
    broker.start()
    try:
        settings = _settings(broker.bootstrap)
        create_topics(settings)
        source = tmp_path / "many.jsonl"
        with source.open("wb") as handle:
            for block in range(60):
                handle.write(
                    b"".join(
                        b'{"id":"d%d","url":"https://e.com/%d","body":"text %d, a little longer than that"}\n'
                        % (i, i, i)
                        for i in range(block * 10_000, (block + 1) * 10_000)
                    )
                )
        process = subprocess.Popen(
            [sys.executable, "-m", "streams", "publish", "-q", str(source)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env(settings),
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while process.poll() is None and time.monotonic() < deadline:  # until the first records landed
            consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex})
            marks = [
                consumer.get_watermark_offsets(TopicPartition(settings.topics.raw, p), timeout=5) for p in range(3)
            ]
            consumer.close()
            if sum(high for _, high in marks) > 0:
                break
            time.sleep(0.1)
        assert process.poll() is None, "publish ended before the broker could be killed: make the input larger"
        assert broker._process is not None
        broker._process.kill()  # SIGKILL: the broker is gone for good
        broker._process.wait(timeout=10)
        broker._process = None
        try:
            _, err = process.communicate(timeout=45)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.communicate()
            raise AssertionError("publish still running 45 s after the broker died") from None
        stderr = err.decode()
        assert process.returncode == 2, stderr
        assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    finally:
        broker.stop()

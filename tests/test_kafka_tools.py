"""Topic creation and the crawler-side producer, against a real Kafka-protocol broker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer

from streams.config import Settings, TopicSettings
from streams.evaluation.services import free_port
from streams.kafka.publish import publish_files
from streams.kafka.topics import create_topics

BROKER_LIMIT = 1_000_000
"""What a Kafka broker (and librdkafka's producer) accepts by default; the test line is above it."""


def _settings(bootstrap: str, partitions: int = 3) -> Settings:
    """Topics of their own for each test, on the shared broker."""
    run = uuid.uuid4().hex[:8]
    names = {
        field: f"t{run}.{field}"
        for field in ("raw", "deduped", "links", "candidates", "rejected", "stage_simhash", "stage_semantic")
    }
    return Settings(kafka_bootstrap=bootstrap, topics=TopicSettings(**names, partitions=partitions))


def _consume(settings: Settings, topic: str, expected: int) -> list[tuple[bytes | None, bytes]]:
    consumer = Consumer(
        {**settings.kafka_client_config(), "group.id": uuid.uuid4().hex, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    messages = []
    deadline = time.monotonic() + 30
    while len(messages) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            messages.append((message.key(), message.value()))
    consumer.close()
    return messages


def test_topics_are_created_from_configuration_and_creating_again_is_harmless(kafka_bootstrap: str) -> None:
    settings = _settings(kafka_bootstrap)
    first = create_topics(settings)
    assert [state.action for state in first] == ["created"] * 7
    policies = {state.name: state.cleanup_policy for state in first}
    assert policies[settings.topics.links] == policies[settings.topics.candidates] == "compact"
    assert all(state.partitions == 3 for state in first)
    again = create_topics(settings)
    assert [state.action for state in again] == ["exists"] * 7
    assert all(state.problem is None for state in again), again
    assert {state.name: state.cleanup_policy for state in again}[settings.topics.links] == "compact"
    wider = create_topics(settings, partitions=5)
    assert all(state.problem == "3 partitions, configured 5" for state in wider)


def test_publish_sends_every_line_keyed_by_document_id(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = _settings(kafka_bootstrap)
    create_topics(settings)
    records = [{"id": f"doc-{i}", "url": f"https://example.com/{i}", "body": f"text {i}"} for i in range(50)]
    lines = [orjson.dumps(r) for r in records] + [b"{not json", b'{"id": 7, "url": "https://e.com/7", "body": "x"}']
    source = tmp_path / "articles.jsonl"
    source.write_bytes(b"\n".join(lines[:25]) + b"\n\n" + b"\n".join(lines[25:]) + b"\n")
    stats = publish_files(settings, [str(source)])
    assert (stats.sent, stats.acknowledged, stats.failed) == (52, 52, [])
    received = _consume(settings, settings.topics.raw, 52)
    assert sorted(value for _, value in received) == sorted(lines)
    keys = {value: key for key, value in received}
    assert keys[lines[0]] == b"doc-0" and keys[b"{not json"] is None and keys[lines[-1]] == b"7"


def test_commands_without_a_broker_say_so_in_one_line(tmp_path: Path) -> None:
    source = tmp_path / "a.jsonl"
    source.write_text('{"url": "https://e.com/1", "body": "x"}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEDUP_")}
    for args in (["publish", str(source)], ["topics", "create"]):
        result = subprocess.run(
            [sys.executable, "-m", "streams", *args], capture_output=True, text=True, env=env, timeout=60, check=False
        )
        assert result.returncode == 2
        assert "no Kafka broker configured: set DEDUP_KAFKA_BOOTSTRAP" in result.stderr
        assert "Traceback" not in result.stderr


def test_topics_create_command(kafka_bootstrap: str) -> None:
    run = uuid.uuid4().hex[:8]
    env = {**os.environ, "DEDUP_KAFKA_BOOTSTRAP": kafka_bootstrap, "COLUMNS": "200"}
    env.update({f"DEDUP_TOPICS__{name.upper()}": f"c{run}.{name}" for name in ("raw", "links")})
    command = [sys.executable, "-m", "streams", "topics", "create", "--partitions", "2"]
    first = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, check=False)
    again = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert first.returncode == again.returncode == 0, first.stderr + again.stderr
    assert f"c{run}.links" in first.stderr and "compact" in first.stderr and "created" in first.stderr
    assert "exists" in again.stderr and "created" not in again.stderr


def test_an_unreachable_broker_is_one_line_and_no_client_log(tmp_path: Path) -> None:
    source = tmp_path / "a.jsonl"
    source.write_text('{"url": "https://e.com/1", "body": "x"}\n')
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("DEDUP_")}, "DEDUP_KAFKA_BOOTSTRAP": address}
    for args in (["topics", "create"], ["publish", str(source)]):
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "streams", *args], capture_output=True, text=True, env=env, timeout=120, check=False
        )
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1, result.stderr  # one line: no librdkafka log, no traceback
        assert f"cannot reach the Kafka broker at {address}" in result.stderr and "refused" in result.stderr
        assert time.monotonic() - started < 25  # not after the 30 s metadata timeout


def _feed_with_a_huge_line(folder: Path) -> tuple[Path, list[bytes], bytes]:
    """30 articles and, as line 11, one of 1.36 MB (the size that was reproduced)."""
    records = [{"id": f"doc-{i}", "url": f"https://example.com/{i}", "body": f"text {i}"} for i in range(30)]
    huge = orjson.dumps({"id": "huge", "url": "https://example.com/huge", "body": "word " * 272_000})
    assert len(huge) > BROKER_LIMIT
    lines = [orjson.dumps(r) for r in records]
    source = folder / "articles.jsonl"
    source.write_bytes(b"\n".join([*lines[:10], huge, *lines[10:]]) + b"\n")
    return source, lines, huge


@pytest.mark.parametrize("max_record_bytes", [None, 4 * 1024 * 1024], ids=["above-max-record", "above-broker"])
def test_publish_rejects_a_line_too_large_for_the_broker_and_sends_the_rest(
    kafka_bootstrap: str, tmp_path: Path, max_record_bytes: int | None
) -> None:
    """Above `max_record_bytes` publish rejects the line unread; below it but above what the broker
    takes, the producer refuses it: either way a rejection with the reason, and the rest sent."""
    settings = _settings(kafka_bootstrap)
    if max_record_bytes is not None:
        settings = settings.model_copy(update={"max_record_bytes": max_record_bytes})
    create_topics(settings)
    source, lines, huge = _feed_with_a_huge_line(tmp_path)
    stats = publish_files(settings, [str(source)])
    assert (stats.sent, stats.acknowledged, stats.failed) == (30, 30, [])
    (rejected,) = stats.rejected
    assert rejected.startswith(f"{source}:11: record is {len(huge):,} bytes, above")
    assert sorted(value for _, value in _consume(settings, settings.topics.raw, 30)) == sorted(lines)
    ((_, value),) = _consume(settings, settings.topics.rejected, 1)
    reason = orjson.loads(value)
    assert reason["source"] == str(source) and reason["line"] == 11
    assert f"record is {len(huge):,} bytes, above" in reason["reason"] and reason["raw"].startswith('{"id":"huge"')


def test_publish_command_names_the_rejected_line(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = _settings(kafka_bootstrap)
    create_topics(settings)
    source, _, huge = _feed_with_a_huge_line(tmp_path)
    env = {**os.environ, "DEDUP_KAFKA_BOOTSTRAP": kafka_bootstrap, "COLUMNS": "200"}
    env.update({f"DEDUP_TOPICS__{name.upper()}": getattr(settings.topics, name) for name in ("raw", "rejected")})
    result = subprocess.run(
        [sys.executable, "-m", "streams", "publish", str(source)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "published 30 of 31 lines" in result.stderr and "1 rejected" in result.stderr
    assert f"{source}:11: record is {len(huge):,} bytes" in result.stderr and "Traceback" not in result.stderr

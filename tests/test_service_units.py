"""The worker's pieces that need no broker: security settings, stage and rejected records."""

from __future__ import annotations

import base64
from collections.abc import Callable

import faust
import orjson
import pytest

from streams.config import Settings
from streams.core.model import Document
from streams.evaluation.corpus import NtrexDocument
from streams.evaluation.stack import Stack
from streams.kafka.topics import message_limits
from streams.records.article import Featurizer
from streams.records.stage import read_stage_record, rejected_record, stage_record
from streams.service.app import broker_credentials, check_broker_limits, check_record_limits


def test_kafka_security_settings_become_faust_credentials() -> None:
    plain = Settings(kafka_bootstrap="b:9092")
    assert broker_credentials(plain) == (None, False)
    sasl = Settings(
        kafka_bootstrap="b:9092",
        kafka_config={
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "crawler",
            "sasl.password": "hunter2",
        },
    )
    credentials, tls = broker_credentials(sasl)
    assert isinstance(credentials, faust.SASLCredentials) and tls
    assert credentials.username == "crawler" and credentials.password == "hunter2"
    assert str(credentials.mechanism.value) == "SCRAM-SHA-512"


@pytest.mark.parametrize(
    "config",
    [{"security.protocol": "KERBEROS"}, {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "none"}],
)
def test_security_settings_the_workers_cannot_apply_are_refused(config: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        broker_credentials(Settings(kafka_bootstrap="b:9092", kafka_config=config))


def test_secrets_never_show_in_the_settings() -> None:
    settings = Settings(
        redis_url="rediss://:s3cret@redis:6380/0",
        qdrant_api_key="qk-s3cret",
        kafka_config={"sasl.password": "s3cret"},
    )
    assert "s3cret" not in repr(settings) and "s3cret" not in str(settings.model_dump())


def test_a_stage_record_carries_the_document_unchanged() -> None:
    raw = orjson.dumps({"id": "a", "url": "https://e.com/a", "title": "T", "body": "Some body text here."})
    doc = Featurizer(Settings()).parse(raw, ingest_time=1_800_000_000)
    assert isinstance(doc, Document)
    again, received = read_stage_record(stage_record(doc, 1_800_000_000_123))
    assert again == doc and received == 1_800_000_000_123


def test_a_rejected_record_keeps_the_original_bytes() -> None:
    text = orjson.loads(rejected_record("bad", b'{"x": 1', {"topic": "t", "partition": 0, "offset": 7}))
    assert text["raw"] == '{"x": 1' and text["reason"] == "bad" and text["offset"] == 7
    binary = orjson.loads(rejected_record("bad", b"\xff\x00", {}))
    assert base64.b64decode(binary["raw_base64"]) == b"\xff\x00" and "raw" not in binary


def test_a_stage_record_carries_the_article_once(ntrex: list[NtrexDocument]) -> None:
    body = " ".join(sentence for story in ntrex[:300] for sentence in story.english)  # a long real article
    raw = orjson.dumps({"id": "long", "url": "https://e.com/long", "title": "Long", "body": body})
    doc = Featurizer(Settings()).parse(raw, ingest_time=1_800_000_000)
    assert isinstance(doc, Document)
    record = stage_record(doc, 1)
    assert len(record) < len(raw) + 1024, f"{len(record):,} bytes for a {len(raw):,}-byte article"
    assert read_stage_record(record)[0] == doc


def test_a_rejection_of_an_oversized_record_fits_the_broker() -> None:
    raw = b'{"body": "' + b"x" * 2_000_000 + b'"}'
    record = rejected_record("too large", raw, {"topic": "t"}, max_bytes=1_048_576)
    assert len(record) <= 1_048_576
    parsed = orjson.loads(record)
    assert (
        parsed["reason"] == "too large" and parsed["raw_bytes"] == len(raw) and raw.startswith(parsed["raw"].encode())
    )


def test_a_worker_refuses_input_limits_the_broker_cannot_carry() -> None:
    with pytest.raises(ValueError, match="max_record_bytes"):
        check_record_limits(Settings(max_record_bytes=4 * 1024 * 1024))
    check_record_limits(Settings())  # the defaults fit Kafka's default message.max.bytes


def test_a_worker_refuses_records_larger_than_the_topics_accept(make_stack: Callable[[str], Stack]) -> None:
    stack = make_stack("url,content,simhash")
    stack.create_topics()
    settings = stack.settings()
    topics = settings.topics
    accepted = message_limits(settings, [topics.links, topics.deduped, topics.rejected])
    assert set(accepted) == {topics.links, topics.deduped, topics.rejected}
    check_broker_limits(settings, accepted)  # the default fits the broker's default
    larger = settings.model_copy(update={"worker": settings.worker.model_copy(update={"max_message_bytes": 4 << 20})})
    with pytest.raises(ValueError, match=r"max\.message\.bytes"):
        check_broker_limits(larger, accepted)

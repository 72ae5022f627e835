"""The streaming worker's Kafka path against what operators get wrong: a worker started twice under one static
membership id, an input topic never created, topics that refuse what the worker writes mid-stream.

Real worker processes on the session's broker (noida-db) and Redis, each test with topics of its own.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any

import jsonschema
import orjson
import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from streams.evaluation.corpus import synthetic_articles
from streams.evaluation.services import freeze
from streams.evaluation.stack import Stack, assert_invariants
from streams.records.schemas import load_schema


@pytest.fixture
def stack(make_stack: Callable[[str], Stack]) -> Stack:
    return make_stack("url,content,simhash")


def test_a_second_worker_with_the_same_instance_id_refuses_in_one_line_and_the_first_decides_each_record_once(
    stack: Stack,
) -> None:
    """Two members of one static id unseat each other at every heartbeat: both held every partition, both
    decided every record again and again (1,600 links for 400 documents) and never committed."""
    articles = list(synthetic_articles(400, seed=21))
    ids = {article["id"] for article in articles}
    stack.partitions = 2
    stack.create_topics()
    first = stack.start_worker(instance="pod-0")
    second = stack.start_worker(instance="pod-0", wait=False)
    stack.produce(orjson.dumps(article) for article in articles[:200])
    deadline = time.monotonic() + 45
    while second.process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert second.process.poll() == 2, f"the second worker runs on:\n{second.log.read_text()[-2000:]}"
    said = second.log.read_text().strip().splitlines()[-1]
    assert said.startswith("error: another worker runs with DEDUP_WORKER__INSTANCE_ID=pod-0"), said
    stack.workers.remove(second)  # gone: `read` would take its exit for a crash
    stack.produce(orjson.dumps(article) for article in articles[200:])
    latest, every = stack.final_links(ids)
    assert_invariants(latest)
    assert len(every) == len(ids), "a record was decided more than once"
    assert not stack.unfed(latest)
    assert first.process.poll() is None and first.ready()


def test_a_worker_paused_past_its_claim_while_another_took_its_instance_id_exits_when_it_resumes(
    stack: Stack,
) -> None:
    """The broker took the paused worker's partitions for the newcomer of its id: once resumed it must stop,
    not unseat the newcomer at its next heartbeat and the two take turns for ever."""
    articles = list(synthetic_articles(300, seed=22))
    ids = {article["id"] for article in articles}
    stack.create_topics()
    first = stack.start_worker(instance="pod-1")
    stack.produce(orjson.dumps(article) for article in articles[:100])
    stack.final_links({article["id"] for article in articles[:100]})
    freeze(first.process)
    try:
        second = stack.start_worker(instance="pod-1")  # takes the id once the paused one's claim lapsed
    finally:
        first.process.send_signal(signal.SIGCONT)
    first.process.wait(timeout=30)
    assert first.process.returncode == 2
    assert "another worker took DEDUP_WORKER__INSTANCE_ID=pod-1" in first.log.read_text()
    stack.workers.remove(first)
    stack.produce(orjson.dumps(article) for article in articles[100:])
    latest, _ = stack.final_links(ids)
    assert_invariants(latest)
    assert not stack.unfed(latest)
    assert second.process.poll() is None and second.ready()


def test_a_worker_whose_input_topic_is_missing_refuses_in_one_line_and_never_creates_it(stack: Stack) -> None:
    """A consumer that asks for a missing topic has the broker create it with its own defaults: one partition,
    for good (`dedup topics create` then finds it there), and only one worker could ever read the stream."""
    stack.partitions = 3
    stack.create_topics()
    stack.extra_env["DEDUP_TOPICS__RAW"] = raw = f"{stack.name}.articles.raw-renamed"  # configured, not created
    worker = stack.start_worker(wait=False)
    assert worker.process.wait(timeout=60) == 2
    said = worker.log.read_text().strip().splitlines()[-1]
    assert said == f"error: topic {raw} does not exist on the broker: run `dedup topics create` first"
    stack.workers.remove(worker)
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})
    assert raw not in admin.list_topics(timeout=10).topics
    stack.create_topics()  # the configured partitions now
    assert len(admin.list_topics(raw, timeout=10).topics[raw].partitions) == 3
    stack.start_worker()
    articles = list(synthetic_articles(60, seed=23))
    stack.produce(orjson.dumps(article) for article in articles)
    latest, _ = stack.final_links({article["id"] for article in articles})
    assert_invariants(latest)


def _lower_limit(stack: Stack, topics: list[str], limit: int) -> None:
    """What an operator does to topics under a running worker: their max.message.bytes cut to `limit`."""
    admin = AdminClient({"bootstrap.servers": stack.bootstrap})
    entry = ConfigEntry("max.message.bytes", str(limit), incremental_operation=AlterConfigOpType.SET)
    changes = [ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry]) for topic in topics]
    for future in admin.incremental_alter_configs(changes).values():
        future.result(30)


def test_topics_that_refuse_what_the_worker_writes_mid_stream_get_rejections_and_the_stream_goes_on(
    stack: Stack,
) -> None:
    """`articles.deduped` and `articles.rejected` lowered below an article's size under a running worker: each
    article refused gets a rejection saying so (without the article, which the rejected topic refuses too),
    and the records after it are decided. The worker retried the batch for ever, its links sent again each
    time, and nothing after it in the partition was decided."""
    articles = list(synthetic_articles(120, seed=24))
    stack.create_topics()
    topics = stack.settings().topics
    worker = stack.start_worker()
    stack.produce(orjson.dumps(article) for article in articles[:40])
    stack.final_links({article["id"] for article in articles[:40]})
    _lower_limit(stack, [topics.deduped, topics.rejected], 3000)
    stack.produce(orjson.dumps(article) for article in articles[40:])
    latest, _ = stack.final_links({article["id"] for article in articles})
    assert_invariants(latest)
    large = {
        article["id"]
        for article in articles[40:]
        if latest[article["id"]]["verdict"] == "unique" and len(orjson.dumps(article)) > 3000
    }
    assert large, "no article over the lowered limit"
    reasons: dict[str, dict[str, Any]] = {}
    consumer = stack.reader(topics.rejected)
    deadline = time.monotonic() + 60
    try:
        while not large <= reasons.keys() and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                reasons[message.key().decode()] = orjson.loads(message.value())
    finally:
        consumer.close()
    assert large <= reasons.keys(), f"no rejection for {sorted(large - reasons.keys())[:5]}\n{worker.report()}"
    for doc_id in large:
        record = reasons[doc_id]
        assert f"for {topics.deduped} was refused by the broker as too large" in record["reason"]
        assert record["raw"] == "" and record["raw_bytes"] > 3000
        jsonschema.Draft7Validator(load_schema("rejected")).validate(record)
    assert worker.ready(), worker.report()

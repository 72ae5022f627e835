"""Raw articles as crawlers' producers write them, through a real worker, broker and Redis.

- Compressed: librdkafka and the Java client compress with lz4, zstd, snappy or gzip where told to
  (`compression.type`, often set for a crawler's large pages). The worker's consumer (aiokafka) decodes the
  first three only with a codec library it leaves optional; without it, a compressed batch stopped the worker
  on its first fetch and nothing after it in the partition was decided.
- In transactions (a Kafka Connect source with exactly-once support, a transactional producer): a transaction
  the crawler aborted never happened, so the worker must not decide its articles, publish them to the
  indexers' feed or send their verdicts.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from streams.evaluation.corpus import NtrexDocument
from streams.evaluation.stack import Stack
from streams.kafka.journal import latest

CODECS = ("lz4", "zstd", "snappy", "gzip")


@pytest.fixture
def stack(make_stack: Callable[[str], Stack]) -> Stack:
    made = make_stack("url,content,simhash")
    made.create_topics()
    made.start_worker()
    return made


def _article(ntrex: list[NtrexDocument], number: int, name: str) -> dict[str, Any]:
    doc = ntrex[number]
    return {
        "id": f"{name}-{number}",
        "url": f"https://news.example.com/{name}/story-{number}",
        "title": doc.english[0],
        "body": " ".join(doc.english[1:]),
        "published_at": "2026-11-01T08:00:00Z",
    }


def _produce(producer: Producer, stack: Stack, article: dict[str, Any]) -> None:
    producer.produce(stack.settings().topics.raw, orjson.dumps(article), article["id"].encode(), partition=0)


def test_articles_a_crawler_compressed_with_any_codec_are_decided(stack: Stack, ntrex: list[NtrexDocument]) -> None:
    ids = set()
    for codec in CODECS:
        crawler = Producer({"bootstrap.servers": stack.bootstrap, "compression.type": codec, "linger.ms": 20})
        for number in range(1, 4):
            article = _article(ntrex, number + 10 * CODECS.index(codec), codec)
            _produce(crawler, stack, article)
            ids.add(article["id"])
        assert crawler.flush(30) == 0
    latest_links, _ = stack.final_links(ids, timeout=90)
    assert ids <= set(latest_links)


def test_articles_of_an_aborted_transaction_are_never_decided(stack: Stack, ntrex: list[NtrexDocument]) -> None:
    crawler = Producer({"bootstrap.servers": stack.bootstrap, "transactional.id": f"crawler-{uuid.uuid4().hex}"})
    crawler.init_transactions(30)
    for numbers, commit in (((1, 2), True), ((3, 4), False), ((5,), True)):
        crawler.begin_transaction()
        for number in numbers:
            _produce(crawler, stack, _article(ntrex, number, "story"))
        crawler.flush(30)
        if commit:
            crawler.commit_transaction(30)
        else:
            crawler.abort_transaction(30)
    # story-5 comes after the aborted ones in the same partition: once it is decided, they were passed over.
    stack.final_links({"story-1", "story-2", "story-5"}, timeout=120)
    time.sleep(1)  # the outputs of story-5's batch all acknowledged, whichever partition each went to
    settings = stack.settings()
    assert sorted(latest(settings, settings.topics.links).records) == ["story-1", "story-2", "story-5"]
    assert sorted(latest(settings, settings.topics.deduped).records) == ["story-1", "story-2", "story-5"]

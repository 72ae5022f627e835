"""Raw articles a crawler wrote in Kafka transactions (a Kafka Connect source with exactly-once support, a
transactional producer): a transaction the crawler aborted never happened, so the worker must not decide its
articles, publish them to the indexers' feed or send their verdicts. A real worker, broker and Redis.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from confluent_kafka import Producer

from streams.evaluation.corpus import NtrexDocument
from streams.evaluation.stack import Stack
from streams.kafka.journal import latest


def _article(ntrex: list[NtrexDocument], number: int) -> dict[str, Any]:
    doc = ntrex[number]
    return {
        "id": f"story-{number}",
        "url": f"https://news.example.com/story-{number}",
        "title": doc.english[0],
        "body": " ".join(doc.english[1:]),
        "published_at": "2026-11-01T08:00:00Z",
    }


def test_articles_of_an_aborted_transaction_are_never_decided(
    make_stack: Callable[[str], Stack], ntrex: list[NtrexDocument]
) -> None:
    stack = make_stack("url,content,simhash")
    stack.create_topics()
    stack.start_worker()
    topic = stack.settings().topics.raw
    crawler = Producer({"bootstrap.servers": stack.bootstrap, "transactional.id": f"crawler-{uuid.uuid4().hex}"})
    crawler.init_transactions(30)
    for numbers, commit in (((1, 2), True), ((3, 4), False), ((5,), True)):
        crawler.begin_transaction()
        for number in numbers:
            article = _article(ntrex, number)
            crawler.produce(topic, orjson.dumps(article), article["id"].encode(), partition=0)
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

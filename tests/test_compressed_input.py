"""Raw articles a crawler's producer compressed: librdkafka and the Java client compress with lz4, zstd,
snappy or gzip where they are told to (`compression.type`, often set for a crawler's large pages). The
worker's consumer (aiokafka) decodes all four only with the codec library it leaves optional; without it, a
compressed batch stopped the worker on its first fetch and nothing after it in the partition was decided.
A real worker, broker and Redis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from confluent_kafka import Producer

from streams.evaluation.corpus import NtrexDocument
from streams.evaluation.stack import Stack

CODECS = ("lz4", "zstd", "snappy", "gzip")


def _article(ntrex: list[NtrexDocument], number: int, codec: str) -> dict[str, Any]:
    doc = ntrex[number]
    return {
        "id": f"{codec}-{number}",
        "url": f"https://news.example.com/{codec}/story-{number}",
        "title": doc.english[0],
        "body": " ".join(doc.english[1:]),
        "published_at": "2026-11-01T08:00:00Z",
    }


def test_articles_a_crawler_compressed_with_any_codec_are_decided(
    make_stack: Callable[[str], Stack], ntrex: list[NtrexDocument]
) -> None:
    stack = make_stack("url,content,simhash")
    stack.create_topics()
    stack.start_worker()
    ids = set()
    for codec in CODECS:
        crawler = Producer({"bootstrap.servers": stack.bootstrap, "compression.type": codec, "linger.ms": 20})
        for number in range(1, 4):
            article = _article(ntrex, number + 10 * CODECS.index(codec), codec)
            crawler.produce(stack.settings().topics.raw, orjson.dumps(article), article["id"].encode())
            ids.add(article["id"])
        assert crawler.flush(30) == 0
    latest, _ = stack.final_links(ids, timeout=90)
    assert ids <= set(latest)

"""The streaming path on articles crawled long after they were published: real workers, a real broker
(noida-db) and a real Redis. The test is a guarantee that once broke (one verdict per document, stage
included, on redelivery).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from streams.evaluation.corpus import NtrexDocument
from streams.evaluation.stack import Stack
from tests.test_streaming_faults import _same_verdict_every_time


@pytest.fixture
def stack(make_stack: Callable[[str], Stack]) -> Stack:
    return make_stack("url,content,simhash")


def _days_ago(days: float) -> str:
    return (datetime.now(UTC) - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _article(ntrex: list[NtrexDocument], number: int, doc_id: str, url: str, when: str) -> dict[str, Any]:
    doc = ntrex[number]
    return {"id": doc_id, "url": url, "title": doc.english[0], "body": " ".join(doc.english[1:]), "published_at": when}


def test_an_article_published_before_the_verdict_retention_gets_the_same_verdict_when_redelivered(
    stack: Stack, ntrex: list[NtrexDocument]
) -> None:
    """Verdicts expired `verdicts_days` (7) after the document's `published_at`, in stream time, on the premise
    that nothing older can be delivered again. But an article crawled today may have been published twelve
    days ago (an archive page, a late crawl): its verdict was hidden the moment it was recorded, and its
    redelivery (a crash, a retried batch, the crawler sending it again) was decided afresh, against the
    claims its first decision left: a near-duplicate came back as a URL duplicate, another verdict. A verdict
    now lives `verdicts_days` from the stream's clock when it was recorded."""
    stack.create_topics()
    stack.start_worker()
    links_topic = stack.settings().topics.links
    today = _article(ntrex, 9, "today", "https://n.example.com/today", _days_ago(1))  # the stream's clock
    stack.produce([orjson.dumps(today)])
    stack.final_links({"today"}, timeout=120)
    original = _article(ntrex, 10, "original", "https://n.example.com/original", _days_ago(12))
    body = original["body"].replace(",", ";", 2)
    edited = dict(original, id="edited", url="https://m.example.org/edited", body=body)
    stack.produce([orjson.dumps(original), orjson.dumps(edited)])
    latest, _ = stack.final_links({"original", "edited"}, timeout=120)
    assert (latest["edited"]["verdict"], latest["edited"]["stage"]) == ("duplicate", "simhash")
    stack.produce([orjson.dumps(edited)])  # delivered again
    links = stack.read(links_topic, until=4, timeout=120)
    _same_verdict_every_time(links)  # was: ('duplicate', 'original', 'url') the second time

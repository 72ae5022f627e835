"""A stage agent's batch with the same record in it twice (a producer's retry without idempotence, a
re-publish racing the first) answers both with one verdict; a copy in the same batch links to it."""

from __future__ import annotations

import uuid

import orjson

from streams.config import Settings
from streams.evaluation.corpus import synthetic_articles
from streams.service.resources import Resources
from streams.service.stages import Agent, Incoming


def test_a_record_twice_in_one_batch_gets_one_verdict_twice(redis_url: str) -> None:
    settings = Settings(stages=["url", "content", "simhash"], redis_url=redis_url, redis_prefix=f"t{uuid.uuid4().hex}:")
    resources = Resources(settings)
    agent = resources.stage_agent(Agent.EXACT, Agent.SIMHASH)
    articles = list(synthetic_articles(40, seed=3))
    copy = dict(articles[0], id="copy-of-0", url=articles[0]["url"] + "?utm_source=x")
    values = [orjson.dumps(a) for a in articles]
    batch = [*values[:20], values[0], values[5], orjson.dumps(copy), *values[20:], values[0]]
    out = agent.handle([Incoming(v, None, 1_800_000_000_000, "raw", 0, i) for i, v in enumerate(batch)])
    links = [orjson.loads(o.value) for o in out if o.topic == settings.topics.links]
    by_doc: dict[str, set[tuple[str, str]]] = {}
    for link in links:
        by_doc.setdefault(link["doc_id"], set()).add((link["verdict"], link["canonical_id"]))
    assert all(len(verdicts) == 1 for verdicts in by_doc.values()), by_doc
    assert [link["doc_id"] for link in links].count(articles[0]["id"]) == 3
    assert by_doc[articles[0]["id"]] == {("unique", articles[0]["id"])}
    assert by_doc["copy-of-0"] == {("duplicate", articles[0]["id"])}
    resources.close()

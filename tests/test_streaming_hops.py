"""Stages 1 to 3 in one hop (agents sharing a worker) and split (agents in different workers).

A worker that runs the exact and SimHash agents decides raw articles at once, with nothing
written to the SimHash stage topic between them; workers that run one agent each still pass
documents on through it. Both ways, with every worker killed mid-stream and restarted: one
verdict per document, nothing lost, stars, one canonical per story and per exact key, and a
redelivered document gets the verdict it had.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable

import orjson
import pytest

from streams.config import Settings
from streams.evaluation.corpus import synthetic_articles
from streams.evaluation.stack import Stack, Worker, assert_invariants
from streams.service.stages import Agent, hops
from tests.test_streaming_faults import _copies, _same_verdict_every_time

EXACT, SIMHASH, SEMANTIC = Agent.EXACT, Agent.SIMHASH, Agent.SEMANTIC


def test_agents_next_to_each_other_in_one_process_share_a_hop_except_the_semantic_one() -> None:
    three = Settings(stages=["url", "content", "simhash"])
    four = Settings(stages=["url", "content", "simhash", "semantic"])
    assert hops(three, [SIMHASH, EXACT]) == [(EXACT, SIMHASH)]
    assert hops(three, [SIMHASH]) == [(SIMHASH,)]
    assert hops(four, [EXACT, SIMHASH, SEMANTIC]) == [(EXACT, SIMHASH), (SEMANTIC,)]
    assert hops(four, [EXACT, SEMANTIC]) == [(EXACT,), (SEMANTIC,)]
    assert hops(Settings(stages=["url", "content", "semantic"]), [EXACT, SEMANTIC]) == [(EXACT,), (SEMANTIC,)]


@pytest.fixture
def stack(make_stack: Callable[[str], Stack]) -> Stack:
    return make_stack("url,content,simhash")


@pytest.mark.parametrize("split", [False, True], ids=["one-hop", "split"])
def test_guarantees_hold_in_one_hop_and_split_with_every_worker_killed_mid_stream(stack: Stack, split: bool) -> None:
    rng = random.Random(17)
    records = _copies(40, rng) + list(synthetic_articles(1200, seed=23))
    rng.shuffle(records)
    ids = {r["id"] for r in records}
    stack.partitions = 2
    stack.create_topics()
    roles: list[tuple[str, ...]] = [("exact",), ("simhash",)] if split else [()]
    workers: list[Worker] = [stack.start_worker(*role) for role in roles]
    stack.produce(orjson.dumps(r) for r in records)
    topics = stack.settings().topics
    for seen in (300, 1000):  # kill every worker mid-stream, each time a little further on
        stack.read(topics.links, until=seen, timeout=180)
        for worker in workers:
            worker.kill()
        workers = [stack.start_worker(*role, instance=w.instance) for role, w in zip(roles, workers, strict=True)]
    latest, every = stack.final_links(ids, timeout=300)

    assert latest.keys() == ids
    assert_invariants(latest)
    _same_verdict_every_time(every)
    story_of = {r["id"]: r["story"] for r in records if "story" in r}
    roots: dict[str, set[str]] = defaultdict(set)
    holders: dict[tuple[str, str], set[str]] = defaultdict(set)
    for doc_id, link in latest.items():
        root = doc_id if link["verdict"] == "unique" else link["canonical_id"]
        if doc_id in story_of:
            assert story_of.get(root) == story_of[doc_id], f"{doc_id} linked across stories"
            roots[story_of[doc_id]].add(root)
        if link["verdict"] == "unique":
            holders[("url", link["url_hash"])].add(doc_id)
            holders[("content", link["content_hash"])].add(doc_id)
    assert all(len(found) == 1 for found in roots.values()), "a story got two canonicals"
    assert all(len(owners) == 1 for owners in holders.values()), "an exact key got two canonicals"
    # One hop writes nothing between the exact and SimHash agents; split agents pass documents on.
    forwarded = _count(stack, topics.stage_simhash)
    assert (forwarded > 0) if split else (forwarded == 0)


def _count(stack: Stack, topic: str) -> int:
    """Records on `topic` (every partition), read to the end offsets."""
    consumer = stack.reader(topic)
    try:
        ends = 0
        for partition in consumer.assignment():
            _, high = consumer.get_watermark_offsets(partition, timeout=10)
            ends += high
        return ends
    finally:
        consumer.close()

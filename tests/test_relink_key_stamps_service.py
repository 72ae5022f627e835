"""The service's relink (Redis, a real worker, the noida-db broker) and the stamps of the exact keys it moves.

An exact key is stamped with the date of the document that claimed it, and expires `exact_days` after that.
A relink re-points a key for every document of its plan that shares the key's hash; each re-point must keep
the stamp, or the key expires at another time than in a state that never saw the relink. Redis keeps an
exact key as a field of an `x:` bucket whose value is its day stamp (4 hex digits) and its holder
(`streams/stores/redis_store.py`, layout 4): two states are compared on those buckets, stamps included.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
import redis

from streams.core.relink import Label
from streams.evaluation.stack import Stack
from streams.service.relink import relink_service
from tests.test_figure_check import DAYS, MARKET_EN
from tests.test_relink_redelivery_attacks import TEXT_A, _records, _wipe_and_replay

STAMP = 4
"""Hex digits of an exact key's day stamp, before its holder (`_DAY_HEX` in redis_store)."""


def _report(doc_id: str, url: str, day: str) -> dict[str, Any]:
    """The figure check's market report (tests/test_figure_check.py) with one more sentence: 1 bit from its
    original, so a SimHash duplicate of it."""
    figures = DAYS[0]
    title, body = MARKET_EN[0].format(**figures), MARKET_EN[1].format(**figures)
    return {"id": doc_id, "url": url, "title": title, "body": body + " More later.", "published_at": f"{day}T08:00:00Z"}


def _exact_keys(stack: Stack) -> dict[str, dict[str, str]]:
    """Every `x:` bucket of the stack's state, named without the stack's prefix: key hash -> stamp and holder."""
    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    try:
        prefix = f"{stack.name}:"
        return {key[len(prefix) :]: client.hgetall(key) for key in client.scan_iter(f"{prefix}x:*")}
    finally:
        client.close()


def _stamps(buckets: dict[str, dict[str, str]]) -> dict[tuple[str, str], str]:
    return {(bucket, field): value[:STAMP] for bucket, fields in buckets.items() for field, value in fields.items()}


def _decided(stack: Stack, articles: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """Run a worker over `articles` until the links topic holds `count` records; every record, in order."""
    previous = stack.workers[-1].instance if stack.workers else None
    worker = stack.start_worker(instance=previous)
    stack.produce(orjson.dumps(article) for article in articles)
    deadline = time.monotonic() + 120
    while len(records := _records(stack)) < count:
        assert time.monotonic() < deadline, f"{len(records)} link records, wanted {count}"
        time.sleep(0.5)
    worker.stop()
    return records


def test_a_review_kept_apart_then_linked_leaves_the_stamps_of_a_state_that_linked_it_in_redis(
    make_stack: Callable[[str], Stack],
) -> None:
    """E1 is a near-duplicate of K; E1-c, its text at another URL, came four days later. With `group_cap` 1
    both went to review (the service publishes a review, so a person can keep it apart); a person says `n`,
    then `y`: E1 and E1-c are K's duplicates, as in a state where the cascade linked them. Linking back
    re-pointed E1's content key for E1 and again for E1-c, which shares its hash, stamping it with E1-c's
    date: in Redis the key then expired four days later than in the state that linked them, and with
    `exact_days` 40 a copy of E1's text in those days was a content duplicate of K there, a canonical of its
    own in the other (K's bands had expired too). The own keys of a review copy becoming a duplicate were
    stamped anew too: E1-c's content key, which is E1's, got E1-c's date when E1 was kept apart."""
    first = [
        _report("K", "https://x.example.com/K", "2025-12-06"),
        _report("E1", "https://x.example.com/E1", "2025-12-06"),
        _report("E1-c", "https://y.example.com/E1", "2025-12-10"),
    ]
    first[0]["body"] = first[0]["body"].removesuffix(" More later.")
    stacks = {}
    for name, cap in (("never", {}), ("relinked", {"DEDUP_GROUP_CAP": "1"})):
        stack = make_stack("url,content,simhash")
        stack.extra_env.update({"DEDUP_RETENTION__EXACT_DAYS": "40", **cap})
        stack.create_topics()
        stacks[name] = (stack, {r["doc_id"]: r for r in _decided(stack, first, 3)})
    (never, linked), (stack, reviewed) = stacks["never"], stacks["relinked"]
    assert [(linked[d]["verdict"], linked[d]["stage"]) for d in ("E1", "E1-c")] == [
        ("duplicate", "simhash"),
        ("duplicate", "content"),
    ]
    assert [(reviewed[d]["verdict"], reviewed[d]["stage"]) for d in ("E1", "E1-c")] == [
        ("review", "simhash"),
        ("review", "content"),
    ]

    settings = stack.settings()
    assert relink_service(settings, decisions=[Label("E1", "K", False)]).plan.changes
    back = relink_service(settings, decisions=[Label("E1", "K", True)])
    assert [c.doc_id for c in back.plan.changes] == ["E1", "E1-c"] and not back.plan.refused
    assert _stamps(_exact_keys(stack)) == _stamps(_exact_keys(never))
    assert _exact_keys(stack) == _exact_keys(never)

    live = _exact_keys(stack)
    _wipe_and_replay(stack)
    assert _exact_keys(stack) == live

    # A copy of E1's text once the stream's clock has passed the day its content key expires in the state that
    # linked it (a batch decides at the clock it read, so the clock is moved by an unrelated article first).
    del stack.extra_env["DEDUP_GROUP_CAP"]  # the same settings for what comes next
    other = {"id": "F", "url": "https://w.example.com/F", "title": "t", "body": TEXT_A}
    fields = ("verdict", "canonical_id", "stage", "score")
    got = {}
    for each, count in ((never, 3), (stack, 7)):
        _decided(each, [other | {"published_at": "2026-01-17T08:00:00Z"}], count + 1)
        copy = _report("E1-s", "https://z.example.com/E1", "2026-01-17")
        got[each.name] = [_decided(each, [copy], count + 2)[-1][f] for f in fields]
    assert got[stack.name] == got[never.name] == ["unique", "E1-s", None, None]

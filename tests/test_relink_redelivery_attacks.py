"""The service's relink, review and report of a document the crawler sent again, attacked.

A redelivered document (same id and content, found at another URL or dated later) gets its first verdict and
claims nothing, but the worker sends its link record again with the features of what it received: the other
URL's hash, the later date. Whatever reads `dedup.links` for a document's verdict (`dedup replay`, the
relink's plan, the review, the report) must take the first record of such a re-send, which says what
deciding claimed (`streams.kafka.replay.sent_again`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
import redis

from streams.core.cascade import URL_KEY
from streams.core.model import DAY_S
from streams.core.relink import Label
from streams.evaluation.stack import Stack
from streams.kafka.journal import read_to_end
from streams.reporting.verdicts import read_topic
from streams.service.relink import latest_links, relink_service
from streams.stores.redis_store import RedisStateStore

TEXT_A = " ".join(f"alpha{i} beta{i % 7} gamma{i % 11}" for i in range(120))


HOUSEKEEPING = {"sweep", "oldest"}
"""Hashes that say where sweeping stands and bound the oldest stamps (lower bounds), not what is decided."""


def _rfc(when: int) -> str:
    return datetime.fromtimestamp(when, UTC).isoformat()


def _state(stack: Stack) -> RedisStateStore:
    settings = stack.settings()
    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    return RedisStateStore(client, settings.redis_prefix, settings.redis_bucket_bits, settings.retention)


def _redis(stack: Stack) -> dict[str, dict[str, str]]:
    """Every hash under the stack's prefix, as Redis holds it (verdicts with their seq, keys with their stamps)."""
    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    try:
        found = {}
        for key in client.scan_iter(f"{stack.name}:*"):
            if client.type(key) == "hash" and key.rsplit(":", 1)[1] not in HOUSEKEEPING:
                found[key] = client.hgetall(key)
        return found
    finally:
        client.close()


def _records(stack: Stack) -> list[dict[str, Any]]:
    """Every record of the links topic, in order (one partition)."""
    settings = stack.settings()
    return [orjson.loads(message.value()) for message in read_to_end(settings, settings.topics.links)]


def _wipe_and_replay(stack: Stack) -> None:
    client = redis.Redis.from_url(stack.redis_url)
    client.delete(*client.scan_iter(f"{stack.name}:*"))
    client.close()
    shutil.rmtree(stack.folder / "state" / "vectors", ignore_errors=True)
    subprocess.run(
        [sys.executable, "-m", "streams", "replay"],
        env={**os.environ, **stack.env()},
        capture_output=True,
        timeout=300,
        check=True,
    )


def _redelivered(make_stack: Callable[[str], Stack]) -> tuple[Stack, dict[str, dict[str, Any]]]:
    """`c`, and two near-copies of it, `x` and `z`, under review (group cap 1: published, never embedded);
    then `x` and `z` sent again from a mirror, dated a month later. The first link record of each."""
    stack = make_stack("url,content,simhash")
    stack.partitions = 1
    stack.extra_env.update({"DEDUP_GROUP_CAP": "1", "DEDUP_TOPICS__CANDIDATES": f"{stack.name}.dedup.candidates"})
    stack.create_topics()
    worker = stack.start_worker()
    when = _rfc(int(time.time()) - 40 * DAY_S)
    first = [
        {"id": "c", "url": "https://a.example/c", "title": "t", "body": TEXT_A, "published_at": when},
        {"id": "x", "url": "https://a.example/x", "title": "t", "body": TEXT_A.replace("alpha5 ", "alphaX ")}
        | {"published_at": when},
        {"id": "z", "url": "https://a.example/z", "title": "t", "body": TEXT_A.replace("alpha9 ", "alphaZ ")}
        | {"published_at": when},
    ]
    stack.produce(orjson.dumps(article) for article in first)
    links, _ = stack.final_links({"c", "x", "z"})
    assert [links[d]["verdict"] for d in "xz"] == ["review", "review"]
    later = _rfc(int(time.time()) - 10 * DAY_S)
    again = [
        {**article, "url": f"https://mirror.example/{article['id']}", "published_at": later} for article in first[1:]
    ]
    stack.produce(orjson.dumps(article) for article in again)
    every = stack.read(stack.settings().topics.links, until=5)
    worker.stop()
    resent = {record["doc_id"]: record for record in every[3:]}
    assert {d: resent[d]["seq"] for d in "xz"} == {d: links[d]["seq"] for d in "xz"}  # the same verdict, again
    assert resent["x"]["url_hash"] != links["x"]["url_hash"]
    return stack, links


def test_a_relink_plans_a_redelivered_document_from_what_deciding_it_claimed(
    make_stack: Callable[[str], Stack],
) -> None:
    """A person confirms `x` (a duplicate of `c` after all) and keeps `z` apart. The relink planned from each
    document's latest record, the re-send: it moved `x`'s keys by the mirror URL's hash, which nobody holds,
    and left `x`'s own URL key pointing at `x`, a duplicate now (a later article there was linked through a
    duplicate, and a replay restored no such key); it stamped `z`, a canonical now, and the stream's clock,
    with the date of the re-send, which the state never saw; and its records said so, for replay to repeat."""
    stack, first = _redelivered(make_stack)
    settings = stack.settings()
    state = _state(stack)
    clock = state.clock()

    result = relink_service(settings, decisions=[Label("x", "c", True), Label("z", "c", False)])
    assert [c.doc_id for c in result.plan.changes] == ["x", "z"] and not result.plan.refused
    x_url = URL_KEY + first["x"]["url_hash"]
    assert state.exact_lookup([x_url]) == {x_url: "c"}  # a duplicate's keys lead to its canonical
    assert state.clock() == clock
    relinked = {record["doc_id"]: record for record in _records(stack)[5:]}
    assert relinked["x"]["keys"] == ["url", "content"]
    for doc_id in "xz":
        for name in ("url_hash", "published_at"):
            assert relinked[doc_id][name] == first[doc_id][name], (doc_id, name)

    live = _redis(stack)
    _wipe_and_replay(stack)
    assert _redis(stack) == live


def test_the_report_and_the_review_read_a_relinked_redelivered_document_as_the_relink_left_it(
    make_stack: Callable[[str], Stack],
) -> None:
    """A person keeps `z` apart; the crawler sends `z` again. The worker re-sends `z`'s verdict as a plain
    record (no `decided_by`), with the mirror's features and a new `linked_at`. The report took that re-send
    for `z`'s verdict: a verdict of the cascade, given the day it was sent again."""
    stack, first = _redelivered(make_stack)
    settings = stack.settings()
    relink_service(settings, decisions=[Label("z", "c", False)])
    relink = _records(stack)[5]
    assert (relink["doc_id"], relink["decided_by"]) == ("z", "person")
    worker = stack.start_worker(instance=stack.workers[0].instance)
    body = TEXT_A.replace("alpha9 ", "alphaZ ")
    again = {"id": "z", "url": "https://other.example/z", "title": "t", "body": body}
    stack.produce([orjson.dumps(again | {"published_at": first["z"]["published_at"]})])
    deadline = time.monotonic() + 120
    while len(records := _records(stack)) < 7:
        assert time.monotonic() < deadline, "the redelivered document got no verdict"
        time.sleep(0.5)
    resent = records[6]
    worker.stop()
    assert (resent["doc_id"], resent["seq"], resent.get("decided_by")) == ("z", relink["seq"], None)

    decision = read_topic(settings).decisions["z"]
    assert (decision.verdict, decision.decided_by) == ("unlinked", "person")
    assert decision.linked_at == datetime.fromisoformat(relink["linked_at"])
    planned = latest_links(settings)["z"]
    assert {k: planned[k] for k in ("decided_by", "url_hash", "linked_at")} == {
        k: relink[k] for k in ("decided_by", "url_hash", "linked_at")
    }


def _published(stack: Stack) -> list[dict[str, Any]]:
    """Every record of `articles.deduped`, in order (one partition)."""
    settings = stack.settings()
    return [orjson.loads(message.value()) for message in read_to_end(settings, settings.topics.deduped)]


def test_a_relink_publishes_a_redelivered_document_as_it_was_decided(make_stack: Callable[[str], Stack]) -> None:
    """A person keeps `z` apart: the relink publishes it to the indexers as a canonical. `z` was sent again
    from a mirror a month later, and the worker published it again as received. The relink took the latest
    article of `z` on `articles.deduped`, the mirror's: the indexers got the mirror's URL and date for the
    article the verdict was about, and features that disagree with the relink's own link record (the first
    record's URL hash and date)."""
    stack, first = _redelivered(make_stack)
    settings = stack.settings()
    before = _published(stack)
    assert [(a["id"], a["url"]) for a in before[3:]] == [
        ("x", "https://mirror.example/x"),
        ("z", "https://mirror.example/z"),
    ]  # the worker published the redelivered reviews again, as received

    result = relink_service(settings, decisions=[Label("z", "c", False)])
    assert [c.doc_id for c in result.plan.changes] == ["z"] and result.published == 1
    article = _published(stack)[len(before) :]
    assert [a["id"] for a in article] == ["z"]
    relinked = _records(stack)[5]
    assert relinked["doc_id"] == "z"
    published = article[0]
    assert published["url"] == "https://a.example/z"
    assert datetime.fromisoformat(published["published_at"]) == datetime.fromisoformat(first["z"]["published_at"])
    for name in ("url_hash", "content_hash", "published_at"):
        assert published["features"][name] == relinked[name] == first["z"][name], name
    assert published["features"]["verdict"] == "unlinked"

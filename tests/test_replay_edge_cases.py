"""`dedup replay` (Kafka) on what a topic may hold besides well-formed links in order, and run twice: each test
a guarantee that once broke (a record of the wrong types crashed the replay, a re-run grew groups again, times
of other offsets were ordered as text). The session's redis-server and Kafka-protocol broker (tests/conftest.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
import redis
from confluent_kafka import Producer

from streams.core.model import DAY_S, Verdict
from streams.evaluation.stack import Stack
from streams.kafka.replay import replay_links
from streams.records.article import format_timestamp
from streams.stores.redis_store import RedisStateStore

T0 = 1_700_000_000  # 2023-11-14: well before the wall clock, no clamp bites


# --- helpers ---------------------------------------------------------------------------------------------


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    made = redis.Redis.from_url(redis_url, decode_responses=True)
    yield made
    made.close()


@pytest.fixture
def stack(make_stack: Callable[[str], Stack]) -> Stack:
    made = make_stack("url,content,simhash")
    made.partitions = 1
    made.create_topics()
    return made


def _link(doc_id: str, **fields: Any) -> dict[str, Any]:
    """A valid `dedup.links` record (a unique canonical unless told otherwise)."""
    record: dict[str, Any] = {
        "doc_id": doc_id,
        "verdict": "unique",
        "canonical_id": doc_id,
        "stage": None,
        "score": None,
        "linked_at": "2026-11-01T00:00:00.000Z",
        "model": None,
        "url_hash": uuid.uuid5(uuid.NAMESPACE_URL, f"u{doc_id}").hex * 2,
        "content_hash": uuid.uuid5(uuid.NAMESPACE_URL, f"c{doc_id}").hex * 2,
        "simhash": f"{hash(doc_id) & 0xFFFF_FFFF_FFFF_FFFF:016x}",
        "language": "en",
        "published_at": format_timestamp(T0),
    }
    record.update(fields)
    return record


def _produce(stack: Stack, records: list[dict[str, Any]]) -> None:
    producer = Producer({"bootstrap.servers": stack.bootstrap, "linger.ms": 5})
    for record in records:
        key = record["doc_id"] if isinstance(record["doc_id"], str) else "odd"
        producer.produce(stack.settings().topics.links, orjson.dumps(record), key.encode())
    assert producer.flush(30) == 0


def _store(client: redis.Redis, stack: Stack) -> RedisStateStore:
    settings = stack.settings()
    return RedisStateStore(client, f"{stack.name}:", settings.redis_bucket_bits, settings.retention)


# --- a re-run of the replay grows groups again -----------------------------------------------------------


def test_a_rerun_replay_is_idempotent_for_a_duplicate_whose_verdict_expired(client: redis.Redis, stack: Stack) -> None:
    """A re-run is idempotent: replaying the same topic twice leaves the same state. A duplicate whose verdict
    passed `verdicts_days` (7) looks undecided to the second run, which restores it again and grows its
    canonical's group (kept 365 days) a second time."""
    canonical = _link("C", seq=1)
    duplicate = _link("X", seq=2, verdict="duplicate", canonical_id="C", stage="url", url_hash=canonical["url_hash"])
    later = _link("Z", seq=3, published_at=format_timestamp(T0 + 10 * DAY_S))
    _produce(stack, [canonical, duplicate, later])
    settings, prefix = stack.settings(), f"{stack.name}:"

    first = replay_links(settings, client, None, prefix=prefix)
    assert (first.restored, first.bad) == (3, [])
    size_after_first = _store(client, stack).group_size("C")
    assert size_after_first == 2

    second = replay_links(settings, client, None, prefix=prefix)
    assert (_store(client, stack).group_size("C"), second.restored) == (size_after_first, 0)


# --- an id reused: its old members' links are history, not chains ---------------------------------------------


def test_a_member_of_an_id_later_reused_for_a_review_is_no_chain_to_report(client: redis.Redis, stack: Stack) -> None:
    """C is a canonical and D its duplicate; a year and more later (exact keys and groups kept 365 days) the
    crawler reuses the id C for a near-copy of B, sent to review against B. Compaction keeps C's latest record
    only, so the replay restored D's link to C and then C as a review, in one batch: it reported D's record as
    skipped, "a chain". Live there never was one: C was decided again only once D's membership had expired (a
    canonical with members is never linked). D's link is history: passed over, reported as nothing."""
    later = format_timestamp(T0 + 400 * DAY_S)
    canonical = _link("C", seq=1)
    member = _link("D", seq=2, verdict="duplicate", canonical_id="C", stage="url", url_hash=canonical["url_hash"])
    other = _link("B", seq=3, published_at=later)
    reused = _link("C", seq=4, verdict="review", canonical_id="B", stage="simhash", score=0, published_at=later)
    _produce(stack, [canonical, member, other, reused])
    stats = replay_links(stack.settings(), client, None, prefix=f"{stack.name}:")
    assert (stats.documents, stats.bad) == (3, [])
    store = _store(client, stack)
    assert store.verdict_of("D") is None and store.group_size("C") == 1
    held = store.verdict_of("C")
    assert held is not None and (held.verdict, held.canonical_id) == (Verdict.REVIEW, "B")


# --- bad records crash the replay ------------------------------------------------------------------------


@pytest.mark.parametrize("bad_id", [["x"], 7], ids=["list", "integer"])
def test_a_record_whose_doc_id_is_no_string_is_skipped_not_fatal(
    client: redis.Redis, stack: Stack, bad_id: Any
) -> None:
    """Bad records are skipped with a reason, never crash the replay, never lose valid ones
    (schemas/link.schema.json: doc_id is a string)."""
    good = [_link("A", seq=1), _link("B", seq=3)]
    bad = {**_link("ignored", seq=2), "doc_id": bad_id, "canonical_id": bad_id}
    _produce(stack, [good[0], bad, good[1]])
    stats = replay_links(stack.settings(), client, None, prefix=f"{stack.name}:")
    assert (stats.restored, len(stats.bad)) == (2, 1), stats
    store = _store(client, stack)
    assert store.verdict_of("A") is not None and store.verdict_of("B") is not None


# --- records without seq ordered by linked_at as a string ------------------------------------------------


def test_records_without_seq_keep_the_latest_by_time_not_by_string(client: redis.Redis, stack: Stack) -> None:
    """ "Links without `seq` come first, by `linked_at`" (an RFC 3339 time, link.schema.json). A document's
    later record must win: 06:30+06:00 is 00:30Z, before the relink at 01:00Z, but sorts after it as text."""
    canonical = _link("C", linked_at="2026-11-01T00:00:00Z")
    linked = _link(
        "A", verdict="duplicate", canonical_id="C", stage="simhash", score=2,
        linked_at="2026-11-01T06:30:00+06:00",
    )  # fmt: skip
    unlinked = _link("A", verdict="unlinked", canonical_id="A", stage=None, keys=[], linked_at="2026-11-01T01:00:00Z")
    _produce(stack, [canonical, unlinked, linked])  # in the topic the relink comes first: order is by time
    stats = replay_links(stack.settings(), client, None, prefix=f"{stack.name}:")
    assert (stats.documents, stats.bad) == (2, [])
    got = _store(client, stack).verdict_of("A")
    assert got is not None and got.verdict is Verdict.UNLINKED, got


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("canonical_id", 7),
        ("url_hash", 12),
        ("score", "close"),
    ],
)
def test_a_record_with_a_field_of_the_wrong_type_is_skipped_not_fatal(
    client: redis.Redis, stack: Stack, field: str, value: Any
) -> None:
    """As above, for the other fields link.schema.json types: a string canonical_id, 64 hex digits of url hash,
    a number or null score. Such a record is reported
    bad and skipped; the valid ones around it are restored."""
    good = [_link("A", seq=1), _link("B", seq=3)]
    bad = _link("D", seq=2, verdict="duplicate", canonical_id="A", stage="simhash", score=1)
    bad[field] = value
    _produce(stack, [good[0], bad, good[1]])
    stats = replay_links(stack.settings(), client, None, prefix=f"{stack.name}:")
    assert (stats.restored, len(stats.bad)) == (2, 1), stats
    store = _store(client, stack)
    assert store.verdict_of("A") is not None and store.verdict_of("B") is not None


def test_a_canonical_with_a_simhash_longer_than_16_hex_digits_is_refused_or_restored_whole(
    client: redis.Redis, stack: Stack
) -> None:
    """link.schema.json: simhash is 16 hex digits. One of 20 (80 bits) is read as an int without a check; its s:
    entry is then written with 20 digits, and the 4 after the first 16 are read back as the entry's day
    stamp (0x1111: 1981), so the canonical is expired the moment it is restored: invisible to every band
    lookup, silently. Either the record is skipped as bad, or the canonical it restores is a candidate."""
    odd = _link("E", seq=1, simhash="1" * 20)
    _produce(stack, [odd])
    stats = replay_links(stack.settings(), client, None, prefix=f"{stack.name}:")
    store = _store(client, stack)
    if stats.bad:
        return
    bands = store.band_layout.keys(int(odd["simhash"], 16))
    found = [c.doc_id for c in store.band_candidates("en", bands)]
    entries = {k: client.hgetall(k) for k in client.scan_iter(f"{stack.name}:s:*")}
    assert found == ["E"], (stats, found, entries)

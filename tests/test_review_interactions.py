"""Where two of one day's fixes meet: the same stream must give the same verdicts on `dedup run` (SQLite) and on
the service (its `BatchedState` on a real redis-server), and a replay must rebuild the state live decided.

Real stores (redis-server from tests/conftest.py, SQLite, qdrant-client's local mode), the real cascade, the
bundled model and NTREX texts where the semantic stage is involved.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson

from streams.config import RetentionSettings, Settings
from streams.core.model import Verdict
from streams.evaluation.corpus import NtrexDocument
from streams.kafka.replay import Restorer
from streams.records.article import format_timestamp
from streams.runner.embedded import RunPaths, run
from streams.service.resources import Resources
from streams.service.stages import Agent
from streams.stores.redis_store import RedisStateStore, connect
from streams.vectors.qdrant_server import QdrantVectorStore
from tests.test_cluster_lost_replies import BITS, RETENTION, _record
from tests.test_figure_check import CHEAP
from tests.test_group_attacks import MARKET, OTHER, UPDATED, _file, _service
from tests.test_group_attacks import _article as _market
from tests.test_semantic_vector_faults import _batch, _doc

T0 = 1_700_000_000
HOUR = 3600
DAY = 24 * HOUR


def _article(doc_id: str, sentences: list[str], when: int, language: str) -> dict[str, Any]:
    return {"id": doc_id, "url": f"https://{doc_id}.example.com/story", "title": sentences[0],
            "body": " ".join(sentences[1:]), "published_at": format_timestamp(when), "language": language}  # fmt: skip


def _file_verdicts(tmp_path: Path, settings: Settings, records: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    paths = RunPaths(out=tmp_path / "out", state=tmp_path / "out" / "state")
    run(settings, [str(source)], paths)
    links = [orjson.loads(line) for line in paths.links.read_bytes().splitlines()]
    return [(r["doc_id"], r["verdict"], r["canonical_id"]) for r in links]


def test_a_canonical_redelivered_with_a_later_date_keeps_its_vector_where_it_was(
    redis_url: str, tmp_path: Path, qdrant_store: QdrantVectorStore, ntrex: list[NtrexDocument]
) -> None:
    """A (English) is a canonical at T0. The crawler sends A again three days later (same id, same text, a later
    `published_at`): a redelivery, its verdict stands, and the semantic agent writes its vector again (3878f4e: held
    with the batch). B, A's Bangla translation, comes an hour after the re-send: outside A's 48 h window, so
    `dedup run` (whose redelivery moves no clock and writes no vector, b1bc2fe) makes B a canonical of its own, and a
    replay keeps A's first record (12819ec: its date). The service wrote A's vector again dated with the re-send, so
    B found A three days after A was published and was linked to it: other verdicts than dedup run's."""
    story = ntrex[3]
    records = [
        _article("A", story.english, T0, "en"),
        _article("A", story.english, T0 + 3 * DAY, "en"),
        _article("B", story.bengali, T0 + 3 * DAY + HOUR, "bn"),
    ]
    expected = _file_verdicts(tmp_path, Settings(state_dir=tmp_path / "unused"), records)
    assert ("B", "unique", "B") in expected, expected  # dedup run: B is outside A's window

    settings = Settings(redis_url=redis_url, redis_prefix=f"t{uuid.uuid4().hex}:", state_dir=tmp_path / "svc")
    resources = Resources(settings, vectors=qdrant_store)
    try:
        agent = resources.stage_agent(Agent.SEMANTIC)
        a, a_again, b = (_doc(settings, r["id"], [r["title"], r["body"]], _at(r), r["language"]) for r in records)
        for doc in (a, a_again, b):
            agent.handle(_batch([doc]))
        verdict = resources.state.verdict_of("B")
        assert verdict is not None
        assert (verdict.verdict, verdict.canonical_id) == (Verdict.UNIQUE, "B"), verdict
    finally:
        resources.redis.close()


def _at(record: dict[str, Any]) -> int:
    from streams.records.article import parse_timestamp

    return parse_timestamp(record["published_at"])


def test_dedup_replay_restores_a_duplicate_into_the_service_state(redis_url: str) -> None:
    """`dedup replay` (Kafka) restores through `ReplayState`, a `BatchedState` that warms the groups a batch of links
    grows. ac90ea9 made `BatchedState` keep each group with its stamp; `warm_groups` kept putting sizes alone there,
    so the first duplicate replayed in a batch after its canonical's stopped the replay with a TypeError (size,
    stamp = an int), every time it ran."""
    client = connect(redis_url)
    prefix = f"t{uuid.uuid4().hex}:"
    restorer = Restorer(client, prefix, None, RETENTION, lock_ttl_s=30, bucket_bits=BITS)
    with restorer.owned():
        restorer.resume()
        restorer.begin()
        restorer.restore([_record("a", 1)], (1, 1, "2026-11-01T00:00:00.000Z", 0, 1))
        restorer.restore([_record("b", 2, "a")], (1, 2, "2026-11-01T00:00:00.000Z", 0, 2))  # a: warm_groups
        restorer.done(2)
    state = RedisStateStore(client, prefix, BITS, RETENTION)
    held = state.verdict_of("b")
    assert held is not None and (held.verdict, held.canonical_id) == (Verdict.DUPLICATE, "a")
    assert state.group_size("a") == 2


def test_a_group_grown_early_in_a_batch_is_not_reset_by_a_later_document_of_that_batch(
    redis_url: str, tmp_path: Path
) -> None:
    """C (a market report) and M1, its syndicated copy, on day 0: C's group has two. Nine and a half days later D1,
    another copy, joins it (exact keys live 10 days): three. In the same batch comes D2, an unrelated story dated day
    12. The agent decides D1 at D1's time (`BatchedState.see`, ac90ea9: the group is live, three), but Redis applies
    the batch's writes at the batch's clock, day 12, where the group's stamp (day 0) is past `exact_days`: it counts
    D1's growth from nothing, two. D3, an edit of C on day 12, then finds a group of two under `group_cap` 3 and is
    linked, where `dedup run` (and the same records one per batch) send it to review."""
    options: dict[str, Any] = {
        "stages": CHEAP,
        "group_cap": 3,
        "retention": RetentionSettings(exact_days=10, verdicts_days=7, bands_days=30),
    }
    records = [
        _market("C", MARKET, T0),
        _market("M1", MARKET, T0),
        _market("D1", MARKET, T0 + 9 * DAY + DAY // 2),
        _market("D2", OTHER, T0 + 12 * DAY),
        _market("D3", UPDATED, T0 + 12 * DAY + HOUR),
    ]
    expected, groups = _file(tmp_path, Settings(**options), records)
    assert ("D3", "review", "C") in expected, expected  # dedup run: a group of three at the cap
    got, resources = _service(redis_url, options, [records[:2], records[2:4], records[4:]])
    try:
        assert resources.state.group_size("C") == groups["C"]
        assert got == expected, f"the service gave {got}, dedup run {expected}"
    finally:
        resources.close()

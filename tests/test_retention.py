"""Retention per key family (issue 9 item 1): entries age in the stream's own time, are invisible once older
than their family's retention, and are swept later; nothing ever links to an expired canonical.

The documents here are published in 2025 while the wall clock says 2026 or later: a backfill of last year's
archive must behave as it did live.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from pydantic import ValidationError
from qdrant_client import QdrantClient

from streams.config import ModelThresholds, RetentionSettings, Settings
from streams.core.cascade import Cascade
from streams.core.model import DAY_S, Document, Link, ModelId, Stage, Verdict, clamped
from streams.core.ports import Reads
from streams.core.relink import Label, Stale, apply, plan_decisions
from streams.core.replay import Recorded, restore
from streams.evaluation.corpus import synthetic_articles
from streams.evaluation.stack import assert_invariants
from streams.features.bands import FOUR_BY_16
from streams.records.article import Featurizer
from streams.records.output import deduped_record, link_record
from streams.stores.sqlite import SqliteStateStore
from streams.vectors.edge import EdgeVectorStore
from streams.vectors.qdrant_server import QdrantVectorStore

pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")

CHEAP = [Stage.URL, Stage.CONTENT, Stage.SIMHASH]
T0 = int(datetime(2025, 3, 1, tzinfo=UTC).timestamp())
HOUR = 3600
WORDS = " ".join(f"word{i}" for i in range(300))


def _rfc(when: int) -> str:
    return datetime.fromtimestamp(when, UTC).isoformat()


def make(featurizer: Featurizer, doc_id: str, url: str, body: str, when: int) -> Document:
    record = {"id": doc_id, "url": url, "title": "t", "body": body, "published_at": _rfc(when)}
    doc = featurizer.featurize(record, b"", ingest_time=when)
    assert isinstance(doc, Document), doc
    return doc


class Stream:
    """The cascade on a SQLite state with the settings' retention, the clock advanced before each document
    as the runner advances it."""

    def __init__(self, settings: Settings, path: Path | str = ":memory:", **cascade: Any) -> None:
        self.settings = settings
        self.state = state = SqliteStateStore(path, retention=settings.retention)
        self.cascade = Cascade(settings, state, **cascade)
        self.featurizer = Featurizer(settings)

    def decide(self, doc_id: str, url: str, body: str, when: int, vector: np.ndarray | None = None) -> Link:
        doc = make(self.featurizer, doc_id, url, body, when)
        self.state.advance(clamped(doc.published_at, time.time()))
        return self.cascade.decide(doc, vector).link


def _settings(**retention: float) -> Settings:
    return Settings(stages=CHEAP, retention=RetentionSettings(**retention))


@pytest.fixture
def stream() -> Iterator[Stream]:
    made = Stream(_settings(bands_days=30, exact_days=365, verdicts_days=7))
    yield made
    made.state.close()


# ---------------------------------------------------------------------------------------------- settings


def test_settings_defaults_environment_and_the_vector_window(monkeypatch: pytest.MonkeyPatch) -> None:
    assert RetentionSettings() == RetentionSettings(bands_days=30, exact_days=365, vectors_hours=72, verdicts_days=7)
    monkeypatch.setenv("DEDUP_RETENTION__BANDS_DAYS", "12.5")
    assert Settings().retention.bands_days == 12.5
    with pytest.raises(ValidationError, match="vectors_hours"):
        Settings(retention={"vectors_hours": 24})  # shorter than the 48-hour search window
    assert Settings(retention={"vectors_hours": 0}).retention.vectors_hours == 0  # 0: kept forever
    with pytest.raises(ValidationError):
        Settings(retention={"band_days": 3})  # a typo is refused by name


# ---------------------------------------------------------------------------------------------- the cascade


def test_a_near_duplicate_of_a_canonical_past_bands_days_becomes_a_new_canonical(stream: Stream) -> None:
    assert stream.decide("a", "https://a.example.com/1", WORDS, T0) == Link.unique("a")
    near = stream.decide("b", "https://b.example.com/1", WORDS + " extra", T0 + 29 * DAY_S)
    assert (near.verdict, near.canonical_id, near.stage) == (Verdict.DUPLICATE, "a", Stage.SIMHASH)
    late = stream.decide("c", "https://c.example.com/1", WORDS + " other", T0 + 31 * DAY_S)
    assert late == Link.unique("c")  # never a link to a canonical whose bands are gone
    # ... and c is the canonical of what follows it.
    after = stream.decide("d", "https://d.example.com/1", WORDS + " more", T0 + 32 * DAY_S)
    assert (after.verdict, after.canonical_id) == (Verdict.DUPLICATE, "c")


def test_exact_keys_live_exact_days(stream: Stream) -> None:
    stream.decide("a", "https://a.example.com/story", WORDS, T0)
    recrawl = stream.decide("r1", "https://a.example.com/story?utm_source=x", "other text", T0 + 300 * DAY_S)
    assert (recrawl.verdict, recrawl.canonical_id, recrawl.stage) == (Verdict.DUPLICATE, "a", Stage.URL)
    wire = stream.decide("w1", "https://wire.example.net/9", WORDS, T0 + 364 * DAY_S)
    assert (wire.verdict, wire.canonical_id, wire.stage) == (Verdict.DUPLICATE, "a", Stage.CONTENT)
    # A year and a day later nothing leads to a: the copy is a canonical of its own.
    assert stream.decide("r2", "https://a.example.com/story", "third text", T0 + 366 * DAY_S) == Link.unique("r2")


def test_age_is_stream_time_not_the_wall_clock(stream: Stream) -> None:
    # 2025 documents decided in 2026: a day apart in the stream, so they link as they did live.
    assert time.time() > T0 + 300 * DAY_S
    stream.decide("a", "https://a.example.com/1", WORDS, T0)
    near = stream.decide("b", "https://b.example.com/1", WORDS + " extra", T0 + DAY_S)
    assert near.canonical_id == "a"
    assert stream.state.clock() == T0 + DAY_S


def test_a_date_in_2100_moves_the_clock_no_further_than_a_day_ahead(stream: Stream) -> None:
    now = int(time.time())
    stream.decide("a", "https://a.example.com/1", WORDS, now - DAY_S)
    stream.decide("future", "https://f.example.com/1", "something else entirely " * 20, 4_102_444_800)  # 2100
    assert stream.state.clock() <= now + DAY_S + 5
    near = stream.decide("b", "https://b.example.com/1", WORDS + " extra", now)
    assert near.canonical_id == "a"  # nothing expired
    # Its entries are stamped no later than tomorrow either: they age from then, not from 2100.
    stream.state.advance(now + 40 * DAY_S)
    assert stream.state.verdict_of("future") is None and stream.state.verdict_of("b") is None


def test_the_clock_never_goes_back_and_survives_reopening(tmp_path: Path) -> None:
    state = SqliteStateStore(tmp_path / "s.sqlite3")
    assert state.clock() == 0
    assert state.advance(T0 + 10) == T0 + 10
    assert state.advance(T0) == T0 + 10
    state.close()
    again = SqliteStateStore(tmp_path / "s.sqlite3")
    assert again.clock() == T0 + 10
    again.close()


def test_redelivery_within_verdicts_days_gets_the_same_verdict(stream: Stream) -> None:
    stream.decide("a", "https://a.example.com/1", WORDS, T0)
    first = stream.decide("b", "https://b.example.com/1", WORDS + " extra", T0 + HOUR)
    stream.state.commit()
    stream.decide("x", "https://x.example.com/1", "unrelated words " * 30, T0 + 6 * DAY_S)
    doc = make(stream.featurizer, "b", "https://b.example.com/1", WORDS + " extra", T0 + HOUR)
    again = stream.cascade.decide(doc)
    assert again.repeated and again.link == first


def test_a_redelivered_canonical_past_verdicts_days_stays_canonical(stream: Stream) -> None:
    """Its verdict is gone, but its exact keys (kept longer) still lead to itself."""
    stream.decide("a", "https://a.example.com/1", WORDS, T0)
    stream.decide("b", "https://b.example.com/1", WORDS + " extra", T0 + HOUR)
    stream.decide("x", "https://x.example.com/1", "unrelated words " * 30, T0 + 40 * DAY_S)
    assert stream.state.verdict_of("a") is None
    again = stream.decide("a", "https://a.example.com/1", WORDS, T0)
    assert again == Link.unique("a")


def test_a_redelivered_canonical_with_members_stays_canonical_after_its_keys_expired() -> None:
    """Verdicts and exact keys gone, but its group (stamped with its latest member) says it is a canonical:
    linked to a newer canonical, its members' links would be chains."""
    stream = Stream(_settings(bands_days=10, exact_days=20, verdicts_days=7))
    stream.decide("a", "https://a.example.com/1", WORDS, T0)
    member = stream.decide("y", "https://a.example.com/1?utm_source=x", "recrawl", T0 + 19 * DAY_S)
    assert (member.verdict, member.canonical_id) == (Verdict.DUPLICATE, "a")
    assert stream.decide("n", "https://n.example.com/1", WORDS + " newer", T0 + 21 * DAY_S) == Link.unique("n")
    stream.decide("x", "https://x.example.com/1", "unrelated words " * 30, T0 + 22 * DAY_S)
    assert stream.state.verdict_of("a") is None
    assert stream.decide("a", "https://a.example.com/1", WORDS, T0) == Link.unique("a")
    stream.state.close()


def test_copies_of_a_document_under_review_past_verdicts_days_never_link_to_it() -> None:
    """A document under review holds its own keys; once its verdict has expired nobody can tell, so its keys
    expire with its verdict: a later copy is decided afresh, never a duplicate of a non-canonical."""
    settings = Settings(stages=CHEAP, group_cap=1)  # the cap sends near-duplicates to review
    stream = Stream(settings)
    state = stream.state
    stream.decide("a", "https://a.example.com/1", WORDS, T0)
    review = stream.decide("r", "https://r.example.com/1", WORDS + " extra", T0 + HOUR)
    assert (review.verdict, review.canonical_id) == (Verdict.REVIEW, "a")
    copy = stream.decide("c1", "https://r.example.com/1?utm_source=x", "x", T0 + 2 * HOUR)
    assert (copy.verdict, copy.canonical_id) == (Verdict.REVIEW, "a")  # shares the review, within 7 days
    later = stream.decide("c2", "https://r.example.com/1?utm_source=y", "y", T0 + 8 * DAY_S)
    assert later == Link.unique("c2")
    state.close()


# ---------------------------------------------------------------------------------------------- SQLite sweep


def _rows(path: Path) -> dict[str, int]:
    with closing(sqlite3.connect(path)) as db:
        tables = ("verdicts", "exact_keys", "canonicals", "groups")
        return {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables}


def test_expire_frees_rows_bounded_idempotent_and_resumable(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    retention = RetentionSettings(bands_days=30, exact_days=365, verdicts_days=7)
    stream = Stream(Settings(stages=CHEAP, retention=retention), path)
    state = stream.state
    for n in range(10):  # ten canonicals and a near-duplicate of each, on ten days
        body = " ".join(f"s{n}w{i}" for i in range(300))
        stream.decide(f"c{n}", f"https://a.example.com/{n}", body, T0 + n * DAY_S)
        stream.decide(f"d{n}", f"https://b.example.com/{n}", body + " extra", T0 + n * DAY_S + HOUR)
    state.commit()
    before = _rows(path)
    assert before == {"verdicts": 20, "exact_keys": 40, "canonicals": 10, "groups": 10}
    # The clock is at day 9: the verdicts of days 0 and 1 and that of c2 (published at day 2) are past 7 days.
    assert state.expire(limit=3) == 3
    state.close()  # stopped half-way: the next run goes on
    state = SqliteStateStore(path, retention=retention)
    assert state.clock() == T0 + 9 * DAY_S + HOUR
    assert state.expire(limit=100) == 2
    assert state.expire() == 0  # idempotent
    state.advance(T0 + 16 * DAY_S)
    assert state.expire() == 13
    state.commit()
    assert _rows(path) == {"verdicts": 2, "exact_keys": 40, "canonicals": 10, "groups": 10}
    state.advance(T0 + 400 * DAY_S)
    assert state.expire() == 2 + 40 + 10 + 10
    state.commit()
    assert _rows(path) == {"verdicts": 0, "exact_keys": 0, "canonicals": 0, "groups": 0}
    state.close()


def test_expired_entries_are_invisible_before_the_sweep_warm_or_not() -> None:
    state = SqliteStateStore(":memory:", retention=RetentionSettings(bands_days=30, exact_days=365, verdicts_days=7))
    state.advance(T0)
    state.exact_claim(["u:1"], "a", T0)
    state.add_canonical("a", 42, "en", (1, 2, 3, 4), T0)
    state.record_verdict(Link("b", Verdict.DUPLICATE, "a", Stage.SIMHASH, 2, published_at=T0))
    assert state.grow_group("a", T0) == 2
    state.commit()
    state.advance(T0 + 8 * DAY_S)
    assert state.verdict_of("b") is None
    assert [c.published_at for c in state.band_candidates("en", (1, 0, 0, 0))] == [T0]
    state.advance(T0 + 31 * DAY_S)
    assert state.band_candidates("en", (1, 0, 0, 0)) == []
    state.commit()
    state.warm(Reads(["b"], ["u:1"], [("en", (1, 2, 3, 4))]))
    assert state.band_candidates("en", (1, 2, 3, 4)) == []
    assert state.exact_lookup(["u:1"]) == {"u:1": "a"}
    assert state.group_size("a") == 2
    state.advance(T0 + 366 * DAY_S)
    assert state.exact_lookup(["u:1"]) == {}
    assert state.group_size("a") == 1
    assert state.exact_claim(["u:1"], "z", T0 + 366 * DAY_S) == {"u:1": "z"}  # an expired key is free
    state.close()


# The schema of the version before retention, verbatim: a state folder it made must open and keep its data.
_OLD_SCHEMA = """
CREATE TABLE verdicts (
    doc_id TEXT PRIMARY KEY, verdict TEXT NOT NULL, canonical_id TEXT NOT NULL,
    stage TEXT, score REAL, model TEXT, content TEXT
) WITHOUT ROWID;
CREATE TABLE exact_keys (key BLOB PRIMARY KEY, canonical_id TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE canonicals (
    seq INTEGER PRIMARY KEY, doc_id TEXT NOT NULL UNIQUE, simhash INTEGER NOT NULL,
    language TEXT NOT NULL, b0 INTEGER NOT NULL, b1 INTEGER NOT NULL, b2 INTEGER NOT NULL, b3 INTEGER NOT NULL
);
CREATE INDEX canonicals_b0 ON canonicals (b0);
CREATE INDEX canonicals_b1 ON canonicals (b1);
CREATE INDEX canonicals_b2 ON canonicals (b2);
CREATE INDEX canonicals_b3 ON canonicals (b3);
CREATE TABLE groups (canonical_id TEXT PRIMARY KEY, size INTEGER NOT NULL) WITHOUT ROWID;
"""


def test_a_state_of_the_previous_schema_opens_keeps_its_data_and_ages_from_its_first_clock(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    with closing(sqlite3.connect(path)) as db:
        db.executescript(_OLD_SCHEMA)
        key = hashlib.blake2b(b"u:1", digest_size=16).digest()
        db.execute("INSERT INTO verdicts VALUES ('b', 'duplicate', 'a', 'url', NULL, NULL, 'abc')")
        db.execute("INSERT INTO exact_keys VALUES (?, 'a')", (key,))
        db.execute("INSERT INTO canonicals VALUES (1, 'a', 42, 'en', 1, 2, 3, 4)")
        db.execute("INSERT INTO groups VALUES ('a', 2)")
        db.commit()
    retention = RetentionSettings(bands_days=30, exact_days=365, verdicts_days=7)
    state = SqliteStateStore(path, retention=retention)
    assert state.clock() == 0
    assert state.verdict_of("b") == Link("b", Verdict.DUPLICATE, "a", Stage.URL)
    state.advance(T0)  # the first clock: the old rows are stamped with it ("stamped at migration")
    state.commit()
    assert state.exact_lookup(["u:1"]) == {"u:1": "a"}
    assert [c.doc_id for c in state.band_candidates("en", (1, 0, 0, 0))] == ["a"]
    assert state.group_size("a") == 2
    state.advance(T0 + 8 * DAY_S)
    assert state.verdict_of("b") is None and state.exact_lookup(["u:1"]) == {"u:1": "a"}
    state.close()
    again = SqliteStateStore(path, retention=retention)  # opened again: migrated once, data kept
    assert again.clock() == T0 + 8 * DAY_S
    assert [c.published_at for c in again.band_candidates("en", (1, 0, 0, 0))] == [T0]
    again.close()


# ---------------------------------------------------------------------------------------------- vectors

MODEL = ModelId("test-model", "v1", 4)


def _unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


@pytest.fixture(params=["edge", "server"])
def vectors(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EdgeVectorStore | QdrantVectorStore]:
    store: EdgeVectorStore | QdrantVectorStore = (
        EdgeVectorStore(tmp_path / "vectors")
        if request.param == "edge"
        else QdrantVectorStore(QdrantClient(":memory:"))
    )
    yield store
    store.close()


def test_vector_expire_deletes_by_range(vectors: EdgeVectorStore | QdrantVectorStore) -> None:
    assert vectors.expire(MODEL, T0) == 0  # no collection yet
    for n in range(6):
        vectors.add(MODEL, f"v{n}", _unit(1, n, 0, 0), T0 + n * HOUR, "en")
    assert vectors.expire(MODEL, T0 + 3 * HOUR) == 3
    assert vectors.expire(MODEL, T0 + 3 * HOUR) == 0
    hit = vectors.nearest(MODEL, _unit(1, 0, 0, 0), T0, 10 * HOUR, "en", True)
    assert hit is not None and hit.doc_id == "v3"


def _semantic_stream(tmp_path: Path, retention: RetentionSettings) -> tuple[Stream, EdgeVectorStore]:
    thresholds = ModelThresholds(link=0.9, review=0.8, cross_link=0.9, cross_review=0.8)
    settings = Settings(
        stages=[Stage.SEMANTIC], semantic={"thresholds": {"test-model": thresholds}}, retention=retention
    )
    store = EdgeVectorStore(tmp_path / "vectors")
    return Stream(settings, vectors=store, model=MODEL), store


def test_an_expired_vector_is_never_a_neighbour_even_before_the_sweep(tmp_path: Path) -> None:
    stream, store = _semantic_stream(tmp_path, RetentionSettings(vectors_hours=72))
    vector = _unit(1, 0.1, 0, 0)
    assert stream.decide("a", "https://a.example.com/1", "first " * 40, T0, vector).verdict is Verdict.UNIQUE
    stream.decide("x", "https://x.example.com/1", "unrelated " * 40, T0 + 80 * HOUR, _unit(0, 0, 1, 0))
    # b is within the 48-hour window of a, but the stream's clock says a's vector (72 hours) is gone.
    late = stream.decide("b", "https://b.example.com/1", "second " * 40, T0 + 47 * HOUR, vector)
    assert late.verdict is Verdict.UNIQUE
    assert store.expire(MODEL, T0 + 8 * HOUR) == 1  # a (b, at 47 hours, is within its 72)
    store.close()


def test_a_canonical_whose_verdict_expired_is_no_orphan(tmp_path: Path) -> None:
    """Verdicts kept a day, vectors 72 hours: a's vector outlives its verdict and is still a canonical's."""
    stream, store = _semantic_stream(tmp_path, RetentionSettings(vectors_hours=72, verdicts_days=1))
    vector = _unit(1, 0.1, 0, 0)
    stream.decide("a", "https://a.example.com/1", "first " * 40, T0, vector)
    stream.decide("x", "https://x.example.com/1", "unrelated " * 40, T0 + 40 * HOUR, _unit(0, 0, 1, 0))
    assert stream.state.verdict_of("a") is None
    near = stream.decide("b", "https://b.example.com/1", "second " * 40, T0 + 40 * HOUR, vector)
    assert (near.verdict, near.canonical_id, near.stage) == (Verdict.DUPLICATE, "a", Stage.SEMANTIC)
    assert store.nearest(MODEL, vector, T0, HOUR, "en", True) is not None  # not removed as an orphan
    store.close()


# ---------------------------------------------------------------------------------------------- replay


def test_replay_stamps_with_the_records_published_at() -> None:
    state = SqliteStateStore(":memory:", retention=RetentionSettings(bands_days=30, exact_days=365, verdicts_days=7))
    old = Recorded(Link.unique("a"), "u" * 64, "c" * 64, 42, "en", T0)
    restore(old, state)
    state.advance(T0 + 8 * DAY_S)
    assert state.verdict_of("a") is None  # its verdict aged by its own published_at
    assert [c.published_at for c in state.band_candidates("en", (42, 0, 0, 0))] == [T0]
    state.close()


def test_a_relink_of_a_document_whose_verdict_expired_is_refused_and_writes_nothing(stream: Stream) -> None:
    """The state cannot say what the change would undo (a canonical's band entries, a group): refused."""
    docs = {
        "a": make(stream.featurizer, "a", "https://a.example.com/1", WORDS, T0),
        "b": make(stream.featurizer, "b", "https://b.example.com/1", WORDS + " extra", T0 + HOUR),
    }
    records = []
    for doc in docs.values():
        stream.state.advance(doc.published_at)
        records.append(link_record(stream.cascade.decide(doc).link, doc, stages=list(Stage)))
    assert records[1]["canonical_id"] == "a"
    article = {"b": deduped_record(Link.unique("b"), docs["b"])}
    plan = plan_decisions(records, [Label("b", "a", False)], stream.state.exact_lookup, lambda _: None, article.get)
    assert [change.doc_id for change in plan.changes] == ["b"]
    stream.state.advance(T0 + 8 * DAY_S)
    with pytest.raises(Stale, match=r"retention\.verdicts_days"):
        apply(plan.changes, stream.state)
    found = stream.state.band_candidates(docs["b"].language, FOUR_BY_16.keys(docs["b"].simhash))
    assert [c.doc_id for c in found] == ["a"]  # b was not registered as a canonical
    assert stream.state.group_size("a") == 2


# ---------------------------------------------------------------------------------------------- dedup run


def _dedup(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams", *args], capture_output=True, text=True, env=env, timeout=600, check=False
    )


def test_dedup_run_past_verdicts_days_takes_verdicts_and_versions_from_the_journal(tmp_path: Path) -> None:
    from streams.runner.embedded import RunPaths, run

    settings = Settings(stages=CHEAP, retention=RetentionSettings(verdicts_days=1))

    def article(doc_id: str, url: str, body: str, when: int) -> dict[str, Any]:
        return {"id": doc_id, "url": url, "title": "t", "body": body, "published_at": _rfc(when)}

    first = tmp_path / "day1.jsonl"
    rows = [article("x", "https://x.example.com/1", WORDS, T0), article("y", "https://y.example.com/", "y " * 99, T0)]
    rows.append(article("z", "https://z.example.com/1", "other words " * 40, T0 + 3 * DAY_S))
    first.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    state = tmp_path / "state"
    run(settings, [str(first)], RunPaths(tmp_path / "out1", state))
    again = tmp_path / "day2.jsonl"
    rows = [
        article("x", "https://x.example.com/1", WORDS, T0),
        article("x", "https://x.example.com/1", "new " * 80, T0),
    ]
    again.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    stats = run(settings, [str(again)], RunPaths(tmp_path / "out2", state))
    assert stats.repeated == 1  # x, whose verdict expired from the state: the journal has it
    links = [orjson.loads(line) for line in (tmp_path / "out2" / "links.jsonl").read_bytes().splitlines()]
    assert [(r["doc_id"], r["verdict"], r["canonical_id"], r.get("version_of")) for r in links] == [
        ("x", "unique", "x", None),
        # Other content under an id seen before: a new version, decided under its own id (its URL is x's).
        (links[1]["doc_id"], "duplicate", "x", "x"),
    ]
    assert links[1]["doc_id"].startswith("x#v")


def test_dedup_run_twice_on_one_state_expires_and_keeps_stars(tmp_path: Path) -> None:
    """Retention far shorter than the input: the first run sweeps as it goes; the second finds every verdict
    (expired from the state, kept by the journal) and decides nothing again, so nothing comes out changed."""
    articles = list(synthetic_articles(1200))  # 7 seconds apart: about two and a half hours
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(orjson.dumps(a) + b"\n" for a in articles))
    env = {
        **os.environ,
        "DEDUP_STAGES": '["url","content","simhash"]',
        "DEDUP_RETENTION__BANDS_DAYS": str(0.5 / 24),  # half an hour of stream time
        "DEDUP_RETENTION__EXACT_DAYS": str(1.5 / 24),
        "DEDUP_RETENTION__VERDICTS_DAYS": str(0.25 / 24),
    }
    out = tmp_path / "out"
    summaries = []
    for _ in range(2):
        done = _dedup("run", str(source), "--out", str(out), env=env)
        assert done.returncode == 0, done.stderr
        summaries.append(orjson.loads((out / "summary.json").read_bytes()))
    assert summaries[0]["expired"] > 0
    assert summaries[1]["repeated"] == summaries[1]["already_written"] == len(articles)
    lines = (out / "links.jsonl").read_bytes().splitlines()
    assert len(lines) == len(articles)
    latest = {record["doc_id"]: record for record in map(orjson.loads, lines)}
    assert_invariants(latest)
    with closing(sqlite3.connect(out / "state" / "state.sqlite3")) as db:
        clock = db.execute("SELECT value FROM meta WHERE name = 'clock'").fetchone()[0]
        newest = max(int(datetime.fromisoformat(a["published_at"]).timestamp()) for a in articles)
        assert clock == newest
        horizon = clock - 0.25 * HOUR
        assert db.execute("SELECT COUNT(*) FROM verdicts WHERE stamp < ?", (horizon,)).fetchone()[0] == 0

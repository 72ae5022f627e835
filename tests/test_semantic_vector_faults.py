"""The semantic agent when the vector side fails between the Redis write and the vector write.

The README's limit: "a canonical whose worker died between Redis and the vector store is invisible to the
semantic stage until its record is redelivered". These tests hold it to the second half: once the record is
redelivered, the canonical is seen, by the documents after it in the redelivered batch too, and its vector
is written whichever agent gets the redelivery. Real Redis, qdrant-client's local mode (or the server in a
container), the bundled model, NTREX text; faults are injected by wrapping the real store at a chosen call.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streams.config import Settings
from streams.core.model import Document, ModelId, Neighbour, Stage, Verdict
from streams.core.ports import Embedder
from streams.embedders import make_embedder
from streams.evaluation.corpus import NtrexDocument
from streams.records.article import Featurizer, format_timestamp
from streams.records.stage import stage_record
from streams.service.resources import Resources
from streams.service.stages import Agent, Incoming
from streams.vectors.qdrant_server import QdrantVectorStore

T0 = 1_700_000_000
HOUR = 3600


class StoreDown(RuntimeError):
    """The vector store failing (a timeout, a connection reset) at the call the test chose."""


class FailingAdds:
    """The real vector store, whose `add` raises while `failing` is set (every other call goes through)."""

    def __init__(self, inner: QdrantVectorStore) -> None:
        self._inner = inner
        self.failing = False

    def add(self, model: ModelId, doc_id: str, vector: np.ndarray, *args: Any, **kwargs: Any) -> None:
        if self.failing:
            raise StoreDown(f"vector store down while adding {doc_id}")
        self._inner.add(model, doc_id, vector, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class Interleaving:
    """The real embedder, running `between` once just before its first call returns (the agent is then
    between its snapshot read without the lease and taking the lease)."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.between: Callable[[], None] | None = None

    @property
    def model_id(self) -> ModelId:
        return self._inner.model_id

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        found = self._inner.embed(texts)
        between, self.between = self.between, None
        if between is not None:
            between()
        return found


def _doc(settings: Settings, doc_id: str, sentences: list[str], when: int, language: str) -> Document:
    article = {
        "id": doc_id,
        "url": f"https://{doc_id}.example.com/story",
        "title": sentences[0],
        "body": " ".join(sentences[1:]),
        "published_at": format_timestamp(when),
        "language": language,
    }
    doc = Featurizer(settings).featurize(article, b"", ingest_time=when)
    assert isinstance(doc, Document), doc
    return doc


def _batch(docs: list[Document]) -> list[Incoming]:
    return [
        Incoming(stage_record(doc, T0 * 1000), doc.doc_id.encode(), T0 * 1000, "dedup.stage.semantic", 0, offset)
        for offset, doc in enumerate(docs)
    ]


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    return Settings(redis_url=redis_url, redis_prefix=f"t{uuid.uuid4().hex}:", state_dir=tmp_path)


@pytest.fixture
def pair(settings: Settings, ntrex: list[NtrexDocument]) -> tuple[Document, Document]:
    """An English article and its Bangla translation an hour later: one by one, a semantic duplicate of it."""
    story = ntrex[3]
    return _doc(settings, "A", story.english, T0, "en"), _doc(settings, "B", story.bengali, T0 + HOUR, "bn")


def _found(store: QdrantVectorStore, model: ModelId, doc: Document, vector: np.ndarray) -> Neighbour | None:
    return store.nearest_between(model, vector, doc.published_at, doc.published_at, doc.language, True)


def test_a_redelivered_canonical_is_seen_by_the_documents_after_it_in_its_batch(
    settings: Settings, qdrant_store: QdrantVectorStore, pair: tuple[Document, Document]
) -> None:
    """A is decided (a canonical, recorded in Redis) and its vector write fails: the batch stops there, as a
    worker killed between the two writes does. Redelivered, A comes back with B, its translation, behind it
    (what was pending after A's batch). One by one, B is a semantic duplicate of A; it came out a second
    canonical: A's vector was written again only after the batch was decided, so B searched without it."""
    a, b = pair
    embedder = make_embedder(settings.semantic)
    store = FailingAdds(qdrant_store)
    first = Resources(settings, embedder=embedder, vectors=store)  # type: ignore[arg-type]
    store.failing = True
    with pytest.raises(StoreDown):
        first.stage_agent(Agent.SEMANTIC).handle(_batch([a]))
    recorded = first.state.verdict_of("A")
    assert recorded is not None and recorded.verdict is Verdict.UNIQUE  # Redis has it, the store does not
    first.redis.close()  # the store is the fixture's: closed after the test

    store.failing = False
    again = Resources(settings, embedder=embedder, vectors=store)  # type: ignore[arg-type]
    out = again.stage_agent(Agent.SEMANTIC).handle(_batch([a, b]))

    assert out, "the redelivered batch sent nothing"
    verdict = again.state.verdict_of("B")
    assert verdict is not None
    assert (verdict.verdict, verdict.canonical_id, verdict.stage) == (Verdict.DUPLICATE, "A", Stage.SEMANTIC)
    vector = embedder.embed([a.text])[0]
    assert (found := _found(qdrant_store, embedder.model_id, a, vector)) is not None and found.doc_id == "A"
    again.redis.close()


def test_a_redelivered_canonical_embedded_before_another_agent_recorded_it_gets_its_vector_written(
    settings: Settings, qdrant_store: QdrantVectorStore, pair: tuple[Document, Document]
) -> None:
    """Two semantic agents in one group. After a rebalance the second one (Y) gets A's record while the first
    one (X) is still deciding it: Y reads its snapshot without the lease, finds A undecided and embeds it;
    meanwhile X records A a canonical and dies before its vector write. Y then decides A under the lease: a
    repeated canonical, for which Y holds a vector. Y sent A's link with the vector but never wrote it to the
    store, and acknowledged the record: A stayed invisible to the semantic stage for good."""
    a, b = pair
    store = FailingAdds(qdrant_store)
    embedder = make_embedder(settings.semantic)
    x = Resources(settings, embedder=embedder, vectors=store)  # type: ignore[arg-type]
    watched = Interleaving(embedder)
    y = Resources(settings, embedder=watched, vectors=store)  # type: ignore[arg-type]

    def x_decides_and_dies() -> None:
        store.failing = True
        with pytest.raises(StoreDown):
            x.stage_agent(Agent.SEMANTIC).handle(_batch([a]))
        store.failing = False

    watched.between = x_decides_and_dies
    y.stage_agent(Agent.SEMANTIC).handle(_batch([a]))

    assert watched.between is None, "Y never embedded A before taking the lease"
    held = y.state.verdict_of("A")
    assert held is not None and held.verdict is Verdict.UNIQUE
    vector = embedder.embed([a.text])[0]
    assert (found := _found(qdrant_store, embedder.model_id, a, vector)) is not None and found.doc_id == "A"
    later = y.stage_agent(Agent.SEMANTIC).handle(_batch([b]))
    assert later
    verdict = y.state.verdict_of("B")
    assert verdict is not None and (verdict.verdict, verdict.canonical_id) == (Verdict.DUPLICATE, "A")
    x.redis.close()
    y.redis.close()


@pytest.mark.xfail(
    strict=True,
    reason="a batch decided again after its verdicts were recorded sends no candidate record: its documents are"
    " repeated, and a repeated document is neither embedded (a duplicate) nor searched with again (its neighbours"
    " as they were are nowhere on record). Sending them needs a search at redelivery, excluding the document"
    " itself, whose neighbours may differ from the first attempt's: not a small change",
)
def test_a_batch_whose_vector_write_failed_still_sends_its_candidate_records(
    settings: Settings, qdrant_store: QdrantVectorStore, pair: tuple[Document, Document]
) -> None:
    """A and B (its translation) in one batch; the vector write fails after Redis recorded both verdicts, and
    the batch is decided again. B's candidate record (`dedup.candidates`: its article and vector, which
    `dedup relink` needs to unlink it, and `dedup review` to show it) is sent by the fault-free batch and not
    by the retry: the one attempt that searched with B sent nothing, so B can never be unlinked."""
    a, b = pair
    embedder = make_embedder(settings.semantic)
    clean = QdrantVectorStore(qdrant_store.client, prefix=f"{qdrant_store.prefix}_clean")  # dropped with the fixture's
    plain = Resources(
        settings.model_copy(update={"redis_prefix": f"{settings.redis_prefix}clean:"}), embedder=embedder, vectors=clean
    )
    topic = settings.topics.candidates
    fault_free = plain.stage_agent(Agent.SEMANTIC).handle(_batch([a, b]))
    assert b"B" in {out.key for out in fault_free if out.topic == topic}
    plain.redis.close()

    store = FailingAdds(qdrant_store)
    resources = Resources(settings, embedder=embedder, vectors=store)  # type: ignore[arg-type]
    agent = resources.stage_agent(Agent.SEMANTIC)
    store.failing = True
    with pytest.raises(StoreDown):
        agent.handle(_batch([a, b]))
    store.failing = False
    retried = agent.handle(_batch([a, b]))
    verdict = resources.state.verdict_of("B")
    assert verdict is not None and (verdict.verdict, verdict.stage) == (Verdict.DUPLICATE, Stage.SEMANTIC)
    resources.redis.close()
    assert b"B" in {out.key for out in retried if out.topic == topic}

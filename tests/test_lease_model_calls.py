"""The last agent never runs the model while it holds the registration lease.

Near-copies within the SimHash threshold but outside every 16-bit band are the case that used
to be embedded one at a time under the lease: the agent expects stages 1 to 3 to link them,
leaves them out of the batched embedding, and then finds they need a vector after all.
Real Redis, the real bundled model, real NTREX text.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import redis

from streams.config import Settings
from streams.core.model import Document, ModelId, Stage, Verdict
from streams.core.ports import Embedder
from streams.embedders import make_embedder
from streams.evaluation.corpus import NtrexDocument
from streams.features.bands import FOUR_BY_16
from streams.features.simhash import hamming
from streams.records.article import Featurizer
from streams.records.stage import stage_record
from streams.service import metrics
from streams.service.resources import Resources
from streams.service.stages import Agent, Incoming


class LeaseWatcher:
    """The real embedder, noting for each call whether the registration lease was held."""

    def __init__(self, inner: Embedder, client: redis.Redis, lease_key: str) -> None:
        self._inner = inner
        self._client = client
        self._key = lease_key
        self.calls: list[tuple[int, bool]] = []

    @property
    def model_id(self) -> ModelId:
        return self._inner.model_id

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append((len(texts), bool(self._client.exists(self._key))))
        return self._inner.embed(texts)


def _featurized(featurizer: Featurizer, doc_id: str, url: str, title: str, body: str) -> Document:
    doc = featurizer.featurize({"id": doc_id, "url": url, "title": title, "body": body}, b"", ingest_time=1_700_000_000)
    assert isinstance(doc, Document), doc
    return doc


def _band_missing_near_copy(featurizer: Featurizer, ntrex: list[NtrexDocument]) -> tuple[Document, Document]:
    """A real article and a one-word edit of it within the English threshold that shares no band."""
    for number, story in enumerate(ntrex):
        words = " ".join(story.english[1:]).split()
        original = _featurized(
            featurizer, f"n{number}", f"https://a.example.com/{number}", story.english[0], " ".join(words)
        )
        for position in range(len(words) - 1, 0, -1):
            edited = [*words[:position], "meanwhile", *words[position:]]
            copy = _featurized(
                featurizer, f"n{number}-edit", f"https://b.example.org/{number}", story.english[0], " ".join(edited)
            )
            near = 3 < hamming(original.simhash, copy.simhash) <= 6
            if near and not set(enumerate(FOUR_BY_16.keys(original.simhash))) & set(
                enumerate(FOUR_BY_16.keys(copy.simhash))
            ):
                return original, copy
    raise AssertionError("no band-missing near-copy in the data")


def test_no_model_call_while_the_lease_is_held(redis_url: str, tmp_path: Path, ntrex: list[NtrexDocument]) -> None:
    prefix = f"t{uuid.uuid4().hex}:"
    settings = Settings(redis_url=redis_url, redis_prefix=prefix, qdrant_url="embedded", state_dir=tmp_path)
    featurizer = Featurizer(settings)
    original, copy = _band_missing_near_copy(featurizer, ntrex)
    others = [
        _featurized(featurizer, f"o{n}", f"https://c.example.com/{n}", story.english[0], " ".join(story.english[1:]))
        for n, story in enumerate(ntrex[500:506])
    ]
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    watcher = LeaseWatcher(make_embedder(settings.semantic), client, f"{prefix}lock:register")
    resources = Resources(settings, embedder=watcher)
    agent = resources.stage_agent(Agent.SEMANTIC)
    batch = [
        Incoming(stage_record(doc, 1), doc.doc_id.encode(), 1, "stage", 0, offset)
        for offset, doc in enumerate([original, *others, copy])
    ]
    retries = metrics.EMBED_RETRIES._value.get()
    agent.handle(batch)

    assert watcher.calls, "nothing was embedded"
    assert not any(held for _, held in watcher.calls), f"model called under the lease: {watcher.calls}"
    assert metrics.EMBED_RETRIES._value.get() == retries + 1  # the copy was found to need a vector
    verdict = resources.state.verdict_of(copy.doc_id)
    assert verdict is not None and verdict.verdict is not Verdict.UNIQUE
    assert verdict.canonical_id == original.doc_id and verdict.stage is Stage.SEMANTIC
    resources.close()
    client.close()

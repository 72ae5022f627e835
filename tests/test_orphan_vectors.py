"""A vector whose document is not a canonical is never linked to, and is removed when met.

Such orphans were left by workers that wrote vectors before verdicts (a failed transaction,
a kill inside the lease). Real model, real embedded stores, real NTREX text.
"""

from __future__ import annotations

from pathlib import Path

from streams.config import Settings
from streams.core.cascade import Cascade
from streams.core.model import Document, Verdict
from streams.embedders import make_embedder
from streams.evaluation.corpus import NtrexDocument
from streams.records.article import Featurizer
from streams.stores.sqlite import SqliteStateStore
from streams.vectors.edge import EdgeVectorStore


def test_an_orphan_vector_is_never_linked_to_and_is_removed(tmp_path: Path, ntrex: list[NtrexDocument]) -> None:
    settings = Settings()
    embedder = make_embedder(settings.semantic)
    story = ntrex[7]
    record = {
        "id": "real",
        "url": "https://a.example.com/real",
        "title": story.english[0],
        "body": " ".join(story.english[1:]),
    }
    doc = Featurizer(settings).featurize(record, b"", ingest_time=1_700_000_000)
    assert isinstance(doc, Document)
    vector = embedder.embed([doc.text])[0]
    vectors = EdgeVectorStore(tmp_path / "vectors")
    vectors.add(embedder.model_id, "ghost", vector, doc.published_at, doc.language)  # no verdict anywhere
    cascade = Cascade(settings, SqliteStateStore(":memory:"), vectors, embedder.model_id)

    decision = cascade.decide(doc, vector)

    assert decision.link.verdict is Verdict.UNIQUE, decision.link
    found = vectors.nearest(embedder.model_id, vector, doc.published_at, 3600, doc.language, True)
    assert found is not None and found.doc_id == "real"  # the orphan is gone, the canonical is there
    vectors.close()

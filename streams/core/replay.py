"""Rebuilding state from published verdicts: replaying links gives back every index.

Each link carries what its document left in the state: its verdict, its exact
keys, and for a canonical its fingerprint and (when embedded) its vector.
Restoring links in the order they were decided reproduces the state exactly,
since every claim is set-if-absent and the first claimant wins again.
Restoring is idempotent: a link already in the state is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from streams.core.cascade import CONTENT_KEY, URL_KEY
from streams.core.model import Link, ModelId, Verdict
from streams.core.ports import StateStore, VectorStore
from streams.features.simhash import bands


@dataclass(frozen=True, slots=True)
class Recorded:
    """A published verdict with the features that rebuild state."""

    link: Link
    url_hash: str
    content_hash: str
    simhash: int
    language: str
    published_at: int
    vector: np.ndarray | None = None


@dataclass
class ReplayStats:
    read: int = 0
    restored: int = 0
    already_there: int = 0
    bad: list[str] = field(default_factory=list)
    """Where and why each link that could not be read was skipped (never fatal)."""


def restore(recorded: Recorded, state: StateStore, vectors: VectorStore | None = None) -> bool:
    """Put back what deciding this document put in the state; False when it is there already."""
    link = recorded.link
    if state.verdict_of(link.doc_id) == link:
        return False
    # A duplicate's keys lead to its canonical; a canonical and a document under review hold their own.
    holder = link.canonical_id if link.verdict is Verdict.DUPLICATE else link.doc_id
    state.exact_claim([URL_KEY + recorded.url_hash, CONTENT_KEY + recorded.content_hash], holder)
    if link.verdict is Verdict.UNIQUE:
        state.add_canonical(link.doc_id, recorded.simhash, recorded.language, bands(recorded.simhash))
        if vectors is not None and recorded.vector is not None and link.model:
            name, _, version = link.model.partition("@")
            model = ModelId(name, version, len(recorded.vector))
            vectors.add(model, link.doc_id, recorded.vector, recorded.published_at, recorded.language)
    elif link.verdict is Verdict.DUPLICATE:
        state.grow_group(link.canonical_id)
    state.record_verdict(link)
    return True

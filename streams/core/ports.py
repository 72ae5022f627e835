"""The interfaces the cascade talks through.

As in datasketch's storage layer, the algorithm never sees Redis, SQLite or
Qdrant: it sees these protocols. Each adapter implements one of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from streams.core.model import Canonical, Link, ModelId, Neighbour
from streams.features.bands import BandLayout


class LayoutMismatch(RuntimeError):
    """A state was written in another layout (its keys, its bucket count, its band layout) than this store's:
    reading it would misread it."""


class StateStore(Protocol):
    """Exact-key index, SimHash band sets and the verdict of every document seen.

    Every entry carries a stamp (a `published_at`, see `RetentionSettings`); the store keeps the
    stream's clock (the newest `published_at` it was advanced to) and an entry older than its family's
    retention is invisible to every read at once, and removed later by `expire`.

    Band arguments are the fingerprint's keys in the store's `band_layout`, one per table (`layout.keys`); a
    lookup reads what the layout's `near` gives for each.
    """

    band_layout: BandLayout
    """How this state indexes fingerprints: the one it was written in (`LayoutMismatch` otherwise)."""

    def verdict_of(self, doc_id: str) -> Link | None:
        """The verdict already given to `doc_id`, so a redelivery gets the same one."""

    def pending_of(self, doc_id: str) -> Link | None:
        """The link a write of `doc_id`'s verdict stopped half-way left pending: its claims and its group's
        growth may be in the state, its verdict is not (None on a store that writes a batch whole)."""

    def record_verdict(self, link: Link) -> Link:
        """Record the document's verdict unless it has one already; returns the verdict that stands.
        Stamped with `link.published_at` (the clock when None).

        A shared store must make this first-writer-wins: after a redelivery, two agents
        may decide one document at the same moment, and only one verdict may stand.
        """

    def exact_lookup(self, keys: Sequence[str]) -> dict[str, str]:
        """The canonicals that exact keys (URL or content hashes) point to; absent keys are left out."""

    def exact_claim(self, keys: Sequence[str], canonical_id: str, published_at: int) -> dict[str, str]:
        """Point each key at `canonical_id` unless it already points somewhere (an expired key points nowhere).

        Atomic set-if-absent per key, a key claimed now stamped `published_at`; returns, for every key,
        the canonical it points to afterwards.
        """

    def exact_replace(self, key: str, expected: str, canonical_id: str, published_at: int | None = None) -> bool:
        """Re-point `key` from `expected` to `canonical_id` (compare-and-set); False if it changed meanwhile.

        The key keeps its stamp, or is stamped with `published_at` when given: a relink re-points keys with
        the stamp a replay of its record gives them, so the live and the replayed state age alike."""

    def band_candidates(self, language: str, bands: Sequence[int]) -> list[Canonical]:
        """Canonicals of `language` stored, in some table i, under a key that `band_layout.near(bands[i])` gives."""

    def add_canonical(
        self,
        canonical_id: str,
        simhash: int,
        language: str,
        bands: Sequence[int],
        published_at: int,
        figures: int = 0,
    ) -> None:
        """Register a canonical in the band sets, with a first-seen `seq` after every earlier one, stamped
        with its `published_at`; its candidates carry `figures` (0: none) for stage 3's figure check. One
        registered again while its entries live keeps its seq with the same fingerprint (sent again once its verdict
        expired) and is registered anew with another (its id reused for another text: the first text's entries
        would link that text's copies to it)."""

    def grow_group(self, canonical_id: str, published_at: int) -> int:
        """Count one more member in the canonical's group; returns the new size. The group is stamped with
        its latest member's `published_at`; an expired group counts from 1 again."""

    def group_size(self, canonical_id: str) -> int: ...

    # A relink (streams.core.relink) changes verdicts already given; the cascade itself never does.

    def replace_verdict(self, link: Link, expected: Link) -> bool:
        """Replace the document's verdict `expected` (compared as `Link`s compare) by `link`; False,
        and nothing written, when its verdict is another by now. A shared store keeps `link.seq`
        when given (a replayed change) or draws the next one, as `record_verdict` does."""

    def remove_canonical(self, canonical_id: str, language: str, bands: Sequence[int]) -> None:
        """Take a canonical out of the band sets (it is a duplicate now); absent is fine."""

    def shrink_group(self, canonical_id: str) -> int:
        """Count one member fewer in the canonical's group; returns the new size (at least 1)."""

    # Retention (streams.config.RetentionSettings), in the stream's own time.

    def clock(self) -> int:
        """The stream's time: the newest `published_at` the state was advanced to (0 when none)."""

    def advance(self, published_at: int) -> int:
        """Move the clock to `published_at` if that is later (it never goes back); returns the clock.
        The caller clamps `published_at` to the wall clock plus a day (`model.clamped`)."""

    def expire(self, limit: int = 10_000) -> int:
        """Physically remove up to `limit` entries older than their family's retention (already invisible);
        returns how many it removed (0: nothing left to remove)."""

    def verdict_expired(self, stamp: int) -> bool:
        """Whether a verdict stamped `stamp` may be gone from this state: past `verdicts_days` at the clock, or past
        a shorter `verdicts_days` an earlier sweep kept (a store that keeps how far it swept). The cascade asks this,
        not the setting, before it reads a missing verdict as an expired one."""


class VectorStore(Protocol):
    """Canonical vectors, one collection per embedding model, searched in a time window."""

    def nearest_between(
        self, model: ModelId, vector: np.ndarray, low: int, high: int, language: str, same_language: bool
    ) -> Neighbour | None:
        """The most similar canonical (by cosine) published in [`low`, `high`], among canonicals in
        `language` (`same_language`) or in any other language (not).

        Ties go to the oldest (earliest `published_at`, then smallest id). The range is searched as
        given: the cascade starts it at the vectors' horizon, so no expired vector is a hit.
        """

    def nearest(
        self, model: ModelId, vector: np.ndarray, published_at: int, window_s: int, language: str, same_language: bool
    ) -> Neighbour | None:
        """`nearest_between` within `window_s` of `published_at`, both sides."""

    def add(
        self,
        model: ModelId,
        doc_id: str,
        vector: np.ndarray,
        published_at: int,
        language: str,
        facts: dict[str, list[str]] | None = None,
    ) -> None:
        """Upsert a canonical's vector; `facts` (what its text states) come back in its `Neighbour`."""

    def remove(self, model: ModelId, doc_id: str) -> None:
        """Delete the vector of `doc_id`, if there is one."""

    def expire(self, model: ModelId, before: int) -> int:
        """Delete the model's vectors with `published_at < before` (a range on the indexed payload);
        returns how many there were. The cascade ignores them before that (`RetentionSettings.vectors_hours`)."""

    def expire_every_model(self, before: int) -> int:
        """`expire` for every model whose vectors this store holds (the one in use and any used before it);
        returns how many there were. The sweeps of `dedup run` and of the semantic workers call it."""


class Embedder(Protocol):
    """Turns texts into L2-normalised vectors of one model."""

    @property
    def model_id(self) -> ModelId: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """A float32 array of shape (len(texts), dim), rows L2-normalised."""


@dataclass(frozen=True, slots=True)
class Reads:
    """What deciding a batch of documents will read first: a batching store loads it in one go."""

    doc_ids: list[str]
    exact_keys: list[str]
    band_queries: list[tuple[str, tuple[int, ...]]]
    """(language, bands) of each SimHash lookup."""

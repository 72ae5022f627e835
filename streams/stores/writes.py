"""State writes as values, so a batching store can buffer them and send them at once."""

from __future__ import annotations

from dataclasses import dataclass

from streams.core.model import Link


@dataclass(frozen=True, slots=True)
class ClaimWrite:
    keys: tuple[str, ...]
    canonical_id: str
    published_at: int


@dataclass(frozen=True, slots=True)
class ReplaceWrite:
    key: str
    expected: str
    canonical_id: str
    published_at: int | None = None


@dataclass(frozen=True, slots=True)
class CanonicalWrite:
    canonical_id: str
    simhash: int
    language: str
    bands: tuple[int, ...]
    published_at: int
    figures: int = 0


@dataclass(frozen=True, slots=True)
class GrowWrite:
    canonical_id: str
    count: int
    published_at: int
    """The stamp of the group (its latest member's `published_at`); a shrink keeps the group's stamp."""


@dataclass(frozen=True, slots=True)
class VerdictWrite:
    link: Link


@dataclass(frozen=True, slots=True)
class RemoveCanonicalWrite:
    canonical_id: str
    language: str
    bands: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ReplaceVerdictWrite:
    """A relink's new verdict for a document, valid only while its verdict is still `expected`."""

    link: Link
    expected: Link


Write = (
    ClaimWrite | ReplaceWrite | CanonicalWrite | GrowWrite | VerdictWrite | RemoveCanonicalWrite | ReplaceVerdictWrite
)

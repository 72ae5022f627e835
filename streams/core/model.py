"""Values the core decides on and the verdicts it produces.

Everything here is plain data: no I/O, no clocks, so the same document always
yields the same decision given the same state.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Stage(StrEnum):
    """The cascade's stages, cheapest first."""

    URL = "url"
    CONTENT = "content"
    SIMHASH = "simhash"
    SEMANTIC = "semantic"


CLAIMING_STAGES = frozenset({Stage.URL, Stage.CONTENT, Stage.SIMHASH})
"""The stages that leave keys in the state for a document: its exact keys, its band entries."""


def stages_named(value: Any) -> frozenset[Stage]:
    """A link record's `stages` (the cascade's when it decided): a list of distinct stage names; ValueError else."""
    if not isinstance(value, list) or not value or any(name not in Stage.__members__.values() for name in value):
        raise ValueError(f"stages must be a list of {', '.join(Stage)}, got {value!r}")
    if len(set(value)) != len(value):
        raise ValueError(f"stages must name each stage once, got {value!r}")
    return frozenset(Stage(name) for name in value)


def stages_field(stages: Collection[Stage]) -> list[str] | None:
    """What a link record says of the cascade's `stages`: None (no field, as every record before it) when every
    stage that claims keys ran, else every stage that ran, cheapest first: a replay claims only their keys."""
    if set(stages) >= CLAIMING_STAGES:
        return None
    return [stage.value for stage in Stage if stage in stages]


class Verdict(StrEnum):
    UNIQUE = "unique"
    DUPLICATE = "duplicate"
    REVIEW = "review"
    UNLINKED = "unlinked"
    """Was a duplicate or under review until a person or a stricter cut-off said otherwise: a canonical now."""

    @property
    def canonical(self) -> bool:
        """Whether a document with this verdict is a canonical (others may link to it)."""
        return self is Verdict.UNIQUE or self is Verdict.UNLINKED


@dataclass(frozen=True, slots=True)
class ModelId:
    """Name and version of an embedding model: vectors of different models never meet.

    A name holds no '@': links name their model `name@version` and a replay splits that at the first
    '@', so ('a@b', 'c') would be read back as ('a', 'b@c'), whose vectors live elsewhere.
    """

    name: str
    version: str
    dim: int

    def __post_init__(self) -> None:
        if "@" in self.name:
            raise ValueError(f"a model name holds no '@' (it separates the version): {self.name!r}")

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(slots=True)
class Document:
    """A validated article with the features every stage needs.

    `text` is the normalised headline + body; `simhash` is an unsigned 64-bit int;
    `figures` the digest of the figures it states (`streams.features.figures`, 0: none);
    `published_at` is Unix seconds (UTC). A document is its id and its content: an id
    seen before with other content is a new version, decided under its own id
    (`version_id`), and `version_of` names the crawler's id it is a version of.
    """

    doc_id: str
    url: str
    normalized_url: str
    url_hash: str
    content_hash: str
    text: str
    language: str
    simhash: int
    published_at: int
    article: dict[str, Any] = field(repr=False)
    version_of: str | None = None
    figures: int = 0

    @property
    def identity(self) -> tuple[str, str]:
        """Id and content: two records with one id and other texts are two documents."""
        return (self.doc_id, self.content_hash)


CONTENT_KEY_CHARS = 16
"""Hex digits of the content hash a verdict keeps: 64 bits tell versions of one id apart."""


def content_key(content_hash: str) -> str:
    """What a verdict keeps of its content's hash (`Link.content`)."""
    return content_hash[:CONTENT_KEY_CHARS]


def version_id(doc_id: str, content_hash: str) -> str:
    """The id a later version of `doc_id` is decided under: its own verdict, keys and link."""
    return f"{doc_id}#v{content_key(content_hash)}"


VERSION_SUFFIX = re.compile(rf"#v[0-9a-f]{{{CONTENT_KEY_CHARS}}}\Z")
"""How `version_id` ends: an input id may not (a crawler's id of that form would take a version's verdict)."""


DAY_S = 86_400
"""Retention buckets are days of stream time."""


def keep_seconds(days: float) -> int:
    """A retention in days as whole seconds (0: kept forever)."""
    return int(days * DAY_S)


def expired(stamp: int, clock: int, keep_s: int) -> bool:
    """Whether an entry stamped `stamp` is past its retention `keep_s` (0: forever) at stream time `clock`.

    Age is stream time (the newest `published_at` seen), never the wall clock: a backfill of last
    year's archive ages its entries as it would have live.
    """
    return keep_s > 0 and stamp < clock - keep_s


def verdict_gone(stamp: int, clock: int, keep_s: int, horizon: int | None) -> bool:
    """Whether a verdict stamped `stamp` may be gone from a state: past its retention `keep_s` at `clock`, or
    before `horizon`, before when a sweep under a shorter `verdicts_days` than today's removed verdicts (None:
    none did). A missing verdict is read as an expired one only then, never as one not given."""
    return expired(stamp, clock, keep_s) or (horizon is not None and stamp < horizon)


def clamped(published_at: int, wall: float) -> int:
    """`published_at` as the clock may take it: at most a day after the wall clock `wall` (Unix s), so
    an article dated 2100 does not expire everything. The adapter passes the wall time; the core stays pure."""
    return min(int(published_at), int(wall) + DAY_S)


@dataclass(frozen=True, slots=True)
class Canonical:
    """A canonical as the SimHash band index holds it. `seq` orders first-seen."""

    doc_id: str
    simhash: int
    language: str
    seq: int
    published_at: int = 0
    """The canonical's `published_at`: the stamp its band entries age by (`RetentionSettings.bands_days`)."""
    figures: int = 0
    """The digest of the figures its text states (`streams.features.figures`); 0: none, or not recorded."""


@dataclass(frozen=True, slots=True)
class Neighbour:
    """The nearest canonical vector found by a vector store."""

    doc_id: str
    score: float
    published_at: int
    language: str
    facts: dict[str, list[str]] | None = field(default=None, compare=False)
    """What the canonical's text states (`streams.features.facts.Facts.to_json`), for the fact check;
    None for a vector stored without them."""


@dataclass(frozen=True, slots=True)
class Link:
    """One verdict: a document is unique, or points at its canonical.

    `canonical_id` is the document's own id when unique and always names a
    canonical otherwise (never a duplicate, so links cannot chain). `score` is a
    Hamming distance for `simhash`, a cosine for `semantic`, and None for the
    exact stages and for unique documents. `seq` is the order in which the store
    recorded the verdict (None until it is recorded, or where the store keeps no
    order): replay restores in that order. It is not part of a verdict's identity.
    """

    doc_id: str
    verdict: Verdict
    canonical_id: str
    stage: Stage | None = None
    score: float | None = None
    model: str | None = None
    seq: int | None = field(default=None, compare=False)
    content: str | None = field(default=None, compare=False)
    """`content_key` of the text the verdict was given to: the same id with other content is a new version."""
    reason: str | None = field(default=None, compare=False)
    """Why the cascade decided otherwise than the score alone says, e.g. the facts that disagree."""
    published_at: int | None = field(default=None, compare=False)
    """The document's `published_at`: the stamp its verdict ages by (`RetentionSettings.verdicts_days`);
    None (an old record) is stamped with the stream's clock when recorded."""

    @property
    def publishes(self) -> bool:
        """Whether the document goes to `articles.deduped`: canonicals, and documents under
        review in their own right (not exact copies of one, which share its verdict)."""
        if self.verdict is Verdict.REVIEW:
            return self.stage in (Stage.SIMHASH, Stage.SEMANTIC)
        return self.verdict.canonical

    @classmethod
    def unique(cls, doc_id: str) -> Link:
        return cls(doc_id=doc_id, verdict=Verdict.UNIQUE, canonical_id=doc_id)

"""Values the core decides on and the verdicts it produces.

Everything here is plain data: no I/O, no clocks, so the same document always
yields the same decision given the same state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Stage(StrEnum):
    """The cascade's stages, cheapest first."""

    URL = "url"
    CONTENT = "content"
    SIMHASH = "simhash"
    SEMANTIC = "semantic"


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
    """Name and version of an embedding model: vectors of different models never meet."""

    name: str
    version: str
    dim: int

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(slots=True)
class Document:
    """A validated article with the features every stage needs.

    `text` is the normalised headline + body; `simhash` is an unsigned 64-bit int;
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


@dataclass(frozen=True, slots=True)
class Canonical:
    """A canonical as the SimHash band index holds it. `seq` orders first-seen."""

    doc_id: str
    simhash: int
    language: str
    seq: int


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

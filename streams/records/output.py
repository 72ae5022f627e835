"""The records the cascade publishes: links (verdicts with features) and deduped articles."""

from __future__ import annotations

import re
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

import numpy as np

from streams.core.model import Document, Link, Neighbour, Stage, Verdict, content_key, stages_field, stages_named
from streams.core.replay import Recorded
from streams.features.facts import payload_facts
from streams.features.figures import figures_from_hex, figures_hex
from streams.records.article import CONTROL, format_timestamp, parse_timestamp

_HEX = {16: re.compile("[0-9a-f]{16}"), 64: re.compile("[0-9a-f]{64}")}


def now_rfc3339() -> str:
    return rfc3339(datetime.now(UTC))


def rfc3339(moment: datetime) -> str:
    """A UTC moment as the records spell a decision's time: milliseconds and "Z"."""
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def features_of(doc: Document) -> dict[str, Any]:
    """What replay needs to rebuild state for this document, besides its vector; `figures` only where the text
    states some."""
    features = {
        "url_hash": doc.url_hash,
        "content_hash": doc.content_hash,
        "simhash": f"{doc.simhash:016x}",
        "language": doc.language,
        "published_at": format_timestamp(doc.published_at),
    }
    if doc.figures:
        features["figures"] = figures_hex(doc.figures)
    return features


def link_record(
    link: Link, doc: Document, vector: np.ndarray | None = None, *, stages: Collection[Stage]
) -> dict[str, Any]:
    """A `dedup.links` record of a verdict of the cascade running `stages`; the vector is attached for
    canonicals that were embedded."""
    record: dict[str, Any] = {
        "doc_id": link.doc_id,
        "verdict": link.verdict.value,
        "canonical_id": link.canonical_id,
        "stage": link.stage.value if link.stage else None,
        "score": link.score,
        "linked_at": now_rfc3339(),
        "model": link.model,
        **features_of(doc),
    }
    if link.seq is not None:
        record["seq"] = link.seq
    if link.published_at is not None and link.published_at > doc.published_at:
        record["clock"] = format_timestamp(link.published_at)  # a late crawl's verdict ages from then
    if doc.version_of is not None:
        record["version_of"] = doc.version_of
    if (ran := stages_field(stages)) is not None:
        record["stages"] = ran  # a replay claims only the keys these stages claimed
    if link.reason is not None:
        record["reason"] = link.reason
    if vector is not None and link.canonical_id == link.doc_id:
        record["vector"] = vector
        facts = payload_facts(doc.text)
        if facts:
            record["facts"] = facts  # its vector's payload: replay restores them for the fact check
    return record


def published_record(doc: Document) -> dict[str, Any]:
    """The article as it came, its id filled in, plus the features it is published with (`deduped_record` adds
    the verdict): what a relink matches an article of the crawl's raw input by."""
    return {**doc.article, "id": doc.doc_id, "features": {"normalized_url": doc.normalized_url, **features_of(doc)}}


def deduped_record(link: Link, doc: Document) -> dict[str, Any]:
    """An `articles.deduped` record: the article as it came, its id filled in, plus its features."""
    record = published_record(doc)
    record["features"]["verdict"] = link.verdict.value
    if doc.version_of is not None:
        record["features"]["version_of"] = doc.version_of
    return record


def candidate_record(
    link: Link, doc: Document, vector: np.ndarray, neighbours: tuple[Neighbour, ...], model: str, text_chars: int
) -> dict[str, Any]:
    """A candidate record (`dedup.candidates`, the state folder's journal): a document the semantic stage
    searched with, its nearest canonicals above the floor, links or not, and what a person or a later
    relink needs of it: its text, its vector and the article itself (schemas/candidate.schema.json)."""
    return {
        "doc_id": doc.doc_id,
        "model": model,
        "language": doc.language,
        "published_at": format_timestamp(doc.published_at),
        "title": doc.article.get("title"),
        "text": doc.text[:text_chars],
        "verdict": link.verdict.value,
        "canonical_id": link.canonical_id,
        "stage": link.stage.value if link.stage else None,
        "score": link.score,
        "neighbours": [
            {
                "doc_id": n.doc_id,
                "score": round(n.score, 6),
                "same_language": n.language == doc.language,
                "language": n.language,
            }
            for n in neighbours
        ],
        "vector": vector,
        "article": deduped_record(link, doc),
    }


SEQ_LIMIT = 1 << 53
"""Every `seq` is below it: exact in every JSON reader, and far below the 1 << 62 where the store's verdict
counter, which a replay moves past the seqs it restores, stops drawing (no real counter gets near it)."""


def _sequence(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value < SEQ_LIMIT:
        raise ValueError(f"seq must be a positive integer below 2**53, got {value!r}")
    return value


def _verdict(record: dict[str, Any], doc_id: str, canonical_id: str) -> Verdict:
    """The record's verdict, consistent with its canonical: a link is a star's ray, never to the document
    itself (the group would count it twice), and a canonical names itself."""
    verdict = Verdict(record["verdict"])
    if verdict.canonical != (canonical_id == doc_id):
        named = "its own id" if verdict.canonical else "another document"
        raise ValueError(f"a {verdict} record's canonical_id must be {named}, got {canonical_id!r}")
    return verdict


def _vector(value: Any) -> np.ndarray | None:
    """An embedded canonical's vector: a non-empty list of finite numbers (float32), as the vector store takes."""
    if value is None:
        return None
    if not (
        isinstance(value, list) and value and all(isinstance(x, int | float) and not isinstance(x, bool) for x in value)
    ):
        raise ValueError("vector must be a non-empty list of numbers")
    with np.errstate(over="ignore"):
        vector = np.asarray(value, dtype=np.float32)
    if not np.isfinite(vector).all():
        raise ValueError("vector must be finite (as float32)")
    return vector


def read_link_record(record: dict[str, Any]) -> Recorded:
    """A `dedup.links` record back to a verdict and its features; KeyError or ValueError when malformed (the
    types of link.schema.json, checked here: a replay writes what it reads into Redis keys and values), or
    when the state could not take it (a link to itself, a seq past `SEQ_LIMIT`, a vector of no shape). The
    link carries the stamp restoring it gives its verdict: the record's `published_at`, or the stream's `clock`
    when the verdict was recorded where that is later (a late crawl)."""
    doc_id = _id(record, "doc_id")  # first: what a file of other records lacks is said by it
    published_at = parse_timestamp(_text(record, "published_at"))
    kept_from = max(published_at, parse_timestamp(_text(record, "clock"))) if "clock" in record else published_at
    score, model = record["score"], record["model"]
    if score is not None and (not isinstance(score, int | float) or isinstance(score, bool)):
        raise ValueError(f"score must be a number or null, got {score!r}")
    if model is not None and not isinstance(model, str):
        raise ValueError(f"model must be a string or null, got {model!r}")
    canonical_id = _id(record, "canonical_id")
    link = Link(
        doc_id=doc_id,
        verdict=_verdict(record, doc_id, canonical_id),
        canonical_id=canonical_id,
        stage=Stage(record["stage"]) if record["stage"] else None,
        score=score,
        model=model,
        seq=_sequence(record.get("seq")),
        content=content_key(_hex(record, "content_hash", 64)),
        reason=record.get("reason"),
        published_at=kept_from,
    )
    stages = stages_named(record["stages"]) if "stages" in record else None
    vector = _vector(record.get("vector"))
    if stages is not None and link.stage is not None and link.stage not in stages:
        raise ValueError(f"stage {link.stage} is not among the stages that ran, {record['stages']!r}")
    if stages is not None and vector is not None and Stage.SEMANTIC not in stages:
        raise ValueError(f"a vector, though the semantic stage did not run ({record['stages']!r})")
    return Recorded(
        link=link,
        url_hash=_hex(record, "url_hash", 64),
        content_hash=record["content_hash"],
        simhash=int(_hex(record, "simhash", 16), 16),
        language=_text(record, "language"),
        published_at=published_at,
        vector=vector,
        keys=_keys(record["keys"]) if "keys" in record else None,
        facts=record.get("facts"),
        stages=stages,
        figures=figures_from_hex(record["figures"]) if "figures" in record else 0,
    )


def _text(record: dict[str, Any], name: str) -> str:
    value = record[name]
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {value!r}")
    return value


def _id(record: dict[str, Any], name: str) -> str:
    """A document's id: a string, not empty, without a control character (as the input's ids)."""
    value = _text(record, name)
    if not value or CONTROL.search(value):
        raise ValueError(f"{name} must be a string without control characters, not empty, got {value!r}")
    return value


def _hex(record: dict[str, Any], name: str, digits: int) -> str:
    value = _text(record, name)
    if not _HEX[digits].fullmatch(value):
        raise ValueError(f"{name} must be {digits} lower-case hex digits, got {value[:80]!r}")
    return value


def _keys(value: Any) -> tuple[Stage, ...]:
    """A relink record's `keys`: the exact stages whose keys it re-pointed."""
    if not isinstance(value, list) or not all(name in (Stage.URL, Stage.CONTENT) for name in value):
        raise ValueError(f"keys must be a list of 'url' and 'content', got {value!r}")
    return tuple(Stage(name) for name in value)

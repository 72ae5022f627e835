"""Every feature and verdict of a realistic sample, pinned by digest.

tests/test_batched_features.py holds the batched path to the one-document path; this
holds both to what they gave when it was written, so a change made to both at once
(a faster kernel, a new table) cannot move a fingerprint, key or verdict unnoticed:
stores written before the change must still match what is decided after it. The
sample is `synthetic_articles` (English and Bangla from ../shared/data, re-crawls,
syndicated copies, edits) with hostile records mixed in, and real Bangla text in
another Unicode composition. If a digest moves on purpose, every stored fingerprint,
key and band moves with it: that is a migration, not a test update.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

import orjson

from streams.config import Settings
from streams.core.cascade import Cascade
from streams.core.model import Document
from streams.evaluation.corpus import NtrexDocument, decompose_bangla, synthetic_articles
from streams.records.article import Featurizer, Rejection
from streams.stores.sqlite import SqliteStateStore

INGEST = 1_798_761_600  # 2027-01-01: after the sample's dates (a date more than a day past it is clamped)
CHUNK = 256
FEATURES_DIGEST = "9ca894ca25dfcdc417c6401e3b2f161fb15f7c130c00f8ce68471d2e49924be3"
VERDICTS_DIGEST = "40785cafc33f9c31636b6115cbc60cfe09b1e07eed212ab34e23e6b070995f2d"


def _hostile() -> list[bytes]:
    """Records that hit the corners: control characters, odd scripts, huge and empty parts, bad lines."""
    hostile: list[dict[str, Any]] = [
        {"url": "https://e.com/c", "title": "Ctrl\x00\x07\x1b", "body": "tab\tbell\x07 nul\x00 del\x7f c1\x85\x9f end"},
        {"url": "https://e.com/z", "body": "zero\u200bwidth\u2060joiner\ufeff soft\u00adhyphen \u200c\u200d"},
        {
            "url": "https://e.com/t",
            "body": "\u0130stanbul \u03a3\u039f\u03a6\u0399\u0391 \u03c3\u03bf\u03c6\u03b9\u03b1",
        },
        {
            "url": "https://e.com/e",
            "body": "emoji \U0001f468\u200d\U0001f469\u200d\U0001f467 \U00010400 beyond the BMP",
        },
        {
            "url": "https://e.com/m",
            "body": "mixed \u0995\u09cd\u200d\u09b7 \u0928\u093c \u00e9\u0301 \ufb01 \u2460 K\u212a",
        },
        {
            "url": "https://e.com/r",
            "body": "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645"
            " \u05e9\u05dc\u05d5\u05dd",
        },
        {
            "url": "https://e.com/k",
            "body": "\u4eca\u65e5\u306f\u4e16\u754c \ud55c\uad6d\uc5b4"
            " \u1100\u1161 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
        },
        {
            "url": "https://e.com/q",
            "body": "\u201cquotes\u201d \u2018and\u2019 \u2013dashes\u2014 \u2212minus\uff0d \u00abguillemets\u00bb",
        },
        {"url": "https://e.com/big", "title": "Huge", "body": "word " * 40_000},
        {"url": "https://e.com/ws", "title": " \u3000 ", "body": "\u2028line\u2029para\u0085next\u00a0nbsp\u1680ogham"},
        {"url": "https://E.com:8080/A//b/?utm_source=x&b=2&a=1#frag", "body": "url corners", "language": "bn"},
        {"url": "https://xn--bcher-kva.de/%C3%A4?q=%2F", "body": "idna and escapes", "language": "English"},
        {"url": "https://e.com/d", "body": "dated", "published_at": "Tue, 01 Dec 2026 10:00:00 +0100"},
        {"url": "https://e.com/id", "id": 12345, "body": "numeric id"},
        {"url": "https://e.com/bad", "body": "x", "id": "a\x01b"},
        {"url": "ftp://e.com/a", "body": "x"},
        {"url": "https://e.com/empty", "body": "   ", "title": " "},
        {"url": "https://e.com/when", "body": "x", "published_at": "yesterday"},
    ]
    lines = [orjson.dumps(record) for record in hostile]
    lines += [b"{not json", b"\xff\xfe{}", b"[1, 2]", b'{"url": "https://e.com/s", "body": "lone \\ud800 surrogate"}']
    return lines


def sample_lines(ntrex: list[NtrexDocument]) -> list[bytes]:
    """Synthetic articles, real Bangla in another composition, and the hostile records, shuffled in."""
    lines = [orjson.dumps(article) for article in synthetic_articles(3000, seed=23)]
    for number, doc in enumerate(ntrex[:60]):
        body = decompose_bangla(" ".join(doc.bengali[1:]))
        lines.append(orjson.dumps({"url": f"https://bn.example/{number}", "title": doc.bengali[0], "body": body}))
    rng = random.Random(29)
    for line in _hostile():
        lines.insert(rng.randrange(len(lines)), line)
    return lines + lines[:40]  # and redeliveries


def _features(item: Document | Rejection) -> list[Any]:
    if isinstance(item, Rejection):
        return ["rejected", item.reason]
    text_hash = hashlib.sha256(item.text.encode("utf-8", "surrogatepass")).hexdigest()
    return [
        item.doc_id,
        item.url,
        item.normalized_url,
        item.url_hash,
        item.content_hash,
        text_hash,
        item.language,
        item.simhash,
        item.published_at,
    ]


def _digest(rows: list[Any]) -> str:
    return hashlib.sha256(orjson.dumps(rows)).hexdigest()


def test_features_of_a_realistic_sample_are_pinned(ntrex: list[NtrexDocument]) -> None:
    lines = sample_lines(ntrex)
    featurizer = Featurizer(Settings(stages=["url", "content", "simhash"]))
    batched = [
        d for i in range(0, len(lines), CHUNK) for d in featurizer.parse_batch(lines[i : i + CHUNK], ingest_time=INGEST)
    ]
    assert sum(isinstance(d, Rejection) for d in batched) >= 8
    assert _digest([_features(d) for d in batched]) == FEATURES_DIGEST


def test_verdicts_of_a_realistic_sample_are_pinned(ntrex: list[NtrexDocument], tmp_path: Path) -> None:
    lines = sample_lines(ntrex)
    settings = Settings(stages=["url", "content", "simhash"])
    featurizer = Featurizer(settings)
    state = SqliteStateStore(tmp_path / "state.sqlite3")
    cascade = Cascade(settings, state)
    rows: list[Any] = []
    for start in range(0, len(lines), CHUNK):
        docs = [
            d
            for d in featurizer.parse_batch(lines[start : start + CHUNK], ingest_time=INGEST)
            if not isinstance(d, Rejection)
        ]
        state.warm(cascade.reads(docs))
        for doc in docs:
            link = cascade.decide(doc).link
            stage = link.stage.value if link.stage else None
            rows.append(
                [link.doc_id, link.verdict.value, link.canonical_id, stage, link.score, link.content, link.reason]
            )
        state.commit()
    state.close()
    assert {row[3] for row in rows} == {None, "url", "content", "simhash"}
    assert _digest(rows) == VERDICTS_DIGEST

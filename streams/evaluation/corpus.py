"""Streams of articles with known duplicates, assembled from public data in ../shared/data.

Each article carries its ground truth: the `group` (one per real-world story)
and the `kind` of copy it is, so any run can be scored per kind. Nothing from
the data folder is copied into the repository; it is read at run time.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import groupby
from pathlib import Path
from typing import Any

ORIGINAL = "original"
NEGATIVE = "hard_negative"
T0 = datetime(2026, 11, 1, 6, 0, tzinfo=UTC)


def data_dir() -> Path:
    """`DEDUP_SHARED_DATA`, or the `shared/data` folder beside the repository."""
    configured = os.environ.get("DEDUP_SHARED_DATA")
    path = Path(configured) if configured else Path(__file__).resolve().parents[3] / "shared" / "data"
    if not (path / "ntrex128_en_bn").is_dir():
        raise FileNotFoundError(f"shared data not found at {path}; set DEDUP_SHARED_DATA to the data folder")
    return path


@dataclass(frozen=True, slots=True)
class Labelled:
    """A raw article and its ground truth."""

    record: dict[str, Any]
    group: str
    kind: str

    @property
    def doc_id(self) -> str:
        return str(self.record["id"])


@dataclass(frozen=True, slots=True)
class NtrexDocument:
    doc_id: str
    outlet: str
    english: list[str]
    english_gb: list[str]
    english_us: list[str]
    english_in: list[str]
    bengali: list[str]


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8-sig").splitlines()


def ntrex_documents(root: Path | None = None) -> list[NtrexDocument]:
    """The 62 NTREX documents, sentences joined back by DOCUMENT_IDS.tsv."""
    folder = (root or data_dir()) / "ntrex128_en_bn"
    ids = _lines(folder / "DOCUMENT_IDS.tsv")
    files = [
        _lines(folder / name)
        for name in (
            "newstest2019-src.eng.txt",
            "newstest2019-ref.eng-GB.txt",
            "newstest2019-ref.eng-US.txt",
            "newstest2019-ref.eng-IN.txt",
            "newstest2019-ref.ben.txt",
        )
    ]
    documents = []
    for doc_id, rows in groupby(range(len(ids)), key=lambda i: ids[i]):
        index = list(rows)
        en, gb, us, in_, bn = ([f[i] for i in index] for f in files)
        documents.append(NtrexDocument(doc_id, doc_id.split(".")[0], en, gb, us, in_, bn))
    return documents


def mrpc_pairs(label: int, root: Path | None = None) -> list[tuple[str, str]]:
    """MRPC train pairs with the given label (1 paraphrase, 0 lexically close non-paraphrase)."""
    pairs = []
    for line in _lines((root or data_dir()) / "mrpc" / "msr_paraphrase_train.txt"):
        fields = line.split("\t")
        if len(fields) >= 5 and fields[0].strip() == str(label):
            pairs.append((fields[3], fields[4]))
    return pairs


def _stamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _syndicate(text: str) -> str:
    """What a syndication partner's CMS does: curly quotes, en dashes, doubled spaces."""
    out = []
    opening = True
    for char in text:
        if char == '"':
            out.append("\u201c" if opening else "\u201d")
            opening = not opening
        elif char == "'":
            out.append("\u2019")
        elif char == "-":
            out.append("\u2013")
        else:
            out.append(char)
    return "  ".join("".join(out).split(" "))


def decompose_bangla(text: str) -> str:
    """The same Bangla letters as other codepoint sequences (nukta and vowel-sign decompositions)."""
    return (
        text.replace("\u09df", "\u09af\u09bc")
        .replace("\u09dc", "\u09a1\u09bc")
        .replace("\u09cb", "\u09c7\u09be")
        .replace("\u09cc", "\u09c7\u09d7")
    )


def labelled_stream(
    negative_pairs: int = 100, seed: int = 7, root: Path | None = None, stories: int | None = None
) -> list[Labelled]:
    """NTREX stories (all 62, or the first `stories`) with their known copies, and MRPC negative
    pairs as hard negatives, ordered by publication time.

    The original of each story comes first; its copies follow within hours.
    """
    rng = random.Random(seed)
    documents = ntrex_documents(root)[:stories]
    stream: list[tuple[datetime, int, Labelled]] = []

    def add(when: datetime, record: dict[str, Any], group: str, kind: str) -> None:
        record["published_at"] = _stamp(when)
        stream.append((when, len(stream), Labelled(record, group, kind)))

    for number, doc in enumerate(documents):
        story = f"ntrex-{doc.doc_id}"
        host = f"{doc.outlet}.example.com"
        when = T0 + timedelta(minutes=20 * number)
        title, body = doc.english[0], " ".join(doc.english[1:])
        path = f"/news/{doc.doc_id.replace('.', '-')}"
        add(
            when,
            {"id": f"{story}-en", "url": f"https://www.{host}{path}", "title": title, "body": body},
            story,
            ORIGINAL,
        )
        add(
            when + timedelta(minutes=5),
            {
                "id": f"{story}-recrawl",
                "url": f"http://{host}{path}/?utm_source=twitter&utm_medium=social&fbclid=IwAR{number}#comments",
                "title": title,
                "body": body,
            },
            story,
            "url_variant",
        )
        add(
            when + timedelta(minutes=40),
            {
                "id": f"{story}-wire",
                "url": f"https://partner{number % 5}.example.net/wire/{number}",
                "title": _syndicate(title),
                "body": _syndicate(body),
            },
            story,
            "syndicated",
        )
        for kind, sentences, site in (("edit_gb", doc.english_gb, "uk"), ("edit_us", doc.english_us, "us")):
            add(
                when + timedelta(minutes=50),
                {
                    "id": f"{story}-{site}",
                    "url": f"https://{site}.mirror.example.org/{number}",
                    "title": sentences[0],
                    "body": " ".join(sentences[1:]),
                },
                story,
                kind,
            )
        other = documents[(number + 1) % len(documents)]
        add(
            when + timedelta(hours=2),
            {
                "id": f"{story}-update",
                "url": f"https://www.{host}{path}-updated",
                "title": title,
                "body": f"{body}\n\nUpdate: {other.english[-1]}",
            },
            story,
            "appended_update",
        )
        add(
            when + timedelta(hours=3),
            {
                "id": f"{story}-headline",
                "url": f"https://aggregator.example.com/story/{number}",
                "title": f"{title.rstrip('.')}: what we know so far",
                "body": body,
            },
            story,
            "changed_headline",
        )
        bn_title, bn_body = doc.bengali[0], " ".join(doc.bengali[1:])
        add(
            when + timedelta(hours=4),
            {"id": f"{story}-bn", "url": f"https://bangla.example.com.bd/{number}", "title": bn_title, "body": bn_body},
            story,
            "translation_bn",
        )
        add(
            when + timedelta(hours=5),
            {
                "id": f"{story}-bn-copy",
                "url": f"https://another.example.com.bd/{number}",
                "title": decompose_bangla(bn_title),
                "body": decompose_bangla(bn_body),
            },
            story,
            "bangla_composition",
        )

    negatives = mrpc_pairs(0, root)
    for number, (first, second) in enumerate(rng.sample(negatives, negative_pairs)):
        when = T0 + timedelta(minutes=13 * number)
        for side, sentence in (("a", first), ("b", second)):
            add(
                when + timedelta(minutes=30 if side == "b" else 0),
                {"id": f"mrpc-{number}-{side}", "url": f"https://hard{side}.example.com/{number}", "body": sentence},
                f"mrpc-{number}-{side}",
                NEGATIVE,
            )
    stream.sort(key=lambda item: (item[0], item[1]))
    return [labelled for _, _, labelled in stream]


def synthetic_articles(count: int, seed: int = 11, root: Path | None = None) -> Iterator[dict[str, Any]]:
    """`count` realistic articles for benchmarks: 8 to 30 news sentences each, about a tenth Bangla,
    with re-crawls, syndicated copies and light edits mixed in the way a crawl delivers them."""
    rng = random.Random(seed)
    base = root or data_dir()
    english = [s for doc in ntrex_documents(base) for s in doc.english]
    english += [s for pair in mrpc_pairs(0, base) + mrpc_pairs(1, base) for s in pair]
    bengali = [s for doc in ntrex_documents(base) for s in doc.bengali]
    bengali += _lines(base / "risingnews_bn_en" / "RisingNews.valid.bn")
    recent: list[dict[str, Any]] = []
    for number in range(count):
        when = T0 + timedelta(seconds=7 * number)
        roll = rng.random()
        if recent and roll < 0.30:
            source = rng.choice(recent)
            record = dict(source, id=f"syn-{number}", published_at=_stamp(when))
            if roll < 0.12:
                record["url"] = source["url"] + f"?utm_source=feed{number % 7}"
            elif roll < 0.22:
                record["url"] = f"https://partner{number % 13}.example.net/{number}"
                record["body"] = _syndicate(source["body"])
            else:
                record["url"] = f"https://edit{number % 11}.example.org/{number}"
                record["body"] = source["body"] + " " + rng.choice(english)
            yield record
            continue
        pool = bengali if rng.random() < 0.1 else english
        sentences = rng.sample(pool, rng.randint(8, 30))
        record = {
            "id": f"syn-{number}",
            "url": f"https://site{number % 97}.example.com/{when:%Y/%m/%d}/{number}",
            "title": sentences[0],
            "body": " ".join(sentences[1:]),
            "published_at": _stamp(when),
            "source": f"site{number % 97}",
        }
        recent.append(record)
        if len(recent) > 500:
            recent.pop(0)
        yield record

"""Random hostile streams, each decided by `dedup run` (SQLite) and by the service's stage agent (Redis, in random
batches): the same verdicts on both, links that are stars, and no two articles merged.

The streams mix what crawlers do to a dedup service: ids reused for other stories, re-crawls of a page, records
sent again, late crawls, and clock jumps across short retentions (2, 4 and 6 days), so that every retention
boundary is crossed somewhere. Each seed is one stream; a failure names its seed and its records.

The streams stay clear of the limits the README lists, each of which has its own strict xfail:
- no record is sent again after `verdicts_days`, nor crawled later than that (`dedup run` reads the verdicts of
  such documents from its journal; the service has none);
- no id is reused while its band entries or exact keys may live (a copy of its article claims keys for it);
- a reused id gets a page of its own, and a text it never had;
- no batch holds an id twice with different records.

Documents are dated at midnight. Redis keeps an entry's day, not its second (README, "Retention"), so `dedup run`
and the service agree at day boundaries, and within a day the service keeps an entry up to a day longer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from streams.config import RetentionSettings, Settings
from streams.core.model import DAY_S
from tests.test_figure_check import CHEAP, DAYS, DAYS_BN, MARKET_BN, MARKET_EN, T0
from tests.test_group_attacks import MARKET, OTHER, UPDATED, Verdicts, _article, _file, _service
from tests.test_relink import _body

STORIES: dict[str, tuple[str, tuple[str, str]]] = {
    "market": ("M", MARKET),
    "market-edit": ("M", UPDATED),
    "market-next-day": ("M2", (MARKET_EN[0].format(**DAYS[1]), MARKET_EN[1].format(**DAYS[1]))),
    "other": ("O", OTHER),
    "other-edit": ("O", (OTHER[0], OTHER[1] + " Updated at noon.")),
    "third": ("T", ("A third story", _body(8, 98, 200))),
    "bangla-market": ("B", (MARKET_BN[0].format(**DAYS_BN[0]), MARKET_BN[1].format(**DAYS_BN[0]))),
    "bangla-market-edit": ("B", (MARKET_BN[0].format(**DAYS_BN[0]), MARKET_BN[1].format(**DAYS_BN[0]) + " আপডেট।")),
    "bangla-market-next-day": ("B2", (MARKET_BN[0].format(**DAYS_BN[1]), MARKET_BN[1].format(**DAYS_BN[1]))),
}
"""Texts by name, each with its article: the texts of one article are copies or near-duplicates of each other;
two articles never are (the next day's market report differs from the first only in its figures). English and
Bangla: bands and thresholds are per language."""
RETENTION = RetentionSettings(bands_days=4, exact_days=6, verdicts_days=2)
REUSED = ("a", "b", "c")
"""Ids a crawler reuses for whatever it crawls next, once their band entries are gone."""
OPTIONS: dict[str, Any] = {"stages": CHEAP, "retention": RETENTION}
FOREVER = T0 - 365 * DAY_S


@dataclass(frozen=True)
class Sent:
    """One record of a stream, with the article it holds and whether it is a record sent before."""

    record: dict[str, Any]
    article: str
    again: bool = False


def _stream(rng: random.Random) -> list[Sent]:
    sent: list[Sent] = []
    last_used: dict[str, int] = {}
    texts: dict[str, str] = {}  # an id -> the text it was last given
    given: dict[str, set[str]] = {}  # an id -> every text it was given
    clock = T0
    for position in range(rng.randint(6, 14)):
        clock += rng.choice([0, 0, DAY_S, DAY_S, 2 * DAY_S, 3 * DAY_S, 5 * DAY_S, 7 * DAY_S])
        recent = [s for s in sent if clock - s.record["_at"] < (RETENTION.verdicts_days - 0.5) * DAY_S]
        if recent and rng.random() < 0.2:
            earlier = rng.choice(recent)  # the crawler sends a record again, as it was
            sent.append(Sent(earlier.record, earlier.article, again=True))
            continue
        live = (RETENTION.exact_days + 1) * DAY_S  # an id's keys outlive its band entries
        reusable = [i for i in REUSED if clock - last_used.get(i, FOREVER) > live]
        reused = bool(reusable) and rng.random() < 0.4
        doc_id = rng.choice(reusable) if reused else f"d{position}"
        # Reused, an id gets a text it never had: one line in the links per (id, text) (README's limits).
        name = rng.choice([n for n in STORIES if n not in given.get(doc_id, ())])
        article, text = STORIES[name]
        for held, was in texts.items():  # a copy of an id's article claims its keys for that id: they live on
            if STORIES[was][0] == article:
                last_used[held] = clock
        last_used[doc_id] = clock
        texts[doc_id] = name
        given.setdefault(doc_id, set()).add(name)
        at = clock - rng.choice([0, 0, 0, DAY_S])  # a late crawl now and then, within verdicts_days
        # A page of its own, or a re-crawl of the article's page (one address is one document: stage 1).
        page = position if reused or rng.random() < 0.5 else article
        record = _article(doc_id, text, at, url=f"https://x.example.com/{page}") | {"_at": at}
        sent.append(Sent(record, article))
    return sent


def _batches(rng: random.Random, records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """One to four records a batch, cut before a record whose id the batch holds with another record."""
    batches: list[list[dict[str, Any]]] = []
    for record in records:
        if (
            not batches
            or len(batches[-1]) >= rng.randint(1, 4)
            or any(r["id"] == record["id"] and r != record for r in batches[-1])
        ):
            batches.append([])
        batches[-1].append(record)
    return batches


def _check_stars(seed: int, stream: list[Sent], verdicts: Verdicts) -> None:
    """Each link names a document whose latest verdict is `unique`, given to a text of the same article."""
    holding: dict[str, tuple[str, str]] = {}  # document -> its latest verdict and the article it was given to
    for sent, (doc_id, verdict, canonical) in zip(stream, verdicts, strict=True):
        if sent.again:
            continue
        if verdict == "duplicate":
            held = holding.get(canonical)
            assert held is not None and held[0] == "unique", f"seed {seed}: {doc_id} -> {canonical} ({held}): a chain"
            assert held[1] == sent.article, (
                f"seed {seed}: {doc_id} ({sent.article}) -> {canonical} ({held[1]}): two articles merged"
            )
        holding[doc_id] = (verdict, sent.article)


def drawn(seed: int) -> tuple[random.Random, list[Sent], list[dict[str, Any]], list[tuple[str, ...]]]:
    """A seed's stream: its generator (for what a test draws next), the stream, its records as sent, and how a
    failure shows them (id, date, article, page)."""
    rng = random.Random(seed)
    stream = _stream(rng)
    records = [{k: v for k, v in s.record.items() if k != "_at"} for s in stream]
    shown = [
        (r["id"], r["published_at"][:10], s.article, r["url"].rpartition("/")[2])
        for r, s in zip(records, stream, strict=True)
    ]
    return rng, stream, records, shown


@pytest.mark.parametrize("seed", range(400))
def test_a_random_hostile_stream_gets_the_same_star_shaped_verdicts_on_every_store(
    tmp_path: Path, redis_url: str, seed: int
) -> None:
    rng, stream, records, shown = drawn(seed)
    options = {**OPTIONS, "group_cap": rng.choice([100, 2, 3])}  # a small cap sends near-duplicates to review
    got, resources = _service(redis_url, options, _batches(rng, records))
    resources.close()
    assert len(got) == len(records), f"seed {seed}: one verdict a record, {shown}"
    _check_stars(seed, stream, got)
    expected, _ = _file(tmp_path, Settings(**options), records)  # dedup run writes a verdict once
    first_sends = [verdict for sent, verdict in zip(stream, got, strict=True) if not sent.again]
    assert first_sends == expected, f"seed {seed}: {shown}"

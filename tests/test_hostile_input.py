"""Hostile and unusual input, each test a guarantee that such input once broke.

Guarantees (../shared/DESIGN.md): bad input is rejected with a reason and never crashes a worker or a
run; a valid record is never lost; stages 1-3 never merge two different articles.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.config import Settings
from streams.core.model import Document
from streams.features.url import UrlError, normalize_url
from streams.records.article import Featurizer, Rejection
from streams.runner.embedded import RunPaths, run
from streams.service.resources import Resources
from streams.service.stages import Agent, Incoming

CHEAP = Settings(stages=["url", "content", "simhash"])
FEATURIZER = Featurizer(CHEAP)
INGEST = 1_800_000_000  # 2027-01-15: after the dates below (a later one is clamped to a day past it)

BUDGET = (
    "The city council approved the budget for next year after a long debate on Tuesday evening. "
    "The mayor said the new plan puts money into schools, roads and the river clean-up."
)
WATCHES = (
    "Cheap watches are on sale this week only, with free delivery to every district. "
    "Order before Friday and get a second strap for nothing, the shop said in a statement."
)
FLOOD = (
    "Flood water rose above the danger mark in three northern districts overnight, officials said. "
    "Thousands of families moved to shelters as the river kept rising through the morning."
)


def _read(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def _run_lines(tmp_path: Path, lines: list[bytes]) -> RunPaths:
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    paths = RunPaths(tmp_path / "out", tmp_path / "state")
    run(CHEAP, [str(source)], paths)
    return paths


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


# --- a record orjson can read but not write back: crashes the run, wedges a Kafka worker -----


def test_a_deeply_nested_extra_field_never_crashes_the_run(tmp_path: Path) -> None:
    """orjson reads 1,024 levels of nesting but writes only 255: the record parses, is decided,
    and then its deduped record cannot be written. The run must reject it and go on."""
    good = orjson.dumps({"id": "good", "url": "https://e.com/good", "body": BUDGET})
    hostile = b'{"id": "deep", "url": "https://e.com/deep", "body": "' + FLOOD.encode() + b'", "meta": '
    hostile += _nested(300) + b"}"
    after = orjson.dumps({"id": "after", "url": "https://e.com/after", "body": WATCHES})
    paths = _run_lines(tmp_path, [good, hostile, after])  # raised TypeError: Recursion limit reached
    assert {r["doc_id"] for r in _read(paths.links)} >= {"good", "after"}
    assert [r["line"] for r in _read(paths.rejected)] == [2]


def test_a_deeply_nested_extra_field_never_fails_a_kafka_batch(redis_url: str) -> None:
    """The same record on `articles.raw`: `StageAgent.handle` raised for the whole batch after its
    verdicts were recorded, and the worker retries that batch for ever (a poison pill)."""
    settings = Settings(stages=["url", "content", "simhash"], redis_url=redis_url, redis_prefix=f"t{uuid.uuid4().hex}:")
    resources = Resources(settings)
    try:
        agent = resources.stage_agent(Agent.EXACT, Agent.SIMHASH)
        good = orjson.dumps({"id": "good", "url": "https://e.com/good", "body": BUDGET})
        hostile = b'{"id": "deep", "url": "https://e.com/deep", "body": "' + FLOOD.encode() + b'", "meta": '
        hostile += _nested(300) + b"}"
        batch = [Incoming(v, None, 1_800_000_000_000, "articles.raw", 0, i) for i, v in enumerate([good, hostile])]
        out = agent.handle(batch)  # raised TypeError: Recursion limit reached, the batch retried for ever
        links = [orjson.loads(o.value)["doc_id"] for o in out if o.topic == settings.topics.links]
        rejected = [orjson.loads(o.value) for o in out if o.topic == settings.topics.rejected]
        assert "good" in links
        assert "deep" in links or len(rejected) == 1
    finally:
        resources.close()


# --- valid RFC 3339 date-times refused -------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2016-12-31T23:59:60Z", 1483228799),  # RFC 3339 section 5.6/5.7: a leap second (time-second 60)
        ("1990-12-31T15:59:60-08:00", 662687999),  # the leap-second example of RFC 3339 section 5.8
        ("2026-11-01t06:00:00z", 1793512800),  # section 5.6 NOTE: "T" and "Z" may be lower case
        ("2026-11-01T06:00:00z", 1793512800),
    ],
)
def test_valid_rfc3339_published_at_is_accepted(value: str, expected: int) -> None:
    raw = orjson.dumps({"id": "a", "url": "https://e.com/a", "body": BUDGET, "published_at": value})
    doc = FEATURIZER.parse(raw, ingest_time=INGEST)
    assert isinstance(doc, Document), doc.reason  # was: "... is not an RFC 3339 or RFC 2822 date-time"
    assert abs(doc.published_at - expected) <= 1


# --- integer ids above 64 bits: orjson reads them as floats, distinct ids become one ---------


def test_distinct_integer_ids_stay_distinct_or_are_rejected() -> None:
    raws = [f'{{"id": {n}, "url": "https://e.com/{n}", "body": "{BUDGET}"}}'.encode() for n in (2**65, 2**65 + 1)]
    ids = []
    for raw in raws:
        result = FEATURIZER.parse(raw, ingest_time=INGEST)
        if isinstance(result, Rejection):
            continue  # refusing an id it cannot represent is fine
        ids.append(result.doc_id)
    assert len(ids) == len(set(ids)), ids  # both were '3.6893488147419103e+19'


def test_a_syndicated_copy_with_a_colliding_big_id_gets_its_own_verdict(tmp_path: Path) -> None:
    """Two outlets, one wire story, crawler ids 2**65 and 2**65+1: the second is a content duplicate
    and must get a link of its own (or be rejected with a reason). It was taken for a
    redelivery of the first and never gets a verdict: a valid record lost silently."""
    lines = [
        f'{{"id": {n}, "url": "https://e{k}.com/story", "body": "{BUDGET}"}}'.encode()
        for k, n in enumerate((2**65, 2**65 + 1))
    ]
    paths = _run_lines(tmp_path, lines)
    links = _read(paths.links)
    rejected = _read(paths.rejected)
    assert len({link["doc_id"] for link in links}) + len(rejected) == 2, (links, rejected)


# --- URL keys: two different articles, one key ----------------------------------------------


def test_a_backslash_before_userinfo_does_not_steal_another_sites_key(tmp_path: Path) -> None:
    """`http://evil.example\\@victim.example/x` is evil.example's page `/@victim.example/x` to a
    browser (WHATWG: a backslash is a path separator in http URLs) but urllib reads `evil.example\\`
    as userinfo, so the hostile page takes victim.example's key and the real article, crawled
    later, is linked to it at the url stage."""
    hostile = orjson.dumps({"id": "evil", "url": "http://evil.example\\@victim.example/2026/budget", "body": WATCHES})
    real = orjson.dumps({"id": "real", "url": "https://victim.example/2026/budget", "body": BUDGET})
    paths = _run_lines(tmp_path, [hostile, real])
    verdicts = {link["doc_id"]: (link["verdict"], link["stage"]) for link in _read(paths.links)}
    assert verdicts["real"] == ("unique", None), verdicts  # was ('duplicate', 'url') of "evil"

    assert normalize_url("https://victim.example/2026/budget") == "//victim.example/2026/budget"
    try:
        hostile_key = normalize_url("http://evil.example\\@victim.example/2026/budget")
    except UrlError:
        hostile_key = None
    assert hostile_key != "//victim.example/2026/budget"


def test_hash_routes_of_a_single_page_site_are_different_articles(tmp_path: Path) -> None:
    """`#!/` routes are kept; `#/` routes (Angular's HashLocationStrategy, Vue/React hash routers)
    are the same kind of address and are dropped, so every article of such a site has one key.
    Kept as a `#!` route is: one key for two articles is a merge, a route kept only costs stage 1 a copy that
    stage 2 still finds."""
    first = orjson.dumps({"id": "spa-1", "url": "https://spa.example/#/news/1001-budget", "body": BUDGET})
    second = orjson.dumps({"id": "spa-2", "url": "https://spa.example/#/news/1002-flood", "body": FLOOD})
    paths = _run_lines(tmp_path, [first, second])
    verdicts = {link["doc_id"]: (link["verdict"], link["canonical_id"], link["stage"]) for link in _read(paths.links)}
    assert verdicts["spa-2"][0] == "unique", verdicts  # was ('duplicate', 'spa-1', 'url')


# --- a valid article refused, or no text taken for text --------------------------------------


def test_an_empty_body_beside_real_html_uses_the_html() -> None:
    """Crawlers write `"body": ""` when their own extraction failed; the record still carries the
    page. It was refused as "article has no text" without the HTML being looked at."""
    html = "<html><body><article><h1>Council approves budget</h1><p>" + BUDGET * 3 + "</p></article></body></html>"
    raw = orjson.dumps({"id": "a", "url": "https://e.com/a", "body": "", "html": html})
    doc = FEATURIZER.parse(raw, ingest_time=INGEST)
    assert isinstance(doc, Document), doc.reason


@pytest.mark.parametrize("body", ["\x00", "\x00\x01\x02\x7f", "\u200c\u200d", "\x00\u200d\x00"])
def test_a_body_of_only_control_or_joiner_characters_is_no_text(body: str) -> None:
    """Nothing a reader can see: rejected as "article has no text", like an all-whitespace body.
    Accepted, every such record shared one content key (and SimHash), so they all merged."""
    raw = orjson.dumps({"id": "a", "url": "https://e.com/a", "body": body})
    result = FEATURIZER.parse(raw, ingest_time=INGEST)
    assert isinstance(result, Rejection), repr(result.text)


def test_texts_without_a_single_word_are_not_near_duplicates(tmp_path: Path) -> None:
    """A text of ASCII punctuation has no SimHash feature, so its fingerprint is 0, and every such
    text was at distance 0 from every other: distinct texts merged at stage 3. Now no text: rejected."""
    first = orjson.dumps({"id": "p1", "url": "https://e.com/p1", "body": "?!?! ... ***"})
    second = orjson.dumps({"id": "p2", "url": "https://f.com/p2", "body": "(((( ---- )))) ;;"})
    paths = _run_lines(tmp_path, [first, second])
    verdicts = {link["doc_id"]: (link["verdict"], link["stage"]) for link in _read(paths.links)}
    rejected = _read(paths.rejected)
    assert verdicts.get("p2", ("unique",))[0] != "duplicate" or len(rejected) == 2, verdicts  # was a simhash link

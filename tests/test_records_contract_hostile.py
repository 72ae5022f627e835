"""The records the service and `dedup run` write, held to their published contracts (schemas/*.json, validated
with jsonschema) under hostile input. Each test is a guarantee that such input once broke: a record written that
its schema refuses, a valid record lost, a rejection that does not reach its topic or does not say why.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest

from streams.config import Settings, TopicSettings
from streams.core.model import Document
from streams.kafka.publish import publish_files
from streams.kafka.topics import create_topics
from streams.records.article import Featurizer
from streams.records.schemas import schema_dir
from streams.records.stage import read_stage_record, rejected_record, stage_record
from streams.runner.embedded import RunPaths, run
from streams.service.resources import Resources
from streams.service.stages import Agent, Incoming
from tests.test_publish_edge_cases import FIELDS, _read, _topic_with_limit

STAGES = ["url", "content", "simhash"]
RECEIVED_MS = 1_800_000_000_000


def _schema(name: str) -> dict[str, Any]:
    return orjson.loads((schema_dir() / f"{name}.schema.json").read_bytes())


def _valid(record: dict[str, Any], name: str) -> None:
    jsonschema.Draft7Validator(_schema(name)).validate(record)


def _long_html(paragraphs: int) -> str:
    """A page of `paragraphs` distinct paragraphs: trafilatura keeps nearly all of it as article text."""
    parts = (
        f"<p>Part {j}: " + " ".join(f"sentence {i} of part {j} on the river and the council budget." for i in range(8))
        for j in range(paragraphs)
    )
    page = f"<article><h1>Long report</h1>{''.join(parts)}</article>"
    return f"<html><head><title>Long report</title></head><body>{page}</body></html>"


@pytest.fixture
def agents(redis_url: str) -> Iterator[tuple[Settings, Resources]]:
    settings = Settings(stages=STAGES, redis_url=redis_url, redis_prefix=f"t{uuid.uuid4().hex}:")
    resources = Resources(settings)
    try:
        yield settings, resources
    finally:
        resources.close()


# --- a large HTML page: its stage record, extracted text beside the page, outgrows what the broker takes -----


def test_a_large_html_page_is_carried_between_agents_not_rejected(agents: tuple[Settings, Resources]) -> None:
    """A page of about 600 KB (below max_record_bytes, 960 KiB) whose article text is nearly as long: `dedup run`
    decides it, but its stage record (the page and the text extracted from it) was 1.2 MB, above the broker's
    1 MiB, and the exact agent rejected the valid article ("the document was not decided"), its raw bytes cut to
    fit the rejected topic: neither decided nor replayable from its rejection. It must reach the next agent and
    get its verdict, its link and deduped records valid."""
    settings, resources = agents
    raw = orjson.dumps({"id": "page", "url": "https://e.com/page", "html": _long_html(1200)})
    assert len(raw) < settings.max_record_bytes
    exact = resources.stage_agent(Agent.EXACT)
    out = exact.handle([Incoming(raw, b"page", RECEIVED_MS, settings.topics.raw, 0, 0)])
    rejected = [orjson.loads(o.value)["reason"] for o in out if o.topic == settings.topics.rejected]
    assert rejected == [], rejected
    (forwarded,) = [o for o in out if o.topic == settings.topics.stage_simhash]
    assert len(forwarded.value) <= settings.worker.max_message_bytes
    simhash = resources.stage_agent(Agent.SIMHASH)
    decided = simhash.handle([Incoming(forwarded.value, b"page", RECEIVED_MS, settings.topics.stage_simhash, 0, 0)])
    by_topic = {o.topic: orjson.loads(o.value) for o in decided}
    assert set(by_topic) == {settings.topics.links, settings.topics.deduped}, by_topic.keys()
    _valid(by_topic[settings.topics.links], "link")
    _valid(by_topic[settings.topics.deduped], "deduped_article")
    featurized = Featurizer(settings).parse(raw, ingest_time=RECEIVED_MS // 1000)
    assert isinstance(featurized, Document)
    assert by_topic[settings.topics.links]["content_hash"] == featurized.content_hash


def test_a_stage_record_of_a_large_html_page_reads_back_to_the_same_document() -> None:
    """What the next agent reads is the document the first one featurised, text included, whether the text
    travelled or was extracted again on arrival."""
    settings = Settings(stages=STAGES)
    featurizer = Featurizer(settings)
    for paragraphs in (3, 1200):
        raw = orjson.dumps({"id": f"p{paragraphs}", "url": "https://e.com/p", "html": _long_html(paragraphs)})
        (doc,) = featurizer.parse_batch([raw], ingest_time=RECEIVED_MS // 1000)
        assert isinstance(doc, Document)
        record = stage_record(doc, RECEIVED_MS)
        assert len(record) <= len(orjson.dumps(doc.article)) + 64 * 1024, f"{len(record):,} bytes"
        assert read_stage_record(record) == (doc, RECEIVED_MS)


def test_a_stage_record_keeps_what_the_agents_of_the_version_before_read() -> None:
    """While a deploy rolls, an agent of the version before reads this version's stage records: they still carry
    `url` (that version reads it there) unless it is longer than `CARRIED_URL_CHARS`; and both read back."""
    settings = Settings(stages=STAGES)
    featurizer = Featurizer(settings)
    for path, carried in (("story/1", True), ("x" * 3000, False)):
        raw = orjson.dumps({"id": "u1", "url": f"https://e.com/{path}", "body": "A body of a few words here."})
        (doc,) = featurizer.parse_batch([raw], ingest_time=RECEIVED_MS // 1000)
        assert isinstance(doc, Document)
        record = stage_record(doc, RECEIVED_MS)
        assert ("url" in orjson.loads(record)) is carried
        assert read_stage_record(record) == (doc, RECEIVED_MS)


# --- a URL of non-ASCII characters: its normalised form (nine bytes a character) outgrows the features' room --


@pytest.mark.parametrize("fused", [True, False], ids=["one-hop", "two-hops"])
def test_an_article_at_the_limit_with_a_long_non_ascii_url_is_published_whole_or_rejected_first(
    agents: tuple[Settings, Resources], fused: bool
) -> None:
    """An article of exactly max_record_bytes whose URL is 8,000 emoji (32 KB, within the schema's 8,192
    characters): percent-encoded, its normalised URL is 96 KB, beyond the 64 KiB the workers leave beside an
    article. One hop decided it unique and wrote a 1.08 MB deduped record, which the broker refuses: a canonical
    with its link on dedup.links and missing from the indexers' feed. Split, its stage record was refused after
    it was featurised. It must be rejected with the reason before any verdict, or published whole."""
    settings, resources = agents
    url = "https://e.com/" + "\U0001f600" * 8000
    empty = orjson.dumps({"id": "emoji-url", "url": url, "body": ""})
    raw = orjson.dumps(
        {"id": "emoji-url", "url": url, "body": "word " * ((settings.max_record_bytes - len(empty)) // 5)}
    )
    assert settings.max_record_bytes - 5 < len(raw) <= settings.max_record_bytes
    hop = (Agent.EXACT, Agent.SIMHASH) if fused else (Agent.EXACT,)
    out = resources.stage_agent(*hop).handle([Incoming(raw, b"emoji-url", RECEIVED_MS, settings.topics.raw, 0, 0)])
    limit = settings.worker.max_message_bytes
    assert all(len(o.value) <= limit for o in out), [(o.topic, len(o.value)) for o in out]
    topics = [o.topic for o in out]
    if settings.topics.rejected in topics:
        (rejection,) = [orjson.loads(o.value) for o in out]
        _valid(rejection, "rejected")
        assert "url" in rejection["reason"] and rejection["raw"].encode() == raw, rejection["reason"]
    elif fused:
        assert sorted(topics) == sorted([settings.topics.links, settings.topics.deduped])
    else:
        assert topics == [settings.topics.stage_simhash]


# --- a rejection whose raw bytes JSON escapes (control characters: six bytes each) outgrows its topic ------


def test_a_rejection_of_control_characters_fits_what_the_broker_accepts(agents: tuple[Settings, Resources]) -> None:
    """A raw record of 1,000,000 bytes of U+0001 (valid UTF-8, over max_record_bytes): its rejection was cut
    to 3/4 of the broker's limit in bytes, and each byte is six as JSON ("\\u0001"): 4.7 MB, refused by the broker.
    It must fit, and still say why and give the record's first bytes and length."""
    settings, resources = agents
    limit = settings.worker.max_message_bytes
    raw = b"\x01" * 1_000_000
    exact = resources.stage_agent(Agent.EXACT)
    (out,) = exact.handle([Incoming(raw, None, RECEIVED_MS, settings.topics.raw, 0, 3)])
    assert out.topic == settings.topics.rejected
    assert len(out.value) <= limit, f"{len(out.value):,} bytes, above {limit:,}"
    rejection = orjson.loads(out.value)
    _valid(rejection, "rejected")
    assert rejection["reason"].startswith("record is 1,000,000 bytes") and rejection["raw_bytes"] == len(raw)
    assert rejection["offset"] == 3 and raw.startswith(rejection["raw"].encode())


@pytest.mark.parametrize("filler", ["\x00", '"', "\\", "\u2028"])
def test_a_cut_rejection_always_fits_and_keeps_the_start_of_the_record(filler: str) -> None:
    """However JSON spells the record's characters, its rejection fits `max_bytes`, with as much of the
    record's start as fits and its full length."""
    raw = ("{" + filler * 50_000).encode()
    value = rejected_record("too large", raw, {"topic": "t"}, max_bytes=20_000)
    assert len(value) <= 20_000, f"{len(value):,} bytes"
    rejection = orjson.loads(value)
    _valid(rejection, "rejected")
    assert rejection["raw_bytes"] == len(raw) and raw.startswith(rejection["raw"].encode())
    assert len(rejection["raw"]) > 1000, "the cut keeps far less of the record than fits"


def test_a_rejection_with_a_huge_reason_fits_and_keeps_the_record(agents: tuple[Settings, Resources]) -> None:
    """A `published_at` of 700,000 characters: the reason quoted all of it, and the rejection (reason, then the
    record, not cut: it fits beside a short reason) came out at 1.4 MB, above the broker's limit."""
    settings, resources = agents
    raw = orjson.dumps({"id": "d", "url": "https://e.com/d", "body": "Some body text.", "published_at": "9" * 700_000})
    exact = resources.stage_agent(Agent.EXACT)
    (out,) = exact.handle([Incoming(raw, b"d", RECEIVED_MS, settings.topics.raw, 0, 0)])
    assert out.topic == settings.topics.rejected
    assert len(out.value) <= settings.worker.max_message_bytes, f"{len(out.value):,} bytes"
    rejection = orjson.loads(out.value)
    _valid(rejection, "rejected")
    assert "published_at" in rejection["reason"] and len(rejection["reason"]) < 2000
    assert rejection["raw"].encode() == raw, "the whole record fits beside its reason: it must be kept, replayable"


def test_publish_delivers_the_rejection_of_a_line_of_control_characters(kafka_bootstrap: str, tmp_path: Path) -> None:
    """`dedup publish` of a 30,000-byte line of NUL bytes, the raw topic taking 20,000 and the rejected topic
    10,000: the rejection, cut to 3/4 of 10,000 bytes, is 26 KB as JSON, so the rejected topic refused it and
    the line reached neither topic (reported failed)."""
    run_id = uuid.uuid4().hex[:8]
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap,
        topics=TopicSettings(**{name: f"r{run_id}.{name}" for name in FIELDS}, partitions=3),
    )
    _topic_with_limit(kafka_bootstrap, settings.topics.raw, 20_000)
    _topic_with_limit(kafka_bootstrap, settings.topics.rejected, 10_000)
    create_topics(settings)
    line = b'{"id": "nul", "body": "' + b"\x00" * 30_000 + b'"}'
    source = tmp_path / "nul.jsonl"
    source.write_bytes(line + b"\n")
    stats = publish_files(settings, [str(source)])
    assert stats.failed == [], stats.failed
    [(_, value)] = _read(kafka_bootstrap, settings.topics.rejected, 1, timeout=10)
    rejection = orjson.loads(value)
    _valid(rejection, "rejected")
    assert rejection["raw_bytes"] == len(line) and line.startswith(rejection["raw"].encode())


# --- every record `dedup run` writes for hostile lines is valid against its schema ---------------------------


def test_every_record_written_for_hostile_lines_is_valid_and_every_rejection_replayable(tmp_path: Path) -> None:
    """Lone surrogates, NUL and other controls, non-BMP characters, huge and negative-zero numbers, NaN,
    duplicate keys, a BOM past the first line, wrong types, an id of 10,000 characters: each line is decided
    with records its schema accepts, or rejected with a reason and its line as it came."""
    body = "The council approved the {} budget after a long debate; the mayor named {} new schools and {} roads."
    words = iter(["river", "harbour", "market", "railway", "airport", "college", "stadium", "hospital", "bridge"])

    def text() -> str:
        word = next(words)
        return body.format(word, word, word)

    lines = [
        b'{"id": "surrogate", "url": "https://e.com/s", "title": "\\ud800", "body": "x"}',
        orjson.dumps({"id": "nul", "url": "https://e.com/n\x00x", "title": "a\x00b", "body": text() + "\x00\x07"}),
        orjson.dumps({"id": "\U0001f600", "url": "https://e.com/\U0001f600", "title": "\U0001f600", "body": text()}),
        b'{"id": "numbers", "url": "https://e.com/b", "body": "'
        + text().encode()
        + b'", "x": 1e308, "y": -0.0, "z": 123456789012345678901234567890}',
        b'{"id": "nan", "url": "https://e.com/nan", "body": "x", "x": NaN}',
        b'{"id": "first", "id": "second", "url": "https://e.com/d", "body": "' + text().encode() + b'"}',
        b'\xef\xbb\xbf{"id": "bom", "url": "https://e.com/bom", "body": "x"}',
        b'{"id": "wrong", "url": "https://e.com/w", "body": 5}',
        orjson.dumps({"id": "i" * 10_000, "url": "https://e.com/long", "body": "x"}),
        orjson.dumps({"id": "lang", "url": "https://e.com/l", "language": "\x00\x01", "body": text()}),
        orjson.dumps({"id": 7, "url": "https://e.com/7", "source": "\x00", "body": text()}),
        b"[" * 300 + b"]" * 300,
    ]
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    paths = RunPaths(tmp_path / "out", tmp_path / "state")
    run(Settings(stages=STAGES), [str(source)], paths)
    links = [orjson.loads(line) for line in paths.links.read_bytes().splitlines()]
    for link in links:
        _valid(link, "link")
    for article in (orjson.loads(line) for line in paths.deduped.read_bytes().splitlines()):
        _valid(article, "deduped_article")
    rejected = {r["line"]: r for r in (orjson.loads(line) for line in paths.rejected.read_bytes().splitlines())}
    assert sorted(rejected) == [1, 5, 7, 8, 9, 12]
    for number, rejection in rejected.items():
        _valid(rejection, "rejected")
        assert rejection["reason"] and rejection["raw"].encode() == lines[number - 1]
    assert {link["doc_id"] for link in links} == {"nul", "\U0001f600", "numbers", "second", "lang", "7"}


def test_every_record_the_agents_write_for_hostile_input_is_valid_and_every_rejection_replayable(
    agents: tuple[Settings, Resources],
) -> None:
    """The same kinds of hostile records on `articles.raw`, through the exact agent and the simhash agent: every
    link, deduped and rejected record is valid against its schema, every stage record is read by the next
    agent, and every rejection gives its record's bytes exactly."""
    settings, resources = agents
    body = "Flood water rose above the danger mark in {} districts overnight, officials said on {}."
    values = [
        b'{"id": "surrogate", "url": "https://e.com/s", "body": "\\udfff x"}',
        b"\xff\xfe not UTF-8",
        b'{"id": "nan", "url": "https://e.com/nan", "body": "x", "x": -Infinity}',
        b'{"id": "wrong", "url": ["https://e.com/w"], "body": "x"}',
        b"\xef\xbb\xbf" + orjson.dumps({"id": "bom", "url": "https://e.com/bom", "body": "x"}),
        orjson.dumps({"id": "c\x7f", "url": "https://e.com/c", "body": "x"}),
        b'{"id": "deep", "url": "https://e.com/deep", "body": "x", "m": ' + b"[" * 300 + b"]" * 300 + b"}",
        orjson.dumps({"id": "nul\U0001f600", "url": "https://e.com/\x00", "body": body.format("three", "Monday")}),
        orjson.dumps({"url": "https://e.com/anon", "title": "\x00", "body": body.format("nine", "Friday") + "\x01"}),
        b'{"id": 9, "url": "https://e.com/9", "body": "' + body.format("two", "Sunday").encode() + b'", "n": -0.0}',
    ]
    batch = [Incoming(v, None, RECEIVED_MS, settings.topics.raw, 0, i) for i, v in enumerate(values)]
    first = resources.stage_agent(Agent.EXACT).handle(batch)
    forwarded = [o for o in first if o.topic == settings.topics.stage_simhash]
    second = resources.stage_agent(Agent.SIMHASH).handle(
        [Incoming(o.value, o.key, RECEIVED_MS, o.topic, 0, i) for i, o in enumerate(forwarded)]
    )
    schemas = {settings.topics.links: "link", settings.topics.deduped: "deduped_article"}
    schemas[settings.topics.rejected] = "rejected"
    for out in [o for o in first if o not in forwarded] + second:
        _valid(orjson.loads(out.value), schemas[out.topic])
    rejected = [orjson.loads(o.value) for o in first + second if o.topic == settings.topics.rejected]
    assert sorted(r["offset"] for r in rejected) == list(range(7)), [r["reason"] for r in rejected]
    for rejection in rejected:
        given = rejection["raw"].encode() if "raw" in rejection else base64.b64decode(rejection["raw_base64"])
        assert given == values[rejection["offset"]] and rejection["reason"]
    links = [orjson.loads(o.value)["doc_id"] for o in second if o.topic == settings.topics.links]
    assert len(links) == 3 and {"nul\U0001f600", "9"} <= set(links), links


def test_a_rejected_line_that_is_not_utf8_comes_back_byte_for_byte(tmp_path: Path) -> None:
    """`dedup run` wrote a line of invalid UTF-8 as `raw` with backslash escapes, so `\\xff` and the four
    characters backslash, x, f, f came out the same, and neither could be sent again as it came. Such a line
    is now given as `raw_base64`, as the service gives it."""
    lines = [b'{"id": "a", "url": "https://e.com/a", "body": "caf\xff"}', b'{"id": "b", "body": "caf\\xff"}']
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    paths = RunPaths(tmp_path / "out", tmp_path / "state")
    run(Settings(stages=STAGES), [str(source)], paths)
    rejected = [orjson.loads(line) for line in paths.rejected.read_bytes().splitlines()]
    assert len(rejected) == 2
    for rejection in rejected:
        _valid(rejection, "rejected")
    given = [base64.b64decode(r["raw_base64"]) if "raw_base64" in r else r["raw"].encode() for r in rejected]
    assert given == lines

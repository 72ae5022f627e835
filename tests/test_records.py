"""The input boundary: every bad record gets a clear reason, every good one its features."""

from __future__ import annotations

import orjson
import pytest

from streams.config import Settings
from streams.core.model import Document
from streams.records.article import Featurizer, Rejection, parse_timestamp

INGEST = 1_798_761_600  # 2027-01-01T00:00:00Z: after every date below (a later one is clamped to a day past it)


@pytest.fixture(scope="module")
def featurizer() -> Featurizer:
    return Featurizer(Settings(stages=["url", "content", "simhash"]))


def good(**fields: object) -> dict[str, object]:
    return {"id": "a", "url": "https://example.com/a", "title": "Title", "body": "Some body text here.", **fields}


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{not json", "invalid JSON"),
        (b'{"url": "https://e.com/a", "body": "caf\xe9"}', "invalid UTF-8 at byte 39"),
        (b"[1, 2]", "must be a JSON object, got list"),
        (b'{"body": "text"}', "missing required field: url"),
        (b'{"url": "https://e.com/a", "title": "t"}', "one of body or html"),
        (b'{"url": 5, "body": "text"}', "url must be string"),
        (b'{"url": "https://e.com/a", "body": ["a"]}', "body must be string"),
        (b'{"url": "https://e.com/a", "body": "x", "published_at": "last tuesday"}', "not an RFC 3339"),
        (b'{"url": "https://e.com/a", "body": "x", "published_at": "9999-12-31T23:59:59-23:59"}', "out of range"),
        (b'{"url": "https://e.com/a", "body": "x", "published_at": 1700000000}', "published_at must be"),
        (b'{"url": "mailto:x@e.com", "body": "x"}', "must be http or https"),
        (b'{"url": "https://e.com/a", "body": "   "}', "no text"),
        (b'{"url": "https://e.com/a", "html": "<html><body></body></html>"}', "no article text found in html"),
        (b'{"id": "", "url": "https://e.com/a", "body": "x"}', "id must be longer"),
    ],
)
def test_bad_records_are_rejected_with_a_clear_reason(featurizer: Featurizer, raw: bytes, reason: str) -> None:
    result = featurizer.parse(raw, ingest_time=INGEST)
    assert isinstance(result, Rejection)
    assert reason in result.reason
    assert result.raw == raw


def test_a_twenty_megabyte_body_is_refused_before_parsing(featurizer: Featurizer) -> None:
    raw = orjson.dumps(good(body="word " * 4_000_000))
    result = featurizer.parse(raw, ingest_time=INGEST)
    assert isinstance(result, Rejection)
    assert "above the limit" in result.reason


def test_good_record_gets_its_features(featurizer: Featurizer) -> None:
    doc = featurizer.parse(orjson.dumps(good(published_at="2026-11-02T10:00:00+06:00")), ingest_time=INGEST)
    assert isinstance(doc, Document)
    assert doc.normalized_url == "//example.com/a"
    assert doc.text == "Title\nSome body text here."
    assert doc.published_at == parse_timestamp("2026-11-02T04:00:00Z")
    assert len(doc.url_hash) == len(doc.content_hash) == 64
    assert doc.language == "en"


def test_missing_fields_get_sane_defaults(featurizer: Featurizer) -> None:
    record = {"url": "https://example.com/a", "body": "Some body text here, long enough to be English."}
    first = featurizer.parse(orjson.dumps(record), ingest_time=INGEST)
    again = featurizer.parse(orjson.dumps(record), ingest_time=INGEST + 60)
    assert isinstance(first, Document) and isinstance(again, Document)
    assert first.doc_id == again.doc_id and first.doc_id.startswith("auto-")  # deterministic
    assert first.published_at == INGEST  # ingest time when absent
    numeric = featurizer.parse(orjson.dumps({**record, "id": 17}), ingest_time=INGEST)
    assert isinstance(numeric, Document) and numeric.doc_id == "17"


def test_given_language_tag_wins_over_detection(featurizer: Featurizer) -> None:
    doc = featurizer.parse(orjson.dumps(good(language="BN-bd")), ingest_time=INGEST)
    assert isinstance(doc, Document) and doc.language == "bn"


def test_html_goes_through_boilerplate_removal(featurizer: Featurizer) -> None:
    paragraph = "The council approved the new budget on Monday after a long debate about schools and roads. " * 3
    html = (
        "<html><head><title>Council approves budget</title></head><body>"
        "<nav>Home | World | Sport | Subscribe</nav>"
        f"<article><h1>Council approves budget</h1><p>{paragraph}</p><p>The mayor welcomed the vote.</p></article>"
        "<footer>Copyright 2026 Example News. All rights reserved.</footer></body></html>"
    )
    from_html = featurizer.parse(orjson.dumps({"url": "https://e.com/a", "html": html}), ingest_time=INGEST)
    from_text = featurizer.parse(
        orjson.dumps(
            {
                "url": "https://e.com/b",
                "title": "Council approves budget",
                "body": f"{paragraph}\nThe mayor welcomed the vote.",
            }
        ),
        ingest_time=INGEST,
    )
    assert isinstance(from_html, Document) and isinstance(from_text, Document)
    assert "Subscribe" not in from_html.text and "Copyright" not in from_html.text
    assert from_html.content_hash == from_text.content_hash  # same article, same key, whatever the markup


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-11-01T06:00:00Z", 1793512800),
        ("2026-11-01T12:00:00+06:00", 1793512800),
        ("2026-11-01 06:00:00", 1793512800),
        # RFC 2822, the RSS pubDate: named and numeric zones, no weekday, -0000 ("zone unknown") read as UTC.
        ("Sun, 01 Nov 2026 06:00:00 GMT", 1793512800),
        ("Sun, 01 Nov 2026 12:00:00 +0600", 1793512800),
        ("1 Nov 2026 01:00:00 EST", 1793512800),
        ("01 Nov 2026 06:00:00 -0000", 1793512800),
    ],
)
def test_timestamps(value: str, expected: int) -> None:
    assert parse_timestamp(value) == expected


def test_an_rss_date_is_accepted_and_a_wrong_one_named(featurizer: Featurizer) -> None:
    doc = featurizer.parse(orjson.dumps(good(published_at="Mon, 02 Nov 2026 10:00:00 +0600")), ingest_time=INGEST)
    assert isinstance(doc, Document) and doc.published_at == parse_timestamp("2026-11-02T04:00:00Z")
    bad = featurizer.parse(orjson.dumps(good(published_at="Mon, 31 Nov 2026 10:00:00 +0600")), ingest_time=INGEST)
    assert isinstance(bad, Rejection) and "RFC 3339 or RFC 2822" in bad.reason

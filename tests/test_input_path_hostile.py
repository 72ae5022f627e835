"""The input path, raw record to Document, attacked (HTML extraction, title handling, stage records, dates,
language labels). Each docstring tells the bug the test was written against, now fixed: a crash, a valid
record lost on one path, or one article given two content keys or two languages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from streams.config import Settings
from streams.core.cascade import Cascade
from streams.core.model import Document, Stage, Verdict
from streams.records.article import Featurizer, Rejection
from streams.records.stage import read_stage_record, stage_record
from streams.stores.sqlite import SqliteStateStore

INGEST = 1_767_225_600
SETTINGS = Settings(stages=["url", "content", "simhash"])
PARAGRAPH = (
    "The council approved the new budget for the city's schools after a long debate on Tuesday night,"
    " and officials said the money would reach classrooms before the start of the next school year."
)


@pytest.fixture(scope="module")
def featurizer() -> Featurizer:
    return Featurizer(SETTINGS)


def _doc(featurizer: Featurizer, record: dict[str, object]) -> Document:
    result = featurizer.parse(orjson.dumps(record), ingest_time=INGEST)
    assert isinstance(result, Document), result
    return result


# --- trafilatura raises AssertionError: `dedup run` dies and every valid line of its chunk is lost ---------


def test_dedup_run_survives_html_that_trafilatura_asserts_on(tmp_path: Path) -> None:
    """An HTML fragment opening with an inline SVG icon and a line break (`<svg><br>`) makes lxml's
    `drop_tree` (called by htmldate's `clean_html` inside trafilatura's metadata pass) fail an `assert`:
    an AssertionError that `Featurizer` does not catch, so `dedup run` exits with a traceback and the
    valid line before it never gets a verdict."""
    good = {"id": "good", "url": "https://e.com/1", "body": PARAGRAPH}
    hostile = {"id": "svg", "url": "https://e.com/2", "html": f"<svg><br><p>{PARAGRAPH}</p>"}
    source = tmp_path / "in.jsonl"
    source.write_bytes(orjson.dumps(good) + b"\n" + orjson.dumps(hostile) + b"\n")
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "streams",
            "run",
            str(source),
            "--out",
            str(out),
            "--stages",
            "url,content,simhash",
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-800:]
    links = [orjson.loads(line) for line in (out / "links.jsonl").read_bytes().splitlines()]
    assert [link["doc_id"] for link in links] == ["good"]
    rejected = [orjson.loads(line) for line in (out / "rejected.jsonl").read_bytes().splitlines()]
    assert len(rejected) == 1 and rejected[0]["reason"]


def test_featurizer_rejects_html_that_trafilatura_asserts_on(featurizer: Featurizer) -> None:
    raw = orjson.dumps({"url": "https://e.com/2", "html": f"<math><br><p>{PARAGRAPH}</p>"})
    assert isinstance(featurizer.parse(raw, ingest_time=INGEST), Document | Rejection)
    assert all(isinstance(r, Document | Rejection) for r in featurizer.parse_batch([raw], ingest_time=INGEST))


# --- the page's title is cut off the body's first characters, not its first line --------------------------


def test_same_article_as_html_and_as_body_shares_its_content_key(featurizer: Featurizer) -> None:
    """A page titled "Floods" whose first paragraph begins "Floods have killed ...": the body loses its first
    word ("have killed ...") because the headline is stripped as a character prefix, so the page and the same
    article given as title + body get different content keys (a byte-identical copy missed at stage 2)."""
    body = (
        "Floods have killed at least 12 people in the north of the country this week, officials said on"
        " Monday, as rivers kept rising and thousands of families left their homes for higher ground."
    )
    page = f"<html><head><title>Floods</title></head><body><article><p>{body}</p></article></body></html>"
    from_html = _doc(featurizer, {"url": "https://a.com/1", "html": page})
    from_body = _doc(featurizer, {"url": "https://b.com/1", "title": "Floods", "body": body})
    assert "Floods have killed" in from_html.text, from_html.text[:60]
    assert from_html.content_hash == from_body.content_hash


def test_a_one_letter_title_does_not_eat_the_first_letter_of_the_body(featurizer: Featurizer) -> None:
    page = f"<html><head><title>T</title></head><body><article><p>{PARAGRAPH}</p></article></body></html>"
    doc = _doc(featurizer, {"url": "https://a.com/1", "html": page})
    assert "The council approved" in doc.text, doc.text[:40]  # got "T\nhe council approved"


def test_the_html_copy_is_linked_at_the_content_stage(tmp_path: Path, featurizer: Featurizer) -> None:
    """The same story, once from the publisher's page and once as a wire copy (title + body), through the
    cascade with the embedded SQLite store: a content duplicate, by the README's promise that HTML goes to
    headline + body."""
    body = (
        "Rainfall records were broken across the region on Tuesday as storms swept in from the west, flooding"
        " roads and closing schools in three districts for the rest of the week, the weather office said."
    )
    page = f"<html><head><title>Rain</title></head><body><article><p>{body}</p></article></body></html>"
    cascade = Cascade(SETTINGS, SqliteStateStore(tmp_path / "state.sqlite3"))
    cascade.decide(_doc(featurizer, {"id": "page", "url": "https://a.com/1", "html": page}))
    link = cascade.decide(
        _doc(featurizer, {"id": "wire", "url": "https://b.com/9", "title": "Rain", "body": body})
    ).link
    assert (link.verdict, link.stage) == (Verdict.DUPLICATE, Stage.CONTENT), link


def test_a_blank_title_beside_html_is_read_as_absent(featurizer: Featurizer) -> None:
    """A blank `body` beside `html` is read as absent (README); a blank `title` is not: the page's own headline
    is dropped, and the same page gets another content key than with no title at all."""
    page = (
        "<html><head><title>Budget passes</title></head><body><article><h1>Budget passes</h1>"
        f"<p>{PARAGRAPH}</p></article></body></html>"
    )
    untitled = _doc(featurizer, {"url": "https://a.com/1", "html": page})
    blank = _doc(featurizer, {"url": "https://a.com/1", "title": "  ", "html": page})
    assert blank.content_hash == untitled.content_hash, (blank.text[:40], untitled.text[:40])


# --- a stage record of a blank body beside html cannot be read by the next agent ---------------------------


def test_stage_record_of_a_blank_body_beside_html_is_readable(featurizer: Featurizer) -> None:
    """`{"body": " ", "html": page}` is a valid article (its text comes from the page); `stage_record` drops
    the text whenever a `body` key exists, and `read_stage_record` rebuilds it with `body_text`, which reads
    the blank body as absent and gives None: the simhash agent rejects the document ("unreadable simhash
    record: TypeError"), which `dedup run` decides."""
    page = f"<html><body><article><p>{PARAGRAPH}</p></article></body></html>"
    raw = orjson.dumps({"id": "blank-body", "url": "https://a.com/1", "body": " \n", "html": page})
    (doc,) = featurizer.parse_batch([raw], ingest_time=INGEST)
    assert isinstance(doc, Document), doc
    read, received = read_stage_record(stage_record(doc, 123))
    assert (read.text, read.content_hash, read.simhash, received) == (doc.text, doc.content_hash, doc.simhash, 123)


# --- RFC 2822 dates allow a leap second ---------------------------------------------------------------------


@pytest.mark.parametrize("stamp", ["Sat, 31 Dec 2016 23:59:60 +0000", "31 Dec 2016 23:59:60 GMT"])
def test_an_rss_pubdate_with_a_leap_second_is_read(featurizer: Featurizer, stamp: str) -> None:
    """RFC 2822 (section 3.3) allows second 60, as RFC 3339 does; the RFC 3339 path reads it as second 59, the
    RFC 2822 path rejects the whole article as "not an RFC 3339 or RFC 2822 date-time"."""
    doc = _doc(featurizer, {"url": "https://a.com/1", "body": PARAGRAPH, "published_at": stamp})
    rfc3339 = _doc(featurizer, {"url": "https://a.com/1", "body": PARAGRAPH, "published_at": "2016-12-31T23:59:60Z"})
    assert doc.published_at == rfc3339.published_at


# --- a language's English name and its code give two languages ---------------------------------------------

TAGALOG = (
    "Ang pamahalaan ay nagpahayag ng bagong batas tungkol sa edukasyon ngayong linggo, at sinabi ng kalihim na"
    " ang pondo ay darating sa mga paaralan bago magsimula ang susunod na taon ng pag-aaral sa buong bansa."
)


@pytest.mark.parametrize("label", ["Tagalog", "tagalog"])
def test_a_language_name_names_the_language_its_code_does(featurizer: Featurizer, label: str) -> None:
    """CLD2 answers `tl` for Tagalog, read as `fil` (langcodes' macrolanguage form); the label "Tagalog" is read
    by name to `tl`, without that step. One language, two codes: copies of one article, labelled and not,
    fall into different band partitions (stage 3 never compares them) and the semantic stage scores them by
    the looser cross-language cut-offs."""
    labelled = _doc(featurizer, {"url": "https://a.com/1", "body": TAGALOG, "language": label})
    coded = _doc(featurizer, {"url": "https://a.com/1", "body": TAGALOG, "language": "tl"})
    detected = _doc(featurizer, {"url": "https://a.com/1", "body": TAGALOG})
    assert labelled.language == coded.language == detected.language

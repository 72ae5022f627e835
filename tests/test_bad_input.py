"""No input can crash the boundary: every line becomes a Document or a Rejection with a reason."""

from __future__ import annotations

import unicodedata

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.config import Settings
from streams.core.model import Document, Link, Stage
from streams.records.article import Featurizer, Rejection
from streams.records.output import deduped_record, link_record

FEATURIZER_SETTINGS = Settings(stages=["url", "content", "simhash"])
FEATURIZER = Featurizer(FEATURIZER_SETTINGS)
INGEST = 1_767_225_600

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
urls = st.one_of(
    st.text(max_size=60),
    st.builds(lambda host, path: f"https://{host}/{path}", st.text(min_size=1, max_size=20), st.text(max_size=20)),
    st.just("https://example.com/a?utm_source=x&id=1"),
)
dates = st.one_of(
    st.text(max_size=30),
    st.datetimes().map(lambda d: d.isoformat()),
    st.sampled_from(["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "2026-02-30T00:00:00Z"]),
    st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat()),
)
articles = st.fixed_dictionaries(
    {},
    optional={
        "id": st.one_of(
            st.text(max_size=20), st.text(min_size=510, max_size=520), st.integers(-(2**63), 2**63 - 1), json_values
        ),
        "url": st.one_of(urls, json_values),
        "title": st.one_of(st.text(max_size=80), json_values),
        "body": st.one_of(st.text(max_size=400), json_values),
        "html": st.one_of(st.text(max_size=200), st.just("<html><body><p>x</p></body></html>"), json_values),
        "published_at": st.one_of(dates, json_values),
        "language": st.one_of(st.text(max_size=12), json_values),
    },
)


def _check(raw: bytes) -> None:
    result = FEATURIZER.parse(raw, ingest_time=INGEST)
    assert isinstance(result, Document | Rejection)
    if isinstance(result, Rejection):
        assert result.reason and result.raw == raw
    else:
        assert result.text and len(result.url_hash) == 64 and 0 <= result.simhash < 2**64
        # Ids are keys in every store: bounded, and free of the separators packed into Redis fields.
        assert len(result.doc_id) <= FEATURIZER_SETTINGS.max_id_chars
        assert not any(unicodedata.category(c) == "Cc" for c in result.doc_id)
        # What a valid document becomes must be writable too.
        link = Link.unique(result.doc_id)
        orjson.dumps(link_record(link, result, stages=list(Stage)))
        orjson.dumps(deduped_record(link, result))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(articles)
def test_any_record_is_decided_or_rejected_with_a_reason(article: dict[str, object]) -> None:
    _check(orjson.dumps(article))


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_are_decided_or_rejected_with_a_reason(raw: bytes) -> None:
    _check(raw)

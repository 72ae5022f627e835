"""Ids are checked at the input boundary: an id no store can hold safely is a rejection with a reason."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from streams.config import Settings
from streams.core.model import Document
from streams.records.article import Featurizer, Rejection

INGEST = 1_767_225_600


@pytest.fixture(scope="module")
def featurizer() -> Featurizer:
    return Featurizer(Settings(stages=["url", "content", "simhash"]))


def _parse(featurizer: Featurizer, doc_id: object, body: str = "The council approved the budget.") -> object:
    return featurizer.parse(orjson.dumps({"id": doc_id, "url": "https://e.com/a", "body": body}), ingest_time=INGEST)


@pytest.mark.parametrize(
    ("doc_id", "named"),
    [
        ("story\x1f7", "U+001F"),  # the separator packed into Redis fields
        ("\x00", "U+0000"),
        ("a\tb", "U+0009"),
        ("line\nbreak", "U+000A"),
        ("del\x7f", "U+007F"),
        ("nel\x85", "U+0085"),
    ],
)
def test_an_id_with_a_control_character_is_rejected(featurizer: Featurizer, doc_id: str, named: str) -> None:
    result = _parse(featurizer, doc_id)
    assert isinstance(result, Rejection)
    assert "id" in result.reason and "control character" in result.reason and named in result.reason


def test_an_id_longer_than_the_limit_is_rejected(featurizer: Featurizer) -> None:
    assert isinstance(_parse(featurizer, "x" * 512), Document)
    result = _parse(featurizer, "x" * 513)
    assert isinstance(result, Rejection)
    assert "513 characters" in result.reason and "max_id_chars = 512" in result.reason


def test_the_length_limit_is_a_setting() -> None:
    short = Featurizer(Settings(stages=["url"], max_id_chars=16))
    assert isinstance(_parse(short, "x" * 16), Document)
    assert isinstance(_parse(short, "x" * 17), Rejection)
    assert isinstance(_parse(Featurizer(Settings(stages=["url"], max_id_chars=2048)), "x" * 1000), Document)


def test_real_bangla_ids_are_kept(featurizer: Featurizer, shared_data: Path) -> None:
    line = (shared_data / "risingnews_bn_en" / "RisingNews.valid.bn").read_text(encoding="utf-8").splitlines()[0]
    doc_id = "prothomalo/" + "-".join(line.split()[:6])
    result = _parse(featurizer, doc_id, line)
    assert isinstance(result, Document) and result.doc_id == doc_id

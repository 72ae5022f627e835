"""Language labels from crawlers (`en_US`, `eng`, `English`) name one language, so bands and cut-offs agree."""

from __future__ import annotations

import orjson
import pytest

from streams.config import Settings
from streams.core.model import Document
from streams.evaluation.corpus import NtrexDocument
from streams.records.article import Featurizer

INGEST = 1_767_225_600


@pytest.fixture(scope="module")
def featurizer() -> Featurizer:
    return Featurizer(Settings(stages=["url", "content", "simhash"]))


def _doc(featurizer: Featurizer, body: str, language: str | None) -> Document:
    record = {"url": "https://e.com/a", "body": body, "language": language}
    result = featurizer.parse(orjson.dumps(record), ingest_time=INGEST)
    assert isinstance(result, Document), result
    return result


@pytest.mark.parametrize("label", ["en_US", "en-GB", "eng", "English", "ENG"])
def test_an_english_article_is_english_however_labelled(
    featurizer: Featurizer, ntrex: list[NtrexDocument], label: str
) -> None:
    original = " ".join(ntrex[7].english)
    edited = " ".join(ntrex[7].english_us)  # the same article with a few words changed
    plain, labelled = _doc(featurizer, original, "en"), _doc(featurizer, edited, label)
    assert plain.language == labelled.language == "en"


@pytest.mark.parametrize("label", ["bn_BD", "ben", "Bangla", "Bengali"])
def test_a_bangla_article_gets_the_bangla_fingerprint_however_labelled(
    featurizer: Featurizer, ntrex: list[NtrexDocument], label: str
) -> None:
    body = " ".join(ntrex[7].bengali)
    labelled, detected = _doc(featurizer, body, label), _doc(featurizer, body, None)
    assert labelled.language == detected.language == "bn"
    assert labelled.simhash == detected.simhash  # character n-grams, as configured for bn


@pytest.mark.parametrize("label", ["und", "not a language", "xx-YY", "", "mul"])
def test_an_unknown_label_falls_back_to_detection(
    featurizer: Featurizer, ntrex: list[NtrexDocument], label: str
) -> None:
    assert _doc(featurizer, " ".join(ntrex[7].bengali), label).language == "bn"
    assert _doc(featurizer, " ".join(ntrex[7].english), label).language == "en"

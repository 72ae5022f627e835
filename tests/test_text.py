import unicodedata

from streams.evaluation.corpus import NtrexDocument, decompose_bangla
from streams.features.text import content_hash, document_text, normalize_text


def test_bangla_composition_variants_hash_the_same(ntrex: list[NtrexDocument]) -> None:
    changed = 0
    for doc in ntrex:
        body = " ".join(doc.bengali)
        variant = decompose_bangla(body)
        changed += variant != body
        assert content_hash(document_text(None, variant)) == content_hash(document_text(None, body))
    assert changed > 50  # the real text does contain the letters in question


def test_the_named_codepoint_pairs_are_equal_after_normalisation() -> None:
    assert normalize_text("\u09df") == normalize_text("\u09af\u09bc") == "\u09df"
    assert normalize_text("\u09cb") == normalize_text("\u09c7\u09be") == "\u09cb"


def test_without_normalisation_bangla_variants_would_differ(ntrex: list[NtrexDocument]) -> None:
    body = " ".join(ntrex[0].bengali)
    assert content_hash(decompose_bangla(body)) != content_hash(body)


def test_quotes_dashes_and_whitespace_are_canonical() -> None:
    syndicated = "\u201cWe won\u2019t stop,\u201d she said \u2014  in Dhaka\u00a0today.\n\n"
    original = '"We won\'t stop," she said - in Dhaka today.'
    assert normalize_text(syndicated) == normalize_text(original) == original


def test_nfkc_folds_compatibility_forms() -> None:
    assert normalize_text("\uff21\uff22\uff23 \ufb01nance") == "ABC finance"
    assert unicodedata.is_normalized("NFKC", normalize_text("\u2460 \u00bd"))


def test_headline_and_body_both_count(ntrex: list[NtrexDocument]) -> None:
    doc = ntrex[3]
    body = " ".join(doc.english[1:])
    assert content_hash(document_text(doc.english[0], body)) != content_hash(document_text("Another headline", body))
    assert document_text(None, body) == normalize_text(body)
    assert document_text("  Title ", " Body ") == "Title\nBody"

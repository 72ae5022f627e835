import unicodedata

from streams.config import Settings
from streams.evaluation.corpus import NtrexDocument, decompose_bangla
from streams.features.simhash import char_simhash, hamming
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


ZWJ, ZWNJ = "\u200d", "\u200c"
NGRAM = Settings().simhash.char_ngram


def test_bangla_joiners_do_not_change_the_keys(ntrex: list[NtrexDocument]) -> None:
    # Real NTREX Bangla writes র‍্যালি, র‍্যাপার with a ZWJ (the ya-phala form); other publishers
    # type র্যালি. Both ways, and ZWJ added where the text had none, a reader sees one word.
    with_joiner = [" ".join(d.bengali) for d in ntrex if ZWJ in " ".join(d.bengali)]
    assert with_joiner
    without_joiner = [" ".join(d.bengali) for d in ntrex if "\u09b0\u09cd\u09af" in " ".join(d.bengali)][:10]
    pairs = [(text, text.replace(ZWJ, "")) for text in with_joiner]
    pairs += [(text, text.replace("\u09b0\u09cd\u09af", "\u09b0" + ZWJ + "\u09cd\u09af")) for text in without_joiner]
    for text, variant in pairs:
        assert variant != text
        one, other = document_text(None, text), document_text(None, variant)
        assert content_hash(one) == content_hash(other)
        assert char_simhash(one, NGRAM) == char_simhash(other, NGRAM)


def test_without_folding_a_joiner_moves_the_fingerprint(ntrex: list[NtrexDocument]) -> None:
    text = next(" ".join(d.bengali) for d in ntrex if ZWJ in " ".join(d.bengali))
    assert hamming(char_simhash(text, NGRAM), char_simhash(text.replace(ZWJ, ""), NGRAM)) > 0


def test_zwnj_in_bangla_is_folded_too(ntrex: list[NtrexDocument]) -> None:
    # ক্‌ষ (ZWNJ: the hasanta shown) and ক্ষ are the same letters.
    body = next(" ".join(d.bengali) for d in ntrex if "\u0995\u09cd\u09b7" in " ".join(d.bengali))
    variant = body.replace("\u0995\u09cd\u09b7", "\u0995\u09cd" + ZWNJ + "\u09b7")
    assert content_hash(document_text(None, variant)) == content_hash(document_text(None, body))


def test_joiners_that_change_what_a_reader_sees_are_kept() -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # one family emoji, not three people
    assert normalize_text(f"A {family} moved in") != normalize_text("A \U0001f468\U0001f469\U0001f467 moved in")
    persian = "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"  # Persian's ZWNJ separates word parts
    assert ZWNJ in normalize_text(persian)

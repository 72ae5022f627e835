import itertools

from streams.evaluation.corpus import NtrexDocument
from streams.features.simhash import char_simhash, hamming, word_simhash
from streams.features.text import document_text


def _en(sentences: list[str]) -> int:
    return word_simhash(document_text(sentences[0], " ".join(sentences[1:])), 3)


def _bn(sentences: list[str]) -> int:
    return char_simhash(document_text(sentences[0], " ".join(sentences[1:])), 4)


def test_light_human_edits_stay_close_and_different_stories_stay_far(ntrex: list[NtrexDocument]) -> None:
    edits = [hamming(_en(d.english), _en(d.english_us)) for d in ntrex]
    others = [hamming(_en(a.english), _en(b.english)) for a, b in itertools.pairwise(ntrex)]
    assert sorted(edits)[len(edits) // 2] <= 3  # the median US edit is within the band guarantee
    assert min(others) > 12  # no two different stories come anywhere near


def test_bangla_uses_character_ngrams_and_survives_a_dropped_sentence(ntrex: list[NtrexDocument]) -> None:
    long_docs = [d for d in ntrex if len(d.bengali) >= 15]
    near = [hamming(_bn(d.bengali), _bn(d.bengali[:-1])) for d in long_docs]
    far = [hamming(_bn(a.bengali), _bn(b.bengali)) for a, b in itertools.pairwise(long_docs)]
    assert max(near) < min(far)
    assert min(far) > 12


def test_fingerprint_is_deterministic_and_order_sensitive() -> None:
    text = "the council approved the new budget on monday after a long debate"
    assert word_simhash(text, 3) == word_simhash(text, 3)
    assert word_simhash(text, 3) != word_simhash(" ".join(reversed(text.split())), 3)
    assert word_simhash("", 3) == 0

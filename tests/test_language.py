import hashlib

import pytest

from streams.evaluation.corpus import NtrexDocument
from streams.features.language import UNDETERMINED, RememberedLanguages, detect_language, normalize_language


def test_english_and_bangla_news_are_identified(ntrex: list[NtrexDocument]) -> None:
    english = [detect_language(" ".join(d.english)) for d in ntrex]
    bengali = [detect_language(" ".join(d.bengali)) for d in ntrex]
    assert english.count("en") == len(ntrex)
    assert bengali.count("bn") == len(ntrex)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("El gobierno anunció hoy nuevas medidas económicas para controlar la inflación en el país.", "es"),
        ("Die Regierung hat heute neue wirtschaftliche Maßnahmen gegen die Inflation angekündigt.", "de"),
        ("सरकार ने आज महंगाई पर काबू पाने के लिए नए आर्थिक उपायों की घोषणा की।", "hi"),
    ],
)
def test_other_languages_get_their_own_code(text: str, expected: str) -> None:
    assert detect_language(text) == expected


def test_text_without_language_is_undetermined() -> None:
    assert detect_language("12345 67890 ### $$$") == UNDETERMINED


def test_control_characters_do_not_break_identification() -> None:
    assert detect_language("\x00\x01\x7f The council approved the budget after a long debate on Monday.") == "en"


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("en", "en"),
        ("en_US", "en"),
        ("EN-gb", "en"),
        ("eng", "en"),
        ("English", "en"),
        ("bn", "bn"),
        ("bn_BD", "bn"),
        ("ben", "bn"),
        ("Bangla", "bn"),
        ("Bengali", "bn"),
        ("iw", "he"),  # deprecated codes (CLD2 still answers with some) to their current ones
        ("zh-Hant-TW", "zh"),
        ("cmn", "zh"),
    ],
)
def test_language_labels_name_the_base_language(label: str, expected: str) -> None:
    assert normalize_language(label) == expected


@pytest.mark.parametrize("label", ["", " ", "und", "mul", "zxx", "xx", "x-private", "not a language", "12", "en-"])
def test_unknown_or_empty_labels_are_none(label: str) -> None:
    assert normalize_language(label) is None


def test_detected_codes_are_normalised_too() -> None:
    hebrew = "הממשלה הודיעה היום על צעדים כלכליים חדשים לבלימת האינפלציה במדינה."
    assert detect_language(hebrew) == "he"


def test_remembered_languages_answer_as_detect_language_does(ntrex: list[NtrexDocument]) -> None:
    # Copies that begin alike share an answer; it is always detect_language's own, whether the
    # sample is the whole text or only its beginning, and whatever was remembered before.
    sample = 60
    remembered = RememberedLanguages(sample, size=8)
    texts = []
    for doc in ntrex[:10]:
        english, bengali = " ".join(doc.english), " ".join(doc.bengali)
        texts += [english, english + " An edit past the sample.", bengali[:sample], bengali, "\x00\x07" + english]
    texts += ["", "x", "Hello " * 10, "Hello " * 10 + "bonjour " * 40]
    for text in texts * 2:
        content_hash = hashlib.sha256(text.encode("utf-8")).hexdigest()
        assert remembered.detect(text, content_hash) == detect_language(text, sample), text
    assert len(remembered._known) <= 8

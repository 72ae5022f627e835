"""What a text states: numbers, scores, dates and names, and whether two texts contradict.

Embeddings place two reports of two different football matches almost on top of each
other: same teams, same verbs, same shape. What tells them apart is what they state
(3-1 against 2-0, Saturday against Wednesday, 2018 against 2019). This module pulls a
compact fact set out of a text and compares two of them, so the semantic stage can hold
back a link whose texts disagree.

Disagreement means *conflicting* facts, not missing ones: a paraphrase or a translation
often leaves a number out, so a kind of fact is compared only when both texts state it,
and by default it conflicts only when the two sets have nothing in common (`Rule.DISJOINT`;
`benchmarks/fact_check.py` measures the stricter rules).

Across languages:

- digits of every script (Bangla, Devanagari, Arabic-Indic, fullwidth, ...) are read as
  ASCII through `unicodedata`, so Bangla 10,000 is 10,000;
- thousands separators (`3,000`, and the Indian grouping `10,00,000`), decimals, and scale
  words in English and Bangla (`1.1 million` = 11 `লাখ`, `£2.8bn` = 2.8 `বিলিয়ন`) are
  folded into one value; a minus sign (or a dash, which NFKC and `normalize_text` make a hyphen) right
  before a number makes it negative (`-5 degrees`); a percentage is its number; Bangla `সাড়ে` N (N and a half),
  N `দশমিক` M (N.M), `দেড়` (1.5) and `আড়াই` (2.5) are read as their values, and so are vulgar
  fractions (`2½`, which NFKC writes as 2, 1, U+2044, 2); amounts follow a currency symbol or
  word (`$5m`, `Tk5,000 crore`, `Rs. 2000`: no year); a number after a short capitalised word
  and a hyphen belongs to a name (`COVID-19`, `F-16`) and is no fact;
- scores are `3-1` or `3:1` (a colon with two digits after it is a clock time);
- clock times (`9:35 am`, `8am`) are dropped: translations write them as words or in other
  forms (`সকাল ৯টা ৩৫ মিনিটে`, `আড়াইটায়`), and a time alone rarely tells two stories apart;
  so are decades (`the 1980s` is no year);
- months and weekdays are read in English and Bangla; years are 1800-2099;
- names are capitalised Latin-script words, which Bangla does not have (a Bangla text
  spells Liverpool `লিভারপুল`), so names are compared only between two texts of one
  language (`same_language`), never across languages.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from functools import lru_cache

from streams.features.text import normalize_text

MAX_PER_KIND = 32
"""Distinct facts of one kind kept (the first in the text): a fact set stays a few hundred bytes."""
MAX_TEXT_CHARS = 4000
"""Characters of a text read for facts: the headline and lead, where a report states its result
(the model reads 1,200); both sides of a pair are cut alike, and reading stays a few milliseconds."""

# ----------------------------------------------------------------------------- vocabularies

_MONTHS_EN = {
    "january": 1, "jan": 1, "february": 2, "feb": 2, "march": 3, "mar": 3, "april": 4, "apr": 4, "may": 5,
    "june": 6, "jun": 6, "july": 7, "jul": 7, "august": 8, "aug": 8, "september": 9, "sept": 9, "sep": 9,
    "october": 10, "oct": 10, "november": 11, "nov": 11, "december": 12, "dec": 12,
}  # fmt: skip
_MONTHS_BN = {
    "জানুয়ারি": 1, "জানুয়ারী": 1, "ফেব্রুয়ারি": 2, "ফেব্রুয়ারী": 2, "মার্চ": 3, "এপ্রিল": 4, "মে": 5,
    "জুন": 6, "জুলাই": 7, "আগস্ট": 8, "আগষ্ট": 8, "সেপ্টেম্বর": 9, "অক্টোবর": 10, "নভেম্বর": 11,
    "ডিসেম্বর": 12,
}  # fmt: skip
_WEEKDAYS_EN = {
    "monday": 1, "tuesday": 2, "wednesday": 3, "thursday": 4, "friday": 5, "saturday": 6, "sunday": 7,
}  # fmt: skip
_WEEKDAYS_BN = {
    "সোমবার": 1, "মঙ্গলবার": 2, "বুধবার": 3, "বৃহস্পতিবার": 4, "শুক্রবার": 5, "শনিবার": 6, "রবিবার": 7,
    "রোববার": 7,
}  # fmt: skip
_SCALES = {
    "thousand": 3, "million": 6, "billion": 9, "trillion": 12, "bn": 9, "lakh": 5, "lac": 5, "lakhs": 5,
    "crore": 7, "crores": 7, "হাজার": 3, "লাখ": 5, "লক্ষ": 5, "কোটি": 7, "মিলিয়ন": 6, "বিলিয়ন": 9,
    "ট্রিলিয়ন": 12,
}  # fmt: skip
_CURRENCY_SCALES = {"m": 6, "k": 3, "b": 9}
"""`£125m`, `$5k`: one letter means a scale only right after a currency amount (`30m` may be metres)."""
# Capitalised words that are not names: function words that start sentences, titles, and the like.
_NOT_NAMES = frozenset(
    """a an and as at but by for from he her his i if in is it its of on or our she so that the their them then
    there these they this those to we what when where which while who why with you your after before during
    since until also however meanwhile yesterday today tomorrow mr mrs ms dr sir rev st jr sr president prime
    minister secretary chief general senator governor judge officer spokesman spokeswoman chairman director
    professor captain coach king queen prince princess lord lady pope bishop father reverend government state
    department ministry university court police army party news said says according one two three four five
    six seven eight nine ten first second third last next new all some many most more other such both each
    no not only just even still now here am pm gmt utc est edt pst pdt cst cdt bst cet aest ist ap reuters
    afp""".split()  # noqa: SIM905
)

# ----------------------------------------------------------------------------- patterns


def _bn(word: str) -> str:
    """A Bangla word in the spelling `normalize_text` gives (nukta letters composed)."""
    return normalize_text(word)


_BN_LETTER = "\u0980-\u09ff"
_BN_SUFFIX = _bn("(?:েরও|য়ের|য়ে|ের|ে|র|েই|এ|য়|ও|তে)?")
"""Case endings a Bangla month or weekday may carry (`মার্চের`, `সেপ্টেম্বরে`): a short list, since
longer words start with month names (`জুনিয়র`, junior; `মেয়ে`, girl)."""


def _alternation(words: Iterable[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


_NUM = r"\d{1,3}(?:,\d{2,3})+(?!\d)|\d+"
"""Digits, with thousands separators (Western 10,000 and Indian 10,00,000 grouping)."""
_EN_MONTH = rf"(?P<{{g}}>(?:{_alternation(m.capitalize() for m in _MONTHS_EN)})\b\.?)"
_BN_MONTH = rf"(?P<{{g}}>(?:{_alternation(_bn(m) for m in _MONTHS_BN)}){_BN_SUFFIX}(?![{_BN_LETTER}]))"
_DAY = r"(?P<{g}>[0-3]?\d)(?:st|nd|rd|th|ই|লা|শে|তারিখ)?(?: ?- ?(?P<{g}2>[0-3]?\d)(?:st|nd|rd|th)?)?"
"""A day of the month, or a range of days (`22-24 October`)."""

_DROPPED = re.compile(
    r"(?<![\d.])(?:\d{1,2}:\d{2}(?:\s?(?:[ap]\.?m\b\.?|GMT|UTC|BST|EST|EDT|ET|PT))?"
    r"|\d{1,2}(?:\.\d{2})?\s?[ap]\.?m\b\.?|\d{4}\s?(?:GMT|UTC|BST|EST|EDT)"
    r"|(?:1[89]|20)\d0'?s\b)(?!\d)",
    re.I,
)
"""Clock times (`9:35 am`, `8am`, `0335 GMT`) and decades (`the 1980s`): not facts the check compares."""
_DAY_MONTH = re.compile(
    rf"(?<![\d.,]){_DAY.format(g='day')}(?:\s+of)?\s+(?:{_EN_MONTH.format(g='month')}|{_BN_MONTH.format(g='bnmonth')})"
)
_MONTH_DAY = re.compile(
    rf"(?:{_EN_MONTH.format(g='month')}|{_BN_MONTH.format(g='bnmonth')})\s+{_DAY.format(g='day')}(?![\d.,]?\d)"
)
_MONTH = re.compile(rf"{_EN_MONTH.format(g='month')}|{_BN_MONTH.format(g='bnmonth')}")
_WEEKDAY = re.compile(
    r"\b(?P<en>Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)s?\b"
    rf"|(?P<bn>{_alternation(_bn(w) for w in _WEEKDAYS_BN)}){_BN_SUFFIX}(?![{_BN_LETTER}])"
)
_SCORE = re.compile(r"(?<![\d.,:/-])(\d{1,2})(?: ?- ?|:)(\d{1,2})(?![\d:/%]|[.,]\d|-\d|\s?(?:per|%))")
"""`3-1`, `3 - 1` and `3:1`, also before a full stop or a comma (`won 2-1.`), not before a digit after one (`2-1.5`);
a colon with two digits after it (`2:10`) is a clock time, dropped before."""
_CURRENCY_WORD = r"(?:Tk|TK|Rs|BDT|INR|USD)\.?"
"""Currency words written before an amount, with or without a space (`Tk5,000 crore`, `Rs. 500`)."""
_AFTER_CURRENCY_WORD = re.compile(rf"(?<![A-Za-z]){_CURRENCY_WORD}\s?$")
_YEAR = re.compile(r"(?<![\d.,$£€₹৳])(1[89]\d\d|20\d\d)(?![\d%]|[.,]\d|\s?(?:percent|per cent|শতাংশ))")
_NUMBER = re.compile(
    rf"(?<![\w.,])(?P<sign>-(?=\d))?(?P<cur>(?:[$£€¥₹৳]|{_CURRENCY_WORD})\s?)?(?P<num>{_NUM})(?P<frac>\.\d+)?"
    rf"(?:[\s-]?(?P<scale>{_alternation(_bn(w) for w in _SCALES)})(?![A-Za-z])[{_BN_LETTER}]*"
    r"|(?P<curscale>[mkb])\b)?"
)
_NAME_BEFORE = re.compile(r"(?:(?<![A-Za-z])[A-Z][A-Za-z]{0,4}|[\u0900-\u0dff])-$")
"""A short capitalised word or an Indic one, then a hyphen: the number after it is part of a name (`COVID-19`,
`কোভিড-১৯`, `F-16`, `SARS-CoV-2`), not a fact; a long or lower-case word keeps it (`magnitude-6.0`, `mother-of-two`)."""
_FRACTION = re.compile(r"(?<![\d.,])(?:(?P<whole>\d+) ?)?(?P<num>[1-9])\u2044(?P<den>[1-9]\d?)(?![\d.,]?\d)")
"""A vulgar fraction as NFKC writes it, numerator one digit and U+2044 (FRACTION SLASH): `¾` is 3, U+2044, 4;
`2½` is 2, 1, U+2044, 2 (and `2 ½` the same with a space). Read as its value, not as the numbers 21 and 2."""
_EN_SMALL = [
    *("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen"),
    *("fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"),
]
_EN_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_EN_UNITS = ["one", *_EN_SMALL[:8]]
_EN_WORD_VALUES = {w: i + 2 for i, w in enumerate(_EN_SMALL)} | {w: 20 + 10 * i for i, w in enumerate(_EN_TENS)}
_EN_NUMBER_WORD = re.compile(
    rf"\b(?:(?P<tens>{'|'.join(_EN_TENS)})(?:[\s-](?P<unit>{'|'.join(_EN_UNITS)}))?|(?P<small>{'|'.join(_EN_SMALL)}))\b"
    r"(?![\s-](?:thirds?|quarters?|fifths?|halves|tenths?)\b)",
    re.I,
)
"""English number words from two to ninety-nine ("one" is a pronoun too often; "two-thirds" is no 2)."""
_BN_NUMBER_WORDS = {"দুই": 2, "তিন": 3, "চার": 4, "পাঁচ": 5, "ছয়": 6, "সাত": 7, "আট": 8, "দশ": 10, "একশ": 100, "একশো": 100}
"""Bangla number words from two to ten, and a hundred; not `নয়` (nine, but also "is not") nor `এক` (one, also "a")."""
_BN_NUMBER_WORD = re.compile(
    rf"(?<![{_BN_LETTER}])(?P<w>{_alternation(_bn(w) for w in _BN_NUMBER_WORDS)})(?=(?:টি|টা|জন)?'?(?![{_BN_LETTER}]))"
)
_BN_WORD_VALUES = {_bn(w): v for w, v in _BN_NUMBER_WORDS.items()}
_BN_DECIMAL = re.compile(r"(\d+)\s*" + _bn("দশমিক") + r"\s*(\d+)")
_BN_HALF = re.compile(_bn("সাড়ে") + r"\s*(\d+)")
_BN_FRACTIONS = re.compile(rf"(?<![{_BN_LETTER}])(?P<w>{_bn('দেড়')}|{_bn('আড়াই')})(?![{_BN_LETTER}])")
"""One and a half, two and a half: whole words only (`আড়াইহাজার` is Araihazar, a town, not 2,500)."""
_BN_FRACTION_VALUES = {_bn("দেড়"): "1.5", _bn("আড়াই"): "2.5"}
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s+|\n+")
_ABBREVIATION = re.compile(
    r"(?:\b(?:[A-Z]\.)+|\b(?:Mr|Mrs|Ms|Dr|St|Jr|Sr|Gov|Sen|Rep|Gen|Lt|Col|Capt|Co|Corp|Inc|Ltd|No|Md|Rev|Prof|Mt|Ft"
    r"|vs|Jan|Feb|Mar|Apr|Aug|Sept|Sep|Oct|Nov|Dec)\.)$"
)
"""A period that ends an abbreviation (`U.S.`, `Mr.`), not a sentence: the next word is no sentence opener."""
_WORD = re.compile(r"[A-Za-z\u00c0-\u024f][A-Za-z\u00c0-\u024f'\-&.]*")
_BN_MONTH_NAMES = {_bn(k): v for k, v in _MONTHS_BN.items()}
_BN_WEEKDAY_NAMES = {_bn(k): v for k, v in _WEEKDAYS_BN.items()}
_BN_SCALES = {_bn(k): v for k, v in _SCALES.items()}

# ----------------------------------------------------------------------------- the fact set


class Kind(StrEnum):
    """Kinds of fact, each compared on its own. The value is the short key of the JSON form."""

    SCORES = "s"
    NUMBERS = "n"
    DATES = "d"
    YEARS = "y"
    MONTHS = "m"
    WEEKDAYS = "w"
    NAMES = "p"


KIND_LABELS = {
    Kind.SCORES: "scores",
    Kind.NUMBERS: "numbers",
    Kind.DATES: "dates",
    Kind.YEARS: "years",
    Kind.MONTHS: "months",
    Kind.WEEKDAYS: "weekdays",
    Kind.NAMES: "names",
}
CROSS_LANGUAGE_KINDS: frozenset[Kind] = frozenset(Kind) - {Kind.NAMES}
"""Names are Latin-script words: a Bangla text spells them in its own script, so they never meet."""
DEFAULT_KINDS: tuple[Kind, ...] = tuple(k for k in Kind if k is not Kind.NAMES)
"""What the check compares unless told otherwise: not names. On MRPC and STS-B pairs above the
cut-off, disjoint names flag more paraphrases ("Cleveland" against "Ohio", a quote attributed
by name in one and by title in the other) than non-paraphrases (benchmarks/fact_check.py)."""
_WEEKDAY_LABELS = ("", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


class Rule(StrEnum):
    """When two sets of one kind of fact conflict (both sets non-empty)."""

    DISJOINT = "disjoint"
    """They share nothing: 3-1 against 2-0; but `{2019}` against `{2018, 2019}` agrees."""
    EXCLUSIVE = "exclusive"
    """Each has a fact the other lacks: neither is contained in the other."""
    DIFFERENT = "different"
    """They are not equal: a fact one text adds is a conflict too."""


@dataclass(frozen=True, slots=True)
class Facts:
    """The facts one text states, each kind in text order, distinct, at most MAX_PER_KIND.

    Values are canonical strings: numbers as plain decimals (`2800000000`, `4.4`), scores
    as `high-low`, years `2019`, dates `MM-DD`, months `MM`, weekdays `1`-`7`, names lower case.
    """

    numbers: tuple[str, ...] = ()
    scores: tuple[str, ...] = ()
    years: tuple[str, ...] = ()
    dates: tuple[str, ...] = ()
    months: tuple[str, ...] = ()
    weekdays: tuple[str, ...] = ()
    names: tuple[str, ...] = ()

    def of(self, kind: Kind) -> tuple[str, ...]:
        return getattr(self, KIND_LABELS[kind])

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def to_json(self, kinds: Iterable[Kind] = tuple(Kind)) -> dict[str, list[str]]:
        """Compact form for a vector payload or a link record: short keys, empty kinds left out."""
        return {kind.value: list(self.of(kind)) for kind in kinds if self.of(kind)}

    @classmethod
    def from_json(cls, data: Mapping[str, Sequence[str]] | None) -> Facts:
        if not data:
            return cls()
        known = {kind.value: KIND_LABELS[kind] for kind in Kind}
        # A kind this version does not know (written by a later one) is left out, not an error.
        return cls(**{known[key]: tuple(str(v) for v in values) for key, values in data.items() if key in known})


def _first(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))[:MAX_PER_KIND]


def _ascii_digits(text: str) -> str:
    """Digits of every script as ASCII (`২০১৯` is `2019`); `\\d` in `re` matches them all."""
    if text.isascii():
        return text
    return re.sub(r"\d", lambda m: str(unicodedata.decimal(m.group(0), 0)), text)


def _blank(text: str, spans: list[tuple[int, int]]) -> str:
    """The text with the spans already read replaced by spaces (offsets keep their meaning)."""
    chars = list(text)
    for start, end in spans:
        chars[start:end] = " " * (end - start)
    return "".join(chars)


def _month(match: re.Match[str]) -> int:
    en = match.group("month")
    if en:
        return _MONTHS_EN[en.rstrip(".").lower()]
    word = match.group("bnmonth")
    for name, number in _BN_MONTH_NAMES.items():
        if word.startswith(name):
            return number
    raise ValueError(word)


def _not_a_month(match: re.Match[str], text: str) -> bool:
    """Whether a month name is another word: English `May` opening a sentence without a date
    after it ("May be"), or Bangla `মে` (also a common word) with no digit or `মাস` (month) beside it."""
    if match.group("month") == "May":
        before = text[: match.start()].rstrip()
        return (not before or before[-1] in '.!?"\n') and not re.match(r"\s*\d", text[match.end() :])
    word = match.group("bnmonth")
    if not word or _month(match) != 5:
        return False
    around = text[max(0, match.start() - 4) : match.end() + 6]
    return not (re.search(r"\d", around) or _bn("মাস") in around)


def _number_value(match: re.Match[str]) -> str | None:
    digits = match.group("num").replace(",", "") + (match.group("frac") or "")
    try:
        value = Decimal(digits)
    except InvalidOperation:
        return None
    scale = match.group("scale")
    if scale:
        value = value.scaleb(_SCALES.get(scale.lower()) or _BN_SCALES.get(scale, 0))
    elif match.group("curscale") and match.group("cur"):
        value = value.scaleb(_CURRENCY_SCALES[match.group("curscale")])
    if match.group("sign") and value:
        value = -value  # `-5 degrees` is not `5 degrees`; `-0` is 0
    return format_number(value)


def _fraction_value(match: re.Match[str]) -> str:
    """`2½` (after NFKC) as `2.5`, read then as one number; thirds to three places (0.333)."""
    value = Decimal(match.group("whole") or 0) + Decimal(int(match.group("num"))) / int(match.group("den"))
    return format_number(value.quantize(Decimal("0.001")))


def format_number(value: Decimal) -> str:
    """A plain decimal without exponent or trailing zeros: `2.8e9` is `2800000000`, `4.50` is `4.5`."""
    text = f"{value.normalize():f}"
    return text


def _sentences(text: str) -> Iterator[str]:
    start = 0
    for end in _SENTENCE_END.finditer(text):
        if end.group(0)[0] == "." and _ABBREVIATION.search(text[max(start, end.start() - 12) : end.start() + 1]):
            continue
        yield text[start : end.start() + 1]
        start = end.end()
    yield text[start:]


def _names(text: str) -> list[str]:
    """Capitalised Latin-script words that are not sentence-initial function words, titles or dates."""
    out: list[str] = []
    for sentence in _sentences(text):
        words = list(_WORD.finditer(sentence))
        if len(words) >= 4 and not any(w.group(0).islower() and len(w.group(0)) >= 4 for w in words):
            continue  # a headline in title case (no lower-case word but "of", "and", ...): names or not
        for i, match in enumerate(words):
            word = match.group(0).rstrip(".-'&")
            if word.endswith("'s"):
                word = word[:-2]
            word = word.replace(".", "")  # U.S. is US
            if not word or not word[0].isupper():
                continue
            low = word.lower()
            if low in _NOT_NAMES or low in _MONTHS_EN or low.rstrip("s") in _WEEKDAYS_EN:
                continue
            acronym = len(word) > 1 and word.replace(".", "").isupper()
            if i == 0 and not acronym:
                # A sentence's first word is capitalised whatever it is: a name only when a
                # capitalised word follows it directly ("Gyorgy Heizler said").
                nxt = words[1].group(0) if len(words) > 1 else ""
                if not (nxt[:1].isupper() and words[1].start() - match.end() <= 1):
                    continue
            out.append(low)
    return out


def _en_number_word(match: re.Match[str]) -> str:
    if match.group("small"):
        return str(_EN_WORD_VALUES[match.group("small").lower()])
    unit = match.group("unit")
    return str(_EN_WORD_VALUES[match.group("tens").lower()] + (_EN_UNITS.index(unit.lower()) + 1 if unit else 0))


def extract_facts(text: str, number_words: bool = True) -> Facts:
    """The facts `text` states (any language; Bangla and English read in full).

    `number_words` also reads "six million", "Sixty-one" and Bangla `আট লাখ` as numbers.
    """
    # Line by line: normalize_text collapses the newline that ends a headline (`document_text`).
    text = _ascii_digits("\n".join(normalize_text(line) for line in text[:MAX_TEXT_CHARS].splitlines()))
    names = _names(text)
    if "\u2044" in text:
        text = _FRACTION.sub(_fraction_value, text)
    bangla = any("\u0980" <= ch <= "\u09ff" for ch in text)
    if bangla:
        text = _BN_DECIMAL.sub(r"\1.\2", text)
        text = _BN_HALF.sub(r"\1.5", text)
        text = _BN_FRACTIONS.sub(lambda m: _BN_FRACTION_VALUES[m.group("w")], text)
    if number_words:
        text = _EN_NUMBER_WORD.sub(_en_number_word, text)
        if bangla:
            text = _BN_NUMBER_WORD.sub(lambda m: str(_BN_WORD_VALUES[m.group("w")]), text)
    spans: list[tuple[int, int]] = [m.span() for m in _DROPPED.finditer(text)]
    work = _blank(text, spans)

    dates: list[tuple[int, str]] = []
    months: list[tuple[int, str]] = []
    for pattern in (_DAY_MONTH, _MONTH_DAY):
        for m in pattern.finditer(work):
            days = [int(d) for d in (m.group("day"), m.group("day2")) if d]
            if all(1 <= day <= 31 for day in days):
                month = _month(m)
                dates.extend((m.start(), f"{month:02d}-{day:02d}") for day in days)
                months.append((m.start(), f"{month:02d}"))
                spans.append(m.span())
        work = _blank(text, spans)
    for m in _MONTH.finditer(work):
        if _not_a_month(m, work):
            continue
        months.append((m.start(), f"{_month(m):02d}"))
        spans.append(m.span())
    work = _blank(text, spans)

    weekdays: list[tuple[int, str]] = []
    for m in _WEEKDAY.finditer(work):
        number = _WEEKDAYS_EN[m.group("en").lower()] if m.group("en") else _BN_WEEKDAY_NAMES[m.group("bn")]
        weekdays.append((m.start(), str(number)))

    scores: list[tuple[int, str]] = []
    for m in _SCORE.finditer(work):
        a, b = int(m.group(1)), int(m.group(2))
        scores.append((m.start(), f"{max(a, b)}-{min(a, b)}"))
        spans.append(m.span())
    work = _blank(text, spans)

    years: list[tuple[int, str]] = []
    for m in _YEAR.finditer(work):
        if _AFTER_CURRENCY_WORD.search(work, max(0, m.start() - 5), m.start()):
            continue  # `Rs2000` is an amount, read below
        years.append((m.start(), m.group(1)))
        spans.append(m.span())
    work = _blank(text, spans)

    numbers: list[tuple[int, str]] = []
    for m in _NUMBER.finditer(work):
        if _NAME_BEFORE.search(work, max(0, m.start() - 7), m.start()):
            continue
        value = _number_value(m)
        if value is not None:
            numbers.append((m.start(), value))

    def ordered(found: list[tuple[int, str]]) -> tuple[str, ...]:
        return _first(value for _, value in sorted(found, key=lambda item: item[0]))

    return Facts(
        numbers=ordered(numbers),
        scores=ordered(scores),
        years=ordered(years),
        dates=ordered(dates),
        months=ordered(months),
        weekdays=ordered(weekdays),
        names=_first(names),
    )


@lru_cache(maxsize=512)
def text_facts(text: str) -> Facts:
    """`extract_facts` remembered for the last texts: the cascade reads a document's facts to compare
    it, and again for its vector's payload and its link record when it becomes a canonical."""
    return extract_facts(text)


def payload_facts(text: str) -> dict[str, list[str]] | None:
    """What a canonical's vector carries for the fact check of later documents (and its link record, so
    replay restores it): the kinds the check compares, in the compact form; None when it states none."""
    return text_facts(text).to_json(DEFAULT_KINDS) or None


# ----------------------------------------------------------------------------- comparing


def _numbers_equal(a: str, b: str, tolerance: float) -> bool:
    if a == b:
        return True
    if tolerance <= 0:
        return False
    x, y = float(a), float(b)
    return abs(x - y) <= tolerance * max(abs(x), abs(y))


def _shared(a: Sequence[str], b: Sequence[str], kind: Kind, tolerance: float) -> tuple[int, int]:
    """How many of `a` have a match in `b`, and how many of `b` have one in `a`."""
    if kind is Kind.NUMBERS and tolerance > 0:
        in_b = sum(any(_numbers_equal(x, y, tolerance) for y in b) for x in a)
        in_a = sum(any(_numbers_equal(x, y, tolerance) for x in a) for y in b)
        return in_b, in_a
    common = set(a) & set(b)
    return sum(x in common for x in a), sum(y in common for y in b)


def conflicts(a: Sequence[str], b: Sequence[str], rule: Rule, kind: Kind, tolerance: float = 0.0) -> bool:
    """Whether two sets of one kind of fact conflict under `rule` (never when either is empty)."""
    if not a or not b:
        return False
    in_b, in_a = _shared(a, b, kind, tolerance)
    if rule is Rule.DISJOINT:
        return in_b == 0
    if rule is Rule.EXCLUSIVE:
        return in_b < len(a) and in_a < len(b)
    return in_b < len(a) or in_a < len(b)


def _show(kind: Kind, values: Sequence[str]) -> str:
    if kind is Kind.WEEKDAYS:
        values = [_WEEKDAY_LABELS[int(v)] for v in values]
    shown = ", ".join(values[:6])
    return shown + (", ..." if len(values) > 6 else "")


def disagreement(
    a: Facts,
    b: Facts,
    *,
    same_language: bool = True,
    rule: Rule = Rule.DISJOINT,
    kinds: Iterable[Kind] = DEFAULT_KINDS,
    tolerance: float = 0.0,
) -> str | None:
    """Why two texts cannot report the same story, or None when their facts do not conflict.

    The reason names each kind that conflicts with both sides' facts, e.g.
    `"scores 3-1 vs 2-0; weekdays Saturday vs Wednesday"`. Names are compared only
    when `same_language` (see the module docstring); `tolerance` is the relative
    difference two numbers may have and still agree (0: they must be equal).
    """
    reasons = []
    for kind in kinds:
        if kind not in CROSS_LANGUAGE_KINDS and not same_language:
            continue
        x, y = a.of(kind), b.of(kind)
        if conflicts(x, y, rule, kind, tolerance):
            reasons.append(f"{KIND_LABELS[kind]} {_show(kind, x)} vs {_show(kind, y)}")
    return "; ".join(reasons) or None

"""The figures a text states, packed in 64 bits: what stage 3 compares before it links.

Two reports written from one template (yesterday's market close and today's, two
games of one league, two days' exchange rates) are near-identical text: SimHash puts
them a few bits apart, and only their figures tell them apart. `facts.py` reads what a
text states in full (dates, amounts, number words in two languages) for the semantic
stage, at about two milliseconds a text; stage 3 has a hundred microseconds for all of
its work, and its pairs are copies of one text in one language, where a figure is
written the same way in both. So this reads only the figures as written, in one
compiled pass over the normalised UTF-8 that SimHash reads too, and keeps a digest
small enough to sit beside every canonical's fingerprint in the state:

- a figure is a run of decimal digits of any script (Bangla `২০২৬` is 2026), with a `.`
  or `,` between two digits kept inside it (`6,234`, `12.5`; a comma is read as a
  thousands separator, so `10,00,000` is `1000000`), and a minus sign before it where
  the hyphen follows no letter or digit (`-5`, never the `19` of `COVID-19`);
- a clock time (`9:35`) is no figure: a re-crawl of a live page moves its timestamp;
- a score is two figures of one or two digits joined by a hyphen (`3-1`, `3 - 1`) or a
  colon (`3:1`; `2:10` is a clock time), read as facts.py reads it (the higher first; no score
  in a date: `2025-12-06`, `06-12-2025`);
- a year is a figure of four digits from 1900 to 2099;
- years, scores and the other figures are kept apart: a template restates the year, and
  a match report's small figures (a minute, a position) may meet the other game's score.

Only the first `MAX_CHARS` characters are read (the headline and the lead, where a report
states its result; facts.py reads twice as many, and on the pairs of benchmarks/figure_check.py
2,000 kept apart one report more in each language than 4,000, at a quarter less time), and of
them the first two distinct years
(exact, 8 bits each), the first two distinct scores (9-bit hashes) and the first three
distinct other figures (10-bit hashes): 64 bits. Two digests conflict when a kind is stated
in both and the two share none of it (`facts.Rule.DISJOINT`, the semantic stage's rule), or
share some while each states two the other does not (`AT_ODDS`): an appended update or a fixed
typo keeps the figures of the lead, a template filled in again changes them all but those it
repeats every time (`in 24 hours`, `till 8am`). A digest of 0 states nothing and conflicts with nothing, and so does a
canonical recorded without one (before this check, or by a version that did not write it).
Two different figures share a hash with odds of 1 in 1,023 a pair (scores 1 in 511), so two
templated reports with three other figures each and nothing else are still taken for one
text about once in a hundred.
"""

from __future__ import annotations

import unicodedata

import numpy as np
from numba import njit

from streams.features.utf8 import decode

MAX_CHARS = 2000
"""Characters read from the start of a text."""
YEAR_SLOTS = 2
SCORE_SLOTS = 2
NUMBER_SLOTS = 3
AT_ODDS = 2
"""Figures of a kind that each text states and the other does not, beside some they share, that make two texts
conflict: a template's fixed figure (`in 24 hours`) beside others that all changed is another report, one figure
corrected is the same (with 2 or 3 slots a kind, this takes effect only for three figures each)."""
_YEAR_BITS = 8
_SCORE_BITS = 9
_NUMBER_BITS = 10
_FIRST_YEAR = 1900
_LAST_YEAR = 2099
_SCORE_AT = YEAR_SLOTS * _YEAR_BITS
_NUMBERS_AT = _SCORE_AT + SCORE_SLOTS * _SCORE_BITS
HEX_DIGITS = 16
"""A digest as a link record writes it: 64 bits, as hex digits."""

_PLANES = 0x20000
"""Codepoints the digit table covers: the BMP and the Supplementary Multilingual Plane, where Unicode's other
decimal digits are (Chakma's, a script of Bangladesh, Adlam's, Brahmi's...); none lies beyond it."""
_DIGITS = np.full(_PLANES, -1, dtype=np.int8)
for _cp in range(_PLANES):
    if (_value := unicodedata.decimal(chr(_cp), None)) is not None:
        _DIGITS[_cp] = _value
del _cp, _value
"""Each codepoint's decimal digit value (any script), or -1."""

_STOPS = np.zeros(256, dtype=np.bool_)
_STOPS[0x30:0x3A] = True
_STOPS[0x80:] = True
"""The bytes the scan stops at: an ASCII digit, or any byte of a character past ASCII (which may be a digit)."""

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_POINT = 10
_MINUS = 11
"""Symbols a figure's hash reads besides its digits."""
_SPACE, _HYPHEN, _COLON, _DOT, _COMMA, _PERCENT, _SLASH = 0x20, 0x2D, 0x3A, 0x2E, 0x2C, 0x25, 0x2F


@njit(cache=True)
def _digit_at(buffer: np.ndarray, i: int, end: int, digits: np.ndarray) -> tuple[int, int]:
    """The digit value of the codepoint at byte `i` (-1 if none, or at `end`) and its width in bytes."""
    if i >= end:
        return -1, 0
    cp, width = decode(buffer, i)
    return (np.int64(digits[cp]) if cp < digits.shape[0] else -1), width


@njit(cache=True)
def _cut(buffer: np.ndarray, start: int, end: int, max_chars: int) -> int:
    """Where the first `max_chars` characters of `buffer[start:end]` end (a character is one byte to four)."""
    if end - start <= max_chars:
        return end
    seen = np.uint8(0)
    for j in range(start, start + max_chars):  # (branch-free: compiled to vector instructions)
        seen |= buffer[j]
    if seen < 0x80:  # ASCII: a character a byte
        return start + max_chars
    chars = 0
    for j in range(start, end):
        if buffer[j] & 0xC0 != 0x80:  # the first byte of a character
            if chars == max_chars:
                return j
            chars += 1
    return end


@njit(cache=True)
def _score_second(buffer: np.ndarray, i: int, end: int, digits: np.ndarray) -> tuple[int, int]:
    """The second figure of a score at byte `i`, as facts.py reads one: one or two digits followed by no digit,
    ':', '/', '%' (nor ' %'), no '.' or ',' and digit (`2-1.5`; `won 2-1.` is a score) and no '-' and digit (the
    `12-2025` of a date); its value and the byte after it, or (-1, i)."""
    value, width = _digit_at(buffer, i, end, digits)
    if value < 0:
        return -1, i
    j = i + width
    second, width = _digit_at(buffer, j, end, digits)
    if second >= 0:
        value = value * 10 + second
        j += width
    if _digit_at(buffer, j, end, digits)[0] >= 0:
        return -1, i
    if j < end:
        after = buffer[j]
        if after in (_COLON, _SLASH, _PERCENT):
            return -1, i
        if after in (_DOT, _COMMA, _HYPHEN) and _digit_at(buffer, j + 1, end, digits)[0] >= 0:
            return -1, i
        if after == _SPACE and j + 1 < end and buffer[j + 1] == _PERCENT:
            return -1, i
    return value, j


@njit(cache=True)
def _add(slots: np.ndarray, filled: int, value: int) -> int:
    """`value` put in the first free slot unless there already, or no slot is free; how many are filled."""
    for k in range(filled):
        if slots[k] == value:
            return filled
    if filled < slots.shape[0]:
        slots[filled] = value
        return filled + 1
    return filled


@njit(cache=True)
def _digest(
    buffer: np.ndarray, start: int, end: int, digits: np.ndarray, stops: np.ndarray, max_chars: int
) -> np.uint64:
    """One text's digest (see the module's text), read from its first `max_chars` characters in `buffer[start:end]`."""
    end = _cut(buffer, start, end, max_chars)  # nothing past it is read, look-aheads included
    years = np.zeros(YEAR_SLOTS, dtype=np.int64)
    scores = np.zeros(SCORE_SLOTS, dtype=np.int64)
    numbers = np.zeros(NUMBER_SLOTS, dtype=np.int64)
    n_years = n_scores = n_numbers = 0
    i = start
    while i < end and (n_years < YEAR_SLOTS or n_scores < SCORE_SLOTS or n_numbers < NUMBER_SLOTS):
        while i < end and not stops[buffer[i]]:  # the fast path: ASCII that is no digit, most of a text
            i += 1
        if i >= end:
            break
        b = np.int64(buffer[i])
        if b < 0x80:
            value, width = b - 0x30, 1
        else:
            cp, width = decode(buffer, i)
            value = np.int64(digits[cp]) if cp < digits.shape[0] else -1
            if value < 0:
                i += width
                continue
        # What stands before the figure: a minus sign where the hyphen follows no letter or digit (`-5`; not
        # `COVID-19`, `3-1`; anything above ASCII counts as a letter, since the hyphen only matters right after a
        # word), and whether it may begin a score (facts.py: not after a digit, '.', ',', ':', '/' or '-').
        previous = np.int64(buffer[i - 1]) if i > start else _SPACE
        before = np.int64(buffer[i - 2]) if i - 1 > start else _SPACE
        negative = previous == _HYPHEN and not (
            before >= 0x80 or 0x30 <= before <= 0x39 or 0x41 <= before <= 0x5A or 0x61 <= before <= 0x7A
        )
        may_score = previous not in (_HYPHEN, _DOT, _COMMA, _COLON, _SLASH)
        h = (_FNV_OFFSET ^ np.uint64(_MINUS)) * _FNV_PRIME if negative else _FNV_OFFSET
        count = number = 0
        separated = False
        while True:  # the figure: digits, and a '.' or ',' between two of them
            if value >= 0:
                h = (h ^ np.uint64(value)) * _FNV_PRIME
                number = number * 10 + value if count < 6 else number
                count += 1
                i += width
            elif (
                i < end and (buffer[i] == _DOT or buffer[i] == _COMMA) and _digit_at(buffer, i + 1, end, digits)[0] >= 0
            ):
                if buffer[i] == _DOT:  # a comma separates thousands: `6,234` is `6234`
                    h = (h ^ np.uint64(_POINT)) * _FNV_PRIME
                separated = True
                i += 1
            else:
                break
            value, width = _digit_at(buffer, i, end, digits)
        short = not separated and count <= 2
        if short and i < end and buffer[i] == _COLON:  # a clock time: `9:35`, not `3:1` nor `2:345`
            minutes, w1 = _digit_at(buffer, i + 1, end, digits)
            ones, w2 = _digit_at(buffer, i + 1 + w1, end, digits)
            if minutes >= 0 and ones >= 0 and _digit_at(buffer, i + 1 + w1 + w2, end, digits)[0] < 0:
                i += 1 + w1 + w2
                continue
        if short and may_score:  # a score: `3-1`, `3 - 1`, `3:1`
            j = i
            if j + 1 < end and buffer[j] == _SPACE and buffer[j + 1] == _HYPHEN:
                j += 2
                j += 1 if j < end and buffer[j] == _SPACE else 0
            elif j < end and buffer[j] == _HYPHEN:
                j += 1
                j += 1 if j < end and buffer[j] == _SPACE else 0
            elif j < end and buffer[j] == _COLON:
                j += 1
            other, after = _score_second(buffer, j, end, digits) if j > i else (-1, i)
            if other >= 0:
                h = _FNV_OFFSET
                for symbol in (max(number, other), min(number, other)):
                    h = (h ^ np.uint64(symbol)) * _FNV_PRIME
                n_scores = _add(scores, n_scores, np.int64(h % np.uint64((1 << _SCORE_BITS) - 1)) + 1)
                i = after
                continue
        if not separated and not negative and count == 4 and _FIRST_YEAR <= number <= _LAST_YEAR:
            n_years = _add(years, n_years, number - _FIRST_YEAR + 1)
        else:
            n_numbers = _add(numbers, n_numbers, np.int64(h % np.uint64((1 << _NUMBER_BITS) - 1)) + 1)
    packed = np.uint64(0)
    for k in range(YEAR_SLOTS):
        packed |= np.uint64(years[k]) << np.uint64(k * _YEAR_BITS)
    for k in range(SCORE_SLOTS):
        packed |= np.uint64(scores[k]) << np.uint64(_SCORE_AT + k * _SCORE_BITS)
    for k in range(NUMBER_SLOTS):
        packed |= np.uint64(numbers[k]) << np.uint64(_NUMBERS_AT + k * _NUMBER_BITS)
    return packed


@njit(cache=True)
def _digests(
    buffer: np.ndarray, spans: np.ndarray, digits: np.ndarray, stops: np.ndarray, max_chars: int
) -> np.ndarray:
    out = np.zeros(spans.shape[0], dtype=np.uint64)
    for d in range(spans.shape[0]):
        out[d] = _digest(buffer, spans[d, 0], spans[d, 1], digits, stops, max_chars)
    return out


def figures_batch(buffer: np.ndarray, spans: np.ndarray) -> list[int]:
    """The digest of each normalised text in `buffer` (UTF-8) at `spans`, as `text_figures` gives it."""
    if len(spans) == 0:
        return []
    return _digests(buffer, np.ascontiguousarray(spans, dtype=np.int64), _DIGITS, _STOPS, MAX_CHARS).tolist()


def text_figures(text: str) -> int:
    """The digest of the figures a normalised text states (0: none)."""
    encoded = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    return figures_batch(encoded, np.array([[0, len(encoded)]], dtype=np.int64))[0]


def _slots(digest: int, at: int, bits: int, count: int) -> set[int]:
    mask = (1 << bits) - 1
    return {value for k in range(count) if (value := (digest >> (at + k * bits)) & mask)}


def _years(slots: set[int]) -> str:
    return ", ".join(str(year + _FIRST_YEAR - 1) for year in sorted(slots))


def figures_conflict(a: int, b: int) -> str | None:
    """How two digests conflict (each kind of figure both state and share none of, or share some of while each
    states `AT_ODDS` the other does not), or None: e.g. `"years 2026 vs 2025; scores: none of the first 2 in
    common"`, `"other figures: only 1 of the first 3 in common"` (scores and other figures are kept as hashes)."""
    reasons = []
    for kind, at, bits, count in (
        ("years", 0, _YEAR_BITS, YEAR_SLOTS),
        ("scores", _SCORE_AT, _SCORE_BITS, SCORE_SLOTS),
        ("other figures", _NUMBERS_AT, _NUMBER_BITS, NUMBER_SLOTS),
    ):
        x, y = _slots(a, at, bits, count), _slots(b, at, bits, count)
        shared = len(x & y)
        if not x or not y or (shared and (len(x) - shared < AT_ODDS or len(y) - shared < AT_ODDS)):
            continue
        if kind == "years":
            reasons.append(f"years {_years(x)} vs {_years(y)}")
        else:
            reasons.append(
                f"{kind}: {'none' if not shared else f'only {shared}'} of the first {max(len(x), len(y))} in common"
            )
    return "; ".join(reasons) or None


def figures_hex(digest: int) -> str:
    """A digest as a link record writes it: sixteen hex digits, as the simhash."""
    return f"{digest:0{HEX_DIGITS}x}"


def figures_from_hex(value: object) -> int:
    """A link record's `figures` back to a digest; ValueError when it is not sixteen hex digits."""
    if not isinstance(value, str) or len(value) != HEX_DIGITS or not all(c in "0123456789abcdef" for c in value):
        raise ValueError(f"figures must be {HEX_DIGITS} lower-case hex digits, got {value!r}")
    return int(value, 16)

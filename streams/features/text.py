"""Content normalisation for the `content` stage and for fingerprinting.

Syndicated copies differ in invisible ways: curly against straight quotes, en
dashes against hyphens, runs of whitespace, and (for Bangla) different
codepoint sequences for the same letter. NFKC folds the compatibility forms;
Bangla nukta letters (U+09DC, U+09DD, U+09DF) are composition exclusions, so
NFKC *decomposes* them, and we recompose them to keep one spelling per letter
whichever form the publisher used, as we do for the vowel letters that Unicode's
Bengali table says never to write in two parts (`অা` is `আ`, as Tatoeba has it
typed). In Bangla and the other Brahmic scripts of India and Sri Lanka
(U+0900-U+0DFF) the zero-width joiner and non-joiner only choose a glyph
(`র‍্য` with a ZWJ is the ya-phala form of `র্য`, a ZWNJ shows the
hasanta of `ক্‌ষ`), never the letters, so there they are dropped; elsewhere they
stay, since in emoji sequences and Persian they change what a reader sees. The
exception is a consonant, virama and ZWJ that older text (Unicode before 4.1 and 5.1,
and legacy converters) wrote for a letter of its own: Bangla khanda ta (`ত্‍` is `ৎ`, as
in `উৎসব`) and the Malayalam chillus (`ന്‍` is `ൻ`, the final n of `അവൻ`, "he"; without
the ZWJ, `അവന്` is "to him"). Such a sequence is written as its letter, and no joiner
is left to drop.
NFKC also puts superscripts on the line, which changes a number (`10⁶` would read
`106`, `10⁻³` `10-3`), so a run of them is written after a caret first, as plain text
writes an exponent (`10^6`, `x^2`); subscripts fold (`H₂O` is `H2O`).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from streams.features.utf8 import decode, encode

_CANONICAL_FORMS = {
    **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\u00b4\u0060\u2039\u203a", "'"),
    **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb", '"'),
    **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d", "-"),
    **dict.fromkeys("\u00ad\u200b\u2060\ufeff", ""),
}
# A character class and a lookup per match: str.translate with a dict leaves its
# fast path on non-ASCII text and costs ten times as much.
_NON_CANONICAL = re.compile("[" + "".join(_CANONICAL_FORMS) + "]")
# NFKC leaves these Bangla letters decomposed (they are composition exclusions), and the
# vowel letters are not decomposable at all; map them back so "য়" and "আ" are one codepoint
# however they arrived.
_BANGLA_RECOMPOSE = {
    "\u09a1\u09bc": "\u09dc",
    "\u09a2\u09bc": "\u09dd",
    "\u09af\u09bc": "\u09df",
    "\u0985\u09be": "\u0986",  # and the vowel letters Unicode's Bengali table says to write as one (আ, not অা)
    "\u098b\u09c3": "\u09e0",
    "\u098c\u09e2": "\u09e1",
}
_BANGLA_RE = re.compile("|".join(_BANGLA_RECOMPOSE))
_BEFORE_NFKC = {
    char: form
    for char, form in _CANONICAL_FORMS.items()
    if _CANONICAL_FORMS.get(folded := unicodedata.normalize("NFKC", char), folded) != form
}
"""Forms NFKC would fold out of reach first (the acute accent U+00B4 to a space and a combining acute, the
double prime to two primes), so they are mapped before it: `I\u00b4m`, as wire copy types it, is `I'm`."""
_BEFORE_NFKC_RE = re.compile("[" + "".join(_BEFORE_NFKC) + "]")
_SUPERSCRIPTS = re.compile("[\u00b2\u00b3\u00b9\u2070\u2074-\u207e]+")
"""Superscript digits, signs and brackets, which NFKC puts on the line (not the letters: `2ⁿᵈ` is `2nd`)."""
_DEAD_CONSONANTS = {
    "\u09a4\u09cd\u200d": "\u09ce",  # Bangla khanda ta (Unicode 4.1)
    "\u0d15\u0d4d\u200d": "\u0d7f",  # Malayalam chillu k, then nn, n, rr, l, ll (Unicode 5.1)
    "\u0d23\u0d4d\u200d": "\u0d7a",
    "\u0d28\u0d4d\u200d": "\u0d7b",
    "\u0d30\u0d4d\u200d": "\u0d7c",
    "\u0d32\u0d4d\u200d": "\u0d7d",
    "\u0d33\u0d4d\u200d": "\u0d7e",
}
"""Consonant, virama and ZWJ as older text spelled a letter of its own, and that letter; `_normalize_part`
holds the same table."""
_DEAD_RE = re.compile("|".join(_DEAD_CONSONANTS))
_JOINERS = re.compile("[\u200c\u200d]+")
"""A whole run of joiners, matched once: a lookahead after the run would rescan it from every start (quadratic)."""


def _canonical_form(match: re.Match[str]) -> str:
    return _CANONICAL_FORMS[match.group(0)]


def _indic_joiners(match: re.Match[str]) -> str:
    """The run dropped when a character of the Indic blocks (U+0900-U+0DFF) stands right before or after it."""
    text, start, end = match.string, match.start(), match.end()
    indic = (start > 0 and "\u0900" <= text[start - 1] <= "\u0dff") or (
        end < len(text) and "\u0900" <= text[end] <= "\u0dff"
    )
    return "" if indic else match.group(0)


def _nfkc(text: str) -> str:
    """NFKC, with `_BEFORE_NFKC` mapped and each run of superscripts after a caret first: on the line they
    would be another number."""
    text = _BEFORE_NFKC_RE.sub(lambda m: _BEFORE_NFKC[m.group(0)], text)
    return unicodedata.normalize("NFKC", _SUPERSCRIPTS.sub(lambda m: "^" + m.group(0), text))


def normalize_text(text: str) -> str:
    """NFKC, canonical quotes and dashes, Bangla nukta letters and ZWJ-spelled letters composed, Indic joiners
    dropped, whitespace collapsed."""
    if text.isascii():  # NFKC is the identity on ASCII; only the backtick needs mapping
        return " ".join(text.replace("`", "'").split())
    if not unicodedata.is_normalized("NFKC", text):  # a quick check, much cheaper than normalising
        text = _nfkc(text)
    text = _NON_CANONICAL.sub(_canonical_form, text)
    if any(pair in text for pair in _BANGLA_RECOMPOSE):
        text = _BANGLA_RE.sub(lambda m: _BANGLA_RECOMPOSE[m.group(0)], text)
    if "\u200d" in text:
        text = _DEAD_RE.sub(lambda m: _DEAD_CONSONANTS[m.group(0)], text)
    if "\u200c" in text or "\u200d" in text:
        text = _JOINERS.sub(_indic_joiners, text)
    return " ".join(text.split())


def document_text(title: str | None, body: str) -> str:
    """The text every content stage looks at: normalised headline, a newline, normalised body."""
    head = normalize_text(title or "")
    rest = normalize_text(body)
    return f"{head}\n{rest}" if head else rest


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------
# The batched path: one compiled pass over a chunk of documents gives exactly `document_text`.
#
# Per part (headline, body) Python keeps only what needs Unicode tables: the ASCII test and NFKC
# (`_pre_nfkc`). Everything after NFKC runs in one Numba call over the UTF-8 bytes of the whole
# chunk: canonical quotes and dashes, Bangla nukta recomposition, Indic joiners, whitespace
# collapse, and headline + newline + body. Its output is the UTF-8 of every document's text, so
# the content hash reads it as it is, and the SimHash kernel lowercases and shingles it in place.

WHITESPACE = (
    *(0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0x85, 0xA0, 0x1680),
    *range(0x2000, 0x200B),
    *(0x2028, 0x2029, 0x202F, 0x205F, 0x3000),
)
"""What `str.split()` splits on (`str.isspace`), as codepoints; tests/test_batched_features.py checks it."""
_WHITESPACE_TABLE = np.zeros(0x3001, dtype=np.bool_)
_WHITESPACE_TABLE[list(WHITESPACE)] = True
_MAP_FROM = np.array(sorted(ord(k) for k in _CANONICAL_FORMS), dtype=np.int64)
_MAP_TO = np.array([ord(_CANONICAL_FORMS[chr(c)]) if _CANONICAL_FORMS[chr(c)] else -1 for c in _MAP_FROM], np.int64)
_NUKTA = 0x09BC
_ZWNJ, _ZWJ = 0x200C, 0x200D
_ASCII_TABLE = np.array(
    [(0x80 | 0x20) if c in WHITESPACE else 0x27 if c == 0x60 else c for c in range(128)], dtype=np.uint8
)
"""For `_normalize_ascii`: what each ASCII byte is written as, with the high bit set on whitespace."""


@njit(cache=True)
def _canonical(cp: int, map_from: np.ndarray, map_to: np.ndarray) -> int:
    """`_CANONICAL_FORMS` of a codepoint that may have an entry: itself, its replacement, or -1 (deleted)."""
    lo, hi = 0, len(map_from)
    while lo < hi:
        mid = (lo + hi) >> 1
        if map_from[mid] < cp:
            lo = mid + 1
        else:
            hi = mid
    if lo < len(map_from) and map_from[lo] == cp:
        return map_to[lo]
    return cp


# The kernels below are written flat (UTF-8 decoding, tests and ASCII output inline): with
# Numba 0.68 a helper that returns a tuple, or one marked inline="always", costs tens of
# nanoseconds a character here, more than all the rest of the work.


@njit(cache=True)
def _normalize_part(
    src: np.ndarray, start: int, end: int, out: np.ndarray, pos: int, spaces: np.ndarray, mf: np.ndarray, mt: np.ndarray
) -> int:
    """`normalize_text` after NFKC, in one pass: writes the part at `pos`, returns where it ends.

    The steps `normalize_text` runs one after the other are applied to one stream: a deleted
    character is gone before recomposition and joiners look at its neighbours, a pending
    space stands between its neighbours for both, and a dropped joiner run keeps its
    neighbours apart for recomposition (they were not adjacent when it ran).
    """
    first = pos
    n_spaces = len(spaces)
    prev = -1  # last codepoint written (-1: none)
    prev_at = -1  # where it was written
    pending_space = False
    run_at = -1  # where the joiner run being read was written (-1: not in a run)
    run_after = -1  # codepoint before the run
    after_drop = False
    dead = -1  # the letter that the virama just written spells with a ZWJ (-1: none)
    dead_at = -1  # where its consonant was written
    i = start
    while i < end:
        b = np.int64(src[i])
        if run_at < 0 and 0x20 <= b <= 0x7E and b != 0x60:  # most of any text: what the steps below do to it
            i += 1
            if b == 0x20:
                pending_space = True
                continue
            if pending_space and pos > first:
                out[pos] = 0x20
                pos += 1
            pending_space = False
            after_drop = False
            out[pos] = b
            pos += 1
            while i < end:  # the rest of an ASCII word: copied as it is
                b = np.int64(src[i])
                if b < 0x21 or b > 0x7E or b == 0x60:
                    break
                out[pos] = b
                pos += 1
                i += 1
            prev_at = pos - 1
            prev = np.int64(out[prev_at])
            continue
        cp, width = decode(src, i)
        i += width
        if cp == 0x60:
            cp = 0x27
        elif 0xAB <= cp <= 0xBB or cp >= 0x200B:  # ASCII and the Indic blocks have no entry
            cp = _canonical(cp, mf, mt)
            if cp < 0:
                continue
        if cp == 0x200D and run_at < 0 and dead >= 0 and (prev == 0x0D4D or prev == 0x09CD) and not pending_space:
            encode(dead, out, dead_at)  # three bytes over six: consonant, virama and ZWJ are one letter
            pos = dead_at + 3
            prev, prev_at, dead = dead, dead_at, -1
            continue
        if cp == 0x200C or cp == 0x200D:  # ZWNJ, ZWJ
            if run_at < 0:
                run_at = pos
                run_after = -1 if pending_space else prev
                if pending_space and pos > first:
                    out[pos] = 0x20
                    pos += 1
            pos = encode(cp, out, pos)
            continue
        space = cp < n_spaces and spaces[cp]
        if run_at >= 0:  # a run of joiners ends here: dropped next to an Indic letter
            if (0x0900 <= run_after <= 0x0DFF) or (not space and 0x0900 <= cp <= 0x0DFF):
                pos = run_at
                after_drop = True
            else:
                pending_space = False
                prev = 0x200D
                after_drop = False
            run_at = -1
        if space:
            pending_space = True
            continue
        if 0x09BC <= cp <= 0x09E2 and not pending_space and not after_drop and prev_at >= 0:  # `_BANGLA_RECOMPOSE`
            composed = -1
            if cp == 0x09BC:  # nukta
                if prev == 0x09A1:
                    composed = 0x09DC
                elif prev == 0x09A2:
                    composed = 0x09DD
                elif prev == 0x09AF:
                    composed = 0x09DF
            elif cp == 0x09BE and prev == 0x0985:
                composed = 0x0986
            elif cp == 0x09C3 and prev == 0x098B:
                composed = 0x09E0
            elif cp == 0x09E2 and prev == 0x098C:
                composed = 0x09E1
            if composed >= 0:
                encode(composed, out, prev_at)  # three bytes over three bytes
                prev = composed
                continue
        if pending_space and pos > first:
            out[pos] = 0x20
            pos += 1
        dead = -1  # `_DEAD_CONSONANTS`: a virama right after its consonant
        if cp == 0x09CD and prev == 0x09A4 and not pending_space and not after_drop:
            dead = 0x09CE
        elif cp == 0x0D4D and not pending_space and not after_drop:
            if prev == 0x0D15:
                dead = 0x0D7F
            elif prev == 0x0D23:
                dead = 0x0D7A
            elif prev == 0x0D28:
                dead = 0x0D7B
            elif prev == 0x0D30:
                dead = 0x0D7C
            elif prev == 0x0D32:
                dead = 0x0D7D
            elif prev == 0x0D33:
                dead = 0x0D7E
        dead_at = prev_at
        pending_space = False
        after_drop = False
        prev_at = pos
        prev = cp
        if cp < 0x80:
            out[pos] = cp
            pos += 1
        else:
            pos = encode(cp, out, pos)
    if run_at >= 0 and 0x0900 <= run_after <= 0x0DFF:
        pos = run_at
    return pos


@njit(cache=True)
def _normalize_ascii(src: np.ndarray, start: int, end: int, out: np.ndarray, pos: int, table: np.ndarray) -> int:
    """`_normalize_part` of an ASCII part, without a branch per byte: there the only rules are the
    backtick and whitespace. `table` maps a byte to what is written (whitespace to a space) and
    says in its high bit whether it is whitespace; a space after whitespace, or first, is written
    and then written over."""
    first = pos
    after_space = 1  # leading whitespace is dropped
    for i in range(start, end):
        entry = table[src[i]]
        space = np.int64(entry >> 7)
        out[pos] = entry & 0x7F
        pos += 1 - (space & after_space)
        after_space = space
    if after_space and pos > first:  # trailing whitespace
        pos -= 1
    return pos


@njit(cache=True)
def _normalize_docs(
    src: np.ndarray,
    parts: np.ndarray,
    ascii_parts: np.ndarray,
    spaces: np.ndarray,
    mf: np.ndarray,
    mt: np.ndarray,
    ascii_table: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Every document's text (headline, newline, body; `document_text`) as UTF-8, and its span;
    parts known to be ASCII (`ascii_parts`, per headline and body) take the short path."""
    n = parts.shape[0]
    out = np.empty(len(src) + n, dtype=np.uint8)  # nothing grows but the newline
    spans = np.empty((n, 2), dtype=np.int64)
    pos = 0
    for d in range(n):
        spans[d, 0] = pos
        if ascii_parts[d, 0]:
            head = _normalize_ascii(src, parts[d, 0], parts[d, 1], out, pos, ascii_table)
        else:
            head = _normalize_part(src, parts[d, 0], parts[d, 1], out, pos, spaces, mf, mt)
        if head > pos:
            out[head] = 0x0A
            head += 1
        if ascii_parts[d, 1]:
            pos = _normalize_ascii(src, parts[d, 2], parts[d, 3], out, head, ascii_table)
        else:
            pos = _normalize_part(src, parts[d, 2], parts[d, 3], out, head, spaces, mf, mt)
        spans[d, 1] = pos
    return out[:pos], spans


def _pre_nfkc(text: str) -> str:
    """What `normalize_text` does before its character rules: NFKC, where it changes anything."""
    if text.isascii() or unicodedata.is_normalized("NFKC", text):
        return text
    return _nfkc(text)


# NFKC without unicodedata for the characters most news is written in. unicodedata's quick
# check answers "maybe" for every Bangla text (the vowel sign AA, U+09BE, may compose with
# U+09C7 before it), and then normalises it whole at about 70 ns a character: the largest
# single cost of a Bangla document. Over this domain a text is left as it is by NFKC, up to
# the three nukta letters that NFKC decomposes and `normalize_text` composes again, unless a
# character outside it, a combining mark out of canonical order, or a composable pair shows
# up; `_nfkc_unchanged` checks exactly that, and any other text goes to unicodedata.
_NFKC_DOMAIN = (
    *range(0x09, 0x0E),
    *range(0x20, 0x7F),
    *range(0xA0, 0x100),  # Latin-1
    0x0964,  # danda and double danda
    0x0965,
    *range(0x0980, 0x0A00),  # Bengali
    *range(0x2000, 0x2070),  # general punctuation
    *range(0x20A0, 0x20C1),  # currency signs
)
_COMPOSES_AFTER = {0x09BE: 0x09C7, 0x09D7: 0x09C7}
"""Characters of the domain (canonical class 0) that NFC composes with the one before it, which
tests/test_batched_features.py finds again from the whole of Unicode."""
_NUKTA_LETTERS = {0x09DC: 0x09A1, 0x09DD: 0x09A2, 0x09DF: 0x09AF}
_INERT, _MARK, _AFTER, _NUKTA, _OTHER = 0, 1, 2, 3, 4


def _nfkc_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per codepoint below the domain's end: its class, its canonical combining class, and for
    `_AFTER` the character it composes with."""
    size = max(_NFKC_DOMAIN) + 1
    classes = np.full(size, _OTHER, dtype=np.uint8)
    combining = np.zeros(size, dtype=np.uint8)
    partner = np.zeros(size, dtype=np.int64)
    for cp in _NFKC_DOMAIN:
        char = chr(cp)
        if cp in _NUKTA_LETTERS:
            assert unicodedata.normalize("NFKC", char) == chr(_NUKTA_LETTERS[cp]) + "\u09bc"
            classes[cp] = _NUKTA
        elif unicodedata.normalize("NFKC", char) != char:
            classes[cp] = _OTHER
        elif cp in _COMPOSES_AFTER:
            classes[cp], partner[cp] = _AFTER, _COMPOSES_AFTER[cp]
        elif unicodedata.combining(char):
            classes[cp], combining[cp] = _MARK, unicodedata.combining(char)
        else:
            classes[cp] = _INERT
    return classes, combining, partner


_NFKC_CLASS, _NFKC_COMBINING, _NFKC_PARTNER = _nfkc_tables()


@njit(cache=True)
def _nfkc_unchanged(
    src: np.ndarray, spans: np.ndarray, classes: np.ndarray, combining: np.ndarray, partner: np.ndarray
) -> np.ndarray:
    """For each UTF-8 text at `spans`: whether NFKC leaves it as it is, but for the nukta letters."""
    n = spans.shape[0]
    unchanged = np.zeros(n, dtype=np.bool_)
    size = len(classes)
    for t in range(n):
        i, end = spans[t, 0], spans[t, 1]
        previous = -1  # the codepoint before, as NFKC decomposes it
        last_class = 0  # canonical combining class of the mark before (0: none)
        ok = True
        while i < end:
            cp, width = decode(src, i)
            if width == 4:
                ok = False
                break
            i += width
            kind = classes[cp] if cp < size else _OTHER
            if kind == _OTHER:
                ok = False
                break
            if kind == _NUKTA:  # a base letter, then the nukta (class 7)
                previous, last_class = 0x09BC, 7
            elif kind == _MARK:
                if combining[cp] < last_class:  # canonical reordering would move it
                    ok = False
                    break
                previous, last_class = cp, combining[cp]
            else:
                if kind == _AFTER and previous == partner[cp]:  # NFC would compose the two
                    ok = False
                    break
                previous, last_class = cp, 0
        unchanged[t] = ok
    return unchanged


@dataclass(frozen=True, slots=True)
class NormalizedTexts:
    """`document_text` of a batch, as one UTF-8 buffer and each document's span in it."""

    buffer: np.ndarray
    spans: np.ndarray
    failed: frozenset[int]
    """Documents whose text is not UTF-8 (a lone surrogate): left to the one-document path."""
    bounds: list[list[int]] = field(init=False, repr=False, compare=False)
    """`spans` as Python ints, and a view of the buffer made once: reading a document's text or
    hash then costs no NumPy scalar and no memoryview of its own."""
    view: memoryview = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bounds", self.spans.tolist())
        object.__setattr__(self, "view", memoryview(self.buffer))

    def __len__(self) -> int:
        return len(self.spans)

    def text(self, index: int) -> str:
        start, end = self.bounds[index]
        return str(self.view[start:end], "utf-8")

    def content_hash(self, index: int) -> str:
        """`content_hash` of the document's text, read from the buffer without encoding it again."""
        start, end = self.bounds[index]
        return hashlib.sha256(self.view[start:end]).hexdigest()


def document_texts(pairs: Sequence[tuple[str | None, str]]) -> NormalizedTexts:
    """`document_text(title, body)` of every (title, body) pair, in two compiled passes."""
    chunks: list[bytes] = []
    failed: set[int] = set()
    wider: list[int] = []  # chunks that are not ASCII
    ascii_parts = np.ones(2 * len(pairs), dtype=np.bool_)
    for index, (title, body) in enumerate(pairs):
        for part in (title or "", body):
            try:
                chunks.append(part.encode("utf-8"))
            except UnicodeEncodeError:  # a lone surrogate
                failed.add(index)
                chunks.append(b"")
            if not part.isascii():
                wider.append(len(chunks) - 1)
    ascii_parts[wider] = False
    if wider:  # NFKC, where it would change something
        checked = [chunks[k] for k in wider]
        unchanged = _nfkc_unchanged(
            np.frombuffer(b"".join(checked), dtype=np.uint8),
            _spans([len(chunk) for chunk in checked]),
            _NFKC_CLASS,
            _NFKC_COMBINING,
            _NFKC_PARTNER,
        )
        for k, same in zip(wider, unchanged.tolist(), strict=True):
            if not same and k // 2 not in failed:
                title, body = pairs[k // 2]
                chunks[k] = _pre_nfkc(body if k % 2 else title or "").encode("utf-8")
    src = np.frombuffer(b"".join(chunks), dtype=np.uint8)
    parts = _spans([len(chunk) for chunk in chunks]).reshape(len(pairs), 4)
    buffer, spans = _normalize_docs(
        src, parts, ascii_parts.reshape(len(pairs), 2), _WHITESPACE_TABLE, _MAP_FROM, _MAP_TO, _ASCII_TABLE
    )
    return NormalizedTexts(buffer, spans, frozenset(failed))


def _spans(lengths: list[int]) -> np.ndarray:
    """(start, end) of consecutive pieces of these lengths."""
    ends = np.cumsum(np.array(lengths, dtype=np.int64))
    return np.stack((ends - np.array(lengths, dtype=np.int64), ends), axis=1)

"""64-bit SimHash over language-appropriate shingles (indexed by a band layout: `streams.features.bands`).

Written here rather than taken from a package: the PyPI SimHash packages hash and
vote per feature in Python (or take pre-hashed features one Python call at a
time), far below 5,000 documents a second, and know nothing of per-language
features. The kernel below is compiled once with Numba and does everything
(word or character segmentation, feature hashing, shingling, the 64 bit votes)
in one pass over the codepoints.
"""

from __future__ import annotations

import string

import numpy as np
from numba import njit

from streams.features.utf8 import decode

_ASCII_BREAKS = np.zeros(128, dtype=np.bool_)
_ASCII_BREAKS[[ord(c) for c in string.punctuation + string.whitespace]] = True
_ASCII_BREAKS[:33] = True
# Danda, double danda and the ellipsis also end words. Not Unicode "non-word"
# classes: Bangla vowel signs are not alphanumeric, yet belong inside words.
_OTHER_BREAKS = np.array([0x0964, 0x0965, 0x2026], dtype=np.uint32)
_UNIT_MUL = np.uint64(0x100000001B3)
_SHINGLE_MUL = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True, inline="always")
def _mix(x: np.uint64) -> np.uint64:
    """splitmix64's finaliser: spreads every input bit over all 64 output bits."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@njit(cache=True, inline="always")
def _is_break(cp: np.uint32, ascii_breaks: np.ndarray, other_breaks: np.ndarray) -> bool:
    if cp < 128:
        return ascii_breaks[cp]
    for other in other_breaks:  # noqa: SIM110 - Numba compiles loops, not generator expressions
        if cp == other:
            return True
    return False


@njit(cache=True)
def _units(codepoints: np.ndarray, words: bool, ascii_breaks: np.ndarray, other_breaks: np.ndarray) -> np.ndarray:
    """Feature units: one hash per word, or one per character with each run of breaks as one space."""
    out = np.empty(len(codepoints) + 1, dtype=np.uint64)
    count = 0
    current = np.uint64(0)
    in_word = False
    pending_space = False
    for cp in codepoints:
        if _is_break(cp, ascii_breaks, other_breaks):
            if in_word:
                if words:
                    out[count] = _mix(current)
                    count += 1
                in_word = False
                pending_space = True
            continue
        if words:
            current = (current if in_word else np.uint64(0)) * _UNIT_MUL + np.uint64(cp) + np.uint64(1)
        else:
            if pending_space and count > 0:
                out[count] = _mix(np.uint64(32))
                count += 1
            out[count] = _mix(np.uint64(cp))
            count += 1
        pending_space = False
        in_word = True
    if words and in_word:
        out[count] = _mix(current)
        count += 1
    return out[:count]


@njit(cache=True)
def _fingerprint(units: np.ndarray, size: int) -> np.uint64:
    """Majority vote per bit over the hashes of every run of `size` units (one run if shorter)."""
    n = len(units)
    if n == 0:
        return np.uint64(0)
    size = min(size, n)
    shingles = n - size + 1
    votes = np.zeros(64, dtype=np.int64)
    for start in range(shingles):
        h = np.uint64(0)
        for offset in range(size):
            h = h * _SHINGLE_MUL + units[start + offset]
        h = _mix(h)
        for bit in range(64):
            votes[bit] += (h >> np.uint64(bit)) & np.uint64(1)
    result = np.uint64(0)
    for bit in range(64):
        if 2 * votes[bit] > shingles:
            result |= np.uint64(1) << np.uint64(bit)
    return result


def _codepoints(text: str) -> np.ndarray:
    return np.frombuffer(text.lower().encode("utf-32-le"), dtype=np.uint32)


def word_simhash(text: str, shingle: int) -> int:
    """SimHash of word shingles (languages written with spaces between words)."""
    units = _units(_codepoints(text), True, _ASCII_BREAKS, _OTHER_BREAKS)
    return int(_fingerprint(units, shingle))


def char_simhash(text: str, ngram: int) -> int:
    """SimHash of character n-grams, punctuation and whitespace runs read as one space (Bangla and the like)."""
    units = _units(_codepoints(text), False, _ASCII_BREAKS, _OTHER_BREAKS)
    return int(_fingerprint(units, ngram))


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()


# ---------------------------------------------------------------------------------------------
# The batched path: every fingerprint of a chunk in one call, read from the UTF-8 buffer of its
# normalised texts (`text.document_texts`), lowercased in the kernel. `str.lower` is one
# codepoint to one everywhere except U+0130 (to two) and U+03A3 (final sigma, by context); a
# document with either, or with a codepoint beyond the BMP, is left to `word_simhash` /
# `char_simhash` by the caller, so every fingerprint is the one-document path's.

_LOWER = np.array([ord(low) if len(low := chr(c).lower()) == 1 else c for c in range(0x10000)], dtype=np.uint32)
# The bits of a byte, one to a byte: adding spread[b] to a 64-bit word counts those 8 bits in 8
# byte-wide counters at once, so a shingle costs 8 additions instead of 64.
_SPREAD = np.array([sum(((b >> j) & 1) << (8 * j) for j in range(8)) for b in range(256)], dtype=np.uint64)


@njit(cache=True)
def _mix_one(x: np.uint64) -> np.uint64:
    """`_mix`, as a plain call (the batch kernel is written flat; see `text._normalize_part`)."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@njit(cache=True)
def _vote(units: np.ndarray, n: int, size: int, spread: np.ndarray) -> np.uint64:
    """`_fingerprint(units[:n], size)`, counting the 64 votes eight at a time in byte-wide counters."""
    if n == 0:
        return np.uint64(0)
    size = min(size, n)
    shingles = n - size + 1
    votes = np.zeros(64, dtype=np.int64)
    counters = np.zeros(8, dtype=np.uint64)
    pending = 0
    for start in range(shingles):
        h = np.uint64(0)
        for offset in range(size):
            h = h * _SHINGLE_MUL + units[start + offset]
        h = _mix_one(h)
        for k in range(8):
            counters[k] += spread[(h >> np.uint64(8 * k)) & np.uint64(0xFF)]
        pending += 1
        if pending == 255 or start == shingles - 1:  # before a byte counter can overflow, and at the end
            for k in range(8):
                packed = counters[k]
                for j in range(8):
                    votes[8 * k + j] += np.int64((packed >> np.uint64(8 * j)) & np.uint64(0xFF))
                counters[k] = 0
            pending = 0
    result = np.uint64(0)
    for bit in range(64):
        if 2 * votes[bit] > shingles:
            result |= np.uint64(1) << np.uint64(bit)
    return result


# Per ASCII byte, what a word's hash adds for it (its lowercase codepoint + 1), or 0 for a break.
_WORD_BYTES = np.array([0 if _ASCII_BREAKS[b] else ord(chr(b).lower()) + 1 for b in range(128)], dtype=np.uint64)


@njit(cache=True)
def _all_ascii(buffer: np.ndarray, start: int, end: int) -> bool:
    """Whether the bytes at start:end are all ASCII (the branch-free word path takes only those)."""
    seen = np.uint8(0)
    for i in range(start, end):
        seen |= buffer[i]
    return seen < 0x80


@njit(cache=True)
def _ascii_word_units(buffer: np.ndarray, start: int, end: int, word_bytes: np.ndarray, units: np.ndarray) -> int:
    """The word units of an ASCII text (what `_simhash_docs` finds in it), without a branch per byte:
    a word ends at every break that follows a word byte, and the next starts from zero. A
    mispredicted branch at each word's end cost as much as all the hashing. Returns how many."""
    count = 0
    current = np.uint64(0)
    in_word = np.uint64(0)
    one = np.uint64(1)
    for i in range(start, end):
        value = word_bytes[buffer[i]]
        brk = np.uint64(value == 0)
        units[count] = current  # kept only when this byte ends a word
        count += np.int64(brk & in_word)
        current = (current * _UNIT_MUL + value) * (one - brk)
        in_word = one - brk
    if in_word:
        units[count] = current
        count += 1
    for k in range(count):
        units[k] = _mix_one(units[k])
    return count


@njit(cache=True)
def _simhash_docs(
    buffer: np.ndarray,
    spans: np.ndarray,
    words: np.ndarray,
    sizes: np.ndarray,
    lower: np.ndarray,
    ascii_breaks: np.ndarray,
    other_breaks: np.ndarray,
    spread: np.ndarray,
    word_bytes: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Fingerprints of the documents at `spans` of `buffer`, and which ones it could not lowercase.

    One pass per document does what `_codepoints`, `_units` and `_fingerprint` do: UTF-8
    decoding, lowercasing, segmentation and unit hashing, then the vote.
    """
    n = spans.shape[0]
    result = np.zeros(n, dtype=np.uint64)
    unsure = np.zeros(n, dtype=np.bool_)
    longest = 0
    for d in range(n):
        longest = max(longest, spans[d, 1] - spans[d, 0])
    units = np.empty(longest + 1, dtype=np.uint64)
    other0, other1, other2 = other_breaks[0], other_breaks[1], other_breaks[2]
    space_unit = _mix_one(np.uint64(32))
    for d in range(n):
        word_units = words[d]
        i, end, count = spans[d, 0], spans[d, 1], 0
        if word_units and _all_ascii(buffer, i, end):
            result[d] = _vote(units, _ascii_word_units(buffer, i, end, word_bytes, units), sizes[d], spread)
            continue
        current = np.uint64(0)
        in_word = False
        pending_space = False
        while i < end:
            b = np.int64(buffer[i])
            if b < 0x80:  # the ASCII fast path
                cp = b + 32 if 0x41 <= b <= 0x5A else b
                i += 1
            else:
                cp, width = decode(buffer, i)
                if width == 4:
                    unsure[d] = True
                    break
                i += width
                if cp == 0x130 or cp == 0x3A3:
                    unsure[d] = True
                    break
                cp = np.int64(lower[cp])
            if cp < 128:  # noqa: SIM108 - two plain branches compile to the fastest code here
                is_break = ascii_breaks[cp]
            else:
                is_break = cp in (other0, other1, other2)
            if is_break:
                if in_word:
                    if word_units:
                        units[count] = _mix_one(current)
                        count += 1
                    in_word = False
                    pending_space = True
                continue
            if word_units:
                if not in_word:
                    current = np.uint64(0)
                current = current * _UNIT_MUL + np.uint64(cp + 1)
            else:
                if pending_space and count > 0:
                    units[count] = space_unit
                    count += 1
                units[count] = _mix_one(np.uint64(cp))
                count += 1
            pending_space = False
            in_word = True
        if unsure[d]:
            continue
        if word_units and in_word:
            units[count] = _mix_one(current)
            count += 1
        result[d] = _vote(units, count, sizes[d], spread)
    return result, unsure


def simhash_batch(buffer: np.ndarray, spans: np.ndarray, words: np.ndarray, sizes: np.ndarray) -> list[int | None]:
    """`word_simhash` (where `words`) or `char_simhash` of each normalised text in `buffer` at `spans`,
    with shingle or n-gram size `sizes`; None where the caller must use those functions instead."""
    if len(spans) == 0:
        return []
    found, unsure = _simhash_docs(
        buffer,
        np.ascontiguousarray(spans, dtype=np.int64),
        words.astype(np.bool_),
        sizes.astype(np.int64),
        _LOWER,
        _ASCII_BREAKS,
        _OTHER_BREAKS,
        _SPREAD,
        _WORD_BYTES,
    )
    return [None if skip else value for value, skip in zip(found.tolist(), unsure.tolist(), strict=True)]

"""64-bit SimHash over language-appropriate shingles, split into four 16-bit bands.

Written here rather than taken from a package: the PyPI SimHash packages hash and
vote per feature in Python (or take pre-hashed features one Python call at a
time), far below 5,000 documents a second, and know nothing of per-language
features. The kernel below is compiled once with Numba and does everything
(word or character segmentation, feature hashing, shingling, the 64 bit votes)
in one pass over the codepoints.

Two fingerprints within 3 bits of each other agree exactly on at least one of
the four bands (pigeonhole), so band lookups find every such candidate.
"""

from __future__ import annotations

import string

import numpy as np
from numba import njit

BANDS = 4
BAND_BITS = 16
_BAND_MASK = (1 << BAND_BITS) - 1

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


def bands(simhash: int) -> tuple[int, ...]:
    """The four 16-bit bands, lowest bits first."""
    return tuple((simhash >> (BAND_BITS * i)) & _BAND_MASK for i in range(BANDS))


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()

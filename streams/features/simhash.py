"""64-bit SimHash over language-appropriate shingles, split into four 16-bit bands.

Written here rather than taken from a package: the PyPI `simhash` package
hashes and votes bit by bit in Python (far below 5,000 documents a second)
and knows nothing of per-language features. Here each distinct word is hashed
once (xxh3-64, memoised), shingle hashes are combined and mixed in NumPy, and
the 64 bit votes are one `unpackbits` and one sum.

Two fingerprints within 3 bits of each other agree exactly on at least one of
the four bands (pigeonhole), so band lookups find every such candidate.
"""

from __future__ import annotations

import string

import numpy as np
import xxhash

BANDS = 4
BAND_BITS = 16
_BAND_MASK = (1 << BAND_BITS) - 1
# Punctuation becomes a word break. ASCII maps to ASCII, which keeps
# str.translate on its fast path for English text.
_BREAKS = str.maketrans({c: " " for c in string.punctuation + "\u0964\u0965\u2026"})
_MUL = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_WORD_CACHE_LIMIT = 1 << 20


class _WordHashes(dict[str, int]):
    """Memoised xxh3-64 of words: news vocabulary repeats, hashing it once is the saving."""

    def __missing__(self, word: str) -> int:
        if len(self) >= _WORD_CACHE_LIMIT:
            self.clear()
        value = self[word] = xxhash.xxh3_64_intdigest(word.encode("utf-8"))
        return value


_word_hashes = _WordHashes()


def tokens(text: str) -> list[str]:
    """Lowercased words with punctuation removed."""
    return text.lower().translate(_BREAKS).split()


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: spreads every input bit over all 64 output bits."""
    x = x ^ (x >> np.uint64(30))
    x = x * _MIX1
    x = x ^ (x >> np.uint64(27))
    x = x * _MIX2
    return x ^ (x >> np.uint64(31))


def _shingle_hashes(units: np.ndarray, size: int) -> np.ndarray:
    """Hashes of every run of `size` consecutive unit hashes (one run if the text is shorter)."""
    size = min(size, len(units))
    count = len(units) - size + 1
    acc = np.zeros(count, dtype=np.uint64)
    for offset in range(size):
        acc = acc * _MUL + units[offset : offset + count]
    return _mix(acc)


def _vote(hashes: np.ndarray) -> int:
    bits = np.unpackbits(hashes.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
    ones = bits.sum(axis=0, dtype=np.int64)
    return int(np.packbits(ones * 2 > len(hashes), bitorder="little").view("<u8")[0])


def word_simhash(text: str, shingle: int) -> int:
    """SimHash of word shingles (languages written with spaces between words)."""
    words = tokens(text)
    if not words:
        return 0
    units = np.fromiter(map(_word_hashes.__getitem__, words), dtype=np.uint64, count=len(words))
    with np.errstate(over="ignore"):
        return _vote(_shingle_hashes(units, shingle))


def char_simhash(text: str, ngram: int) -> int:
    """SimHash of character n-grams over the words joined by single spaces (Bangla and the like)."""
    squashed = " ".join(tokens(text))
    if not squashed:
        return 0
    codepoints = np.frombuffer(squashed.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    with np.errstate(over="ignore"):
        return _vote(_shingle_hashes(_mix(codepoints), ngram))


def bands(simhash: int) -> tuple[int, ...]:
    """The four 16-bit bands, lowest bits first."""
    return tuple((simhash >> (BAND_BITS * i)) & _BAND_MASK for i in range(BANDS))


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()

"""UTF-8 inside the compiled text kernels: one encoder and one decoder for all of them.

The kernels in `text.py` and `simhash.py` walk UTF-8 bytes in a Numba loop, where
Python's codecs cannot be called; these inline into each loop, so the speed is that
of writing the bit operations out in place.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def decode(src: np.ndarray, i: int) -> tuple[int, int]:
    """The codepoint starting at byte `i` of valid UTF-8, and its width in bytes (1 to 4)."""
    b = np.int64(src[i])
    if b < 0x80:
        return b, 1
    if b < 0xE0:
        return ((b & 0x1F) << 6) | (np.int64(src[i + 1]) & 0x3F), 2
    if b < 0xF0:
        return ((b & 0x0F) << 12) | ((np.int64(src[i + 1]) & 0x3F) << 6) | (np.int64(src[i + 2]) & 0x3F), 3
    cp = ((b & 0x07) << 18) | ((np.int64(src[i + 1]) & 0x3F) << 12)
    return cp | ((np.int64(src[i + 2]) & 0x3F) << 6) | (np.int64(src[i + 3]) & 0x3F), 4


@njit(cache=True)
def encode(cp: int, out: np.ndarray, pos: int) -> int:
    """Write `cp` (not ASCII) as UTF-8 at `pos`; returns the position after it."""
    if cp < 0x800:
        out[pos] = 0xC0 | (cp >> 6)
        out[pos + 1] = 0x80 | (cp & 0x3F)
        return pos + 2
    if cp < 0x10000:
        out[pos] = 0xE0 | (cp >> 12)
        out[pos + 1] = 0x80 | ((cp >> 6) & 0x3F)
        out[pos + 2] = 0x80 | (cp & 0x3F)
        return pos + 3
    out[pos] = 0xF0 | (cp >> 18)
    out[pos + 1] = 0x80 | ((cp >> 12) & 0x3F)
    out[pos + 2] = 0x80 | ((cp >> 6) & 0x3F)
    out[pos + 3] = 0x80 | (cp & 0x3F)
    return pos + 4

"""Untrusted text made inert for a terminal: what a crawl put in an id, a title or a body is shown, never obeyed.

Rich's `Text` drops only a few control characters and Textual none, so an ESC in a title could clear a
reviewer's screen or plant a hidden hyperlink (OSC 8), and a right-to-left override in an id
(`invoice\\u202efdp.exe`) shows it as `invoiceexe.pdf` and runs on over the rest of the row. Each such
character becomes one visible stand-in, so the text keeps its length and a diff's highlight positions
still fall on the same characters. `str.translate` with a table is all it takes; no library does this
without also rewriting other characters.
"""

from __future__ import annotations

_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
"""The bidirectional controls (the Unicode Bidirectional Algorithm's explicit marks, embeddings, overrides
and isolates): the characters of "Trojan Source" (CVE-2021-42574)."""

_TABLE: dict[int, str] = {
    **{code: chr(0x2400 + code) for code in range(0x20) if chr(code) not in "\n\t"},  # ␀ ... ␟
    0x7F: "\u2421",  # ␡
    **{code: "\ufffd" for code in range(0x80, 0xA0)},  # C1 controls (0x9B is a one-byte CSI)
    **{code: "\ufffd" for code in _BIDI},
}


def inert(text: str) -> str:
    """`text` with every control and bidirectional-control character shown as a stand-in of its own, of the
    same length (newlines and tabs kept)."""
    return text.translate(_TABLE)

"""Content normalisation for the `content` stage and for fingerprinting.

Syndicated copies differ in invisible ways: curly against straight quotes, en
dashes against hyphens, runs of whitespace, and (for Bangla) different
codepoint sequences for the same letter. NFKC folds the compatibility forms;
Bangla nukta letters (U+09DC, U+09DD, U+09DF) are composition exclusions, so
NFKC *decomposes* them, and we recompose them to keep one spelling per letter
whichever form the publisher used.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

_QUOTES_AND_DASHES = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201b": "'",
        "\u2032": "'",
        "\u00b4": "'",
        "\u0060": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u201f": '"',
        "\u2033": '"',
        "\u00ab": '"',
        "\u00bb": '"',
        "\u2039": "'",
        "\u203a": "'",
        "\u2010": "-",
        "\u2011": "-",
        "\u2012": "-",
        "\u2013": "-",
        "\u2014": "-",
        "\u2015": "-",
        "\u2212": "-",
        "\ufe58": "-",
        "\ufe63": "-",
        "\uff0d": "-",
        "\u00ad": None,
        "\u200b": None,
        "\u2060": None,
        "\ufeff": None,
    }
)
# NFKC leaves these Bangla letters decomposed (they are composition exclusions);
# map them back so "য়" is one codepoint however it arrived.
_BANGLA_RECOMPOSE = {"\u09a1\u09bc": "\u09dc", "\u09a2\u09bc": "\u09dd", "\u09af\u09bc": "\u09df"}
_BANGLA_RE = re.compile("|".join(_BANGLA_RECOMPOSE))
_WHITESPACE = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """NFKC, canonical quotes and dashes, Bangla nukta letters composed, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).translate(_QUOTES_AND_DASHES)
    if "\u09bc" in text:
        text = _BANGLA_RE.sub(lambda m: _BANGLA_RECOMPOSE[m.group(0)], text)
    return _WHITESPACE.sub(" ", text).strip()


def document_text(title: str | None, body: str) -> str:
    """The text every content stage looks at: normalised headline, a newline, normalised body."""
    head = normalize_text(title or "")
    rest = normalize_text(body)
    return f"{head}\n{rest}" if head else rest


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()

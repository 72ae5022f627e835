"""Content normalisation for the `content` stage and for fingerprinting.

Syndicated copies differ in invisible ways: curly against straight quotes, en
dashes against hyphens, runs of whitespace, and (for Bangla) different
codepoint sequences for the same letter. NFKC folds the compatibility forms;
Bangla nukta letters (U+09DC, U+09DD, U+09DF) are composition exclusions, so
NFKC *decomposes* them, and we recompose them to keep one spelling per letter
whichever form the publisher used. In Bangla and the other Brahmic scripts of
India and Sri Lanka (U+0900-U+0DFF) the zero-width joiner and non-joiner only
choose a glyph (`র‍্য` with a ZWJ is the ya-phala form of `র্য`, a ZWNJ shows the
hasanta of `ক্‌ষ`), never the letters, so there they are dropped; elsewhere they
stay, since in emoji sequences and Persian they change what a reader sees.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

_CANONICAL_FORMS = {
    **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\u00b4\u0060\u2039\u203a", "'"),
    **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb", '"'),
    **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d", "-"),
    **dict.fromkeys("\u00ad\u200b\u2060\ufeff", ""),
}
# A character class and a lookup per match: str.translate with a dict leaves its
# fast path on non-ASCII text and costs ten times as much.
_NON_CANONICAL = re.compile("[" + "".join(_CANONICAL_FORMS) + "]")
# NFKC leaves these Bangla letters decomposed (they are composition exclusions);
# map them back so "য়" is one codepoint however it arrived.
_BANGLA_RECOMPOSE = {"\u09a1\u09bc": "\u09dc", "\u09a2\u09bc": "\u09dd", "\u09af\u09bc": "\u09df"}
_BANGLA_RE = re.compile("|".join(_BANGLA_RECOMPOSE))
_INDIC_JOINERS = re.compile("(?<=[\u0900-\u0dff])[\u200c\u200d]+|[\u200c\u200d]+(?=[\u0900-\u0dff])")


def _canonical_form(match: re.Match[str]) -> str:
    return _CANONICAL_FORMS[match.group(0)]


def normalize_text(text: str) -> str:
    """NFKC, canonical quotes and dashes, Bangla nukta letters composed, Indic joiners dropped, whitespace collapsed."""
    if text.isascii():  # NFKC is the identity on ASCII; only the backtick needs mapping
        return " ".join(text.replace("`", "'").split())
    if not unicodedata.is_normalized("NFKC", text):  # a quick check, much cheaper than normalising
        text = unicodedata.normalize("NFKC", text)
    text = _NON_CANONICAL.sub(_canonical_form, text)
    if "\u09bc" in text:
        text = _BANGLA_RE.sub(lambda m: _BANGLA_RECOMPOSE[m.group(0)], text)
    if "\u200c" in text or "\u200d" in text:
        text = _INDIC_JOINERS.sub("", text)
    return " ".join(text.split())


def document_text(title: str | None, body: str) -> str:
    """The text every content stage looks at: normalised headline, a newline, normalised body."""
    head = normalize_text(title or "")
    rest = normalize_text(body)
    return f"{head}\n{rest}" if head else rest


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()

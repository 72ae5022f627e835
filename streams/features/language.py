"""Language identification with CLD2 (pycld2), and crawlers' labels read with langcodes.

CLD2 is a compiled n-gram identifier covering Bangla and English among 80+
languages and answers in tens of microseconds, which keeps stages 1 to 3 above
5,000 documents a second on one core (lingua took 100-350 us on the same text).

Bands and cut-offs are per language, so a label must name the language and
nothing else: `en_US`, `eng` and `English` are all `en`, and deprecated codes
(CLD2 still answers `iw` for Hebrew) become the current ones.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache

import langcodes
import pycld2

UNDETERMINED = "und"
# Valid codes that name no single language: these labels say nothing, so the text decides.
_NO_LANGUAGE = frozenset({"und", "mul", "zxx", "mis"})
# What may be a language's English name ("Bangla", "German (Swiss)") rather than a tag.
_NAME = re.compile(r"[^\W\d_][^\W\d_ ()]*(?: [^\W\d_ ()]+)*(?: \([^\W\d_ ()]+\))?")


@lru_cache(maxsize=4096)
def normalize_language(label: str) -> str | None:
    """The base language (ISO 639, shortest code) a label names, or None when it names none.

    Reads BCP 47 tags (`_` as `-`), ISO 639-2/3 codes and English names.
    """
    label = label.strip()
    try:
        code = langcodes.Language.get(langcodes.standardize_tag(label.replace("_", "-"), macro=True)).language
    except ValueError:  # not a tag
        code = None
    if (code is None or not langcodes.tag_is_valid(code)) and len(label) > 3 and _NAME.fullmatch(label):
        try:
            # The name's code as a tag's is read (macrolanguage and all): "Tagalog" gave `tl` where `tl`, and
            # CLD2's own answer, give `fil`, and one article's copies landed in two languages.
            code = langcodes.Language.get(
                langcodes.standardize_tag(langcodes.find(label).language, macro=True)
            ).language
        except LookupError:
            return None
    if not code or not code.isalpha() or code in _NO_LANGUAGE or not langcodes.tag_is_valid(code):
        return None  # `x-...` is private use: nothing two sources could agree on
    return code


def detect_language(text: str, sample_chars: int = 1000) -> str:
    """ISO 639-1 code of the text's main language, or "und" when CLD2 cannot tell."""
    sample = text[:sample_chars]
    try:
        _, _, details = pycld2.detect(sample, bestEffort=True)
    except pycld2.error:
        # CLD2 refuses some control characters; retry on the printable part only.
        try:
            _reliable, _, details = pycld2.detect("".join(c for c in sample if c.isprintable()), bestEffort=True)
        except pycld2.error:
            return UNDETERMINED
    return normalize_language(details[0][1]) or UNDETERMINED


class RememberedLanguages:
    """`detect_language`, remembered for the last `size` samples it read.

    CLD2 reads only a text's first `sample_chars` characters, and re-crawls, syndicated
    copies and edited copies mostly begin alike: keyed by those characters (by the
    content hash when the text is no longer than them, else by a SHA-256 of the sample),
    an answer is found again for every copy whose first sample_chars characters agree,
    not only for exact copies. The answer is always the one `detect_language` gives.
    """

    def __init__(self, sample_chars: int, size: int = 65_536) -> None:
        self._sample_chars = sample_chars
        self._size = size
        self._known: dict[str | bytes, str] = {}

    def detect(self, text: str, content_hash: str) -> str:
        """`detect_language(text, sample_chars)`; `content_hash` is the text's SHA-256 (hex)."""
        n = self._sample_chars
        key: str | bytes = (
            content_hash if len(text) <= n else hashlib.sha256(text[:n].encode("utf-8", "surrogatepass")).digest()
        )
        language = self._known.get(key)
        if language is None:
            language = detect_language(text, n)
            self._known[key] = language
            if len(self._known) > self._size:
                del self._known[next(iter(self._known))]  # the oldest
        return language

"""Boilerplate removal: HTML to headline + body, with trafilatura.

A page rendered by JavaScript arrives as navigation and a footer; trafilatura
then returns what it finds ("Home | News | Sport"), and two such pages would
match each other. The body must therefore reach a minimum length
(`Settings.min_html_text_chars`) to count as an article.
"""

from __future__ import annotations

import re

import trafilatura

_REFERENCE = re.compile(r"&#(?:[xX]0*([0-9a-fA-F]{1,8})|0*([0-9]{1,10}));?")
"""A numeric character reference, `&#12;` or `&#x0c`."""


def _xml_allowed(code: int) -> bool:
    """Whether lxml takes `chr(code)` in a string it writes (XML 1.0's Char). The HTML parser reads 0x80-0x9F as
    windows-1252 and a NUL, a surrogate or a code past U+10FFFF as U+FFFD: those are left to it."""
    return (
        code in (0x9, 0xA, 0xD)
        or 0x20 <= code <= 0xD7FF
        or 0xE000 <= code <= 0xFFFD
        or code >= 0x10000
        or 0x80 <= code <= 0x9F
        or code == 0
        or 0xD800 <= code <= 0xDFFF
    )


def _without_forbidden_references(html: str) -> str:
    """`html` with every reference to a character XML forbids (`&#12;`, a form feed pasted from a word
    processor; `&#xFFFE;`) made a space. lxml's HTML parser puts the character in the text, trafilatura's
    fallback writes that text back to an element, lxml refuses it, and trafilatura returns nothing for the
    whole page. A raw such character is no problem (the parser drops it); no library option turns this off,
    and unescaping every reference would turn `&lt;` into markup, so only these are rewritten."""
    if "&#" not in html:
        return html

    def spaced(found: re.Match[str]) -> str:
        code = int(found.group(1), 16) if found.group(1) else int(found.group(2))
        return found.group(0) if _xml_allowed(code) else " "

    return _REFERENCE.sub(spaced, html)


class ExtractionError(ValueError):
    """The HTML held no article text."""


def extract_article(html: str, min_chars: int = 0) -> tuple[str | None, str]:
    """(headline, body) of an HTML page; the headline is not repeated at the start of the body.

    Raises ExtractionError when the body, whitespace collapsed, is empty or shorter than `min_chars`.
    """
    try:
        doc = trafilatura.bare_extraction(
            _without_forbidden_references(html), with_metadata=True, include_comments=False, include_tables=False
        )
    except Exception as exc:  # trafilatura, lxml and htmldate fail in their own ways (`<svg><br>` makes
        # lxml's drop_tree fail an assert): a page that cannot be parsed is a rejected record, never a crash
        raise ExtractionError(f"html could not be parsed: {type(exc).__name__}: {exc}") from None
    body = (doc.text or "").strip() if doc is not None else ""
    if not body:
        raise ExtractionError("no article text found in html")
    title = (doc.title or "").strip() or None
    if title and body.startswith(title) and body[len(title) : len(title) + 1] in ("", "\n"):
        body = body[len(title) :].lstrip()  # the headline's own line (trafilatura keeps a repeated <h1>), never
        # the start of a sentence ("Floods" over "Floods have killed ..."), which the same text as a body keeps
    found = len(" ".join(body.split()))
    if found < min_chars:
        raise ExtractionError(
            f"html holds {found} characters of article text, below min_html_text_chars = {min_chars}"
            " (only navigation or a footer: a page rendered by JavaScript?)"
        )
    return title, body

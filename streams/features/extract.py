"""Boilerplate removal: HTML to headline + body, with trafilatura.

A page rendered by JavaScript arrives as navigation and a footer; trafilatura
then returns what it finds ("Home | News | Sport"), and two such pages would
match each other. The body must therefore reach a minimum length
(`Settings.min_html_text_chars`) to count as an article.
"""

from __future__ import annotations

import trafilatura


class ExtractionError(ValueError):
    """The HTML held no article text."""


def extract_article(html: str, min_chars: int = 0) -> tuple[str | None, str]:
    """(headline, body) of an HTML page; the headline is not repeated at the start of the body.

    Raises ExtractionError when the body, whitespace collapsed, is empty or shorter than `min_chars`.
    """
    try:
        doc = trafilatura.bare_extraction(html, with_metadata=True, include_comments=False, include_tables=False)
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

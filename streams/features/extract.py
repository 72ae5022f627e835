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
    doc = trafilatura.bare_extraction(html, with_metadata=True, include_comments=False, include_tables=False)
    body = (doc.text or "").strip() if doc is not None else ""
    if not body:
        raise ExtractionError("no article text found in html")
    title = (doc.title or "").strip() or None
    if title and body.startswith(title):
        body = body[len(title) :].lstrip()
    found = len(" ".join(body.split()))
    if found < min_chars:
        raise ExtractionError(
            f"html holds {found} characters of article text, below min_html_text_chars = {min_chars}"
            " (only navigation or a footer: a page rendered by JavaScript?)"
        )
    return title, body

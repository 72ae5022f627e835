"""Boilerplate removal: HTML to headline + body, with trafilatura."""

from __future__ import annotations

import trafilatura


class ExtractionError(ValueError):
    """The HTML held no article text."""


def extract_article(html: str) -> tuple[str | None, str]:
    """(headline, body) of an HTML page; the headline is not repeated at the start of the body."""
    doc = trafilatura.bare_extraction(html, with_metadata=True, include_comments=False, include_tables=False)
    body = (doc.text or "").strip() if doc is not None else ""
    if not body:
        raise ExtractionError("no article text found in html")
    title = (doc.title or "").strip() or None
    if title and body.startswith(title):
        body = body[len(title) :].lstrip()
    return title, body

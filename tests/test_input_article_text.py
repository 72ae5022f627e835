"""Pages without article text (navigation and a footer, what JavaScript-rendered pages return) are rejected."""

from __future__ import annotations

import orjson
import pytest

from streams.config import Settings
from streams.core.model import Document
from streams.evaluation.corpus import NtrexDocument
from streams.records.article import Featurizer, Rejection

INGEST = 1_767_225_600


def _page(site: str, article: str = "") -> str:
    return (
        f"<html><head><title>{site}</title></head><body>"
        "<nav><a href='/'>Home</a> | <a href='/news'>News</a> | <a href='/sport'>Sport</a></nav>"
        f"<div id='app'>{article}</div>"
        f"<footer>Copyright 2026 {site}</footer></body></html>"
    )


def _parse(featurizer: Featurizer, url: str, html: str) -> Document | Rejection:
    return featurizer.parse(orjson.dumps({"url": url, "html": html}), ingest_time=INGEST)


def test_navigation_only_pages_are_rejected_not_linked() -> None:
    featurizer = Featurizer(Settings(stages=["url", "content", "simhash"]))
    for url in ("https://one.example/2026/a", "https://two.example/2026/b"):
        result = _parse(featurizer, url, _page("News"))
        assert isinstance(result, Rejection)
        assert "characters of article text" in result.reason and "min_html_text_chars" in result.reason


def test_a_real_short_article_is_kept(ntrex: list[NtrexDocument]) -> None:
    featurizer = Featurizer(Settings(stages=["url", "content", "simhash"]))
    # The shortest first sentence of a real news story that still clears the minimum.
    lead = min((d.english[1] for d in ntrex if len(d.english[1]) >= 100), key=len)
    result = _parse(featurizer, "https://one.example/a", _page("News", f"<article><p>{lead}</p></article>"))
    assert isinstance(result, Document)
    assert lead in result.text
    bangla = _page("News", f"<article><p>{ntrex[0].bengali[1]} {ntrex[0].bengali[2]}</p></article>")
    assert isinstance(_parse(featurizer, "https://one.example/b", bangla), Document)


def test_the_minimum_is_a_setting(ntrex: list[NtrexDocument]) -> None:
    sentence = ntrex[5].english[1]
    html = _page("News", f"<article><p>{sentence}</p></article>")
    strict = Featurizer(Settings(stages=["url"], min_html_text_chars=len(sentence) + 1))
    lenient = Featurizer(Settings(stages=["url"], min_html_text_chars=len(sentence)))
    assert isinstance(_parse(strict, "https://e.com/a", html), Rejection)
    assert isinstance(_parse(lenient, "https://e.com/a", html), Document)


def test_a_body_given_by_the_crawler_is_not_held_to_the_minimum() -> None:
    # The crawler extracted it and vouches for it; the rule is about what boilerplate removal finds.
    featurizer = Featurizer(Settings(stages=["url"]))
    result = featurizer.parse(orjson.dumps({"url": "https://e.com/a", "body": "Short brief."}), ingest_time=INGEST)
    assert isinstance(result, Document)


def test_a_negative_minimum_is_refused() -> None:
    with pytest.raises(ValueError, match="min_html_text_chars"):
        Settings(min_html_text_chars=-1)


@pytest.mark.parametrize(
    "reference", ["&#12;", "&#11;", "&#x1F;", "&#1;", "&#xFFFE;", "&#xFFFF;", "&#x0c", "&#00000000000012;"]
)
def test_a_control_character_written_as_a_reference_does_not_lose_the_article(reference: str) -> None:
    """A form feed pasted from a word processor, kept as `&#12;`: lxml's HTML parser puts the character in the
    text, trafilatura's fallback writes that text back to an element, lxml refuses a string XML forbids, and
    trafilatura returned nothing: the whole article rejected as "no article text found in html". The page is
    read as the same page without the character, and so is a copy of it as a body."""
    paragraphs = [
        f"Paragraph {i} of the article: the cyclone approached the southern coast on Tuesday, officials urged"
        " residents to stay indoors and ferry services were suspended across the districts until further notice."
        for i in range(12)
    ]
    article = "".join(f"<p>{p}</p>" for p in paragraphs[:6]) + f"<p>Page break{reference} here.</p>"
    article += "".join(f"<p>{p}</p>" for p in paragraphs[6:])
    featurizer = Featurizer(Settings(stages=["url", "content", "simhash"]))
    held = _parse(featurizer, "https://one.example/2026/a", _page("News", f"<article>{article}</article>"))
    clean = _parse(
        featurizer, "https://two.example/2026/a", _page("News", f"<article>{article.replace(reference, ' ')}</article>")
    )
    assert isinstance(held, Document), held
    assert isinstance(clean, Document) and held.content_hash == clean.content_hash

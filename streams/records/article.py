"""From one raw input record to a featurised Document, or a clear reason why not.

This is the boundary where bad input is caught: everything after it can trust
its Document. Nothing here raises on bad input; it returns a Rejection.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import orjson

from streams.config import Settings
from streams.core.model import Document
from streams.features.extract import ExtractionError, extract_article
from streams.features.language import detect_language, normalize_language
from streams.features.simhash import char_simhash, word_simhash
from streams.features.text import content_hash, document_text
from streams.features.url import SourceRules, UrlError, normalize_url, url_hash
from streams.records.schemas import RAW_ARTICLE, SchemaError, validator

# Unicode category Cc: C0 controls, DEL and C1 controls.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a record was refused; `raw` is the record as it arrived."""

    reason: str
    raw: bytes


def parse_timestamp(value: str) -> int:
    """RFC 3339 (ISO 8601), or RFC 2822 as RSS feeds write it, to Unix seconds; without an offset, UTC."""
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        try:
            moment = parsedate_to_datetime(value)
        except (ValueError, TypeError, IndexError):
            raise ValueError(f"published_at {value!r} is not an RFC 3339 or RFC 2822 date-time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        moment = moment.astimezone(UTC)  # years 1 to 9999 in UTC, or every output would fail on it
    except OverflowError:
        raise ValueError(f"published_at {value!r} is out of range") from None
    return int(moment.timestamp())


def format_timestamp(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat().replace("+00:00", "Z")


class Featurizer:
    """Parses, validates and featurises raw articles with one configuration."""

    def __init__(self, settings: Settings, rules: SourceRules | None = None) -> None:
        self._settings = settings
        self._rules = rules if rules is not None else _load_rules(settings)
        self._validate = validator(RAW_ARTICLE)

    def parse(self, raw: bytes, *, ingest_time: int) -> Document | Rejection:
        """One JSON line to a Document, or a Rejection saying what is wrong with it."""
        limit = self._settings.max_record_bytes
        if len(raw) > limit:
            return Rejection(f"record is {len(raw):,} bytes, above the limit of {limit:,}", raw)
        try:
            article = orjson.loads(raw)  # checks UTF-8 too
        except orjson.JSONDecodeError as exc:
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as bad:
                return Rejection(f"invalid UTF-8 at byte {bad.start}", raw)
            return Rejection(f"invalid JSON: {exc}", raw)
        if not isinstance(article, dict):
            return Rejection(f"record must be a JSON object, got {type(article).__name__}", raw)
        return self.featurize(article, raw, ingest_time=ingest_time)

    def featurize(self, article: dict[str, Any], raw: bytes, *, ingest_time: int) -> Document | Rejection:
        if "url" not in article:
            return Rejection("missing required field: url", raw)
        if article.get("body") is None and article.get("html") is None:
            return Rejection("missing required field: one of body or html", raw)
        try:
            self._validate(article)
        except SchemaError as exc:
            return Rejection(f"schema: {exc.message}", raw)
        if (doc_id := article.get("id")) is not None and (problem := self._id_problem(str(doc_id))):
            return Rejection(problem, raw)
        try:
            return self._document(article, ingest_time)
        except (UrlError, ExtractionError, ValueError) as exc:
            return Rejection(str(exc), raw)

    def _id_problem(self, doc_id: str) -> str | None:
        """Why an id cannot be a key: too long, or a control character (U+001F packs Redis fields)."""
        limit = self._settings.max_id_chars
        if len(doc_id) > limit:
            return f"id is {len(doc_id):,} characters, above max_id_chars = {limit:,}"
        if bad := _CONTROL.search(doc_id):
            return f"id contains control character U+{ord(bad.group()):04X} at position {bad.start()}"
        return None

    def _document(self, article: dict[str, Any], ingest_time: int) -> Document:
        url: str = article["url"]
        normalized = normalize_url(url, self._rules)
        text = body_text(article)
        if text is None:
            extracted_title, body = extract_article(article["html"], self._settings.min_html_text_chars)
            text = document_text(article.get("title") or extracted_title, body)
        if not text:
            raise ValueError("article has no text: title and body are empty")
        published = article.get("published_at")
        published_at = parse_timestamp(published) if published else ingest_time
        u_hash, c_hash = url_hash(normalized), content_hash(text)
        given_language = article.get("language")
        language = (normalize_language(given_language) if given_language else None) or detect_language(
            text, self._settings.language_sample_chars
        )
        sim = self._settings.simhash
        simhash = (
            char_simhash(text, sim.char_ngram)
            if language in sim.char_ngram_languages
            else word_simhash(text, sim.word_shingle)
        )
        doc_id = article.get("id")
        doc_id = str(doc_id) if doc_id is not None else _derived_id(u_hash, c_hash)
        return Document(
            doc_id=doc_id,
            url=url,
            normalized_url=normalized,
            url_hash=u_hash,
            content_hash=c_hash,
            text=text,
            language=language,
            simhash=simhash,
            published_at=published_at,
            article=article,
        )


def body_text(article: dict[str, Any]) -> str | None:
    """The normalised text of an article that has a `body` (None when it has only `html`): cheap,
    so a stage record rebuilds it instead of carrying it."""
    body = article.get("body")
    return None if body is None else document_text(article.get("title"), body)


def _derived_id(u_hash: str, c_hash: str) -> str:
    """A deterministic id for a record without one: the same URL and content give the same id."""
    return "auto-" + hashlib.sha256(f"{u_hash}:{c_hash}".encode()).hexdigest()[:24]


def _load_rules(settings: Settings) -> SourceRules:
    return SourceRules.from_toml(settings.sources) if settings.sources else SourceRules()

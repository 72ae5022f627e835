"""From one raw input record to a featurised Document, or a clear reason why not.

This is the boundary where bad input is caught: everything after it can trust
its Document. Nothing here raises on bad input; it returns a Rejection.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import numpy as np
import orjson

from streams.config import Settings
from streams.core.model import VERSION_SUFFIX, Document, clamped
from streams.features.extract import ExtractionError, extract_article
from streams.features.figures import figures_batch, text_figures
from streams.features.language import RememberedLanguages, detect_language, normalize_language
from streams.features.simhash import char_simhash, simhash_batch, word_simhash
from streams.features.text import content_hash, document_text, document_texts
from streams.features.url import SourceRules, UrlError, normalize_url, url_hash
from streams.records.schemas import RAW_ARTICLE, SchemaError, validator

# Unicode category Cc: C0 controls, DEL and C1 controls.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_ALNUM = re.compile(r"[^\W_]")
"""A letter or a digit (Bangla's included): a text without one is no article, and has no SimHash feature."""
WRITTEN_GROWTH = 5
"""How much larger a record can come out when written back (`deduped_record`) than it came in: orjson spells
`1e15` (4 bytes) as `1000000000000000.0` (18). Only a record within this factor of `max_record_bytes` is
written out to be measured; a larger one would be refused by the broker on its way to the indexers."""
MAX_DEPTH = 200
"""Nesting a record may have: orjson reads 1,024 levels but writes 255, and every output carries the record
(a level deeper in a stage record), so a deeper one would be decided and then fail to be written."""
MAX_NORMALIZED_URL_CHARS = 16_384
"""Longest normalised URL an article may have: every deduped and stage record carries it beside the article, in
the 64 KiB the workers leave for what a record adds to one of `max_record_bytes`. 8,192 emoji (the schema's
longest URL) normalise to 98 KB: the broker would refuse the record after the article was decided."""
_LEAP_SECOND = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d):60(?=$|[.Z+-])")
_REMEMBERED_LANGUAGES = 65_536
"""Samples whose detected language the batched path keeps (keyed by 32 bytes or a content hash: about 10 MB)."""


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a record was refused; `raw` is the record as it arrived."""

    reason: str
    raw: bytes


_RFC2822_LEAP = re.compile(r"(\d\d:\d\d):60(?=\s|$)")
"""A leap second in an RFC 2822 time, read as the second before it (as the RFC 3339 path reads one)."""


def parse_timestamp(value: str) -> int:
    """RFC 3339 (ISO 8601), or RFC 2822 as RSS feeds write it, to Unix seconds; without an offset, UTC."""
    try:
        moment = datetime.fromisoformat(_iso_form(value.strip()))
    except ValueError:
        try:
            moment = parsedate_to_datetime(_RFC2822_LEAP.sub(r"\1:59", value))  # RFC 2822 3.3 allows :60
        except (ValueError, TypeError, IndexError):
            raise ValueError(f"published_at {value!r} is not an RFC 3339 or RFC 2822 date-time") from None
    return int(_utc(moment, f"published_at {value!r}").timestamp())


def parse_rfc3339(value: str) -> datetime:
    """An RFC 3339 date-time (ISO 8601; without an offset, UTC) in UTC; ValueError when it is none."""
    return _utc(datetime.fromisoformat(_iso_form(value.strip())), repr(value))


def _utc(moment: datetime, what: str) -> datetime:
    """`moment` in UTC (without an offset: UTC already); ValueError past years 1 to 9999 in UTC, where every
    output would fail on it."""
    try:
        return (moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)).astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{what} is out of range") from None


def _iso_form(value: str) -> str:
    """An RFC 3339 date-time as `fromisoformat` reads it. RFC 3339 allows a lower-case "t" and "z" and a leap
    second (second 60), which it refuses: the letters are read upper-case, and a leap second as the second
    before it (Unix time has none)."""
    if len(value) > 10 and value[4] == "-":  # the common form ("...T...Z") goes through unchanged
        if value[10] == "t":
            value = value[:10] + "T" + value[11:]
        if value[-1] == "z":
            value = value[:-1] + "Z"
        if ":60" in value:
            value = _LEAP_SECOND.sub(r"\1:59", value)
    return value


def format_timestamp(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat().replace("+00:00", "Z")


class Featurizer:
    """Parses, validates and featurises raw articles with one configuration."""

    def __init__(self, settings: Settings, rules: SourceRules | None = None) -> None:
        self._settings = settings
        self._rules = rules if rules is not None else _load_rules(settings)
        self._validate = validator(RAW_ARTICLE)
        self._languages = RememberedLanguages(settings.language_sample_chars, _REMEMBERED_LANGUAGES)
        """CLD2's answers by what it read, for the batched path (see `_detected`)."""

    def parse(self, raw: bytes, *, ingest_time: int) -> Document | Rejection:
        """One JSON line to a Document, or a Rejection saying what is wrong with it."""
        article = self._loaded(raw)
        if isinstance(article, Rejection):
            return article
        return self.featurize(article, raw, ingest_time=ingest_time)

    def featurize(self, article: dict[str, Any], raw: bytes, *, ingest_time: int) -> Document | Rejection:
        if (rejection := self._admitted(article, raw)) is not None:
            return rejection
        try:
            return self._document(article, ingest_time)
        except (UrlError, ExtractionError, ValueError) as exc:
            return Rejection(str(exc), raw)

    def parse_batch(self, raws: Sequence[bytes], *, ingest_time: int) -> list[Document | Rejection]:
        """`parse` of every line, with exactly its results, the text work of all of them at once.

        Per line, Python does what needs it (JSON, schema, URL, NFKC, language); text
        normalisation runs in one compiled pass over the batch and SimHash in another, and
        the content hash reads the normalised UTF-8 without encoding it again. One bad line
        is one Rejection, as in `parse`: it never fails the others.
        """
        results: list[Document | Rejection | None] = [None] * len(raws)
        pending: list[_Pending] = []
        for index, raw in enumerate(raws):
            article = self._loaded(raw)
            if not isinstance(article, Rejection):
                article = self._admitted(article, raw) or self._pending(index, article, raw)
            if isinstance(article, Rejection):
                results[index] = article
            else:
                pending.append(article)
        for index, doc in self._featurized(pending, ingest_time):
            results[index] = doc
        return results  # type: ignore[return-value]  # every slot is filled

    def _loaded(self, raw: bytes) -> dict[str, Any] | Rejection:
        """The JSON object of a line, or why it is none (too long, not UTF-8, not JSON, not an object)."""
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
        if _nests(article) and (depth := _depth(article)) > MAX_DEPTH:
            return Rejection(f"record nests {depth:,} levels deep, above the limit of {MAX_DEPTH}", raw)
        if len(raw) * WRITTEN_GROWTH > limit and (written := len(orjson.dumps(article))) > limit:
            return Rejection(f"record is {written:,} bytes as written out (numbers spelled out), above {limit:,}", raw)
        return article

    def _admitted(self, article: dict[str, Any], raw: bytes) -> Rejection | None:
        """Why the object cannot be an article (fields, schema, id), or None."""
        if "url" not in article:
            return Rejection("missing required field: url", raw)
        if article.get("body") is None and article.get("html") is None:
            return Rejection("missing required field: one of body or html", raw)
        try:
            self._validate(article)
        except SchemaError as exc:
            return Rejection(f"schema: {exc.message}", raw)
        if isinstance(doc_id := article.get("id"), float):  # an integer past 64 bits, or 1e2: not one id
            return Rejection(f"id must be a string or an integer of at most 64 bits, got {doc_id!r}", raw)
        if doc_id is not None and (problem := self._id_problem(str(doc_id))):
            return Rejection(problem, raw)
        return None

    def _pending(self, index: int, article: dict[str, Any], raw: bytes) -> _Pending | Rejection:
        """What `_document` does before the text is normalised: the URL, and an HTML page's article text."""
        try:
            normalized = self._normalized(article["url"])
            title, body = article.get("title"), usable_body(article)
            if body is None:
                extracted_title, body = extract_article(article["html"], self._settings.min_html_text_chars)
                title = title if title and title.strip() else extracted_title  # a blank title is none
        except (UrlError, ExtractionError, ValueError) as exc:
            return Rejection(str(exc), raw)
        return _Pending(index, article, raw, normalized, title, body)

    def _featurized(self, pending: list[_Pending], ingest_time: int) -> list[tuple[int, Document | Rejection]]:
        """The rest of `_document` for a batch, its checks in the same order: text, date, hashes,
        language; then every SimHash in one call, and every figures digest in another."""
        texts = document_texts([(p.title, p.body) for p in pending])
        sim = self._settings.simhash
        done: list[tuple[int, Document | Rejection]] = []
        docs: list[Document] = []
        at: list[int] = []
        for k, p in enumerate(pending):
            if k in texts.failed:  # not UTF-8: the one-document path says why
                done.append((p.index, self.featurize(p.article, p.raw, ingest_time=ingest_time)))
                continue
            text = texts.text(k)
            try:
                _check_text(text)
                published_at = _published_at(p.article, ingest_time)
            except ValueError as exc:
                done.append((p.index, Rejection(str(exc), p.raw)))
                continue
            u_hash, c_hash = url_hash(p.normalized), texts.content_hash(k)
            given_language = p.article.get("language")
            language = (normalize_language(given_language) if given_language else None) or self._detected(text, c_hash)
            doc_id = p.article.get("id")
            doc = Document(
                doc_id=str(doc_id) if doc_id is not None else _derived_id(u_hash, c_hash),
                url=p.article["url"],
                normalized_url=p.normalized,
                url_hash=u_hash,
                content_hash=c_hash,
                text=text,
                language=language,
                simhash=0,  # below, for the whole batch
                published_at=published_at,
                article=p.article,
            )
            docs.append(doc)
            at.append(k)
            done.append((p.index, doc))
        words = np.array([doc.language not in sim.char_ngram_languages for doc in docs], dtype=np.bool_)
        sizes = np.where(words, sim.word_shingle, sim.char_ngram)
        spans = texts.spans[at]
        fingerprints = simhash_batch(texts.buffer, spans, words, sizes)
        for doc, word, value, figures in zip(
            docs, words.tolist(), fingerprints, figures_batch(texts.buffer, spans), strict=True
        ):
            if value is None:  # a character str.lower() maps by context: the one-document kernel
                value = word_simhash(doc.text, sim.word_shingle) if word else char_simhash(doc.text, sim.char_ngram)
            doc.simhash = value
            doc.figures = figures
        return done

    def _detected(self, text: str, c_hash: str) -> str:
        """`detect_language` of a text, remembered for the last `_REMEMBERED_LANGUAGES` samples:
        re-crawls and syndicated copies begin with the very same text, and CLD2 is the largest
        cost left per document."""
        return self._languages.detect(text, c_hash)

    def _normalized(self, url: str) -> str:
        """The normalised URL; UrlError when it is longer than `MAX_NORMALIZED_URL_CHARS`."""
        normalized = normalize_url(url, self._rules)
        if len(normalized) > MAX_NORMALIZED_URL_CHARS:
            raise UrlError(
                f"url normalises to {len(normalized):,} characters (a non-ASCII character is percent-encoded in"
                f" up to 12), above {MAX_NORMALIZED_URL_CHARS:,}: the records that carry it would not fit"
            )
        return normalized

    def _id_problem(self, doc_id: str) -> str | None:
        """Why an id cannot be a key: too long, or a control character (U+001F packs Redis fields)."""
        limit = self._settings.max_id_chars
        if len(doc_id) > limit:
            return f"id is {len(doc_id):,} characters, above max_id_chars = {limit:,}"
        if bad := CONTROL.search(doc_id):
            return f"id contains control character U+{ord(bad.group()):04X} at position {bad.start()}"
        if VERSION_SUFFIX.search(doc_id):
            return "id ends in '#v' and 16 hex digits, the form of a later version's id (reserved for dedup)"
        return None

    def _document(self, article: dict[str, Any], ingest_time: int) -> Document:
        url: str = article["url"]
        normalized = self._normalized(url)
        text = article_text(article, self._settings.min_html_text_chars)
        _check_text(text)
        published_at = _published_at(article, ingest_time)
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
            figures=text_figures(text),
        )


@dataclass(slots=True)  # not frozen: a frozen dataclass sets each field through object.__setattr__
class _Pending:
    """A record that passed every check that comes before its text is normalised."""

    index: int
    article: dict[str, Any]
    raw: bytes
    normalized: str
    title: str | None
    body: str


def body_text(article: dict[str, Any]) -> str | None:
    """The normalised text of an article that has a `body` (None when its text is in `html`): cheap,
    so a stage record rebuilds it instead of carrying it."""
    body = usable_body(article)
    return None if body is None else document_text(article.get("title"), body)


def article_text(article: dict[str, Any], min_html_text_chars: int = 0) -> str:
    """The normalised text of an article: of its `body`, else of the article extracted from its `html` (its
    given title, unless blank, over the page's); ExtractionError when the page holds too little."""
    text = body_text(article)
    if text is None:
        extracted_title, body = extract_article(article["html"], min_html_text_chars)
        given = article.get("title")
        text = document_text(given if given and given.strip() else extracted_title, body)
    return text


def usable_body(article: dict[str, Any]) -> str | None:
    """The article's `body`, unless its text is in `html`: no body, or one of nothing but white space beside
    the page (what a crawler whose own extraction failed writes)."""
    body = article.get("body")
    if body is not None and article.get("html") is not None and not body.strip():
        return None
    return body


def _check_text(text: str) -> None:
    """ValueError unless `text` holds a letter or a digit: an empty one, or one of nothing but punctuation,
    controls or joiners, is no article, and every such text would share one content key and SimHash."""
    if not text:
        raise ValueError("article has no text: title and body are empty")
    if _ALNUM.search(text) is None:
        raise ValueError("article has no text: no letter or digit in its title and body")


def _nests(article: dict[str, Any]) -> bool:
    """Whether a field holds an object or an array (most records: none), before `_depth` walks them."""
    for value in article.values():  # noqa: SIM110 - a loop: no generator made for every record
        if isinstance(value, dict | list):
            return True
    return False


def _depth(value: Any) -> int:
    """How deep `value` nests (a scalar: 0), walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def _published_at(article: dict[str, Any], ingest_time: int) -> int:
    """The article's `published_at` (ingest time when absent), at most a day after its ingest time
    (`model.clamped`): the stamp its entries get, carried as it is by its link record, so that a replay and a
    later run find the stamp the state gave (clamped again by the wall clock of their own time, a date in
    2100 would come out another)."""
    published = article.get("published_at")
    return clamped(parse_timestamp(published), ingest_time) if published else ingest_time


def _derived_id(u_hash: str, c_hash: str) -> str:
    """A deterministic id for a record without one: the same URL and content give the same id."""
    return "auto-" + hashlib.sha256(f"{u_hash}:{c_hash}".encode()).hexdigest()[:24]


def _load_rules(settings: Settings) -> SourceRules:
    return SourceRules.from_toml(settings.sources) if settings.sources else SourceRules()

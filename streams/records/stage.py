"""Records between stage agents, and rejected input.

A stage record carries a featurised document from one stage topic to the next,
so later stages never parse or featurise again, plus the time its raw record
reached the broker (for verdict latency). It carries the article once: the
normalised text of an article with a `body` is rebuilt from it on arrival (a
cheap normalisation); only text extracted from `html` travels beside it, since
extraction is not cheap and the HTML is far larger than its text.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from streams.core.model import Document
from streams.records.article import body_text, usable_body
from streams.records.output import now_rfc3339

_FIELDS = tuple(Document.__dataclass_fields__)

_ENVELOPE_BYTES = 4096
"""Room left in a rejected record for its reason and origin when its raw bytes are cut."""


def stage_record(doc: Document, received_ms: int) -> bytes:
    fields = {name: getattr(doc, name) for name in _FIELDS}  # not asdict: it deep-copies the article
    if usable_body(doc.article) is not None:
        del fields["text"]  # rebuilt on arrival: the article travels once (a blank body beside html has no text)
    return orjson.dumps({**fields, "simhash": f"{doc.simhash:016x}", "received_ms": received_ms})


def read_stage_record(raw: bytes) -> tuple[Document, int]:
    """The document and its arrival time; KeyError, ValueError or TypeError when malformed."""
    record = orjson.loads(raw)
    if not isinstance(record.get("article"), dict) or not isinstance(record.get("published_at"), int):
        raise TypeError("stage record has a malformed article or published_at")
    if "text" not in record:
        record["text"] = body_text(record["article"])
    record.setdefault("version_of", None)
    fields = {name: record[name] for name in _FIELDS}
    if not isinstance(fields["text"], str):
        raise TypeError("stage record has neither a text nor an article body")
    fields["simhash"] = int(fields["simhash"], 16)
    return Document(**fields), int(record["received_ms"])


def rejected_record(reason: str, raw: bytes, origin: dict[str, Any], max_bytes: int | None = None) -> bytes:
    """An `articles.rejected` record: why, where from, and the original bytes.

    The bytes come back as text when they are UTF-8, else base64 (`raw_base64`). With
    `max_bytes` (what the broker accepts), bytes that would not fit are cut, and
    `raw_bytes` gives their full length: the reason always reaches the topic.
    """
    record: dict[str, Any] = {"reason": reason, "rejected_at": now_rfc3339(), **origin}
    if max_bytes is not None and len(raw) * 4 // 3 + _ENVELOPE_BYTES > max_bytes:
        record["raw_bytes"] = len(raw)
        raw = raw[: (max_bytes - _ENVELOPE_BYTES) * 3 // 4]
    try:
        record["raw"] = raw.decode("utf-8")
    except UnicodeDecodeError:
        record["raw_base64"] = base64.b64encode(raw).decode("ascii")
    return orjson.dumps(record)

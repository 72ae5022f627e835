"""Records between stage agents, and rejected input.

A stage record carries a featurised document from one stage topic to the next,
so later stages never parse or featurise again, plus the time its raw record
reached the broker (for verdict latency).
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from streams.core.model import Document
from streams.records.output import now_rfc3339

_FIELDS = tuple(Document.__dataclass_fields__)


def stage_record(doc: Document, received_ms: int) -> bytes:
    fields = {name: getattr(doc, name) for name in _FIELDS}  # not asdict: it deep-copies the article
    return orjson.dumps({**fields, "simhash": f"{doc.simhash:016x}", "received_ms": received_ms})


def read_stage_record(raw: bytes) -> tuple[Document, int]:
    """The document and its arrival time; KeyError, ValueError or TypeError when malformed."""
    record = orjson.loads(raw)
    fields = {name: record[name] for name in _FIELDS}
    fields["simhash"] = int(fields["simhash"], 16)
    if not isinstance(fields["article"], dict) or not isinstance(fields["published_at"], int):
        raise TypeError("stage record has a malformed article or published_at")
    return Document(**fields), int(record["received_ms"])


def rejected_record(reason: str, raw: bytes, origin: dict[str, Any]) -> dict[str, Any]:
    """An `articles.rejected` record: why, where from, and the original bytes.

    The bytes come back as text when they are UTF-8, else base64 (`raw_base64`).
    """
    record: dict[str, Any] = {"reason": reason, "rejected_at": now_rfc3339(), **origin}
    try:
        record["raw"] = raw.decode("utf-8")
    except UnicodeDecodeError:
        record["raw_base64"] = base64.b64encode(raw).decode("ascii")
    return record

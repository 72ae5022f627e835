"""Records between stage agents, and rejected input.

A stage record carries a featurised document from one stage topic to the next,
so later stages never parse or featurise again, plus the time its raw record
reached the broker (for verdict latency). It carries the article once: the
normalised text of an article with a `body` is rebuilt from it on arrival (a
cheap normalisation), and a long URL from the article's; only text extracted from
`html` travels beside it, since extraction is not cheap and the HTML is far
larger than its text. A page whose text is longer than `CARRIED_TEXT_BYTES` is
extracted again on arrival instead: beside the page, the text would not fit in
what the broker takes.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from streams.core.model import Document
from streams.features.figures import figures_from_hex, figures_hex, text_figures
from streams.records.article import article_text, usable_body
from streams.records.output import now_rfc3339

_FIELDS = tuple(Document.__dataclass_fields__)

_BATCH_BYTES = 4096
"""What the broker counts against its limit beside a record's value: the batch's header, the key (an id of up to
`max_id_chars`) and the record's own framing. A rejected record is made to fit in the rest."""
REASON_CHARS = 1000
"""Most of a reason a rejected record keeps: a reason may quote the field at fault, as long as the record."""
CARRIED_URL_CHARS = 2048
"""Longest URL a stage record repeats beside its article: a longer one (up to 8,192 emoji, 32 KB) is taken from
the article on arrival, for room; a shorter one still travels, so that agents of the version before, which read
it there, decide the records of this one while a deploy rolls."""
CARRIED_TEXT_BYTES = 32 * 1024
"""Most text extracted from `html` a stage record carries (as JSON): half the room the workers leave beside an
article of `max_record_bytes` for what a record adds to it (64 KiB, `FEATURES_ROOM_BYTES`). A page of 600 KB
is often 500 KB of text: beside the page it would be refused by the broker, and the valid article rejected."""


def stage_record(doc: Document, received_ms: int) -> bytes:
    fields = {name: getattr(doc, name) for name in _FIELDS}  # not asdict: it deep-copies the article
    if len(doc.url) > CARRIED_URL_CHARS:
        del fields["url"]  # rebuilt on arrival from the article's
    if usable_body(doc.article) is not None or _long(doc.text):
        del fields["text"]  # rebuilt on arrival: the article travels once (a blank body beside html has no text)
    fingerprints = {"simhash": f"{doc.simhash:016x}", "figures": figures_hex(doc.figures)}
    return orjson.dumps({**fields, **fingerprints, "received_ms": received_ms})


def _long(text: str) -> bool:
    """Whether `text` is over `CARRIED_TEXT_BYTES` as JSON (a character is one to six bytes there)."""
    return len(text) * 6 > CARRIED_TEXT_BYTES and len(orjson.dumps(text)) > CARRIED_TEXT_BYTES


def read_stage_record(raw: bytes) -> tuple[Document, int]:
    """The document and its arrival time; KeyError, ValueError or TypeError when malformed."""
    record = orjson.loads(raw)
    if not isinstance(record.get("article"), dict) or not isinstance(record.get("published_at"), int):
        raise TypeError("stage record has a malformed article or published_at")
    if "text" not in record:
        record["text"] = article_text(record["article"])  # the page admitted it: no minimum again
    record.setdefault("version_of", None)
    record.setdefault("figures", None)
    record.setdefault("url", record["article"].get("url"))
    fields = {name: record[name] for name in _FIELDS}
    if not isinstance(fields["text"], str):
        raise TypeError("stage record has neither a text nor an article body")
    fields["simhash"] = int(fields["simhash"], 16)
    # A record of the version before the figure check (a deploy rolling) carries none: read off its text.
    fields["figures"] = (
        figures_from_hex(fields["figures"]) if fields["figures"] is not None else text_figures(fields["text"])
    )
    return Document(**fields), int(record["received_ms"])


def rejected_record(reason: str, raw: bytes, origin: dict[str, Any], max_bytes: int | None = None) -> bytes:
    """An `articles.rejected` record: why, where from, and the original bytes.

    The bytes come back as text when they are UTF-8, else base64 (`raw_base64`). With
    `max_bytes` (what the broker accepts), bytes that would not fit are cut, and
    `raw_bytes` gives their full length: the reason always reaches the topic. A reason
    is cut to `REASON_CHARS`, so that the record's bytes have the room.
    """
    if len(reason) > REASON_CHARS:
        reason = f"{reason[:REASON_CHARS]}... ({len(reason):,} characters)"
    record: dict[str, Any] = {"reason": reason, "rejected_at": now_rfc3339(), **origin}
    try:
        text: str | None = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    whole = {**record, "raw": text} if text is not None else {**record, "raw_base64": _base64(raw)}
    if max_bytes is None:
        return orjson.dumps(whole)
    fits = max_bytes - _BATCH_BYTES
    if len(raw) <= fits and len(value := orjson.dumps(whole)) <= fits:  # longer bytes cannot fit: JSON spells
        return value  # a byte in one byte at least
    record["raw_bytes"] = len(raw)
    if text is None:
        room = max(0, fits - len(orjson.dumps({**record, "raw_base64": ""})))
        return orjson.dumps({**record, "raw_base64": _base64(raw[: room // 4 * 3])})
    # JSON spells a character in one byte to six ("\u0001"): the text is cut to the characters whose spelling fits.
    room = max(0, fits - len(orjson.dumps({**record, "raw": ""})))
    text = text[:room]
    while len(spelled := orjson.dumps(text)) - 2 > room:
        text = text[: len(text) * room // (len(spelled) - 2)]
    return orjson.dumps({**record, "raw": text})


def _base64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")

"""The final verdict of every document, from links files or the links topic.

A document may have several link records: the cascade's, then a relink's (a
person's decision or a new cut-off, verdict `unlinked` or a new canonical). Its
verdict is its last record: in files, the last in file order (files in the
order given); in the topic, the highest `seq`, then the highest offset
(`streams.kafka.journal`). The report counts only these final verdicts.

Reading is lenient where replay is strict: a report is read to find out what
went on, so a line that is no link record is skipped and described, never
fatal. Only the fields the report needs are checked, and a record from a later
version of the format (new optional fields) still counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from streams.config import Settings
from streams.core.model import Link
from streams.records.article import CONTROL
from streams.records.output import read_link_record

STAGES = ("url", "content", "simhash", "semantic")
NO_STAGE = "none"
"""The stage key of a verdict no stage gave: `unique` and `unlinked` documents."""
VERDICTS = ("unique", "duplicate", "review", "unlinked")
CANONICAL_VERDICTS = frozenset({"unique", "unlinked"})
"""Verdicts of a canonical: others may link to it."""
SCORE_RANGES = {"simhash": (0.0, 64.0)}
"""What a stage's score can be (a Hamming distance of 64 bits); any other score is a cosine (rounding aside)."""
COSINE = (-1.001, 1.001)


@dataclass(frozen=True, slots=True)
class Decision:
    """A document's verdict as its link record states it, reduced to what the report counts."""

    doc_id: str
    verdict: str
    canonical_id: str
    stage: str
    """One of STAGES, or NO_STAGE."""
    score: float | None
    linked_at: datetime
    """When the verdict was given (UTC): the day it is counted on."""
    language: str | None
    model: str | None
    decided_by: str
    """`cascade` (also when the record does not say), `person` or `threshold`."""

    @property
    def canonical(self) -> bool:
        return self.verdict in CANONICAL_VERDICTS


def parse_decision(record: Any) -> Decision:
    """A link record to a Decision; ValueError saying what is wrong with it."""
    if not isinstance(record, dict):
        raise ValueError(f"a JSON {type(record).__name__}, not a link record")
    missing = [name for name in ("doc_id", "verdict", "canonical_id", "linked_at") if name not in record]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")
    doc_id, canonical_id = record["doc_id"], record["canonical_id"]
    if not isinstance(doc_id, str) or not doc_id or not isinstance(canonical_id, str) or not canonical_id:
        raise ValueError("doc_id and canonical_id must be non-empty strings")
    if CONTROL.search(doc_id) or CONTROL.search(canonical_id):  # as the input's ids and replay's
        raise ValueError(f"doc_id and canonical_id must have no control characters, got {doc_id!r}, {canonical_id!r}")
    verdict = record["verdict"]
    if verdict not in VERDICTS:
        raise ValueError(f"unknown verdict {verdict!r}")
    stage = record.get("stage")
    if stage is not None and stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}")
    if stage is None and verdict not in CANONICAL_VERDICTS:
        raise ValueError(f"a {verdict} verdict without a stage")
    score = record.get("score")
    if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)):
        raise ValueError(f"score must be a number or null, got {score!r}")
    low, high = SCORE_RANGES.get(stage, COSINE)
    if score is not None and not low <= score <= high:
        raise ValueError(f"a {stage} score must be from {low:g} to {high:g}, got {score!r}")
    language, model, decided_by = record.get("language"), record.get("model"), record.get("decided_by")
    for name, value in (("language", language), ("model", model), ("decided_by", decided_by)):
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{name} must be a string, got {value!r}")
    return Decision(
        doc_id=doc_id,
        verdict=verdict,
        canonical_id=canonical_id,
        stage=stage or NO_STAGE,
        score=float(score) if score is not None else None,
        linked_at=_timestamp(record["linked_at"]),
        language=language,
        model=model,
        decided_by=decided_by or "cascade",
    )


def _timestamp(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValueError(f"linked_at must be an RFC 3339 string, got {value!r}")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"linked_at {value!r} is no RFC 3339 time") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


@dataclass
class FinalVerdicts:
    """The last verdict of every document read, in the order they were last decided."""

    source: str
    decisions: dict[str, Decision] = field(default_factory=dict)
    records: int = 0
    """Link records read, superseded and unreadable ones included."""
    bad: list[str] = field(default_factory=list)
    """One line per record skipped: where it is and why."""

    def decide(self, decision: Decision) -> None:
        """A later record of a document replaces its earlier one (and moves it to the end)."""
        self.decisions.pop(decision.doc_id, None)
        self.decisions[decision.doc_id] = decision


def read_files(sources: list[str]) -> FinalVerdicts:
    """Final verdicts of links.jsonl files (.gz, `-` for stdin), read in the order given."""
    from streams.runner.jsonl import read_lines

    final = FinalVerdicts(source=", ".join(sources))
    for line in read_lines(sources):
        final.records += 1
        try:
            final.decide(parse_decision(orjson.loads(line.raw)))
        except (orjson.JSONDecodeError, ValueError) as exc:
            why = "not JSON" if isinstance(exc, orjson.JSONDecodeError) else str(exc)
            final.bad.append(f"{line.source}:{line.line_no}: {why}")
    return final


def read_topic(settings: Settings) -> FinalVerdicts:
    """Final verdicts of the links topic (`settings.topics.links`), read to its end now."""
    from streams.kafka.journal import latest

    topic = settings.topics.links
    journal = latest(settings, topic, _decision_or_why, _sent_again)
    final = FinalVerdicts(source=topic, records=journal.read, bad=list(journal.bad))
    for key, said in journal.records.items():
        if isinstance(said, ValueError):
            position = journal.positions[key]
            final.bad.append(f"{topic}[{position.partition}]@{position.offset}: {said}")
            continue
        final.decide(said[0])
    return final


def _decision_or_why(record: dict[str, Any]) -> tuple[Decision, Link | None] | ValueError:
    """What the report keeps of a link record as it reads the topic: its decision and its link as the replay
    reads it (None where the replay skips it), or why it has no decision."""
    from streams.kafka.replay import UNREADABLE

    try:
        decision = parse_decision(record)
    except ValueError as exc:
        return exc
    try:
        link = read_link_record({name: value for name, value in record.items() if name != "vector"}).link
    except UNREADABLE:
        link = None
    return decision, link


def _sent_again(later: Any, kept: Any) -> bool:
    """Whether a document's later record is its kept one sent again (`streams.kafka.replay.sent_again`): a
    redelivered document's verdict, which the worker sends again without the relink's `decided_by` and with
    the time it was sent again; the record that gave the verdict counts, as the replay and the relink keep it."""
    from streams.kafka.replay import sent_again

    if isinstance(later, ValueError) or isinstance(kept, ValueError) or None in (later[1], kept[1]):
        return False
    return sent_again(later[1], kept[1])

"""Candidate pairs and people's labels: the files calibration, labelling and review share.

`pairs.jsonl` (schemas/pair.schema.json) holds one pair of documents a line: `a`, the later
document, against `b`, the canonical it was compared to, with the score, the similarity band and
the model. `labels.jsonl` (schemas/label.schema.json) holds the same fields plus `label` (true: a
duplicate), `labelled_at` and optionally `labelled_by`. Labels are only ever appended, each one
fsync'd, so a crash loses at most the label being written; a pair labelled again gets a new line,
and the last label of a pair (a, b, model) wins.

Thresholds are chosen per similarity band (DESIGN.md), so the eight bands live here, once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from streams.records.output import now_rfc3339
from streams.records.schemas import SchemaError, validator

PAIR = "pair"
LABEL = "label"

BANDS: tuple[tuple[float, float], ...] = (
    (0.75, 0.80),
    (0.80, 0.85),
    (0.85, 0.90),
    (0.90, 0.92),
    (0.92, 0.94),
    (0.94, 0.96),
    (0.96, 0.98),
    (0.98, 1.00),
)
"""Similarity bands, (low, high): low inclusive, high exclusive, the last includes 1.0.

Narrower near the top, where the link and review cut-offs are chosen."""

# A cosine of two unit vectors can come out a hair above 1.0 in float32; it is still the top band.
_ONE_WITH_ROUNDING = 1.0 + 1e-6


def band_label(low: float, high: float) -> str:
    """The band's name as files and tables write it: `0.90-0.92`."""
    return f"{low:.2f}-{high:.2f}"


BAND_LABELS: tuple[str, ...] = tuple(band_label(low, high) for low, high in BANDS)


def is_cosine(score: float) -> bool:
    """Whether a score can be a cosine (to float32 rounding): anything else counted in a band would move a cut-off."""
    return -_ONE_WITH_ROUNDING <= score <= _ONE_WITH_ROUNDING


def band_of(score: float) -> str | None:
    """The band a score falls in (`0.90-0.92`), or None below 0.75 (or above 1.0: no cosine)."""
    if score > _ONE_WITH_ROUNDING:
        return None
    for low, high in BANDS:
        if low <= score < high:
            return band_label(low, high)
    return BAND_LABELS[-1] if score >= BANDS[-1][0] else None


def band_bounds(label: str) -> tuple[float, float]:
    """(low, high) of a band named like `0.90-0.92`; ValueError for a name that is no band."""
    try:
        return BANDS[BAND_LABELS.index(label)]
    except ValueError:
        raise ValueError(f"unknown band {label!r}; bands are {', '.join(BAND_LABELS)}") from None


PairKey = tuple[str, str, str]
"""(a, b, model): what identifies a pair; a later label of the same key replaces an earlier one."""


@dataclass(frozen=True)
class Pair:
    """One candidate pair: document `a` (the later one) against `b` (the canonical it was compared to).

    `extra` keeps fields this version does not know, so they survive into the label.
    """

    a: str
    b: str
    score: float
    band: str
    model: str
    same_language: bool
    a_title: str | None = None
    a_text: str | None = None
    a_language: str | None = None
    b_title: str | None = None
    b_text: str | None = None
    b_language: str | None = None
    source: str | None = None
    verdict: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def key(self) -> PairKey:
        return (self.a, self.b, self.model)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Pair:
        """A pair from a pairs.jsonl (or labels.jsonl) record that passed its schema."""
        known = {name for name in cls.__dataclass_fields__ if name != "extra"}
        values = {name: record[name] for name in known if name in record}
        values["score"] = float(values["score"])
        extra = {k: v for k, v in record.items() if k not in known and k not in _LABEL_FIELDS}
        return cls(**values, extra=extra)

    def to_record(self) -> dict[str, Any]:
        """The pairs.jsonl record: every known field (optional ones only when set), then the extra ones."""
        record: dict[str, Any] = {
            "a": self.a,
            "b": self.b,
            "score": self.score,
            "band": self.band,
            "model": self.model,
            "same_language": self.same_language,
        }
        for name in ("a_title", "a_text", "a_language", "b_title", "b_text", "b_language", "source", "verdict"):
            value = getattr(self, name)
            if value is not None:
                record[name] = value
        for name, value in self.extra.items():
            record.setdefault(name, value)
        return record


_LABEL_FIELDS = frozenset({"label", "labelled_at", "labelled_by"})


@dataclass
class BandCount:
    """How far labelling has got in one band: pairs in it, pairs labelled, labelled duplicates."""

    total: int = 0
    labelled: int = 0
    duplicates: int = 0


def band_counts(pairs: Iterable[Pair], labels: Mapping[PairKey, bool]) -> dict[tuple[bool, str], BandCount]:
    """Progress per (same_language, band), every band present, same-language first: calibration
    fits same- and cross-language pairs apart, so each needs its own labels in every band."""
    counts = {(same, label): BandCount() for same in (True, False) for label in BAND_LABELS}
    seen: set[PairKey] = set()
    for pair in pairs:
        if pair.key in seen:
            continue
        seen.add(pair.key)
        count = counts.setdefault((pair.same_language, pair.band), BandCount())
        count.total += 1
        if pair.key in labels:
            count.labelled += 1
            count.duplicates += bool(labels[pair.key])
    return counts


class PairFileError(ValueError):
    """A pairs or labels file that cannot be read; the message names the file and the line."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
"""Control characters: none belongs in a model's name, which goes into thresholds files and onto screens."""

BOM = b"\xef\xbb\xbf"

OnTorn = Callable[[str], None]
"""Told (with a message naming the file and line) of a last line torn by a crash, which is then skipped."""


def _records(path: Path, schema: str, what: str, on_torn: OnTorn | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) for each non-blank line, validated against `schema`.

    A last line without its newline that is no JSON is a write a crash tore (a torn object never
    parses): refused, unless `on_torn` is given, which is told and the line skipped.
    """
    check = validator(schema)
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            if number == 1 and line.startswith(BOM):
                line = line[3:]
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                if on_torn is not None and not line.endswith(b"\n"):
                    on_torn(f"{path}, line {number}: skipped, a {what} torn by a crash (no newline, invalid JSON)")
                    continue
                raise PairFileError(f"{path}, line {number}: not a {what}: invalid JSON ({exc.msg})") from None
            try:
                check(record)
            except SchemaError as exc:
                problem = exc.message.replace("data", what, 1)
                raise PairFileError(f"{path}, line {number}: not a {what}: {problem}") from None
            problem = _unusable(record)
            if problem is not None:
                raise PairFileError(f"{path}, line {number}: not a {what}: {problem}")
            yield number, record


def _unusable(record: Mapping[str, Any]) -> str | None:
    """What the schema lets through that a fit or a thresholds file cannot take, or None."""
    if not is_cosine(float(record["score"])):
        return f"score {record['score']} is no cosine"
    if _CONTROL.search(record["model"]):
        return f"a control character in model {record['model']!r}"
    return None


def read_pairs(path: str | Path) -> list[Pair]:
    """Every pair of a pairs.jsonl file, in file order; PairFileError names the first bad line."""
    return [Pair.from_record(record) for _, record in _records(Path(path), PAIR, "pair")]


def write_pairs(path: str | Path, pairs: Iterable[Pair]) -> int:
    """Write pairs.jsonl (replacing the file), each record checked against the pair schema; returns the count."""
    check = validator(PAIR)
    count = 0
    with open(path, "wb") as handle:
        for pair in pairs:
            record = pair.to_record()
            check(record)
            handle.write(orjson.dumps(record) + b"\n")
            count += 1
    return count


def read_label_records(path: str | Path, on_torn: OnTorn | None = None) -> Iterator[dict[str, Any]]:
    """Every label record of a labels.jsonl file in file order, earlier labels of a pair included.

    A last line torn by a crash is refused, or skipped and told to `on_torn` when given.
    """
    for _, record in _records(Path(path), LABEL, "label", on_torn):
        yield record


def read_labels(path: str | Path, on_torn: OnTorn | None = None) -> dict[PairKey, dict[str, Any]]:
    """The label in force per pair (a, b, model): the last one in the file, in the order of their
    lines, so that a pair relabelled under another model is read after the label it replaces.
    An absent file has none; a torn last line as `read_label_records`."""
    path = Path(path)
    if not path.exists():
        return {}
    labels: dict[PairKey, dict[str, Any]] = {}
    for record in read_label_records(path, on_torn):
        key = (record["a"], record["b"], record["model"])
        labels.pop(key, None)
        labels[key] = record
    return labels


def label_record(pair: Pair, label: bool, by: str | None = None, at: str | None = None) -> dict[str, Any]:
    """The labels.jsonl record of a decision: the pair's fields plus the label, its time and who."""
    record = pair.to_record()
    record["label"] = bool(label)
    record["labelled_at"] = at or now_rfc3339()
    if by:
        record["labelled_by"] = by
    return record


class LabelWriter:
    """Appends labels to a labels.jsonl file, each fsync'd before `write` returns.

    A label is a person's time: once the screen has moved on it must be on disk. A line torn by a
    crash (no newline at the end, no JSON: a torn object never parses) is dropped on opening; a
    last line that parses is a whole line, a person's even if the schema refuses it (the readers
    then name it), and only gets its newline. Either way the next label starts on a line of its own.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise IsADirectoryError(f"{self.path} is a directory, not a labels file")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        created = not self.path.exists()
        self._repair_torn_tail()
        self._handle: IO[bytes] = open(self.path, "ab")  # noqa: SIM115  (held open for the session)
        if created:
            _fsync_dir(self.path.parent)

    def _repair_torn_tail(self) -> None:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with open(self.path, "r+b") as handle:
            data = handle.read()
            if data.endswith(b"\n"):
                return
            start = data.rfind(b"\n") + 1
            tail = data[start:].removeprefix(BOM) if start == 0 else data[start:]
            try:
                orjson.loads(tail)
            except orjson.JSONDecodeError:
                handle.truncate(start)
            else:
                handle.write(b"\n")
            handle.flush()
            os.fsync(handle.fileno())

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one label record (checked first as the readers check it) and fsync it."""
        validator(LABEL)(dict(record))
        problem = _unusable(record)
        if problem is not None:
            raise ValueError(f"label of {record['a']} against {record['b']} not written: {problem}")
        self._handle.write(orjson.dumps(record) + b"\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def label(self, pair: Pair, label: bool, by: str | None = None) -> dict[str, Any]:
        """Record a decision on a pair now; returns the record written."""
        record = label_record(pair, label, by)
        self.write(record)
        return record

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> LabelWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fsync_dir(directory: Path) -> None:
    """Make a new file's directory entry durable too (POSIX; a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

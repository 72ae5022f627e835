"""Drift: the last period (day or week of `linked_at`) against the one before it, with alarms.

A threshold that drifts, a model that changed or a group that percolates shows
as a jump in one of three numbers, each compared between the last period and
the calendar period before it:

- the share of documents the semantic stage linked or sent to review;
- the semantic score quantiles (p10 and p50, same-language and cross-language
  apart, since they sit around different cut-offs). Cosines live between 0.8
  and 1, where a ratio never reaches 2; what moves is the distance from 1 (a
  median from 0.99 to 0.96 is four times as far from identical), so that is
  what is compared;
- the largest group as it grew in the period: its canonical plus the
  duplicates linked to it in that period (a group of 14 that takes 9,000
  duplicates in a day is the percolation the design warns about).

An alarm is a value at least `factor` times its value in the previous period,
or above zero after zero. A period is the UTC day or ISO week of `linked_at`,
the time of the verdict: a relink counts in the period it was made.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, timedelta
from enum import StrEnum
from typing import Any

import numpy as np

from streams.reporting.verdicts import Decision


class Period(StrEnum):
    DAY = "day"
    WEEK = "week"


def period_start(moment: date, period: Period) -> date:
    """The first day of the period `moment` falls in (a week starts on Monday, as ISO weeks do)."""
    return moment if period is Period.DAY else moment - timedelta(days=moment.weekday())


def period_label(start: date, period: Period) -> str:
    if period is Period.DAY:
        return start.isoformat()
    year, week, _ = start.isocalendar()
    return f"{year}-W{week:02d}"


PAIR_KINDS = ("same_language", "cross_language")
DRIFT_QUANTILES = (("p50", 0.5), ("p10", 0.1))


@dataclass
class PeriodStats:
    """What drift compares, for one period."""

    label: str
    start: date
    documents: int = 0
    semantic: int = 0
    """Documents whose final verdict the semantic stage gave (duplicate or review)."""
    scores: dict[str, list[float]] = field(default_factory=dict)
    """Pair kind (same_language, cross_language) -> semantic scores."""
    joined: Counter[str] = field(default_factory=Counter)
    """Canonical id -> duplicates linked to it in this period."""

    @property
    def semantic_share(self) -> float:
        return self.semantic / self.documents if self.documents else 0.0

    @property
    def largest_group(self) -> int:
        """Canonical plus the duplicates it took in this period; 1 with no duplicates at all."""
        return 1 + max(self.joined.values(), default=0) if self.documents else 0

    def quantile(self, kind: str, q: float) -> float | None:
        values = self.scores.get(kind)
        return round(float(np.quantile(values, q)), 4) if values else None

    def to_json(self) -> dict[str, Any]:
        return {
            "period": self.label,
            "documents": self.documents,
            "semantic": self.semantic,
            "semantic_share": round(self.semantic_share, 4),
            "largest_group": self.largest_group,
            **{f"semantic_{name}_{kind}": self.quantile(kind, q) for kind in PAIR_KINDS for name, q in DRIFT_QUANTILES},
        }


@dataclass(frozen=True)
class DriftMetric:
    key: str
    label: str
    previous: float | None
    current: float | None
    compared: str
    """`value`, or `distance from 1` for cosines."""
    ratio: float | None
    """current / previous of what is compared; None when either is missing or the previous is 0."""
    alarm: bool

    @property
    def change(self) -> str:
        """The change as a person reads it: `x2.50`, `from 0`, or `-` when not compared."""
        if self.ratio is not None:
            return f"x{self.ratio:.2f}"
        return "from 0" if self.alarm else "-"

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.key,
            "label": self.label,
            "previous": self.previous,
            "current": self.current,
            "compared": self.compared,
            "ratio": None if self.ratio is None else round(self.ratio, 3),
            "alarm": self.alarm,
        }


def _compare(previous: float | None, current: float | None, factor: float) -> tuple[float | None, bool]:
    if previous is None or current is None:
        return None, False
    if previous <= 0:
        return None, current > 0
    ratio = current / previous
    return ratio, ratio >= factor


@dataclass
class Drift:
    period: Period
    factor: float
    periods: list[PeriodStats]
    """Every period with documents, in order (for a plot of the whole history)."""
    current: PeriodStats | None
    previous: PeriodStats | None
    """The calendar period before `current`; None when it had no documents (nothing to compare)."""
    metrics: list[DriftMetric]

    @property
    def alarm(self) -> bool:
        return any(metric.alarm for metric in self.metrics)

    @property
    def previous_label(self) -> str | None:
        if self.current is None:
            return None
        step = timedelta(days=1 if self.period is Period.DAY else 7)
        return period_label(self.current.start - step, self.period)

    def to_json(self) -> dict[str, Any]:
        return {
            "period": self.period.value,
            "alarm_factor": self.factor,
            "current": self.current.label if self.current else None,
            "previous": self.previous_label,
            "alarm": self.alarm,
            "alarms": [metric.key for metric in self.metrics if metric.alarm],
            "metrics": [metric.to_json() for metric in self.metrics],
            "periods": [stats.to_json() for stats in self.periods],
        }


def period_stats(decisions: Iterable[Decision], pair_kinds: dict[str, str], period: Period) -> list[PeriodStats]:
    """Statistics per period; `pair_kinds` maps a semantic verdict's doc_id to its pair kind."""
    found: dict[date, PeriodStats] = {}
    for decision in decisions:
        start = period_start(decision.linked_at.date(), period)
        stats = found.get(start)
        if stats is None:
            stats = found[start] = PeriodStats(period_label(start, period), start)
        stats.documents += 1
        if decision.stage == "semantic" and decision.verdict in ("duplicate", "review"):
            stats.semantic += 1
            kind = pair_kinds.get(decision.doc_id)
            if decision.score is not None and kind in PAIR_KINDS:
                stats.scores.setdefault(kind, []).append(decision.score)
        if decision.verdict == "duplicate" and decision.canonical_id != decision.doc_id:
            stats.joined[decision.canonical_id] += 1
    return [found[start] for start in sorted(found)]


def parse_period(label: str, period: Period) -> date:
    """The first day of a period named as the report names it: `2026-03-04` or `2026-W10`."""
    try:
        if period is Period.DAY:
            return date.fromisoformat(label)
        year, week = label.split("-W")
        return date.fromisocalendar(int(year), int(week), 1)
    except ValueError:
        example = "2026-03-04" if period is Period.DAY else "2026-W10"
        raise ValueError(f"{label!r} names no {period.value}; write it as {example}") from None


def drift(periods: list[PeriodStats], period: Period, factor: float, last: str | None = None) -> Drift:
    """Compare the last period (or the one named `last`) with the calendar period before it.

    Naming it lets a job that runs after midnight judge yesterday, a whole day, rather than the
    minutes of today it would otherwise take for the last period.
    """
    if not factor > 1:  # NaN too, which would switch the alarm off
        raise ValueError(f"the alarm factor must be above 1, got {factor}")
    current = periods[-1] if periods else None
    if last is not None:
        start = parse_period(last, period)
        current = next((stats for stats in periods if stats.start == start), PeriodStats(last, start))
    previous = None
    if current is not None and current.documents:
        step = timedelta(days=1 if period is Period.DAY else 7)
        previous = next((stats for stats in periods if stats.start == current.start - step), None)
    metrics: list[DriftMetric] = []
    if current is not None and previous is not None:
        share = (previous.semantic_share, current.semantic_share)
        shown = (round(share[0], 4), round(share[1], 4))
        metrics.append(DriftMetric("semantic_share", "semantic share", *shown, "value", *_compare(*share, factor)))
        for kind in PAIR_KINDS:
            for name, q in DRIFT_QUANTILES:
                before, now = previous.quantile(kind, q), current.quantile(kind, q)
                distances = (None if before is None else 1 - before, None if now is None else 1 - now)
                label = f"semantic {name} ({kind.replace('_language', '')}-language)"
                metric = DriftMetric(
                    f"semantic_{name}_{kind}", label, before, now, "distance from 1", *_compare(*distances, factor)
                )
                metrics.append(metric)
        sizes = (float(previous.largest_group), float(current.largest_group))
        metrics.append(DriftMetric("largest_group", "largest group", *sizes, "value", *_compare(*sizes, factor)))
    return Drift(period, factor, periods, current, previous, metrics)

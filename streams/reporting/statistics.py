"""Counts over final verdicts: per stage and verdict, per day, score histograms, group sizes.

Scores are split the way thresholds are: SimHash distances on their own, and
semantic cosines in same-language and cross-language pairs (a multilingual
model scores a translation lower than a paraphrase, so one histogram would mix
two distributions with two cut-offs). Whether a pair crosses languages is the
document's language against its canonical's, taken from the canonical's own
record; a canonical whose record was not read leaves the pair of unknown language.

A group is a canonical and the documents whose final verdict is a duplicate of
it: a star, so its size is one plus its duplicates. Documents under review are
in no group (nobody has confirmed them).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streams.reporting.verdicts import NO_STAGE, STAGES, Decision

STAGE_KEYS = (*STAGES, NO_STAGE)
VERDICTS_OF_STAGE = {
    **{stage: ("duplicate", "review") for stage in STAGES},
    NO_STAGE: ("unique", "unlinked"),
}
"""The verdicts each stage key always shows, zero or not, so readers of `by_stage` find them."""
SCORE_GROUPS = ("simhash", "semantic_same_language", "semantic_cross_language", "semantic_unknown_language")
QUANTILES = (0.1, 0.5, 0.9)
SIZE_BUCKETS = ((1, 1), (2, 2), (3, 5), (6, 10), (11, 20), (21, 50), (51, 100), (101, 1000), (1001, None))
"""Group sizes as the terminal table shows them: every size up to 2, then wider and wider."""


def day_of(decision: Decision) -> str:
    return decision.linked_at.date().isoformat()


def by_stage(decisions: Iterable[Decision]) -> dict[str, dict[str, int]]:
    """{stage: {verdict: count}} with every stage key and its usual verdicts present."""
    counts: dict[str, dict[str, int]] = {stage: dict.fromkeys(VERDICTS_OF_STAGE[stage], 0) for stage in STAGE_KEYS}
    for decision in decisions:
        row = counts[decision.stage]
        row[decision.verdict] = row.get(decision.verdict, 0) + 1
    return counts


def by_day(decisions: Iterable[Decision]) -> dict[str, dict[str, dict[str, int]]]:
    """{day: {stage: {verdict: count}}}, days in order, only counts above zero."""
    counts: dict[str, dict[str, Counter[str]]] = {}
    for decision in decisions:
        counts.setdefault(day_of(decision), {}).setdefault(decision.stage, Counter())[decision.verdict] += 1
    return {
        day: {stage: dict(counts[day][stage]) for stage in STAGE_KEYS if stage in counts[day]} for day in sorted(counts)
    }


def pair_kind(decision: Decision, decisions: Mapping[str, Decision]) -> str:
    """`same_language`, `cross_language`, or `unknown_language` when either language is not known."""
    canonical = decisions.get(decision.canonical_id)
    if decision.language is None or canonical is None or canonical.language is None:
        return "unknown_language"
    return "same_language" if canonical.language == decision.language else "cross_language"


def score_group(decision: Decision, decisions: Mapping[str, Decision]) -> str | None:
    """Which histogram a verdict's score belongs to; None for verdicts without a score."""
    if decision.score is None or decision.verdict not in ("duplicate", "review"):
        return None
    if decision.stage == "simhash":
        return "simhash"
    if decision.stage == "semantic":
        return f"semantic_{pair_kind(decision, decisions)}"
    return None


def quantiles(values: list[float]) -> dict[str, float | None]:
    """p10, p50 and p90 (linear interpolation), None without values."""
    if not values:
        return {f"p{round(q * 100)}": None for q in QUANTILES}
    points = np.quantile(np.asarray(values, dtype=np.float64), QUANTILES)
    return {f"p{round(q * 100)}": round(float(p), 4) for q, p in zip(QUANTILES, points, strict=True)}


def score_bin(group: str, score: float) -> str:
    """A Hamming distance is its own bin; a cosine falls in a bin 0.01 wide, named by its lower edge."""
    if group == "simhash":
        return str(round(score))
    low = min(math.floor(round(score * 100, 6)), 99) / 100
    return f"{low:.2f}"


@dataclass
class ScoreStats:
    """The scores of one group: their histogram per verdict, quantiles and the raw values (for plots)."""

    group: str
    values: dict[str, list[float]] = field(default_factory=dict)
    """verdict -> scores."""

    def add(self, verdict: str, score: float) -> None:
        self.values.setdefault(verdict, []).append(score)

    @property
    def all_values(self) -> list[float]:
        return [score for scores in self.values.values() for score in scores]

    def to_json(self) -> dict[str, Any]:
        histogram: dict[str, dict[str, int]] = {}
        for verdict, scores in sorted(self.values.items()):
            counted = Counter(score_bin(self.group, score) for score in scores)
            histogram[verdict] = {name: counted[name] for name in sorted(counted, key=float)}
        values = self.all_values
        return {
            "n": len(values),
            "min": min(values, default=None),
            "max": max(values, default=None),
            **quantiles(values),
            "histogram": histogram,
        }


def scores(decisions: Mapping[str, Decision]) -> dict[str, ScoreStats]:
    """Score statistics of the SimHash and semantic verdicts, one entry per group that has scores."""
    found: dict[str, ScoreStats] = {}
    for decision in decisions.values():
        group = score_group(decision, decisions)
        if group is not None and decision.score is not None:
            found.setdefault(group, ScoreStats(group)).add(decision.verdict, decision.score)
    return {group: found[group] for group in SCORE_GROUPS if group in found}


@dataclass(frozen=True, slots=True)
class Group:
    canonical_id: str
    size: int
    """The canonical and its duplicates."""
    stages: dict[str, int]
    """Duplicates per stage that linked them."""
    language: str | None
    """The canonical's language, where its record was read."""


@dataclass
class GroupStats:
    groups: int
    sizes: dict[int, int]
    """size -> groups of that size (1: canonicals nobody links to)."""
    largest: list[Group]

    def bucketed(self) -> list[tuple[str, int]]:
        """Group counts per size bucket (SIZE_BUCKETS), for a short table."""
        rows = []
        for low, high in SIZE_BUCKETS:
            count = sum(n for size, n in self.sizes.items() if size >= low and (high is None or size <= high))
            label = str(low) if low == high else f"{low}-{high}" if high is not None else f">{low - 1}"
            rows.append((label, count))
        return rows

    def to_json(self) -> dict[str, Any]:
        return {
            "groups": self.groups,
            "sizes": {str(size): count for size, count in sorted(self.sizes.items())},
            "largest": [
                {"canonical_id": g.canonical_id, "size": g.size, "stages": g.stages, "language": g.language}
                for g in self.largest
            ],
        }


def groups(decisions: Mapping[str, Decision], top: int = 10) -> GroupStats:
    """Every canonical's group size (canonicals without duplicates count as 1), and the `top` largest."""
    members: dict[str, Counter[str]] = {
        doc_id: Counter() for doc_id, decision in decisions.items() if decision.canonical
    }
    for decision in decisions.values():
        if decision.verdict == "duplicate" and decision.canonical_id != decision.doc_id:
            members.setdefault(decision.canonical_id, Counter())[decision.stage] += 1
    sizes = Counter(1 + stages.total() for stages in members.values())
    ranked = sorted(members.items(), key=lambda item: -item[1].total())[:top]
    largest = [
        Group(
            canonical_id=canonical_id,
            size=1 + stages.total(),
            stages={stage: stages[stage] for stage in STAGES if stages[stage]},
            language=decisions[canonical_id].language if canonical_id in decisions else None,
        )
        for canonical_id, stages in ranked
        if stages.total()
    ]
    return GroupStats(groups=len(members), sizes=dict(sizes), largest=largest)

"""The report as one value: what the terminal table, `--json` and `--html` all show.

`to_json()` is a stable interface (other tools read `dedup report --json`): at
least `by_stage` = {stage: {verdict: count}} over the final verdict of every
document, stage one of url, content, simhash, semantic or `none` (the verdicts
no stage gave: unique and unlinked). Keys are only ever added.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from streams.reporting.drift import Drift, Period, drift, period_stats
from streams.reporting.statistics import GroupStats, ScoreStats, by_day, by_stage, groups, pair_kind, scores
from streams.reporting.verdicts import VERDICTS, FinalVerdicts


@dataclass
class Report:
    source: str
    documents: int
    records: int
    bad: list[str]
    by_stage: dict[str, dict[str, int]]
    by_verdict: dict[str, int]
    by_day: dict[str, dict[str, dict[str, int]]]
    decided_by: dict[str, int]
    scores: dict[str, ScoreStats]
    groups: GroupStats
    drift: Drift

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "documents": self.documents,
            "records": self.records,
            "unreadable": len(self.bad),
            "by_stage": self.by_stage,
            "by_verdict": self.by_verdict,
            "by_day": self.by_day,
            "decided_by": self.decided_by,
            "scores": {group: stats.to_json() for group, stats in self.scores.items()},
            "groups": self.groups.to_json(),
            "drift": self.drift.to_json(),
        }


def build_report(
    final: FinalVerdicts,
    period: Period = Period.DAY,
    alarm_factor: float = 2.0,
    top: int = 10,
    last: str | None = None,
) -> Report:
    """Everything the report shows, from the final verdicts; drift judges `last` (default: the latest period)."""
    decisions = final.decisions
    verdicts = Counter(decision.verdict for decision in decisions.values())
    kinds = {
        doc_id: pair_kind(decision, decisions) for doc_id, decision in decisions.items() if decision.stage == "semantic"
    }
    return Report(
        source=final.source,
        documents=len(decisions),
        records=final.records,
        bad=final.bad,
        by_stage=by_stage(decisions.values()),
        by_verdict={verdict: verdicts[verdict] for verdict in VERDICTS},
        by_day=by_day(decisions.values()),
        decided_by=dict(Counter(decision.decided_by for decision in decisions.values()).most_common()),
        scores=scores(decisions),
        groups=groups(decisions, top),
        drift=drift(period_stats(decisions.values(), kinds, period), period, alarm_factor, last),
    )

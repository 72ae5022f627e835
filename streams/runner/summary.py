"""What a run did, in numbers: counts, duplicates and score quantiles per stage, time per stage."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rich.table import Table

from streams.core.model import Link, Stage, Verdict
from streams.reporting.inert import inert

QUANTILES = (0.0, 0.5, 0.9, 1.0)


@dataclass
class RunStats:
    read: int = 0
    rejected: int = 0
    repeated: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    linked_by_stage: Counter[str] = field(default_factory=Counter)
    scores: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    seconds: Counter[str] = field(default_factory=Counter)
    largest_group: int = 1
    largest_group_id: str | None = None
    elapsed: float = 0.0
    stages: tuple[Stage, ...] = tuple(Stage)
    """The stages the run had enabled; the summary leaves the others out."""
    already_written: int = 0
    """Documents whose verdict the outputs had already: a run resumed after Ctrl-C or a crash."""
    notes: list[str] = field(default_factory=list)
    """What the run repaired or skipped on the way, for the person who ran it."""
    owed: list[str] = field(default_factory=list)
    """Canonicals whose article deduped.jsonl still lacks (a kill between the links and the articles, and no run
    has read their documents since)."""
    expired: int = 0
    """State entries and vectors the sweep removed: past their retention (README, "Retention")."""

    def count(self, link: Link, repeated: bool) -> None:
        """Count a verdict; a redelivered document's repeated verdict is counted apart."""
        if repeated:
            self.repeated += 1
            return
        self.verdicts[link.verdict.value] += 1
        if link.stage is not None:
            self.linked_by_stage[f"{link.stage.value}:{link.verdict.value}"] += 1
            if link.score is not None:
                self.scores[link.stage.value].append(link.score)

    def see_group(self, canonical_id: str, size: int) -> None:
        if size > self.largest_group:
            self.largest_group, self.largest_group_id = size, canonical_id

    def as_dict(self) -> dict[str, Any]:
        return {
            "stages": [stage.value for stage in self.stages],
            "read": self.read,
            "rejected": self.rejected,
            "repeated": self.repeated,
            "already_written": self.already_written,
            "expired": self.expired,
            "owed_articles": self.owed,
            "verdicts": dict(self.verdicts),
            "linked_by_stage": dict(self.linked_by_stage),
            "score_quantiles": {
                stage: dict(
                    zip(
                        (f"p{int(q * 100)}" for q in QUANTILES),
                        np.quantile(v, QUANTILES).round(4).tolist(),
                        strict=False,
                    )
                )
                for stage, v in self.scores.items()
                if v
            },
            "largest_group": {"size": self.largest_group, "canonical_id": self.largest_group_id},
            "seconds": {k: round(v, 3) for k, v in self.seconds.items() if k not in self._not_run()},
            "elapsed_seconds": round(self.elapsed, 3),
            "documents_per_second": round(self.read / self.elapsed, 1) if self.elapsed else None,
            "notes": self.notes,
        }

    def _not_run(self) -> set[str]:
        return {stage.value for stage in Stage if stage not in self.stages}

    def table(self) -> Table:
        summary = self.as_dict()
        table = Table(title="dedup run", show_header=True, header_style="bold")
        table.add_column("what")
        table.add_column("count", justify="right")
        table.add_column("score quantiles (min / p50 / p90 / max)")
        table.add_column("seconds", justify="right")
        table.add_row("documents read", str(self.read), "", f"{self.elapsed:.2f}")
        table.add_row("rejected", str(self.rejected), "", "")
        table.add_row("unique", str(self.verdicts[Verdict.UNIQUE.value]), "", "")
        table.add_row("review", str(self.verdicts[Verdict.REVIEW.value]), "", "")
        if self.verdicts[Verdict.UNLINKED.value]:  # redelivered documents a relink made canonicals
            table.add_row("unlinked", str(self.verdicts[Verdict.UNLINKED.value]), "", "")
        if self.repeated:
            table.add_row("already decided (redelivered)", str(self.repeated), "", "")
        if self.already_written:
            table.add_row("already in the outputs (resumed)", str(self.already_written), "", "")
        table.add_row("features (parse, extract, hash)", "", "", f"{self.seconds['features']:.2f}")
        for stage in self.stages:
            dup = self.linked_by_stage[f"{stage.value}:{Verdict.DUPLICATE.value}"]
            rev = self.linked_by_stage[f"{stage.value}:{Verdict.REVIEW.value}"]
            quantiles = summary["score_quantiles"].get(stage.value)
            table.add_row(
                f"duplicates: {stage.value}" + (f" (+{rev} review)" if rev else ""),
                str(dup),
                " / ".join(f"{v:g}" for v in quantiles.values()) if quantiles else "",
                f"{self.seconds[stage.value]:.2f}",
            )
        if self.seconds["embed"]:
            table.add_row("embedding", "", "", f"{self.seconds['embed']:.2f}")
        table.add_row("largest group", str(self.largest_group), inert(self.largest_group_id or ""), "")
        if self.expired:
            table.add_row("expired (past retention)", str(self.expired), "", f"{self.seconds['expire']:.2f}")
        return table

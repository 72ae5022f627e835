"""The report as rich tables, for a person at a terminal (the alarms in red, so they are not missed)."""

from __future__ import annotations

from collections.abc import Iterator

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from streams.reporting.inert import inert
from streams.reporting.report import Report
from streams.reporting.statistics import STAGE_KEYS, STAGES
from streams.reporting.verdicts import VERDICTS


def _number(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if float(value).is_integer() and digits == 0 else f"{value:.{digits}f}"


def verdicts_table(report: Report) -> Table:
    table = Table(title=f"Final verdicts of {report.documents:,} documents ({report.records:,} link records read)")
    table.add_column("stage")
    for verdict in VERDICTS:
        table.add_column(verdict, justify="right")
    table.add_column("total", justify="right", style="bold")
    for stage in STAGE_KEYS:
        row = report.by_stage[stage]
        table.add_row(stage, *(f"{row.get(v, 0):,}" if row.get(v) else "" for v in VERDICTS), f"{sum(row.values()):,}")
    table.add_section()
    table.add_row("total", *(f"{report.by_verdict[v]:,}" for v in VERDICTS), f"{report.documents:,}")
    return table


def days_table(report: Report) -> Table:
    """Per day: documents, canonicals, duplicates per stage, reviews and unlinked documents."""
    table = Table(title="By day (of linked_at, UTC)")
    for name in ("day", "documents", "unique", *STAGES, "review", "unlinked"):
        table.add_column(name, justify="left" if name == "day" else "right")
    for day, stages in report.by_day.items():
        total = sum(count for row in stages.values() for count in row.values())
        duplicates = [stages.get(stage, {}).get("duplicate", 0) for stage in STAGES]
        reviews = sum(row.get("review", 0) for row in stages.values())
        none = stages.get("none", {})
        cells = [total, none.get("unique", 0), *duplicates, reviews, none.get("unlinked", 0)]
        table.add_row(day, *(f"{cell:,}" for cell in cells))
    return table


def scores_table(report: Report) -> Table:
    table = Table(title="Scores (SimHash: Hamming distance; semantic: cosine)")
    for name in ("scores of", "duplicate", "review", "min", "p10", "p50", "p90", "max"):
        table.add_column(name, justify="left" if name == "scores of" else "right")
    for group, stats in report.scores.items():
        summary = stats.to_json()
        digits = 0 if group == "simhash" else 4
        table.add_row(
            group.replace("_", " "),
            f"{len(stats.values.get('duplicate', [])):,}",
            f"{len(stats.values.get('review', [])):,}",
            _number(summary["min"], digits),
            *(_number(summary[key], 1 if group == "simhash" else 4) for key in ("p10", "p50", "p90")),
            _number(summary["max"], digits),
        )
    return table


def groups_tables(report: Report) -> Iterator[Table]:
    sizes = Table(title="Group sizes", caption=f"{report.groups.groups:,} groups")
    sizes.add_column("size")
    sizes.add_column("groups", justify="right")
    for label, count in report.groups.bucketed():
        sizes.add_row(label, f"{count:,}")
    yield sizes
    if report.groups.largest:
        largest = Table(title="Largest groups")
        for name in ("canonical", "language", "size", *STAGES):
            largest.add_column(name, justify="left" if name in ("canonical", "language") else "right")
        for group in report.groups.largest:
            stages = [f"{group.stages[s]:,}" if s in group.stages else "" for s in STAGES]
            largest.add_row(inert(group.canonical_id), inert(group.language or "?"), f"{group.size:,}", *stages)
        yield largest


def drift_table(report: Report) -> RenderableType:
    drift = report.drift
    if drift.current is None:
        return Text("Drift: no documents.")
    if not drift.current.documents:
        return Text(f"Drift: no documents in {drift.current.label}; nothing to compare.")
    if drift.previous is None:
        return Text(
            f"Drift: no documents in {drift.previous_label}, the {drift.period.value} before {drift.current.label};"
            " nothing to compare."
        )
    table = Table(
        title=f"Drift: {drift.current.label} against {drift.previous.label}"
        f" ({drift.previous.documents:,} → {drift.current.documents:,} documents; alarm at x{drift.factor:g})"
    )
    for name in ("metric", "previous", "current", "compared", "change", ""):
        table.add_column(name, justify="right" if name in ("previous", "current", "change") else "left")
    for metric in drift.metrics:
        digits = 0 if metric.key == "largest_group" else 4
        flag = Text("ALARM", style="bold red") if metric.alarm else Text("")
        table.add_row(
            metric.label,
            _number(metric.previous, digits),
            _number(metric.current, digits),
            metric.compared,
            metric.change,
            flag,
            style="red" if metric.alarm else None,
        )
    return table


def render(report: Report) -> RenderableType:
    """All the tables, in reading order."""
    parts: list[RenderableType] = [verdicts_table(report)]
    if report.by_day:
        parts.append(days_table(report))
    if report.scores:
        parts.append(scores_table(report))
    parts.extend(groups_tables(report))
    parts.append(drift_table(report))
    return Group(*parts)


def print_report(report: Report, console: Console) -> None:
    console.print(render(report))

"""The report as one self-contained HTML page: summary tables and plotly figures.

plotly.js is written into the page once (about 4.8 MB), so the page opens
offline, from a mail attachment or a CI artefact, and never fetches anything.
Every figure is a `div.figure` with an id from FIGURES; a figure with nothing to
show still renders, with a note, so the page always has the same figures.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from streams.reporting.report import Report
from streams.reporting.statistics import STAGE_KEYS, STAGES
from streams.reporting.verdicts import VERDICTS

FIGURES = ("verdicts-by-stage", "verdicts-by-day", "simhash-distances", "semantic-scores", "group-sizes", "drift")
"""The ids of the figures every page has, in page order."""
_CONFIG = {"displaylogo": False, "responsive": True}
_PAIR_NAMES = {
    "semantic_same_language": "same language",
    "semantic_cross_language": "cross language",
    "semantic_unknown_language": "canonical not read",
}


def _empty(figure: go.Figure, note: str) -> go.Figure:
    figure.add_annotation(text=note, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return figure


def verdicts_by_stage(report: Report) -> go.Figure:
    figure = go.Figure(
        [
            go.Bar(name=verdict, x=list(STAGE_KEYS), y=[report.by_stage[stage].get(verdict, 0) for stage in STAGE_KEYS])
            for verdict in VERDICTS
        ]
    )
    return figure.update_layout(title="Final verdicts by stage", barmode="group", yaxis_title="documents")


def verdicts_by_day(report: Report) -> go.Figure:
    days = list(report.by_day)

    def count(day: str, stage: str, verdict: str) -> int:
        return report.by_day[day].get(stage, {}).get(verdict, 0)

    traces = [go.Bar(name="unique", x=days, y=[count(day, "none", "unique") for day in days])]
    traces += [
        go.Bar(name=f"{stage} duplicate", x=days, y=[count(day, stage, "duplicate") for day in days])
        for stage in STAGES
    ]
    traces.append(go.Bar(name="review", x=days, y=[sum(count(d, stage, "review") for stage in STAGES) for d in days]))
    traces.append(go.Bar(name="unlinked", x=days, y=[count(day, "none", "unlinked") for day in days]))
    figure = go.Figure(traces).update_layout(
        title="Final verdicts by day (of linked_at, UTC)", barmode="stack", yaxis_title="documents"
    )
    figure.update_xaxes(type="category")
    return figure if days else _empty(figure, "no documents")


def simhash_distances(report: Report) -> go.Figure:
    stats = report.scores.get("simhash")
    figure = go.Figure().update_layout(
        title="SimHash links: Hamming distance (of 64 bits)", barmode="stack", yaxis_title="documents"
    )
    figure.update_xaxes(title="distance", dtick=1)
    if stats is None:
        return _empty(figure, "no SimHash links")
    for verdict, values in sorted(stats.values.items()):
        figure.add_trace(go.Histogram(name=verdict, x=values, xbins={"start": -0.5, "size": 1}))
    return figure


def semantic_scores(report: Report) -> go.Figure:
    figure = go.Figure().update_layout(
        title="Semantic links and reviews: cosine, same-language and cross-language pairs",
        barmode="overlay",
        yaxis_title="documents",
    )
    figure.update_xaxes(title="cosine")
    found = [group for group in _PAIR_NAMES if group in report.scores]
    for group in found:
        values = report.scores[group].all_values
        figure.add_trace(go.Histogram(name=_PAIR_NAMES[group], x=values, xbins={"size": 0.005}, opacity=0.7))
    if not found:
        return _empty(figure, "no semantic links")
    lowest = min(min(report.scores[group].all_values) for group in found)
    return figure.update_xaxes(range=[min(0.75, math.floor(lowest * 20) / 20), 1.0])


def group_sizes(report: Report) -> go.Figure:
    sizes = sorted(report.groups.sizes.items())
    figure = go.Figure(go.Bar(x=[size for size, _ in sizes], y=[count for _, count in sizes], name="groups"))
    figure.update_layout(title="Group sizes (a canonical and its duplicates)", yaxis_title="groups")
    figure.update_xaxes(title="size", type="log" if sizes and sizes[-1][0] > 50 else "linear")
    figure.update_yaxes(type="log" if sizes and max(count for _, count in sizes) > 100 else "linear")
    return figure if sizes else _empty(figure, "no groups")


def drift_history(report: Report) -> go.Figure:
    periods = report.drift.periods
    labels = [stats.label for stats in periods]
    figure = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        subplot_titles=("semantic share and score quantiles", "largest group (as it grew in the period)"),
    )
    figure.add_trace(go.Scatter(name="semantic share", x=labels, y=[s.semantic_share for s in periods]), row=1, col=1)
    for kind in ("same_language", "cross_language"):
        values = [s.quantile(kind, 0.5) for s in periods]
        if any(value is not None for value in values):
            name = f"p50 cosine ({kind.replace('_', ' ')})"
            figure.add_trace(go.Scatter(name=name, x=labels, y=values, mode="lines+markers"), row=1, col=1)
    figure.add_trace(go.Bar(name="largest group", x=labels, y=[s.largest_group for s in periods]), row=2, col=1)
    figure.update_xaxes(type="category")
    figure.update_layout(title=f"Drift per {report.drift.period.value}", height=520)
    return figure if periods else _empty(figure, "no documents")


def figures(report: Report) -> dict[str, go.Figure]:
    made = {
        "verdicts-by-stage": verdicts_by_stage(report),
        "verdicts-by-day": verdicts_by_day(report),
        "simhash-distances": simhash_distances(report),
        "semantic-scores": semantic_scores(report),
        "group-sizes": group_sizes(report),
        "drift": drift_history(report),
    }
    assert tuple(made) == FIGURES
    return made


def _table(headers: Iterable[str], rows: list[list[object]], classes: list[str] | None = None) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = []
    for row, css in zip(rows, classes or [""] * len(rows), strict=True):
        cells = "".join(f"<td>{html.escape(str(cell))}</td>" for cell in row)
        body.append(f'<tr class="{css}">{cells}</tr>')
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _drift_section(report: Report) -> str:
    drift = report.drift
    if drift.current is None:
        return "<p>No documents.</p>"
    if not drift.current.documents:
        return f"<p>No documents in {html.escape(drift.current.label)}: nothing to compare.</p>"
    if drift.previous is None:
        return (
            f"<p>No documents in {html.escape(str(drift.previous_label))}, the {drift.period.value} before"
            f" {html.escape(drift.current.label)}: nothing to compare.</p>"
        )
    rows: list[list[object]] = []
    classes: list[str] = []
    for metric in drift.metrics:
        rows.append(
            [
                metric.label,
                _cell(metric.previous),
                _cell(metric.current),
                metric.compared,
                metric.change,
                "ALARM" if metric.alarm else "",
            ]
        )
        classes.append("alarm" if metric.alarm else "")
    title = (
        f"<p>{html.escape(drift.current.label)} against {html.escape(drift.previous.label)};"
        f" alarm at x{drift.factor:g}.</p>"
    )
    return title + _table(("metric", "previous", "current", "compared", "change", ""), rows, classes)


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if float(value).is_integer() and value > 1 else f"{value:.4f}"


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; }
th, td { padding: 0.2rem 0.7rem; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; }
tr.alarm td { color: #b00; font-weight: bold; }
.figure { margin: 1rem 0 2rem; min-height: 420px; }
.banner { padding: 0.6rem 1rem; background: #fdd; color: #900; font-weight: bold; }
"""


def page(report: Report) -> str:
    """The whole page as a string."""
    parts = []
    for figure_id, figure in figures(report).items():
        plot = pio.to_html(
            figure,
            full_html=False,
            include_plotlyjs=False,
            div_id=f"plot-{figure_id}",
            config=_CONFIG,
            default_height="420px",
        )
        parts.append(f'<div class="figure" id="{figure_id}">{plot}</div>')
    verdict_rows: list[list[object]] = [
        [stage, *(report.by_stage[stage].get(verdict, 0) for verdict in VERDICTS)] for stage in STAGE_KEYS
    ]
    largest_rows: list[list[object]] = [
        [g.canonical_id, g.language or "?", g.size, *(g.stages.get(s, 0) for s in STAGES)]
        for g in report.groups.largest
    ]
    banner = '<p class="banner">Drift alarm: see the table below.</p>' if report.drift.alarm else ""
    generated = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>dedup report</title>
<style>{_STYLE}</style>
<script>{get_plotlyjs()}</script>
</head>
<body>
<h1>dedup report</h1>
<p>{html.escape(report.source)}: {report.documents:,} documents, {report.records:,} link records read,
{len(report.bad):,} unreadable. Generated {generated}.</p>
{banner}
<h2>Final verdicts</h2>
{_table(("stage", *VERDICTS), verdict_rows)}
<h2>Drift</h2>
{_drift_section(report)}
<h2>Largest groups</h2>
{_table(("canonical", "language", "size", *STAGES), largest_rows) if largest_rows else "<p>No duplicates.</p>"}
<h2>Figures</h2>
{"".join(parts)}
</body>
</html>
"""


def write_html(report: Report, path: Path) -> None:
    path.write_text(page(report), encoding="utf-8")

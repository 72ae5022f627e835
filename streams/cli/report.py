"""`dedup report`: counts, scores, groups and drift of the final verdicts, from links files or the links topic."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import orjson
import typer

from streams.cli.common import app, err, one_line_errors, out_console, tagged
from streams.config import Settings

SHOWN_BAD = 10
"""Unreadable records listed on stderr; the rest are counted."""


@app.command("report")
def report_command(
    links: Annotated[
        list[str] | None,
        typer.Argument(help="links.jsonl files (.gz accepted, - for stdin), in order; none: the links topic."),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False,
    html: Annotated[
        Path | None, typer.Option("--html", help="Also write a self-contained HTML page with the figures.")
    ] = None,
    period: Annotated[
        str | None, typer.Option(help="Drift period: day or week \\[default: report.period, day].", show_default=False)
    ] = None,
    alarm_factor: Annotated[
        float | None,
        typer.Option(
            help="Alarm when a drift value is this many times the previous period's \\[default: report.alarm_factor,"
            " 2.0].",
            show_default=False,
        ),
    ] = None,
    last: Annotated[
        str | None,
        typer.Option(
            help="The period drift judges, e.g. 2026-03-04 or 2026-W10 \\[default: the latest with verdicts].",
            show_default=False,
        ),
    ] = None,
    fail_on_alarm: Annotated[
        bool, typer.Option("--fail-on-alarm", help="Exit with code 1 when a drift alarm is raised (for cron).")
    ] = False,
    top: Annotated[int, typer.Option(min=0, help="Largest groups listed.")] = 10,
    config: Annotated[
        Path | None, typer.Option(help="TOML configuration file \\[env: DEDUP_CONFIG].", exists=True, dir_okay=False)
    ] = None,
) -> None:
    """Report the final verdict of every document: per stage, verdict and day; scores; groups; drift.

    With files, the last record of a document in file order is its verdict (relinks included); without,
    the links topic on DEDUP_KAFKA_BOOTSTRAP is read to its end. Exit codes: 0, 1 for a drift alarm
    with --fail-on-alarm, 2 for an error.
    """
    alarm = _report(links or [], json_output, html, period, alarm_factor, last, top, config)
    if alarm and fail_on_alarm:
        raise typer.Exit(1)


@one_line_errors
def _report(
    links: list[str],
    json_output: bool,
    html: Path | None,
    period: str | None,
    alarm_factor: float | None,
    last: str | None,
    top: int,
    config: Path | None,
) -> bool:
    """Read, report, and say whether drift raised an alarm."""
    from streams.reporting.drift import Period, parse_period
    from streams.reporting.report import build_report
    from streams.reporting.verdicts import read_files, read_topic

    if config is not None:
        os.environ["DEDUP_CONFIG"] = str(config)
    settings = Settings()
    chosen = period or settings.report.period
    if chosen not in {p.value for p in Period}:
        raise ValueError(f"unknown period {chosen!r}; choose day or week")
    factor = settings.report.alarm_factor if alarm_factor is None else alarm_factor
    if last is not None:
        parse_period(last, Period(chosen))  # a misspelt period fails before the topic is read
    if html is not None and html.is_dir():
        raise IsADirectoryError(f"--html {html} is a directory; give a file name")
    final = read_files(links) if links else read_topic(settings)
    for problem in final.bad[:SHOWN_BAD]:
        err.print(tagged("skipped", "yellow", problem), soft_wrap=True)
    if len(final.bad) > SHOWN_BAD:
        err.print(tagged("skipped", "yellow", f"{len(final.bad) - SHOWN_BAD} more unreadable records"), soft_wrap=True)
    report = build_report(final, Period(chosen), factor, top, last)
    if html is not None:
        from streams.reporting.html import write_html

        write_html(report, html)
    if json_output:
        typer.echo(orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2).decode())
    else:
        from streams.reporting.terminal import print_report

        print_report(report, out_console)
    if html is not None:
        err.print(f"wrote {html}", highlight=False)
    if report.drift.alarm:
        alarms = ", ".join(m.label for m in report.drift.metrics if m.alarm)
        err.print(tagged("drift alarm:", "bold red", alarms), soft_wrap=True)
    return report.drift.alarm

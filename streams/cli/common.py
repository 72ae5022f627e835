"""What every `dedup` command shares: the typer app, one-line errors, progress bars."""

from __future__ import annotations

import errno
import functools
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, ParamSpec, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TaskProgressColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.text import Text

from streams.core.model import Stage
from streams.reporting.inert import inert
from streams.runner.interrupts import Terminated, raising

app = typer.Typer(
    help="Deduplicate news streams with a cost-ordered cascade: URL, content hash, SimHash, embeddings.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
err = Console(stderr=True, markup=False, emoji=False)
"""Messages carry input and error text (paths, ids, Redis keys): printed as they are, never read as rich
markup (a `[/]` in a record's field made rich raise) or emoji codes (`dedup:lock:fence` showed a padlock).
Styles go in through `tagged`."""
out_console = Console(markup=False, emoji=False)
"""Results on stdout (tables, reports): input text as it is, as on `err`."""


def tagged(label: str, style: str, text: object) -> Text:
    """One message: `label` in `style`, then `text` made inert (an id or a reason may quote the crawl)."""
    return Text.assemble((label, style), " ", inert(str(text)))


# The options of the commands that change verdicts (`relink`, `review`), for files or for the service.
StateOption = Annotated[
    Path | None,
    typer.Option(help="State folder (files); none: the streaming service (Redis, vectors, topics).", file_okay=False),
]
RelinkOutOption = Annotated[
    Path | None,
    typer.Option("--out", "-o", help="With --state: folder whose links.jsonl and deduped.jsonl get the changes."),
]
P = ParamSpec("P")
R = TypeVar("R")


RESUMES = (
    "interrupted: outputs and state are saved up to the last document decided; run the same command again to resume"
)
"""What Ctrl-C leaves of the commands that resume where they stopped (`dedup run`, `dedup replay`)."""


FULL = "; free space on that disk, then run the same command again (dedup run and dedup replay resume where it stopped)"
"""Said after a full disk's (or quota's) error."""


def one_line_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Expected failures (bad paths, bad configuration, a busy state folder) end in one line, not a traceback."""
    return interrupted_says(RESUMES)(command)


def interrupted_says(message: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """`one_line_errors`, with what Ctrl-C leaves said as `message` (for a command that does not resume)."""
    return functools.partial(_one_line_errors, interrupted=message)  # type: ignore[return-value]


def _one_line_errors(command: Callable[P, R], interrupted: str) -> Callable[P, R]:
    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            with raising():
                return command(*args, **kwargs)
        except typer.Exit:  # a command's own exit status (a RuntimeError to click)
            raise
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'settings'}: "
                + ("unknown setting (a typo?)" if e["type"] == "extra_forbidden" else e["msg"])
                for e in exc.errors()
            )
            err.print(tagged("error:", "bold red", f"invalid configuration: {problems}"), soft_wrap=True)
        except (OSError, ValueError, RuntimeError, OverflowError) as exc:
            full = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
            err.print(tagged("error:", "bold red", f"{exc}{FULL if full else ''}"), soft_wrap=True)
        except sqlite3.Error as exc:  # a state or journal file another program wrote, or half of one
            full = "disk is full" in str(exc)
            said = f"a state folder's SQLite file cannot be used: {exc}{FULL if full else ''}"
            err.print(tagged("error:", "bold red", said), soft_wrap=True)
        except Exception as exc:  # librdkafka's own (a DEDUP_KAFKA_CONFIG property it does not know): one line
            kafka = sys.modules.get("confluent_kafka")  # loaded only by the commands that use it
            if kafka is None or not isinstance(exc, kafka.KafkaException):
                raise
            reason = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
            err.print(tagged("error:", "bold red", f"Kafka client: {reason}"), soft_wrap=True)
        except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM (`Terminated`)
            err.print(interrupted, soft_wrap=True, highlight=False)
            raise typer.Exit(143 if isinstance(stop, Terminated) else 130) from None
        raise typer.Exit(2)

    return wrapper


def progress_bar(quiet: bool, records: bool = False) -> Progress:
    """A progress bar on stderr, gone when done: over input bytes, or (`records`) over a count."""
    columns = (MofNCompleteColumn(),) if records else (DownloadColumn(), TransferSpeedColumn())
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        *columns,
        TimeElapsedColumn(),
        console=err,
        disable=quiet or not err.is_terminal,
        transient=True,
    )


class _DocumentsColumn(ProgressColumn):
    """Documents decided and their rate: what moves while the model embeds, when bytes read would not."""

    def render(self, task: Task) -> Text:
        documents = int(task.fields.get("documents", 0))
        rate = f", {documents / task.elapsed:,.0f}/s" if task.elapsed else ""
        return Text(f"{documents:,} documents{rate}", style="progress.download")


def decisions_progress(quiet: bool) -> Progress:
    """Documents decided, and the share of the input behind them: its bar and time estimate."""
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        TaskProgressColumn(),
        _DocumentsColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        disable=quiet or not err.is_terminal,
        transient=True,
    )


def parse_stages(value: str | None) -> list[Stage] | None:
    if value is None:
        return None
    names = [part.strip() for part in value.split(",") if part.strip()]
    known = {s.value for s in Stage}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown stage(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    return [Stage(n) for n in names]


def replay_report(summary: str, bad: list[str], quiet: bool) -> None:
    """The replay's one-line summary, then the first unreadable links (skipped, never fatal)."""
    if not quiet:
        err.print(summary, highlight=False)
    for problem in bad[:10]:
        err.print(tagged("skipped", "yellow", problem), soft_wrap=True)


class PhaseProgress:
    """A rich progress bar per replay phase (reading the topic, restoring state)."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._task: TaskID | None = None

    def start(self, phase: str, total: int) -> None:
        self._task = self._progress.add_task(phase, total=total)

    def advance(self, count: int) -> None:
        if self._task is not None:
            self._progress.advance(self._task, count)

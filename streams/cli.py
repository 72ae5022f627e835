"""The `dedup` command line."""

from __future__ import annotations

import functools
import os
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

from streams import __version__
from streams.config import Settings
from streams.core.model import Stage

app = typer.Typer(
    help="Deduplicate news streams with a cost-ordered cascade: URL, content hash, SimHash, embeddings.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
err = Console(stderr=True)
P = ParamSpec("P")
R = TypeVar("R")


def one_line_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Expected failures (bad paths, bad configuration, a busy state folder) end in one line, not a traceback."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'settings'}: "
                + ("unknown setting (a typo?)" if e["type"] == "extra_forbidden" else e["msg"])
                for e in exc.errors()
            )
            err.print(f"[bold red]error:[/] invalid configuration: {problems}", highlight=False, soft_wrap=True)
        except (OSError, ValueError, RuntimeError) as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        except KeyboardInterrupt:
            err.print(
                "interrupted: outputs and state are saved up to the last document decided;"
                " run the same command again to resume",
                soft_wrap=True,
            )
            raise typer.Exit(130) from None
        raise typer.Exit(2)

    return wrapper


def _progress(quiet: bool, records: bool = False) -> Progress:
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


def _decisions_progress(quiet: bool) -> Progress:
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


def _parse_stages(value: str | None) -> list[Stage] | None:
    if value is None:
        return None
    names = [part.strip() for part in value.split(",") if part.strip()]
    known = {s.value for s in Stage}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown stage(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    return [Stage(n) for n in names]


@app.command("run")
@one_line_errors
def run_command(
    inputs: Annotated[list[str], typer.Argument(help="JSONL files (.gz accepted), or - for standard input.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for links.jsonl, deduped.jsonl, rejected.jsonl.")],
    state: Annotated[
        Path | None, typer.Option(help="State folder, kept between runs \\[default: OUT/state].", show_default=False)
    ] = None,
    stages: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated stages to run \\[default: url,content,simhash,semantic].", show_default=False
        ),
    ] = None,
    sources: Annotated[
        Path | None, typer.Option(help="TOML of per-host query parameters to keep \\[env: DEDUP_SOURCES].")
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="TOML configuration file \\[env: DEDUP_CONFIG].", exists=True, dir_okay=False)
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no summary table.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Start over outputs in --out that belong to another state folder.")
    ] = False,
) -> None:
    """Deduplicate JSONL articles with embedded state and the bundled model; no server needed.

    Running the same command again continues: after Ctrl-C or a crash the outputs are completed,
    and a later run into the same --out (with the same state) adds to them.
    """
    from streams.runner.embedded import RunPaths, run
    from streams.runner.jsonl import input_size

    if config is not None:
        os.environ["DEDUP_CONFIG"] = str(config)
    overrides: dict[str, object] = {}
    if (chosen := _parse_stages(stages)) is not None:
        overrides["stages"] = chosen
    if sources is not None:
        overrides["sources"] = sources
    settings = Settings(**overrides)  # type: ignore[arg-type]
    paths = RunPaths(out=out, state=state or settings.state_dir or out / "state")

    with _decisions_progress(quiet) as progress:
        task = progress.add_task("deduplicating", total=input_size(inputs), documents=0)

        def advance(documents: int, done: int) -> None:
            progress.update(task, completed=done, documents=documents)

        stats = run(settings, inputs, paths, on_progress=advance, force=force)
    for note in stats.notes:
        err.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)
    if not quiet:
        err.print(stats.table())
        err.print(f"wrote {paths.links}, {paths.deduped}, {paths.rejected}", highlight=False)


@app.command("replay")
@one_line_errors
def replay_command(
    links: Annotated[
        list[str] | None,
        typer.Argument(help="links.jsonl files of earlier runs (.gz accepted), in order; none: the links topic."),
    ] = None,
    state: Annotated[Path | None, typer.Option(help="State folder to rebuild from files (created if absent).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no summary.")] = False,
) -> None:
    """Rebuild state from published links; idempotent.

    With files: an embedded state folder (--state). Without: Redis and the vector store
    of the workers (DEDUP_REDIS_URL, DEDUP_QDRANT_URL) from the links topic on DEDUP_KAFKA_BOOTSTRAP.
    """
    if not links:
        _replay_kafka(quiet)
        return
    if state is None:
        raise ValueError("replaying files rebuilds a state folder: give --state DIR")
    from streams.runner.jsonl import input_size
    from streams.runner.replay import replay_files

    with _progress(quiet) as progress:
        task = progress.add_task("replaying", total=input_size(links))
        stats = replay_files(links, state, on_bytes=lambda n: progress.advance(task, n))
    _replay_report(
        f"replayed {stats.read} links into {state}: {stats.restored} restored,"
        f" {stats.already_there} already there, {len(stats.bad)} unreadable",
        stats.bad,
        quiet,
    )


def _replay_report(summary: str, bad: list[str], quiet: bool) -> None:
    """The replay's one-line summary, then the first unreadable links (skipped, never fatal)."""
    if not quiet:
        err.print(summary, highlight=False)
    for problem in bad[:10]:
        err.print(f"[yellow]skipped[/] {problem}", highlight=False, soft_wrap=True)


class _PhaseProgress:
    """A rich progress bar per replay phase (reading the topic, restoring state)."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._task: TaskID | None = None

    def start(self, phase: str, total: int) -> None:
        self._task = self._progress.add_task(phase, total=total)

    def advance(self, count: int) -> None:
        if self._task is not None:
            self._progress.advance(self._task, count)


def _replay_kafka(quiet: bool) -> None:
    from streams.core.model import Stage
    from streams.kafka.replay import replay_links
    from streams.service.resources import redis_client, vector_store
    from streams.stores.redis_store import RedisStateStore

    settings = Settings()
    client = redis_client(settings)
    state = RedisStateStore(client, settings.redis_prefix)
    vectors = vector_store(settings) if settings.qdrant_url or Stage.SEMANTIC in settings.stages else None
    try:
        with _progress(quiet, records=True) as progress:
            stats = replay_links(settings, state, vectors, _PhaseProgress(progress))
    finally:
        client.close()
        if vectors is not None and hasattr(vectors, "close"):
            vectors.close()
    _replay_report(
        f"replayed {stats.read} records of {settings.topics.links} ({stats.documents} documents):"
        f" {stats.restored} restored, {stats.already_there} already there, {len(stats.bad)} unreadable",
        stats.bad,
        quiet,
    )
    if stats.vectors_skipped:
        err.print(
            f"[yellow]warning:[/] {stats.vectors_skipped} canonical vectors not restored: set DEDUP_QDRANT_URL",
            highlight=False,
        )


@app.command("worker")
@one_line_errors
def worker_command(
    stage: Annotated[
        list[str] | None,
        typer.Option(help="Run only this stage agent (exact, simhash, semantic); repeat for several \\[default: all]."),
    ] = None,
    log_level: Annotated[str, typer.Option(help="Logging level.")] = "info",
) -> None:
    """Run stage agents on Kafka with state in Redis and vectors in Qdrant (DEDUP_* settings)."""
    import faust

    from streams.kafka.topics import message_limits
    from streams.service.app import build_app, check_broker_limits
    from streams.service.resources import Resources
    from streams.service.stages import Agent, input_topic, pipeline

    settings = Settings()
    chain = pipeline(settings)
    try:
        agents = [Agent(name) for name in stage] if stage else chain
    except ValueError:
        raise typer.BadParameter(f"unknown stage agent in {stage}; choose from exact, simhash, semantic") from None
    idle = [agent for agent in agents if agent not in chain]
    if idle:
        raise ValueError(f"agent(s) {', '.join(idle)} have no enabled stage (stages: {settings.stages})")
    settings.kafka_client_config()  # a missing broker is reported before anything connects
    topics = settings.topics
    written = [topics.links, topics.deduped, topics.rejected, *(input_topic(settings, a) for a in chain[1:])]
    check_broker_limits(settings, message_limits(settings, written))
    resources = Resources(settings)
    try:
        faust_app, _ = build_app(settings, agents, resources)
        faust.Worker(faust_app, loglevel=log_level.upper()).execute_from_commandline()
    finally:
        resources.close()


topics_app = typer.Typer(help="Kafka topics of the streaming service.", no_args_is_help=True)
app.add_typer(topics_app, name="topics")


@topics_app.command("create")
@one_line_errors
def topics_create_command(
    partitions: Annotated[
        int | None, typer.Option(min=1, help="Partitions per topic \\[default: topics.partitions, 6].")
    ] = None,
) -> None:
    """Create every topic from configuration (links compacted, the rest by retention); safe to repeat."""
    from rich.table import Table

    from streams.kafka.topics import create_topics

    states = create_topics(Settings(), partitions)
    table = Table("topic", "action", "partitions", "cleanup.policy", "differs from configuration")
    for state in states:
        table.add_row(state.name, state.action, str(state.partitions), state.cleanup_policy, state.problem or "")
    err.print(table)


@app.command("publish")
@one_line_errors
def publish_command(
    inputs: Annotated[list[str], typer.Argument(help="JSONL files of raw articles (.gz accepted), or -.")],
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no summary.")] = False,
) -> None:
    """Send raw articles to the raw topic (bad lines too: the workers reject them with a reason)."""
    from streams.kafka.publish import publish_files
    from streams.runner.jsonl import input_size

    settings = Settings()
    with _progress(quiet) as progress:
        task = progress.add_task("publishing", total=input_size(inputs))
        stats = publish_files(settings, inputs, on_bytes=lambda n: progress.advance(task, n))
    lines = stats.sent + len(stats.rejected)
    if not quiet:
        err.print(
            f"published {stats.acknowledged} of {lines} lines to {settings.topics.raw}"
            + (f"; {len(stats.rejected)} rejected to {settings.topics.rejected}" if stats.rejected else ""),
            highlight=False,
        )
    for problem in stats.rejected[:10]:
        err.print(f"[yellow]rejected[/] {problem}", highlight=False, soft_wrap=True)
    if stats.failed:
        raise RuntimeError(f"{len(stats.failed)} records were not acknowledged; first: {stats.failed[0]}")


@app.command("version")
def version_command() -> None:
    """Print the version."""
    typer.echo(__version__)


def main() -> None:
    app()

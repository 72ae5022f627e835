"""The streaming service's commands: `dedup worker`, `dedup topics create`, `dedup publish`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from streams.cli.common import app, err, interrupted_says, one_line_errors, progress_bar, tagged
from streams.config import Settings


@app.command("worker")
@one_line_errors
def worker_command(
    stage: Annotated[
        list[str] | None,
        typer.Option(help="Run only this stage agent (exact, simhash, semantic); repeat for several \\[default: all]."),
    ] = None,
    log_level: Annotated[str, typer.Option(help="Logging level.")] = "info",
    thresholds: Annotated[
        Path | None,
        typer.Option(help="Semantic cut-offs from `dedup calibrate fit` \\[env: DEDUP_SEMANTIC__THRESHOLDS_FILE]."),
    ] = None,
) -> None:
    """Run stage agents on Kafka with state in Redis and vectors in Qdrant (DEDUP_* settings)."""
    import faust

    from streams.kafka.topics import message_limits
    from streams.service.app import InstanceClaim, build_app, check_broker_limits
    from streams.service.resources import Resources
    from streams.service.stages import Agent, input_topic, pipeline

    settings = Settings(semantic={"thresholds_file": thresholds}) if thresholds else Settings()
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
    if Agent.SEMANTIC in agents:
        written.append(topics.candidates)
    read = [input_topic(settings, agent) for agent in agents]
    check_broker_limits(settings, message_limits(settings, written, read))
    resources = Resources(settings)
    claim = InstanceClaim.of(settings, resources.redis)
    try:
        if claim is not None:
            # before joining the group: a second member of one id would unseat the first
            claim.acquire(lambda line: err.print(tagged("waiting:", "yellow", line), soft_wrap=True, highlight=False))
        faust_app, _ = build_app(settings, agents, resources)
        faust.Worker(faust_app, loglevel=log_level.upper()).execute_from_commandline()
    finally:
        if claim is not None:
            claim.release()
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
@interrupted_says(
    "interrupted: the lines the broker acknowledged are on the topic, the rest were dropped; run `dedup publish`"
    " again to send every line from the first (the workers take those already sent as redeliveries)"
)
def publish_command(
    inputs: Annotated[list[str], typer.Argument(help="JSONL files of raw articles (.gz accepted), or -.")],
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no summary.")] = False,
) -> None:
    """Send raw articles to the raw topic (bad lines too: the workers reject them with a reason)."""
    from streams.kafka.publish import publish_files
    from streams.runner.jsonl import input_size

    settings = Settings()
    with progress_bar(quiet) as progress:
        task = progress.add_task("publishing", total=input_size(inputs))
        stats = publish_files(settings, inputs, on_bytes=lambda n: progress.advance(task, n))
    lines = stats.lines
    if not quiet:
        err.print(
            f"published {stats.acknowledged} of {lines} lines to {settings.topics.raw}"
            + (f"; {len(stats.rejected)} rejected to {settings.topics.rejected}" if stats.rejected else ""),
            highlight=False,
        )
    for problem in stats.rejected[:10]:
        err.print(tagged("rejected", "yellow", problem), soft_wrap=True)
    if stats.failed:
        raise RuntimeError(
            f"{len(stats.failed)} records were not acknowledged; first: {stats.failed[0]}; run `dedup publish`"
            " again once the broker is back (it sends every line again: the workers take those already sent as"
            " redeliveries)"
        )

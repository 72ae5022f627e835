"""`dedup run` and `dedup replay`: the cascade on files, and rebuilding state from verdicts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import TaskID

from streams.cli.common import (
    PhaseProgress,
    app,
    decisions_progress,
    err,
    one_line_errors,
    parse_stages,
    progress_bar,
    replay_report,
    tagged,
)
from streams.config import Settings
from streams.core.model import Stage


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
    thresholds: Annotated[
        Path | None,
        typer.Option(help="Semantic cut-offs from `dedup calibrate fit` \\[env: DEDUP_SEMANTIC__THRESHOLDS_FILE]."),
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
    from streams.runner.embedded import RunPaths, owed_articles, run
    from streams.runner.jsonl import input_size

    if config is not None:
        os.environ["DEDUP_CONFIG"] = str(config)
    overrides: dict[str, object] = {}
    if (chosen := parse_stages(stages)) is not None:
        overrides["stages"] = chosen
    if sources is not None:
        overrides["sources"] = sources
    if thresholds is not None:
        overrides["semantic"] = {"thresholds_file": thresholds}  # merged with the configured [semantic]
    settings = Settings(**overrides)  # type: ignore[arg-type]
    paths = RunPaths(out=out, state=state or settings.state_dir or out / "state")

    with decisions_progress(quiet) as progress:
        task = progress.add_task("deduplicating", total=input_size(inputs), documents=0)

        def advance(documents: int, done: int) -> None:
            progress.update(task, completed=done, documents=documents)

        taking: list[TaskID] = []

        def taking_in(links: int, done: int, total: int) -> None:
            """Links a stopped run left (a whole file where the state folder was lost), before any decision."""
            if not taking:
                taking.append(progress.add_task("taking in links.jsonl", total=total, documents=0))
            progress.update(taking[0], completed=done, documents=links)

        stats = run(settings, inputs, paths, on_progress=advance, force=force, on_taking_in=taking_in)
    for note in stats.notes:
        err.print(tagged("note:", "yellow", note), soft_wrap=True)
    if not quiet:
        err.print(stats.table())
        err.print(f"wrote {paths.links}, {paths.deduped}, {paths.rejected}, {paths.candidates}", highlight=False)
    if stats.owed:
        err.print(tagged("error:", "red", owed_articles(stats.owed)), soft_wrap=True)
        raise typer.Exit(1)


@app.command("replay")
@one_line_errors
def replay_command(
    links: Annotated[
        list[str] | None,
        typer.Argument(help="links.jsonl files of earlier runs (.gz accepted), in order; none: the links topic."),
    ] = None,
    state: Annotated[Path | None, typer.Option(help="State folder to rebuild from files (created if absent).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no summary.")] = False,
    batch: Annotated[
        int, typer.Option(min=1, help="Links restored into Redis per transaction (from the links topic).")
    ] = 2_000,
    fresh: Annotated[
        bool,
        typer.Option(
            "--fresh",
            help="From the links topic: delete the Redis state first and rebuild it from the beginning "
            "(a state lost in part: a cluster master failed over to a replica that had not copied it).",
        ),
    ] = False,
) -> None:
    """Rebuild state from published links; idempotent.

    With files: an embedded state folder (--state). Without: Redis and the vector store
    of the workers (DEDUP_REDIS_URL, DEDUP_QDRANT_URL) from the links topic on DEDUP_KAFKA_BOOTSTRAP;
    interrupted, the same command resumes after the last batch restored.
    """
    if not links:
        _replay_kafka(quiet, batch, fresh)
        return
    if fresh:
        raise ValueError("--fresh rebuilds the Redis state from the links topic; give files a new --state folder")
    if state is None:
        raise ValueError("replaying files rebuilds a state folder: give --state DIR")
    from streams.runner.jsonl import input_size
    from streams.runner.replay import replay_files

    with progress_bar(quiet) as progress:
        task = progress.add_task("replaying", total=input_size(links))
        stats = replay_files(links, state, on_bytes=lambda n: progress.advance(task, n))
    replay_report(
        f"replayed {stats.read} links into {state}: {stats.restored} restored,"
        f" {stats.already_there} already there, {len(stats.bad)} unreadable"
        + (f"; {stats.candidates} candidate records (candidates.jsonl)" if stats.candidates else ""),
        stats.bad,
        quiet,
    )


def _replay_kafka(quiet: bool, batch: int, fresh: bool) -> None:
    from streams.kafka.replay import replay_links
    from streams.service.resources import redis_client, vector_store

    settings = Settings()
    client = redis_client(settings)
    vectors = vector_store(settings) if settings.qdrant_url or Stage.SEMANTIC in settings.stages else None
    try:
        with progress_bar(quiet, records=True) as progress:
            stats = replay_links(settings, client, vectors, PhaseProgress(progress), batch=batch, fresh=fresh)
    finally:
        client.close()
        if vectors is not None and hasattr(vectors, "close"):
            vectors.close()
    replay_report(
        f"replayed {stats.read} records of {settings.topics.links} ({stats.documents} documents):"
        f" {stats.restored} restored, {stats.already_there} already there, {len(stats.bad)} unreadable"
        + (f"; resumed after {stats.resumed} restored before the interruption" if stats.resumed else ""),
        stats.bad,
        quiet,
    )
    if stats.vectors_skipped:
        skipped = f"{stats.vectors_skipped} canonical vectors not restored: set DEDUP_QDRANT_URL"
        err.print(tagged("warning:", "yellow", skipped), soft_wrap=True)

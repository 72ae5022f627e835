"""`dedup review`: decide the `review` documents on the labelling screen; each decision a label and a relink."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import orjson
import typer

from streams.cli.common import RelinkOutOption, StateOption, app, err, one_line_errors

if TYPE_CHECKING:
    from streams.config import Settings
    from streams.core.relink import Label
    from streams.labelling.pairs import LabelWriter, Pair
    from streams.labelling.review import Apply, ReviewApp
    from streams.runner.relink import RelinkResult


@app.command("review")
@one_line_errors
def review_command(
    labels: Annotated[
        Path,
        typer.Option(
            help="labels.jsonl: each decision on a semantic review is appended (and fsync'd) here.", dir_okay=False
        ),
    ],
    state: StateOption = None,
    out: RelinkOutOption = None,
    by: Annotated[str | None, typer.Option("--by", help="Your name: labelled_by, and in each relink's reason.")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Show at most this many reviews (the oldest).")] = None,
    articles: Annotated[
        list[Path] | None,
        typer.Option(
            "--articles",
            help="With --state: deduped.jsonl files where documents were published (texts of SimHash reviews, and"
            " the article to publish when one is not a duplicate); the run's own next to the state is read too.",
            dir_okay=False,
        ),
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="TOML configuration file \\[env: DEDUP_CONFIG].", exists=True, dir_okay=False)
    ] = None,
) -> None:
    """Decide the documents the cascade sent to review, each against its suspected canonical.

    The labelling screen, oldest review first; keys as in `dedup label`:
    y duplicate | n not a duplicate | s skip | b back | q quit.

    Each decision is appended to --labels (a labelled pair, which `dedup
    calibrate fit` reads) and applied at once as a relink, as `dedup relink
    --decisions` applies it: y makes the document a duplicate of its
    canonical, n makes it `unlinked` (a canonical, published); its exact
    copies follow it. A SimHash review (a group at its size cap) shows its
    Hamming distance; its decision is applied, not written as a label.
    Resumable: reviews already decided are not shown again.

    With --state: the state folder; the relinks are appended to
    OUT/links.jsonl and OUT/deduped.jsonl. Without: Redis, the vector store
    and the topics of the DEDUP_* settings.
    """
    if config is not None:
        os.environ["DEDUP_CONFIG"] = str(config)
    if state is not None:
        if out is None:
            raise ValueError("reviewing a state folder writes new links: give --out DIR")
        pairs, apply = files_review(state, out, articles or [], limit)
        where = f"{out / 'links.jsonl'}"
    else:
        if out is not None or articles:
            raise ValueError("--out and --articles go with --state; the service writes to its topics")
        from streams.config import Settings

        settings = Settings()
        pairs, apply = service_review(settings, limit)
        where = settings.topics.links
    if not pairs:
        err.print("no reviews left to decide", highlight=False)
        return
    if labels.is_dir():
        raise IsADirectoryError(f"labels file {labels} is a directory")
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise RuntimeError("dedup review is a screen: run it in a terminal")

    from streams.labelling.pairs import LabelWriter

    with LabelWriter(labels) as writer:
        screen = review_screen(pairs, apply, writer, by, subtitle=f"{len(pairs)} reviews -> {labels}, {where}")
        decisions = screen.run() or 0
    left = sum(1 for pair in pairs if pair.key not in screen.labels)
    err.print(
        f"{decisions} decisions this session, each applied; {left} of {len(pairs)} reviews shown left undecided",
        highlight=False,
        soft_wrap=True,
    )


def review_screen(
    pairs: list[Pair], apply: Apply, writer: LabelWriter | None, by: str | None = None, subtitle: str = ""
) -> ReviewApp:
    """The screen over review `pairs`: each decision written by `writer` (semantic reviews) and applied by `apply`."""
    from streams.labelling.review import ReviewApp, decide

    return ReviewApp(pairs, lambda pair, duplicate: decide(pair, duplicate, apply, writer, by), subtitle=subtitle)


def files_review(state: Path, out: Path, articles: list[Path], limit: int | None) -> tuple[list[Pair], Apply]:
    """The undecided reviews of a state folder, and the relink of one decision into `out`.

    Articles (for texts the candidate records lack, and for publishing a document the semantic
    stage never embedded) are read from OUT/deduped.jsonl, `articles`, and the deduped.jsonl of the
    run whose run.json names this state folder (the default layout: `dedup run --out DIR` keeps its
    state in DIR/state).
    """
    from streams.config import Settings
    from streams.labelling.review import review_pairs
    from streams.records.article import Featurizer
    from streams.runner.relink import PublishedArticles, relink_files
    from streams.stores.journal import JOURNAL_FILE, Journal

    if not (state / JOURNAL_FILE).is_file():
        raise ValueError(
            f"{state} has no journal of links: a state folder written by `dedup run`, or rebuilt with"
            " `dedup replay --state`, has one"
        )
    sources = [*articles, *_run_outputs(state)]
    journal = Journal(state)
    try:
        published = PublishedArticles([out / "deduped.jsonl", *sources], journal.link, Featurizer(Settings()))
        pairs = review_pairs(journal.links(), journal.candidate, published, limit)
    finally:
        journal.close()

    def apply(label: Label) -> RelinkResult:
        return relink_files(state, out, decisions=[label], articles=sources)

    return pairs, apply


def _run_outputs(state: Path) -> list[Path]:
    """The deduped.jsonl of the `dedup run` output folder that holds this state folder, if it is one."""
    run = state.parent / "run.json"
    try:
        named = orjson.loads(run.read_bytes()).get("state")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return []
    deduped = state.parent / "deduped.jsonl"
    if isinstance(named, str) and Path(named).resolve() == state.resolve() and deduped.is_file():
        return [deduped]
    return []


def service_review(settings: Settings, limit: int | None) -> tuple[list[Pair], Apply]:
    """The undecided reviews on `dedup.links` (in Redis's decision order), and the relink of one decision."""
    from streams.kafka.journal import latest
    from streams.labelling.review import review_pairs
    from streams.service.relink import PublishedArticles, latest_links, relink_service

    links = latest_links(settings)
    candidates = latest(settings, settings.topics.candidates).records
    order = sorted(links.values(), key=lambda record: record.get("seq") or 0)
    pairs = review_pairs(order, candidates.get, PublishedArticles(settings, links), limit)

    def apply(label: Label) -> RelinkResult:
        return relink_service(settings, decisions=[label])

    return pairs, apply

"""`dedup relink`: people's decisions and new cut-offs, applied as new verdicts (streams.core.relink)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, cast

import typer
from rich.table import Table

from streams.cli.common import RelinkOutOption, StateOption, app, err, one_line_errors, out_console, tagged
from streams.config import Settings
from streams.core.model import Stage
from streams.core.relink import Change, Cutoff, Pair
from streams.reporting.inert import inert

SHOWN = 200
"""Changes listed in the table; the rest are counted."""


@app.command("relink")
@one_line_errors
def relink_command(
    state: StateOption = None,
    out: RelinkOutOption = None,
    decisions: Annotated[
        Path | None,
        typer.Option(help="labels.jsonl of people's decisions (a, b, label: true = duplicate).", dir_okay=False),
    ] = None,
    stage: Annotated[
        Stage | None, typer.Option(help="The stage whose links a new cut-off re-judges (semantic).")
    ] = None,
    below: Annotated[
        float | None,
        typer.Option(
            help="New link cut-off: duplicates scoring below it are unlinked; documents an earlier cut-off unlinked"
            " whose score meets it are linked back.",
        ),
    ] = None,
    pair: Annotated[
        str, typer.Option(help="Links the cut-off is for: same (same-language), cross (cross-language) or both.")
    ] = "same",
    articles: Annotated[
        list[Path] | None,
        typer.Option(
            "--articles",
            help="deduped.jsonl files where documents were published, or the raw input of the runs or of the crawl"
            " (a SimHash duplicate is published nowhere), for a document never embedded; repeatable.",
            dir_okay=False,
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would change; write nothing.")] = False,
    config: Annotated[
        Path | None, typer.Option(help="TOML configuration file \\[env: DEDUP_CONFIG].", exists=True, dir_okay=False)
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No table of changes, only the summary.")] = False,
) -> None:
    """Undo or redo suppressions: each change is a new link record (decided_by person or threshold).

    A document that is no duplicate becomes `unlinked` (a canonical, published) with its exact copies;
    a review a person confirms joins its group; an unlinked document goes back to its canonical.
    With --state: the state folder, and the records appended to OUT/links.jsonl and OUT/deduped.jsonl.
    Without: Redis, the vector store and the topics (dedup.links, articles.deduped) of DEDUP_* settings.
    Decisions that cannot be applied are listed with the reason; exit code 2 for an error.
    """
    from streams.runner.relink import read_labels

    if config is not None:
        os.environ["DEDUP_CONFIG"] = str(config)
    if (decisions is None) == (below is None):
        raise ValueError("give --decisions labels.jsonl, or --stage semantic --below CUT-OFF")
    if below is not None and stage is None:
        raise ValueError("--below needs --stage semantic")
    if below is None and (stage is not None or pair != "same"):
        raise ValueError("--stage and --pair go with --below")
    labels = read_labels(decisions) if decisions is not None else None
    cutoff = Cutoff(below, cast(Pair, pair), stage) if below is not None and stage is not None else None
    if state is not None:
        if out is None:
            raise ValueError("relinking a state folder writes new links: give --out DIR")
        from streams.runner.relink import relink_files

        result = relink_files(state, out, decisions=labels, cutoff=cutoff, dry_run=dry_run, articles=articles or [])
        where = f"{out / 'links.jsonl'} and {out / 'deduped.jsonl'}"
    else:
        if out is not None:
            raise ValueError("--out goes with --state; the service writes to its topics")
        from streams.service.relink import relink_service

        settings = Settings()
        result = relink_service(settings, decisions=labels, cutoff=cutoff, dry_run=dry_run, articles=articles or [])
        where = f"{settings.topics.links} and {settings.topics.deduped}"
    plan = result.plan
    if not quiet and plan.changes:
        out_console.print(_table(plan.changes, dry_run))
    for refusal in plan.refused:
        other = f" (against {refusal.other})" if refusal.other else ""
        err.print(tagged("not changed:", "yellow", f"{refusal.doc_id}{other}: {refusal.reason}"), soft_wrap=True)
    unchanged = f", {len(plan.unchanged)} already as decided" if plan.unchanged else ""
    refused = f", {len(plan.refused)} not applied" if plan.refused else ""
    if dry_run:
        err.print(f"would change {len(plan.changes)} verdicts{unchanged}{refused}; nothing written", highlight=False)
    else:
        err.print(
            f"changed {len(plan.changes)} verdicts ({len(result.made)} in the state now){unchanged}{refused};"
            f" {result.written} link records and {result.published} articles to {where}",
            highlight=False,
            soft_wrap=True,
        )


def _table(changes: list[Change], dry_run: bool) -> Table:
    table = Table(title="would change" if dry_run else "changed", title_justify="left")
    for column in ("document", "was", "now", "by", "why"):
        table.add_column(column, overflow="fold")
    for change in changes[:SHOWN]:
        earlier, link = change.previous, change.link
        was = (
            f"{earlier.verdict} of {earlier.canonical_id}" if earlier.canonical_id != change.doc_id else earlier.verdict
        )
        now = f"{link.verdict} of {link.canonical_id}" if link.canonical_id != change.doc_id else str(link.verdict)
        why = change.reason if change.follows is None else f"follows {change.follows}"
        table.add_row(*(inert(str(cell)) for cell in (change.doc_id, was, now, change.decided_by, why)))
    if len(changes) > SHOWN:
        table.caption = f"and {len(changes) - SHOWN} more"
    return table

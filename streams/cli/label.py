"""`dedup label`: label candidate pairs on a terminal screen, for calibration."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from streams.cli.common import app, err, one_line_errors

if TYPE_CHECKING:
    from streams.labelling.pairs import LabelWriter, Pair
    from streams.labelling.screen import LabelApp


@app.command("label")
@one_line_errors
def label_command(
    pairs_file: Annotated[
        Path, typer.Argument(metavar="PAIRS", help="pairs.jsonl, as written by `dedup calibrate sample`.")
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="labels.jsonl: each decision is appended (and fsync'd) here.")
    ],
    by: Annotated[str | None, typer.Option("--by", help="Your name, written as labelled_by.")] = None,
) -> None:
    """Label candidate pairs as duplicates or not, for choosing thresholds.

    The screen shows both texts side by side (A, the later document, left;
    B, its canonical, right) with ids, languages and titles; what differs is
    highlighted: numbers yellow, names cyan, other words red. Above them:
    the score, the band and the model; below: the counts per band
    (labelled/total and duplicates, same- and cross-language).

    Keys: y duplicate | n not a duplicate | s skip | b or backspace back
    (labelling a pair again replaces its label: the last one wins) | q quit
    | up, down, page up, page down scroll.

    Each decision is appended to --out and fsync'd at once. Resumable: pairs
    already labelled in --out are passed over, so the same command goes on
    where the last one stopped. Format: schemas/label.schema.json.
    """
    from streams.labelling.pairs import LabelWriter, read_pairs

    if not pairs_file.exists():
        raise FileNotFoundError(f"pairs file {pairs_file} does not exist")
    if pairs_file.is_dir():
        raise IsADirectoryError(f"pairs file {pairs_file} is a directory")
    pairs = read_pairs(pairs_file)
    if not pairs:
        raise ValueError(f"{pairs_file} holds no pairs")
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise RuntimeError("dedup label is a screen: run it in a terminal")

    with LabelWriter(out) as writer:
        screen = label_screen(pairs, writer, by, subtitle=f"{pairs_file} -> {out}")
        decisions = screen.run() or 0
    keys = {pair.key for pair in pairs}
    done = sum(1 for key in screen.labels if key in keys)
    err.print(
        f"{decisions} decisions this session; {done} of {len(keys)} pairs labelled in {out}",
        highlight=False,
        soft_wrap=True,
    )


def label_screen(pairs: list[Pair], writer: LabelWriter, by: str | None = None, subtitle: str = "") -> LabelApp:
    """The screen over `pairs`, resuming after the labels already in the writer's file, and
    appending each decision there (`labelled_by` = `by`). The writer is opened first: it repairs
    a line torn by a crash, which reading the labels would otherwise refuse."""
    from streams.labelling.pairs import read_labels
    from streams.labelling.screen import LabelApp

    labels = {key: bool(record["label"]) for key, record in read_labels(writer.path).items()}
    return LabelApp(
        pairs,
        on_decision=lambda pair, duplicate: writer.label(pair, duplicate, by),
        labels=labels,
        subtitle=subtitle,
    )

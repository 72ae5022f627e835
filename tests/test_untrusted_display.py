"""Hostile document fields reaching a person: the review screen, its notifications and the terminal report.
Each test is a guarantee that once broke (markup or escapes from the crawl obeyed, a huge review frozen, a
bad links record fatal to the report).

Each test runs the real commands (`dedup run`, `dedup report`, the review screen of `dedup review`
driven by Textual's pilot) on documents whose id, title or body an attacker controls.
"""

from __future__ import annotations

import asyncio
import io
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.cli.review import files_review, review_screen
from tests.test_report import link

BASE = (
    "The city council of Riverton voted on Tuesday to approve a new budget for public transport, allocating"
    " funds for twelve electric buses, three new bicycle lanes along the river and repairs to the old central"
    " station. The mayor said the plan would cut commuting times across the northern districts and reduce air"
    " pollution over the next five years, while opposition members argued that the cost estimates were too"
    " optimistic and that taxes would have to rise. A final vote on the financing is expected next month after"
    " a series of public hearings in each of the seven districts of the city."
)
EDITS = (("twelve", "fourteen"), ("three", "four"), ("seven", "eight"))


def dedup(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(record) + b"\n" for record in records))
    return path


def simhash_review_run(folder: Path, ids: list[str], title: str = "Budget", bodies: list[str] | None = None) -> Path:
    """`dedup run` (stages 1-3, group_cap = 2) over a canonical and its edits: the third document goes to
    review at a Hamming distance. Returns the output folder (its state in out/state)."""
    bodies = bodies or [BASE] + [BASE.replace(*EDITS[i]) for i in range(len(ids) - 1)]
    records = [
        {
            "id": doc_id,
            "url": f"https://site{i}.example/story",
            "title": title,
            "body": body,
            "language": "en",
            "published_at": f"2026-03-03T1{i}:00:00Z",
        }
        for i, (doc_id, body) in enumerate(zip(ids, bodies, strict=True))
    ]
    stream = write_jsonl(folder / "stream.jsonl", records)
    (folder / "cap.toml").write_text("group_cap = 2\n", encoding="utf-8")
    out = folder / "out"
    done = dedup("run", str(stream), "--out", str(out), "-q", "--stages", "url,content,simhash",
                 "--config", str(folder / "cap.toml"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    verdicts = {r["doc_id"]: r["verdict"] for r in map(orjson.loads, (out / "links.jsonl").read_bytes().splitlines())}
    assert verdicts[ids[2]] == "review", verdicts
    return out


# ------------------------------------------------------------------------------- the review screen


@pytest.mark.parametrize("review_id", ["[bold red]evil[/]", "evil[/]"])
def test_review_notification_shows_a_document_id_as_it_is_not_as_markup(tmp_path: Path, review_id: str) -> None:
    """The toast after a decision ("applied: ID is a duplicate of ...") was Textual markup: an id with
    `[bold red]` was drawn red with the brackets gone, and an id with an unmatched `[/]` crashed the screen
    (MarkupError) right after the relink was applied."""
    from textual.widgets._toast import Toast, ToastRack

    out = simhash_review_run(tmp_path, ["canonical", "edit-1", review_id])
    pairs, apply = files_review(out / "state", tmp_path / "relinked", [], None)
    assert [pair.a for pair in pairs] == [review_id]
    toasts: list[str] = []

    async def drive() -> None:
        app = review_screen(pairs, apply, None, "alice")
        async with app.run_test(size=(140, 48), notifications=True) as pilot:
            await pilot.press("y")
            await pilot.pause()
            await pilot.pause(0.3)
            rack = app.screen.get_child_by_type(ToastRack)
            toasts.extend(str(toast.render()) for toast in rack.walk_children(Toast))
            await pilot.press("q")

    asyncio.run(drive())
    assert toasts, "the decision is notified"
    assert any(review_id in toast for toast in toasts), toasts


def test_review_screen_sends_no_terminal_escapes_from_a_title_or_body(tmp_path: Path) -> None:
    """A title and body with ESC sequences (clear screen, an OSC 8 hyperlink, blink) reached the terminal as
    they were: the screen shows them inertly (`streams.reporting.inert`), the terminal never executes them."""
    payload = "\x1b[2J\x1b]8;;https://evil.example/\x07click here\x1b]8;;\x07"
    title = f"Budget {payload}"
    bodies = [f"{body} \x1b[5mBLINK" for body in [BASE, BASE.replace(*EDITS[0]), BASE.replace(*EDITS[1])]]
    out = simhash_review_run(tmp_path, ["canonical", "edit-1", "edit-2"], title=title, bodies=bodies)
    pairs, apply = files_review(out / "state", tmp_path / "relinked", [], None)
    assert len(pairs) == 1
    written: list[str] = []

    async def drive() -> None:
        from rich.console import Console

        app = review_screen(pairs, apply, None, "alice")
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause()
            # What Textual's driver writes to the terminal for a full redraw of the screen.
            update = app.screen._compositor.render_update(full=True)
            console = Console(file=io.StringIO(), force_terminal=True, color_system="truecolor")
            written.append("".join(update.render_segments(console)))
            await pilot.press("q")

    asyncio.run(drive())
    screen = written[0]
    assert "Budget" in screen
    assert "\x1b[2J" not in screen, "the title clears the reviewer's terminal"
    assert "\x1b]8;;https://evil.example/" not in screen, "the title plants a hidden hyperlink"
    assert "\x1b[5mBLINK" not in screen, "the body's escape sequence reaches the terminal"


HUGE_SCREEN = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from streams.cli.review import files_review, review_screen
    out = Path(sys.argv[1])
    pairs, apply = files_review(out / "state", out.parent / "relinked", [], None)
    async def drive():
        app = review_screen(pairs, apply, None, "alice")
        async with app.run_test(size=(140, 48)) as pilot:
            await pilot.pause()
            print("shown", app.current.a, flush=True)
            await pilot.press("q")
    asyncio.run(drive())
    """
)


def test_a_huge_simhash_review_is_shown_promptly(tmp_path: Path) -> None:
    """A SimHash review's texts came from the published articles uncut (a semantic review's from the
    candidate record, cut at candidate_text_chars), and the word diff over them is quadratic: three
    near-identical bodies of 80,000 words (about 380 KB a line, under max_record_bytes) kept the screen
    from showing its first pair for minutes."""
    rng = random.Random(7)
    vocabulary = ["the", "a", "of", "to", "and", "in", "council", "city", "bus", "plan", "vote", "year", "mayor"]
    words = [rng.choice(vocabulary) for _ in range(80_000)]
    bodies = []
    for i in range(3):
        edited = list(words)
        if i:
            edited[len(words) * i // 3] = f"changed{i}"
        bodies.append(" ".join(edited))
    out = simhash_review_run(tmp_path, ["canonical", "edit-1", "edit-2"], bodies=bodies)
    try:
        shown = subprocess.run(
            [sys.executable, "-c", HUGE_SCREEN, str(out)], capture_output=True, text=True, timeout=45, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the review screen did not show the pair within 45 s")
    assert shown.returncode == 0 and "shown edit-2" in shown.stdout, shown.stderr


# ------------------------------------------------------------------------------- the terminal report


BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def test_report_terminal_shows_no_bidi_override_from_a_document_id(tmp_path: Path) -> None:
    """Input ids may hold U+202E (only category Cc is refused). The largest-groups table printed it raw:
    `invoice\\u202efdp.exe` read as `invoiceexe.pdf`, and the override ran on over the rest of the row."""
    spoof = "invoice\u202efdp.exe"
    records = [
        {"id": spoof, "url": "https://a.example/story", "title": "t", "body": BASE, "language": "en"},
        {"id": "copy", "url": "https://a.example/story?utm_source=x", "title": "t", "body": BASE, "language": "en"},
    ]
    stream = write_jsonl(tmp_path / "stream.jsonl", records)
    done = dedup("run", str(stream), "--out", str(tmp_path / "out"), "-q", "--stages", "url,content,simhash")
    assert done.returncode == 0, done.stderr
    report = dedup("report", str(tmp_path / "out" / "links.jsonl"))
    assert report.returncode == 0, report.stderr
    assert "Largest groups" in report.stdout
    rows = [line for line in report.stdout.splitlines() if "invoice" in line]
    assert not any(ch in report.stdout for ch in BIDI), rows


def test_report_terminal_prints_no_escape_sequence_from_a_links_file_id(tmp_path: Path) -> None:
    """Replay refuses an id with a control character (streams/records/output.py `_id`); the lenient report
    reader took it and the terminal table printed ESC sequences raw (here: clear the screen)."""
    evil = "doc\x1b[2J\x1b[31mowned"
    links = write_jsonl(tmp_path / "links.jsonl", [link(evil), link("copy", "duplicate", evil, "url")])
    report = dedup("report", str(links))
    assert report.returncode == 0, report.stderr
    assert "\x1b" not in report.stdout, repr(report.stdout[-600:])


@pytest.mark.parametrize("output", ["--json", "table", "--html"])
@pytest.mark.parametrize("score", [1e308, -1e308])
def test_report_survives_an_out_of_range_score(tmp_path: Path, output: str, score: float) -> None:
    """A link record with a semantic score of 1e308 (a finite JSON number) made `dedup report` die with an
    OverflowError traceback in every output: the reader that "skips and describes, never fatal" let it in."""
    links = write_jsonl(
        tmp_path / "links.jsonl",
        [link("c"), link("d", "duplicate", "c", "semantic", score), link("e", "duplicate", "c", "semantic", 0.97)],
    )
    args = {"--json": ["--json"], "table": [], "--html": ["--html", str(tmp_path / "report.html")]}[output]
    report = dedup("report", str(links), *args)
    assert "Traceback" not in report.stderr, report.stderr[-400:]
    assert report.returncode == 0, report.stderr[-400:]


@pytest.mark.parametrize("dry_run", [False, True])
def test_relink_shows_no_bidi_override_from_a_document_id(tmp_path: Path, dry_run: bool) -> None:
    """`dedup report` and the review screen show U+202E as a stand-in; the table of changes `dedup relink` prints
    (or would make) wrote the crawl's id raw, and so did its "not changed" lines: `invoice\\u202efdp.exe` read as
    `invoiceexe.pdf`, and the override ran on over the rest of the row."""
    spoof = "invoice\u202efdp.exe"
    out = simhash_review_run(tmp_path, ["canonical", "edit-1", spoof])
    labels = [
        {"a": spoof, "b": "canonical", "label": False},  # a change: a row of the table
        {"a": "edit-1", "b": spoof, "label": True},  # refused ("not changed"): edit-1 is in canonical's group
    ]
    decisions = write_jsonl(tmp_path / "labels.jsonl", labels)
    done = dedup(
        "relink", "--state", str(out / "state"), "--out", str(tmp_path / "out2"), "--decisions", str(decisions),
        *(["--dry-run"] if dry_run else []),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "invoice" in done.stdout and "invoice" in done.stderr, (done.stdout, done.stderr)
    shown = [line for line in (done.stdout + done.stderr).splitlines() if "invoice" in line]
    assert not any(ch in done.stdout + done.stderr for ch in BIDI), shown


def test_run_summary_shows_no_bidi_override_from_a_document_id(tmp_path: Path) -> None:
    """`dedup run`'s summary names the largest group's canonical: printed raw, `invoice\\u202efdp.exe` read as
    `invoiceexe.pdf`."""
    spoof = "invoice\u202efdp.exe"
    records = [
        {"id": spoof, "url": "https://a.example/story", "title": "t", "body": BASE, "language": "en"},
        {"id": "copy", "url": "https://a.example/story?utm_source=x", "title": "t", "body": BASE, "language": "en"},
    ]
    stream = write_jsonl(tmp_path / "stream.jsonl", records)
    done = dedup("run", str(stream), "--out", str(tmp_path / "out"), "--stages", "url,content,simhash")
    assert done.returncode == 0, done.stderr
    assert "invoice" in done.stderr, done.stderr
    assert not any(ch in done.stderr for ch in BIDI), [line for line in done.stderr.splitlines() if "invoice" in line]

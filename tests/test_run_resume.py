"""Running `dedup run` again continues: after Ctrl-C, a kill or a second day, the outputs hold every verdict once."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.evaluation.corpus import synthetic_articles
from streams.runner.embedded import locked

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "examples" / "articles.jsonl"
CHEAP = ("--stages", "url,content,simhash")
ORIGINALS = 12_000
COPIES = 3
"""Each article again under `COPIES` other ids: 48,000 documents, a run long enough to interrupt partway
after its first commit (2 s) even on a quiet machine (16,000 were decided before it there)."""


def _dedup(*args: str) -> list[str]:
    return [sys.executable, "-m", "streams", *args]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_dedup(*args), capture_output=True, text=True, timeout=300, check=False)


def _read(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def articles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """Real news sentences from ../shared/data: originals with re-crawls, syndicated copies and edits."""
    originals = list(synthetic_articles(ORIGINALS))
    records = [  # blocks of originals, each followed by their copies: new canonicals all along the run
        record
        for start in range(0, ORIGINALS, 400)
        for block in [originals[start : start + 400]]
        for record in block + [{**r, "id": f"{r['id']}-c{n}"} for n in range(COPIES) for r in block]
    ]
    path = tmp_path_factory.mktemp("resume") / "articles.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path, [r["id"] for r in records]


def _committed(database: Path) -> int:
    """Verdicts the run has committed so far (SQLite in WAL mode lets a reader look while it writes)."""
    if not database.exists():
        return 0
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        try:
            return db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0]
        except sqlite3.OperationalError:  # not created yet
            return 0


def _interrupt_then_resume(articles: tuple[Path, list[str]], out: Path, sig: signal.Signals) -> int:
    """Start a run, send `sig` once some of its outputs and state are on disk, run the same command again."""
    source, ids = articles
    command = _dedup("run", str(source), "--out", str(out), *CHEAP, "-q")
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while _committed(out / "state" / "state.sqlite3") == 0:  # the first commit of the state (after 2 s)
        assert process.poll() is None and time.monotonic() < deadline, "the run ended before it was interrupted"
        time.sleep(0.05)
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=60)
    decided_before = len(_read(out / "links.jsonl"))
    if sig in (signal.SIGINT, signal.SIGTERM):  # a stop asked for: the state commits what the outputs hold
        assert process.returncode == 128 + sig, stderr
        assert stderr.count("\n") == 1 and "run the same command again to resume" in stderr, stderr
        assert _committed(out / "state" / "state.sqlite3") == decided_before
    else:
        assert process.returncode == -sig
    assert 0 < decided_before < len(ids), "interrupted partway"
    again = _run(*command[3:])
    assert again.returncode == 0, again.stderr
    return decided_before


def _assert_complete(out: Path, ids: list[str]) -> None:
    """Every document has exactly one verdict, and every canonical is in deduped.jsonl exactly once."""
    links = _read(out / "links.jsonl")
    assert Counter(link["doc_id"] for link in links) == Counter(ids)
    published = [link["doc_id"] for link in links if link["verdict"] in ("unique", "review")]
    deduped = [article["id"] for article in _read(out / "deduped.jsonl")]
    assert deduped == published  # each once, in the order decided
    verdicts = {link["doc_id"]: link for link in links}
    assert all(verdicts[link["canonical_id"]]["verdict"] == "unique" for link in links)


def test_ctrl_c_then_the_same_command_completes_the_outputs(articles: tuple[Path, list[str]], tmp_path: Path) -> None:
    _interrupt_then_resume(articles, tmp_path / "out", signal.SIGINT)
    _assert_complete(tmp_path / "out", articles[1])


def test_a_run_stopped_by_sigterm_stops_as_on_ctrl_c_and_the_same_command_completes_the_outputs(
    articles: tuple[Path, list[str]], tmp_path: Path
) -> None:
    """SIGTERM (`docker stop`, systemd, Kubernetes) killed the run as SIGKILL does: the state left up to 2 s behind
    the outputs, those documents decided again by the next run. It stops as on Ctrl-C, with exit code 143."""
    _interrupt_then_resume(articles, tmp_path / "out", signal.SIGTERM)
    _assert_complete(tmp_path / "out", articles[1])


def test_a_killed_run_resumes_without_writing_a_verdict_twice(articles: tuple[Path, list[str]], tmp_path: Path) -> None:
    """SIGKILL may tear the last line and leaves state uncommitted since the last commit: both are made good."""
    _interrupt_then_resume(articles, tmp_path / "out", signal.SIGKILL)
    _assert_complete(tmp_path / "out", articles[1])


def test_a_second_day_into_the_same_out_appends(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = _run("run", str(SAMPLE), "--out", str(out), *CHEAP, "-q")
    assert first.returncode == 0, first.stderr
    day_one_links, day_one_deduped = _read(out / "links.jsonl"), _read(out / "deduped.jsonl")
    day_two = tmp_path / "day2.jsonl"
    originals = [r for r in map(orjson.loads, SAMPLE.read_bytes().splitlines()[:3]) if "url" in r]
    copies = [{**r, "id": r["id"] + "-day2", "url": r["url"] + "?utm_medium=x"} for r in originals]
    # The sample again: redelivered, already in the outputs, not written again.
    day_two.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in copies) + SAMPLE.read_bytes())
    second = _run("run", str(day_two), "--out", str(out), *CHEAP, "-q")
    assert second.returncode == 0, second.stderr
    links = _read(out / "links.jsonl")
    assert links[: len(day_one_links)] == day_one_links
    assert [link["doc_id"] for link in links[len(day_one_links) :]] == [r["id"] + "-day2" for r in originals]
    assert _read(out / "deduped.jsonl") == day_one_deduped  # the day's copies are duplicates
    rejected = Counter(r["source"] for r in _read(out / "rejected.jsonl"))
    assert rejected == {str(SAMPLE): 2, str(day_two): 2}  # each day's bad lines, once


def test_outputs_of_another_state_are_refused_unless_forced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = _run("run", str(SAMPLE), "--out", str(out), *CHEAP, "-q")
    assert first.returncode == 0, first.stderr
    before = (out / "links.jsonl").read_bytes()
    other = ["run", str(SAMPLE), "--out", str(out), "--state", str(tmp_path / "other"), *CHEAP, "-q"]
    refused = _run(*other)
    assert refused.returncode == 2
    assert "holds the outputs of state folder" in refused.stderr and "--force" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
    assert (out / "links.jsonl").read_bytes() == before
    forced = _run(*other, "--force")
    assert forced.returncode == 0, forced.stderr
    assert len(_read(out / "links.jsonl")) == len(before.splitlines())  # started over, for the other state


def test_the_out_folder_is_locked_against_a_second_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with locked(out):  # as a running `dedup run --out out --state elsewhere` holds it
        result = _run("run", str(SAMPLE), "--out", str(out), "--state", str(tmp_path / "s"), *CHEAP)
    assert result.returncode == 2
    assert f"output folder {out} is in use by another dedup run" in result.stderr
    assert not (out / "links.jsonl").exists()


def test_an_out_that_is_a_file_is_one_clear_line(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("not a folder\n")
    result = _run("run", str(SAMPLE), "--out", str(out), *CHEAP)
    assert result.returncode == 2
    assert f"output folder {out} is a file, not a folder" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and out.read_text() == "not a folder\n"


def test_force_never_starts_over_the_outputs_of_the_same_state(tmp_path: Path) -> None:
    """Started over, they would lose the canonicals that the state remembers as published."""
    out = tmp_path / "out"
    first = _run("run", str(SAMPLE), "--out", str(out), *CHEAP, "-q")
    assert first.returncode == 0, first.stderr
    before = [(path, path.read_bytes()) for path in (out / "deduped.jsonl", out / "rejected.jsonl")]
    again = _run("run", str(SAMPLE), "--out", str(out), *CHEAP, "-q", "--force")
    assert again.returncode == 0, again.stderr
    assert all(path.read_bytes() == content for path, content in before)
    assert len(_read(out / "links.jsonl")) == 12

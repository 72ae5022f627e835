"""`dedup run`, `dedup replay` and `dedup relink` on files, attacked as a user could: an output given back as an
input, settings changed between two runs on one state folder. Each test is a guarantee that broke (one verdict
per document, a group counts each member once, a command on files ends)."""

from __future__ import annotations

import shutil
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

from streams.config import RetentionSettings, Settings
from streams.core.model import DAY_S, Stage
from streams.runner.embedded import RunPaths, run
from streams.runner.replay import replay_files
from tests.test_relink import published
from tests.test_runs_across_time import _article, _write

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "examples" / "articles.jsonl"
CHEAP = [Stage.URL, Stage.CONTENT, Stage.SIMHASH]
TEXT_A = " ".join(f"alpha{i} beta{i % 7} gamma{i % 11}" for i in range(120))
TEXT_B = " ".join(f"delta{i} epsilon{i % 5} zeta{i % 13}" for i in range(120))
TEXT_C = " ".join(f"kappa{i} lambda{i % 3} mu{i % 17}" for i in range(120))


def _dedup(*args: str, stdin: Path | None = None) -> subprocess.CompletedProcess[str]:
    with open(stdin, "rb") if stdin is not None else open("/dev/null", "rb") as given:
        return subprocess.run(
            [sys.executable, "-m", "streams", *args],
            stdin=given,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def _read(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def _groups(state: Path) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(state / "state.sqlite3")) as db:
        return sorted(db.execute("SELECT canonical_id, size FROM groups").fetchall())


# --- an output of the run given as its input


@pytest.fixture
def sample_out(tmp_path: Path) -> Path:
    """The sample run once into `out` (its two bad lines in out/rejected.jsonl)."""
    out = tmp_path / "out"
    first = _dedup("run", str(SAMPLE), "--out", str(out), "--stages", "url,content,simhash", "-q")
    assert first.returncode == 0, first.stderr
    return out


@pytest.mark.parametrize("name", ["rejected.jsonl", "links.jsonl", "deduped.jsonl"])
@pytest.mark.parametrize("how", ["path", "symlink", "stdin"])
def test_an_output_of_the_run_given_as_its_input_is_refused(sample_out: Path, name: str, how: str) -> None:
    """`dedup run out/rejected.jsonl --out out/` read the lines it appended: every rejection, rejected again,
    was a new line of the file it read, and the run never ended (4.8 GB in a minute from 20,000 bad lines).
    Its own links.jsonl or deduped.jsonl were read while appended to as well (the articles decided against
    their own verdicts). Refused, by any name of the file: a symlink, or standard input redirected from it."""
    output = sample_out / name
    before = {path.name: path.read_bytes() for path in sample_out.glob("*.jsonl")}
    args = ["run", "--out", str(sample_out), "--stages", "url,content,simhash", "-q"]
    if how == "path":
        result = _dedup(*args, str(output))
    elif how == "symlink":
        alias = sample_out.parent / "input.jsonl"
        alias.symlink_to(output)
        result = _dedup(*args, str(SAMPLE), str(alias))
    else:
        result = _dedup(*args, "-", stdin=output)
    assert result.returncode == 2, result.stderr
    assert f"this run's output {output}" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert {path.name: path.read_bytes() for path in sample_out.glob("*.jsonl")} == before


def test_an_input_named_like_an_output_in_another_folder_is_read(sample_out: Path, tmp_path: Path) -> None:
    """Only the very files the run writes are refused: a rejected.jsonl elsewhere is input like any other."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    copy = elsewhere / "rejected.jsonl"
    copy.write_bytes((sample_out / "rejected.jsonl").read_bytes())
    result = _dedup("run", str(copy), "--out", str(sample_out), "--stages", "url,content,simhash", "-q")
    assert result.returncode == 0, result.stderr
    assert Counter(r["source"] for r in _read(sample_out / "rejected.jsonl")) == {str(SAMPLE): 2, str(copy): 2}


# --- verdicts_days lengthened between two commands on one state folder


def _archive(tmp_path: Path) -> str:
    """A canonical and its URL copy a month ago, and a document ten days after them: the first two verdicts
    pass the default 7 `verdicts_days` and are swept; the group (kept `exact_days`) stays."""
    t0 = int(time.time()) - 30 * DAY_S
    return _write(
        tmp_path / "archive.jsonl",
        [
            _article("canonical", "https://g.example.com/a", TEXT_A, t0),
            _article("copy", "https://g.example.com/a?utm_source=x", TEXT_B, t0),
            _article("later", "https://g.example.com/b", TEXT_C, t0 + 10 * DAY_S),
        ],
    )


LONGER = Settings(stages=CHEAP, retention=RetentionSettings(verdicts_days=60))


def test_a_rerun_with_a_longer_verdicts_days_counts_each_member_once(tmp_path: Path) -> None:
    """A run with `verdicts_days` 7, then the same command with 60: the copy's verdict had expired (and been
    swept) under 7, but under 60 its date was within the retention, so the re-run neither found its verdict
    nor asked the journal, decided it again, and its canonical's group counted it twice (size 3, the group
    cap reached a third sooner). The state keeps the horizon the shorter retention expired verdicts at."""
    source = _archive(tmp_path)
    paths = RunPaths(out=tmp_path / "out", state=tmp_path / "out" / "state")
    run(Settings(stages=CHEAP), [source], paths)
    assert _groups(paths.state) == [("canonical", 2)]
    stats = run(LONGER, [source], paths)
    assert _groups(paths.state) == [("canonical", 2)]
    assert stats.repeated == 3
    assert Counter(r["doc_id"] for r in _read(paths.links)) == {"canonical": 1, "copy": 1, "later": 1}


def test_a_replay_again_with_a_longer_verdicts_days_counts_each_member_once(tmp_path: Path) -> None:
    """The same in `dedup replay`: run again into the folder it rebuilt with a longer `verdicts_days`, it took
    the copy's link, expired there under 7, for one the state never took in, and restored it again."""
    source = _archive(tmp_path)
    paths = RunPaths(out=tmp_path / "out", state=tmp_path / "out" / "state")
    settings = Settings(stages=CHEAP)
    run(settings, [source], paths)
    rebuilt = tmp_path / "rebuilt"
    layout = settings.simhash.band_layout
    replay_files([str(paths.links)], rebuilt, retention=settings.retention, band_layout=layout)
    stats = replay_files([str(paths.links)], rebuilt, retention=LONGER.retention, band_layout=layout)
    assert (stats.restored, stats.already_there) == (0, 3)
    assert _groups(rebuilt) == _groups(paths.state) == [("canonical", 2)]


def test_a_longer_verdicts_days_keeps_later_verdicts_longer(tmp_path: Path) -> None:
    """The horizon holds only what the shorter retention expired: a verdict it left alive lives the new
    `verdicts_days`, so a redelivery 30 days on still gets it from the state."""
    t0 = int(time.time()) - 40 * DAY_S
    paths = RunPaths(out=tmp_path / "out", state=tmp_path / "out" / "state")
    first = [
        _article("a", "https://x.example.com/a", TEXT_A, t0),
        _article("b", "https://x.example.com/b", TEXT_B, t0 + 10 * DAY_S),
    ]
    run(Settings(stages=CHEAP), [_write(tmp_path / "a.jsonl", first)], paths)
    later = _write(tmp_path / "c.jsonl", [_article("c", "https://x.example.com/c", TEXT_C, t0 + 40 * DAY_S)])
    run(LONGER, [later], paths)
    with closing(sqlite3.connect(paths.state / "state.sqlite3")) as db:
        kept = sorted(doc_id for (doc_id,) in db.execute("SELECT doc_id FROM verdicts"))
    assert kept == ["b", "c"]  # `a` expired under 7 days; `b`, 30 days old, lives the 60


# --- an oversized line that opens with white space


def test_an_oversized_line_that_opens_with_white_space_is_rejected_not_skipped_as_blank(tmp_path: Path) -> None:
    """A line over `max_record_bytes` is read on in chunks and kept by its first KiB; when that KiB was white
    space (a record indented by a megabyte of spaces), the reader took the line for a blank one and skipped
    it: not decided, not rejected, not counted (read 1 of 2 lines, rejected 0)."""
    padded = b" " * 1_000_000 + orjson.dumps(_article("padded", "https://p.example.com/a", TEXT_A, 1_700_000_000))
    fine = orjson.dumps(_article("fine", "https://p.example.com/b", TEXT_B, 1_700_000_000))
    source = tmp_path / "in.jsonl"
    source.write_bytes(padded + b"\r\n\n" + b" " * 2_000 + b"\n" + fine)  # a blank line stays a blank line
    paths = RunPaths(out=tmp_path / "out", state=tmp_path / "out" / "state")
    stats = run(Settings(stages=CHEAP), [str(source)], paths)
    assert (stats.read, stats.rejected) == (2, 1)
    (rejection,) = _read(paths.rejected)
    assert rejection["line"] == 1 and "above the limit" in rejection["reason"]
    assert [r["doc_id"] for r in _read(paths.links)] == ["fine"]


# --- a document seen again under another URL, or the same URL normalised otherwise


def test_a_rerun_with_another_sources_file_writes_no_second_line_for_a_document(tmp_path: Path) -> None:
    """The same command again with a `--sources` file (its host now keeps only `id`, so `?page=2` goes): the
    document, its id and text unchanged, got its first verdict (already decided), but its link line carried the
    URL hash of the new normalisation, so links.jsonl took a second line for it; so did a crawl of the same
    document (id and text) under another URL. A document whose verdict is in the file gets no second line."""
    url = "https://n.example.com/story?page=2"
    source = _write(
        tmp_path / "in.jsonl",
        [
            _article("story", url, TEXT_A, 1_700_000_000),
            _article("story", "https://mirror.example.org/story", TEXT_A, 1_700_000_000),
        ],
    )
    sources = tmp_path / "sources.toml"
    sources.write_text('["n.example.com"]\nkeep_params = ["id"]\n')
    paths = RunPaths(out=tmp_path / "out", state=tmp_path / "out" / "state")
    run(Settings(stages=CHEAP), [source], paths)
    stats = run(Settings(stages=CHEAP, sources=sources), [source], paths)
    assert stats.repeated == 2
    assert [(r["doc_id"], r["verdict"]) for r in _read(paths.links)] == [("story", "unique")]


# --- an output line damaged between two runs


def test_a_damaged_output_line_says_what_to_do_and_doing_it_completes_the_outputs(sample_out: Path) -> None:
    """A line of out/links.jsonl that is no JSON object (a disk error, a hand edit) stops the run, which said
    "move it away, or use --force to start the outputs over"; but `--force` never starts over the outputs of
    the run's own state folder, so the same error came back. The message now says what works: fix or delete
    the line (the document's verdict is written again from the state), or move the file away."""
    links = sample_out / "links.jsonl"
    lines = links.read_bytes().splitlines(keepends=True)
    links.write_bytes(b"".join([*lines[:2], b"garbage\n", *lines[3:]]))
    args = ["run", str(SAMPLE), "--out", str(sample_out), "--stages", "url,content,simhash", "-q"]
    for extra in ([], ["--force"]):
        refused = _dedup(*args, *extra)
        assert refused.returncode == 2, refused.stderr
        assert f"{links}:3 is not a JSON object" in refused.stderr and "delete that line" in refused.stderr
        assert "use --force" not in refused.stderr
    links.write_bytes(b"".join([*lines[:2], *lines[3:]]))  # the line deleted, as the message says
    again = _dedup(*args)
    assert again.returncode == 0, again.stderr
    assert len(_read(links)) == len(lines)
    assert Counter(r["doc_id"] for r in _read(links)) == Counter(orjson.loads(line)["doc_id"] for line in lines)


# --- relink run twice (held: a guard)


def test_a_relink_run_twice_writes_once_and_never_links_to_a_duplicate(sample_out: Path, tmp_path: Path) -> None:
    """The same `dedup relink` command twice: the second changes nothing (no record, no group size); a label
    linking a document to a duplicate, or a canonical to another group, is refused with its reason."""
    labels = tmp_path / "labels.jsonl"
    labels.write_bytes(
        b"".join(
            orjson.dumps(label) + b"\n"
            for label in (
                {"a": "metro-1-updated", "b": "metro-1", "label": False},
                {"a": "fares-1", "b": "metro-1-recrawl", "label": True},
                {"a": "metro-1-recrawl", "b": "metro-1-updated", "label": True},
            )
        )
    )
    state, out2 = sample_out / "state", tmp_path / "out2"
    # metro-1-updated (a SimHash duplicate) as published elsewhere: the article to publish it unlinked with.
    updated = next(orjson.loads(line) for line in SAMPLE.read_bytes().splitlines() if b'"metro-1-updated"' in line)
    articles = tmp_path / "articles.jsonl"
    articles.write_bytes(orjson.dumps(published(Settings(), updated)) + b"\n")
    args = ["relink", "--state", str(state), "--out", str(out2), "--decisions", str(labels)]
    first = _dedup(*args, "--articles", str(articles), "-q")
    assert first.returncode == 0, first.stderr
    groups, written = _groups(state), (out2 / "links.jsonl").read_bytes()
    assert [(r["doc_id"], r["verdict"]) for r in _read(out2 / "links.jsonl")] == [("metro-1-updated", "unlinked")]
    assert first.stderr.count("merging two groups is not done") == 2
    second = _dedup(*args, "--articles", str(articles), "-q")
    assert second.returncode == 0, second.stderr
    assert "changed 0 verdicts" in second.stderr
    assert _groups(state) == groups and (out2 / "links.jsonl").read_bytes() == written


# --- one input file given twice


@pytest.mark.parametrize("how", ["path", "symlink", "relative"])
def test_an_input_given_twice_is_refused_before_any_work(tmp_path: Path, how: str) -> None:
    """`dedup run a.jsonl a.jsonl` read the file twice: the second pass was all redeliveries, but each of its bad
    lines was rejected again, and summary.json said 4 rejected where rejected.jsonl held 2 (and 28 read of 14).
    A glob that overlaps a named file (`data/*.jsonl data/a.jsonl`) does the same. Refused by any name of it."""
    out = tmp_path / "out"
    if how == "path":
        second = str(SAMPLE)
    elif how == "symlink":
        (tmp_path / "alias.jsonl").symlink_to(SAMPLE)
        second = str(tmp_path / "alias.jsonl")
    else:
        second = str(Path("examples") / ".." / "examples" / SAMPLE.name)
    result = subprocess.run(
        [sys.executable, "-m", "streams", "run", str(SAMPLE), second, "--out", str(out), "-q"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert f"input {second} is {SAMPLE} again" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not out.exists() or not any(out.glob("*.jsonl"))


def test_a_report_of_one_links_file_given_twice_is_refused(sample_out: Path) -> None:
    """The report counted each record of a links file given twice twice over."""
    links = str(sample_out / "links.jsonl")
    result = _dedup("report", links, links)
    assert result.returncode == 2, result.stderr
    assert f"input {links} is {links} again" in result.stderr, result.stderr


def _chained_links(tmp_path: Path) -> tuple[str, RunPaths]:
    """a, its content copy a2, and b; then b's line edited by hand into a duplicate of a2 (itself a duplicate of
    a): a chain, which no run writes."""
    t0 = int(time.time()) - 3600
    records = [
        _article("a", "https://a.example.com/1", TEXT_A, t0),
        _article("a2", "https://a2.example.com/1", TEXT_A, t0 + 1),
        _article("b", "https://b.example.com/1", TEXT_B, t0 + 2),
    ]
    source = _write(tmp_path / "in.jsonl", records)
    paths = RunPaths(out=tmp_path / "out", state=tmp_path / "out" / "state")
    run(Settings(stages=CHEAP), [source], paths)
    lines = _read(paths.links)
    assert [(r["doc_id"], r["verdict"], r["canonical_id"]) for r in lines][1] == ("a2", "duplicate", "a")
    lines[2].update(verdict="duplicate", canonical_id="a2", stage="simhash", score=3)
    paths.links.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in lines))
    return source, paths


def test_a_chain_in_a_links_file_is_skipped_by_its_replay_as_by_the_topics(tmp_path: Path) -> None:
    """`dedup replay` of the links topic skips a link to a document that is no canonical ("a chain"); the replay
    of a links file restored it, and its state held b as a duplicate of a duplicate."""
    _, paths = _chained_links(tmp_path)
    stats = replay_files([str(paths.links)], tmp_path / "replayed", band_layout=Settings().simhash.band_layout)
    assert stats.bad == [f"{paths.links}:3: its canonical a2 is no canonical (duplicate of a): a chain"], stats.bad
    with closing(sqlite3.connect(tmp_path / "replayed" / "state.sqlite3")) as db:
        assert db.execute("SELECT doc_id FROM verdicts WHERE doc_id = 'b'").fetchall() == []


def test_a_chain_in_a_lost_states_links_file_is_not_taken_in_and_its_document_is_decided_again(
    tmp_path: Path,
) -> None:
    """The same file, and the state folder lost: the run that takes the file in skips the chain as the replay does,
    so b is decided again (a canonical, its line written), never held as a duplicate of a duplicate."""
    source, paths = _chained_links(tmp_path)
    shutil.rmtree(paths.state)
    run(Settings(stages=CHEAP), [source], paths)
    lines = _read(paths.links)
    assert [(r["doc_id"], r["verdict"], r["canonical_id"]) for r in lines][3:] == [("b", "unique", "b")]
    with closing(sqlite3.connect(paths.state / "state.sqlite3")) as db:
        assert db.execute("SELECT verdict, canonical_id FROM verdicts WHERE doc_id = 'b'").fetchall() == [
            ("unique", "b")
        ]

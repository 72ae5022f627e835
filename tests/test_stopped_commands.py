"""A command killed past the state's last commit, then another command on the same state instead of the same one.

A kill leaves lines in links.jsonl (and articles in deduped.jsonl) that the state never took in: decisions the same
command makes again when it is run again (`tests/test_random_kills.py`). A later day's run, or a relink, on the
state in between would decide without them, while the outputs say they were made: the indexers could get a second
copy of a story published just before the kill, and a state rebuilt from links.jsonl would not be the live one.
Such a command is refused, naming the one to run again; after it, the outputs and state are those of commands never
killed.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from streams.config import Settings
from streams.core.model import Stage
from streams.core.relink import Label
from streams.runner.embedded import RunPaths, run
from streams.runner.relink import relink_files
from streams.runner.replay import replay_files
from tests.children import KILLED, in_child
from tests.test_random_kills import _assert_same, _environment, _lines, _relink_child, _run_in_chunks
from tests.test_random_replays import _settings
from tests.test_runs_across_time import TEXT_A, TEXT_B, TEXT_C, _article, _write

DAY = 86_400
T0 = 1_793_491_200
OPTIONS: dict[str, Any] = {"group_cap": 1000, "figure_check": "off"}
EDITED_A = TEXT_A.replace("gamma3 ", "gamma4 ", 1)
"""TEXT_A with one word changed: a SimHash duplicate of it."""
UNLINK_D = [Label("d", "c", False)]
"""A person's decision: d is no duplicate of c."""


def _paths(folder: Path) -> RunPaths:
    return RunPaths(out=folder, state=folder / "state")


def _days(tmp_path: Path) -> tuple[str, str]:
    day1 = [
        _article("a", "https://a.example.com/1", TEXT_A, T0),
        _article("x", "https://x.example.com/1", TEXT_B, T0 + 60),
        _article("y", "https://y.example.com/1", TEXT_C, T0 + 120),
    ]
    day2 = [_article("b", "https://b.example.com/1", TEXT_A, T0 + DAY)]  # a copy of a, under another id and URL
    return _write(tmp_path / "day1.jsonl", day1), _write(tmp_path / "day2.jsonl", day2)


def _head(tmp_path: Path) -> tuple[Path, str]:
    """c, and d a SimHash duplicate of it, to run first; e, another copy of d, to run after a relink."""
    head = [
        _article("c", "https://c.example.com/1", TEXT_A, T0),
        _article("d", "https://d.example.com/1", EDITED_A, T0 + 60),
    ]
    later = [_article("e", "https://e.example.com/1", EDITED_A, T0 + 120)]
    return Path(_write(tmp_path / "head.jsonl", head)), _write(tmp_path / "later.jsonl", later)


def test_another_run_after_a_run_killed_past_its_commit_is_refused_until_the_killed_one_completes(
    tmp_path: Path,
) -> None:
    settings = _settings(OPTIONS)
    day1, day2 = _days(tmp_path)
    clean = _paths(tmp_path / "clean")
    run(settings, [day1], clean)
    run(settings, [day2], clean)
    killed = _paths(tmp_path / "killed")
    # a and x decided and their lines flushed, no commit yet: a is published, the state does not know it
    assert _run_in_chunks(settings, day1, killed, 10, ("emit-flushed", 2)) == KILLED
    assert b'"a"' in killed.deduped.read_bytes()
    for other in (killed, RunPaths(out=tmp_path / "elsewhere", state=killed.state)):
        with pytest.raises(ValueError, match=r"day1\.jsonl.*stopped before it completed"):
            run(settings, [day2], other)
    assert not (tmp_path / "elsewhere" / "links.jsonl").exists()
    run(settings, [day1], killed)
    run(settings, [day2], killed)
    _assert_same(killed.out, clean.out, killed.state, clean.state, "day 1 killed, completed, then day 2")


def test_a_state_rebuilt_from_the_links_a_killed_run_left_takes_its_last_records_in(tmp_path: Path) -> None:
    """The refusal's way out when the stopped command cannot be run again (its input is gone): the state folder
    rebuilt by `dedup replay` from links.jsonl, put in place of the old one, holds what the kill left there."""
    settings = _settings(OPTIONS)
    day1, day2 = _days(tmp_path)
    killed = _paths(tmp_path / "killed")
    assert _run_in_chunks(settings, day1, killed, 10, ("emit-flushed", 2)) == KILLED
    rebuilt = tmp_path / "rebuilt"
    replay_files([str(killed.links)], rebuilt, retention=settings.retention, band_layout=settings.simhash.band_layout)
    shutil.rmtree(killed.state)
    rebuilt.rename(killed.state)
    run(settings, [day2], killed)
    assert [(r["doc_id"], r["verdict"], r["canonical_id"]) for r in _links(killed.links)] == [
        ("a", "unique", "a"),
        ("x", "unique", "x"),
        ("b", "duplicate", "a"),
    ]
    assert [r["id"] for r in _links(killed.deduped)] == ["a", "x"]


@pytest.fixture
def configured(monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings of the runs, also in the environment, where `relink_files` reads them."""
    for name, value in _environment(OPTIONS).items():
        monkeypatch.setenv(name, value)
    return _settings(OPTIONS)


def test_a_run_after_a_relink_killed_past_its_writes_is_refused_until_the_relink_completes(
    tmp_path: Path, configured: Settings
) -> None:
    settings = configured
    head, later = _head(tmp_path)
    labels = UNLINK_D
    clean, killed = _paths(tmp_path / "clean"), _paths(tmp_path / "killed")
    for paths in (clean, killed):
        run(settings, [str(head)], paths)
    assert [line["verdict"] for line in _links(clean.links)] == ["unique", "duplicate"]
    relink_files(clean.state, clean.out, decisions=labels, articles=[head])
    run(settings, [later], clean)
    # the relink's records synced to links.jsonl and deduped.jsonl, its state not committed
    assert in_child(_relink_child, killed.out, labels, head, OPTIONS, ("relinked-flushed", 1)) == KILLED
    assert _links(killed.links)[-1]["verdict"] == "unlinked"
    with pytest.raises(ValueError, match=r'relink.*"a":"d","b":"c","duplicate":false.*stopped before it completed'):
        run(settings, [later], killed)
    relink_files(killed.state, killed.out, decisions=labels, articles=[head])
    run(settings, [later], killed)
    _assert_same(killed.out, clean.out, killed.state, clean.state, "a relink killed, completed, then a run")


def test_a_run_after_a_relink_that_completed_into_its_folder_goes_on(tmp_path: Path, configured: Settings) -> None:
    """The relink's records lie past the run's last commit in links.jsonl, yet the relink committed them."""
    settings = configured
    head, later = _head(tmp_path)
    paths = _paths(tmp_path / "out")
    run(settings, [str(head)], paths)
    relink_files(paths.state, paths.out, decisions=UNLINK_D, articles=[head])
    run(settings, [later], paths)
    assert [(line["doc_id"], line["verdict"]) for line in _links(paths.links)] == [
        ("c", "unique"),
        ("d", "duplicate"),
        ("d", "unlinked"),
        ("e", "duplicate"),
    ]


def _links(path: Path) -> list[dict[str, Any]]:
    import orjson

    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


@pytest.mark.parametrize("later", ["the same folder", "another folder"])
def test_articles_a_kill_kept_from_deduped_jsonl_are_owed_until_a_run_reads_their_documents(
    tmp_path: Path, later: str
) -> None:
    """A daily job writes the day's articles to one file and runs one command on it. Day 2 is killed once its links
    reached links.jsonl and before its articles reached deduped.jsonl. Day 3, the same command on that day's
    articles, takes in day 2's links, so c is a canonical whose article deduped.jsonl lacks, and it never reads c:
    the article must not be lost without a word. Every run with this state says which articles it owes (and the
    command exits 1) until one reads their documents and writes them: into its own output folder, which may be
    another (`dedup run day2.jsonl --state out/state --out out2/`, the README's incremental run)."""
    from typer.testing import CliRunner

    from streams.cli import app

    settings = Settings(stages=[Stage.URL, Stage.CONTENT, Stage.SIMHASH])
    today = tmp_path / "today.jsonl"
    paths = _paths(tmp_path / "out")
    day2 = [
        _article("c", "https://c.example.com/1", TEXT_C, T0 + DAY),
        _article("b", "https://b.example.com/1", TEXT_A, T0 + DAY),
    ]
    _write(
        today,
        [_article("a", "https://a.example.com/1", TEXT_A, T0), _article("x", "https://x.example.com/1", TEXT_B, T0)],
    )
    assert run(settings, [str(today)], paths).owed == []
    _write(today, day2)
    assert _run_in_chunks(settings, str(today), paths, 10, ("links-handed", 1)) == KILLED
    assert [line["doc_id"] for line in _lines(paths.links)] == ["a", "x", "c", "b"]
    assert [article["id"] for article in _lines(paths.deduped)] == ["a", "x"]
    _write(today, [_article("y", "https://y.example.com/1", TEXT_B, T0 + 2 * DAY)])
    assert run(settings, [str(today)], paths).owed == ["c"]
    after = paths if later == "the same folder" else RunPaths(out=tmp_path / "out2", state=paths.state)
    cli = ["run", str(today), "--out", str(after.out), "--state", str(paths.state), "--stages", "url,content,simhash"]
    said = CliRunner().invoke(app, [*cli, "-q"])
    assert said.exit_code == 1 and "deduped.jsonl lacks the articles of 1 canonical" in said.output, said.output
    assert "c" in said.output.split("canonical", 1)[1]
    _write(tmp_path / "day2.jsonl", day2)  # day 2's file again
    stats = run(settings, [str(tmp_path / "day2.jsonl")], after)
    assert stats.owed == []
    assert [article["id"] for article in _lines(after.deduped)] == (["a", "x", "c"] if after is paths else ["c"])
    assert [line["doc_id"] for line in _lines(paths.links)] == ["a", "x", "c", "b", "y"]


def test_an_owed_article_whose_document_a_person_linked_since_is_owed_no_more(tmp_path: Path) -> None:
    """As above, with the owed article a document under review (the next day's report of a template, sent to
    review by the figure check), and before a run reads it again a person labels it a duplicate of the first
    (`dedup relink`): it publishes nothing now, so the run that reads it owes nothing more. The state had kept
    it owed for good, and every run said so."""
    from tests.test_figure_check import T0 as MARKET_T0
    from tests.test_figure_check import market_lines

    settings = Settings(stages=[Stage.URL, Stage.CONTENT, Stage.SIMHASH], simhash={"figure_check": "review"})
    first, second = market_lines()
    today = tmp_path / "today.jsonl"
    paths = _paths(tmp_path / "out")
    today.write_bytes(first + b"\n")
    run(settings, [str(today)], paths)
    today.write_bytes(second + b"\n")
    assert _run_in_chunks(settings, str(today), paths, 10, ("links-handed", 1)) == KILLED
    assert [(r["doc_id"], r["verdict"]) for r in _lines(paths.links)] == [("r0", "unique"), ("r1", "review")]
    _write(today, [_article("y", "https://y.example.com/1", TEXT_B, MARKET_T0 + 2 * DAY)])
    assert run(settings, [str(today)], paths).owed == ["r1"]
    relink_files(paths.state, paths.out, decisions=[Label("r1", "r0", True)])
    (tmp_path / "day2.jsonl").write_bytes(second + b"\n")
    assert run(settings, [str(tmp_path / "day2.jsonl")], paths).owed == []
    assert [article["id"] for article in _lines(paths.deduped)] == ["r0", "y"]

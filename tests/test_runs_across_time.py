"""`dedup run` and `dedup replay` on files across time: a kill between the journal's commit and the state's, a
re-run of a finished run days later, a replay long after the run, a replay run twice or files replayed out of
order. Each test is a guarantee that once broke (one verdict per document, a re-run changes nothing, a replay
rebuilds the live state), for documents older than `verdicts_days` or dated past their ingest (clamped to a day
after it).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.config import RetentionSettings, Settings
from streams.core.model import DAY_S, Stage
from streams.runner.embedded import RunPaths, run
from streams.runner.replay import replay_files
from streams.stores.journal import Journal
from streams.stores.sqlite import SqliteStateStore

CHEAP = [Stage.URL, Stage.CONTENT, Stage.SIMHASH]
TEXT_A = " ".join(f"alpha{i} beta{i % 7} gamma{i % 11}" for i in range(120))
TEXT_B = " ".join(f"delta{i} epsilon{i % 5} zeta{i % 13}" for i in range(120))
TEXT_C = " ".join(f"kappa{i} lambda{i % 3} mu{i % 17}" for i in range(120))
FAR_FUTURE = int(datetime(2100, 1, 1, tzinfo=UTC).timestamp())


def _rfc(when: int) -> str:
    return datetime.fromtimestamp(when, UTC).isoformat()


def _article(doc_id: str, url: str, body: str, when: int) -> dict[str, Any]:
    return {"id": doc_id, "url": url, "title": "t", "body": body, "published_at": _rfc(when)}


def _write(path: Path, records: list[dict[str, Any]]) -> str:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return str(path)


def _run(tmp_path: Path, settings: Settings, records: list[dict[str, Any]]) -> tuple[str, RunPaths]:
    """`records` written to a file and run once into `tmp_path/out` (its state in `out/state`)."""
    source = _write(tmp_path / "in.jsonl", records)
    out = tmp_path / "out"
    paths = RunPaths(out=out, state=out / "state")
    run(settings, [source], paths)
    return source, paths


def _read(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def _verdicts(path: Path) -> list[tuple[str, str, str, str | None]]:
    return [(r["doc_id"], r["verdict"], r["canonical_id"], r["stage"]) for r in _read(path)]


def _rows(database: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(database)) as db:
        return sorted(db.execute(sql).fetchall())


# --- a run killed between its two commits


def test_a_run_killed_between_the_journal_commit_and_the_state_commit_gives_one_verdict_per_document(
    tmp_path: Path,
) -> None:
    """`_Run._commit` commits the journal, then the state: two SQLite files, two transactions. A kill (SIGKILL,
    OOM, power loss) between them leaves the outputs and the journal complete and the state at its previous
    commit. For a small input the only commit is the last one, so the state is left empty: that is what
    removing state.sqlite3 after a complete run reproduces, byte for byte of what matters (the store writes
    only its schema before its first commit).

    Running the same command again must complete the run as if uninterrupted. `_journalled` took the verdict
    of a document older than `verdicts_days` from the journal and recorded nothing in the state, so the old
    document's keys were lost, and its URL copy, decided again, came out unique: a second verdict. The state
    now notes the journal's position it covers, and a record past it is decided again."""
    now = int(time.time())
    settings = Settings(stages=CHEAP)  # default retention: verdicts 7 days
    source, paths = _run(
        tmp_path,
        settings,
        [
            _article("old", "https://old.example.com/story", TEXT_A, now - 10 * DAY_S),
            _article("recrawl", "https://old.example.com/story?utm_source=x", TEXT_B, now),
        ],
    )
    uninterrupted = _verdicts(paths.links)
    assert uninterrupted == [("old", "unique", "old", None), ("recrawl", "duplicate", "old", "url")]

    # The kill: outputs synced, journal committed, state not (it keeps only its schema).
    for name in ("state.sqlite3", "state.sqlite3-wal", "state.sqlite3-shm"):
        (paths.state / name).unlink(missing_ok=True)

    run(settings, [source], paths)  # the same command again
    links = _read(paths.links)
    assert Counter(r["doc_id"] for r in links) == {"old": 1, "recrawl": 1}, _verdicts(paths.links)
    assert _verdicts(paths.links) == uninterrupted


def test_a_journal_record_written_after_a_commit_lies_past_it_though_the_last_one_was_written_again(
    tmp_path: Path,
) -> None:
    """A state notes the journal's position its commit covers, and a record past it is one the state never took
    in (`Journal.link(..., through=)`). The next commit writes `c`, then `x` again (`x` was the last record,
    registered again after its verdict expired, or relinked): `x`'s row is deleted and both inserted. SQLite
    numbers a row one past the largest left, so `c` took `x`'s old position, the one the state covers: after a
    kill between the two commits, `c` passed for a verdict the state holds."""
    journal = Journal(tmp_path)
    journal.put_link({"doc_id": "x", "verdict": "unique"})
    journal.commit()
    covered = journal.position
    journal.put_link({"doc_id": "c", "verdict": "unique"})
    journal.put_link({"doc_id": "x", "verdict": "unique"})
    journal.commit()
    assert journal.link("c", covered) is None
    assert journal.link("x", covered) is None
    assert journal.position > covered
    journal.close()
    reopened = Journal(tmp_path)
    reopened.put_link({"doc_id": "d", "verdict": "unique"})
    reopened.commit()
    assert reopened.link("d", covered) is None and reopened.link("c", reopened.position) is not None
    reopened.close()


def test_a_journal_keeps_the_record_of_every_story_an_id_was_used_for(tmp_path: Path) -> None:
    """The latest record of an id is what relink reads; the run also asks whether it decided an id's earlier
    story (`Journal.decided`), replaced before a commit or after, and whether a state that noted a position
    took that record in."""
    journal = Journal(tmp_path)
    journal.put_link({"doc_id": "a", "content_hash": "c1", "verdict": "unique"})
    journal.put_link({"doc_id": "a", "content_hash": "c2", "verdict": "duplicate"})  # replaced before a commit
    assert journal.decided("a", "c1") == {"doc_id": "a", "content_hash": "c1", "verdict": "unique"}
    journal.commit()
    covered = journal.position
    journal.put_link({"doc_id": "a", "content_hash": "c3", "verdict": "unique"})
    journal.commit()
    assert [journal.decided("a", c, covered) is not None for c in ("c1", "c2", "c3")] == [True, True, False]
    assert [journal.decided("a", c) is not None for c in ("c1", "c2", "c3", "c4")] == [True, True, True, False]
    assert journal.link("a") == {"doc_id": "a", "content_hash": "c3", "verdict": "unique"}
    assert journal.decided("a", "c2") == {"doc_id": "a", "content_hash": "c2", "verdict": "duplicate"}
    journal.close()


@pytest.mark.parametrize("journal", ["deleted", "an older copy"])
def test_a_state_folder_whose_journal_is_behind_its_state_is_refused(tmp_path: Path, journal: str) -> None:
    """The journal is part of the state folder: `dedup run` takes the verdict of a document older than
    `verdicts_days` from it, and tells by its positions what a kill left past the state's commit. A journal
    deleted (taken for a cache) or put back from an older backup than the state numbers its new records at
    positions the state's mark covers, and would pass them for ones the state took in. Every command that
    writes the folder refuses it, in one line that says what to do, and changes nothing."""
    now = int(time.time())
    settings = Settings(stages=CHEAP)
    source, paths = _run(tmp_path, settings, [_article("a", "https://a.example.com/a", TEXT_A, now - 10 * DAY_S)])
    older = (paths.state / "journal.sqlite3").read_bytes()
    run(settings, [_write(tmp_path / "b.jsonl", [_article("b", "https://b.example.com/b", TEXT_B, now)])], paths)
    for name in ("journal.sqlite3", "journal.sqlite3-wal", "journal.sqlite3-shm"):
        (paths.state / name).unlink(missing_ok=True)
    if journal == "an older copy":
        (paths.state / "journal.sqlite3").write_bytes(older)
    state_before = (paths.state / "state.sqlite3").read_bytes()
    links_before = paths.links.read_bytes()
    with pytest.raises(ValueError, match=r"journal\.sqlite3 .* behind .*dedup replay"):
        run(settings, [source], paths)
    with pytest.raises(ValueError, match=r"journal\.sqlite3 .* behind"):
        replay_files([str(paths.links)], paths.state)
    assert (paths.state / "state.sqlite3").read_bytes() == state_before
    assert paths.links.read_bytes() == links_before
    done = subprocess.run(
        [sys.executable, "-m", "streams", "run", source, "--out", str(paths.out), "--state", str(paths.state)],
        capture_output=True,
        text=True,
        env={**os.environ, "DEDUP_STAGES": '["url","content","simhash"]'},
        check=False,
    )
    assert done.returncode == 2 and "behind" in done.stderr and "Traceback" not in done.stderr, done.stderr


def _killed(settings: Settings, source: str, paths: RunPaths, where: str, commit: int) -> None:
    """`dedup run` with a commit after every document, killed by SIGKILL right after its `commit`-th commit of
    `where` ("journal" or "state"), in a child process."""
    from streams.runner import embedded

    pid = os.fork()
    if pid == 0:  # the child dies by SIGKILL; any other end is a failure
        try:
            embedded.CHUNK, embedded.COMMIT_SECONDS = 1, 0.0
            owner = Journal if where == "journal" else SqliteStateStore
            committed, calls = owner.commit, [0]

            def killing(self: Any) -> None:
                committed(self)
                calls[0] += 1
                if calls[0] == commit:
                    os.kill(os.getpid(), signal.SIGKILL)

            owner.commit = killing  # type: ignore[method-assign]
            run(settings, [source], paths)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


def test_a_run_killed_twice_in_a_row_is_completed_with_one_line_a_document(tmp_path: Path) -> None:
    """The first kill, right after the journal's third commit, leaves the journal a record (`c`) past the state's
    commit; the run resumed is killed right after the state's first commit. That commit noted the journal's
    position, `c`'s record included, though the state never took `c` in: the run that completes the outputs took
    it for a decision the state had made, and wrote `c`'s line a second time."""
    now = int(time.time())
    settings = Settings(stages=CHEAP)
    records = [
        _article("a", "https://a.example.com/a", TEXT_A, now - 3 * DAY_S),
        _article("b", "https://a.example.com/b", TEXT_B, now - 3 * DAY_S),
        _article("c", "https://a.example.com/c", TEXT_C, now - 3 * DAY_S),
        _article("d", "https://d.example.com/d", TEXT_A, now - 2 * DAY_S),
    ]
    (tmp_path / "clean").mkdir()
    source, clean = _run(tmp_path / "clean", settings, records)
    killed = RunPaths(tmp_path / "killed", tmp_path / "killed" / "state")
    _killed(settings, source, killed, "journal", 3)
    _killed(settings, source, killed, "state", 1)
    run(settings, [source], killed)
    assert _verdicts(killed.links) == _verdicts(clean.links)


# --- far-future published_at: a re-run days later


def test_rerunning_a_completed_run_with_a_far_future_document_writes_no_second_verdict(tmp_path: Path) -> None:
    """A document dated 2100 has its verdict stamped with the wall clock + 1 day (`clamped`), but
    `_journalled` asked `expired` of its own, unclamped published_at: once its verdict had expired from the
    state (the clock, also clamped to the wall clock, moves on with real time) the re-run neither found the
    verdict in the state nor asked the journal, and decided the document again. A content duplicate, decided
    again, was found through its own URL key (pointed at its canonical) and came out a `url` duplicate:
    a second, different verdict line for one document.

    With the default 7-day `verdicts_days` this needs the re-run 8 days later; a 2-second retention shows it
    in 4 seconds (only the retention is scaled, not the clock)."""
    settings = Settings(stages=CHEAP, retention=RetentionSettings(verdicts_days=2 / DAY_S))
    source, paths = _run(
        tmp_path,
        settings,
        [
            _article("wire", "https://agency.example.com/a", TEXT_A, FAR_FUTURE),
            _article("syndicated", "https://paper.example.com/b", TEXT_A, FAR_FUTURE),
        ],
    )
    first = _verdicts(paths.links)
    assert first == [("wire", "unique", "wire", None), ("syndicated", "duplicate", "wire", "content")]
    time.sleep(4)
    stats = run(settings, [source], paths)  # a re-run of a completed run: must change nothing
    assert _verdicts(paths.links) == first, f"repeated={stats.repeated}"


def test_rerunning_a_completed_run_with_an_id_reused_for_another_story_writes_nothing(tmp_path: Path) -> None:
    """A crawler reuses the id `a` for another story ten days on, once the first one's verdict has expired: both
    are decided under `a`. The same command again must change nothing. The journal kept only `a`'s latest
    record, so the first story, older than `verdicts_days` at the state's clock, looked like an id seen again
    with other content, and was decided again as a new version of it (`a#v...`): a second verdict."""
    now = int(time.time())
    settings = Settings(stages=CHEAP)  # verdicts_days 7
    source, paths = _run(
        tmp_path,
        settings,
        [
            _article("a", "https://a.example.com/1", TEXT_A, now - 20 * DAY_S),
            _article("a", "https://a.example.com/2", TEXT_B, now - 10 * DAY_S),
        ],
    )
    first = _verdicts(paths.links)
    assert first == [("a", "unique", "a", None), ("a", "unique", "a", None)]
    stats = run(settings, [source], paths)
    assert _verdicts(paths.links) == first
    assert stats.repeated == 2


# --- a replay done later


def test_a_replay_a_little_later_rebuilds_the_clock_and_stamps_of_the_live_state(tmp_path: Path) -> None:
    """`dedup replay` clamped each record's published_at against the wall clock *at replay time*; the live
    run clamped it against the wall clock at decision time. For a document dated 2100 the replayed state
    had another clock and other stamps than the live one. The link record now carries the published_at
    clamped at ingest, the stamp the live state gave."""
    settings = Settings(stages=CHEAP)
    _, paths = _run(
        tmp_path,
        settings,
        [
            _article("future", "https://f.example.com/a", TEXT_A, FAR_FUTURE),
            _article("copy", "https://f.example.com/a?utm_medium=x", TEXT_B, FAR_FUTURE),
        ],
    )
    time.sleep(1.5)
    rebuilt = tmp_path / "rebuilt"
    replay_files([str(paths.links)], rebuilt, retention=settings.retention, band_layout=settings.simhash.band_layout)
    for sql in (
        "SELECT value FROM meta WHERE name = 'clock'",
        "SELECT doc_id, verdict, canonical_id, stamp FROM verdicts",
        "SELECT canonical_id, stamp FROM exact_keys",
        "SELECT doc_id, stamp FROM canonicals",
        "SELECT canonical_id, size, stamp FROM groups",
    ):
        assert _rows(rebuilt / "state.sqlite3", sql) == _rows(paths.state / "state.sqlite3", sql), sql


def test_a_replay_done_later_expires_a_canonical_the_live_state_still_links_to(tmp_path: Path) -> None:
    """The same divergence as a verdict: the live state's clock stopped at (decision wall clock + 1 day), the
    replayed one at (replay wall clock + 1 day). A canonical whose band entries are within `bands_days` of the
    first and not of the second is a near-duplicate's canonical on the live state and gone on the rebuilt one.

    Default retention (bands_days 30). The replay runs 12 seconds after the live run here; done a day later,
    every canonical in the last day of the band retention diverges the same way."""
    settings = Settings(stages=CHEAP)
    margin = 6
    # Band entries stamped `edge` are alive at the live clock (at most wall + 1 day, the wall clock being at
    # most `margin` s later than now when the run advances it) and expired at the replay's, `margin` s later.
    edge = int(time.time()) + DAY_S - int(settings.retention.bands_days * DAY_S) + margin
    near = TEXT_A.replace("alpha3 ", "alphaX ")  # one word changed: a SimHash near-duplicate of TEXT_A
    day_one = _write(
        tmp_path / "day1.jsonl",
        [
            _article("future", "https://f.example.com/a", TEXT_B, FAR_FUTURE),
            _article("canonical", "https://c.example.com/a", TEXT_A, edge),
        ],
    )
    out = tmp_path / "out"
    live = RunPaths(out=out, state=out / "state")
    run(settings, [day_one], live)
    bands_s = int(settings.retention.bands_days * DAY_S)
    (live_clock,) = _rows(live.state / "state.sqlite3", "SELECT value FROM meta WHERE name = 'clock'")[0]
    assert edge >= live_clock - bands_s, "the live run took longer than the margin: rerun"
    time.sleep(2 * margin)
    rebuilt = tmp_path / "rebuilt"
    replay_files([str(live.links)], rebuilt, retention=settings.retention, band_layout=settings.simhash.band_layout)

    day_two = _write(tmp_path / "day2.jsonl", [_article("edit", "https://e.example.com/a", near, edge)])
    run(settings, [day_two], RunPaths(out=tmp_path / "live2", state=live.state))
    run(settings, [day_two], RunPaths(out=tmp_path / "rebuilt2", state=rebuilt))
    on_live = _verdicts(tmp_path / "live2" / "links.jsonl")
    assert on_live == [("edit", "duplicate", "canonical", "simhash")]
    assert _verdicts(tmp_path / "rebuilt2" / "links.jsonl") == on_live


# --- a replay run again


def _group_sizes(state: Path) -> list[tuple[Any, ...]]:
    return _rows(state / "state.sqlite3", "SELECT canonical_id, size FROM groups ORDER BY canonical_id")


def test_a_file_replay_run_twice_leaves_the_groups_as_the_first_left_them(tmp_path: Path) -> None:
    """Replaying the same links file twice into one state folder: a duplicate whose verdict had passed
    `verdicts_days` (7) looked undecided to the second replay, which restored it again and grew its
    canonical's group (kept with the exact keys, a year) a second time."""
    settings = Settings(stages=CHEAP)
    t0 = int(time.time()) - 30 * DAY_S
    _, paths = _run(
        tmp_path,
        settings,
        [
            _article("canonical", "https://g.example.com/a", TEXT_A, t0),
            _article("copy", "https://g.example.com/a?utm_source=x", TEXT_B, t0),
            _article("later", "https://g.example.com/b", TEXT_C, t0 + 10 * DAY_S),
        ],
    )
    rebuilt = tmp_path / "rebuilt"
    for _ in range(2):
        stats = replay_files(
            [str(paths.links)], rebuilt, retention=settings.retention, band_layout=settings.simhash.band_layout
        )
    assert _group_sizes(rebuilt) == _group_sizes(paths.state) == [("canonical", 2)]
    assert (stats.restored, stats.already_there) == (0, 3)


def test_an_older_links_file_replayed_after_a_newer_one_is_restored_whole(tmp_path: Path) -> None:
    """Files replayed in two commands, the newer first: the older file's links are in no state yet, so each is
    restored (its exact keys outlive its verdict), even where its verdict is past `verdicts_days` at the clock
    the newer file left: the state never took it in."""
    settings = Settings(stages=CHEAP)
    t0 = int(time.time()) - 30 * DAY_S
    older, newer = tmp_path / "older", tmp_path / "newer"
    older.mkdir()
    newer.mkdir()
    _, old_paths = _run(
        older,
        settings,
        [
            _article("canonical", "https://h.example.com/a", TEXT_A, t0),
            _article("copy", "https://h.example.com/a?utm_source=x", TEXT_B, t0),
        ],
    )
    _, new_paths = _run(newer, settings, [_article("later", "https://h.example.com/b", TEXT_C, t0 + 10 * DAY_S)])
    rebuilt = tmp_path / "rebuilt"
    replay_files(
        [str(new_paths.links)], rebuilt, retention=settings.retention, band_layout=settings.simhash.band_layout
    )
    stats = replay_files(
        [str(old_paths.links)], rebuilt, retention=settings.retention, band_layout=settings.simhash.band_layout
    )
    assert stats.restored == 2
    assert _group_sizes(rebuilt) == [("canonical", 2)]
    keys = "SELECT key, canonical_id FROM exact_keys ORDER BY key"
    live = sorted(_rows(old_paths.state / "state.sqlite3", keys) + _rows(new_paths.state / "state.sqlite3", keys))
    assert _rows(rebuilt / "state.sqlite3", keys) == live


# --- a late crawl: published long before the stream's clock


def test_a_late_crawled_articles_verdict_is_replayed_with_the_stamp_the_live_state_gave_it(tmp_path: Path) -> None:
    """An article published twelve days before the stream's clock (an archive page crawled late) had its
    verdict stamped with that date: past `verdicts_days` (7), hidden (and swept) as soon as it was recorded.
    It now lives `verdicts_days` from the clock it was recorded at; its link record says that clock, so a
    replay stamps it as the live state did."""
    settings = Settings(stages=CHEAP)
    now = int(time.time()) - DAY_S
    _, paths = _run(
        tmp_path,
        settings,
        [
            _article("today", "https://l.example.com/today", TEXT_B, now),
            _article("original", "https://l.example.com/original", TEXT_A, now - 12 * DAY_S),
        ],
    )
    rebuilt = tmp_path / "rebuilt"
    replay_files([str(paths.links)], rebuilt, retention=settings.retention, band_layout=settings.simhash.band_layout)
    sql = "SELECT doc_id, verdict, stamp FROM verdicts ORDER BY doc_id"
    assert _rows(rebuilt / "state.sqlite3", sql) == _rows(paths.state / "state.sqlite3", sql)
    assert dict((d, s) for d, _, s in _rows(paths.state / "state.sqlite3", sql))["original"] >= now


def test_a_file_replay_stopped_by_ctrl_c_mid_document_then_run_again_counts_each_member_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C reached `dedup replay` right after a duplicate's group grew and before its verdict was recorded:
    the replay committed what it held on the way out, the grown group without the verdict, and run again it
    restored the duplicate again and counted it twice. A Ctrl-C now waits for the document in hand, as in
    `dedup run`, and what is committed ends at a document boundary."""
    settings = Settings(stages=CHEAP)
    t0 = int(time.time()) - DAY_S
    _, paths = _run(
        tmp_path,
        settings,
        [
            _article("canonical", "https://g.example.com/a", TEXT_A, t0),
            _article("copy", "https://g.example.com/a?utm_source=x", TEXT_B, t0),
        ],
    )
    grow = SqliteStateStore.grow_group

    def grow_then_ctrl_c(self: SqliteStateStore, canonical_id: str, published_at: int | None = None) -> int:
        grown = grow(self, canonical_id, published_at)
        os.kill(os.getpid(), signal.SIGINT)  # a person's Ctrl-C, arriving right here
        return grown

    monkeypatch.setattr(SqliteStateStore, "grow_group", grow_then_ctrl_c)
    rebuilt = tmp_path / "rebuilt"
    with pytest.raises(KeyboardInterrupt):
        replay_files(
            [str(paths.links)], rebuilt, retention=settings.retention, band_layout=settings.simhash.band_layout
        )
    monkeypatch.undo()
    replay_files([str(paths.links)], rebuilt, retention=settings.retention, band_layout=settings.simhash.band_layout)
    assert _group_sizes(rebuilt) == _group_sizes(paths.state) == [("canonical", 2)]

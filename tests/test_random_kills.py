"""`dedup run` killed at random points of random hostile streams, then run again: as if never killed.

README: running the same command again after a kill completes the outputs. Each seed draws a stream of
`test_random_streams.py` (ids reused for other stories, records sent again, late crawls, clock jumps across
short retentions), runs it once cleanly, and once with one to three SIGKILLs in a row, each landing after a
drawn document or commit, before the same command completes it. A commit follows every chunk of one to four
documents, so the kills land between commits as well as inside them. Then the two must hold the same lines in
links.jsonl and deduped.jsonl (but for when each was written), the same state (verdicts, keys, groups, band
entries in the same order) and the same journal.

The kills are SIGKILL sent by the run to itself (in a child process): what an OOM killer or a power cut leaves,
but for the page cache, which survives a process's death. `emit-flushed` flushes the outputs' buffers first,
as a full buffer does.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from streams.config import Settings
from streams.core.relink import Label
from streams.runner import embedded, relink
from streams.runner.embedded import RunPaths, run
from streams.stores.journal import Journal
from streams.stores.sqlite import SqliteStateStore
from tests.children import KILLED, in_child
from tests.test_random_relinks import _cut, _labels, _latest, _linked_back
from tests.test_random_replays import _drawn, _run, _settings
from tests.test_random_streams import OPTIONS, RETENTION, drawn

KILLS = ("emit", "emit-flushed", "journal", "state")
"""Where a kill lands: after the n-th document is written (its lines still buffered, or flushed), after the
n-th commit of the journal or of the state."""


Kill = tuple[str, int] | None
"""Where a child kills itself (`_arm`), or None."""


def _run_in_chunks(
    settings: Settings,
    source: str,
    paths: RunPaths,
    chunk: int,
    kill: tuple[str, int] | None,
    held: int = embedded.HELD_BYTES,
) -> int | None:
    """`dedup run` committing after every `chunk` documents, killed by SIGKILL at `kill`, in a child; its output
    lines handed to the files once more than `held` bytes wait (1: after every document)."""
    return in_child(_run_child, settings, source, paths, chunk, kill, held)


def _run_child(settings: Settings, source: str, paths: RunPaths, chunk: int, kill: Kill, held: int) -> None:
    embedded.CHUNK, embedded.COMMIT_SECONDS, embedded.HELD_BYTES = chunk, 0.0, held
    if kill is not None:
        _arm(*kill)
    run(settings, [source], paths)


def _resume_child(settings: Settings, source: str, paths: RunPaths, kill: Kill) -> None:
    """`dedup run` whose start takes in the links past its state's mark, committing after every 2 links restored."""
    from streams.runner import restoring

    embedded.CHUNK, embedded.COMMIT_SECONDS, restoring.COMMIT_EVERY = 4, 0.0, 2
    if kill is not None:
        _arm(*kill)
    run(settings, [source], paths)


def _replay_child(links: str, folder: Path, every: int, kill: Kill, settings: Settings) -> None:
    from streams.runner import replay

    replay.COMMIT_LINKS = every
    if kill is not None:
        _arm(*kill)
    replay.replay_files([links], folder, retention=settings.retention, band_layout=settings.simhash.band_layout)


def _arm(where: str, after: int) -> None:
    """Make this process kill itself after the `after`-th document written or commit of `where`."""
    calls = [0]

    def counted(method: Callable[..., Any], before: Callable[[Any], Any] | None = None) -> Callable[..., Any]:
        def call(self: Any, *args: Any) -> Any:
            result = method(self, *args)
            calls[0] += 1
            if calls[0] == after:
                if before is not None:
                    before(self)
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        return call

    if where == "link-written":  # links.jsonl's buffer alone gone to the file, as a full buffer goes
        write = embedded.JsonlOutput.write

        def link_written(output: Any, *args: Any) -> Any:
            result = write(output, *args)
            if output.path.name == "links.jsonl":
                calls[0] += 1
                if calls[0] == after:
                    output._handle.flush()
                    os.kill(os.getpid(), signal.SIGKILL)
            return result

        embedded.JsonlOutput.write = link_written  # type: ignore[method-assign]
    elif where == "links-handed":  # links.jsonl's lines of a hand-over gone to the file, deduped.jsonl's not yet
        flush = embedded.JsonlOutput.flush

        def links_handed(output: Any) -> None:
            handed = output.held
            flush(output)
            if output.path.name == "links.jsonl" and handed:
                calls[0] += 1
                if calls[0] == after:
                    os.kill(os.getpid(), signal.SIGKILL)

        embedded.JsonlOutput.flush = links_handed  # type: ignore[method-assign]
    elif where.startswith("emit"):
        flush = (lambda run: [output.flush() for output in run._outputs]) if where == "emit-flushed" else None
        embedded._Run._emit = counted(embedded._Run._emit, flush)  # type: ignore[method-assign]
    elif where.startswith("relinked"):
        flush = (lambda links: links._handle.flush()) if where == "relinked-flushed" else None
        relink._LastRecords.write = counted(relink._LastRecords.write, flush)  # type: ignore[method-assign]
    elif where == "journal":
        Journal.commit = counted(Journal.commit)  # type: ignore[method-assign]
    else:
        SqliteStateStore.commit = counted(SqliteStateStore.commit)  # type: ignore[method-assign]


def _lines(path: Path) -> list[dict[str, Any]]:
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    return [{k: v for k, v in record.items() if k != "linked_at"} for record in records]


def _without_floats(record: dict[str, Any]) -> dict[str, Any]:
    """A record but its vector and scores: an embedding batched otherwise differs in the last bits."""
    return {k: v for k, v in record.items() if k not in ("vector", "candidates", "score")}


def _state(folder: Path) -> dict[str, list[Any]]:
    """Every table of the state but its marks, and the band entries in their order, not by their numbers (a
    number freed by an expired entry may be taken again, as SQLite does)."""
    with closing(sqlite3.connect(folder / "state.sqlite3")) as db:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        found = {
            name: sorted(map(repr, db.execute(f"SELECT * FROM {name}").fetchall()))
            for name in tables
            if name not in ("meta", "journal_owed", "canonicals")
        }
        found["canonicals"] = [row[1:] for row in sorted(db.execute("SELECT * FROM canonicals").fetchall())]
    journal = Journal(folder)
    found["journal"] = sorted(
        (record["doc_id"], repr({k: v for k, v in record.items() if k != "linked_at"})) for record in journal.links()
    )
    journal.close()
    return found


@pytest.mark.parametrize("seed", [*range(60), 61, 77, 126])  # and seeds that once failed past the first 60
def test_a_run_killed_anywhere_then_run_again_ends_as_a_run_never_killed(tmp_path: Path, seed: int) -> None:
    rng, _, records, shown = drawn(seed)
    settings = Settings(**OPTIONS, group_cap=rng.choice([100, 2, 3]))
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    chunk = rng.randint(1, 4)
    held = 1 if seed % 2 else embedded.HELD_BYTES  # every document's lines handed over at once, or at commits
    clean = RunPaths(tmp_path / "clean", tmp_path / "clean" / "state")
    assert _run_in_chunks(settings, str(source), clean, chunk, None) == 0
    killed = RunPaths(tmp_path / "killed", tmp_path / "killed" / "state")
    kills = []
    for _ in range(rng.randint(1, 3)):
        where = rng.choice(KILLS)
        kills.append((where, rng.randint(1, len(records) if where.startswith("emit") else len(records) // chunk + 1)))
        status = _run_in_chunks(settings, str(source), killed, chunk, kills[-1], held)
        assert status in (0, KILLED), (seed, status)
    assert _run_in_chunks(settings, str(source), killed, chunk, None) == 0
    said = f"seed {seed}, chunks of {chunk}, lines held up to {held:,} bytes, kills {kills}: {shown}"
    assert _lines(killed.links) == _lines(clean.links), said
    assert _lines(killed.deduped) == _lines(clean.deduped), said
    assert _state(killed.state) == _state(clean.state), said


@pytest.mark.parametrize("seed", range(12))
def test_a_run_killed_while_it_takes_in_the_links_of_a_lost_state_ends_as_a_run_never_killed(
    tmp_path: Path, seed: int
) -> None:
    """The state folder lost beside complete outputs (deleted, a disk replaced): the next run takes in every link
    of links.jsonl, committing as it goes. Killed after a drawn commit of that (once to three times), then run
    again: the outputs, state and journal of a run never killed."""
    rng, _, records, shown = drawn(seed)
    settings = Settings(**OPTIONS, group_cap=rng.choice([100, 2, 3]))
    source, clean, lost = _run_then_lose_the_state(tmp_path, settings, records)
    kills = [("state", rng.randint(1, len(records) // 2 + 1)) for _ in range(rng.randint(1, 3))]
    for kill in kills:
        assert in_child(_resume_child, settings, source, lost, kill) in (0, KILLED), (seed, kill)
    assert in_child(_resume_child, settings, source, lost, None) == 0
    said = f"seed {seed}, kills {kills}: {shown}"
    assert _lines(lost.links) == _lines(clean.links), said
    assert _lines(lost.deduped) == _lines(clean.deduped), said
    assert _state(lost.state) == _state(clean.state), said


@pytest.mark.parametrize("where", ["a byte-order mark", "a line in the middle"])
def test_a_lost_states_links_with_a_line_that_is_no_record_are_taken_in_in_their_order_once_it_is_fixed(
    tmp_path: Path, where: str
) -> None:
    """links.jsonl saved by an editor that put a byte-order mark before it, or with a line damaged in the middle,
    and the state folder lost. The run refuses the file (`JsonlOutput`: "fix or delete that line"), and must do so
    before it takes in any line past that one: the user fixes the line, runs again, and the fixed line's link is
    restored after those that followed it (its verdict stamped with a later clock, its keys with a later date), a
    state `dedup replay` of the same file does not rebuild."""
    _, _, records, shown = drawn(3)
    settings = Settings(**OPTIONS, group_cap=100)
    source, clean, lost = _run_then_lose_the_state(tmp_path, settings, records)
    links = lost.links.read_bytes()
    lines = links.splitlines(keepends=True)
    at = 0 if where == "a byte-order mark" else len(lines) // 2
    damaged = b"\xef\xbb\xbf" + lines[at] if at == 0 else lines[at][: len(lines[at]) // 2] + b"\n"
    lost.links.write_bytes(b"".join([*lines[:at], damaged, *lines[at + 1 :]]))
    assert in_child(_resume_child, settings, source, lost, None) != 0
    assert lost.links.read_bytes().count(b"\n") == links.count(b"\n")
    lost.links.write_bytes(links)  # the line fixed, as the message asks
    assert in_child(_resume_child, settings, source, lost, None) == 0
    assert _lines(lost.links) == _lines(clean.links), shown
    assert _state(lost.state) == _state(clean.state), shown


def test_a_run_killed_while_it_takes_in_a_lost_states_links_keeps_their_candidate_records(tmp_path: Path) -> None:
    """Every stage, the state folder lost beside complete outputs; the next run restores `a` and `b`, commits and
    is killed. The run after it finds them restored: it must still give the journal their candidate records (what
    relink reads to unlink an embedded duplicate), which it takes in after the links."""
    settings, records = _three_embedded()
    source, clean, lost = _run_then_lose_the_state(tmp_path, settings, records)
    assert in_child(_resume_child, settings, source, lost, ("state", 1)) == KILLED
    assert in_child(_resume_child, settings, source, lost, None) == 0
    assert _candidates(lost.state) == _candidates(clean.state) == ["a", "b", "c"]
    assert _state(lost.state) == _state(clean.state)


def test_a_semantic_run_killed_then_resumed_without_the_semantic_stage_keeps_the_vectors_it_took_in(
    tmp_path: Path,
) -> None:
    """Guard (passes): the run that resumes without the semantic stage opens no vector store, so it restores no
    vector; the canonicals it takes in keep theirs because the killed run had written them to Qdrant Edge's log,
    which a process kill does not lose (a power cut could). Every embedded canonical of links.jsonl is found in
    the state folder's vectors, as in a state rebuilt by `dedup replay`."""
    from streams.core.replay import model_named
    from streams.records.article import parse_timestamp
    from streams.runner.replay import replay_files
    from streams.vectors.edge import EdgeVectorStore

    settings, records = _three_embedded()
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    killed = RunPaths(tmp_path / "killed", tmp_path / "killed" / "state")
    assert _run_in_chunks(settings, str(source), killed, 4, ("emit-flushed", 2)) == KILLED
    assert _run_in_chunks(Settings(stages=OPTIONS["stages"]), str(source), killed, 4, None) == 0
    replay_files([str(killed.links)], tmp_path / "rebuilt")
    embedded_links = [r for r in map(orjson.loads, killed.links.read_bytes().splitlines()) if r.get("vector")]
    assert [r["doc_id"] for r in embedded_links] == ["a", "b"]
    for folder in (killed.state, tmp_path / "rebuilt"):
        with EdgeVectorStore(folder / "vectors") as store:
            for record in embedded_links:
                vector = np.asarray(record["vector"], dtype=np.float32)
                when = parse_timestamp(record["published_at"])
                model = model_named(record["model"], len(vector))
                found = store.nearest_between(model, vector, when, when, record["language"], True)
                assert found is not None and found.doc_id == record["doc_id"], (folder, record["doc_id"])


def _run_then_lose_the_state(
    tmp_path: Path, settings: Settings, records: list[dict[str, Any]]
) -> tuple[str, RunPaths, RunPaths]:
    """The input, a complete run of it (`clean`), and another (`lost`) whose state folder is then deleted."""
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    clean = RunPaths(tmp_path / "clean", tmp_path / "clean" / "state")
    assert _run_in_chunks(settings, str(source), clean, 4, None) == 0
    lost = RunPaths(tmp_path / "lost", tmp_path / "lost" / "state")
    assert _run_in_chunks(settings, str(source), lost, 4, None) == 0
    shutil.rmtree(lost.state)
    return str(source), clean, lost


def _three_embedded() -> tuple[Settings, list[dict[str, Any]]]:
    """Every stage, and three articles that are each embedded (a candidate record each)."""
    from tests.test_runs_across_time import TEXT_A, TEXT_B, TEXT_C

    when = "2026-01-05T10:00:00Z"
    records = [
        {"id": name, "url": f"https://{name}.example.com/", "title": "t", "body": text, "published_at": when}
        for name, text in (("a", TEXT_A), ("b", TEXT_B), ("c", TEXT_C))
    ]
    return Settings(), records


def _embedded_three_then_killed(tmp_path: Path, chunk: int, kill: tuple[str, int]) -> tuple[RunPaths, RunPaths]:
    """`_three_embedded` run once cleanly, and once killed at `kill` and then run again."""
    settings, records = _three_embedded()
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    clean = RunPaths(tmp_path / "clean", tmp_path / "clean" / "state")
    assert _run_in_chunks(settings, str(source), clean, chunk, None) == 0
    killed = RunPaths(tmp_path / "killed", tmp_path / "killed" / "state")
    assert _run_in_chunks(settings, str(source), killed, chunk, kill) == KILLED
    assert _run_in_chunks(settings, str(source), killed, chunk, None) == 0
    return clean, killed


def _candidates(folder: Path) -> list[str]:
    journal = Journal(folder)
    try:
        return [record["doc_id"] for record in journal.candidates()]
    finally:
        journal.close()


def test_a_run_killed_between_its_state_and_its_journal_keeps_its_candidate_records(tmp_path: Path) -> None:
    """The state commits first and keeps the link records its journal takes next; the semantic stage's candidate
    records (what relink reads to unlink an embedded duplicate) must be kept too: killed right after the state's
    commit, the run run again decides nothing anew (the state took every document in), so nothing else would
    give the journal the candidate records of that commit."""
    clean, killed = _embedded_three_then_killed(tmp_path, 1, ("state", 2))
    assert _candidates(clean.state) == ["a", "b", "c"]
    assert _candidates(killed.state) == _candidates(clean.state)


def test_a_run_killed_once_a_link_line_reached_its_file_keeps_the_article_and_candidate_records(
    tmp_path: Path,
) -> None:
    """The run that resumes takes in the link lines a kill left past the state's commit and decides those
    documents no more, so nothing makes their candidate lines again: a link line must never reach links.jsonl
    before them. Killed right after `b`'s link line was written, and links.jsonl's buffer went to the file as a
    full one goes (a canonical's link, with its vector, is larger than the buffer), before its candidate line."""
    clean, killed = _embedded_three_then_killed(tmp_path, 4, ("link-written", 2))
    for name in ("links.jsonl", "deduped.jsonl", "candidates.jsonl"):
        assert [_without_floats(r) for r in _lines(killed.out / name)] == [
            _without_floats(r) for r in _lines(clean.out / name)
        ], name
    assert _state(killed.state) == _state(clean.state)


@pytest.mark.parametrize("seed", range(30))
def test_a_file_replay_killed_anywhere_then_run_again_rebuilds_the_state_a_replay_never_killed_does(
    tmp_path: Path, seed: int
) -> None:
    """`dedup replay` of a random stream's links.jsonl, committing after every one to four links, killed by
    SIGKILL after a drawn commit of its journal or state (once to three times), then run again: the state and
    journal of a replay never killed."""
    rng, _, records, shown = drawn(seed)
    settings = Settings(**OPTIONS)
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    live = RunPaths(tmp_path / "live", tmp_path / "live" / "state")
    assert _run_in_chunks(settings, str(source), live, 4, None) == 0
    links, every = str(live.links), rng.randint(1, 4)

    def replayed(folder: Path, kill: Kill) -> int | None:
        return in_child(_replay_child, links, folder, every, kill, settings)

    assert replayed(tmp_path / "clean", None) == 0
    kills = []
    for _ in range(rng.randint(1, 3)):
        kills.append((rng.choice(["journal", "state"]), rng.randint(1, len(records) // every + 1)))
        status = replayed(tmp_path / "killed", kills[-1])
        assert status in (0, KILLED), (seed, status)
    assert replayed(tmp_path / "killed", None) == 0
    said = f"seed {seed}, commits every {every} links, kills {kills}: {shown}"
    assert _state(tmp_path / "killed") == _state(tmp_path / "clean"), said


@pytest.mark.parametrize("again", ["reused for another story", "sent again once its verdict expired"])
def test_a_line_a_kill_left_past_a_commit_is_written_once_after_a_second_kill(tmp_path: Path, again: str) -> None:
    """`b`'s last record (its id reused for another story, or its article sent again a week on) is written and
    flushed, and the run killed before its commit; the run resumed commits after a document it had decided
    before, and is killed at the next one. That commit covered every line of links.jsonl, `b`'s included, as lines
    the state took in: the run that completed the outputs took `b`'s line for the one of its first record and
    wrote it a second time."""
    from datetime import UTC, datetime

    from tests.test_runs_across_time import TEXT_A, TEXT_B, TEXT_C

    day = 86_400
    now = int(time.time())

    def article(doc_id: str, page: str, text: str, days_ago: int) -> dict[str, Any]:
        when = datetime.fromtimestamp(now - days_ago * day, UTC).isoformat()
        return {"id": doc_id, "url": f"https://x.example.com/{page}", "title": "t", "body": text, "published_at": when}

    last = article("b", "b2", TEXT_B, 1) if again.startswith("reused") else article("b", "b", TEXT_A, 1)
    records = [article("a", "a", TEXT_C, 20), article("b", "b", TEXT_A, 20), article("c", "c", TEXT_C, 10), last]
    settings = Settings(stages=OPTIONS["stages"])  # verdicts kept 7 days, keys a year
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    clean = RunPaths(tmp_path / "clean", tmp_path / "clean" / "state")
    assert _run_in_chunks(settings, str(source), clean, 1, None) == 0
    assert [r["doc_id"] for r in _lines(clean.links)] == ["a", "b", "c", "b"]
    killed = RunPaths(tmp_path / "killed", tmp_path / "killed" / "state")
    for kill in (("emit-flushed", 4), ("emit", 2)):
        status = _run_in_chunks(settings, str(source), killed, 1, kill)
        assert status == KILLED, status
    assert _run_in_chunks(settings, str(source), killed, 1, None) == 0
    assert _lines(killed.links) == _lines(clean.links)


RELINK_KILLS = ("relinked", "relinked-flushed", "journal", "state")
"""Where a kill lands in `dedup relink`: after the n-th link record it writes (still buffered, or flushed), after
the n-th commit of the journal or of the state."""


def _relink_child(out: Path, labels: list[Label], head: Path, options: dict[str, Any], kill: Kill) -> None:
    """`dedup relink --state OUT/state --out OUT` of `labels`, with the stream's settings in the environment, where
    `relink_files` reads them (the forkserver's environment is the one it started with)."""
    for name, value in _environment(options).items():
        os.environ[name] = value
    if kill is not None:
        _arm(*kill)
    relink.relink_files(out / "state", out, decisions=labels, articles=[head])


def _environment(options: dict[str, Any]) -> dict[str, str]:
    return {
        "DEDUP_RETENTION__BANDS_DAYS": str(RETENTION.bands_days),
        "DEDUP_RETENTION__EXACT_DAYS": str(RETENTION.exact_days),
        "DEDUP_RETENTION__VERDICTS_DAYS": str(RETENTION.verdicts_days),
        "DEDUP_GROUP_CAP": str(options["group_cap"]),
        "DEDUP_SIMHASH__FIGURE_CHECK": str(options["figure_check"]),
    }


@pytest.mark.parametrize("seed", range(40))
def test_a_relink_killed_anywhere_then_run_again_ends_as_a_relink_never_killed(tmp_path: Path, seed: int) -> None:
    """README: a relink stopped anywhere is completed by running it again. `test_random_relinks.py`'s streams and
    labels (a head through `dedup run`, a few duplicates unlinked or reviews decided, then some unlinked ones linked
    back): each relink killed by SIGKILL once to three times in a row, after a drawn record written or a drawn
    commit, then run again to completion; then the tail through `dedup run`. The outputs, state and journal must be
    those of the same relinks never killed, after the relinks and after the tail."""
    rng, records, shown, options = _drawn(seed)
    settings = _settings(options)
    cut = _cut(rng, tmp_path, settings, records, [len(records[: i + 1]) for i in range(len(records))])
    head, tail = tmp_path / "head.jsonl", tmp_path / "tail.jsonl"
    head.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records[:cut]))
    tail.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records[cut:]))
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    for out in (clean, killed):
        _run(settings, head, out, out / "state")
    before = _latest(clean)
    labels = _labels(rng, before)
    assert in_child(_relink_child, clean, labels, head, options, None) == 0
    back = _linked_back(rng, before, _latest(clean))
    if back:
        assert in_child(_relink_child, clean, back, head, options, None) == 0
    kills: list[Kill] = []
    for decided in (labels, back) if back else (labels,):
        for _ in range(rng.randint(1, 3)):
            where = rng.choice(RELINK_KILLS)
            kills.append((where, rng.randint(1, max(1, len(decided)) if where.startswith("relinked") else 2)))
            status = in_child(_relink_child, killed, decided, head, options, kills[-1])
            assert status in (0, KILLED), (seed, status)
        assert in_child(_relink_child, killed, decided, head, options, None) == 0
    said = f"seed {seed}, cut at {cut}, labels {labels}, then {back}, kills {kills}: {shown}"
    _assert_same(killed, clean, killed / "state", clean / "state", f"after the relinks; {said}")
    for out in (clean, killed):
        _run(settings, tail, out / "tail", out / "state")
    _assert_same(killed / "tail", clean / "tail", killed / "state", clean / "state", f"after the tail; {said}")


def _assert_same(out: Path, expected_out: Path, state: Path, expected_state: Path, said: str) -> None:
    for name in ("links.jsonl", "deduped.jsonl"):
        assert _lines(out / name) == _lines(expected_out / name), f"{name} {said}"
    assert _state(state) == _state(expected_state), f"state {said}"

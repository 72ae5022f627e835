"""`dedup run` killed at random points of random hostile streams, then run again: as if never killed.

README: running the same command again after a kill completes the outputs. Each seed draws a stream of
`test_random_streams.py` (ids reused for other stories, records sent again, late crawls, clock jumps across
short retentions), runs it once cleanly, and once with one to three SIGKILLs in a row, each landing after a
drawn document or commit, before the same command completes it. A commit follows every chunk of one to four
documents, so the kills land between commits as well as inside them. Then the two must hold the same lines in
links.jsonl and deduped.jsonl (but for when each was written), the same state (verdicts, keys, groups, band
entries in the same order) and the same journal.

The kills are SIGKILL sent by the run to itself (in a forked child): what an OOM killer or a power cut leaves,
but for the page cache, which survives a process's death. `emit-flushed` flushes the outputs' buffers first,
as a full buffer does.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.config import Settings
from streams.runner import embedded
from streams.runner.embedded import RunPaths, run
from streams.stores.journal import Journal
from streams.stores.sqlite import SqliteStateStore
from tests.test_random_streams import OPTIONS, drawn

KILLS = ("emit", "emit-flushed", "journal", "state")
"""Where a kill lands: after the n-th document is written (its lines still buffered, or flushed), after the
n-th commit of the journal or of the state."""


def _in_child(work: Callable[[], None]) -> int:
    """`work` in a forked child, its wait status; a child that raises ends with 3."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            work()
        except BaseException:  # the child reports by its status alone
            code = 3
        finally:
            os._exit(code)
    return os.waitpid(pid, 0)[1]


def _run_in_chunks(settings: Settings, source: str, paths: RunPaths, chunk: int, kill: tuple[str, int] | None) -> int:
    """`dedup run` committing after every `chunk` documents, killed by SIGKILL at `kill`, in a child."""

    def work() -> None:
        embedded.CHUNK, embedded.COMMIT_SECONDS = chunk, 0.0
        if kill is not None:
            _arm(*kill)
        run(settings, [source], paths)

    return _in_child(work)


def _arm(where: str, after: int) -> None:
    """Make this process kill itself after the `after`-th document written or commit of `where`."""
    calls = [0]

    def counted(method: Callable[..., None], before: Callable[[Any], None] | None = None) -> Callable[..., None]:
        def call(self: Any, *args: Any) -> None:
            method(self, *args)
            calls[0] += 1
            if calls[0] == after:
                if before is not None:
                    before(self)
                os.kill(os.getpid(), signal.SIGKILL)

        return call

    if where.startswith("emit"):
        flush = (lambda run: [output._handle.flush() for output in run._outputs]) if where == "emit-flushed" else None
        embedded._Run._emit = counted(embedded._Run._emit, flush)  # type: ignore[method-assign]
    elif where == "journal":
        Journal.commit = counted(Journal.commit)  # type: ignore[method-assign]
    else:
        SqliteStateStore.commit = counted(SqliteStateStore.commit)  # type: ignore[method-assign]


def _lines(path: Path) -> list[dict[str, Any]]:
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    return [{k: v for k, v in record.items() if k != "linked_at"} for record in records]


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


@pytest.mark.parametrize("seed", range(60))
def test_a_run_killed_anywhere_then_run_again_ends_as_a_run_never_killed(tmp_path: Path, seed: int) -> None:
    rng, _, records, shown = drawn(seed)
    settings = Settings(**OPTIONS, group_cap=rng.choice([100, 2, 3]))
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    chunk = rng.randint(1, 4)
    clean = RunPaths(tmp_path / "clean", tmp_path / "clean" / "state")
    assert _run_in_chunks(settings, str(source), clean, chunk, None) == 0
    killed = RunPaths(tmp_path / "killed", tmp_path / "killed" / "state")
    kills = []
    for _ in range(rng.randint(1, 3)):
        where = rng.choice(KILLS)
        kills.append((where, rng.randint(1, len(records) if where.startswith("emit") else len(records) // chunk + 1)))
        status = _run_in_chunks(settings, str(source), killed, chunk, kills[-1])
        assert status == 0 or (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL), (seed, status)
    assert _run_in_chunks(settings, str(source), killed, chunk, None) == 0
    said = f"seed {seed}, chunks of {chunk}, kills {kills}: {shown}"
    assert _lines(killed.links) == _lines(clean.links), said
    assert _lines(killed.deduped) == _lines(clean.deduped), said
    assert _state(killed.state) == _state(clean.state), said

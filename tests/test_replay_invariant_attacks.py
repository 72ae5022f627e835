"""The invariant "every verdict goes to a links topic that can be replayed to rebuild all state", attacked.

Each test runs the cascade over a stream's first part into a state S, rebuilds a fresh state R from the first
part's link records alone (`dedup replay`), then decides the stream's second part against S and against R:
every verdict (verdict, canonical, stage and the figure check's or group cap's reason) and every group size must
be equal. The plain case is `tests/test_replay.py`; these are the cases it misses.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from streams.config import Settings
from streams.core.model import DAY_S, Stage
from streams.runner.embedded import RunPaths, run
from streams.runner.replay import replay_files

CHEAP = [Stage.URL, Stage.CONTENT, Stage.SIMHASH]
TEXT_A = " ".join(f"alpha{i} beta{i % 7} gamma{i % 11}" for i in range(120))
TEXT_B = " ".join(f"delta{i} epsilon{i % 5} zeta{i % 13}" for i in range(120))

Verdicts = list[tuple[str, str, str, str | None, str | None]]


def _rfc(when: int) -> str:
    return datetime.fromtimestamp(when, UTC).isoformat()


def _article(doc_id: str, url: str, body: str, when: int, title: str = "t") -> dict[str, Any]:
    return {"id": doc_id, "url": url, "title": title, "body": body, "published_at": _rfc(when)}


def _write(path: Path, records: list[dict[str, Any]]) -> str:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return str(path)


def _verdicts(path: Path) -> Verdicts:
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    return [(r["doc_id"], r["verdict"], r["canonical_id"], r["stage"], r.get("reason")) for r in records]


def _groups(state: Path) -> list[tuple[str, int]]:
    with closing(sqlite3.connect(state / "state.sqlite3")) as db:
        return sorted(db.execute("SELECT canonical_id, size FROM groups").fetchall())


def _live_and_replayed(
    tmp_path: Path, settings: Settings, first: list[dict[str, Any]], second: list[dict[str, Any]]
) -> tuple[Verdicts, Verdicts]:
    """The second part's verdicts against the state the first part left (S) and against one rebuilt from the
    first part's links (R); both, and the group sizes, are asserted equal."""
    live = RunPaths(tmp_path / "first", tmp_path / "S")
    run(settings, [_write(tmp_path / "first.jsonl", first)], live)
    stats = replay_files(
        [str(live.links)], tmp_path / "R", retention=settings.retention, band_layout=settings.simhash.band_layout
    )
    assert not stats.bad
    source = _write(tmp_path / "second.jsonl", second)
    on_live, on_replayed = RunPaths(tmp_path / "on-S", tmp_path / "S"), RunPaths(tmp_path / "on-R", tmp_path / "R")
    run(settings, [source], on_live)
    run(settings, [source], on_replayed)
    live, replayed = _verdicts(on_live.links), _verdicts(on_replayed.links)
    assert replayed == live
    assert _groups(tmp_path / "R") == _groups(tmp_path / "S")
    return live, replayed


def test_a_redelivery_dated_later_moves_no_clock_the_replay_cannot_move(tmp_path: Path) -> None:
    """A crawler sends a document again, same id and content, with a later `published_at` (an "updated" stamp).
    It gets its first verdict and no new link line: the links say nothing of the later date. `dedup run`
    moved the stream's clock to it all the same, so a month later by that clock the first canonical's band
    entries had expired in the live state and not in the replayed one: a late near-copy of it came out unique
    against S and a duplicate against R. (The service moves its clock by what it writes, so a redelivery
    moves nothing there.)"""
    start = int(time.time()) - 60 * DAY_S
    first = [
        _article("c", "https://a.example/c", TEXT_A, start),
        _article("x", "https://a.example/x", TEXT_B, start),
        _article("x", "https://a.example/x", TEXT_B, start + 31 * DAY_S),  # redelivered, dated a month later
    ]
    late_copy = _article("d", "https://b.example/d", TEXT_A.replace("alpha5 ", "alphaX "), start + DAY_S)
    live, replayed = _live_and_replayed(tmp_path, Settings(stages=CHEAP), first, [late_copy])
    assert live == replayed
    assert live == [("d", "duplicate", "c", "simhash", None)]

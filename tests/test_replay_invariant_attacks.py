"""The invariant "every verdict goes to a links topic that can be replayed to rebuild all state", attacked.

Each test runs the cascade over a stream's first part into a state S, rebuilds a fresh state R from the first
part's link records alone (`dedup replay`), then decides the stream's second part against S and against R:
every verdict (verdict, canonical, stage and the figure check's or group cap's reason) and every group size must
be equal. The plain case is `tests/test_replay.py`; these are the cases it misses.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from streams.config import Settings
from streams.core.cascade import Cascade
from streams.core.model import DAY_S, Document, Stage
from streams.evaluation.stack import Stack
from streams.kafka.replay import replay_links
from streams.records.article import Featurizer
from streams.runner.embedded import RunPaths, run
from streams.runner.replay import replay_files
from streams.stores.redis_store import RedisStateStore

CHEAP = [Stage.URL, Stage.CONTENT, Stage.SIMHASH]
TEXT_A = " ".join(f"alpha{i} beta{i % 7} gamma{i % 11}" for i in range(120))
TEXT_B = " ".join(f"delta{i} epsilon{i % 5} zeta{i % 13}" for i in range(120))
TEXT_C = " ".join(f"kappa{i} lambda{i % 3} mu{i % 17}" for i in range(120))

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


# --- the service: dedup.links replayed into a fresh Redis


def _decided(settings: Settings, state: RedisStateStore, articles: list[dict[str, Any]]) -> Verdicts:
    """`articles` decided one by one by the cascade against a Redis state (the workers' core and store)."""
    cascade, featurizer = Cascade(settings, state), Featurizer(settings)
    verdicts: Verdicts = []
    for article in articles:
        doc = featurizer.parse(orjson.dumps(article), ingest_time=int(time.time()))
        assert isinstance(doc, Document)
        link = cascade.decide(doc).link
        verdicts.append((link.doc_id, link.verdict, link.canonical_id, link.stage, link.reason))
    return verdicts


def test_the_service_replay_keeps_the_keys_a_redelivery_claimed_none_of(make_stack: Callable[[str], Stack]) -> None:
    """The crawler sends `x` again, same id and content, found at another URL. The worker gives it its first
    verdict and claims nothing, but sends its link record again with the features of what it received: the
    other URL's hash, a later date. `dedup replay` kept a document's latest record, so it restored `x` with the
    URL it never claimed and without the one it did (a later article at `x`'s first URL was a URL duplicate of
    `x` live and a canonical of its own after the replay), and stamped it, and moved the clock, with a date the
    live state never saw."""
    stack = make_stack("url,content,simhash")
    stack.partitions = 1
    stack.create_topics()
    worker = stack.start_worker()
    when = _rfc(int(time.time()) - 30 * DAY_S)
    first = [
        {"id": "c", "url": "https://a.example/c", "title": "t", "body": TEXT_A, "published_at": when},
        {"id": "x", "url": "https://a.example/x", "title": "t", "body": TEXT_B, "published_at": when},
    ]
    stack.produce(orjson.dumps(article) for article in first)
    stack.final_links({"c", "x"})
    later = _rfc(int(time.time()) - DAY_S)
    again = {**first[1], "url": "https://mirror.example/x", "published_at": later}  # from elsewhere, dated later
    stack.produce([orjson.dumps(again)])
    stack.read(stack.settings().topics.links, until=3)
    worker.stop()

    settings = stack.settings()
    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    stats = replay_links(settings, client, None, prefix=f"{stack.name}-replayed:")
    assert (stats.documents, stats.bad) == (2, [])
    live = RedisStateStore(client, f"{stack.name}:", settings.redis_bucket_bits, settings.retention)
    replayed = RedisStateStore(client, f"{stack.name}-replayed:", settings.redis_bucket_bits, settings.retention)
    second = [
        {"id": "y", "url": "https://a.example/x", "title": "t", "body": TEXT_C, "published_at": when},
        {"id": "d", "url": "https://b.example/d", "title": "t", "body": TEXT_A.replace("alpha5 ", "alphaX ")}
        | {"published_at": when},
    ]
    assert _decided(settings, replayed, second) == _decided(settings, live, second)
    assert replayed.clock() == live.clock()
    assert replayed.group_size("x") == live.group_size("x") == 2
    client.close()


def test_a_document_registered_again_after_its_verdict_expired_is_in_the_links(tmp_path: Path) -> None:
    """`x` comes again, same id, address and content, after its verdict and exact keys have expired. It is
    decided afresh, a canonical again, its band entries stamped anew, and its link line is the one written for
    it the first time (same verdict, canonical, stage and content), so none was written. The replayed state kept
    `x`'s first stamps: a near-copy of it an hour later was a duplicate of `x` live and unique after a replay."""
    start = int(time.time()) - 60 * DAY_S
    settings = Settings(stages=CHEAP, retention={"bands_days": 2, "exact_days": 2, "verdicts_days": 1})
    first = [
        _article("x", "https://a.example/x", TEXT_B, start),
        _article("c", "https://a.example/c", TEXT_A, start + 3 * DAY_S),
        _article("x", "https://a.example/x", TEXT_B, start + 3 * DAY_S + 3600),
    ]
    copy = _article("d", "https://b.example/d", TEXT_B.replace("delta5 ", "deltaX "), start + 3 * DAY_S + 7200)
    live, _ = _live_and_replayed(tmp_path, settings, first, [copy])
    assert live == [("d", "duplicate", "x", "simhash", None)]


@pytest.mark.parametrize("out", ["one --out", "an --out a run"])
@pytest.mark.parametrize("killed", ["before the journal's commit", "between the journal's commit and the state's"])
def test_a_registration_again_decided_again_after_a_kill_is_written_once(tmp_path: Path, killed: str, out: str) -> None:
    """`x`, registered by a first run, comes again after its verdict and keys expired: its registration again is
    written. That second run (into the same `--out`, or one of its own) is then killed before its state's commit
    (its outputs on disk, as SIGKILL leaves a buffer flushed mid-chunk; the journal at the first run's commit, or
    past it) and run again: it decides `x` afresh as before, and the line it would write is the one the kill
    left. One line per registration."""
    start = int(time.time()) - 60 * DAY_S
    settings = Settings(stages=CHEAP, retention={"bands_days": 2, "exact_days": 2, "verdicts_days": 1})
    first = RunPaths(tmp_path / "out", tmp_path / "S")
    run(settings, [_write(tmp_path / "one.jsonl", [_article("x", "https://a.example/x", TEXT_B, start)])], first)
    committed = {path.name: path.read_bytes() for path in first.state.iterdir() if path.is_file()}
    again = [
        _article("c", "https://a.example/c", TEXT_A, start + 3 * DAY_S),
        _article("x", "https://a.example/x", TEXT_B, start + 3 * DAY_S + 3600),
    ]
    source = _write(tmp_path / "two.jsonl", again)
    second = first if out == "one --out" else RunPaths(tmp_path / "out-2", first.state)
    lines = ["x", "c", "x"] if second is first else ["c", "x"]
    run(settings, [source], second)
    assert [d for d, *_ in _verdicts(second.links)] == lines
    for path in first.state.iterdir():  # the state (and journal) as the first run committed them
        if path.name in committed and (path.name.startswith("state.") or killed.startswith("before")):
            path.write_bytes(committed[path.name])
        elif path.name.startswith("state.") or (path.name.startswith("journal.") and killed.startswith("before")):
            path.unlink()
    run(settings, [source], second)
    assert [d for d, *_ in _verdicts(second.links)] == lines

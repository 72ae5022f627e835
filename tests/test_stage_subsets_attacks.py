"""Attacks on runs with fewer stages than url, content and simhash (`--stages`, `DEDUP_STAGES`): the state a run
or the workers leave against the state a replay of their links rebuilds, and verdicts given on a state used with
varying stages. Real components only: SQLite state folders, the tests' Redis and Kafka-protocol broker, and real
workers."""

from __future__ import annotations

import itertools
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from benchmarks.replay_speed import keys
from streams.config import Settings
from streams.core.cascade import Cascade
from streams.core.model import DAY_S, Document, Stage
from streams.evaluation.stack import Stack
from streams.kafka.replay import replay_links
from streams.records.article import Featurizer
from streams.runner.embedded import RunPaths, run
from streams.runner.replay import replay_files
from streams.stores.redis_store import RedisStateStore
from tests.test_runs_across_time import TEXT_A, TEXT_B, TEXT_C, _article, _write

CHEAP = [Stage.URL, Stage.CONTENT, Stage.SIMHASH]
IGNORED = ("sweep", "oldest", "clock", "replay")


def _line(doc_id: str, url: str, body: str, when: int) -> bytes:
    return orjson.dumps(_article(doc_id, url, body, when))


def _records_of(stack: Stack, doc_id: str, count: int, timeout: float = 120.0) -> list[dict[str, Any]]:
    """The link records of `doc_id` on `dedup.links`, once there are `count` of them."""
    consumer = stack.reader(stack.settings().topics.links)
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(found) < count:
            assert time.monotonic() < deadline, f"{len(found)} records of {doc_id}, wanted {count}"
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            record = orjson.loads(message.value())
            if record["doc_id"] == doc_id:
                found.append(record)
    finally:
        consumer.close()
    return found


def _redeploy(stack: Stack, stages: str) -> None:
    """The workers stopped and started again with other `DEDUP_STAGES` (same group, same Redis)."""
    stack.stop()
    stack.workers.clear()
    stack.stages = stages
    stack.start_worker()


def _replayed_against_live(stack: Stack, redis_url: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        copy = f"{stack.name}-copy:"
        stats = replay_links(stack.settings(), client, None, prefix=copy)
        assert not stats.bad
        return keys(client, f"{stack.name}:", IGNORED), keys(client, copy, IGNORED), copy
    finally:
        client.close()


def _differing(live: dict[str, Any], replayed: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """The keys (and hash fields) whose values differ between two states, with both values."""
    out = []
    for name in sorted(live.keys() | replayed.keys()):
        one, other = live.get(name), replayed.get(name)
        if isinstance(one, dict) and isinstance(other, dict):
            out += [
                (f"{name}/{f}", one.get(f), other.get(f))
                for f in sorted(one.keys() | other.keys())
                if one.get(f) != other.get(f)
            ]
        elif one != other:
            out.append((name, one, other))
    return out


def _decided_on(redis_url: str, prefix: str, stack: Stack, line: bytes) -> tuple[str, str, str | None]:
    """The verdict the state under `prefix` gives `line`, by the cascade the workers run (stages 1 to 3)."""
    settings = stack.settings().model_copy(update={"stages": CHEAP})
    doc = Featurizer(settings).parse(line, ingest_time=int(time.time()))
    assert isinstance(doc, Document)
    link = Cascade(settings, RedisStateStore.from_url(redis_url, prefix=prefix)).decide(doc).link
    return link.verdict.value, link.canonical_id, link.stage.value if link.stage else None


@pytest.mark.parametrize(("before", "after"), [("url", "url,content,simhash"), ("url,content,simhash", "url")])
def test_a_redelivery_after_a_redeploy_with_other_stages_changes_what_the_replay_claims(
    make_stack: Callable[[str], Stack], redis_url: str, before: str, after: str
) -> None:
    """Deploy 1 runs `before` and decides `a`; deploy 2 runs `after`, and the crawler sends `a` again. The worker
    gives `a` its verdict again and re-sends its link record, stamped with deploy 2's stages
    (streams/service/stages.py `_verdict`: `link_record(..., stages=self._settings.stages)`, repeated or not). The
    replay keeps a document's latest record (`_newest` in streams/kafka/replay.py carries the vector and keys of an
    older record of the same verdict, not its `stages`), so it claims what deploy 2 would have claimed, not what
    deploy 1 did: a content key and band entries the live state never had (`before` url), or none of those it has
    (`after` url). The rebuilt state then links a content copy the live state lets through, or the reverse."""
    t0 = int(time.time()) - DAY_S
    stack = make_stack(before)
    stack.create_topics()
    stack.start_worker()
    a = _line("a", "https://g.example.com/a", TEXT_A, t0)
    stack.produce([a, _line("b", "https://g.example.com/b", TEXT_B, t0 + 1)])
    stack.final_links({"a", "b"})
    (first,) = _records_of(stack, "a", 1)

    _redeploy(stack, after)
    stack.produce([a])  # the crawler sends `a` again: it gets its verdict again, its link record re-sent
    again = _records_of(stack, "a", 2)[1]
    assert (again["verdict"], again["seq"]) == (first["verdict"], first["seq"])

    live, replayed, copy = _replayed_against_live(stack, redis_url)
    a_copy = _line("a-copy", "https://other.example.com/a", TEXT_A, t0 + 3600)
    on_replayed = _decided_on(redis_url, copy, stack, a_copy)
    _redeploy(stack, "url,content,simhash")
    stack.produce([a_copy])
    on_live = stack.final_links({"a-copy"})[0]["a-copy"]
    assert on_replayed == (on_live["verdict"], on_live["canonical_id"], on_live["stage"])
    assert _differing(live, replayed) == []


def test_a_deploy_without_the_semantic_stage_decides_on_when_an_embedded_canonical_comes_again(
    make_stack: Callable[[str], Stack],
) -> None:
    """Deploy 1 runs every stage: `a` is a canonical the semantic stage embedded (its link names the model). Deploy
    2 drops the semantic stage (`DEDUP_STAGES=url,content,simhash`, a documented deployment), and the crawler sends
    `a` again. The last agent (`_decide_all` in streams/service/stages.py) re-embeds every redelivered embedded
    canonical so that its re-sent link carries the vector (`again`, then `self._embed(again)`), but this deploy has
    no embedder: `assert self._embedder is not None` fails, the batch is retried forever (`/readyz` 503,
    'AssertionError: ') and nothing after `a` in the partition is ever decided."""
    t0 = int(time.time()) - DAY_S
    stack = make_stack("url,content,simhash,semantic")
    stack.create_topics()
    stack.start_worker()
    a = _line("a", "https://g.example.com/a", TEXT_A, t0)
    stack.produce([a])
    first = stack.final_links({"a"})[0]["a"]
    assert (first["verdict"], first["model"] is not None) == ("unique", True)

    _redeploy(stack, "url,content,simhash")
    stack.produce([a, _line("b", "https://g.example.com/b", TEXT_B, t0 + 1)])
    latest, _ = stack.final_links({"b"}, timeout=60)
    assert latest["b"]["verdict"] == "unique"


@pytest.mark.parametrize("stages", ["url,semantic", "content,simhash"])
def test_guard_workers_with_fewer_stages_then_all_leave_what_the_replay_rebuilds_key_for_key(
    make_stack: Callable[[str], Stack], redis_url: str, stages: str
) -> None:
    """Guard (passes): workers deploying `stages`, then stages 1 to 3, without a redelivery; `dedup replay` of
    `dedup.links` rebuilds their Redis state key for key."""
    t0 = int(time.time()) - DAY_S
    stack = make_stack(stages)
    stack.create_topics()
    stack.start_worker()
    stack.produce(_line(*article) for article in _day_one(t0))
    stack.final_links({article[0] for article in _day_one(t0)})
    _redeploy(stack, "url,content,simhash")
    day_two = _day_two(t0)[:-1]  # `a` is not sent again here (see the tests above)
    stack.produce(_line(*article) for article in day_two)
    stack.final_links({article[0] for article in day_two})
    live, replayed, _ = _replayed_against_live(stack, redis_url)
    assert _differing(live, replayed) == []


# --- files -----------------------------------------------------------------------------------------------------


def _day_one(t0: int) -> list[tuple[str, str, str, int]]:
    """Something for every stage: a URL copy, a content copy, a near copy, and a URL copy with other text."""
    return [
        ("a", "https://g.example.com/a", TEXT_A, t0),
        ("b", "https://g.example.com/b", TEXT_B, t0 + 1),
        ("a-syn", "https://s.example.com/a", TEXT_A, t0 + 2),
        ("a-near", "https://n.example.com/a", TEXT_A + " One sentence more.", t0 + 3),
        ("b-re", "https://g.example.com/b?utm_source=x", TEXT_B + " Updated.", t0 + 4),
    ]


def _day_two(t0: int) -> list[tuple[str, str, str, int]]:
    """Copies of day one's documents by each stage, and `a` sent again."""
    return [
        ("x-url", "https://g.example.com/a", TEXT_C, t0 + DAY_S),
        ("x-content", "https://x.example.com/c", TEXT_A, t0 + DAY_S + 1),
        ("x-near", "https://x.example.com/n", TEXT_A + " Two sentences more here.", t0 + DAY_S + 2),
        ("x-syn-url", "https://s.example.com/a", TEXT_B, t0 + DAY_S + 3),
        ("x-nearb", "https://x.example.com/nb", TEXT_B + " Updated.", t0 + DAY_S + 4),
        ("a", "https://g.example.com/a", TEXT_A, t0),
    ]


def _day_three(t0: int) -> list[tuple[str, str, str, int]]:
    """Probes: copies of every text and URL seen, and a new text."""
    return [
        ("p1", "https://p.example.com/1", TEXT_A, t0 + 2 * DAY_S),
        ("p2", "https://p.example.com/2", TEXT_A + " Three.", t0 + 2 * DAY_S + 1),
        ("p3", "https://p.example.com/3", TEXT_B + " Updated.", t0 + 2 * DAY_S + 2),
        ("p4", "https://g.example.com/b", TEXT_C + " x", t0 + 2 * DAY_S + 3),
        ("p5", "https://s.example.com/a", TEXT_C + " y", t0 + 2 * DAY_S + 4),
        ("p6", "https://x.example.com/c", TEXT_B, t0 + 2 * DAY_S + 5),
        ("p7", "https://p.example.com/7", TEXT_C, t0 + 2 * DAY_S + 6),
    ]


def _file(path: Path, articles: list[tuple[str, str, str, int]]) -> str:
    return _write(path, [_article(*article) for article in articles])


def _state_rows(state: Path) -> dict[str, list[tuple[Any, ...]]]:
    """A state folder's verdicts, exact keys, groups and canonicals (these in registration order)."""
    queries = {
        "verdicts": "SELECT doc_id, verdict, canonical_id, stage, score, model, content, stamp FROM verdicts",
        "exact_keys": "SELECT hex(key), canonical_id, stamp FROM exact_keys",
        "groups": "SELECT canonical_id, size, stamp FROM groups",
    }
    with closing(sqlite3.connect(state / "state.sqlite3")) as db:
        rows = {name: sorted(db.execute(sql).fetchall()) for name, sql in queries.items()}
        order = "SELECT doc_id, simhash, language, stamp, figures FROM canonicals ORDER BY seq"
        rows["canonicals"] = db.execute(order).fetchall()
    return rows


def _file_verdicts(paths: RunPaths) -> list[tuple[str, str, str, str | None]]:
    links = [orjson.loads(line) for line in paths.links.read_bytes().splitlines()]
    return [(link["doc_id"], link["verdict"], link["canonical_id"], link["stage"]) for link in links]


SUBSETS = [list(chosen) for size in (1, 2, 3) for chosen in itertools.combinations(CHEAP, size)]


def test_guard_a_state_folder_continued_with_other_stages_is_rebuilt_by_the_replay_row_for_row(tmp_path: Path) -> None:
    """Guard (passes): one state folder, day one with every subset of stages 1 to 3, day two with every subset (and
    `a` sent again), each day into its own `--out`; `dedup replay` of both links files rebuilds the state row for
    row, and a third day with stages 1 to 3 gets the same verdicts on both."""
    t0 = int(time.time()) - 3 * DAY_S
    one, two = _file(tmp_path / "d1.jsonl", _day_one(t0)), _file(tmp_path / "d2.jsonl", _day_two(t0))
    three = _file(tmp_path / "d3.jsonl", _day_three(t0))
    for i, j in itertools.product(range(len(SUBSETS)), repeat=2):
        where = tmp_path / f"{i}-{j}"
        live = where / "live"
        run(Settings(stages=SUBSETS[i]), [one], RunPaths(where / "out1", live))
        run(Settings(stages=SUBSETS[j]), [two], RunPaths(where / "out2", live))
        stats = replay_files([str(where / "out1" / "links.jsonl"), str(where / "out2" / "links.jsonl")], where / "r")
        assert not stats.bad
        assert _state_rows(where / "r") == _state_rows(live), (SUBSETS[i], SUBSETS[j])
        on_live, on_rebuilt = RunPaths(where / "l3", live), RunPaths(where / "r3", where / "r")
        run(Settings(stages=CHEAP), [three], on_live)
        run(Settings(stages=CHEAP), [three], on_rebuilt)
        assert _file_verdicts(on_rebuilt) == _file_verdicts(on_live), (SUBSETS[i], SUBSETS[j])


def test_a_run_resumed_after_a_kill_with_other_stages_leaves_links_that_replay_to_the_live_state(
    tmp_path: Path,
) -> None:
    """`dedup run --stages url` killed between the journal's commit and the state's (as in
    tests/test_runs_across_time.py: the outputs and the journal complete, the state at its last commit, here
    empty), then run again into the same `--out` with stages 1 to 3. Decided again, the documents claimed their
    content keys and band entries while `links.jsonl` kept the first attempt's records, `stages: ["url"]` (the
    verdicts were the same, so no line was written again): its replay claimed only the URL keys, and a later
    content copy of `a` was a duplicate on the live state and a canonical of its own on the rebuilt one. The
    resumed run takes in what the outputs say was decided (`stages: ["url"]`) instead: the two states agree."""
    t0 = int(time.time()) - DAY_S
    source = _file(tmp_path / "in.jsonl", _day_one(t0)[:2])
    paths = RunPaths(tmp_path / "out", tmp_path / "out" / "state")
    run(Settings(stages=[Stage.URL]), [source], paths)
    for name in ("state.sqlite3", "state.sqlite3-wal", "state.sqlite3-shm"):
        (paths.state / name).unlink(missing_ok=True)
    run(Settings(stages=CHEAP), [source], paths)
    replay_files([str(paths.links)], tmp_path / "rebuilt")

    probe = _file(tmp_path / "probe.jsonl", [("a-copy", "https://other.example.com/a", TEXT_A, t0 + 3600)])
    on_live, on_rebuilt = RunPaths(tmp_path / "l", paths.state), RunPaths(tmp_path / "r", tmp_path / "rebuilt")
    run(Settings(stages=CHEAP), [probe], on_live)
    run(Settings(stages=CHEAP), [probe], on_rebuilt)
    assert _file_verdicts(on_live) == [("a-copy", "unique", "a-copy", None)]  # `a` was decided with its URL only
    assert _file_verdicts(on_rebuilt) == _file_verdicts(on_live)
    assert _state_rows(tmp_path / "rebuilt")["exact_keys"] == _state_rows(paths.state)["exact_keys"]


# --- hostile `stages` ------------------------------------------------------------------------------------------


def _url_only_links(tmp_path: Path) -> tuple[list[dict[str, Any]], int]:
    """A `--stages url` run: `a`, `b`, and `a-re` (a's URL, TEXT_C) a URL duplicate of `a`."""
    t0 = int(time.time()) - DAY_S
    articles = [*_day_one(t0)[:2], ("a-re", "https://g.example.com/a?utm_source=x", TEXT_C, t0 + 5)]
    paths = RunPaths(tmp_path / "url-only", tmp_path / "url-only" / "state")
    run(Settings(stages=[Stage.URL]), [_file(tmp_path / "url-only.jsonl", articles)], paths)
    records = [orjson.loads(line) for line in paths.links.read_bytes().splitlines()]
    assert [(r["doc_id"], r["stage"], r["stages"]) for r in records][2] == ("a-re", "url", ["url"])
    return records, t0


def test_a_link_whose_stage_is_not_among_its_stages_is_skipped_not_restored(tmp_path: Path) -> None:
    """A record that says it was linked by the URL stage of a run without it (`stage` url, `stages` ["content"])
    contradicts itself: no cascade writes it. `read_link_record` (streams/records/output.py) checks `stages` alone
    (`stages_named`), so the replay restores it and claims its content key (TEXT_C's) for `a`, which holds TEXT_A:
    a later article with TEXT_C is then linked to `a` by content, an article it never copied. It must be skipped,
    with the reason."""
    records, t0 = _url_only_links(tmp_path)
    forged = [*records[:2], {**records[2], "stages": ["content"]}]
    stats = replay_files([_write(tmp_path / "forged.jsonl", forged)], tmp_path / "rebuilt")
    probe = _file(tmp_path / "probe.jsonl", [("c", "https://other.example.com/c", TEXT_C, t0 + 3600)])
    on_rebuilt = RunPaths(tmp_path / "r", tmp_path / "rebuilt")
    run(Settings(stages=CHEAP), [probe], on_rebuilt)
    assert _file_verdicts(on_rebuilt) == [("c", "unique", "c", None)]
    assert len(stats.bad) == 1 and "stage" in stats.bad[0]


@pytest.mark.parametrize(
    "value",
    ["url", [], ["URL"], ["url", "url"], None, [1], [True], [["url"]], {"url": 1}, ["url", None], ["url\u0000"]],
)
def test_guard_malformed_stages_are_skipped_with_their_reason(tmp_path: Path, value: Any) -> None:
    """Guard (passes): a `stages` that is no list of distinct stage names is skipped and reported by the file
    replay, never restored (the rest is)."""
    records, _ = _url_only_links(tmp_path)
    forged = [*records[:2], {**records[2], "stages": value}]
    stats = replay_files([_write(tmp_path / "forged.jsonl", forged)], tmp_path / "rebuilt")
    assert stats.restored == 2 and len(stats.bad) == 1 and "stages" in stats.bad[0]

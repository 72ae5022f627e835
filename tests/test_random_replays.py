"""Random hostile streams cut in two: the tail decided against the state the head left and against one rebuilt
from the head's links alone (`dedup replay`) gets the same verdicts ("every verdict is replayable").

The streams are `tests/test_random_streams.py`'s (reused ids, re-crawls, records sent again, late crawls, clock
jumps across retentions of 2, 4 and 6 days), so they stay clear of the same documented limits; the cut falls
anywhere, also between a record and its sending again. Each seed is one stream and one cut; a failure names both.

`dedup run` (SQLite) and `dedup replay` of links.jsonl for many seeds, the state folders compared key for key; the
service (the stage agent on Redis, in random batches, and `dedup replay` of `dedup.links` into another prefix) for
fewer, each a topic of its own. Each seed also varies the group cap and the figure check (reviews).
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from confluent_kafka import Producer

from streams.config import Settings
from streams.evaluation.stack import Stack
from streams.kafka.replay import replay_links
from streams.runner.embedded import RunPaths, run
from streams.runner.replay import replay_files
from streams.service.resources import Resources
from streams.service.stages import Agent, Incoming, Outgoing, StageAgent
from tests.test_random_streams import OPTIONS, _batches, drawn

STATE_ROWS = (
    "SELECT value FROM meta WHERE name = 'clock'",
    "SELECT doc_id, verdict, canonical_id, stage, score, model, content, stamp FROM verdicts ORDER BY doc_id",
    "SELECT key, canonical_id, stamp FROM exact_keys ORDER BY key",
    "SELECT doc_id, simhash, language, stamp, figures FROM canonicals ORDER BY seq",
    "SELECT canonical_id, size, stamp FROM groups ORDER BY canonical_id",
)
"""What a state folder decides by: its clock and every live row (canonicals in first-seen order)."""


def _drawn(seed: int) -> tuple[random.Random, list[dict[str, Any]], str, dict[str, Any]]:
    """The seed's generator, its stream's records, how a failure shows them, and the settings it varies: a small
    group cap and the figure check's review bring reviews, whose keys a replay stamps its own way."""
    rng, _, records, shown = drawn(seed)
    options = {"group_cap": rng.choice([1, 2, 1000]), "figure_check": rng.choice(["apart", "review", "off"])}
    return rng, records, f"seed {seed}: {shown}, {options}", options


def _settings(options: dict[str, Any], **more: Any) -> Settings:
    simhash = {"figure_check": options["figure_check"]}
    return Settings(**OPTIONS, group_cap=options["group_cap"], simhash=simhash, **more)


def _verdicts(links: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Each link's verdict, canonical, stage, score and reason (the figure check's, the group cap's)."""
    return [(r["doc_id"], r["verdict"], r["canonical_id"], r["stage"], r["score"], r.get("reason")) for r in links]


def _run(settings: Settings, source: Path, out: Path, state: Path) -> list[tuple[Any, ...]]:
    """`dedup run` over `source` into `state`; the verdicts it wrote."""
    paths = RunPaths(out=out, state=state)
    run(settings, [str(source)], paths)
    return _verdicts([orjson.loads(line) for line in paths.links.read_bytes().splitlines()])


def _rows(state: Path) -> list[list[tuple[Any, ...]]]:
    with closing(sqlite3.connect(state / "state.sqlite3")) as db:
        return [db.execute(sql).fetchall() for sql in STATE_ROWS]


@pytest.mark.parametrize("seed", range(300))
def test_a_state_rebuilt_from_a_random_heads_links_decides_its_tail_as_the_live_state(
    tmp_path: Path, seed: int
) -> None:
    """Head into a state folder, its links.jsonl replayed into another, the tail into both; and both parts' links
    replayed into a third, which must be the first."""
    rng, records, where, options = _drawn(seed)
    cut = rng.randint(1, len(records) - 1)
    where = f"cut at {cut}, {where}"
    settings = _settings(options)
    head, tail = tmp_path / "head.jsonl", tmp_path / "tail.jsonl"
    head.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records[:cut]))
    tail.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records[cut:]))
    live, rebuilt = tmp_path / "live", tmp_path / "rebuilt"
    _run(settings, head, tmp_path / "head", live)
    stats = replay_files(
        [str(tmp_path / "head" / "links.jsonl")],
        rebuilt,
        retention=settings.retention,
        band_layout=settings.simhash.band_layout,
    )
    assert not stats.bad, where
    assert _rows(rebuilt) == _rows(live), f"the replay rebuilt another state; {where}"
    on_live = _run(settings, tail, tmp_path / "tail-live", live)
    on_rebuilt = _run(settings, tail, tmp_path / "tail-rebuilt", rebuilt)
    assert on_rebuilt == on_live, where
    assert _rows(rebuilt) == _rows(live), f"the tail left another state; {where}"
    both = [str(tmp_path / "head" / "links.jsonl"), str(tmp_path / "tail-live" / "links.jsonl")]
    replay_files(both, tmp_path / "whole", retention=settings.retention, band_layout=settings.simhash.band_layout)
    assert _rows(tmp_path / "whole") == _rows(live), f"both parts' links rebuilt another state; {where}"


def _handled(agent: StageAgent, batches: list[list[dict[str, Any]]]) -> list[Outgoing]:
    """Every record the agent sends for `batches`, in order."""
    now_ms = int(time.time() * 1000)
    sent: list[Outgoing] = []
    for number, batch in enumerate(batches):
        incoming = [Incoming(orjson.dumps(r), None, now_ms, "raw", 0, number * 100 + i) for i, r in enumerate(batch)]
        sent += agent.handle(incoming)
    return sent


def _decided(agent: StageAgent, settings: Settings, batches: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The link records the agent sends for `batches`, in order (a record sent again gets its verdict again)."""
    return [orjson.loads(o.value) for o in _handled(agent, batches) if o.topic == settings.topics.links]


@pytest.mark.parametrize("seed", range(32))
def test_a_redis_state_rebuilt_from_a_random_heads_dedup_links_decides_its_tail_as_the_live_state(
    make_stack: Callable[[str], Stack], seed: int
) -> None:
    """The head's batches through the stage agent on one prefix, its link records produced to `dedup.links` and
    replayed into another prefix (`dedup replay`), the tail's batches through an agent on each."""
    rng, records, where, options = _drawn(seed)
    batches = _batches(rng, records)
    cut = rng.randint(1, len(batches) - 1) if len(batches) > 1 else 1
    where = f"{len(batches)} batches, cut after {cut}, {where}"
    stack = make_stack("url,content,simhash")
    stack.create_topics()
    topics = stack.settings()
    live = _settings(options, redis_url=stack.redis_url, redis_prefix=f"{stack.name}:",
                     kafka_bootstrap=stack.bootstrap, topics=topics.topics)  # fmt: skip
    rebuilt = live.model_copy(update={"redis_prefix": f"{stack.name}-rebuilt:"})
    on_live = Resources(live)
    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    try:
        head = _decided(on_live.stage_agent(Agent.EXACT, Agent.SIMHASH), live, batches[:cut])
        producer = Producer({"bootstrap.servers": stack.bootstrap, "linger.ms": 5})
        for record in head:
            producer.produce(live.topics.links, orjson.dumps(record), record["doc_id"].encode())
        assert producer.flush(30) == 0
        stats = replay_links(live, client, None, prefix=rebuilt.redis_prefix)
        assert not stats.bad, where
        on_rebuilt = Resources(rebuilt)
        try:
            # Not key for key: the replay's last sweep removed entries past their retention that the live state
            # keeps, hidden, until its sweep's pass of the next day.
            assert on_rebuilt.state.clock() == on_live.state.clock(), where
            tail = _decided(on_rebuilt.stage_agent(Agent.EXACT, Agent.SIMHASH), rebuilt, batches[cut:])
        finally:
            on_rebuilt.close()
        expected = _decided(on_live.stage_agent(Agent.EXACT, Agent.SIMHASH), live, batches[cut:])
        assert _verdicts(tail) == _verdicts(expected), where
    finally:
        client.close()
        on_live.close()

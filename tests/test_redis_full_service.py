"""A full Redis (`maxmemory` reached, `noeviction`) halts the stream and, given room, it resumes where it
stopped: every document decided once, with the verdicts of a one-by-one run, no link to a half-written
canonical. Under OOM a script's writes are refused from the first one Redis denies, so rounds of a batch
are left half-applied, as after a crash mid-round; the batch's retry completes them (the README's "Memory"
says a full Redis halts the pipeline until it has room: this holds it to that)."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import redis

from streams.config import Settings
from streams.evaluation.corpus import synthetic_articles
from streams.evaluation.services import local_redis
from streams.evaluation.stack import Stack, assert_invariants
from streams.runner.embedded import RunPaths, run

STAGES = "url,content,simhash"


def test_a_full_redis_halts_the_stream_which_resumes_once_it_has_room(kafka_bootstrap: str, tmp_path: Path) -> None:
    articles = list(synthetic_articles(1_500, seed=9))
    first, rest = articles[:300], articles[300:]
    source = tmp_path / "all.jsonl"
    source.write_bytes(b"".join(orjson.dumps(a) + b"\n" for a in articles))
    paths = RunPaths(out=tmp_path / "reference", state=tmp_path / "reference-state")
    run(Settings(stages=STAGES.split(",")), [str(source)], paths)
    expected = {r["doc_id"]: r for r in map(orjson.loads, paths.links.read_bytes().splitlines())}

    with local_redis(tmp_path / "redis") as url:
        client = redis.Redis.from_url(url, decode_responses=True)
        stack = Stack(kafka_bootstrap, url, tmp_path / "stack", stages=STAGES, partitions=1)
        (tmp_path / "stack").mkdir()
        try:
            stack.create_topics()
            worker = stack.start_worker()
            stack.produce(orjson.dumps(a) for a in first)
            stack.final_links({a["id"] for a in first})
            client.config_set("maxmemory", client.info("memory")["used_memory"] + 100_000)
            stack.produce(orjson.dumps(a) for a in rest)
            deadline = time.monotonic() + 120
            while "maxmemory" not in str((status := worker._readyz())[1].get("problems")):
                assert time.monotonic() < deadline, f"Redis never filled up: {status}"
                time.sleep(0.2)
            client.config_set("maxmemory", 0)  # room again
            latest, _ = stack.final_links({a["id"] for a in articles})
        finally:
            stack.stop()
            client.close()
    assert_invariants(latest)
    got = {d: (r["verdict"], r["canonical_id"], r["stage"]) for d, r in latest.items()}
    assert got == {d: (r["verdict"], r["canonical_id"], r["stage"]) for d, r in expected.items()}

"""A worker whose Redis is emptied under it (restarted without its data) decides nothing more until the
state is rebuilt with `dedup replay` and the worker restarted; then the stream goes on, as if nothing had
happened: the documents sent meanwhile get the verdicts a worker that never lost its state gives."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from streams.evaluation.corpus import synthetic_articles
from streams.evaluation.services import LocalRedis
from streams.evaluation.stack import Stack, Worker, assert_invariants


@pytest.fixture
def stack(make_stack: Callable[[str], Stack]) -> Stack:
    return make_stack("url,content,simhash")


def _wait_refusing(worker: Worker) -> None:
    """Until the worker's /readyz says its batches wait for `dedup replay`."""
    deadline = time.monotonic() + 60
    while (status := worker._readyz())[0] != 503 or "dedup replay" not in str(status[1]):
        assert time.monotonic() < deadline, f"the worker never said its state needs a replay: {status}"
        time.sleep(0.5)


def test_a_worker_refuses_an_emptied_state_until_it_is_replayed(stack: Stack) -> None:
    articles = list(synthetic_articles(400, seed=5))
    first, later = articles[:250], articles[250:]
    stack.create_topics()
    worker = stack.start_worker()
    stack.produce(orjson.dumps(a) for a in first)
    before, _ = stack.final_links({a["id"] for a in first})

    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    client.delete(*client.scan_iter(f"{stack.name}:*"))  # what a restart without persistence leaves
    stack.produce(orjson.dumps(a) for a in later)
    _wait_refusing(worker)
    written = [key for key in client.scan_iter(f"{stack.name}:*") if ":lock:" not in key]
    assert written == []  # nothing written into the emptied state (the lease and its fences aside)
    client.close()

    subprocess.run([sys.executable, "-m", "streams", "replay"], env={**os.environ, **stack.env()}, check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    assert not worker.ready()  # it may have decided on what it read of the lost state: restarted, it goes on
    worker.stop()
    stack.start_worker(instance=worker.instance)
    latest, _ = stack.final_links({a["id"] for a in articles})
    assert_invariants(latest)
    assert all(latest[doc_id] == link for doc_id, link in before.items())
    canonicals = {link["canonical_id"] for link in latest.values()}
    assert any(latest[a["id"]]["canonical_id"] in {a["id"] for a in first} and latest[a["id"]]["canonical_id"]
               != a["id"] for a in later)  # fmt: skip  # later copies found canonicals restored by the replay
    assert canonicals <= latest.keys()


def test_a_worker_started_on_an_empty_state_with_links_on_record_waits_for_the_replay(stack: Stack) -> None:
    """The whole deployment restarted after Redis lost its data: a new worker process cannot tell an
    emptied state from a new one by Redis alone, but `dedup.links` holds verdicts, so it is not new."""
    articles = list(synthetic_articles(300, seed=6))
    first, later = articles[:150], articles[150:]
    stack.create_topics()
    worker = stack.start_worker()
    stack.produce(orjson.dumps(a) for a in first)
    before, _ = stack.final_links({a["id"] for a in first})
    worker.stop()
    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    client.delete(*client.scan_iter(f"{stack.name}:*"))

    worker = stack.start_worker(instance=worker.instance)
    stack.produce(orjson.dumps(a) for a in later)
    _wait_refusing(worker)
    written = [key for key in client.scan_iter(f"{stack.name}:*") if ":lock:" not in key]
    assert written == []
    client.close()

    subprocess.run([sys.executable, "-m", "streams", "replay"], env={**os.environ, **stack.env()}, check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    latest, _ = stack.final_links({a["id"] for a in articles})  # the same worker goes on once it is rebuilt
    assert_invariants(latest)
    assert all(latest[doc_id] == link for doc_id, link in before.items())
    assert any(latest[a["id"]]["canonical_id"] in {a["id"] for a in first} and latest[a["id"]]["canonical_id"]
               != a["id"] for a in later)  # fmt: skip


def test_a_worker_refuses_a_state_a_cluster_failover_left_in_part_until_replay_fresh(
    redis_cluster: Any, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A master of the worker's Redis Cluster fails over to a replica that had not copied it: a third of the
    state goes while the layout marker stays. The worker decides nothing more; `dedup replay --fresh` rebuilds
    the state from `dedup.links`, and the restarted worker gives every document its verdict."""
    articles = list(synthetic_articles(300, seed=7))
    first, later = articles[:180], articles[180:]
    stack = Stack(kafka_bootstrap, redis_cluster.url, tmp_path)
    stack.create_topics()
    worker = stack.start_worker()
    try:
        stack.produce(orjson.dumps(a) for a in first)
        before, _ = stack.final_links({a["id"] for a in first})
        assert redis_cluster.empty_a_master(f"{stack.name}:", spared=f"{stack.name}:layout") > 0
        stack.produce(orjson.dumps(a) for a in later)
        _wait_refusing(worker)
        assert "--fresh" in str(worker._readyz()[1])
        replayed = subprocess.run([sys.executable, "-m", "streams", "replay", "--fresh", "--quiet"],
                                  env={**os.environ, **stack.env()}, capture_output=True, timeout=300)  # fmt: skip
        assert replayed.returncode == 0, replayed.stderr
        worker.stop()
        stack.start_worker(instance=worker.instance)
        latest, _ = stack.final_links({a["id"] for a in articles})
    finally:
        stack.stop()
    assert_invariants(latest)
    assert all(latest[doc_id] == link for doc_id, link in before.items())


def test_a_worker_started_on_a_redis_back_on_an_older_snapshot_waits_for_the_replay(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Redis restarted on an RDB taken before its last writes (default persistence, a backup restored) while no
    worker ran: the layout marker and every fence are there, so a new worker process found nothing wrong and
    decided on a state that lacks the verdicts and canonicals written since. A re-crawl of one of those became
    a canonical of its own: a duplicate in the indexers' feed. The links topic holds their seqs, past the
    state's verdict counter: the worker now refuses until `dedup replay --fresh` rebuilds it, then goes on."""
    server = LocalRedis(tmp_path / "redis")
    server.start()
    (tmp_path / "stack").mkdir()
    stack = Stack(kafka_bootstrap, server.url, tmp_path / "stack")
    try:
        articles = list(synthetic_articles(240, seed=8))
        first, later = articles[:120], articles[120:200]
        copies = [{**a, "id": f"{a['id']}-again", "url": f"{a['url']}/again"} for a in later[:40]]
        stack.create_topics()
        worker = stack.start_worker()
        stack.produce(orjson.dumps(a) for a in first)
        stack.final_links({a["id"] for a in first})
        client = redis.Redis.from_url(server.url, decode_responses=True)
        client.save()  # the snapshot: `first` only
        stack.produce(orjson.dumps(a) for a in later)
        before, _ = stack.final_links({a["id"] for a in first + later})
        worker.stop()
        client.close()
        server.stop()  # no save points: what `later` wrote is lost
        server.start()

        worker = stack.start_worker(instance=worker.instance, wait=False)
        stack.produce(orjson.dumps(a) for a in copies)
        _wait_refusing(worker)
        assert "went back" in str(worker._readyz()[1])
        replayed = subprocess.run([sys.executable, "-m", "streams", "replay", "--fresh", "--quiet"],
                                  env={**os.environ, **stack.env()}, capture_output=True, timeout=300)  # fmt: skip
        assert replayed.returncode == 0, replayed.stderr
        latest, _ = stack.final_links({a["id"] for a in first + later + copies})  # the same worker goes on
    finally:
        stack.stop()
        server.stop()
    assert_invariants(latest)
    assert all(latest[doc_id] == link for doc_id, link in before.items())
    for copy, original in zip(copies, later, strict=False):
        assert latest[copy["id"]]["canonical_id"] == latest[original["id"]]["canonical_id"], copy["id"]

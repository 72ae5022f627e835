"""`dedup replay` from the links topic: Redis and the vectors wiped, rebuilt, and the verdicts still right."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
import redis
from qdrant_client import QdrantClient

from streams.config import Settings
from streams.core.model import Stage
from streams.embedders import make_embedder
from streams.evaluation.corpus import ORIGINAL, labelled_stream
from streams.evaluation.stack import Stack
from streams.kafka.replay import replay_links
from streams.runner.embedded import RunPaths, run
from streams.stores.redis_store import RedisStateStore
from streams.vectors.common import collection_name
from streams.vectors.qdrant_server import QdrantVectorStore

STORIES = 8


@pytest.fixture
def stack(make_stack: Callable[[str], Stack]) -> Stack:
    return make_stack("url,content,simhash,semantic")


def _replay(stack: Stack) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "streams", "replay"],
        env={**os.environ, **stack.env()},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return " ".join(done.stderr.split())  # rich wraps lines to the terminal width


def _wipe(stack: Stack) -> None:
    """Everything a worker keeps: its Redis keys and its vector shard."""
    client = redis.Redis.from_url(stack.redis_url)
    keys = list(client.scan_iter(f"{stack.name}:*"))
    assert keys
    client.delete(*keys)
    client.close()
    shutil.rmtree(stack.folder / "state" / "vectors")


def test_replayed_state_links_later_copies_to_the_same_canonicals(stack: Stack, tmp_path: Path) -> None:
    stream = labelled_stream(negative_pairs=4, stories=STORIES)
    first = [item for item in stream if item.kind == ORIGINAL or item.group.startswith("mrpc")]
    later = [item for item in stream if item not in first]

    # The reference: one `dedup run` over both parts, no replay in between.
    source = tmp_path / "all.jsonl"
    source.write_bytes(b"".join(orjson.dumps(item.record) + b"\n" for item in first + later))
    paths = RunPaths(out=tmp_path / "reference", state=tmp_path / "reference-state")
    run(Settings(), [str(source)], paths)
    expected = {r["doc_id"]: r for r in map(orjson.loads, paths.links.read_bytes().splitlines())}

    stack.partitions = 1  # the copies are decided in input order, as in the reference
    stack.create_topics()
    worker = stack.start_worker()
    stack.produce(orjson.dumps(item.record) for item in first)
    stack.final_links({item.doc_id for item in first})
    worker.stop()

    _wipe(stack)
    report = _replay(stack)
    assert f"{len(first)} restored, 0 already there" in report, report
    assert f"0 restored, {len(first)} already there" in _replay(stack)  # idempotent

    stack.start_worker(instance=worker.instance)
    stack.produce(orjson.dumps(item.record) for item in later)
    latest, _ = stack.final_links({item.doc_id for item in stream})
    for item in later:
        got, want = latest[item.doc_id], expected[item.doc_id]
        assert (got["verdict"], got["canonical_id"], got["stage"]) == (
            want["verdict"],
            want["canonical_id"],
            want["stage"],
        ), item.doc_id
    assert {latest[item.doc_id]["stage"] for item in later} >= {"url", "content", "simhash", "semantic"}


def test_replay_into_a_qdrant_server_and_another_redis_namespace(stack: Stack) -> None:
    stream = labelled_stream(negative_pairs=2, stories=3)
    stack.partitions = 2
    stack.create_topics()
    stack.start_worker()
    stack.produce(orjson.dumps(item.record) for item in stream)
    latest, _ = stack.final_links({item.doc_id for item in stream})
    embedded = sum(1 for link in latest.values() if link["verdict"] == "unique" and link.get("vector"))
    assert embedded > 0

    settings = stack.settings()
    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    state = RedisStateStore(client, f"{stack.name}-copy:")
    vectors = QdrantVectorStore(QdrantClient(location=":memory:"))
    stats = replay_links(settings, client, vectors, prefix=f"{stack.name}-copy:")
    assert stats.documents == len(stream) and stats.restored == len(stream) and not stats.bad
    model = make_embedder(settings.semantic).model_id
    assert vectors.client.count(collection_name(vectors.prefix, model)).count == embedded
    for doc_id, link in latest.items():
        restored = state.verdict_of(doc_id)
        assert restored is not None and restored.verdict == link["verdict"]
        assert restored.canonical_id == link["canonical_id"]
        assert restored.stage == (Stage(link["stage"]) if link["stage"] else None)
    client.close()


def test_every_embedded_canonical_keeps_its_vector_through_redeliveries(stack: Stack) -> None:
    """Redelivered records (the whole stream again: what a killed worker or a re-sending crawler
    causes) meet canonicals decided before at the exact agent. The last link of each document,
    what compaction keeps, must still carry its vector."""
    stream = labelled_stream(negative_pairs=2, stories=4)
    ids = {item.doc_id for item in stream}
    stack.partitions = 2
    stack.create_topics()
    stack.start_worker()
    stack.produce(orjson.dumps(item.record) for item in stream)
    stack.final_links(ids, timeout=300)
    stack.produce(orjson.dumps(item.record) for item in stream)  # every verdict is known by now
    stack.read(stack.settings().topics.links, until=2 * len(stream), timeout=300)
    latest, _ = stack.final_links(ids, timeout=300)
    embedded = {doc_id for doc_id, link in latest.items() if link["verdict"] == "unique" and link["model"]}
    assert embedded
    assert all(latest[doc_id].get("vector") for doc_id in embedded), "a canonical's last link lost its vector"

    settings = stack.settings()
    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    vectors = QdrantVectorStore(QdrantClient(location=":memory:"))
    replay_links(settings, client, vectors, prefix=f"{stack.name}-copy:")
    model = make_embedder(settings.semantic).model_id
    assert vectors.client.count(collection_name(vectors.prefix, model)).count == len(embedded)
    client.close()

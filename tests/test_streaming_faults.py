"""The streaming service under faults: killed workers, competing workers, bad input.

Stages 1 to 3 (the semantic stage's CPU model would only make these slow); real
worker processes, a real broker, a real Redis.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from streams.evaluation.corpus import ntrex_documents, synthetic_articles
from streams.evaluation.stack import Stack, assert_invariants


@pytest.fixture
def stack(make_stack: Callable[[str], Stack]) -> Stack:
    return make_stack("url,content,simhash")


def _same_verdict_every_time(every: list[dict[str, Any]]) -> None:
    """A redelivered document is sent again with the verdict it already had, never another."""
    seen: dict[str, tuple[str, str, str | None]] = {}
    for record in every:
        verdict = (record["verdict"], record["canonical_id"], record["stage"])
        assert seen.setdefault(record["doc_id"], verdict) == verdict, record["doc_id"]


def test_a_worker_killed_again_and_again_loses_nothing_and_repeats_its_verdicts(stack: Stack) -> None:
    articles = list(synthetic_articles(3000, seed=5))
    ids = {article["id"] for article in articles}
    stack.partitions = 2
    stack.create_topics()
    worker = stack.start_worker()
    stack.produce(orjson.dumps(article) for article in articles)
    links_topic = stack.settings().topics.links
    for seen in (300, 1200, 2200):  # kill mid-stream, each time a little further on
        stack.read(links_topic, until=seen, timeout=180)
        worker.kill()
        worker = stack.start_worker(instance=worker.instance)
    latest, every = stack.final_links(ids, timeout=300)
    assert latest.keys() == ids
    assert_invariants(latest)
    _same_verdict_every_time(every)
    assert sum(link["verdict"] == "duplicate" for link in latest.values()) > 600


def _copies(count: int, rng: random.Random) -> list[dict[str, Any]]:
    """`count` stories, each with re-crawls, mirrored copies and lightly edited ones."""
    out = []
    for number, doc in enumerate(ntrex_documents()[:count]):
        story = f"s{number}"
        original = {
            "url": f"https://{doc.outlet}.example.com/{story}",
            "title": doc.english[0],
            "body": " ".join(doc.english[1:]),
            "published_at": "2026-11-01T08:00:00Z",
        }
        out.append(dict(original, id=f"{story}-0", story=story))
        for copy in range(1, 10):
            record = dict(original, id=f"{story}-{copy}", story=story)
            if copy % 3 == 0:
                record["url"] = original["url"] + f"?utm_source=c{copy}"
            elif copy % 3 == 1:
                record["url"] = f"https://mirror{copy}.example.net/{story}"
            else:
                record["url"] = f"https://edit{copy}.example.org/{story}"
                # a different text, the same words and figures (a clause's comma, never a thousands separator:
                # 6;234 states other figures than 6,234, which stage 3's figure check may keep apart)
                record["body"] = original["body"].replace(", ", "; ", copy)
            out.append(record)
    rng.shuffle(out)
    return out


def test_two_workers_racing_on_copies_never_make_two_canonicals(stack: Stack) -> None:
    records = _copies(50, random.Random(3))
    ids = {r["id"] for r in records}
    stack.partitions = 4
    stack.create_topics()
    stack.start_worker()
    stack.start_worker()
    stack.wait_assigned(stack.settings().topics.raw)  # both in the group, each holding partitions
    stack.produce(orjson.dumps(r) for r in records)
    latest, every = stack.final_links(ids, timeout=240)
    assert_invariants(latest)
    _same_verdict_every_time(every)
    story_of = {r["id"]: r["story"] for r in records}
    canonicals: dict[str, set[str]] = defaultdict(set)
    holders: dict[tuple[str, str], set[str]] = defaultdict(set)
    for doc_id, link in latest.items():
        assert link["verdict"] != "review", doc_id
        root = doc_id if link["verdict"] == "unique" else link["canonical_id"]
        assert story_of[root] == story_of[doc_id], f"{doc_id} linked across stories"
        canonicals[story_of[doc_id]].add(root)
        if link["verdict"] == "unique":
            holders[("url", link["url_hash"])].add(doc_id)
            holders[("content", link["content_hash"])].add(doc_id)
    assert all(len(roots) == 1 for roots in canonicals.values()), "a story got two canonicals"
    assert all(len(owners) == 1 for owners in holders.values()), "an exact key got two canonicals"
    # Both took part: each decided documents of its partitions. Which one registers a story's first copy is
    # a race (stages 1 to 3 run in one hop; a worker still compiling its kernels may find every story taken),
    # so a worker's verdicts may all be duplicates: any verdict counts.
    for worker in stack.workers:
        metrics = worker.metrics()
        assert _decided(metrics) > 0, worker.log.read_text()[-3000:]
        assert "dedup_verdict_latency_seconds_count" in metrics


def _decided(metrics: str) -> float:
    """The verdicts a worker gave, from its Prometheus text."""
    return sum(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("dedup_verdicts_total{"))


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
_FIELDS = st.sampled_from(["id", "url", "title", "body", "html", "published_at", "language"])
_BAD = st.one_of(
    st.binary(max_size=60).filter(lambda raw: not raw.strip().startswith(b"{")),
    _JSON.map(orjson.dumps).filter(lambda raw: not raw.startswith(b"{")),
    st.dictionaries(_FIELDS, _JSON, max_size=5)
    .filter(lambda d: not (isinstance(d.get("url"), str) and (isinstance(d.get("body") or d.get("html"), str))))
    .map(orjson.dumps),
)


@settings(
    max_examples=1,
    deadline=None,
    database=None,
    phases=[Phase.generate],  # one stack per test: no shrinking on it
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(bad=st.lists(_BAD, min_size=300, max_size=300))
def test_malformed_records_are_rejected_with_a_reason_and_valid_ones_all_decided(
    stack: Stack, bad: list[bytes]
) -> None:
    # Hypothesis draws 300 shapes of bad record; each goes in ten times, with a different id
    # where it has one, among valid articles.
    rng = random.Random(9)
    valid = [orjson.dumps(a) for a in synthetic_articles(1000, seed=13)]
    lines = valid + [shape for shape in bad for _ in range(10)]
    rng.shuffle(lines)
    stack.partitions = 2
    stack.create_topics()
    stack.start_worker()
    stack.produce(lines, key_by_id=False)
    ids = {orjson.loads(v)["id"] for v in valid}
    latest, _ = stack.final_links(ids, timeout=240)
    rejected = stack.read(stack.settings().topics.rejected, until=len(lines) - len(valid), timeout=120)
    assert len(rejected) == len(lines) - len(valid)
    assert all(r["reason"] and ("raw" in r or "raw_base64" in r) for r in rejected)
    assert latest.keys() == ids
    assert all(worker.process.poll() is None for worker in stack.workers)

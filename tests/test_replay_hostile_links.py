"""`dedup replay` from Kafka and the streaming relink against hostile records on `dedup.links`, and a replay
interrupted then run again. Each test is a guarantee of the README that once broke: replay "skips a record it
cannot read ... every other one is restored", is idempotent when run again and resumes without double-counting,
and links stay stars. The session's redis-server and Kafka-protocol broker (tests/conftest.py); Qdrant in
qdrant-client's local mode.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from qdrant_client import QdrantClient

from streams.core.model import DAY_S, Link, Verdict
from streams.core.relink import Cutoff
from streams.evaluation.stack import Stack
from streams.kafka.replay import KafkaReplayStats, replay_links
from streams.records.article import format_timestamp
from streams.service.relink import relink_service
from streams.stores.redis_store import RedisStateStore
from streams.vectors.qdrant_server import QdrantVectorStore
from tests.test_replay_edge_cases import T0, _link, _produce, _store

# --- helpers ---------------------------------------------------------------------------------------------


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    made = redis.Redis.from_url(redis_url, decode_responses=True)
    yield made
    made.close()


@pytest.fixture
def stack(make_stack: Callable[[str], Stack]) -> Stack:
    made = make_stack("url,content,simhash")
    made.partitions = 1
    made.create_topics()
    return made


@pytest.fixture
def vectors() -> Iterator[QdrantVectorStore]:
    store = QdrantVectorStore(QdrantClient(location=":memory:"), prefix=f"t{uuid.uuid4().hex}")
    yield store
    store.close()


def _replay(stack: Stack, client: redis.Redis, vectors: Any = None, **options: Any) -> KafkaReplayStats:
    return replay_links(stack.settings(), client, vectors, prefix=f"{stack.name}:", **options)


def _completed(client: redis.Redis, stack: Stack) -> bool:
    """Whether the replay's checkpoint is gone: until it is, every worker refuses to decide (StateLost)."""
    return not client.exists(f"{stack.name}:replay")


class _CtrlC:
    """A person pressing Ctrl-C right after the replay restored its first batch (the CLI's progress is told
    of each batch as it is restored)."""

    def __init__(self) -> None:
        self.phase = ""

    def start(self, phase: str, total: int) -> None:
        self.phase = phase

    def advance(self, count: int) -> None:
        if self.phase == "restoring state":
            raise KeyboardInterrupt


# --- one hostile record stops the whole replay, for good -------------------------------------------------


def test_a_seq_past_64_bit_signed_is_skipped_not_fatal(client: redis.Redis, stack: Stack) -> None:
    """`_sequence` took any seq of 1 or more: 2**63 reached the replay's on-disk index (`LatestLinks._fold`),
    where SQLite raised OverflowError, so the replay stopped before restoring anything, and again on every run,
    its checkpoint left for the workers to wait on for ever. A seq is now below `SEQ_LIMIT` (2**53): this one is
    reported bad and the others are restored."""
    _produce(stack, [_link("A", seq=1), _link("B", seq=2**63), _link("C", seq=3)])
    stats = _replay(stack, client)
    assert (stats.restored, len(stats.bad)) == (2, 1), stats
    assert _completed(client, stack)


@pytest.mark.parametrize("seq", [2**62, 2**63 - 1], ids=["2**62", "int64-max"])
def test_a_huge_seq_does_not_stop_every_later_verdict(client: redis.Redis, stack: Stack, seq: int) -> None:
    """A replayed link moves the verdict counter (`vseq`) to its seq. After a link with seq 2**62 the next seq
    drawn fell outside `range(top - n + 1, 1 << 62)` (`RedisStateStore._write`: KeyError); after 2**63-1
    Redis's INCRBY overflowed: one hostile record and no worker could record a verdict again. Such a seq is now
    refused as bad (no real counter gets near `SEQ_LIMIT`), and the next verdict is recorded."""
    _produce(stack, [_link("A", seq=1), _link("B", seq=seq)])
    stats = _replay(stack, client)
    assert _completed(client, stack), stats
    store = _store(client, stack)
    recorded = store.record_verdict(Link.unique("N"))  # as a worker records its next canonical
    assert recorded.seq is not None and store.verdict_of("N") is not None


def test_a_duplicate_of_a_duplicate_is_skipped_not_fatal(client: redis.Redis, stack: Stack) -> None:
    """A chain on the topic (A -> B -> C, B a duplicate): the store refused the batch with StaleSnapshot, which
    stopped the replay with its checkpoint left; every run stopped there again and the workers waited for ever.
    A link to a document that is no canonical (stored, or restored earlier or later in the batch) is now
    reported bad and the rest restored: links stay stars."""
    c = _link("C", seq=1)
    b = _link("B", seq=2, verdict="duplicate", canonical_id="C", stage="simhash", score=2)
    a = _link("A", seq=3, verdict="duplicate", canonical_id="B", stage="simhash", score=1)
    _produce(stack, [c, b, a, _link("D", seq=4)])
    stats = _replay(stack, client)
    assert (stats.restored, len(stats.bad)) == (3, 1), stats
    assert _completed(client, stack)
    store = _store(client, stack)
    assert store.verdict_of("D") is not None
    got = store.verdict_of("A")
    assert got is None or got.canonical_id != "B", got  # never a chain


def test_a_replay_that_skipped_the_newest_link_leaves_a_state_the_workers_take(
    client: redis.Redis, stack: Stack
) -> None:
    """The chain's link held the topic's newest seq and was skipped: the replay moved the verdict counter past
    the seqs it restored only, so every worker (which compares the counter with the newest seq at the end of
    `dedup.links`) took the rebuilt state for one gone back to an older snapshot and waited for ever. A
    replay now moves the counter past every seq it read, and the workers' store takes the state."""
    from functools import partial

    from streams.service.resources import recorded_seq

    c = _link("C", seq=1)
    b = _link("B", seq=2, verdict="duplicate", canonical_id="C", stage="simhash", score=2)
    a = _link("A", seq=3, verdict="duplicate", canonical_id="B", stage="simhash", score=1)
    _produce(stack, [c, b, a])
    stats = _replay(stack, client)
    assert (stats.restored, len(stats.bad)) == (2, 1), stats
    settings = stack.settings()
    worker = RedisStateStore(
        client, f"{stack.name}:", settings.redis_bucket_bits, settings.retention,
        recorded_seq=partial(recorded_seq, settings),
    )  # fmt: skip
    assert worker.verdict_of("C") is not None  # refused with StateLost ("went back") before


def test_a_duplicate_of_itself_is_not_restored(client: redis.Redis, stack: Stack) -> None:
    """ "A redelivered document ... is never linked to itself." A `duplicate` record whose canonical_id was its
    own doc_id was restored as it was (the store's chain check passes over `target == doc_id`): A became a
    duplicate of A and its group counted it twice. `read_link_record` now refuses a duplicate or review that
    names itself, and a canonical that names another: the record is reported bad."""
    _produce(stack, [_link("A", seq=1, verdict="duplicate", canonical_id="A", stage="url")])
    stats = _replay(stack, client)
    store = _store(client, stack)
    got = store.verdict_of("A")
    assert got is None or got.verdict is not Verdict.DUPLICATE, (stats, got)
    assert store.group_size("A") == 1, stats


@pytest.mark.parametrize(
    "vector",
    [[0.5] * 4, [], [[0.5, 0.5], [0.5, 0.5]]],
    ids=["other-dimension", "empty", "nested"],
)
def test_a_vector_the_store_cannot_take_is_skipped_not_fatal(
    client: redis.Redis, stack: Stack, vectors: QdrantVectorStore, vector: Any
) -> None:
    """An embedded canonical whose vector had another dimension than its model's collection, none at all, or
    was nested: `vectors.add` raised ValueError inside the batch, and the replay stopped with its checkpoint
    left, and again on every run (the workers waited for ever). `read_link_record` now takes only a non-empty
    list of finite numbers, and the restorer skips a record whose vector the store refuses: reported bad, the
    others restored."""
    first = _link("A", seq=1, model="m@1", vector=[0.5] * 8)
    odd = _link("B", seq=2, model="m@1", vector=vector)
    _produce(stack, [first, odd, _link("C", seq=3)])
    stats = _replay(stack, client, vectors)
    assert _completed(client, stack), stats
    store = _store(client, stack)
    assert store.verdict_of("A") is not None and store.verdict_of("C") is not None
    assert len(stats.bad) == 1 or store.verdict_of("B") is not None, stats


# --- a replay run again, interrupted, then resumed -------------------------------------------------------


def test_a_resumed_rerun_does_not_count_an_expired_duplicate_twice(client: redis.Redis, stack: Stack) -> None:
    """A replay run again over a state it restored leaves it as it was: a duplicate whose verdict has passed
    `verdicts_days` at the clock the replay found "was applied then, and is not restored again". That clock
    (`Restorer.found_clock`) was read only when there was no checkpoint: a re-run interrupted after its first
    batch and resumed had found_clock 0, so the expired duplicate X was restored again and C's group grew from
    2 to 3. The checkpoint now keeps the clock the first run found, and the resumed run reads it back."""
    canonical = _link("C", seq=1)
    duplicate = _link("X", seq=2, verdict="duplicate", canonical_id="C", stage="url", url_hash=canonical["url_hash"])
    later = _link("Z", seq=3, published_at=format_timestamp(T0 + 10 * DAY_S))
    _produce(stack, [canonical, duplicate, later])
    _replay(stack, client)
    assert _store(client, stack).group_size("C") == 2

    with pytest.raises(KeyboardInterrupt):  # run again, stopped after its first batch (C)
        _replay(stack, client, batch=1, progress=_CtrlC())
    assert not _completed(client, stack)
    resumed = _replay(stack, client, batch=1)  # "run again after Ctrl-C to resume"
    assert _completed(client, stack)
    assert (_store(client, stack).group_size("C"), resumed.restored) == (2, 0), resumed


# --- the streaming relink and the records the replay skips -----------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [{"doc_id": ["x"], "canonical_id": ["x"]}, {"verdict": "bogus"}, {"verdict": None}],
    ids=["doc-id-a-list", "unknown-verdict", "verdict-null"],
)
def test_the_service_relink_skips_a_record_the_replay_skips(
    client: redis.Redis, stack: Stack, bad: dict[str, Any]
) -> None:
    """`dedup replay` reports such a record and restores the rest; `dedup relink` (service) read the same topic
    without checking it (`latest_links`, `_Planner`): a list doc_id was a TypeError traceback, an unknown
    verdict a ValueError that refused the whole relink, and one bad record stays on a compacted topic, so no
    relink could ever be made. `latest_links` now reads each record as the replay does and skips (and logs)
    what it skips: the relink plans from the rest (here: A refused, it has no article)."""
    c = _link("C", seq=1)
    a = _link("A", seq=2, verdict="duplicate", canonical_id="C", stage="semantic", score=0.9, model="m@1")
    _produce(stack, [c, a, {**_link("B", seq=3), **bad}])
    stats = _replay(stack, client)
    assert (stats.restored, len(stats.bad)) == (2, 1), stats  # the replay copes
    result = relink_service(stack.settings(), cutoff=Cutoff(0.95, "same"))
    assert [r.doc_id for r in result.plan.refused] == ["A"], result.plan


@pytest.mark.parametrize(
    "previous",
    [{"verdict": "bogus", "canonical_id": "C"}, {"verdict": "duplicate"}],
    ids=["unknown-verdict", "no-canonical"],
)
def test_a_garbled_previous_verdict_does_not_refuse_every_relink(
    client: redis.Redis, stack: Stack, previous: dict[str, Any]
) -> None:
    """A relink's record says which verdict it replaced (`previous`); the replay never reads it, so a record with
    a garbled one was restored, and then every `dedup relink` planning from the topic raised on it (a KeyError
    or ValueError), for good on a compacted topic. A `previous` that cannot be read is now taken as unknown:
    the relink plans from the rest."""
    c = _link("C", seq=1)
    a = _link("A", seq=2, verdict="duplicate", canonical_id="C", stage="semantic", score=0.9, model="m@1")
    b = _link("B", seq=3, verdict="unlinked", decided_by="threshold", reason="below the cut-off", previous=previous)
    _produce(stack, [c, a, b])
    stats = _replay(stack, client)
    assert (stats.restored, len(stats.bad)) == (3, 0), stats
    result = relink_service(stack.settings(), cutoff=Cutoff(0.95, "same"))
    assert [r.doc_id for r in result.plan.refused] == ["A"], result.plan

"""`dedup replay` and `dedup publish` against ordinary faults in the middle of the command.

A broker restarted (noida-db keeps its data on SIGTERM), Redis restarted on its append-only file, the command
stopped (Ctrl-C, SIGKILL) where a real run can stop: each must end in the state one uninterrupted run leaves,
or in a one-line error after which the same command completes it. The reference is always a clean replay of
the same topic into another prefix (or the records published once). Faults land where a hook (a progress bar,
a wrapped method) says, so each test stops the command at the point it is about.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import qdrant_edge as qe
import redis
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

import streams.kafka.journal as journal
from benchmarks.replay_speed import keys, link_records, produce
from streams.config import Settings
from streams.evaluation.services import LocalKafka, LocalRedis
from streams.evaluation.stack import Stack
from streams.kafka.replay import Restorer, replay_links
from streams.stores.redis_store import RedisStateStore
from tests.test_replay_scale import _by_meaning

DAY = 86_400
EPOCH = 1_793_491_200
"""2026-11-01T00:00:00Z."""
Records = list[tuple[str, dict[str, Any]]]


def _iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def _link(n: int, day: int, **extra: Any) -> tuple[str, dict[str, Any]]:
    """A canonical's link record, published on `day` after EPOCH, decided in the order of `n`."""
    doc_id = f"doc-{n:04d}"
    record: dict[str, Any] = {
        "doc_id": doc_id, "verdict": "unique", "canonical_id": doc_id, "stage": None, "score": None,
        "linked_at": _iso(EPOCH + 40 * DAY + n), "model": None, "url_hash": f"{n:064x}",
        "content_hash": f"{n + 10_000:064x}", "simhash": f"{(n * 0x9E3779B97F4A7C15) % (1 << 64):016x}",
        "language": "en", "published_at": _iso(EPOCH + day * DAY + n),
    }  # fmt: skip
    return doc_id, record | extra


def _duplicate(n: int, of: dict[str, Any], **extra: Any) -> tuple[str, dict[str, Any]]:
    """A URL duplicate of `of`, published the same day."""
    doc_id, record = _link(n, 0)
    record |= {"verdict": "duplicate", "canonical_id": of["doc_id"], "stage": "url", "url_hash": of["url_hash"]}
    record |= {"published_at": of["published_at"], **extra}
    return doc_id, record


def _produce(bootstrap: str, topic: str, records: Iterable[tuple[str, dict[str, Any]]]) -> None:
    """One record a batch: a reader then fetches them a few at a time (`SMALL_FETCHES`), not all at once."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for doc_id, record in records:
        while True:
            try:
                producer.produce(topic, orjson.dumps(record), doc_id.encode())
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    producer.produce(topic, b"{not json", b"broken")  # one unreadable record: reported, never fatal
    assert producer.flush(60) == 0


def _state(client: redis.Redis, prefix: str) -> dict[str, Any]:
    """Every key under `prefix` (the lease and the sweep's cursor and oldest stamps aside: `keys`), the clock too."""
    return keys(client, prefix, ignore=("sweep", "oldest"))


@pytest.fixture
def stack(make_stack: Callable[[str], Stack]) -> Stack:
    made = make_stack("url,content,simhash")
    made.partitions = 2
    made.create_topics()
    return made


@pytest.fixture
def client(stack: Stack) -> Iterator[redis.Redis]:
    made = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    yield made
    made.close()


def _clean(settings: Settings, client: redis.Redis, prefix: str, batch: int) -> dict[str, Any]:
    """The state an uninterrupted replay of the topic leaves in a prefix of its own."""
    replay_links(settings, client, None, prefix=prefix, batch=batch)
    return _state(client, prefix)


class _Killed(BaseException):
    """The process ended here (SIGKILL, the host lost): nothing after it runs, not even a checkpoint."""


# --- the checkpoint: where an interrupted replay resumes, and what it judges by -------------------------


def _backfill() -> Records:
    """Records written before links carried `seq` and the clock (restored first, by `linked_at`), from a
    backfill that went through an archive newest first: the first batch moves the replay's clock a month on,
    and the documents after it are older than `verdicts_days` at that clock. C has a duplicate D."""
    newest = [_link(n, 30) for n in range(4)]
    _, canonical = older = _link(4, 1)
    return [*newest, older, _duplicate(5, canonical), _link(6, 2)]


def test_a_replay_stopped_between_its_first_batch_and_checkpoint_resumes_as_the_first_run_would(
    stack: Stack, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first batch is written, then the process dies before its checkpoint (the checkpoint write is a
    second round trip: a kill, a Redis restart, a Ctrl-C land there). Run again, the replay judged what the
    state took in before it began by the clock the first batch had moved, not by the clock the first run
    found: every older link counted as applied before and skipped, so the documents after the first batch
    were never restored (no verdict, no exact keys, C's group one short)."""
    settings = stack.settings()
    _produce(stack.bootstrap, settings.topics.links, _backfill())
    expected = _clean(settings, client, f"{stack.name}-clean:", batch=4)
    assert any(name.startswith("g:") for name in expected), "C's group is restored"

    prefix = f"{stack.name}:"
    real = Restorer.restore

    def dies_before_checkpoint(self: Restorer, batch: list[Any], last: Any = None) -> list[bool | str]:
        self._restore(batch)
        raise _Killed

    monkeypatch.setattr(Restorer, "restore", dies_before_checkpoint)
    with pytest.raises(_Killed):
        replay_links(settings, client, None, prefix=prefix, batch=4)
    assert client.get(f"{prefix}replay") == "begun"
    monkeypatch.setattr(Restorer, "restore", real)
    stats = replay_links(settings, client, None, prefix=prefix, batch=4)
    assert stats.restored + stats.already_there == 7, stats
    assert _state(client, prefix) == expected


# --- the broker restarted while the replay reads the topic ----------------------------------------------


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LocalKafka]:
    server = LocalKafka(tmp_path / "kafka")
    server.start()
    yield server
    server.stop()


def _restart(broker: LocalKafka) -> None:
    """SIGTERM (noida-db keeps its data only on a graceful stop), then the same data dir and port again."""
    broker.stop()
    broker.start()


class _Hook:
    """A progress bar that runs `fault` once, when the phase named `phase` has advanced `after` records (0: as
    it starts, with its total known: for the reading phase, once the end offsets are read and before a record)."""

    def __init__(self, phase: str, fault: Callable[[], None], after: int = 1) -> None:
        self._phase, self._fault, self._after = phase, fault, after
        self.phase = ""
        self.seen = 0
        self.after_fault = 0
        """Records the phase advanced by once the fault ran."""
        self.fired = False

    def start(self, phase: str, total: int) -> None:
        self.phase = phase
        if self._after == 0:
            self.advance(0)

    def advance(self, count: int) -> None:
        if not self.phase.startswith(self._phase):
            return
        if self.fired:
            self.after_fault += count
            return
        self.seen += count
        if self.seen >= self._after:
            self.fired = True
            self._fault()


SMALL_FETCHES = (
    '{"fetch.max.bytes": "20000", "message.max.bytes": "20000", "max.partition.fetch.bytes": "20000",'
    ' "queued.max.messages.kbytes": "20"}'
)
"""The reader holds a few dozen records ahead, so a restart in the middle of the read is one it must live through."""


def test_a_broker_restarted_while_the_replay_reads_the_topic(
    broker: LocalKafka, redis_url: str, tmp_path: Path
) -> None:
    """Restarted once the first thousand records are read: the replay either reads on to the end offsets it
    saw (and the state is the clean replay's), or stops in one line (RuntimeError) and the same replay run
    again completes it; never a KafkaException (a traceback), never a hang."""
    stack = Stack(broker.bootstrap, redis_url, tmp_path / "stack", partitions=3)
    stack.folder.mkdir()
    stack.extra_env["DEDUP_KAFKA_CONFIG"] = SMALL_FETCHES
    stack.create_topics()
    settings = stack.settings()
    _produce(broker.bootstrap, settings.topics.links, link_records(3_000, seed=3))
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    expected = _clean(settings, client, f"{stack.name}-clean:", batch=200)

    hook = _Hook("reading", lambda: _restart(broker), after=0)
    prefix = f"{stack.name}:"
    try:
        stats = replay_links(settings, client, None, hook, prefix=prefix, batch=200)
    except RuntimeError as exc:
        assert "\n" not in str(exc), exc
        stats = replay_links(settings, client, None, prefix=prefix, batch=200)
    assert hook.fired and hook.after_fault >= 3_000
    assert (stats.documents, len(stats.bad)) == (3_000, 1), stats
    assert _state(client, prefix) == expected
    client.close()


def test_a_broker_gone_while_the_replay_reads_the_topic_stops_it_in_one_line(
    broker: LocalKafka, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker stops once the replay has its end offsets and before a record came, and does not come back:
    the replay must stop with a one-line error (as publish does within 30 s), not poll for ever, holding its
    checkpoint ("begun": the workers wait for it) and its lease (renewed: every other replay refuses)."""
    stack = Stack(broker.bootstrap, redis_url, tmp_path / "stack", partitions=3)
    stack.folder.mkdir()
    stack.create_topics()
    settings = stack.settings()
    _produce(broker.bootstrap, settings.topics.links, link_records(200, seed=4))
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    monkeypatch.setattr(journal, "TIMEOUT_S", 3.0)  # the wait before it is said (30 s live), shortened here
    outcome: list[BaseException | None] = []

    def replay() -> None:
        try:
            replay_links(settings, client, None, _Hook("reading", broker.stop, after=0), prefix=f"{stack.name}:")
            outcome.append(None)
        except BaseException as exc:  # told to the test thread
            outcome.append(exc)

    thread = threading.Thread(target=replay, daemon=True)
    thread.start()
    thread.join(timeout=90)
    assert not thread.is_alive(), "the replay still polls a broker gone 90 s ago"
    assert isinstance(outcome[0], RuntimeError) and "\n" not in str(outcome[0]), outcome
    assert "broker" in str(outcome[0]), outcome
    broker.start()
    stats = replay_links(settings, client, None, prefix=f"{stack.name}:")  # run again, it completes
    assert (stats.documents, stats.restored) == (200, 200), stats
    client.close()


# --- the broker restarted while `dedup publish` sends ---------------------------------------------------


def _publish_env(stack: Stack) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEDUP_")}
    return {**env, **stack.env(), "COLUMNS": "200"}


def _articles(path: Path, count: int) -> list[str]:
    """`count` raw articles, one a line; their ids."""
    ids = [f"a{i:07d}" for i in range(count)]
    with path.open("wb") as handle:
        for doc_id in ids:
            line = {"id": doc_id, "url": f"https://example.com/{doc_id}", "body": f"text of {doc_id}, " * 8}
            handle.write(orjson.dumps(line) + b"\n")
    return ids


def _ids_on(bootstrap: str, topic: str, expected: int, timeout: float = 60) -> list[str]:
    """The keys of every record of `topic` (all of them: duplicates kept), once `expected` arrived or time is up."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        found: list[str] = []
        deadline = time.monotonic() + timeout
        quiet = time.monotonic()
        while time.monotonic() < deadline and (len(found) < expected or time.monotonic() - quiet < 3):
            for message in consumer.consume(1000, timeout=0.5):
                if message.error() is None:
                    found.append((message.key() or b"").decode())
                    quiet = time.monotonic()
        return found
    finally:
        consumer.close()


def _landed(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in partitions)
    finally:
        consumer.close()


def test_a_broker_restarted_mid_publish_leaves_every_line_on_the_topic(broker: LocalKafka, tmp_path: Path) -> None:
    """The broker is restarted (SIGTERM, then the same data and port) while publish sends: publish either
    completes or stops in one line (exit code 2) that says to run it again; run again, every line is on the
    raw topic. noida-db forgets the idempotent producer's sequence numbers across a restart, so librdkafka
    stops the producer with a fatal error (a Kafka broker keeps them: publish would complete there).
    Duplicates are allowed (the README promises at-least-once delivery, and the workers take a redelivered
    document as the same document), lost lines are not."""
    stack = Stack(broker.bootstrap, "redis://127.0.0.1:1/0", tmp_path / "stack", partitions=3)
    stack.folder.mkdir()
    stack.create_topics()
    settings = stack.settings()
    source = tmp_path / "articles.jsonl"
    ids = _articles(source, 200_000)
    command = [sys.executable, "-m", "streams", "publish", "-q", str(source)]
    process = subprocess.Popen(command, env=_publish_env(stack), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while process.poll() is None and _landed(broker.bootstrap, settings.topics.raw) == 0:
            assert time.monotonic() < deadline, "nothing landed in 60 s"
            time.sleep(0.05)
        assert process.poll() is None, "publish ended before the broker restarted: make the input larger"
        _restart(broker)
        _, errors = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stderr = errors.decode()
    runs = 1
    if process.returncode != 0:
        assert process.returncode == 2 and stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
        # What stopped it and what to do: not a line of the input blamed for a producer the broker refused.
        assert "broker" in stderr and "dedup publish` again" in stderr, stderr
        again = subprocess.run(command, env=_publish_env(stack), capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr
        runs = 2
    found = _ids_on(broker.bootstrap, settings.topics.raw, len(ids))
    missing = set(ids) - set(found)
    assert not missing, f"{len(missing)} lines never reached the topic (e.g. {sorted(missing)[:3]}); {stderr}"
    print(f"publish runs: {runs}; {len(found) - len(ids)} duplicates; first run: {process.returncode} {stderr!r}")


# --- Redis restarted (on its append-only file) while the replay restores --------------------------------


@pytest.fixture
def aof_redis(tmp_path: Path) -> Iterator[LocalRedis]:
    server = LocalRedis(tmp_path / "redis", appendonly=True)
    server.start()
    yield server
    server.stop()


def _restart_redis(server: LocalRedis) -> None:
    """SIGTERM (Redis writes its append-only file out), then the same port and folder again."""
    server.stop()
    server.start()


@pytest.mark.parametrize("at_batch", [1, 4])
def test_redis_restarted_between_two_batches_leaves_the_clean_replays_state(
    stack: Stack, aof_redis: LocalRedis, at_batch: int
) -> None:
    """Redis restarts while the replay holds its lease, between two batches: the client reconnects (or the
    replay stops in one line and is run again), and the state is the clean replay's key for key."""
    stack.redis_url = aof_redis.url
    settings = stack.settings()
    produce(stack.bootstrap, settings.topics.links, link_records(1_500, seed=5))
    client = redis.Redis.from_url(aof_redis.url, decode_responses=True)
    expected = _clean(settings, client, f"{stack.name}-clean:", batch=100)
    prefix = f"{stack.name}:"
    hook = _Hook("restoring", lambda: _restart_redis(aof_redis), after=100 * at_batch)
    try:
        replay_links(settings, client, None, hook, prefix=prefix, batch=100)
    except RuntimeError as exc:
        assert "\n" not in str(exc), exc
        replay_links(settings, client, None, prefix=prefix, batch=100)
    assert hook.fired
    assert not client.exists(f"{prefix}replay")
    assert _state(client, prefix) == expected
    client.close()


def test_redis_down_mid_replay_stops_it_in_one_line_and_the_rerun_completes(
    stack: Stack, aof_redis: LocalRedis
) -> None:
    """Redis stops (SIGTERM) after the third batch and stays down past the client's retries: the replay
    stops with one line; Redis started again on its append-only file, the same replay resumes after its
    checkpoint and leaves the clean replay's state (group sizes included)."""
    stack.redis_url = aof_redis.url
    settings = stack.settings()
    produce(stack.bootstrap, settings.topics.links, link_records(1_500, seed=6))
    client = redis.Redis.from_url(aof_redis.url, decode_responses=True)
    expected = _clean(settings, client, f"{stack.name}-clean:", batch=100)
    prefix = f"{stack.name}:"
    with pytest.raises(RuntimeError) as stopped:
        replay_links(settings, client, None, _Hook("restoring", aof_redis.stop, after=300), prefix=prefix, batch=100)
    assert "\n" not in str(stopped.value) and "Redis" in str(stopped.value), stopped.value
    aof_redis.start()
    assert client.get(f"{prefix}replay") not in (None, "begun"), "stopped after a checkpoint"
    stats = replay_links(settings, client, None, prefix=prefix, batch=100)
    assert stats.resumed >= 300, stats
    assert not client.exists(f"{prefix}replay")
    assert _state(client, prefix) == expected
    client.close()


# --- `dedup replay` stopped by Ctrl-C or SIGKILL anywhere, then run again -------------------------------


def _cli_replay(stack: Stack, prefix: str, batch: int) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, **stack.env(), "DEDUP_REDIS_PREFIX": prefix, "COLUMNS": "200"}
    return [sys.executable, "-m", "streams", "replay", "--batch", str(batch)], env


@pytest.mark.parametrize("seed", [11, 12])
def test_a_replay_stopped_again_and_again_at_random_points_ends_in_the_clean_state(
    stack: Stack, client: redis.Redis, seed: int
) -> None:
    """`dedup replay` is sent SIGINT, SIGKILL or SIGTERM at a random moment (reading the topic, restoring,
    sweeping at the end), four times, then run to completion: the state is a clean replay's (sequence numbers
    compared by rank: a kill after drawing a batch's numbers leaves a gap), group sizes included; each Ctrl-C or
    SIGTERM ends in one line and exit code 130 or 143, never a traceback. Run once more, it changes nothing."""
    settings = stack.settings()
    produce(stack.bootstrap, settings.topics.links, link_records(3_000, seed=seed))
    command, env = _cli_replay(stack, f"{stack.name}-clean:", batch=20)
    started = time.monotonic()
    subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=True)
    took = time.monotonic() - started
    expected = _state(client, f"{stack.name}-clean:")
    command, env = _cli_replay(stack, f"{stack.name}:", batch=20)
    rng = random.Random(seed)
    stops = []
    for sig in (signal.SIGINT, signal.SIGKILL, signal.SIGTERM, signal.SIGKILL):
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        delay = rng.uniform(0.2, took)
        time.sleep(delay)
        process.send_signal(sig)
        _, errors = process.communicate(timeout=120)
        stderr = errors.decode()
        stops.append((sig.name, round(delay, 2), process.returncode, client.get(f"{stack.name}:replay")))
        assert "Traceback" not in stderr, stderr
        if sig is not signal.SIGKILL and process.returncode != 0 and "replayed" not in stderr:  # not after its summary
            assert process.returncode == 128 + sig and "interrupted" in stderr, (process.returncode, stderr)
            assert stderr.count("\n") == 1, stderr
        if sig is signal.SIGKILL:  # its lease is left to expire: the next run waits it out
            time.sleep(settings.worker.lock_ttl_s)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not client.exists(f"{stack.name}:replay", f"{{{stack.name}:replay}}:clock")  # its marks are gone
    rebuilt = _state(client, f"{stack.name}:")
    assert _by_meaning(rebuilt) == _by_meaning(expected), stops
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)  # changes nothing
    assert again.returncode == 0 and " 0 restored, 3000 already there" in " ".join(again.stderr.split()), again.stderr
    assert _state(client, f"{stack.name}:") == rebuilt


def test_a_fresh_replay_stopped_while_it_clears_is_completed_by_the_next_replay(
    stack: Stack, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dedup replay --fresh` is stopped (Ctrl-C) after its clear deleted the verdicts and before it deleted
    the group sizes (the clear goes family by family). Run again as `dedup replay` (the README: run again
    after Ctrl-C to resume), the replay must not restore over what the clear left: every duplicate, its
    verdict gone, was restored again and grew its canonical's group a second time."""
    settings = stack.settings()
    produce(stack.bootstrap, settings.topics.links, link_records(600, seed=7))
    expected = _clean(settings, client, f"{stack.name}-clean:", batch=50)
    prefix = f"{stack.name}:"
    replay_links(settings, client, None, prefix=prefix, batch=50)
    assert _state(client, prefix) == expected

    def stopped_after_the_verdicts(self: RedisStateStore) -> int:
        verdicts = list(client.scan_iter(match=f"{prefix}v:*"))
        client.delete(*verdicts)
        raise KeyboardInterrupt

    real = RedisStateStore.clear
    monkeypatch.setattr(RedisStateStore, "clear", stopped_after_the_verdicts)
    with pytest.raises(KeyboardInterrupt):
        replay_links(settings, client, None, prefix=prefix, batch=50, fresh=True)
    monkeypatch.setattr(RedisStateStore, "clear", real)
    replay_links(settings, client, None, prefix=prefix, batch=50)
    assert _by_meaning(_state(client, prefix)) == _by_meaning(expected)


def test_a_redis_that_fills_up_mid_replay_stops_it_in_one_line_and_the_rerun_completes(
    stack: Stack, aof_redis: LocalRedis
) -> None:
    """Redis reaches its `maxmemory` (noeviction, as deployed) after the second batch: it refuses writes with
    an OOM error, which the replay must say in one line (RuntimeError), not end in a redis-py traceback; with
    room again, the same replay resumes and leaves the clean replay's state."""
    stack.redis_url = aof_redis.url
    settings = stack.settings()
    produce(stack.bootstrap, settings.topics.links, link_records(1_000, seed=8))
    client = redis.Redis.from_url(aof_redis.url, decode_responses=True)
    expected = _clean(settings, client, f"{stack.name}-clean:", batch=100)
    prefix = f"{stack.name}:"

    def full() -> None:
        client.config_set("maxmemory", str(int(client.info("memory")["used_memory"]) // 2))

    with pytest.raises(RuntimeError) as stopped:
        replay_links(settings, client, None, _Hook("restoring", full, after=200), prefix=prefix, batch=100)
    assert "\n" not in str(stopped.value) and "Redis" in str(stopped.value), stopped.value
    client.config_set("maxmemory", "0")
    stats = replay_links(settings, client, None, prefix=prefix, batch=100)
    assert stats.resumed >= 200, stats
    assert not client.exists(f"{prefix}replay")
    assert _by_meaning(_state(client, prefix)) == _by_meaning(expected)
    client.close()


def test_a_broker_gone_as_the_replay_asks_for_its_end_offsets_stops_it_in_one_line(
    broker: LocalKafka, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker stops between the replay reaching it and reading the topic's end offsets (a restart at the
    command's start): librdkafka's timeout there is a KafkaException, which the CLI shows as a traceback; the
    replay must say it in one line (RuntimeError), and complete when run again."""
    stack = Stack(broker.bootstrap, redis_url, tmp_path / "stack", partitions=3)
    stack.folder.mkdir()
    stack.create_topics()
    settings = stack.settings()
    _produce(broker.bootstrap, settings.topics.links, link_records(100, seed=9))
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    monkeypatch.setattr(journal, "TIMEOUT_S", 3.0)  # librdkafka's wait for the offsets (30 s live), shortened here
    real = journal.end_offsets

    def after_a_stop(consumer: Consumer, topic: str) -> list[TopicPartition]:
        broker.stop()
        return real(consumer, topic)

    monkeypatch.setattr(journal, "end_offsets", after_a_stop)
    with pytest.raises(RuntimeError) as stopped:
        replay_links(settings, client, None, prefix=f"{stack.name}:")
    assert "\n" not in str(stopped.value) and "broker" in str(stopped.value), stopped.value
    monkeypatch.setattr(journal, "end_offsets", real)
    broker.start()
    stats = replay_links(settings, client, None, prefix=f"{stack.name}:")
    assert (stats.documents, stats.restored) == (100, 100), stats
    client.close()


def _vectors(folder: Path) -> dict[str, dict[str, Any]]:
    """Every vector of the embedded store in `folder`, by shard and point: its values (rounded) and payload."""
    found: dict[str, dict[str, Any]] = {}
    for shard_folder in sorted(folder.iterdir()) if folder.is_dir() else []:
        shard = qe.EdgeShard.load(str(shard_folder))
        try:
            records, _ = shard.scroll(qe.ScrollRequest(limit=100_000, with_payload=True, with_vector=True))
            found[shard_folder.name] = {
                str(r.id): ([round(float(v), 5) for v in r.vector], dict(r.payload or {})) for r in records
            }
        finally:
            shard.close()
    return found


def test_a_replay_with_vectors_killed_at_random_points_ends_with_the_clean_replays_vectors(
    stack: Stack, client: redis.Redis, tmp_path: Path
) -> None:
    """Canonicals carry vectors (the embedded store, `DEDUP_QDRANT_URL=embedded`): a replay SIGKILLed while it
    writes them (a vector goes in before its batch's Redis writes), then run again, leaves the vectors and the
    Redis state a clean replay leaves, and its store opens (no shard left locked or half written)."""
    settings = stack.settings()
    produce(stack.bootstrap, settings.topics.links, link_records(1_500, seed=21, dim=8))
    command, env = _cli_replay(stack, f"{stack.name}-clean:", batch=20)
    env["DEDUP_STATE_DIR"] = str(tmp_path / "clean")
    started = time.monotonic()
    subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=True)
    took = time.monotonic() - started
    expected = _state(client, f"{stack.name}-clean:")
    command, env = _cli_replay(stack, f"{stack.name}:", batch=20)
    env["DEDUP_STATE_DIR"] = str(tmp_path / "killed")
    rng = random.Random(21)
    for _ in range(3):
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3 * took, 0.9 * took))
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        time.sleep(settings.worker.lock_ttl_s)  # its lease expires
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _by_meaning(_state(client, f"{stack.name}:")) == _by_meaning(expected)
    vectors = _vectors(tmp_path / "clean" / "vectors")
    assert sum(map(len, vectors.values())) > 500, "the canonicals' vectors are restored"
    assert _vectors(tmp_path / "killed" / "vectors") == vectors


def test_publish_interrupted_says_what_was_sent_and_that_it_starts_again(broker: LocalKafka, tmp_path: Path) -> None:
    """Ctrl-C while publish sends: it ends in one line, exit code 130, and says what a re-run does (sends every
    line again from the top), not the files commands' "saved up to the last document decided ... to resume",
    which is untrue of publish (the lines still queued are dropped, and nothing records where it stopped)."""
    stack = Stack(broker.bootstrap, "redis://127.0.0.1:1/0", tmp_path / "stack", partitions=3)
    stack.folder.mkdir()
    stack.create_topics()
    source = tmp_path / "articles.jsonl"
    _articles(source, 200_000)
    command = [sys.executable, "-m", "streams", "publish", "-q", str(source)]
    process = subprocess.Popen(command, env=_publish_env(stack), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while process.poll() is None and _landed(broker.bootstrap, stack.settings().topics.raw) == 0:
            assert time.monotonic() < deadline, "nothing landed in 60 s"
            time.sleep(0.05)
        assert process.poll() is None, "publish ended before it was interrupted: make the input larger"
        process.send_signal(signal.SIGINT)
        _, errors = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stderr = errors.decode()
    assert process.returncode == 130 and stderr.count("\n") == 1 and "Traceback" not in stderr, stderr[-600:]
    assert "resume" not in stderr and "dedup publish` again" in stderr, stderr

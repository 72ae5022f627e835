"""`dedup replay` at scale: batched, resumable after a kill, in memory that does not grow with the input.

The links are generated (`benchmarks/replay_speed.py` `link_records`): canonicals, duplicates of every
stage, re-sends without the vector, relinks, old records without `seq`, sent out of decision order
over three partitions, and one unreadable record. The reference state is what restoring one link at a
time in decision order gives (the replay before batching, which tests/test_streaming_guarantees.py
checks against live workers), with the clock moved as the workers move it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

import streams.kafka.replay as kafka_replay
import streams.runner.replay as file_replay
from benchmarks.replay_speed import keys, link_records, produce
from streams.config import Settings
from streams.core.replay import restore
from streams.evaluation.services import freeze
from streams.evaluation.stack import Stack
from streams.kafka.replay import read_links, replay_links
from streams.records.output import read_link_record
from streams.runner.replay import replay_files
from streams.stores.redis_store import RedisStateStore

LINKS = 3_000
Records = list[tuple[str, dict[str, Any]]]


@pytest.fixture
def stack(make_stack: Callable[[str], Stack]) -> Stack:
    made = make_stack("url,content,simhash")
    made.partitions = 3
    made.create_topics()
    return made


def _publish(stack: Stack, count: int, dim: int = 0) -> Records:
    records = list(link_records(count, seed=count, dim=dim))
    produce(stack.bootstrap, stack.settings().topics.links, iter(records))
    return records


def _reference(records: Records, client: redis.Redis, prefix: str, settings: Settings) -> dict[str, Any]:
    """Each document's latest record restored one at a time, in decision order, the clock moved with it."""
    latest: dict[str, tuple[tuple[bool, int, str], dict[str, Any]]] = {}
    for doc_id, record in records:
        order = ("seq" in record, record.get("seq", 0), record["linked_at"])
        if doc_id not in latest or latest[doc_id][0] < order:
            latest[doc_id] = (order, record)
    state = RedisStateStore(client, prefix, retention=settings.retention)
    for _, record in sorted(latest.values(), key=lambda entry: entry[0]):
        recorded = read_link_record(record)
        restore(recorded, state, None, settings.retention)
        state.advance(recorded.published_at)
    return _state(client, prefix)


def _state(client: redis.Redis, prefix: str) -> dict[str, Any]:
    """Every key and value under `prefix` but the lease and the sweep's cursor and oldest stamps: the reference
    never sweeps, the replay completes a pass (which finds nothing to remove: these links span less than a day)."""
    return keys(client, prefix, ignore=("sweep", "oldest"))


def _by_meaning(state: dict[str, Any]) -> dict[str, Any]:
    """`_state` with every sequence number replaced by its rank. A SIGKILL between drawing a batch's seqs
    (INCRBY) and recording them leaves a gap in the counters that the resumed replay draws past: the order,
    which is all a seq says (first seen, decided), is the same; the numbers are not."""
    hashes = {name: value for name, value in state.items() if isinstance(value, dict)}
    entries = {int(seq): entry for name, h in hashes.items() if name.startswith("s:") for seq, entry in h.items()}
    verdicts = {(name, doc): value for name, h in hashes.items() if name.startswith("v:") for doc, value in h.items()}
    canonical_rank = {seq: rank for rank, seq in enumerate(sorted(entries))}
    verdict_seq = {place: int(value.partition(" ")[0][4:]) for place, value in verdicts.items()}
    verdict_rank = {seq: rank for rank, seq in enumerate(sorted(verdict_seq.values()))}
    meaning: dict[str, Any] = {name: value for name, value in state.items() if name not in ("seq", "vseq")}
    for name, h in hashes.items():
        if name.startswith("s:"):
            del meaning[name]
        elif name.startswith("c:"):
            meaning[name] = {doc: canonical_rank[int(seq)] for doc, seq in h.items()}
        elif name.startswith("b:"):
            meaning[name] = {v: sorted(canonical_rank[int(seq)] for seq in seqs.split()) for v, seqs in h.items()}
        elif name.startswith("v:"):
            meaning[name] = {
                doc: (value[:4], verdict_rank[verdict_seq[name, doc]], value.partition(" ")[2])
                for doc, value in h.items()
            }
    meaning["s"] = {canonical_rank[seq]: entry for seq, entry in entries.items()}
    return meaning


def _published(stack: Stack) -> tuple[redis.Redis, dict[str, Any]]:
    """`LINKS` documents' links on the stack's topic; a client, and the state restoring them one at a time leaves."""
    records = _publish(stack, LINKS)
    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    return client, _reference(records, client, f"{stack.name}-reference:", stack.settings())


def _replay(stack: Stack, batch: int) -> tuple[list[str], dict[str, str]]:
    """`dedup replay --batch N` on the stack: the command and its environment."""
    return [sys.executable, "-m", "streams", "replay", "--batch", str(batch)], {**os.environ, **stack.env()}


@contextmanager
def _background(command: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """`command` running while the block runs (stderr piped); killed, continued first, if still running after."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()


def _started(client: redis.Redis, checkpoint: str, replay: subprocess.Popen[bytes]) -> None:
    """Wait until `replay` has restored a batch or more (its checkpoint, set to "begun" before the first write,
    then to the last link of each batch restored)."""
    deadline = time.monotonic() + 120
    while client.get(checkpoint) in (None, "begun") and replay.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert replay.poll() is None and client.get(checkpoint) not in (None, "begun"), "the replay did not get under way"


def test_a_batched_replay_gives_the_state_of_one_link_at_a_time(stack: Stack) -> None:
    records = _publish(stack, LINKS)
    settings = stack.settings()
    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    expected = _reference(records, client, f"{stack.name}-reference:", settings)

    stats = replay_links(settings, client, None, prefix=f"{stack.name}:", batch=128)
    assert (stats.read, stats.documents, stats.restored, len(stats.bad)) == (len(records) + 1, LINKS, LINKS, 1)
    assert "JSONDecodeError" in stats.bad[0]
    assert _state(client, f"{stack.name}:") == expected
    again = replay_links(settings, client, None, prefix=f"{stack.name}:", batch=128)  # idempotent
    assert (again.restored, again.already_there, again.resumed) == (0, LINKS, 0)
    assert _state(client, f"{stack.name}:") == expected
    client.close()


def test_a_killed_replay_run_again_resumes_and_ends_in_the_same_state(stack: Stack) -> None:
    client, expected = _published(stack)
    checkpoint = f"{stack.name}:replay"
    command, env = _replay(stack, batch=20)

    with _background(command, env) as replay:
        _started(client, checkpoint, replay)
        replay.send_signal(signal.SIGKILL)
        replay.wait(timeout=30)
    assert client.exists(checkpoint), "the replay was not stopped part of the way through"
    part = _state(client, f"{stack.name}:")
    assert any(name.startswith("v:") for name in part) and part != expected

    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=True)
    report = " ".join(done.stderr.split())
    counts = re.search(r"(\d+) restored, (\d+) already there, 1 unreadable; resumed after (\d+)", report)
    assert counts is not None, report
    restored, already, resumed = map(int, counts.groups())
    assert 0 < resumed < LINKS and restored + already == LINKS - resumed, report
    assert already <= 20, report  # at most the batch whose checkpoint the kill prevented
    assert not client.exists(checkpoint)  # done: a later replay checks every link again
    assert _by_meaning(_state(client, f"{stack.name}:")) == _by_meaning(expected)
    client.close()


def _peak_bytes(settings: Settings) -> int:
    """The most memory Python held while reading the topic and going through it in decision order."""
    tracemalloc.start()
    try:
        latest = read_links(settings, kafka_replay.KafkaReplayStats())
        try:
            for _ in latest.ordered():
                pass
        finally:
            latest.close()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_topic(
    stack: Stack, make_stack: Callable[[str], Stack], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records with vectors; the index holds one chunk of them in memory at a time, whatever the topic holds."""
    large = make_stack("url,content,simhash")
    large.create_topics()
    _publish(stack, 1_000, dim=128)
    _publish(large, 2_000, dim=128)
    monkeypatch.setattr(kafka_replay, "CHUNK", 250)
    at_n, at_2n = _peak_bytes(stack.settings()), _peak_bytes(large.settings())
    assert at_2n < 1.25 * at_n, (at_n, at_2n)


def _file_peak_bytes(links: Path, state: Path) -> int:
    tracemalloc.start()
    try:
        replay_files([str(links)], state)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_file_replay_memory_does_not_grow_with_the_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What waits for a commit is bounded by a count, not only by time (a fast host reads many links a second)."""
    monkeypatch.setattr(file_replay, "COMMIT_SECONDS", 1e9)
    monkeypatch.setattr(file_replay, "COMMIT_LINKS", 500)
    peaks = []
    for count in (2_000, 4_000):
        links = tmp_path / f"links{count}.jsonl"
        links.write_bytes(b"".join(orjson.dumps(record) + b"\n" for _, record in link_records(count, dim=32)))
        peaks.append(_file_peak_bytes(links, tmp_path / f"state{count}"))
    assert peaks[1] < 1.25 * peaks[0], peaks


class _StopAfterFirstBatch:
    """A progress bar that stops the replay (as Ctrl-C would) once its first batch is restored."""

    phase = ""

    def start(self, phase: str, total: int) -> None:
        self.phase = phase

    def advance(self, count: int) -> None:
        if self.phase == "restoring state":
            raise KeyboardInterrupt


def test_a_resumed_replay_numbers_records_without_seq_as_an_uninterrupted_one(stack: Stack) -> None:
    """Old records carry no `seq`: the replay numbers them. Stopped after drawing a batch's numbers and before
    recording them, a replay run again used to draw past the gap, and the old records' verdicts then came
    after records whose own seqs they preceded (1 clean-clone CI run in 2 caught it, killed at random)."""
    records = _publish(stack, 200)
    settings = stack.settings()
    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    expected = _reference(records, client, f"{stack.name}-reference:", settings)
    prefix = f"{stack.name}:"
    with pytest.raises(KeyboardInterrupt):
        replay_links(settings, client, None, _StopAfterFirstBatch(), prefix=prefix, batch=20)
    client.incrby(f"{prefix}vseq", 20)  # the next batch's numbers, drawn by a replay killed before it wrote them
    replay_links(settings, client, None, prefix=prefix, batch=20)
    assert _by_meaning(_state(client, prefix)) == _by_meaning(expected)
    client.close()


def test_a_replay_started_while_another_restores_refuses_and_the_first_completes(stack: Stack) -> None:
    """An operator runs `dedup replay` a second time (another terminal, a retried job): two replays taking
    turns under the lease would write each other's checkpoints, and with --fresh one would clear what the
    other restored. The second waits for the first's lease (a killed replay's expires) and then refuses."""
    client, expected = _published(stack)
    command, env = _replay(stack, batch=2)  # slow: still restoring when refused
    with _background(command, env) as first:
        _started(client, f"{stack.name}:replay", first)
        impatient = {**env, "DEDUP_WORKER__LOCK_TTL_S": "0.5"}  # it waits out a lease of its own lifetime, twice
        second = subprocess.run([*command, "--fresh"], env=impatient, capture_output=True, text=True, timeout=120)
        assert first.poll() is None, "the first replay ended before the second was refused: not a race"
        assert second.returncode != 0
        assert "another `dedup replay`" in " ".join(second.stderr.split()), second.stderr
        assert first.wait(timeout=300) == 0
    assert not client.exists(f"{stack.name}:replay")
    assert _by_meaning(_state(client, f"{stack.name}:")) == _by_meaning(expected)
    client.close()


def test_a_replay_stalled_past_its_lease_stops_once_another_took_over(stack: Stack) -> None:
    """A replay paused (SIGSTOP, a starved host) past its lease: a second one takes over and completes the
    state. The first, resumed, must not write again: its checkpoint would tell the workers a replay is
    still under way (they would wait for ever), and its batches would come after the second's."""
    client, expected = _published(stack)
    command, env = _replay(stack, batch=20)
    with _background(command, env) as first:
        _started(client, f"{stack.name}:replay", first)
        freeze(first)
        second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert second.returncode == 0, second.stderr
        assert not client.exists(f"{stack.name}:replay")
        first.send_signal(signal.SIGCONT)
        assert first.wait(timeout=120) != 0
        assert first.stderr is not None
        assert "lost its lease" in " ".join(first.stderr.read().decode().split())
    assert not client.exists(f"{stack.name}:replay")
    assert _by_meaning(_state(client, f"{stack.name}:")) == _by_meaning(expected)
    client.close()


def test_a_replay_whose_lease_lapsed_while_no_other_ran_goes_on(stack: Stack) -> None:
    """A loaded host may starve the lease's renewal past its lifetime: with no other replay started meanwhile
    (the lease free, the checkpoint the one it wrote last) the replay takes its lease again and completes."""
    client, expected = _published(stack)
    with _background(*_replay(stack, batch=20)) as replay:
        _started(client, f"{stack.name}:replay", replay)
        freeze(replay)
        lease = f"{{{stack.name}:replay}}:lease"
        deadline = time.monotonic() + 60
        while client.exists(lease) and time.monotonic() < deadline:  # expires: settings.worker.lock_ttl_s
            time.sleep(0.1)
        assert not client.exists(lease)
        replay.send_signal(signal.SIGCONT)
        _, errors = replay.communicate(timeout=300)
        assert replay.returncode == 0, errors.decode()
    assert not client.exists(f"{stack.name}:replay")
    assert _by_meaning(_state(client, f"{stack.name}:")) == _by_meaning(expected)
    client.close()

"""The streaming path against the in-process one: stages 1 to 3, one and two workers.

Run:  .venv/bin/python benchmarks/bench_streaming.py [--count 20000] [--partitions 4] [--json FILE]

Starts its own broker (noida-db) and Redis on free ports. For each setting, on the
same synthetic articles:
- `dedup run` in this process (embedded SQLite state): documents per second;
- N worker processes on the broker and Redis, the whole input produced at once:
  documents per second from the first record produced to the last verdict;
- the same workers fed at a steady rate (half the rate just measured): p50 / p99
  verdict latency, from the raw record's broker timestamp to its link's;
- and, to tell decisions from transport, the exact and SimHash agents' batch handling
  alone (`StageAgent.handle` of their hop on the same Redis, in this process, no broker).

Every process shares this machine's cores, so the burst's CPU time is printed per document
and per process beside its rate (the workers, the broker, Redis; for the agents alone, this
process and Redis): what one worker costs, and what the broker takes from the same cores.

With `--json FILE` the results go to FILE too: `in_process_docs_per_s`,
`one_worker_docs_per_s`, `p99_latency_ms_half_load` (one worker), and per setting the
rate, its ratio to in-process, the paced rate, p50 / p99 latency and the burst's CPU
microseconds a document by process (`{name}_cpu_us_per_doc`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import psutil
from confluent_kafka import Consumer, Producer, TopicPartition

from streams.config import Settings, WorkerSettings
from streams.evaluation.corpus import synthetic_articles
from streams.evaluation.services import LocalKafka, LocalRedis
from streams.evaluation.stack import Stack
from streams.runner.embedded import RunPaths, run
from streams.service.resources import Resources
from streams.service.stages import Agent, Incoming

STAGES = "url,content,simhash"
WARM_UP = 500
"""Articles run once, untimed, before `dedup run` is timed."""


def in_process(lines: list[bytes], folder: Path) -> float:
    """`dedup run` over `lines`, after an untimed run over the first of them in a folder of its own: the
    first run of a fresh checkout compiles the Numba kernels into their cache (3,310 documents a second
    against 7,420 once cached, in two runs minutes apart), which would flatter every ratio to it."""
    warm = folder.with_name(f"{folder.name}-warm-up")
    warm.mkdir(parents=True)
    (warm / "in.jsonl").write_bytes(b"\n".join(lines[:WARM_UP]) + b"\n")
    run(Settings(stages=STAGES.split(",")), [str(warm / "in.jsonl")], RunPaths(warm / "out", warm / "state"))
    folder.mkdir(parents=True)
    source = folder / "in.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    started = time.perf_counter()
    run(Settings(stages=STAGES.split(",")), [str(source)], RunPaths(folder / "out", folder / "state"))
    return len(lines) / (time.perf_counter() - started)


def agents_only(redis: LocalRedis, lines: list[bytes]) -> tuple[float, dict[str, float]]:
    """Documents per second through the agents' `handle` (stages 1 to 3 as one hop, as one worker runs
    them), batches of 256, on the same Redis, no broker; and the CPU microseconds a document of this
    process and of Redis."""
    settings = Settings(stages=STAGES.split(","), redis_url=redis.url, redis_prefix="agents-only:")
    resources = Resources(settings)
    hop = resources.stage_agent(Agent.EXACT, Agent.SIMHASH)
    cpu = CpuTime({"agents": [os.getpid()], "redis": [_pid(redis)]})
    started = time.perf_counter()
    for start in range(0, len(lines), 256):
        hop.handle(
            [
                Incoming(line, None, 1_800_000_000_000, "raw", 0, start + i)
                for i, line in enumerate(lines[start : start + 256])
            ]
        )
    rate = len(lines) / (time.perf_counter() - started)
    used = cpu.per_document(len(lines))
    resources.close()
    return rate, used


class CpuTime:
    """CPU time (user and system, every thread) of named groups of processes since it was made."""

    def __init__(self, groups: dict[str, list[int]]) -> None:
        self._processes = {name: [psutil.Process(pid) for pid in pids] for name, pids in groups.items()}
        self._start = self._now()

    def _now(self) -> dict[str, float]:
        return {
            name: sum(times.user + times.system for times in (p.cpu_times() for p in processes))
            for name, processes in self._processes.items()
        }

    def per_document(self, documents: int) -> dict[str, float]:
        """Microseconds of CPU a document, by group, since the start."""
        now = self._now()
        return {name: 1e6 * (now[name] - self._start[name]) / documents for name in now}


def _pid(server: LocalRedis | LocalKafka) -> int:
    assert server.pid is not None, "the server is not running"
    return server.pid


def _link_times(stack: Stack, want: int, timeout: float) -> dict[str, int]:
    """Broker timestamp (ms) of the first link of each document, once `want` documents have one.

    The script waits on the topic's end offsets (a ListOffsets request every 0.2 s) and reads the links
    once they are enough: the times are the broker's, so reading late changes none of them, and a
    consumer kept reading meanwhile took a core of the two the workers run on (the broker answers an
    empty fetch at once, without waiting for records, and librdkafka then fetches again at once).
    """
    topic = stack.settings().topics.links
    watcher = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": f"watch-{uuid.uuid4().hex}"})
    deadline = time.monotonic() + timeout
    try:
        partitions = [TopicPartition(topic, p) for p in watcher.list_topics(topic, timeout=10).topics[topic].partitions]
        times: dict[str, int] = {}
        while True:
            ends = {tp.partition: watcher.get_watermark_offsets(tp, timeout=10)[1] for tp in partitions}
            if sum(ends.values()) >= want:
                times = _read_links(stack, topic, ends, deadline)
                if len(times) >= want:
                    return times
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(times)} of {want} verdicts after {timeout:.0f} s")
            time.sleep(0.2)
    finally:
        watcher.close()


def _read_links(stack: Stack, topic: str, ends: dict[int, int], deadline: float) -> dict[str, int]:
    """The first link's broker timestamp of each document in `topic`, read up to `ends` (partition: offset)."""
    consumer = stack.reader(topic)
    times: dict[str, int] = {}
    left = {partition for partition, end in ends.items() if end > 0}
    try:
        while left:
            if time.monotonic() > deadline:
                raise TimeoutError(f"links of {topic} not read up to {ends}")
            for message in consumer.consume(1000, timeout=0.5):
                if message.error() is not None:
                    continue
                times.setdefault(orjson.loads(message.value())["doc_id"], message.timestamp()[1])
                if message.offset() >= ends[message.partition()] - 1:
                    left.discard(message.partition())
    finally:
        consumer.close()
    return times


def _producer(stack: Stack) -> Producer:
    """The script's producer, connected (and its idempotent producer id granted) before any record is
    timed: a producer made for the paced phase gave its first records its own start-up (a connection,
    metadata, the producer id: about half a second) as verdict latency, a few hundred records of the
    5,000 and so the whole p99."""
    producer = Producer({"bootstrap.servers": stack.bootstrap, "linger.ms": 5, "enable.idempotence": True})
    producer.list_topics(stack.settings().topics.raw, timeout=30)
    return producer


def _produce(stack: Stack, producer: Producer, lines: list[bytes], rate: float | None) -> dict[str, int]:
    """Send `lines` (at `rate` a second, or at once); the broker timestamp of each, by id."""
    topic = stack.settings().topics.raw
    sent: dict[str, int] = {}

    def delivered(error: object, message: object) -> None:
        if error is None:
            sent[message.key().decode()] = message.timestamp()[1]  # type: ignore[attr-defined]

    started = time.perf_counter()
    for number, line in enumerate(lines):
        if rate is not None:
            pause = started + number / rate - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
        producer.produce(topic, value=line, key=orjson.loads(line)["id"].encode(), on_delivery=delivered)
        producer.poll(0)
    producer.flush(60)
    return sent


@contextmanager
def _running(code: Path | None) -> Iterator[None]:
    """Workers started inside run `code` (`python -m streams` finds the package in its working
    directory first, then on PYTHONPATH), or this checkout."""
    if code is None:
        yield
        return
    saved, cwd = os.environ.get("PYTHONPATH"), Path.cwd()
    os.environ["PYTHONPATH"] = str(code)
    os.chdir(code)
    try:
        yield
    finally:
        os.chdir(cwd)
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def streaming(
    broker: LocalKafka,
    redis: LocalRedis,
    folder: Path,
    workers: int,
    partitions: int,
    lines: list[bytes],
    code: Path | None = None,
) -> tuple[float, float, float, dict[str, float]]:
    """(documents per second at full speed, p50 and p99 latency in ms at half that rate, the burst's CPU
    microseconds a document by process: the workers together, the broker, Redis).

    One worker runs this checkout with its default batching (no window), several the 0.02 s window
    of the test stacks that the README advises for several workers (they share one registration
    lease); with `code`, the checkout there (`--baseline`) with the test stacks' settings."""
    burst, paced = lines[: len(lines) * 3 // 4], lines[len(lines) * 3 // 4 :]
    folder.mkdir(parents=True)
    defaults = {"DEDUP_WORKER__BATCH_WITHIN_S": str(WorkerSettings().batch_within_s)}
    env = {} if code is not None or workers > 1 else defaults
    stack = Stack(broker.bootstrap, redis.url, folder, stages=STAGES, partitions=partitions, extra_env=env)
    try:
        stack.create_topics()
        with _running(code):
            for _ in range(workers):
                stack.start_worker()
        producer = _producer(stack)
        time.sleep(2 * workers)  # every worker in the group before the first record
        pids = {"workers": [worker.process.pid for worker in stack.workers], "broker": [_pid(broker)]}
        cpu = CpuTime({**pids, "redis": [_pid(redis)]})
        sent = _produce(stack, producer, burst, rate=None)
        linked = _link_times(stack, len(burst), timeout=1800)
        used = cpu.per_document(len(burst))
        rate = len(burst) / ((max(linked.values()) - min(sent.values())) / 1000)
        pace = min(rate / 2, 1000.0)
        sent = _produce(stack, producer, paced, rate=pace)
        linked = _link_times(stack, len(burst) + len(paced), timeout=1800)
        latencies = sorted(linked[doc_id] - at for doc_id, at in sent.items())
        p50 = statistics.median(latencies)
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        return rate, p50, p99, used
    finally:
        stack.stop()


def _us(used: dict[str, float]) -> str:
    return ", ".join(f"{name} {us:,.0f} us" for name, us in used.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a checkout of the code to compare with (e.g. `git worktree add /tmp/before COMMIT`): one worker of"
        " it runs after this checkout's, on the same broker and Redis (baseline_one_worker_* in the results)",
    )
    args = parser.parse_args()
    lines = [orjson.dumps(article) for article in synthetic_articles(args.count)]
    results: dict[str, object] = {"count": args.count, "partitions": args.partitions, "stages": STAGES}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        reference = in_process(lines, root / "embedded")
        results["in_process_docs_per_s"] = reference
        print(f"dedup run (in process, SQLite):        {reference:8,.0f} docs/s   ({args.count:,} articles)")
        with LocalRedis(root / "redis") as redis:
            alone, used = agents_only(redis, lines)
            results["agents_only_docs_per_s"] = alone
            results["agents_only_cpu_us_per_doc"] = used
            print(f"agents' batch handling alone (Redis, no broker): {alone:8,.0f} docs/s; CPU a document: {_us(used)}")
            runs = [(1, "one_worker", None), (1, "baseline_one_worker", args.baseline), (2, "two_workers", None)]
            for workers, name, code in runs:
                if name.startswith("baseline") and code is None:
                    continue
                folder = root / name
                # A broker of its own: noida-db writes all it holds to disk every second or two while
                # records arrive (100 to 150 MB of JSON during one 20,000-article run), so a broker kept
                # from an earlier run would charge this one for that run's records too.
                with LocalKafka(root / f"kafka-{name}") as broker:
                    rate, p50, p99, used = streaming(broker, redis, folder, workers, args.partitions, lines, code)
                pace = min(rate / 2, 1000)
                results.update(
                    {
                        f"{name}_docs_per_s": rate,
                        f"{name}_ratio": rate / reference,
                        f"{name}_half_load_docs_per_s": pace,
                        f"{name}_p50_latency_ms": p50,
                        f"{name}_p99_latency_ms": p99,
                        f"{name}_cpu_us_per_doc": used,
                    }
                )
                print(
                    f"streaming, {workers} worker{'s' if workers > 1 else ' '} ({args.partitions} partitions)"
                    f"{' of ' + str(code) if code else ''}: "
                    f"{rate:8,.0f} docs/s = {rate / reference:.2f}x in-process; "
                    f"latency at {pace:,.0f} docs/s: p50 {p50:,.0f} ms, p99 {p99:,.0f} ms; "
                    f"burst CPU a document: {_us(used)}"
                )
    results["p99_latency_ms_half_load"] = results["one_worker_p99_latency_ms"]
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2) + b"\n")


if __name__ == "__main__":
    main()

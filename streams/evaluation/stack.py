"""The streaming service as tests and benchmarks drive it: real workers as processes, on a real broker and Redis.

Each `Stack` gets its own topics, consumer group and Redis key prefix on the
session's broker and Redis, so tests never see each other's records.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from streams.config import Settings
from streams.evaluation.services import free_port
from streams.kafka.publish import record_key
from streams.kafka.topics import create_topics

READY_TIMEOUT_S = 90.0


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    instance: str
    """Its static group membership id: a restart with the same id takes its partitions back at once."""

    def ready(self) -> bool:
        return self._readyz()[0] == 200

    def _readyz(self) -> tuple[int, dict[str, Any]]:
        """/readyz's status and body (0 and nothing when it does not answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as response:
                return response.status, orjson.loads(response.read())
        except urllib.error.HTTPError as error:  # 503: not ready, the body says why and what it holds
            try:
                return error.code, orjson.loads(error.read())
            except orjson.JSONDecodeError:  # a page of the web server's own (starting, stopping)
                return error.code, {}
        except (urllib.error.URLError, OSError):
            return 0, {}

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.process.poll() is not None:
                raise RuntimeError(f"worker exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker not ready after {timeout:.0f} s:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)

    def partitions(self) -> list[str]:
        """The partitions this worker holds (`topic:partition`), as its /readyz reports them."""
        return list(self._readyz()[1].get("partitions", []))

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as response:
            return response.read().decode()

    def kill(self) -> None:
        """SIGKILL: no shutdown, no commit, no flush."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def report(self) -> str:
        """What a test that timed out needs to say about this worker: /readyz, its log's last lines, and the
        stacks of its threads and asyncio tasks that run our code (mode dumps them all on SIGUSR1)."""
        status, body = self._readyz()
        lines = [line[:400] for line in self.log.read_text(errors="replace").splitlines()[-40:]]
        stacks = ""
        if self.process.poll() is None:
            size = self.log.stat().st_size
            self.process.send_signal(signal.SIGUSR1)
            time.sleep(1)
            with self.log.open("rb") as handle:
                handle.seek(size)
                stacks = _our_stacks(handle.read().decode(errors="replace"))
        log = "\n".join(lines)
        return f"--- worker {self.instance} (exit code {self.process.poll()}): /readyz {status} {body}\n{log}\n{stacks}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass
class Stack:
    bootstrap: str
    redis_url: str
    folder: Path
    stages: str = "url,content,simhash"
    partitions: int = 1
    extra_env: dict[str, str] = field(default_factory=dict)
    name: str = field(default_factory=lambda: f"t{uuid.uuid4().hex[:10]}")
    workers: list[Worker] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        topics = {
            "RAW": "articles.raw",
            "DEDUPED": "articles.deduped",
            "LINKS": "dedup.links",
            "CANDIDATES": "dedup.candidates",
            "REJECTED": "articles.rejected",
            "STAGE_SIMHASH": "dedup.stage.simhash",
            "STAGE_SEMANTIC": "dedup.stage.semantic",
        }
        env = {
            "DEDUP_KAFKA_BOOTSTRAP": self.bootstrap,
            "DEDUP_REDIS_URL": self.redis_url,
            "DEDUP_REDIS_PREFIX": f"{self.name}:",
            "DEDUP_STAGES": orjson.dumps(self.stages.split(",")).decode(),
            "DEDUP_QDRANT_URL": "embedded",
            "DEDUP_STATE_DIR": str(self.folder / "state"),
            "DEDUP_WORKER__GROUP_ID": self.name,
            "DEDUP_WORKER__BATCH_WITHIN_S": "0.02",
            "DEDUP_WORKER__LOCK_TTL_S": "3",
            "DEDUP_WORKER__SESSION_TIMEOUT_S": "6",
            "DEDUP_WORKER__REBALANCE_TIMEOUT_S": "10",
            "DEDUP_TOPICS__PARTITIONS": str(self.partitions),
            **{f"DEDUP_TOPICS__{key}": f"{self.name}.{topic}" for key, topic in topics.items()},
            **self.extra_env,
        }
        return env

    def settings(self) -> Settings:
        saved = dict(os.environ)
        try:
            os.environ.update(self.env())
            return Settings()
        finally:
            os.environ.clear()
            os.environ.update(saved)

    def create_topics(self) -> None:
        create_topics(self.settings())

    def start_worker(self, *agents: str, wait: bool = True, instance: str | None = None) -> Worker:
        """A worker process; `instance` given, it comes back as that (killed) worker."""
        port = free_port()
        log = self.folder / f"worker-{len(self.workers)}.log"
        instance = instance or f"{self.name}-{len(self.workers)}"
        env = {
            **os.environ,
            **self.env(),
            "DEDUP_WORKER__WEB_PORT": str(port),
            "DEDUP_WORKER__INSTANCE_ID": instance,
        }
        command = [sys.executable, "-m", "streams", "worker", "--log-level", "info"]
        for agent in agents:
            command += ["--stage", agent]
        with log.open("ab") as handle:
            process = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT)
        worker = Worker(process, port, log, instance)
        self.workers.append(worker)
        if wait:
            worker.wait_ready()
        return worker

    def wait_assigned(self, topic: str, timeout: float = READY_TIMEOUT_S) -> None:
        """Wait until every running worker holds partitions of `topic` and together they hold all of them:
        a test about workers sharing a stream produces only once the group has settled."""
        wanted = {f"{topic}:{p}" for p in range(self.partitions)}
        deadline = time.monotonic() + timeout
        while True:
            held = [{p for p in worker.partitions() if p in wanted} for worker in self.workers]
            if all(held) and set().union(*held) == wanted:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the workers hold {held} of {sorted(wanted)} after {timeout:.0f} s")
            time.sleep(0.2)

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()

    def produce(self, lines: Iterable[bytes], key_by_id: bool = True) -> int:
        settings = self.settings()
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        sent = 0
        for line in lines:
            key = record_key(line) if key_by_id else None
            producer.produce(settings.topics.raw, value=line, key=key)
            sent += 1
            producer.poll(0)
        if producer.flush(30) != 0:
            raise RuntimeError("records not delivered")
        return sent

    def reader(self, topic: str) -> Consumer:
        """A consumer of every partition of `topic` from the beginning, outside any group's offsets."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"read-{uuid.uuid4().hex}"})
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        return consumer

    def read(self, topic: str, until: int, timeout: float = 120.0) -> list[dict[str, Any]]:
        """Every record of `topic` from the beginning, once at least `until` have arrived (in partition order)."""
        consumer = self.reader(topic)
        records: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        try:
            while len(records) < until:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{topic}: {len(records)} records after {timeout:.0f} s, wanted {until}")
                for worker in self.workers:
                    if worker.process.poll() not in (None, -signal.SIGKILL):
                        raise RuntimeError(f"worker died:\n{worker.log.read_text()[-3000:]}")
                message = consumer.poll(0.5)
                if message is None or message.error() is not None:
                    continue
                records.append(orjson.loads(message.value()))
        finally:
            consumer.close()
        return records

    def unfed(self, latest: dict[str, dict[str, Any]], timeout: float = 120.0) -> set[str]:
        """The canonicals (`unique`) of `latest` that `articles.deduped` does not carry: read until it carries
        every one of them, or the time is up. Empty when every canonical reached the indexers."""
        wanted = {doc_id for doc_id, link in latest.items() if link["verdict"] == "unique"}
        consumer = self.reader(self.settings().topics.deduped)
        deadline = time.monotonic() + timeout
        try:
            while wanted and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    wanted.discard(orjson.loads(message.value())["id"])
        finally:
            consumer.close()
        return wanted

    def final_links(self, ids: set[str], timeout: float = 180.0) -> tuple[dict[str, dict[str, Any]], list[dict]]:
        """The last link of each document once every id in `ids` has one; and every link record."""
        topic = self.settings().topics.links
        consumer = self.reader(topic)
        latest: dict[str, dict[str, Any]] = {}
        every: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        try:
            while not ids <= latest.keys():
                if time.monotonic() > deadline:
                    missing = sorted(ids - latest.keys())
                    workers = "\n".join(worker.report() for worker in self.workers)
                    raise TimeoutError(f"{len(missing)} documents without a link, e.g. {missing[:5]}\n{workers}")
                message = consumer.poll(0.5)
                if message is None or message.error() is not None:
                    continue
                record = orjson.loads(message.value())
                latest[record["doc_id"]] = record
                every.append(record)
        finally:
            consumer.close()
        return latest, every


_STACK_START = re.compile(r"^(?=THREAD |Stack for <)", re.MULTILINE)


def _our_stacks(dump: str, limit: int = 12_000) -> str:
    """The stacks of a thread and task dump (mode's `cry`) that run this package's code, frames only: the
    rest is the frameworks idling, and the locals it prints are pages long."""
    ours = []
    for block in _STACK_START.split(dump):
        lines = block.splitlines()
        frames = [pair for i, line in enumerate(lines) if line.startswith('  File "') for pair in lines[i : i + 2]]
        if any(line.startswith('  File "') and _is_ours(line) for line in frames):
            ours.append("\n".join([lines[0][:300], *frames]))
    return "\n".join(ours)[:limit]


def _is_ours(frame: str) -> bool:
    """A frame of this package's code, other than the command that started the worker (in every main stack)."""
    package = f"{os.sep}streams{os.sep}"
    return package in frame and f"{package}cli{os.sep}" not in frame and f"{package}__main__" not in frame


def assert_invariants(latest: dict[str, dict[str, Any]]) -> None:
    """One final verdict per document, no self-links, every canonical a canonical (unique or unlinked)."""
    canonical_verdicts = ("unique", "unlinked")
    for doc_id, link in latest.items():
        if link["verdict"] in canonical_verdicts:
            assert link["canonical_id"] == doc_id
            continue
        assert link["canonical_id"] != doc_id, f"{doc_id} is linked to itself"
        canonical = latest.get(link["canonical_id"])
        assert canonical is not None, f"{doc_id} links to {link['canonical_id']}, which has no verdict"
        assert canonical["verdict"] in canonical_verdicts, (
            f"{doc_id} links to {link['canonical_id']}, a {canonical['verdict']}"
        )

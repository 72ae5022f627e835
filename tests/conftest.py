"""Shared fixtures: the public data in ../shared/data; a real Redis, Kafka-protocol broker and Qdrant.

Where they come from is one switch, DEDUP_TEST_CONTAINERS: `auto` (the default) runs testcontainers'
Redis, Kafka and Qdrant when a Docker engine answers, and otherwise local processes on free ports
(Debian's redis-server, noida-db's broker) and qdrant-client's local mode; `always` insists on containers
(the run stops in one line without an engine); `never` keeps to local processes. The containers run the
images docker-compose.yml deploys.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import pytest
import redis
import yaml
from qdrant_client import QdrantClient
from redis.crc import key_slot

from streams.core.ports import StateStore
from streams.evaluation.corpus import NtrexDocument, data_dir, ntrex_documents
from streams.evaluation.services import REDIS_TUNING, free_port, local_kafka, local_redis
from streams.evaluation.stack import Stack
from streams.stores.batched import BatchedState
from streams.stores.redis_store import RedisStateStore
from streams.stores.sqlite import SqliteStateStore
from streams.vectors.qdrant_server import QdrantVectorStore

CONTAINERS_ENV = "DEDUP_TEST_CONTAINERS"
COMPOSE_FILE = Path(__file__).resolve().parents[1] / "docker-compose.yml"
# testcontainers' KafkaContainer drives the start scripts of Confluent's image, not apache/kafka's:
# Confluent Platform 7.8 is Apache Kafka 3.8, the release compose runs (tests/test_deploy_versions.py).
KAFKA_TEST_IMAGE = "confluentinc/cp-kafka:7.8.0"


@cache
def compose_image(service: str) -> str:
    """The image docker-compose.yml runs for `service`, so the test containers are the versions deployed."""
    return yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))["services"][service]["image"]


def docker_engine_answers() -> bool:
    """Whether a Docker engine answers a ping at DOCKER_HOST (default: the local socket)."""
    try:
        import docker  # installed with testcontainers; absent means no containers either
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=5)
    except docker.errors.DockerException:  # from_env asks the engine for its API version
        return False
    try:
        return bool(client.ping())
    except Exception:  # refused, timed out, not an engine: all mean none to use
        return False
    finally:
        client.close()


def containers_mode() -> str:
    """DEDUP_TEST_CONTAINERS, checked: a typo must not quietly mean `auto`."""
    mode = os.environ.get(CONTAINERS_ENV, "auto").strip().lower()
    if mode not in ("auto", "never", "always"):
        raise pytest.UsageError(f"{CONTAINERS_ENV}={mode!r}: expected auto, never or always")
    return mode


def containers_wanted() -> bool:
    """Whether the service fixtures run containers; `always` without a way to run them is a usage error."""
    mode = containers_mode()
    if mode == "never":
        return False
    if docker_engine_answers():
        if importlib.util.find_spec("testcontainers") is not None:
            return True
        if mode == "always":
            raise pytest.UsageError(
                f"{CONTAINERS_ENV}=always but testcontainers is not installed: pip install -e '.[test]'"
            )
        return False
    if mode == "always":
        where = os.environ.get("DOCKER_HOST") or "the default socket"
        raise pytest.UsageError(
            f"{CONTAINERS_ENV}=always but no Docker engine answers at {where}; start one, or set {CONTAINERS_ENV}=auto"
        )
    return False


def pytest_sessionstart(session: pytest.Session) -> None:
    """A bad switch, or `always` with no engine, stops the run here in one line, not in every test needing a service."""
    if containers_mode() == "always":
        containers_wanted()


@pytest.fixture(scope="session")
def containers() -> bool:
    """True when the service fixtures below run in containers (DEDUP_TEST_CONTAINERS)."""
    return containers_wanted()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return data_dir()


@pytest.fixture(scope="session")
def ntrex(shared_data: Path) -> list[NtrexDocument]:
    return ntrex_documents(shared_data)


@pytest.fixture(scope="session")
def redis_url(containers: bool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Redis: compose's image in a container, else Debian's redis-server on a free port (stopped by PID)."""
    if containers:
        from testcontainers.community.redis import RedisContainer

        with RedisContainer(compose_image("redis")) as server:
            yield f"redis://{server.get_container_host_ip()}:{server.get_exposed_port(server.port)}/0"
        return
    with local_redis(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(scope="session")
def kafka_bootstrap(containers: bool, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Kafka-protocol broker: DEDUP_TEST_KAFKA_BOOTSTRAP if set, else Kafka (KRaft) in a container,
    else noida-db's binary on a free port."""
    given = os.environ.get("DEDUP_TEST_KAFKA_BOOTSTRAP")
    if given:
        yield given
        return
    if containers:
        from testcontainers.community.kafka import KafkaContainer

        with KafkaContainer(KAFKA_TEST_IMAGE).with_kraft() as broker:
            yield broker.get_bootstrap_server()
        return
    with local_kafka(tmp_path_factory.mktemp("kafka")) as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def qdrant_location(containers: bool) -> Iterator[str]:
    """Where `QdrantClient(location)` finds Qdrant: compose's server image in a container, else ":memory:"
    (qdrant-client's local mode, the same API in process)."""
    if not containers:
        yield ":memory:"
        return
    from testcontainers.community.qdrant import QdrantContainer

    with QdrantContainer(compose_image("qdrant")) as server:
        yield f"http://{server.rest_host_address}"


@pytest.fixture
def qdrant_store(qdrant_location: str) -> Iterator[QdrantVectorStore]:
    """A server vector store of its own (its own collection prefix), its collections dropped after the test."""
    store = QdrantVectorStore(QdrantClient(location=qdrant_location), prefix=f"t{uuid.uuid4().hex}")
    yield store
    for collection in store.client.get_collections().collections:
        if collection.name.startswith(f"{store.prefix}_"):
            store.client.delete_collection(collection.name)
    store.close()


@pytest.fixture(params=["sqlite", "redis", "redis-batched"])
def new_state(request: pytest.FixtureRequest) -> Callable[[], StateStore]:
    """Makes empty state stores of one kind (batched: one never-flushed batch, reads see its writes)."""
    if request.param == "sqlite":
        return lambda: SqliteStateStore(":memory:")
    url = request.getfixturevalue("redis_url")
    if request.param == "redis-batched":
        return lambda: BatchedState(RedisStateStore.from_url(url, prefix=f"t{uuid.uuid4().hex}:"))
    return lambda: RedisStateStore.from_url(url, prefix=f"t{uuid.uuid4().hex}:")


@pytest.fixture
def make_stack(kafka_bootstrap: str, redis_url: str, tmp_path: Path) -> Iterator[Callable[[str], Stack]]:
    """Makes the streaming service for one test (its own topics, group and keys); stops its workers after."""
    made: list[Stack] = []

    def make(stages: str) -> Stack:
        folder = tmp_path / f"stack-{len(made)}"
        folder.mkdir()
        made.append(Stack(kafka_bootstrap, redis_url, folder, stages=stages))
        return made[-1]

    yield make
    for stack in made:
        stack.stop()


class LocalRedisCluster:
    """Redis Cluster of Debian's redis-server on free ports: 3 masters and a replica each, nothing persisted,
    a node timeout of 1 s so that a replica takes over a killed master within seconds. Stopped by PID."""

    def __init__(self, folder: Path, masters: int = 3) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.ports: list[int] = []
        while len(self.ports) < masters * 2:  # the cluster bus listens on port + 10000
            port = free_port()
            taken = {p for used in self.ports for p in (used, used + 10_000, used - 10_000)}
            if port + 10_000 < 65_536 and port not in taken and _bindable(port + 10_000):
                self.ports.append(port)
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.url = f"redis+cluster://127.0.0.1:{self.ports[0]}/0"

    def start(self) -> None:
        for port in self.ports:
            command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(self.folder)]
            command += ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf"]
            command += ["--cluster-node-timeout", "1000", "--cluster-replica-validity-factor", "0"]
            command += ["--save", "", "--appendonly", "no", "--logfile", f"redis-{port}.log", *REDIS_TUNING]
            self.processes[port] = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        for port in self.ports:
            self._wait(port, lambda node: bool(node.ping()))
        create = ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{port}" for port in self.ports)]
        subprocess.run([*create, "--cluster-replicas", "1", "--cluster-yes"], check=True, capture_output=True)
        for port in self.ports:
            self._wait(port, lambda node: node.cluster("info")["cluster_state"] == "ok")
        # A replica copies its master only after the master's diskless-sync delay (5 s by default): a master
        # killed before would be taken over by an empty replica (a lost state: tests/test_state_lost*.py).
        for port in self.ports:
            self._wait(port, _in_sync)

    def _wait(self, port: int, ready: Callable[[redis.Redis], bool], timeout_s: float = 30) -> None:
        node = redis.Redis(port=port, decode_responses=True)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                try:
                    if ready(node):
                        return
                except redis.RedisError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis cluster node {port} not ready after {timeout_s:.0f} s")
                time.sleep(0.1)
        finally:
            node.close()

    def masters(self) -> list[int]:
        """The ports of the nodes serving slots now, as a live node sees them."""
        live = next(port for port, process in self.processes.items() if process.poll() is None)
        node = redis.Redis(port=live, decode_responses=True)
        try:
            nodes = node.cluster("nodes")
        finally:
            node.close()
        return sorted(
            int(address.split(":")[1].split("@")[0])
            for address, info in nodes.items()
            if "master" in info["flags"] and "fail" not in info["flags"] and info["slots"]
        )

    def empty_a_master(self, prefix: str, spared: str) -> int:
        """Delete the keys under `prefix` on a master that does not serve key `spared` (what a failover to a
        replica that had not copied it leaves); how many went."""
        spared_slot = key_slot(spared.encode())
        for port in self.masters():
            node = redis.Redis(port=port, decode_responses=True)
            try:
                slots = node.cluster("slots")
                served = [(int(first), int(last)) for first, last, (_, master, *_), *_ in slots if int(master) == port]
                if all(not first <= spared_slot <= last for first, last in served):
                    return sum(node.delete(key) for key in node.scan_iter(match=f"{prefix}*", count=10_000))
            finally:
                node.close()
        raise AssertionError(f"every master serves the slot of {spared}")

    def kill(self, port: int) -> None:
        """SIGKILL one node (its replica takes over after the node timeout)."""
        self.processes[port].kill()
        self.processes[port].wait(timeout=10)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)


def _in_sync(node: redis.Redis) -> bool:
    """A master, or a replica whose copy of its master is complete and follows it."""
    info = node.info("replication")
    return info["role"] == "master" or (info["master_link_status"] == "up" and not info["master_sync_in_progress"])


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextmanager
def local_redis_cluster(folder: Path) -> Iterator[LocalRedisCluster]:
    cluster = LocalRedisCluster(folder)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRedisCluster]:
    """A Redis Cluster of local processes (3 masters, 3 replicas), shared by the session: no test kills its nodes."""
    with local_redis_cluster(tmp_path_factory.mktemp("redis-cluster")) as cluster:
        yield cluster


@pytest.fixture(params=["one", "cluster"])
def one_or_cluster_url(request: pytest.FixtureRequest) -> str:
    """The URL of the session's one Redis server, then of its Redis Cluster: a test of both."""
    if request.param == "one":
        return str(request.getfixturevalue("redis_url"))
    return str(request.getfixturevalue("redis_cluster").url)


@contextmanager
def mounted_tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (`1m`, `256k`) mounted at `mount` for the test's length: a disk that fills up for real.
    Skips the test where this machine cannot mount one."""
    mount.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)

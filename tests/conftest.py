"""Shared fixtures: the public data in ../shared/data; a real Redis and a real Kafka-protocol broker on free ports."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from streams.evaluation.corpus import NtrexDocument, data_dir, ntrex_documents


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return data_dir()


@pytest.fixture(scope="session")
def ntrex(shared_data: Path) -> list[NtrexDocument]:
    return ntrex_documents(shared_data)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Redis (Debian's redis-server) on a free port, stopped by PID at the end."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed; .ci/run installs it (apt-get install redis-server)")
    port = _free_port()
    folder = tmp_path_factory.mktemp("redis")
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError(f"redis-server did not start on port {port}") from None
            time.sleep(0.05)
    client.close()
    yield url
    server.terminate()
    server.wait(timeout=10)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Kafka-protocol broker: DEDUP_TEST_KAFKA_BOOTSTRAP if set, else noida-db's binary on a free port."""
    given = os.environ.get("DEDUP_TEST_KAFKA_BOOTSTRAP")
    if given:
        yield given
        return
    import noida_db  # the wheel ships the broker binary; start it directly, not through its wrapper

    binary = Path(noida_db.__file__).parent / "noida-db"
    port = _free_port()
    folder = tmp_path_factory.mktemp("kafka")
    command = [str(binary), "start", "--data-dir", str(folder / "data"), "--host", "127.0.0.1"]
    log = (folder / "broker.log").open("wb")
    broker = subprocess.Popen([*command, "--only", "kafka", "--kafka-port", str(port)], stdout=log, stderr=log)
    bootstrap = f"127.0.0.1:{port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 30
    while True:
        try:
            admin.list_topics(timeout=1)
            break
        except KafkaException:
            if broker.poll() is not None or time.monotonic() > deadline:
                broker.kill()
                raise RuntimeError(f"the Kafka broker did not start; see {folder / 'broker.log'}") from None
    yield bootstrap
    broker.terminate()
    broker.wait(timeout=30)
    log.close()

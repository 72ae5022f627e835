"""Real services started as local processes on free ports, for tests and benchmarks.

Redis is Debian's `redis-server`; the Kafka-protocol broker is the binary in the
`noida-db` wheel (a test dependency), started directly. Both keep their data in
a given folder and are stopped by PID when the context ends.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def local_redis(folder: Path) -> Iterator[str]:
    """A redis-server on a free port, nothing persisted; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed; .ci/run installs it (apt-get install redis-server)")
    port = free_port()
    folder.mkdir(parents=True, exist_ok=True)
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    try:
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on port {port}") from None
                time.sleep(0.05)
        client.close()
        yield url
    finally:
        _stop(server)


@contextmanager
def local_kafka(folder: Path) -> Iterator[str]:
    """noida-db's Kafka-protocol broker on a free port; yields its bootstrap address."""
    import noida_db  # the wheel ships the broker binary; start it directly, not through its wrapper

    binary = Path(noida_db.__file__).parent / "noida-db"
    port = free_port()
    folder.mkdir(parents=True, exist_ok=True)
    command = [str(binary), "start", "--data-dir", str(folder / "data"), "--host", "127.0.0.1"]
    with (folder / "broker.log").open("wb") as log:
        broker = subprocess.Popen([*command, "--only", "kafka", "--kafka-port", str(port)], stdout=log, stderr=log)
        bootstrap = f"127.0.0.1:{port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        deadline = time.monotonic() + 30
        try:
            while True:
                try:
                    admin.list_topics(timeout=1)
                    break
                except KafkaException:
                    if broker.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"the Kafka broker did not start; see {folder / 'broker.log'}") from None
            yield bootstrap
        finally:
            _stop(broker)


def _stop(process: subprocess.Popen[bytes], grace_s: float = 30.0) -> None:
    """SIGTERM, then SIGKILL if it is still there after `grace_s` (a broker may take its time to flush)."""
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)

"""Real services started as local processes on free ports, for tests and benchmarks.

Redis is Debian's `redis-server`; the Kafka-protocol broker is the binary in the
`noida-db` wheel (a test dependency), started directly. Both keep their data in
a given folder and are stopped by PID when the context ends.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self

import redis
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


REDIS_TUNING = ["--hash-max-listpack-value", "256", "--maxmemory-policy", "noeviction"]
"""docker-compose.yml's Redis options (README, "Memory"), so the tests' Redis encodes as deployed ones do
(tests/test_redis_memory_layout.py holds them equal)."""


class _Service(ABC):
    """A local server, started for a `with` block and stopped when it ends."""

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LocalRedis(_Service):
    """A redis-server on a free port that a test can stop and start again on the same port and data."""

    def __init__(self, folder: Path, appendonly: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed; .ci/run installs it (apt-get install redis-server)")
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._command = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        self._command += ["--appendonly", "yes" if appendonly else "no", "--dir", str(folder), *REDIS_TUNING]
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(self._command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        try:
            while True:
                try:
                    client.ping()
                    return
                except (redis.ConnectionError, redis.BusyLoadingError):
                    if self._process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                    time.sleep(0.05)
        finally:
            client.close()

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (the benchmarks read its CPU time)."""
        return None if self._process is None else self._process.pid

    def stop(self) -> None:
        """SIGTERM: Redis writes its append-only file out before it exits."""
        if self._process is not None:
            _stop(self._process)
            self._process = None


class LocalKafka(_Service):
    """noida-db's Kafka-protocol broker on a free port, restartable on the same port and data.

    noida-db keeps its data only on a graceful stop (SIGTERM), which `stop` sends.
    """

    def __init__(self, folder: Path) -> None:
        import noida_db  # the wheel ships the broker binary; start it directly, not through its wrapper

        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._folder = folder
        binary = Path(noida_db.__file__).parent / "noida-db"
        self._command = [str(binary), "start", "--data-dir", str(folder / "data"), "--host", "127.0.0.1"]
        self._command += ["--only", "kafka", "--kafka-port", str(self.port)]
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self._folder / "broker.log"
        with log.open("ab") as handle:
            self._process = subprocess.Popen(self._command, stdout=handle, stderr=handle)
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        deadline = time.monotonic() + 30
        while True:
            try:
                admin.list_topics(timeout=1)
                return
            except KafkaException:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the Kafka broker did not start; see {log}") from None

    @property
    def pid(self) -> int | None:
        """The broker's process id while it runs (the benchmarks read its CPU time)."""
        return None if self._process is None else self._process.pid

    def stop(self) -> None:
        if self._process is not None:
            _stop(self._process)
            self._process = None

    def pause(self) -> None:
        """The broker keeps its connections open and answers nothing (a hung or partitioned broker)."""
        assert self._process is not None
        freeze(self._process)

    def resume(self) -> None:
        assert self._process is not None
        self._process.send_signal(signal.SIGCONT)


@contextmanager
def local_redis(folder: Path, appendonly: bool = False) -> Iterator[str]:
    """A redis-server on a free port (nothing persisted unless `appendonly`); yields its URL."""
    with LocalRedis(folder, appendonly) as server:
        yield server.url


@contextmanager
def local_kafka(folder: Path) -> Iterator[str]:
    """noida-db's Kafka-protocol broker on a free port; yields its bootstrap address."""
    with LocalKafka(folder) as broker:
        yield broker.bootstrap


def freeze(process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """SIGSTOP, and wait until every thread of `process` has stopped.

    `kill` only queues the signal: the stop begins once one of the process's threads is scheduled to
    take it, and on a loaded machine the others go on for milliseconds meanwhile (a broker acknowledged
    a whole produce request that way). A test that freezes a process must know it is frozen."""
    process.send_signal(signal.SIGSTOP)
    tasks = Path(f"/proc/{process.pid}/task")
    deadline = time.monotonic() + timeout_s
    while not all(_stopped(task / "stat") for task in tasks.iterdir()):
        if process.poll() is not None or time.monotonic() > deadline:
            code = process.returncode
            raise RuntimeError(f"process {process.pid} did not stop within {timeout_s:g} s (exit code {code})")
        time.sleep(0.001)


def _stopped(stat: Path) -> bool:
    try:
        return stat.read_text().rpartition(")")[2].split()[0] in "Tt"  # the state follows the command's name
    except FileNotFoundError:  # a thread that ended
        return True


def _stop(process: subprocess.Popen[bytes], grace_s: float = 30.0) -> None:
    """SIGTERM, then SIGKILL if it is still there after `grace_s` (a broker may take its time to flush)."""
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)

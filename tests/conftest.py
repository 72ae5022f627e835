"""Shared fixtures: the public data in ../shared/data; a real Redis and a real Kafka-protocol broker on free ports."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from streams.core.ports import StateStore
from streams.evaluation.corpus import NtrexDocument, data_dir, ntrex_documents
from streams.evaluation.services import local_kafka, local_redis
from streams.evaluation.stack import Stack
from streams.stores.batched import BatchedState
from streams.stores.redis_store import RedisStateStore
from streams.stores.sqlite import SqliteStateStore


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return data_dir()


@pytest.fixture(scope="session")
def ntrex(shared_data: Path) -> list[NtrexDocument]:
    return ntrex_documents(shared_data)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Redis (Debian's redis-server) on a free port, stopped by PID at the end."""
    with local_redis(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Kafka-protocol broker: DEDUP_TEST_KAFKA_BOOTSTRAP if set, else noida-db's binary on a free port."""
    given = os.environ.get("DEDUP_TEST_KAFKA_BOOTSTRAP")
    if given:
        yield given
        return
    with local_kafka(tmp_path_factory.mktemp("kafka")) as bootstrap:
        yield bootstrap


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

"""DEDUP_TEST_CONTAINERS decides where the Redis, Kafka and Qdrant fixtures come from.

auto (the default) uses testcontainers when a Docker engine answers and local processes otherwise,
without a word; always insists on containers and stops the run in one line when it cannot have them;
never keeps to local processes. These run on any machine: a bogus DOCKER_HOST stands in for "no engine".
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from streams.evaluation.services import free_port
from tests.conftest import CONTAINERS_ENV, containers_wanted, docker_engine_answers

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch) -> str:
    """DOCKER_HOST pointing at a port nothing listens on."""
    host = f"tcp://127.0.0.1:{free_port()}"
    monkeypatch.setenv("DOCKER_HOST", host)
    return host


def test_no_engine_answers_at_a_bogus_docker_host(no_engine: str) -> None:
    assert docker_engine_answers() is False


def test_no_engine_answers_at_a_missing_socket(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'docker.sock'}")
    assert docker_engine_answers() is False


def test_auto_without_an_engine_quietly_uses_local_processes(monkeypatch: pytest.MonkeyPatch, no_engine: str) -> None:
    monkeypatch.delenv(CONTAINERS_ENV, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert containers_wanted() is False
    monkeypatch.setenv(CONTAINERS_ENV, "auto")
    assert containers_wanted() is False


def test_never_uses_local_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONTAINERS_ENV, "never")
    assert containers_wanted() is False


def test_always_without_an_engine_is_a_one_line_usage_error(monkeypatch: pytest.MonkeyPatch, no_engine: str) -> None:
    monkeypatch.setenv(CONTAINERS_ENV, "always")
    with pytest.raises(pytest.UsageError) as raised:
        containers_wanted()
    message = str(raised.value)
    assert "\n" not in message
    assert f"{CONTAINERS_ENV}=always" in message and no_engine in message


def test_an_unknown_mode_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONTAINERS_ENV, "sometimes")
    with pytest.raises(pytest.UsageError, match="auto, never or always"):
        containers_wanted()


def test_a_run_with_always_and_no_engine_stops_before_any_test(no_engine: str) -> None:
    """One line, exit code 4 (usage error): not one failure per test that needs a service."""
    env = {**os.environ, CONTAINERS_ENV: "always", "DOCKER_HOST": no_engine}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", __file__],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, lines
    assert lines == [lines[0]] and lines[0].startswith(f"ERROR: {CONTAINERS_ENV}=always"), lines


def test_local_fixtures_do_not_import_testcontainers(containers: bool, redis_url: str, qdrant_location: str) -> None:
    """testcontainers is imported only when containers are used."""
    if containers:
        pytest.skip("a Docker engine answers: the fixtures use containers here")
    assert redis_url.startswith("redis://127.0.0.1:")
    assert qdrant_location == ":memory:"
    assert "testcontainers" not in sys.modules

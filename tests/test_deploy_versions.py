"""The server images we deploy stay pinned, and the Qdrant server stays one the pinned qdrant-client supports.

The client compares versions when it connects and only warns (then fails on API paths the server lacks):
docker-compose.yml ran Qdrant 1.12.4 while the client resolved to 1.20. These tests make that drift a
test failure instead.
"""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import yaml
from qdrant_client.common.version_check import is_compatible

from tests.conftest import COMPOSE_FILE, KAFKA_TEST_IMAGE, compose_image

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
# A release tag: 1.2.3, v1.2.3, 7.4.6-alpine; not `latest`, `7`, `7-alpine` or `7.4`.
PINNED_TAG = re.compile(r"v?\d+\.\d+\.\d+(-[a-z0-9.]+)?")
QDRANT_IMAGE = re.compile(r"qdrant/qdrant:(\S+?)[`\"',)]*(?:\s|$)")
OWN_IMAGES = {"streams-dedup", "streams-dedup:local"}  # built from this repository, tagged at deploy time


def compose_services() -> dict[str, dict[str, object]]:
    return yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))["services"]


def manifest_images() -> list[str]:
    """Every `image:` of the Kubernetes manifests (containers, init containers, any depth)."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "image" and isinstance(value, str):
                    found.append(value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            walk(document)
    return found


def qdrant_references() -> dict[str, list[str]]:
    """Each `qdrant/qdrant:TAG` written in docker-compose.yml or under deploy/, by file."""
    files = [COMPOSE_FILE, *sorted(p for p in DEPLOY.rglob("*") if p.is_file())]
    found: dict[str, list[str]] = {}
    for path in files:
        tags = QDRANT_IMAGE.findall(path.read_text(encoding="utf-8"))
        if tags:
            found[str(path.relative_to(ROOT))] = tags
    return found


def test_every_server_image_is_pinned_to_a_release() -> None:
    images = {name: str(service["image"]) for name, service in compose_services().items() if "build" not in service}
    images |= {f"manifest {image}": image for image in manifest_images() if image not in OWN_IMAGES}
    assert {"kafka", "redis", "qdrant"} <= images.keys()
    floating = {name: image for name, image in images.items() if not PINNED_TAG.fullmatch(image.rpartition(":")[2])}
    assert not floating, f"floating image tags (pin a release, e.g. redis:7.4.6-alpine): {floating}"


def test_the_qdrant_server_is_one_the_pinned_client_supports() -> None:
    client = version("qdrant-client")
    major, minor = (int(part) for part in client.split(".")[:2])
    references = qdrant_references()
    assert str(COMPOSE_FILE.relative_to(ROOT)) in references
    assert any(path.startswith("deploy/") for path in references), "deploy/ names no Qdrant server version"
    for path, tags in references.items():
        for tag in tags:
            server = tag.removeprefix("v")
            assert is_compatible(client, server), (
                f"{path}: qdrant/qdrant:{tag} is outside what qdrant-client {client} supports "
                f"({major}.{minor - 1} to {major}.{minor + 1}; the client warns beyond one minor version)"
            )


def test_deploy_names_the_qdrant_server_compose_runs() -> None:
    tags = {tag for found in qdrant_references().values() for tag in found}
    assert tags == {compose_image("qdrant").rpartition(":")[2]}


def test_the_kafka_test_container_runs_the_kafka_release_compose_runs() -> None:
    """Redis and Qdrant containers run compose's own images; Kafka needs Confluent's image of the same release."""
    # testcontainers' KafkaContainer drives Confluent's start scripts; Confluent Platform 7.N ships Apache Kafka 3.N.
    kafka = re.fullmatch(r"apache/kafka:3\.(\d+)\.\d+", compose_image("kafka"))
    confluent = re.fullmatch(r"confluentinc/cp-kafka:7\.(\d+)\.\d+", KAFKA_TEST_IMAGE)
    assert kafka and confluent and kafka[1] == confluent[1], (compose_image("kafka"), KAFKA_TEST_IMAGE)

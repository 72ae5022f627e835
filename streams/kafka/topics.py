"""The topics of the streaming service, created from configuration; safe to repeat.

`dedup.links` is compacted and keyed by document id: the latest verdict of every
document stays forever, which is what replay rebuilds state from. The other
topics carry articles between stages and are deleted by retention.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ClusterMetadata, ConfigResource, NewTopic, ResourceType

from streams.config import Settings

TIMEOUT_S = 30.0
_SILENT = logging.getLogger("streams.kafka.librdkafka")
_SILENT.addHandler(logging.NullHandler())
_SILENT.propagate = False


@dataclass
class CommandClient:
    """librdkafka settings for a command: its log (a line per reconnect) silenced, its errors kept
    to explain a failure in one line."""

    settings: Settings
    errors: list[KafkaError] = field(default_factory=list)

    def config(self, **extra: Any) -> dict[str, Any]:
        return {**self.settings.kafka_client_config(), "logger": _SILENT, "error_cb": self.errors.append, **extra}

    def reach(self, client: AdminClient | Producer) -> ClusterMetadata:
        """The cluster's metadata; RuntimeError as soon as every broker refused, or after TIMEOUT_S."""
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                return client.list_topics(timeout=1.0)
            except KafkaException as exc:
                client.poll(0)  # serves error_cb
                down = any(e.code() == KafkaError._ALL_BROKERS_DOWN for e in self.errors)
                if down or time.monotonic() > deadline:
                    reason = self.first_reason() or exc.args[0].str()
                    raise RuntimeError(
                        f"cannot reach the Kafka broker at {self.settings.kafka_bootstrap}: {reason}"
                    ) from None

    def first_reason(self) -> str | None:
        for error in self.errors:
            if error.code() != KafkaError._ALL_BROKERS_DOWN:
                # "host:port/bootstrap: Connect to ... failed: Connection refused": the address is said once.
                return re.sub(r"^\S+/\S+: ", "", error.str())
        return None


@dataclass(frozen=True)
class TopicState:
    name: str
    action: str
    """`created`, or `exists` for a topic that was already there."""
    partitions: int
    cleanup_policy: str
    problem: str | None = None
    """How an existing topic differs from the configuration, if it does."""


def wanted(settings: Settings) -> dict[str, str]:
    """Every topic of the service and its cleanup policy."""
    names = settings.topics
    policies = {names.links: "compact", names.candidates: "compact"}
    topics = (
        names.raw,
        names.stage_simhash,
        names.stage_semantic,
        names.links,
        names.candidates,
        names.deduped,
        names.rejected,
    )
    return {name: policies.get(name, "delete") for name in topics}


def create_topics(settings: Settings, partitions: int | None = None) -> list[TopicState]:
    """Create the missing topics; report the existing ones and any difference from the configuration."""
    client = CommandClient(settings)
    admin = AdminClient(client.config())
    count = partitions or settings.topics.partitions
    existing = client.reach(admin).topics
    policies = wanted(settings)
    missing = [name for name in policies if name not in existing]
    if missing:
        futures = admin.create_topics(
            [
                NewTopic(
                    name,
                    num_partitions=count,
                    replication_factor=settings.topics.replication_factor,
                    config={"cleanup.policy": policies[name]},
                )
                for name in missing
            ],
            request_timeout=TIMEOUT_S,
        )
        for name, future in futures.items():
            try:
                future.result(TIMEOUT_S)
            except KafkaException as exc:
                raise RuntimeError(f"could not create topic {name}: {exc.args[0].str()}") from None
    states = []
    current = client.reach(admin).topics
    configs = _cleanup_policies(admin, [name for name in policies if name not in missing])
    for name, policy in policies.items():
        have = len(current[name].partitions)
        if name in missing:
            states.append(TopicState(name, "created", have, policy))
            continue
        actual = configs.get(name, "unknown")
        problems = []
        if actual != policy:
            problems.append(f"cleanup.policy is {actual}, configured {policy}")
        if have < count:
            problems.append(f"{have} partitions, configured {count}")
        states.append(TopicState(name, "exists", have, actual, "; ".join(problems) or None))
    return states


def _cleanup_policies(admin: AdminClient, names: list[str]) -> dict[str, str]:
    return {name: entries.get("cleanup.policy", "unknown") for name, entries in _topic_configs(admin, names).items()}


def _topic_configs(admin: AdminClient, names: list[str]) -> dict[str, dict[str, str]]:
    if not names:
        return {}
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name) for name in names])
    configs = {}
    for resource, future in futures.items():
        try:
            entries = future.result(TIMEOUT_S)
        except KafkaException as exc:
            problem = exc.args[0].str()
            raise RuntimeError(f"could not read the configuration of topic {resource.name}: {problem}") from None
        configs[resource.name] = {key: entry.value for key, entry in entries.items() if entry.value is not None}
    return configs


def message_limits(settings: Settings, names: list[str], read: Sequence[str] = ()) -> dict[str, int]:
    """The largest record each topic accepts (its `max.message.bytes`), where the broker says; RuntimeError
    when one of them, or of the topics in `read`, does not exist: a consumer asking for a missing topic has
    the broker create it with its own defaults (one partition, which no `dedup topics create` changes)."""
    client = CommandClient(settings)
    admin = AdminClient(client.config())
    existing = client.reach(admin).topics
    missing = [name for name in dict.fromkeys([*read, *names]) if name not in existing]
    if missing:
        named = f"topic {missing[0]} does" if len(missing) == 1 else f"topics {', '.join(missing)} do"
        raise RuntimeError(f"{named} not exist on the broker: run `dedup topics create` first")
    configs = _topic_configs(admin, names)
    return {
        name: int(entries["max.message.bytes"]) for name, entries in configs.items() if "max.message.bytes" in entries
    }

"""The topics of the streaming service, created from configuration; safe to repeat.

`dedup.links` is compacted and keyed by document id: the latest verdict of every
document stays forever, which is what replay rebuilds state from. The other
topics carry articles between stages and are deleted by retention.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from streams.config import Settings

TIMEOUT_S = 30.0


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
    policies = {names.links: "compact"}
    topics = (names.raw, names.stage_simhash, names.stage_semantic, names.links, names.deduped, names.rejected)
    return {name: policies.get(name, "delete") for name in topics}


def create_topics(settings: Settings, partitions: int | None = None) -> list[TopicState]:
    """Create the missing topics; report the existing ones and any difference from the configuration."""
    admin = AdminClient(settings.kafka_client_config())
    count = partitions or settings.topics.partitions
    existing = admin.list_topics(timeout=TIMEOUT_S).topics
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
    current = admin.list_topics(timeout=TIMEOUT_S).topics
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
    if not names:
        return {}
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name) for name in names])
    policies = {}
    for resource, future in futures.items():
        entries = future.result(TIMEOUT_S)
        policies[resource.name] = entries["cleanup.policy"].value if "cleanup.policy" in entries else "unknown"
    return policies

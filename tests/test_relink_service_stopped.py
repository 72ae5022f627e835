"""A service relink killed after writing Redis, before its records reached the topics.

The relink writes Redis first (its records carry the `seq` Redis draws), then sends its link records to
`dedup.links` and the articles it publishes to `articles.deduped`. Killed in between, it is completed by
running it again. Until then the workers must not decide on that state: a document linked to the unlinked one
would be a link to a document whose record on `dedup.links` still says duplicate (a chain there, and in any
state `dedup replay` rebuilds), and the unlinked article would never reach the indexers. The workers wait, as
they wait for a replay, and say why.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from streams.config import Settings
from streams.core.relink import Label
from streams.evaluation.stack import Stack
from streams.kafka.journal import latest as read_topic
from streams.service.relink import relink_service
from streams.service.resources import Resources
from streams.service.stages import Agent, Outgoing, StageAgent
from streams.stores.redis_store import StateLost
from tests.children import KILLED, in_child
from tests.test_random_replays import _handled
from tests.test_stopped_commands import EDITED_A, T0, TEXT_A, UNLINK_D, _article, _write

CHEAP = ["url", "content", "simhash"]
HEAD = [
    _article("c", "https://c.example.com/1", TEXT_A, T0),
    _article("d", "https://d.example.com/1", EDITED_A, T0 + 60),
]
"""c, and d a SimHash duplicate of it, which a person says is none (`UNLINK_D`)."""
LATER = [_article("e", "https://e.example.com/1", EDITED_A, T0 + 120)]
"""A copy of d's text."""


def _relink_killed(settings: Settings, labels: list[Label], head: Path, sent: bool) -> None:
    """`dedup relink` of `labels`, killed by SIGKILL once Redis is written: before any record is sent, or once
    every one was acknowledged (`sent`), before its mark is removed."""
    from streams.service import relink

    send = relink._send

    def killed(*args: Any) -> None:
        if sent:
            send(*args)
        os.kill(os.getpid(), signal.SIGKILL)

    relink._send = killed  # type: ignore[assignment]
    relink.relink_service(settings, decisions=labels, articles=[head])


def _produced(stack: Stack, sent: list[Outgoing]) -> None:
    producer = Producer({"bootstrap.servers": stack.bootstrap, "linger.ms": 5})
    for record in sent:
        producer.produce(record.topic, record.value, record.key)
    assert producer.flush(30) == 0


@dataclass
class Service:
    stack: Stack
    settings: Settings
    resources: Resources
    agent: StageAgent
    head: Path
    """HEAD's raw articles, where a relink finds d's to publish."""


@pytest.fixture
def service(make_stack: Callable[[str], Stack], tmp_path: Path) -> Iterator[Service]:
    """Stages 1 to 3 in one agent, which has decided HEAD and sent its records."""
    stack = make_stack("url,content,simhash")
    stack.create_topics()
    settings = Settings(stages=CHEAP, simhash={"figure_check": "off"}, redis_url=stack.redis_url,
                        redis_prefix=f"{stack.name}:", kafka_bootstrap=stack.bootstrap,
                        topics=stack.settings().topics)  # fmt: skip
    resources = Resources(settings)
    try:
        agent = resources.stage_agent(Agent.EXACT, Agent.SIMHASH)
        _produced(stack, _handled(agent, [HEAD]))
        yield Service(stack, settings, resources, agent, Path(_write(tmp_path / "head.jsonl", HEAD)))
    finally:
        resources.close()


@pytest.mark.parametrize("sent", [False, True], ids=["before-its-records", "after-its-records"])
def test_the_workers_wait_for_a_relink_killed_after_its_redis_writes_until_it_is_run_again(
    service: Service, sent: bool
) -> None:
    stack, settings, agent, head_file = service.stack, service.settings, service.agent, service.head
    assert in_child(_relink_killed, settings, UNLINK_D, head_file, sent) == KILLED
    with pytest.raises(StateLost, match=r"relink.*run the same relink again"):
        _handled(agent, [LATER])
    with pytest.raises(ValueError, match=r'another `dedup relink`.*run it again first.*"a":"d","b":"c"'):
        relink_service(settings, decisions=[Label("d", "c", True)], articles=[head_file])
    relink_service(settings, decisions=UNLINK_D, articles=[head_file])
    _produced(stack, _handled(agent, [LATER]))
    latest = read_topic(settings, settings.topics.links).records
    verdicts = {doc: (r["verdict"], r["canonical_id"]) for doc, r in latest.items()}
    assert verdicts == {"c": ("unique", "c"), "d": ("unlinked", "d"), "e": ("duplicate", "d")}
    assert sorted(r["id"] for r in stack.read(settings.topics.deduped, until=2, timeout=30)) == ["c", "d"]


def test_a_relink_refused_while_a_replay_restores_leaves_the_workers_free_once_it_is_done(service: Service) -> None:
    """A relink run while a `dedup replay` has not completed is refused as the workers are (only the replay
    writes): nothing of it was written, so its mark must not stay to hold the workers once the replay is done."""
    from streams.kafka.replay import Restorer

    settings = service.settings
    restorer = Restorer(service.resources.redis, settings.redis_prefix, None, settings.retention, 30.0,
                        settings.redis_bucket_bits, settings.simhash.band_layout)  # fmt: skip
    with restorer.owned():
        restorer.begin()
        with pytest.raises(StateLost, match="replay"):
            relink_service(settings, decisions=UNLINK_D, articles=[service.head])
        restorer.done()
    later = _handled(service.agent, [LATER])
    assert [(o.key, o.topic) for o in later if o.topic == settings.topics.links] == [(b"e", settings.topics.links)]

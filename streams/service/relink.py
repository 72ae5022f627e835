"""`dedup relink` for the streaming service: Redis, the vector store and Kafka from the usual settings.

The same plan as for files (streams.core.relink), made from the service's journal: the
latest record of every document on `dedup.links` and the candidate records on
`dedup.candidates` (`streams.kafka.journal.latest`), and Redis's exact-key index.
Applying it, the relink writes as the workers do:

1. under the registration lease, on a snapshot read under it, every change is checked
   (a verdict that moved since the topics were read is `Stale`: the plan is made again
   from a fresh read, a few times), then all of them are written as the workers write a
   batch (`RedisStateStore.apply`: idempotent rounds of one-slot scripts, each fenced by the
   lease's epoch): keys and band sets, then verdicts (with `seq` drawn from Redis's verdict
   sequence), then group sizes; a relink stopped between rounds is made whole by running it again;
2. the vectors of new canonicals are written once their verdicts are recorded (and those
   of canonicals linked back removed), still under the lease;
3. the new link records (with their `seq`) go to `dedup.links` and the documents it
   publishes to `articles.deduped`, and the relink reports success only once the broker
   has acknowledged every one.

Stopped after 1, the same relink run again finds its changes made in Redis (the topic
does not have them yet, so it plans them again) and only sends their records (and
vectors) again. Until it has, the workers wait: the relink's mark (`relink_key`, its
decisions or cut-off) is set before its writes in 1 and removed once 3 is
acknowledged, and a batch that reads it is refused (`StateLost`), as is a relink of other
decisions. With `DEDUP_QDRANT_URL=embedded` the vector shard is single-process:
stop the workers of that host first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import KafkaError, Message, Producer

from streams.config import Settings
from streams.core.model import Link, ModelId, Stage
from streams.core.ports import Reads, VectorStore
from streams.core.relink import (
    Change,
    Cutoff,
    Label,
    Plan,
    Stale,
    apply,
    change_record,
    check,
    likeness,
    plan_cutoff,
    plan_decisions,
    recorded,
    relink_command,
)
from streams.kafka.topics import CommandClient
from streams.records.article import Featurizer
from streams.records.output import now_rfc3339
from streams.runner.relink import PublishedArticles as FileArticles
from streams.runner.relink import RelinkResult
from streams.stores.batched import BatchedState
from streams.stores.redis_lock import LeaseLost, RedisLock
from streams.stores.redis_store import RedisStateStore, StaleSnapshot, StateLost
from streams.vectors.batched import BatchedVectors

log = logging.getLogger(__name__)

ATTEMPTS = 3
"""Plans made from a fresh read of the topics before a relink that keeps finding the state moved gives up."""
ACK_TIMEOUT_S = 60.0

_JSON = orjson.OPT_SERIALIZE_NUMPY


def relink_service(
    settings: Settings,
    *,
    decisions: Iterable[Label] | None = None,
    cutoff: Cutoff | None = None,
    dry_run: bool = False,
    articles: Sequence[Path] = (),
) -> RelinkResult:
    """Apply `decisions` (labels) or a `cutoff` to the streaming service's state and topics.

    `articles`: files of the crawl's raw articles (or of deduped ones), for a document to publish that
    `articles.deduped` does not hold (a SimHash duplicate is published nowhere)."""
    from streams.service.resources import recorded_seq, redis_client, vector_store

    if (decisions is None) == (cutoff is None):
        raise ValueError("give decisions (labels) or a cut-off, one of them")
    labels = list(decisions) if decisions is not None else None
    client = redis_client(settings)
    state = RedisStateStore(
        client,
        settings.redis_prefix,
        settings.redis_bucket_bits,
        settings.retention,
        band_layout=settings.simhash.band_layout,
        recorded_seq=partial(recorded_seq, settings),
        relinking=True,
    )
    command = orjson.dumps(relink_command(labels, cutoff)).decode()
    vectors: VectorStore | None = None
    try:
        stopped = None if dry_run else client.get(state.relink_key)
        if stopped is not None and stopped != command:
            said = stopped if len(stopped) <= 500 else stopped[:500] + "..."
            raise ValueError(
                f"another `dedup relink` wrote the Redis state and was stopped before its records reached the topics"
                f" (the workers wait for it): run it again first, then this one. Its decisions or cut-off, as"
                f" {state.relink_key} holds them: {said}"
            )
        for attempt in range(1, ATTEMPTS + 1):
            plan = _plan(settings, state, labels, cutoff, articles)
            result = RelinkResult(plan)
            if dry_run:
                return result
            if not plan.changes:
                # This very relink, stopped once its records were sent, or a write refused (a canonical that is no
                # canonical any more) and planned again to nothing: its mark goes, the workers go on.
                if client.get(state.relink_key) == command:
                    client.delete(state.relink_key)
                return result
            if vectors is None and (settings.qdrant_url or Stage.SEMANTIC in settings.stages):
                vectors = vector_store(settings)
            try:
                standing = _write(settings, client, state, vectors, plan, result, command)
            except (Stale, StaleSnapshot, LeaseLost) as exc:
                if attempt == ATTEMPTS:
                    raise Stale(f"the stream kept moving while relinking ({exc}); run the relink again") from None
                log.info("relink planned again: %s", exc)
                continue
            except StateLost:
                # Refused before its first write, as the workers are (a replay under way, a lost state): unless an
                # earlier run of it wrote, nothing of it is there for the workers to wait for.
                if stopped is None and attempt == 1:
                    client.delete(state.relink_key)
                raise
            _send(settings, plan.changes, standing, result)
            client.delete(state.relink_key)  # every record is on the topics: the workers go on
            return result
        raise AssertionError("unreachable")
    finally:
        client.close()
        close = getattr(vectors, "close", None)
        if close is not None:
            close()


def _plan(
    settings: Settings,
    state: RedisStateStore,
    labels: list[Label] | None,
    cutoff: Cutoff | None,
    articles: Sequence[Path] = (),
) -> Plan:
    """The plan from the topics read to their end now."""
    from streams.kafka.journal import latest

    links = latest_links(settings)
    candidates = latest(settings, settings.topics.candidates).records
    # Decision order: Redis's verdict sequence (records without one, older than it, first).
    order = sorted(links.values(), key=lambda record: record.get("seq") or 0)
    published = PublishedArticles(settings, links, articles)
    if labels is not None:
        return plan_decisions(order, labels, state.exact_lookup, candidates.get, published, state.verdict_of)
    assert cutoff is not None
    return plan_cutoff(order, cutoff, state.exact_lookup, candidates.get, published, state.verdict_of)


RELINK_FIELDS = ("decided_by", "reason", "previous", "keys")


def latest_links(settings: Settings) -> dict[str, dict[str, Any]]:
    """The latest record of every document on the links topic, with what its latest relink said; of a verdict
    sent again (`streams.kafka.replay.sent_again`: a redelivered document, found at another URL or dated
    later), the first record, as `dedup replay` keeps it: it says what deciding claimed (its URL key, its
    date), which the plan moves and stamps, and which the relink's record carries for replay.

    A worker that meets a relinked document again (a crawler sent it again) re-sends its verdict as a
    plain record: the same verdict and `seq`, without `decided_by`, `reason`, `previous` and `keys`.
    It is the latest record then; the relink's fields are taken from the relink's record. So is the
    cascade's `reason` (the figure check's, the fact check's, the group cap's): the state keeps none, and a
    redelivered document's verdict is sent again without it. And the `stages` of the document's first record
    of that verdict: a re-sent one says those of the deploy that sent it, which claimed nothing for it.

    A record `dedup replay` skips is skipped here too, and logged: the state holds nothing of it, and on a
    compacted topic it stays, so planning from it would refuse every relink for good.
    """
    from streams.kafka.journal import Position, read_to_end
    from streams.kafka.replay import UNREADABLE, read_link, sent_again

    topic = settings.topics.links
    last: dict[str, tuple[Position, dict[str, Any]]] = {}
    links: dict[str, Link] = {}
    """The link of each document's record in `last`."""
    relinked: dict[str, tuple[Position, dict[str, Any]]] = {}
    reasoned: dict[str, tuple[Position, dict[str, Any]]] = {}
    firsts: dict[str, tuple[Position, dict[str, Any]]] = {}
    for message in read_to_end(settings, topic):
        partition, offset = message.partition(), message.offset()
        try:
            record, recorded, _ = read_link(message.value())
        except UNREADABLE as exc:
            log.warning(
                "%s[%s]@%s skipped, as replay skips it: %s: %s", topic, partition, offset, type(exc).__name__, exc
            )
            continue
        doc_id = recorded.link.doc_id
        position = Position(partition, offset, recorded.link.seq)
        later = doc_id not in last or position.newer_than(last[doc_id][0])
        if later and not (doc_id in links and sent_again(recorded.link, links[doc_id])):
            last[doc_id], links[doc_id] = (position, record), recorded.link
        for kept, wanted in ((relinked, "decided_by" in record), (reasoned, "reason" in record)):
            if wanted and (doc_id not in kept or position.newer_than(kept[doc_id][0])):
                kept[doc_id] = (position, record)
        if doc_id not in firsts or firsts[doc_id][0].newer_than(position):
            firsts[doc_id] = (position, record)
    found = {}
    same = ("verdict", "canonical_id", "stage")
    for doc_id, (_, record) in last.items():
        relink = relinked.get(doc_id, (None, None))[1]
        if "decided_by" not in record and relink is not None and _same(record, relink, same):
            record = {**record, **{name: relink[name] for name in RELINK_FIELDS if name in relink}}
        first = firsts[doc_id][1]
        if "decided_by" not in record and record.get("stages") != first.get("stages") and _same(record, first, same):
            record = {key: value for key, value in record.items() if key != "stages"}  # a re-sent verdict's deploy
            record |= {"stages": first["stages"]} if "stages" in first else {}  # claimed nothing: the first did
        said = reasoned.get(doc_id, (None, None))[1]
        if "reason" not in record and said is not None and _same(record, said, same):
            record = {**record, "reason": said["reason"]}
        found[doc_id] = record
    return found


def _same(record: dict[str, Any], other: dict[str, Any], fields: tuple[str, ...]) -> bool:
    return all(record[name] == other[name] for name in fields)


def _write(
    settings: Settings,
    client: Any,
    state: RedisStateStore,
    vectors: VectorStore | None,
    plan: Plan,
    result: RelinkResult,
    command: str,
) -> dict[str, Link]:
    """Check and write every change under the lease; the verdict that stands for each document, with its seq."""
    lock = RedisLock(client, f"{settings.redis_prefix}lock:register", settings.worker.lock_ttl_s, fence=state.fence)
    batched = BatchedState(state)
    held = BatchedVectors(vectors) if vectors is not None else None
    ids = [change.doc_id for change in plan.changes]
    keys = [key for change in plan.changes for key in _keys(change)]
    with lock.held() as lease:
        batched.warm(Reads(doc_ids=ids, exact_keys=keys, band_queries=[]))
        todo = check(plan.changes, batched)
        result.made = apply(todo, batched, held, checked=True, retention=settings.retention)
        client.set(state.relink_key, command)  # before the state's writes: kept until the topics have the records
        made = batched.flush(lease, exact=True)
        if held is not None:
            held.flush(set(made))
    # Changes found made already (a relink stopped before its records were sent): their vectors once more.
    done_now = {id(change) for change in todo}
    again = [change for change in plan.changes if id(change) not in done_now]
    if again and vectors is not None:
        for change in again:
            _vectors_again(change, vectors)
    standing = state.verdicts_of([change.doc_id for change in again])
    return {**{doc_id: link for doc_id, link in standing.items() if link is not None}, **made}


def _keys(change: Change) -> list[str]:
    from streams.core.cascade import CONTENT_KEY, URL_KEY

    return [URL_KEY + change.record["url_hash"], CONTENT_KEY + change.record["content_hash"]]


def _vectors_again(change: Change, vectors: VectorStore) -> None:
    """What the change did to the vectors, done again (both are idempotent)."""
    again = recorded(change)
    if change.link.verdict.canonical and again.vector is not None and change.link.model:
        name, _, version = change.link.model.partition("@")
        model = ModelId(name, version, len(again.vector))
        vectors.add(model, change.doc_id, again.vector, again.published_at, again.language, again.facts)
    elif change.previous.verdict.canonical and change.previous.model:
        name, _, version = change.previous.model.partition("@")
        vectors.remove(ModelId(name, version, 0), change.doc_id)


def _send(settings: Settings, changes: list[Change], standing: dict[str, Link], result: RelinkResult) -> None:
    """Produce the link records (with seq) and the published articles; RuntimeError unless all are acknowledged."""
    client = CommandClient(settings)
    producer = Producer(client.config(**{"enable.idempotence": True, "acks": "all", "linger.ms": 5}))
    client.reach(producer)
    failed: list[str] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            failed.append(f"{message.topic()} {message.key()!r}: {error.str()}")

    linked_at = now_rfc3339()
    for change in changes:
        seq = standing[change.doc_id].seq if change.doc_id in standing else None
        key = change.doc_id.encode()
        record = change_record(change, linked_at, seq)
        _produce(producer, settings.topics.links, key, orjson.dumps(record, option=_JSON), delivered)
        result.written += 1
        if change.article is not None:
            _produce(producer, settings.topics.deduped, key, orjson.dumps(change.article), delivered)
            result.published += 1
    remaining = producer.flush(ACK_TIMEOUT_S)
    if remaining or failed:
        why = failed[0] if failed else f"{remaining} records unacknowledged after {ACK_TIMEOUT_S:.0f} s"
        raise RuntimeError(
            f"the state is relinked but not every record reached the broker ({why}):"
            " run the same relink again to send them"
        )


def _produce(producer: Producer, topic: str, key: bytes, value: bytes, on_delivery: Callable[..., None]) -> None:
    while True:
        try:
            producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
            return
        except BufferError:  # the local queue is full: let deliveries drain it
            producer.poll(0.5)


class PublishedArticles:
    """Articles published before (`articles.deduped`), read on first need: for a document to publish
    whose candidate record has no article (one the semantic stage never embedded, or too large).

    Of each document, the article its verdict was given to: the one published with the features of the
    verdict's record in `links` (`latest_links`, which keeps a verdict sent again by its first record,
    `streams.kafka.replay.sent_again`). A worker publishes a redelivered document again as received (found
    at a mirror's URL, dated later) under the verdict it had, so the latest article may be one deciding
    never saw; a relink publishes the article as decided, with the features its own link record carries.
    Only where `articles.deduped` no longer holds that article (its retention) is the latest one of the same
    content published instead, and where it holds none of that content, nothing is (the relink is refused:
    `streams.core.relink.likeness`).
    """

    def __init__(self, settings: Settings, links: dict[str, dict[str, Any]], files: Sequence[Path] = ()) -> None:
        self._settings = settings
        self._links = links
        self._found: dict[str, dict[str, Any]] | None = None
        self._files = FileArticles(files, links.get, Featurizer(settings)) if files else None
        """`--articles`: the crawl's raw files (featurised as the worker did) or deduped ones, matched alike."""

    def __call__(self, doc_id: str) -> dict[str, Any] | None:
        if self._found is None:
            self._found = self._read()
        article = self._found.get(doc_id)
        if article is not None and self._likeness(article) == 2:  # as decided
            return article
        given = self._files(doc_id) if self._files is not None else None
        best = max((a for a in (article, given) if a is not None), key=self._likeness, default=None)
        return best if best is not None and self._likeness(best) > 0 else None

    def _read(self) -> dict[str, dict[str, Any]]:
        from streams.kafka.journal import latest

        return latest(self._settings, self._settings.topics.deduped, again=self._again).records

    def _again(self, later: dict[str, Any], kept: dict[str, Any]) -> bool:
        """Whether `kept` stands against a `later` article of its document: it is more like the one decided."""
        return self._likeness(later) < self._likeness(kept)

    def _likeness(self, article: dict[str, Any]) -> int:
        doc_id = article.get("id")
        return likeness(article, self._links.get(doc_id) if isinstance(doc_id, str) else None)

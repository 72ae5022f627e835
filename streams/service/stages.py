"""What each stage agent does with one batch of records: records in, records out, no Kafka.

As in arroyo's strategies, the Kafka side (`streams.service.app`) only moves
bytes: it takes a batch from a topic, hands it to `StageAgent.handle`, sends
what comes back and commits the batch once the broker has acknowledged every
record sent. Everything that decides sits here, over the same `Cascade` that
`dedup run` uses, so it is tested without a broker.

The rule for documents in flight (docs/streaming.md): an agent that is not the
last only links documents to canonicals that already exist and passes the rest
on; the last agent decides with the whole cascade, for a whole batch under the
registration lease. Only it makes canonicals, and each time it does, it has seen
every canonical made before. Every write is fenced by the lease it was decided
under, no model runs while the lease is held, and a batch's vectors reach the
vector store only once its verdicts are recorded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import numpy as np
import orjson

from streams.config import Settings
from streams.core.cascade import Cascade, Decision
from streams.core.model import Document, Link, Neighbour, Stage
from streams.core.ports import Embedder
from streams.features.facts import payload_facts
from streams.records.article import Featurizer, Rejection
from streams.records.output import candidate_record, deduped_record, link_record
from streams.records.stage import read_stage_record, rejected_record, stage_record
from streams.service import metrics
from streams.stores.batched import BatchedState
from streams.stores.redis_lock import RedisLock
from streams.vectors.batched import BatchedVectors

_FAR = 1 << 62
"""Beyond any `published_at`: a search over all of a model's vectors."""

log = logging.getLogger(__name__)

_JSON = orjson.OPT_SERIALIZE_NUMPY


class Agent(StrEnum):
    """The stage agents, in cascade order, each reading its own topic."""

    EXACT = "exact"
    SIMHASH = "simhash"
    SEMANTIC = "semantic"


AGENT_STAGES: dict[Agent, tuple[Stage, ...]] = {
    Agent.EXACT: (Stage.URL, Stage.CONTENT),
    Agent.SIMHASH: (Stage.SIMHASH,),
    Agent.SEMANTIC: (Stage.SEMANTIC,),
}


def pipeline(settings: Settings) -> list[Agent]:
    """The agents the configured stages need, in order. The exact agent is always the entry:
    it parses raw articles, even when the URL and content stages are off."""
    return [
        agent
        for agent in Agent
        if agent is Agent.EXACT or any(stage in settings.stages for stage in AGENT_STAGES[agent])
    ]


def hops(settings: Settings, agents: Sequence[Agent]) -> list[tuple[Agent, ...]]:
    """The agents one process runs, grouped into hops: agents next to each other in the pipeline
    share a hop (one input topic, nothing written to the topic between them), except the semantic
    agent, which keeps its own topic, so a verdict of stages 1 to 3 never waits for the model and
    the model gets batches of its own. Agents in different processes still pass documents on."""
    chain = pipeline(settings)
    grouped: list[list[Agent]] = []
    for agent in sorted(set(agents), key=chain.index):
        if grouped and agent is not Agent.SEMANTIC and chain.index(grouped[-1][-1]) + 1 == chain.index(agent):
            grouped[-1].append(agent)
        else:
            grouped.append([agent])
    return [tuple(hop) for hop in grouped]


def input_topic(settings: Settings, agent: Agent) -> str:
    topics = settings.topics
    return {Agent.EXACT: topics.raw, Agent.SIMHASH: topics.stage_simhash, Agent.SEMANTIC: topics.stage_semantic}[agent]


Decided = tuple[Document, int, Decision | None, np.ndarray | None]
"""A document, its arrival time (ms), its decision (None: pass it on) and its vector if it has one."""


@dataclass(frozen=True, slots=True)
class Incoming:
    """One record taken from a topic, and where it came from."""

    value: bytes
    key: bytes | None
    timestamp_ms: int
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Outgoing:
    topic: str
    key: bytes | None
    value: bytes


class StageAgent:
    """The decisions of one hop (one stage agent, or several that share a process) over batches
    of its input topic."""

    def __init__(
        self,
        settings: Settings,
        hop: Sequence[Agent],
        cascade: Cascade,
        state: BatchedState,
        lock: RedisLock,
        embedder: Embedder | None = None,
        vectors: BatchedVectors | None = None,
    ) -> None:
        """`cascade` must decide against `state` and `vectors` (or wrappers of them): the agent
        warms and flushes both. `hop`: consecutive agents of the pipeline (see `hops`)."""
        chain = pipeline(settings)
        for agent in hop:
            if agent not in chain:
                raise ValueError(f"the {agent} agent has nothing to do: its stages are not enabled ({settings.stages})")
        first, last = chain.index(hop[0]), chain.index(hop[-1])
        if list(hop) != chain[first : last + 1]:
            raise ValueError(f"agents {', '.join(hop)} are not consecutive in the pipeline {', '.join(chain)}")
        self.agent = hop[0]
        """The entry agent: its input topic, and what it reads there (raw articles or stage records)."""
        self.name = "+".join(hop)
        """The metrics label and agent name of the hop (`exact+simhash` when fused)."""
        self._settings = settings
        self._cascade = cascade
        self._state = state
        self._lock = lock
        self._embedder = embedder
        self._vectors = vectors
        self._max_bytes = settings.worker.max_message_bytes
        self.final = hop[-1] is chain[-1]
        self._next = None if self.final else input_topic(settings, chain[last + 1])
        self._through = AGENT_STAGES[hop[-1]][-1]
        self._featurizer = Featurizer(settings) if self.agent is Agent.EXACT else None
        if self.final and cascade.semantic and (embedder is None or vectors is None):
            raise ValueError("the semantic agent needs an embedder and a vector store")

    def handle(self, batch: Sequence[Incoming]) -> list[Outgoing]:
        """Verdicts, forwarded documents and rejections for one batch, in input order per kind.

        Bad records become rejections; a store or model failure raises, and the caller
        retries the whole batch: decisions are idempotent, so a retry repeats verdicts.
        """
        started = time.perf_counter()
        metrics.BATCH_SIZE.labels(self.name).observe(len(batch))
        out: list[Outgoing] = []
        docs: list[tuple[Document, int]] = []
        for record, parsed in zip(batch, self._read_all(batch), strict=True):
            if isinstance(parsed, Rejection):
                out.append(self._rejection(parsed, record))
            else:
                docs.append(parsed)
        decided: list[Decided] = []
        try:
            if docs:
                decided = self._decide_all(docs) if self.final else self._resolve_all(docs)
        finally:
            self._state.reset()  # a failed batch leaves no half-written snapshot behind
            if self._vectors is not None:
                self._vectors.reset()
        for doc, received, decision, vector in decided:
            if decision is None:
                out.append(self._forward(doc, received))
            else:
                out.extend(self._verdict(decision.version or doc, received, decision, vector))
        metrics.BATCH_SECONDS.labels(self.name).observe(time.perf_counter() - started)
        return out

    def _read_all(self, batch: Sequence[Incoming]) -> list[tuple[Document, int] | Rejection]:
        """Every record read, in order; never raises: whatever is wrong with a record becomes its rejection.

        Raw articles are featurised a batch at a time (`Featurizer.parse_batch`), one call per
        second of broker time: the features of an article without `published_at` depend on
        its ingest time, which is its raw record's broker timestamp, so a redelivered record
        gets the same features whatever batch it lands in.
        """
        if self._featurizer is None:
            return [self._read(record) for record in batch]
        by_second: dict[int, list[int]] = {}
        for index, record in enumerate(batch):
            by_second.setdefault(record.timestamp_ms // 1000, []).append(index)
        read: dict[int, tuple[Document, int] | Rejection] = {}
        for second, indexes in by_second.items():
            try:
                parsed = self._featurizer.parse_batch([batch[i].value for i in indexes], ingest_time=second)
            except Exception:  # unforeseen: each record alone, so only the one at fault is rejected
                read.update((i, self._read(batch[i])) for i in indexes)
                continue
            for i, doc in zip(indexes, parsed, strict=True):
                read[i] = doc if isinstance(doc, Rejection) else (doc, batch[i].timestamp_ms)
        return [read[i] for i in range(len(batch))]

    def _read(self, record: Incoming) -> tuple[Document, int] | Rejection:
        """One record; never raises."""
        try:
            if self._featurizer is not None:
                parsed = self._featurizer.parse(record.value, ingest_time=record.timestamp_ms // 1000)
                return parsed if isinstance(parsed, Rejection) else (parsed, record.timestamp_ms)
            return read_stage_record(record.value)
        except Exception as exc:  # the input boundary: no record may stop the worker
            return Rejection(f"unreadable {self.agent} record: {type(exc).__name__}: {exc}", record.value)

    def _forward(self, doc: Document, received: int) -> Outgoing:
        """The document, passed on to the next agent; rejected whole if the broker cannot take it
        (it has no verdict yet, so nothing else of it is published)."""
        assert self._next is not None
        value = stage_record(doc, received)
        if len(value) > self._max_bytes:
            reason = (
                f"stage record for {self._next} is {len(value):,} bytes, above the broker's limit of"
                f" {self._max_bytes:,} (worker.max_message_bytes); the document was not decided"
            )
            return self._rejection(Rejection(reason, orjson.dumps(doc.article)), None, doc.doc_id.encode())
        metrics.FORWARDED.labels(self.name).inc()
        return Outgoing(self._next, doc.doc_id.encode(), value)

    def _resolve_all(self, docs: list[tuple[Document, int]]) -> list[Decided]:
        """An agent before the last: link what the state knows, on a snapshot taken without the lease.

        A redelivered canonical that was embedded is passed on rather than answered here:
        only the last agent can send its link with its vector again (compaction keeps the
        latest link of a document, and replay needs the vector in it).
        """
        cascade = self._cascade
        self._state.warm(cascade.reads([doc for doc, _ in docs], self._through))
        resolved = []
        for doc, received in docs:
            self._see(doc)
            decision = cascade.resolve(doc, self._through)
            if decision is not None and decision.repeated and _embedded_canonical(decision.link):
                decision = None
            resolved.append((doc, received, decision))
        with self._lock.held() as lease:
            standing = self._state.flush(lease)
        return [(doc, received, _standing(decision, standing), None) for doc, received, decision in resolved]

    def _decide_all(self, docs: list[tuple[Document, int]]) -> list[Decided]:
        """The last stage: every document decided by the whole cascade, the batch under the lease.

        No model runs under the lease: vectors are computed before taking it, for the
        documents the state says will need one (leaving out, at first, copies of a
        document earlier in the batch: stages 1 to 3 will most likely link them). If a
        document turns out to need a vector it does not have, the batch's decisions are
        dropped, the lease released, every document still needing a vector embedded,
        and the batch decided again. The write is fenced by the lease; the batch's new
        vectors reach the vector store after its verdicts are recorded, still under it.

        A redelivered canonical that this model embedded is embedded again with the rest, before
        the lease, and its vector held like a new canonical's: the documents after it in the batch
        search it, and it is written with the batch's vectors (its first attempt may have died
        between Redis and the store). Written only after the batch was decided, a translation
        redelivered behind it was made a second canonical; and one found decided only under the
        lease (another agent recorded it meanwhile, then died) kept the vector it was embedded
        with out of the store for good.
        """
        cascade = self._cascade
        vectors: dict[tuple[str, str], np.ndarray] = {}
        skip_copies = True
        short: list[Document] = []
        while True:
            if cascade.semantic:
                wanted = self._wanted(docs, vectors, skip_copies)
                vectors.update(self._embed([*wanted, *(doc for doc in short if doc not in wanted)]))
            with self._lock.held() as lease:
                self._state.warm(cascade.reads([doc for doc, _ in docs]))
                decided = []
                again: set[str] = set()
                for doc, received in docs:
                    self._see(doc)
                    vector = vectors.get(doc.identity)
                    if vector is None and cascade.needs_vector(doc):
                        short = [doc]  # embedded next round whatever the snapshot says: no livelock
                        break
                    decision = cascade.decide(doc, vector)
                    if decision.repeated and self._embedded_here(decision.link):
                        if vector is None:  # decided by another agent since the snapshot
                            short = [doc]
                            break
                        again.add(self._hold(doc, decision, vector))
                    decided.append((doc, received, decision, vector))
                else:
                    standing = self._state.flush(lease, exact=True)
                    if self._vectors is not None:
                        self._vectors.flush(set(standing) | again)
                    break
                self._state.reset()
                if self._vectors is not None:
                    self._vectors.reset()
            metrics.EMBED_RETRIES.inc()
            skip_copies = False
        return [(doc, got, _standing(decision, standing), vector) for doc, got, decision, vector in decided]

    def _embedded_here(self, link: Link) -> bool:
        """Whether `link` is a canonical's that this agent's model embedded. A redelivered one's link is sent
        again with its vector (compaction keeps the latest link, and replay rebuilds the vector from it) and
        its vector written again. A deploy without the semantic stage, or with another model, sends the link
        without one (the record before it still carries it)."""
        model = str(self._cascade.model) if self._embedder is not None else None
        return _embedded_by(link, model)

    def _hold(self, doc: Document, decision: Decision, vector: np.ndarray) -> str:
        """Hold a redelivered canonical's vector with the batch's new ones (searched by the rest of the batch,
        written once the batch is recorded); its id."""
        model = self._cascade.model
        assert self._vectors is not None and model is not None  # a cascade with vectors has a model
        doc_id = (decision.version or doc).doc_id
        # Dated as it was decided, not as it came again: a crawler's re-send dated later, written with its date,
        # moved the canonical's window (a translation days later was linked to it, as `dedup run` and a replay,
        # which keep its first date, never do). Its stored vector says the first date; a vector never written (the
        # worker died between Redis and the store) has only the redelivered record's, the same record as a rule.
        stored = self._vectors.nearest_between(model, vector, -_FAR, _FAR, doc.language, True)
        published_at = stored.published_at if stored is not None and stored.doc_id == doc_id else doc.published_at
        self._vectors.add(model, doc_id, vector, published_at, doc.language, payload_facts(doc.text))
        return doc_id

    def _see(self, doc: Document) -> None:
        """Decide `doc` at the stream's time with it in (`BatchedState.see`), as `dedup run` does; a redelivery
        (its verdict stands) moves no clock, since it writes nothing that would move it."""
        if self._cascade.standing(doc) is None:
            self._state.see(doc.published_at)

    def _wanted(
        self, docs: list[tuple[Document, int]], have: dict[tuple[str, str], np.ndarray], skip_copies: bool
    ) -> list[Document]:
        """Documents to embed before taking the lease, judged on a snapshot read without it."""
        cascade = self._cascade
        self._state.warm(cascade.reads([doc for doc, _ in docs]))
        wanted: list[Document] = []
        for doc, _ in docs:
            if doc.identity in have or (skip_copies and any(cascade.would_link(doc, earlier) for earlier in wanted)):
                continue
            if cascade.needs_vector(doc) or self._redelivered_canonical(doc):
                wanted.append(doc)
        self._state.reset()
        return wanted

    def _redelivered_canonical(self, doc: Document) -> bool:
        """Whether the snapshot holds `doc` as a canonical this model embedded (its vector is written again)."""
        prior = self._cascade.standing(doc)
        return prior is not None and self._embedded_here(prior)

    def _embed(self, docs: list[Document]) -> dict[tuple[str, str], np.ndarray]:
        if not docs:
            return {}
        assert self._embedder is not None
        size = self._settings.semantic.batch_size
        found: dict[tuple[str, str], np.ndarray] = {}
        for start in range(0, len(docs), size):
            chunk = docs[start : start + size]
            metrics.EMBED_BATCH.observe(len(chunk))
            for doc, vector in zip(chunk, self._embedder.embed([d.text for d in chunk]), strict=True):
                found[doc.identity] = vector
        return found

    def _verdict(
        self, doc: Document, received_ms: int, decision: Decision, vector: np.ndarray | None
    ) -> list[Outgoing]:
        """The link, and the article itself when it is published. A redelivered document's
        records are sent again: the first attempt may have died before the broker had them."""
        link = decision.link
        topics = self._settings.topics
        key = doc.doc_id.encode()
        record = link_record(link, doc, vector, stages=self._settings.stages)
        out = [Outgoing(topics.links, key, orjson.dumps(record, option=_JSON))]
        if link.publishes:
            out.append(Outgoing(topics.deduped, key, orjson.dumps(deduped_record(link, doc))))
        if decision.candidates is not None and vector is not None and not decision.repeated:
            out.append(Outgoing(topics.candidates, key, self._candidates(link, doc, vector, decision.candidates)))
        if decision.repeated:
            metrics.REPEATED.labels(self.name).inc()
            return out
        metrics.VERDICTS.labels(link.stage or "none", link.verdict).inc()
        metrics.LATENCY.observe(max(0.0, time.time() - received_ms / 1000))
        if link.stage is Stage.SIMHASH and link.score is not None:
            metrics.SIMHASH_DISTANCE.observe(link.score)
        elif link.stage is Stage.SEMANTIC and link.score is not None:
            metrics.COSINE.observe(link.score)
        if decision.group_size is not None:
            metrics.GROUP_SIZE.observe(decision.group_size)
        return out

    def _candidates(self, link: Link, doc: Document, vector: np.ndarray, neighbours: tuple[Neighbour, ...]) -> bytes:
        """The candidate record; without the article when that would not fit what the broker accepts
        (the pairs and the text still serve calibration)."""
        chars = self._settings.semantic.candidate_text_chars
        record = candidate_record(link, doc, vector, neighbours, str(self._cascade.model), chars)
        value = orjson.dumps(record, option=_JSON)
        if len(value) > self._max_bytes:
            del record["article"]
            value = orjson.dumps(record, option=_JSON)
        return value

    def _rejection(self, rejection: Rejection, record: Incoming | None, key: bytes | None = None) -> Outgoing:
        """An `articles.rejected` record; `record` None for a document rejected after it was parsed. Counted
        (`dedup_rejected_total`) once the broker has it, not here: a retried batch decides it again."""
        origin: dict[str, Any] = {"agent": self.name}
        if record is not None:
            origin.update(topic=record.topic, partition=record.partition, offset=record.offset)
            key = record.key
        value = rejected_record(rejection.reason, rejection.raw, origin, self._max_bytes)
        return Outgoing(self._settings.topics.rejected, key, value)


def _embedded_canonical(link: Link) -> bool:
    return link.verdict.canonical and link.model is not None


def _embedded_by(link: Link, model: str | None) -> bool:
    """Whether the link is a canonical's that `model` (`name@version`; None: no embedder) embedded."""
    return _embedded_canonical(link) and link.model == model


def _standing(decision: Decision | None, standing: dict[str, Link]) -> Decision | None:
    """The decision with its recorded sequence number, or the verdict recorded first by another agent."""
    if decision is None:
        return None
    stood = standing.get(decision.link.doc_id)
    if stood is None:
        return decision
    if decision.repeated or stood != decision.link:
        return replace(decision, link=stood, repeated=True, group_size=None)
    return replace(decision, link=stood)

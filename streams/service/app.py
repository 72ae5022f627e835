"""The streaming worker: faust agents that move records between topics and `StageAgent`.

Each agent feeds its topic's records to a `BatchPipeline` (streams/kafka/pipeline.py): a batch is
what arrived while the previous one was decided (at most `worker.batch_size`), decided in a thread
(Redis calls and the model block; the event loop keeps heartbeating); its outputs are sent while
the next batch is decided, and its records are acknowledged only once the broker has acknowledged
every output, and only acknowledged offsets are committed: at-least-once, and a record
redelivered after a crash gets the verdict it already had.

Deciding and sending are one unit: a batch that fails on a store, the model or
the broker (a timeout, an outage) is decided and sent again after a pause, and
the worker reports itself not ready meanwhile; it never skips a batch, and
decisions are idempotent, so a retry sends the same verdicts. A record the
broker refuses for good (too large) is replaced by a rejection that says so.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import logging
import os
import secrets
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faust
import orjson
import redis
from faust.types import EventT
from mode import ServiceT
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from streams.config import Settings
from streams.kafka.batched import send_batched
from streams.kafka.fetch import PacedTransport
from streams.kafka.pipeline import BatchPipeline
from streams.records.stage import rejected_record
from streams.service import metrics
from streams.service.resources import Resources
from streams.service.stages import Agent, Incoming, Outgoing, StageAgent, hops, input_topic

log = logging.getLogger(__name__)

FEATURES_ROOM_BYTES = 64 * 1024
"""What a published article adds to its raw record at most: id, normalised URL, features, verdict."""


def check_broker_limits(settings: Settings, accepted: dict[str, int]) -> None:
    """Refuse a `worker.max_message_bytes` above what a topic the workers write to accepts
    (`accepted`: the topics' `max.message.bytes`, as the broker reports them)."""
    limit = settings.worker.max_message_bytes
    for topic, most in sorted(accepted.items()):
        if most < limit:
            raise ValueError(
                f"topic {topic} accepts records of at most {most:,} bytes (its max.message.bytes), less than"
                f" worker.max_message_bytes ({limit:,}): set DEDUP_WORKER__MAX_MESSAGE_BYTES to at most {most:,}"
                " (and DEDUP_MAX_RECORD_BYTES to fit), or raise the topic's max.message.bytes"
            )


def check_record_limits(settings: Settings) -> None:
    """Refuse a configuration whose accepted input could not be published: every raw record up to
    `max_record_bytes` must fit, with its features, in what the broker accepts."""
    limit = settings.worker.max_message_bytes
    if settings.max_record_bytes + FEATURES_ROOM_BYTES > limit:
        raise ValueError(
            f"max_record_bytes ({settings.max_record_bytes:,}) leaves no room for the features in what the broker"
            f" accepts (worker.max_message_bytes {limit:,}): set DEDUP_MAX_RECORD_BYTES to at most"
            f" {limit - FEATURES_ROOM_BYTES:,}, or raise the broker's message.max.bytes and"
            " DEDUP_WORKER__MAX_MESSAGE_BYTES together"
        )


# KEYS: the claim; ARGV: this worker's token, the claim's time to live in ms. Renewed while it holds the token,
# taken back where it lapsed (a worker paused past it) and nobody took it meanwhile; 0 when another holds it.
_RENEW_CLAIM = """
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""
_RELEASE_CLAIM = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class InstanceClaim:
    """A worker's hold on its static membership id (`worker.instance_id`), in Redis.

    Two workers started with one instance id (a copy-pasted deployment, a pod started twice) are one
    member to the broker: each join replaces the other, whose next heartbeat finds itself unknown and
    joins again, for ever (aiokafka has no fenced state for a static member). Both hold every partition,
    both decide and publish every record again and again, and neither commits. The broker cannot tell
    the second from a restart of the first, so the workers tell it themselves: the first to start holds
    the id in Redis, renewed by a thread; a second start waits out the claim of a worker killed without
    stopping (at most `ttl_s`) and refuses, in one line, one still renewed. A worker whose claim lapsed
    (paused past `ttl_s`) and was taken by another exits at once: the broker has fenced it already.
    """

    def __init__(
        self, client: redis.Redis | redis.RedisCluster, prefix: str, group: str, instance: str, ttl_s: float
    ) -> None:
        self._redis = client
        self._key = f"{prefix}lock:instance:{group}:{instance}"  # a lease: not state (replay rebuilds none)
        self._named = f"DEDUP_WORKER__INSTANCE_ID={instance} in group {group}"
        self._instance = instance
        self._ttl_s = ttl_s
        self._token = f"{socket.gethostname()} pid {os.getpid()} {secrets.token_hex(8)}"
        self._renew = client.register_script(_RENEW_CLAIM)
        self._release = client.register_script(_RELEASE_CLAIM)
        self._done = threading.Event()

    @classmethod
    def of(cls, settings: Settings, client: redis.Redis | redis.RedisCluster) -> InstanceClaim | None:
        """The claim of this worker's instance id in its group; None without one (dynamic membership)."""
        worker = settings.worker
        if not worker.instance_id:
            return None
        return cls(client, settings.redis_prefix, worker.group_id, worker.instance_id, worker.session_timeout_s)

    def acquire(self, say: Callable[[str], None] = log.warning) -> None:
        """Hold the id, waiting up to `ttl_s` for a killed holder's claim to lapse; RuntimeError, naming the
        holder, when another worker still renews it. A Redis that does not answer is waited for. `say` tells
        why it waits (before the worker's logging is set up, the CLI's stderr)."""
        deadline = time.monotonic() + self._ttl_s + 1.0
        said = unreachable = False
        while True:
            try:
                if self._redis.set(self._key, self._token, nx=True, px=self._ttl_ms) or self._held() == self._token:
                    break
                holder = self._held()
            except redis.RedisError as exc:  # no decision without Redis either: wait for it (said once)
                if not unreachable:
                    say(f"instance id {self._instance} not claimed yet, waiting for Redis: {exc}")
                unreachable = True
                deadline = time.monotonic() + self._ttl_s + 1.0
                time.sleep(1.0)
                continue
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"another worker runs with {self._named} ({holder}): give each worker an instance id of its"
                    " own (two with one id take each other's partitions for ever)"
                )
            if not said:
                say(
                    f"instance id {self._instance} is held by {holder}; waiting up to {self._ttl_s:.0f} s for it to"
                    " lapse (a worker killed without stopping holds it that long)"
                )
                said = True
            time.sleep(0.2)
        threading.Thread(target=self._keep, name="instance-claim", daemon=True).start()

    @property
    def _ttl_ms(self) -> int:
        return max(1, int(self._ttl_s * 1000))

    def _held(self) -> str | None:
        held = self._redis.get(self._key)
        return held.decode(errors="replace") if isinstance(held, bytes) else held

    def _keep(self) -> None:
        """Renew every third of the time to live; exit the process at once if another worker took the id."""
        while not self._done.wait(self._ttl_s / 3):
            try:
                kept = self._renew(keys=[self._key], args=[self._token, self._ttl_ms])
            except redis.RedisError as exc:  # kept by nobody else meanwhile, it is taken back on the next renewal
                log.warning("instance id %s not renewed: %s", self._instance, exc)
                continue
            if not kept:
                log.error(
                    "another worker took %s while this one was paused past %.0f s: stopping; give each worker an"
                    " instance id of its own",
                    self._named,
                    self._ttl_s,
                )
                logging.shutdown()
                os._exit(2)  # the broker fenced this member already: nothing of it may run on

    def release(self) -> None:
        """Free the id (a restart takes it at once), unless another worker holds it now."""
        self._done.set()
        try:
            self._release(keys=[self._key], args=[self._token])
        except redis.RedisError as exc:  # it lapses by itself
            log.warning("instance id %s not released (%s); it lapses in %.0f s", self._instance, exc, self._ttl_s)


@dataclass
class Health:
    """What /readyz reports: not ready while partitions are being reassigned or a batch keeps failing."""

    failing: dict[str, str] = field(default_factory=dict)
    last_batch: dict[str, float] = field(default_factory=dict)


def broker_credentials(settings: Settings) -> tuple[Any, bool]:
    """faust (aiokafka) credentials from the librdkafka-style `kafka_config`, and whether TLS is on.

    The same settings serve the confluent-kafka tools and the workers; only the
    common ones are understood here, and an unknown security setting is an error
    rather than a silent plaintext connection.
    """
    config = {name: secret.get_secret_value() for name, secret in settings.kafka_config.items()}
    protocol = config.pop("security.protocol", "PLAINTEXT").upper()
    context = None
    if protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(cafile=config.pop("ssl.ca.location", None))
        certificate = config.pop("ssl.certificate.location", None)
        if certificate:
            context.load_cert_chain(certificate, config.pop("ssl.key.location", None))
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        credentials = faust.SASLCredentials(
            username=config.pop("sasl.username", None),
            password=config.pop("sasl.password", None),
            mechanism=config.pop("sasl.mechanism", "PLAIN"),
            ssl_context=context,
        )
    elif protocol == "SSL":
        credentials = faust.SSLCredentials(context)
    elif protocol == "PLAINTEXT":
        credentials = None
    else:
        raise ValueError(f"unsupported security.protocol {protocol!r} for the workers")
    security = [name for name in config if name.startswith(("sasl.", "ssl.", "security."))]
    if security:
        raise ValueError(f"kafka_config settings the workers cannot apply: {', '.join(sorted(security))}")
    return credentials, context is not None


class WorkerApp(faust.App):
    """faust's app without its `Monitor` sensor. The monitor keeps in-process statistics of every message
    (counts, offsets and timings per topic and partition, taken at four points of its way) for faust's
    debug pages, which the worker does not serve (its metrics are Prometheus's, on /metrics): one worker
    spent 5 to 8% of its CPU time a document on it (`benchmarks/bench_streaming.py`'s CPU column; 296 and
    282 against 273 and 274 us a document in alternating bursts of 15,000)."""

    def on_init_dependencies(self) -> Iterable[ServiceT]:
        services = super().on_init_dependencies()  # registers the monitor among the sensors
        self.sensors.remove(self.monitor)
        return services


def build_app(settings: Settings, agents: Sequence[Agent], resources: Resources) -> tuple[faust.App, Health]:
    """A faust app running `agents`, with /healthz, /readyz and /metrics on the configured address."""
    worker = settings.worker
    if not settings.kafka_bootstrap:
        raise ValueError("no Kafka broker configured: set DEDUP_KAFKA_BOOTSTRAP (host:port)")
    credentials, _ = broker_credentials(settings)
    check_record_limits(settings)
    datadir = settings.state_dir or Path(tempfile.gettempdir()) / "dedup-worker"
    app = WorkerApp(
        worker.group_id,
        broker=[f"kafka://{host.strip()}" for host in settings.kafka_bootstrap.split(",")],
        broker_credentials=credentials,
        datadir=str(datadir),
        store="memory://",
        autodiscover=False,
        topic_allow_declare=False,  # `dedup topics create` owns topics, partitions and policies
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        consumer_group_instance_id=worker.instance_id,
        broker_session_timeout=worker.session_timeout_s,
        broker_heartbeat_interval=min(3.0, worker.session_timeout_s / 3),
        broker_max_poll_interval=worker.max_poll_interval_s,
        broker_rebalance_timeout=worker.rebalance_timeout_s,
        producer_acks=-1,
        producer_linger=0.005,  # a batch's outputs leave in a few requests, not one request each
        producer_max_batch_size=512 * 1024,
        producer_max_request_size=worker.max_message_bytes,
        producer_request_timeout=worker.delivery_timeout_s,  # also when aiokafka gives a batch up (default 20 min)
        web_enabled=True,
        web_bind=worker.web_host,
        web_host=worker.web_host,
        web_port=worker.web_port,
        web_in_thread=False,
        logging_config=None,
    )
    app.transport = PacedTransport(app.conf.broker_consumer, app, fetch_floor_s=worker.fetch_floor_s)
    health = Health()
    for hop in hops(settings, agents):
        handler = resources.stage_agent(*hop)
        source = app.topic(input_topic(settings, hop[0]), key_serializer="raw", value_serializer="raw")
        app.agent(source, name=f"dedup-{'-'.join(hop)}")(_agent_loop(handler, app, health, settings))

    @app.page("/healthz")
    async def healthz(web: Any, request: Any) -> Any:
        return web.json({"status": "ok"})

    @app.page("/readyz")
    async def readyz(web: Any, request: Any) -> Any:
        problems = dict(health.failing)
        if app.rebalancing:
            problems["kafka"] = "partitions are being reassigned"
        try:
            await asyncio.to_thread(resources.ping)
        except Exception as exc:  # report, never raise, from a probe
            problems["redis"] = f"{type(exc).__name__}: {exc}"
        body = {
            "status": "not ready" if problems else "ready",
            "problems": problems,
            "agents": list(map(str, agents)),
            "partitions": sorted(f"{tp.topic}:{tp.partition}" for tp in app.assignor.assigned_actives()),
        }
        return web.json(body, status=503 if problems else 200)

    @app.page("/metrics")
    async def prometheus(web: Any, request: Any) -> Any:
        return web.bytes(generate_latest(), content_type=CONTENT_TYPE_LATEST.split(";")[0])

    # What start-up made (modules, compiled kernels, the featurizer's tables) lives as long as the
    # worker: frozen, a full collection no longer walks it (115 to 125 ms a time, every few seconds,
    # and the batch being decided waited as long).
    gc.collect()
    gc.freeze()
    return app, health


def _agent_loop(handler: StageAgent, app: faust.App, health: Health, settings: Settings) -> Any:
    name = handler.name
    worker = settings.worker

    def failed(events: list[EventT], exc: BaseException, pause: float) -> None:
        metrics.FAILURES.labels(name).inc()
        health.failing[name] = f"{type(exc).__name__}: {exc}"
        log.warning("%s agent: batch of %d failed (%s); retrying in %.1f s", name, len(events), exc, pause)

    def succeeded() -> None:
        health.failing.pop(name, None)
        health.last_batch[name] = time.time()

    async def decide(events: list[EventT]) -> list[Outgoing]:
        return await asyncio.to_thread(handler.handle, [_incoming(event) for event in events])

    async def send(outputs: list[Outgoing]) -> None:
        await _send_all(outputs, app, settings)
        # Counted once the broker has them: a batch retried after a failure decides its rejections again.
        rejected = sum(1 for out in outputs if out.topic == settings.topics.rejected)
        if rejected:
            metrics.REJECTED.labels(name).inc(rejected)

    async def process(stream: faust.StreamT) -> None:
        events = stream.noack()  # acknowledged by the pipeline, once a batch's outputs are

        async def ack(done: list[EventT]) -> None:
            for event in done:
                await events.ack(event)

        pipeline = BatchPipeline(decide, send, ack, worker.batch_size, worker.batch_within_s, failed, succeeded)
        runner = asyncio.create_task(pipeline.run())
        try:
            async for event in events.events():
                await pipeline.put(event)
        finally:
            runner.cancel()

    return process


def _incoming(event: EventT) -> Incoming:
    message = event.message
    return Incoming(
        value=message.value or b"",
        key=message.key,
        timestamp_ms=int(message.timestamp * 1000),
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
    )


async def _send_all(outputs: list[Outgoing], app: faust.App, settings: Settings) -> None:
    """Send every output and wait for the broker's acknowledgement of each.

    A record refused as too large is sent to the rejected topic instead, with the
    reason; any other failure raises, and the caller retries the whole batch.
    """
    # faust has no batch send: its aiokafka producer (started with the app) takes the record batches.
    producer = app.producer._ensure_producer()
    limit = settings.worker.max_message_bytes
    deadline = settings.worker.delivery_timeout_s
    refused = await send_batched(producer, outputs, limit, deadline)
    if refused:
        # A rejection refused means the rejected topic takes less than worker.max_message_bytes (its
        # max.message.bytes lowered since the worker started): it goes again without the bytes it quotes, and
        # so does a rejection for a refused record that the rejected topic refuses too.
        rejected = settings.topics.rejected
        rejections = [_bare(out) if out.topic == rejected else _unsendable(out, settings) for out in refused]
        refused = await send_batched(producer, rejections, limit, deadline)
        for out in await send_batched(producer, [_bare(out) for out in refused], limit, deadline):
            raise RuntimeError(f"a rejection for {out.key!r} was refused by the broker as too large")


def _bare(rejection: Outgoing) -> Outgoing:
    """A rejection with the bytes it quotes cut to none (`raw_bytes` says how many they were), for a rejected
    topic that refused it whole: its reason, origin and key still reach the topic."""
    record = orjson.loads(rejection.value)
    quoting = "raw" if "raw" in record else "raw_base64"
    quoted = record[quoting]
    if not quoted:
        return rejection  # cut to none already
    record.setdefault("raw_bytes", len(quoted.encode() if quoting == "raw" else base64.b64decode(quoted)))
    record[quoting] = ""
    record["reason"] += f"; the record itself left out ({rejection.topic} refused it as too large)"
    return Outgoing(rejection.topic, rejection.key, orjson.dumps(record))


def _unsendable(out: Outgoing, settings: Settings) -> Outgoing:
    metrics.UNSENDABLE.labels(out.topic).inc()
    reason = (
        f"the {len(out.value):,}-byte record for {out.topic} was refused by the broker as too large"
        f" (worker.max_message_bytes {settings.worker.max_message_bytes:,})"
    )
    value = rejected_record(reason, out.value, {"topic": out.topic}, settings.worker.max_message_bytes)
    return Outgoing(settings.topics.rejected, out.key, value)

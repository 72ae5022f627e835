"""`dedup replay` from Kafka into Redis: links a second and peak memory, today's code beside the replay before it.

Run:  .venv/bin/python benchmarks/replay_speed.py [--links 200000] [--dim 0] [--baseline-max 50000] [--json FILE]
      [--compare CHECKOUT]

Starts its own redis-server and Kafka-protocol broker (noida-db) on free ports, writes N generated
links (`link_records`: canonicals, duplicates of every stage, re-sends without the vector, relinks,
old records without `seq`, sent out of decision order over 4 partitions) to a links topic, then
replays them in a child process per variant, each into its own key prefix:

- `streaming`: `streams.kafka.replay.replay_links` (on-disk index, batches under the lease);
- `baseline`: the replay before it (commit 25985cb: every record in a dict, one round trip per call),
  over at most --baseline-max links (it holds them all in memory);
- `compare` (with --compare): the `streaming` replay of another checkout (its `streams` package, e.g. the
  main branch's), over the same links right after this one's: a change measured against the code before it
  in the same run.

Prints per variant: links a second end to end and for the restoring phase alone, and the child's peak
RSS (`resource.getrusage`); then whether both left the same keys (compared over the baseline's links).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import redis
from confluent_kafka import Producer

from streams.config import Settings
from streams.evaluation.services import local_kafka, local_redis
from streams.kafka.topics import create_topics

BASELINE_COMMIT = "25985cb"
"""The last commit with the replay that held every link in memory."""
PARTITIONS = 4
EPOCH = 1_793_491_200
"""2026-11-01T00:00:00Z: the generated links are published a second apart from here."""


def _iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def _hex(rng: random.Random, bits: int) -> str:
    return f"{rng.getrandbits(bits):0{bits // 4}x}"


def link_records(count: int, seed: int = 0, dim: int = 0) -> Iterator[tuple[str, dict[str, Any]]]:
    """(doc_id, record) of `count` decided documents as `dedup.links` holds them, in send order.

    Half canonicals, half duplicates (url, content, simhash, semantic); the first 50 without `seq`
    (older records); every 20th sent twice (the re-send without its vector); every 50th duplicate
    relinked later to `unlinked` (a later record with a higher `seq` naming its content key); records
    sent out of decision order (shuffled within windows of 16). `dim` > 0: canonicals carry vectors.
    """
    rng = random.Random(seed)
    canonicals: list[dict[str, Any]] = []
    duplicates: list[dict[str, Any]] = []
    window: list[tuple[str, dict[str, Any]]] = []
    seq = 0

    def decided(record: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        window.append((record["doc_id"], record))
        if len(window) >= 16:
            rng.shuffle(window)
            yield from window
            window.clear()

    for n in range(count):
        doc_id = f"doc-{n:08d}"
        sequenced = n >= 50
        if sequenced:
            seq += 1
        record: dict[str, Any] = {
            "doc_id": doc_id, "verdict": "unique", "canonical_id": doc_id, "stage": None, "score": None,
            "linked_at": _iso(EPOCH + 60 + n), "model": None, "url_hash": _hex(rng, 256),
            "content_hash": _hex(rng, 256), "simhash": _hex(rng, 64), "language": rng.choice(["en", "bn"]),
            "published_at": _iso(EPOCH + n),
        }  # fmt: skip
        if sequenced:
            record["seq"] = seq
        if canonicals and rng.random() < 0.5:
            canonical = rng.choice(canonicals)
            stage = rng.choice(["url", "content", "simhash", "semantic"])
            record |= {"verdict": "duplicate", "canonical_id": canonical["doc_id"], "stage": stage}
            record["language"] = canonical["language"]
            if stage == "url":
                record["url_hash"] = canonical["url_hash"]
            elif stage == "content":
                record["content_hash"] = canonical["content_hash"]
            elif stage == "simhash":
                record["simhash"] = f"{int(canonical['simhash'], 16) ^ (1 << rng.randrange(64)):016x}"
                record["score"] = 1.0
            else:
                record |= {"score": round(rng.uniform(0.9, 1.0), 4), "model": "bench@1"}
            duplicates.append(record)
        else:
            if dim:
                record |= {"model": "bench@1", "vector": [round(rng.uniform(-1, 1), 6) for _ in range(dim)]}
            canonicals.append(record)
        yield from decided(record)
        if n % 20 == 19:
            yield from decided({key: value for key, value in record.items() if key != "vector"})
        if sequenced and n % 100 == 99 and duplicates:
            relinked = duplicates.pop(rng.randrange(len(duplicates)))
            if relinked["stage"] in ("simhash", "semantic") and "seq" in relinked:
                seq += 1
                yield from decided(
                    relinked
                    | {
                        "verdict": "unlinked",
                        "canonical_id": relinked["doc_id"],
                        "stage": None,
                        "score": None,
                        "model": None,
                        "seq": seq,
                        "keys": ["content"],
                        "linked_at": _iso(EPOCH + 60 + n),
                    }
                )
    yield from window


def produce(bootstrap: str, topic: str, records: Iterator[tuple[str, dict[str, Any]]]) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4"})
    sent = 0
    for doc_id, record in records:
        while True:
            try:
                producer.produce(topic, orjson.dumps(record), doc_id.encode())
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        sent += 1
    producer.produce(topic, b"{not json", b"broken")  # one unreadable record: reported, never fatal
    if producer.flush(60):
        raise RuntimeError("records still unsent after 60 s")
    return sent + 1


def _baseline() -> types.ModuleType:
    """The replay of BASELINE_COMMIT, loaded from git."""
    source = subprocess.run(
        ["git", "show", f"{BASELINE_COMMIT}:streams/kafka/replay.py"], capture_output=True, text=True, check=True
    ).stdout
    module = types.ModuleType("baseline_replay")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, "baseline_replay.py", "exec"), module.__dict__)
    return module


class _Phases:
    """A `Progress` that notes when the restoring phase starts: wall clock, this process's CPU, Redis's CPU."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self.restoring: tuple[float, float, float] | None = None

    def start(self, phase: str, total: int) -> None:
        if phase.startswith("restoring"):
            self.restoring = (time.perf_counter(), time.process_time(), _server_cpu(self._client))

    def advance(self, count: int) -> None:
        pass


def _server_cpu(client: redis.Redis) -> float:
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def child(variant: str, redis_url: str, prefix: str) -> dict[str, Any]:
    """One replay in this process (Settings from the environment); what it measured.

    Besides wall-clock rates, the restoring phase's rate per CPU second of this process and of
    redis-server: on a shared machine the wall clock measures the neighbours too."""
    from streams.stores.redis_store import connect  # the variant's own client, as `dedup replay` makes it

    settings = Settings()
    client = connect(redis_url)
    phases = _Phases(client)
    started = time.perf_counter()
    if variant in ("streaming", "compare"):
        from streams.kafka.replay import replay_links

        stats = replay_links(settings, client, None, phases, prefix=prefix)
    else:
        from streams.stores.redis_store import RedisStateStore

        stats = _baseline().replay_links(settings, RedisStateStore(client, prefix), None, phases)
    ended, cpu, server = time.perf_counter(), time.process_time(), _server_cpu(client)
    wall0, cpu0, server0 = phases.restoring or (started, 0.0, server)
    links = stats.documents
    return {
        "variant": variant,
        "streams": str(Path(sys.modules["streams"].__file__ or "").parent),
        "records": stats.read,
        "documents": links,
        "restored": stats.restored,
        "bad": len(stats.bad),
        "seconds": round(ended - started, 2),
        "links_per_s": round(links / (ended - started), 1),
        "restoring_links_per_s": round(links / (ended - wall0), 1),
        "restoring_links_per_client_cpu_s": round(links / max(cpu - cpu0, 1e-9), 1),
        "restoring_client_cpu_us_per_link": round(1e6 * (cpu - cpu0) / max(links, 1), 1),
        "restoring_redis_cpu_us_per_link": round(1e6 * (server - server0) / max(links, 1), 1),
        "restoring_links_per_redis_cpu_s": round(links / max(server - server0, 1e-9), 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def keys(client: redis.Redis, prefix: str, ignore: tuple[str, ...] = ("sweep", "oldest", "clock")) -> dict[str, Any]:
    """Every key under `prefix` with its value, but the lease and `ignore`: the sweep's cursor and each
    family's oldest stamp (how far housekeeping got, which depends on batch boundaries) and the clock
    (the baseline never moved it; the workers and today's replay do)."""
    found: dict[str, Any] = {}
    for key in client.scan_iter(f"{prefix}*", count=10_000):
        name = key[len(prefix) :]
        if name.startswith("lock:") or name in ignore:
            continue
        found[name] = client.hgetall(key) if client.type(key) == "hash" else client.get(key)
    if "layout" in found:  # the layout, not the token each state was marked with
        found["layout"] = found["layout"].partition(" ")[0]
    return found


def _run_child(env: dict[str, str], variant: str, redis_url: str, prefix: str) -> dict[str, Any]:
    """`variant` in a child process; `compare` is `streaming` with the other checkout's package first on its path."""
    if variant == "compare":
        env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [env["DEDUP_COMPARE"], env.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, __file__, "--child", variant, "--redis", redis_url, "--prefix", prefix],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"{variant} replay failed:\n{done.stderr}")
    return orjson.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--links", type=int, default=200_000, help="documents decided (records: about 5%% more)")
    parser.add_argument("--dim", type=int, default=0, help="vector size of the canonicals (0: no vectors)")
    parser.add_argument("--baseline-max", type=int, default=50_000, help="documents for the baseline (0: skip it)")
    parser.add_argument("--json", type=Path, default=None, help="write the results there as JSON")
    parser.add_argument("--compare", type=Path, default=None, help="another checkout whose streaming replay runs too")
    parser.add_argument("--child", choices=["streaming", "baseline", "compare"], help=argparse.SUPPRESS)
    parser.add_argument("--redis", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(orjson.dumps(child(args.child, args.redis, args.prefix)).decode())
        return

    results: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory() as folder,
        local_redis(Path(folder) / "redis") as redis_url,
        local_kafka(Path(folder) / "kafka") as bootstrap,
    ):
        runs = [("streaming", args.links)]
        if args.compare is not None:
            runs += [("compare", args.links)]
        if args.baseline_max:
            runs += [("baseline", min(args.links, args.baseline_max))]
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        for count in sorted({count for _, count in runs}):
            name = f"bench{count}"
            env = {
                **os.environ,
                "DEDUP_KAFKA_BOOTSTRAP": bootstrap,
                "DEDUP_TOPICS__LINKS": f"{name}.dedup.links",
                "DEDUP_TOPICS__PARTITIONS": str(PARTITIONS),
                "DEDUP_COMPARE": str(args.compare.resolve()) if args.compare is not None else "",
            }
            os.environ.update(env)
            create_topics(Settings())
            sent = produce(bootstrap, f"{name}.dedup.links", link_records(count, dim=args.dim))
            print(f"{sent:,} records of {count:,} documents on {name}.dedup.links", flush=True)
            for variant, _ in (run for run in runs if run[1] == count):
                result = _run_child(env, variant, redis_url, f"{variant}{count}:")
                results.append(result)
                print(
                    f"{variant:>9}: {result['documents']:,} links in {result['seconds']:.1f} s:"
                    f" {result['links_per_s']:,.0f}/s end to end, {result['restoring_links_per_s']:,.0f}/s restoring"
                    f" ({result['restoring_links_per_client_cpu_s']:,.0f} per client CPU s,"
                    f" {result['restoring_links_per_redis_cpu_s']:,.0f} per Redis CPU s;"
                    f" {result['restoring_client_cpu_us_per_link']:.0f}"
                    f" + {result['restoring_redis_cpu_us_per_link']:.0f}"
                    " CPU us a link, client + Redis);"
                    f" peak RSS {result['peak_rss_mib']:,.0f} MiB",
                    flush=True,
                )
        if args.compare is not None:
            streamed, compared = keys(client, f"streaming{args.links}:"), keys(client, f"compare{args.links}:")
            print(f"same keys and values as the compared checkout: {streamed == compared}")
            for name in sorted(streamed.keys() | compared.keys()):
                if streamed.get(name) != compared.get(name):
                    print(f"  {name}: {str(streamed.get(name))[:300]} != {str(compared.get(name))[:300]}")
        if args.baseline_max and args.links <= args.baseline_max:
            streamed, baseline = keys(client, f"streaming{args.links}:"), keys(client, f"baseline{args.links}:")
            print(f"same keys and values as the baseline: {streamed == baseline}")
            for name in sorted(streamed.keys() | baseline.keys()):
                if streamed.get(name) != baseline.get(name):
                    print(f"  {name}: {str(streamed.get(name))[:300]} != {str(baseline.get(name))[:300]}")
        client.close()
    if args.json is not None:
        args.json.write_bytes(orjson.dumps({"links": args.links, "dim": args.dim, "runs": results}))


if __name__ == "__main__":
    main()

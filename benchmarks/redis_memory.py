"""Redis memory per canonical, by key family: the cascade over N synthetic articles, or N canonicals in bulk.

Run:  .venv/bin/python benchmarks/redis_memory.py [--count 100000] [--url redis://127.0.0.1:PORT/0]
          [--bucket-bits 16]
      .venv/bin/python benchmarks/redis_memory.py --bulk --points 100000,1000000,10000000 [--bucket-bits 16]
          [--json memory.json]

Without --url it starts its own redis-server (Debian's) on a free port and stops it at the end. Either
way it sets hash-max-listpack-value to docker-compose.yml's 256 first (--listpack-value; 0 keeps the
server's, 64 by default); hash-max-listpack-entries stays Redis's default, 512.

The default runs stages 1 to 3 over N synthetic articles (`synthetic_articles`: canonicals and their
duplicates, realistic ids) through the cascade, the product's public path, in the configured band layout
(DEDUP_SIMHASH__BANDS; `--bulk` writes 4x16 bands: benchmarks/scale.py measures 8x32+p1 at 10M). It
prints used_memory grown, bytes per canonical and per document, and per key family its MEMORY USAGE, how
many of its hashes are still listpacks, and its longest field and value (a hash leaves the listpack
encoding for good once one field or value is longer than hash-max-listpack-value).

`--bulk` writes N canonicals as the cascade registers them (both exact keys claimed, the canonical, its
s: record and bands, its verdict) with scale.py's `ProductBulk`: the store's own key functions and
encoders, checked against the public path by tests/test_scale_benchmark.py: 5,000 to 8,000 canonicals
a second on the shared 2-vCPU VM instead of about 1,000. Doc ids are scale.py's (`scale-{i}`, or
--ids uuid / url), a verdict names --model (stage 4's embedding model) when given; SimHashes are
uniform random (they only place the bands: featurised articles collide a little more,
docs/benchmarks.md "Scale"). It measures at every point of --points. `--sample 16` writes, for a
point N, only the last N/16 canonicals (their own ids and seqs) into a store of 1/16 the buckets,
with SimHashes whose band values fall in 1/16 of the band buckets: every hash then holds what it
holds at N, so bytes a canonical are N's, 16 times faster (at 1M: 263 both ways, every family within
1 byte; docs/benchmarks.md "Memory").
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import redis

from streams.config import Settings
from streams.core.cascade import Cascade
from streams.core.model import Document, Verdict
from streams.evaluation.corpus import synthetic_articles
from streams.evaluation.services import local_redis
from streams.records.article import Featurizer
from streams.stores.redis_store import RedisStateStore

PREFIX = "dedup:"
IDS: dict[str, Callable[[int], str]] = {
    "scale": lambda i: f"scale-{i}",
    "uuid": lambda i: str(uuid.UUID(int=i * 0x9E3779B97F4A7C15 % 2**128, version=4)),
    "url": lambda i: f"https://www.dhakadaily.example.com/national/2026/11/{i:08d}/metro-rail-late-service",
}
"""Doc ids of the bulk writer: the crawler's id is whatever it sends (up to max_id_chars)."""
LISTPACK_VALUE = 256
"""hash-max-listpack-value of docker-compose.yml's Redis (tests/test_redis_memory_layout.py holds them equal)."""
SLICE = 250_000
"""Canonicals the bulk writer writes at a time."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000, help="synthetic articles through the cascade")
    parser.add_argument("--url", default=None, help="an empty Redis database to use instead of a local server")
    parser.add_argument(
        "--bucket-bits", type=int, default=None, help="the store's bucket_bits (default: the setting's default)"
    )
    parser.add_argument("--bulk", action="store_true", help="canonicals in bulk (ProductBulk), measured at --points")
    parser.add_argument("--points", default="100000,1000000", help="--bulk: canonicals at which to measure")
    parser.add_argument(
        "--sample",
        type=int,
        default=1,
        choices=[1, 16, 256],
        help="--bulk: write only the last N/sample canonicals of each point N into 1/sample of the buckets (band"
        " values in 1/sample of theirs), so that every hash holds what it holds at N: bytes a canonical as at N,"
        " sample times faster",
    )
    parser.add_argument(
        "--ids",
        choices=sorted(IDS),
        default="scale",
        help="--bulk: doc ids: scale.py's (scale-{i}, 13 characters at 10M), a UUID (36) or a URL (84)",
    )
    parser.add_argument("--model", default="", help="--bulk: the embedding model a verdict names (stage 4 on)")
    parser.add_argument(
        "--listpack-value",
        type=int,
        default=LISTPACK_VALUE,
        help="CONFIG SET hash-max-listpack-value first; default: docker-compose.yml's (README, Memory);"
        " 0: the server's",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write the measurements here too")
    args = parser.parse_args()
    bits = Settings().redis_bucket_bits if args.bucket_bits is None else args.bucket_bits
    with (
        tempfile.TemporaryDirectory() as folder,
        local_redis(Path(folder)) if args.url is None else _given(args.url) as url,
    ):
        client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=600)
        if args.listpack_value:
            client.config_set("hash-max-listpack-value", args.listpack_value)
        config = client.config_get("hash-max-listpack-*")
        print(f"bucket_bits {bits}; Redis {client.info('server')['redis_version']}, {config}")
        rows = _bulk(client, bits, args) if args.bulk else [_cascade(client, bits, args.count)]
        client.close()
    if args.json is not None:
        args.json.write_bytes(orjson.dumps({"bucket_bits": bits, "config": config, "points": rows}))


def _cascade(client: redis.Redis, bits: int, count: int) -> dict[str, Any]:
    """Stages 1 to 3 over `count` synthetic articles, as the embedded runner decides them."""
    settings = Settings(stages=["url", "content", "simhash"])
    featurizer = Featurizer(settings)
    before = _used(client)
    cascade = Cascade(settings, RedisStateStore(client, PREFIX, bits, band_layout=settings.simhash.band_layout))
    verdicts: Counter[str] = Counter()
    started = time.perf_counter()
    for article in synthetic_articles(count):
        doc = featurizer.parse(orjson.dumps(article), ingest_time=0)
        if isinstance(doc, Document):
            verdicts[cascade.decide(doc).link.verdict.value] += 1
    seconds = time.perf_counter() - started
    documents = sum(verdicts.values())
    print(f"documents: {documents:,} ({dict(verdicts)}), {documents / seconds:,.0f} documents a second")
    return _measure(client, verdicts[Verdict.UNIQUE.value], _used(client) - before, documents)


def _bulk(client: redis.Redis, bits: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Canonicals 0..max(points)-1 by `ProductBulk`, measured at each point."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import scale  # a script beside this one, heavy to import

    points = sorted(map(int, args.points.split(",")))
    rng = np.random.default_rng(args.seed)
    fps = np.empty((points[-1], 2), dtype=np.uint64)
    fps[:, 0] = rng.integers(0, np.iinfo(np.uint64).max, size=points[-1], dtype=np.uint64, endpoint=True)
    fps[:, 1] = rng.random(points[-1]) < scale.BANGLA_SHARE
    sampled = (args.sample.bit_length() - 1) // 4 * 4  # bits fewer: 1/16 of the buckets is one hex digit less
    if args.sample > 1:  # every band value in 1/sample of the band buckets: (value >> 6) a multiple of sample
        fps[:, 0] &= ~np.uint64(sum((args.sample - 1) << (6 + 16 * band) for band in range(4)))
    link = scale._link
    scale._doc_id = IDS[args.ids]
    scale._link = lambda *a: replace(link(*a), model=args.model or None)
    bulk = scale.ProductBulk(client, PREFIX, 1_000_000)
    bulk.store = RedisStateStore(client, PREFIX, bits - sampled)  # the s: and b: keys do not depend on it
    bulk.bands.store = bulk.store
    before = _used(client)
    rows, written, started = [], 0, time.perf_counter()
    for point in points:
        if args.sample > 1:  # each point afresh: its last point / sample canonicals, their own ids and seqs
            _delete(client)
            before, written = _used(client), point - point // args.sample
        first = written
        while written < point:
            stop = min(point, written + SLICE)
            bulk.grow(fps, written, stop)
            written = stop
        print(f"[{time.strftime('%H:%M:%S')}] {point:,} canonicals written in {time.perf_counter() - started:,.0f} s")
        if args.sample > 1:
            print(f"the last {point - first:,} of {point:,} canonicals in 1/{args.sample} of the buckets:")
        rows.append(_measure(client, written - first if args.sample > 1 else point, _used(client) - before))
        rows[-1] |= {"state_canonicals": point, "sample": args.sample}
        if args.json is not None:
            args.json.write_bytes(orjson.dumps({"bucket_bits": bits, "points": rows}))
    return rows


def _measure(client: redis.Redis, canonicals: int, used: int, documents: int | None = None) -> dict[str, Any]:
    """used_memory grown and, per key family, MEMORY USAGE, encodings and the longest field and value."""
    families: dict[str, dict[str, Any]] = {}
    keys = list(client.scan_iter(match=f"{PREFIX}*", count=10_000))
    for start in range(0, len(keys), 1_000):
        part = keys[start : start + 1_000]
        with client.pipeline(transaction=False) as pipe:
            for key in part:
                pipe.memory_usage(key, samples=0)
                pipe.object("encoding", key)
            answers = pipe.execute()
        for key, size, encoding in zip(part, answers[::2], answers[1::2], strict=True):
            family = families.setdefault(key[len(PREFIX) :].split(":", 1)[0], Counter())
            family["bytes"] += int(size or 0)
            family["keys"] += 1
            family[encoding] += 1
    for key in keys[:: max(1, len(keys) // 2_000)]:  # longest field and value, on a sample of the hashes
        if client.type(key) == "hash":
            family = families[key[len(PREFIX) :].split(":", 1)[0]]
            for name, value in client.hgetall(key).items():
                family["field_max"] = max(family["field_max"], len(name.encode()))
                family["value_max"] = max(family["value_max"], len(value.encode()))
    documents = documents or canonicals
    row = {
        "canonicals": canonicals,
        "documents": documents,
        "bytes_per_canonical": used / canonicals,
        "families": {name: dict(counts) for name, counts in sorted(families.items())},
    }
    print(f"used_memory +{used:,} bytes: {used / canonicals:,.0f} a canonical, {used / documents:,.0f} a document")
    for name, counts in row["families"].items():
        encodings = ", ".join(f"{k} {v:,}" for k, v in counts.items() if k not in ("bytes", "keys") and "_" not in k)
        print(
            f"  {name}: {counts['bytes'] / canonicals:,.1f} bytes a canonical, {counts['keys']:,} keys ({encodings}),"
            f" longest field {counts.get('field_max', 0)}, value {counts.get('value_max', 0)}"
        )
    return row


def _delete(client: redis.Redis) -> None:
    """Every key under PREFIX, by DEL: freed before it returns (UNLINK frees a large hash later, in the
    background, while the next point is measured)."""
    keys = list(client.scan_iter(match=f"{PREFIX}*", count=10_000))
    for start in range(0, len(keys), 10_000):
        client.delete(*keys[start : start + 10_000])


def _used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


@contextmanager
def _given(url: str) -> Iterator[str]:
    yield url


if __name__ == "__main__":
    main()

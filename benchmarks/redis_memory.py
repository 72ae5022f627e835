"""Redis memory per canonical, by key family: the cascade over N synthetic articles, or N canonicals in bulk.

Run:  .venv/bin/python benchmarks/redis_memory.py [--count 100000] [--url redis://127.0.0.1:PORT/0]
          [--bucket-bits 16]
      .venv/bin/python benchmarks/redis_memory.py --bulk --points 100000,1000000,10000000 [--bucket-bits 16]
          [--json memory.json]

Without --url it starts its own redis-server (Debian's, its default configuration: hash-max-listpack-entries
512, hash-max-listpack-value 64, as the compose file's image) on a free port and stops it at the end.

The default runs stages 1 to 3 over N synthetic articles (`synthetic_articles`: canonicals and their
duplicates, realistic ids) through the cascade, the product's public path. It prints used_memory grown,
bytes per canonical and per document, and per key family its MEMORY USAGE, how many of its hashes are
still listpacks, and its longest field and value (a hash leaves the listpack encoding for good once one
field or value is longer than hash-max-listpack-value).

`--bulk` writes N canonicals as the cascade registers them (both exact keys claimed, the canonical, its
s: record and bands, its verdict) with scale.py's `ProductBulk`: the store's own key functions and
encoders, checked against the public path by tests/test_scale_benchmark.py, at about 50,000 canonicals
a second instead of 1,000. Doc ids are scale.py's (`scale-{i}`); SimHashes are uniform random (they
only place the bands: featurised articles collide a little more, docs/benchmarks.md "Scale"). It
measures at every point of --points.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
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
        help="--bulk: write only the last N/sample canonicals of each point N into 1/sample of the buckets, so"
        " that every bucket holds what it holds at N (the hashed families' bytes a canonical as at N, sample"
        " times faster; the b: bands hold N/sample canonicals' seqs: measure them at 1)",
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
    cascade = Cascade(settings, RedisStateStore(client, PREFIX, bits))
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
    bulk = scale.ProductBulk(client, PREFIX, 1_000_000)
    bulk.store = RedisStateStore(client, PREFIX, bits - sampled)  # the s: and b: keys do not depend on it
    bulk.bands.store = bulk.store
    before = _used(client)
    rows, written, started = [], 0, time.perf_counter()
    for point in points:
        if args.sample > 1:  # each point afresh: its last point / sample canonicals, their own ids and seqs
            client.flushdb()
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


def _used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


@contextmanager
def _given(url: str) -> Iterator[str]:
    yield url


if __name__ == "__main__":
    main()

"""Redis memory per canonical: stages 1 to 3 over N synthetic articles into a fresh Redis.

Run:  .venv/bin/python benchmarks/redis_memory.py [--count 100000] [--url redis://127.0.0.1:PORT/0]

Without --url it starts its own redis-server (Debian's) on a free port and stops it at
the end. Prints used_memory before and after, the number of canonicals and documents,
and bytes per canonical and per document, with the key count per kind.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import redis

from streams.config import Settings
from streams.core.cascade import Cascade
from streams.core.model import Document, Verdict
from streams.evaluation.corpus import synthetic_articles
from streams.evaluation.services import local_redis
from streams.records.article import Featurizer
from streams.stores.redis_store import RedisStateStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--url", default=None, help="an empty Redis database to use instead of a local server")
    args = parser.parse_args()
    settings = Settings(stages=["url", "content", "simhash"])
    featurizer = Featurizer(settings)
    with (
        tempfile.TemporaryDirectory() as folder,
        local_redis(Path(folder)) if args.url is None else _given(args.url) as url,
    ):
        client = redis.Redis.from_url(url, decode_responses=True)
        before = client.info("memory")["used_memory"]
        store = RedisStateStore(client)
        cascade = Cascade(settings, store)
        verdicts: Counter[str] = Counter()
        started = time.perf_counter()
        for article in synthetic_articles(args.count):
            doc = featurizer.parse(orjson.dumps(article), ingest_time=0)
            if isinstance(doc, Document):
                verdicts[cascade.decide(doc).link.verdict.value] += 1
        seconds = time.perf_counter() - started
        after = client.info("memory")["used_memory"]
        kinds = Counter(key.split(":")[1] for key in client.scan_iter(count=10_000))
    used = after - before
    canonicals = verdicts[Verdict.UNIQUE.value]
    documents = sum(verdicts.values())
    print(f"documents: {documents:,} ({dict(verdicts)}), {documents / seconds:,.0f} documents a second")
    print(f"keys by kind: {dict(sorted(kinds.items()))}")
    print(f"used_memory: {before:,} -> {after:,} bytes (+{used:,})")
    print(f"bytes per canonical: {used / canonicals:,.0f}; bytes per document: {used / documents:,.0f}")


@contextmanager
def _given(url: str) -> Iterator[str]:
    yield url


if __name__ == "__main__":
    main()

"""SimHash index at scale: candidates per query, band-read time, memory and replay rate, 100k to 10M canonicals.

Run:  .venv/bin/python benchmarks/scale.py --canonicals 10000000 --json scale.json
      [--points 100000,1000000,3000000,10000000] [--layouts 4x16,8x32+p1,2of5,...] [--redis-url URL]
      [--skip-sqlite] [--sqlite-max 1000000] [--public-max 100000] [--batches 40]
      [--replay-links 100000] [--per-day 1000000] [--bucket-target 10000000] [--seed 0] [--jobs 2]
      [--fingerprints-only]

Progress goes to stderr with the time; the JSON is rewritten after every point, so a run
stopped on the way keeps what it measured.

Fingerprints
------------
N synthetic news articles: 8 to 30 sentences of ../shared/data (NTREX English and MRPC
sentences; NTREX Bengali and RisingNews Bangla), a tenth of them Bangla (as
`streams.evaluation.corpus.synthetic_articles`), each a new story, featurised by
`Featurizer.parse_batch` (the runner's batched path: JSON, schema, NFKC, content hash,
SimHash: word 3-shingles for English, character 4-grams for Bangla). The article states its
language (CLD2 would say the same here and costs most of the featurising time). Article i
depends only on (seed, i), so a run of N reuses any larger cache of the same seed:
~/.cache/streams-dedup/scale-fingerprints-n{N}-seed{seed}.npy (simhash, language index).
Queries are 256 x `--batches` more articles of another seed (none of them in the index).

Layouts
-------
- The product's band layouts (`simhash.bands`, streams/features/bands.py): `4x16` (the
  baseline: four 16-bit bands) and `8x32+p1` (eight 32-bit byte-plane tables, each key also
  looked up one bit away), each in the product's own stores under a prefix of its own, written
  as the cascade registers a canonical (exact URL and content keys claimed, the canonical with
  its band keys, its verdict) with `published_at` one millionth of a day apart (--per-day):
  `BatchedState` flushed by `RedisStateStore.apply` per 512 under a lease, as the service
  writes; `SqliteStateStore` (`warm` of the exact keys, `exact_claim`, `add_canonical`,
  `record_verdict`, `commit` per 100,000), as the file runner writes. The public paths write
  about a thousand (Redis) and three thousand (SQLite) canonicals a second on a shared
  2-vCPU VM, so Redis takes them up to --public-max only; past it `ProductBulk` writes the
  same families in bulk with the store's own encoders, after `verify_bulk` has found that it
  writes, key for key and value for value, what the public path wrote up to --public-max
  (it refuses to go on otherwise: the store's encoding changed), for each layout. SQLite stops
  at --sqlite-max.
- Candidate layouts, Redis only, bench-only indexes beside the baseline in the same server:
  the 64 bits cut into k blocks, one table per choice of m blocks (Manku, Jain and Das Sarma,
  WWW 2007: `2of5` = 10 tables of 25-26-bit keys, `3of6` = 20 tables of 31-33-bit keys);
  `+p1` also probes every key at Hamming distance 1 (multi-probe: one flipped key bit).
  Same encoding as the product's bands: a hash per bucket of key values, field = the rest
  of the key, value = the space-separated seqs of the canonicals with that key, then the
  seqs' fingerprints from a `s:` family as the product's (seq >> 8 -> seq -> simhash, day
  stamp, doc id). Buckets
  are sized for --bucket-target canonicals (about 64 keys each, below Redis's listpack
  limit of 128). `4x16/day` is the 4x16 bands per day bucket (a million articles a day,
  --per-day), a query reading today's and yesterday's buckets.

Measurements at each point
--------------------------
- candidates per query: distinct canonicals (same language) a query gets back, mean.
- band read: seconds per batch of 256 queries, p50 and p99 over --batches batches, both
  round trips (keys -> seqs, seqs -> fingerprints): `band_candidates_many` for the
  product's layouts, `warm` + `band_candidates` for SQLite, the same two trips for the others.
- bytes per canonical: Redis `INFO memory` used_memory grown while that index was written,
  over N (the product's layouts: every key family). A candidate layout pays the baseline's families
  except its bands and `s:` records (measured by MEMORY USAGE) plus its own tables and
  records. SQLite: the database file (and its WAL) over N.
- recall within threshold: the pooled near-duplicate pairs of benchmarks/thresholds.py
  (English: NTREX against its GB / US / IN edits, updates, headline changes, dropped
  sentences; Bangla: the same light edits and the nukta swap), each original registered in
  a fresh index of the layout and each edit looked up: the share of all pairs that are
  within the shipped threshold (6 en, 7 bn) and found, as thresholds.py's "idx recall"
  (71.5% en and 84.3% bn for 4x16, as thresholds.py prints today; the README says 83.9% bn),
  pooled and per language; also the share of the
  pairs within the threshold that are found.
- replay: links.jsonl records (links schema, one `unique` link per canonical, from the
  fingerprints) restored record by record with `streams.core.replay.restore` into a fresh
  RedisStateStore of each product layout (`dedup replay` batches them:
  benchmarks/replay_speed.py); --replay-links links (all when fewer).
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import itertools
import os
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cache, partial
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import redis
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streams.config import Settings
from streams.core.cascade import CONTENT_KEY, URL_KEY
from streams.core.model import Canonical, Link, Verdict, content_key
from streams.core.ports import Reads
from streams.core.replay import restore
from streams.evaluation.corpus import data_dir, mrpc_pairs, ntrex_documents
from streams.evaluation.services import local_redis
from streams.features.bands import FOUR_BY_16, BandLayout
from streams.features.bands import LAYOUTS as BAND_LAYOUTS
from streams.features.simhash import char_simhash, hamming, word_simhash
from streams.records.article import Featurizer, Rejection, format_timestamp
from streams.records.output import read_link_record
from streams.records.schemas import LINK, validator
from streams.stores.batched import BatchedState
from streams.stores.redis_lock import RedisLock
from streams.stores.redis_store import ENTRIES, RedisStateStore
from streams.stores.sqlite import SqliteStateStore

CACHE = Path.home() / ".cache" / "streams-dedup"
LANGUAGES = ("en", "bn")
BANGLA_SHARE = 0.1
CHUNK = 65_536
"""Articles generated from one random stream (seed, chunk number): article i depends on the seed and i only."""
FEATURE_BATCH = 256
QUERY_BATCH = 256
"""Band queries read together, as a worker reads a batch of documents."""
WRITE_BATCH = 512
"""Canonicals written per `BatchedState.flush` (the service's batch) or per `warm` (SQLite)."""
SQLITE_COMMIT = 100_000
GROW_SLICE = 1_000_000
"""Canonicals added to every index in turn, so each index's share of used_memory is measured apart."""
APPEND_BUCKETS = 5_000
"""Hash buckets written per script call when a bench index grows."""
PREFIX = "scale:"
CHECKPOINT_CHUNKS = 8
"""A cache file every 8 chunks (524,288 articles) while fingerprints are made."""
T0 = 1_793_512_800
"""2026-11-01T06:00:00Z, the synthetic corpus's start: canonical i is published at T0 + i * 86,400 / per-day."""


# ----------------------------------------------------------------------------- fingerprints


def _pools() -> tuple[list[str], list[str]]:
    """English and Bangla sentences, as `synthetic_articles` draws them."""
    root = data_dir()
    documents = ntrex_documents(root)
    english = [s for doc in documents for s in doc.english]
    english += [s for pair in mrpc_pairs(0, root) + mrpc_pairs(1, root) for s in pair]
    bengali = [s for doc in documents for s in doc.bengali]
    bengali += (root / "risingnews_bn_en" / "RisingNews.valid.bn").read_text(encoding="utf-8-sig").splitlines()
    return [s.strip() for s in english if s.strip()], [s.strip() for s in bengali if s.strip()]


def _articles(seed: int, chunk: int, count: int, pools: tuple[list[str], list[str]]) -> Iterator[bytes]:
    """The first `count` articles of chunk `chunk`, as JSON lines."""
    rng = np.random.default_rng([seed, chunk])
    bangla = rng.random(CHUNK) < BANGLA_SHARE
    lengths = rng.integers(8, 31, CHUNK)
    picks = rng.random((CHUNK, 30))
    for k in range(count):
        pool = pools[int(bangla[k])]
        chosen = [pool[int(x * len(pool))] for x in picks[k, : lengths[k]]]
        number = chunk * CHUNK + k
        article = {
            "id": f"scale-{number}",
            "url": f"https://site{number % 97}.example.com/{number}",
            "title": chosen[0],
            "body": " ".join(chosen[1:]),
            "language": LANGUAGES[int(bangla[k])],
        }
        yield orjson.dumps(article)


def _fingerprint_chunk(task: tuple[int, int, int]) -> np.ndarray:
    """(simhash, language index) of the first `count` articles of a chunk, by `Featurizer.parse_batch`."""
    seed, chunk, count = task
    lines = _articles(seed, chunk, count, _pools())
    featurizer = Featurizer(Settings(stages=["url", "content", "simhash"]))
    out = np.zeros((count, 2), dtype=np.uint64)
    for start in range(0, count, FEATURE_BATCH):
        batch = list(itertools.islice(lines, FEATURE_BATCH))
        for k, doc in enumerate(featurizer.parse_batch(batch, ingest_time=T0)):
            if isinstance(doc, Rejection):
                raise RuntimeError(f"synthetic article {chunk * CHUNK + start + k} rejected: {doc.reason}")
            out[start + k] = (doc.simhash, LANGUAGES.index(doc.language))
    return out


def _cached(seed: int) -> list[tuple[int, Path]]:
    """The cached fingerprint files of `seed`, by the number of articles they hold."""
    found = []
    for path in CACHE.glob(f"scale-fingerprints-n*-seed{seed}.npy"):
        match = re.fullmatch(rf"scale-fingerprints-n(\d+)-seed{seed}\.npy", path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def fingerprints(count: int, seed: int, jobs: int) -> np.ndarray:
    """(simhash, language index) of articles 0..count-1 of `seed`: the prefix of any cached file that
    holds as many, else made (a file saved every CHECKPOINT_CHUNKS chunks, so an interrupted run resumes)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    cached = _cached(seed)
    for held, path in cached:
        if held >= count:
            return np.load(path, mmap_mode="r")[:count].copy()
    start_chunk = 0
    parts: list[np.ndarray] = []
    if cached and cached[-1][0] % CHUNK == 0:  # resume from a checkpoint
        parts.append(np.load(cached[-1][1]))
        start_chunk = cached[-1][0] // CHUNK
    tasks = [(seed, c, min(CHUNK, count - c * CHUNK)) for c in range(start_chunk, -(-count // CHUNK))]
    started = time.perf_counter()
    made = 0
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        for done, part in enumerate(pool.map(_fingerprint_chunk, tasks), 1):
            parts.append(part)
            made += len(part)
            if done % CHECKPOINT_CHUNKS == 0 or done == len(tasks):
                held = sum(len(p) for p in parts)
                path = CACHE / f"scale-fingerprints-n{held}-seed{seed}.npy"
                with tempfile.NamedTemporaryFile(dir=CACHE, suffix=".npy", delete=False) as handle:
                    np.save(handle, np.concatenate(parts))
                Path(handle.name).replace(path)  # whole or not at all, for a run reading the cache meanwhile
                for _, older in _cached(seed):
                    if older != path:
                        older.unlink()
                rate = made / (time.perf_counter() - started)
                say(f"fingerprints (seed {seed}): {held:,} of {count:,}, {rate:,.0f} a second")
    return np.concatenate(parts)


def say(message: str) -> None:
    """Progress, on stderr with the time, so a long run can be followed in its log."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def published(index: np.ndarray | int, per_day: int) -> np.ndarray:
    """Stream time of canonical `index` (Unix s): a million articles a day by default."""
    return T0 + (np.asarray(index, dtype=np.int64) * 86_400) // per_day


# ----------------------------------------------------------------------------- layouts


@dataclass(frozen=True)
class Index:
    """A band index: the 64 bits cut into `blocks` near-equal blocks, one table per choice of `chosen` of them."""

    name: str
    blocks: int
    chosen: int
    per_day: bool = False

    def tables(self) -> list[list[tuple[int, int]]]:
        """(start bit, width) of the blocks that make each table's key."""
        sizes = [64 // self.blocks + (1 if i < 64 % self.blocks else 0) for i in range(self.blocks)]
        starts = [sum(sizes[:i]) for i in range(self.blocks)]
        combos = itertools.combinations(range(self.blocks), self.chosen)
        return [[(starts[i], sizes[i]) for i in combo] for combo in combos]


@dataclass(frozen=True)
class Layout:
    name: str
    index: Index
    probe: bool = False
    """Also every key one bit away (multi-probe)."""


INDEXES = {
    "4x16": Index("4x16", 4, 1),
    "2of5": Index("2of5", 5, 2),
    "2of6": Index("2of6", 6, 2),
    "3of6": Index("3of6", 6, 3),
    "4x16/day": Index("4x16/day", 4, 1, per_day=True),
}
BENCH_LAYOUTS = {
    name: Layout(name, INDEXES[name.removesuffix("+p1")], name.endswith("+p1"))
    for name in ("2of5", "2of5+p1", "2of6", "3of6", "3of6+p1", "4x16/day")
}
"""Band indexes measured beside the product's, not in it."""
PRODUCT_LAYOUTS = BAND_LAYOUTS
"""The product's band layouts (`simhash.bands`), measured in its own stores."""
BASELINE = FOUR_BY_16.name
CHOICES = [*PRODUCT_LAYOUTS, *BENCH_LAYOUTS]
DEFAULT_LAYOUTS = ",".join(PRODUCT_LAYOUTS)


def table_keys(simhashes: np.ndarray, table: list[tuple[int, int]]) -> np.ndarray:
    """Each fingerprint's key in one table: its blocks' bits side by side."""
    key = np.zeros(len(simhashes), dtype=np.uint64)
    offset = 0
    for start, width in table:
        key |= ((simhashes >> np.uint64(start)) & np.uint64((1 << width) - 1)) << np.uint64(offset)
        offset += width
    return key


# ----------------------------------------------------------------------------- the product's stores


def _stamped(method: Callable[..., Any], *args: Any, published_at: int) -> Any:
    """`method(*args, published_at)` where the store takes the retention stamp (issue 9), else without it."""
    if _takes_stamp(method.__func__):  # type: ignore[attr-defined]
        return method(*args, published_at=published_at)
    return method(*args)


@cache
def _takes_stamp(function: Callable[..., Any]) -> bool:
    return "published_at" in inspect.signature(function).parameters


def _link(doc_id: str, content: str, published_at: int) -> Link:
    """The verdict the cascade records for a new canonical."""
    link = Link(doc_id, Verdict.UNIQUE, doc_id, content=content_key(content))
    return replace(link, published_at=published_at) if hasattr(link, "published_at") else link


def _hashes(index: int) -> tuple[str, str]:
    """URL and content hashes of canonical `index` (hex SHA-256, as the featurizer's): every key the same size."""
    return hashlib.sha256(b"u%d" % index).hexdigest(), hashlib.sha256(b"c%d" % index).hexdigest()


def _register(state: Any, fps: np.ndarray, start: int, stop: int, per_day: int) -> None:
    """What the cascade writes for canonicals start..stop-1: exact keys claimed, the canonical with its
    bands, its verdict (`warm` first with the exact keys, as a batch is decided)."""
    docs = []
    for i in range(start, stop):
        url, content = _hashes(i)
        docs.append((f"scale-{i}", (URL_KEY + url, CONTENT_KEY + content), content, int(fps[i, 0]), i))
    state.warm(Reads([], [key for doc in docs for key in doc[1]], []))
    for doc_id, keys, content, simhash, i in docs:
        stamp = int(published(i, per_day))
        language = LANGUAGES[int(fps[i, 1])]
        _stamped(state.exact_claim, list(keys), doc_id, published_at=stamp)
        keys = state.band_layout.keys(simhash)
        _stamped(state.add_canonical, doc_id, simhash, language, keys, published_at=stamp)
        state.record_verdict(_link(doc_id, content, stamp))


class RedisProduct:
    """A band layout of the product in `RedisStateStore`, written as the service writes (`BatchedState.flush`
    under a lease)."""

    store = "redis"

    def __init__(self, client: redis.Redis, prefix: str, per_day: int, band_layout: BandLayout) -> None:
        self.client = client
        self.prefix = prefix
        self.per_day = per_day
        self.name = band_layout.name
        self.state = RedisStateStore(client, prefix, band_layout=band_layout)
        self.lease = RedisLock(client, f"{prefix}lease", ttl_s=3_600, renew=False).acquire()

    def grow(self, fps: np.ndarray, start: int, stop: int) -> None:
        batched = BatchedState(self.state)
        for first in range(start, stop, WRITE_BATCH):
            _register(batched, fps, first, min(stop, first + WRITE_BATCH), self.per_day)
            batched.flush(self.lease)

    def read(self, sims: np.ndarray, langs: np.ndarray, now: int) -> list[int]:
        return [len(found) for found in self._found(sims, langs)]

    def seqs(self, sims: np.ndarray, langs: np.ndarray, now: int) -> list[set[int]]:
        return [{c.seq for c in found} for found in self._found(sims, langs)]

    def _found(self, sims: np.ndarray, langs: np.ndarray) -> list[list[Canonical]]:
        keys = self.state.band_layout.keys
        queries = [(LANGUAGES[int(lang)], keys(int(sim))) for sim, lang in zip(sims, langs, strict=True)]
        return self.state.band_candidates_many(queries)


class SqliteProduct:
    """A band layout of the product in `SqliteStateStore`, written as the file runner writes (`commit` per
    100,000)."""

    store = "sqlite"

    def __init__(self, path: Path, per_day: int, band_layout: BandLayout) -> None:
        self.path = path
        self.per_day = per_day
        self.name = band_layout.name
        self.state = SqliteStateStore(path, band_layout=band_layout)

    def grow(self, fps: np.ndarray, start: int, stop: int) -> None:
        for first in range(start, stop, WRITE_BATCH):
            _register(self.state, fps, first, min(stop, first + WRITE_BATCH), self.per_day)
            if (first + WRITE_BATCH) % SQLITE_COMMIT < WRITE_BATCH:
                self.state.commit()
        self.state.commit()

    def size(self) -> int:
        """The database file and its write-ahead log."""
        return sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())

    def read(self, sims: np.ndarray, langs: np.ndarray, now: int) -> list[int]:
        return [len(found) for found in self._found(sims, langs)]

    def seqs(self, sims: np.ndarray, langs: np.ndarray, now: int) -> list[set[int]]:
        return [{c.seq for c in found} for found in self._found(sims, langs)]

    def _found(self, sims: np.ndarray, langs: np.ndarray) -> list[list[Canonical]]:
        keys = self.state.band_layout.keys
        queries = [(LANGUAGES[int(lang)], keys(int(sim))) for sim, lang in zip(sims, langs, strict=True)]
        self.state.warm(Reads([], [], queries))
        return [self.state.band_candidates(language, query) for language, query in queries]

    def forget(self) -> None:
        """Drop what `warm` loaded (the runner commits between chunks), outside the timings."""
        self.state.commit()


# ----------------------------------------------------------------------------- bench-only indexes in Redis

# KEYS: hash buckets; ARGV[i]: for KEYS[i], tokens "-(field+1) seq seq ... -(field+1) seq ...": each field's
# new seqs, appended to its space-separated list (a field's first write is one HSETNX).
_APPEND = """
local function put(key, field, seqs)
  if field ~= nil then
    local value = table.concat(seqs, ' ')
    if redis.call('HSETNX', key, field, value) == 0 then
      redis.call('HSET', key, field, redis.call('HGET', key, field) .. ' ' .. value)
    end
  end
end
for i, key in ipairs(KEYS) do
  local field, seqs = nil, {}
  for token in string.gmatch(ARGV[i], '%-?%d+') do
    if string.sub(token, 1, 1) == '-' then
      put(key, field, seqs)
      field, seqs = tostring(-tonumber(token) - 1), {}
    else
      seqs[#seqs + 1] = token
    end
  end
  put(key, field, seqs)
end
return 0
"""
# ARGV: prefix, probe (0/1), T, T bucket-bit counts, T field-bit counts, then per query: language, day
# count, days..., and (bucket, field) per table. Returns per query its seqs, space-separated (with repeats).
# A probe flips one key bit: in the field, the same hash (one HMGET for all of them); in the bucket, another.
_LOOKUP = """
local prefix, probe, T = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local bucket_bits, field_bits = {}, {}
for t = 1, T do
  bucket_bits[t] = tonumber(ARGV[3 + t])
  field_bits[t] = tonumber(ARGV[3 + T + t])
end
local out = {}
local i = 4 + 2 * T
while i <= #ARGV do
  local language, days = ARGV[i], tonumber(ARGV[i + 1])
  local day_at = i + 2
  i = day_at + days
  local parts = {}
  for t = 1, T do
    local bucket, field = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
    i = i + 2
    for d = 0, days - 1 do
      local base = prefix .. (t - 1) .. ':' .. language .. ':' .. ARGV[day_at + d] .. ':'
      local key = base .. bucket
      local fields = {field}
      if probe == 1 then
        for j = 0, field_bits[t] - 1 do fields[j + 2] = bit.bxor(field, 2 ^ j) end
      end
      for _, found in ipairs(redis.call('HMGET', key, unpack(fields))) do
        if found then parts[#parts + 1] = found end
      end
      if probe == 1 then
        for j = 0, bucket_bits[t] - 1 do
          local found = redis.call('HGET', base .. bit.bxor(bucket, 2 ^ j), field)
          if found then parts[#parts + 1] = found end
        end
      end
    end
  end
  out[#out + 1] = table.concat(parts, ' ')
end
return out
"""
# ARGV: prefix, seqs. The record of each seq (stamp, simhash, figures, doc id), as the product's s: family.
_RECORDS = """
local out = {}
for i = 2, #ARGV do
  out[i - 1] = redis.call('HGET', ARGV[1] .. 's:' .. math.floor(tonumber(ARGV[i]) / 256), ARGV[i]) or false
end
return out
"""


class Records:
    """seq -> fingerprint, day stamp and doc id, the product's `s:` encoding (a hash per 256 seqs; no figures)."""

    def __init__(self, client: redis.Redis, prefix: str, per_day: int, key: Callable[[int], str] | None = None) -> None:
        self.client = client
        self.prefix = prefix
        self.per_day = per_day
        self.key = key or (lambda bucket: f"{prefix}s:{bucket}")
        self.lookup = client.register_script(_RECORDS)

    def grow(self, fps: np.ndarray, start: int, stop: int, ids: Callable[[int], str]) -> None:
        """Records of seqs start+1..stop (seq = index + 1, as the baseline draws them)."""
        with self.client.pipeline(transaction=False) as pipe:
            for bucket in range((start + 1) // 256, stop // 256 + 1):
                seqs = range(max(start + 1, bucket * 256), min(stop, bucket * 256 + 255) + 1)
                if seqs:
                    mapping = {
                        str(seq): ENTRIES.write(int(fps[seq - 1, 0]), f"{self._day(seq - 1):04x}", 0, ids(seq - 1))
                        for seq in seqs
                    }
                    pipe.hset(self.key(bucket), mapping=mapping)  # type: ignore[arg-type]
                if len(pipe) >= 256:
                    pipe.execute()
            pipe.execute()

    def _day(self, index: int) -> int:
        return int(published(index, self.per_day)) // 86_400

    def fetch(self, seqs: list[int]) -> dict[int, tuple[int, str]]:
        values = self.lookup(args=[self.prefix, *seqs]) if seqs else []
        return {seq: (ENTRIES.read(v)[0], ENTRIES.read(v)[2]) for seq, v in zip(seqs, values, strict=True) if v}


def _digits(values: np.ndarray) -> np.ndarray:
    """Decimal digits of each (unsigned) value."""
    return 1 + sum((values >= np.uint64(10**k)).astype(np.int64) for k in range(1, 20))


class BenchIndex:
    """A layout's tables in Redis: per table, language (and day), a hash per bucket of keys; field = the
    key's low bits, value = the space-separated seqs with that key (the product's band encoding)."""

    def __init__(
        self, client: redis.Redis, index: Index, prefix: str, records: Records, bucket_target: int, per_day: int
    ) -> None:
        self.client = client
        self.index = index
        self.prefix = prefix
        self.records = records
        self.per_day = per_day
        self.tables = index.tables()
        sized_for = per_day if index.per_day else bucket_target
        spread = max(0, int(np.floor(np.log2(max(sized_for, 64) / 64))))  # bucket bits for ~64 keys a bucket
        self.key_bits = [sum(width for _, width in table) for table in self.tables]
        self.field_bits = [max(6, bits - spread) for bits in self.key_bits]
        self.bucket_bits = [bits - field for bits, field in zip(self.key_bits, self.field_bits, strict=True)]
        self.append = client.register_script(_APPEND)
        self.lookup = client.register_script(_LOOKUP)

    def _days(self, indexes: np.ndarray) -> np.ndarray:
        if not self.index.per_day:
            return np.zeros(len(indexes), dtype=np.int64)
        return published(indexes, self.per_day) // 86_400

    def _name(self, table: int, language: str, day: int, bucket: int) -> str:
        return f"{self.prefix}{table}:{language}:{day}:{bucket}"

    def _fields(self, keys: np.ndarray, table: int) -> np.ndarray:
        return keys & np.uint64((1 << self.field_bits[table]) - 1)

    def grow(self, fps: np.ndarray, start: int, stop: int) -> None:
        """Append seqs start+1..stop to every table: one script call per APPEND_BUCKETS buckets."""
        indexes = np.arange(start, stop, dtype=np.int64)
        seqs = (indexes + 1).astype(np.int64)
        langs = fps[start:stop, 1].astype(np.int64)
        days = self._days(indexes)
        for t, table in enumerate(self.tables):
            keys = table_keys(fps[start:stop, 0], table)
            fields = self._fields(keys, t).astype(np.int64)
            buckets = (keys >> np.uint64(self.field_bits[t])).astype(np.int64)
            order = np.lexsort((seqs, fields, buckets, days, langs))
            group = np.stack([langs[order], days[order], buckets[order], fields[order]])
            changed = np.r_[True, (group[:, 1:] != group[:, :-1]).any(axis=0)]
            new_field = np.flatnonzero(changed)
            new_bucket = np.flatnonzero(np.r_[True, (group[:3, 1:] != group[:3, :-1]).any(axis=0)])
            # tokens: a field's marker -(field + 1) before its first seq, then the seqs
            tokens = np.empty(len(order) + len(new_field), dtype=np.int64)
            at = np.arange(len(order)) + np.cumsum(changed)  # where each seq goes
            tokens[at] = seqs[order]
            tokens[at[new_field] - 1] = -(group[3, new_field] + 1)
            text = " ".join(map(str, tokens.tolist()))
            ends = np.r_[0, np.cumsum(_digits(np.abs(tokens).astype(np.uint64)) + (tokens < 0) + 1)]
            first_token = at[new_bucket] - 1  # each bucket starts with its first field's marker
            char_at = np.r_[ends[first_token], len(text) + 1]
            names, payloads = [], []
            for g, k in enumerate(order[new_bucket].tolist()):
                names.append(self._name(t, LANGUAGES[langs[k]], int(days[k]), int(buckets[k])))
                payloads.append(text[char_at[g] : char_at[g + 1] - 1])
                if len(names) == APPEND_BUCKETS:
                    self.append(keys=names, args=payloads)
                    names, payloads = [], []
            if names:
                self.append(keys=names, args=payloads)

    def _seq_lists(self, sims: np.ndarray, langs: np.ndarray, now: int, probe: bool) -> list[set[int]]:
        days = [now // 86_400, now // 86_400 - 1] if self.index.per_day else [0]
        per_table = []
        for t, table in enumerate(self.tables):
            keys = table_keys(sims, table)
            low = np.uint64((1 << self.field_bits[t]) - 1)
            per_table.append(((keys >> np.uint64(self.field_bits[t])).tolist(), (keys & low).tolist()))
        args: list[Any] = [self.prefix, int(probe), len(self.tables), *self.bucket_bits, *self.field_bits]
        for q, lang in enumerate(langs.tolist()):
            args += [LANGUAGES[lang], len(days), *days]
            for buckets, fields in per_table:
                args += [buckets[q], fields[q]]
        return [{int(seq) for seq in found.split()} for found in self.lookup(args=args)]

    def read(self, sims: np.ndarray, langs: np.ndarray, now: int, probe: bool) -> list[int]:
        """Both round trips (keys -> seqs, seqs -> fingerprints), as `band_candidates_many` makes them."""
        wanted = self._seq_lists(sims, langs, now, probe)
        every = sorted(set().union(*wanted))
        records = self.records.fetch(every)
        return [sum(1 for seq in seqs if seq in records) for seqs in wanted]

    def seqs(self, sims: np.ndarray, langs: np.ndarray, now: int, probe: bool) -> list[set[int]]:
        return self._seq_lists(sims, langs, now, probe)


class ProductBands(BenchIndex):
    """The product's own band family in its layout (`b:{t}{language}:{table}:{key >> shift}`, field = the rest of
    the key: `RedisStateStore._band_entries`), written in bulk."""

    def __init__(self, client: redis.Redis, store: RedisStateStore, records: Records) -> None:
        super().__init__(client, INDEXES[BASELINE], "", records, bucket_target=1, per_day=1)
        self.store = store
        layout = store.band_layout
        self.tables = [[(8 * byte, 8) for byte in table] for table in layout.tables]
        self.key_bits = [layout.key_bits] * len(self.tables)
        self.field_bits = [store._band_shift] * len(self.tables)  # the bucket: key >> shift
        self.bucket_bits = [bits - store._band_shift for bits in self.key_bits]

    def _name(self, table: int, language: str, day: int, bucket: int) -> str:
        return self.store._band_bucket(language, table, bucket)

    def _fields(self, keys: np.ndarray, table: int) -> np.ndarray:
        return keys & np.uint64(self.store._band_field)


class ProductBulk:
    """What `_register` and `BatchedState.flush` leave in Redis, written in bulk (HSET per hash bucket, the
    bands by script) with the store's own encoders: the public path writes about a thousand canonicals a
    second on this shared VM, too slow for 10M. Used past --public-max, once `verify_bulk` has found it
    writes, key for key and byte for byte, what the public path wrote up to there."""

    def __init__(self, client: redis.Redis, prefix: str, per_day: int, band_layout: BandLayout = FOUR_BY_16) -> None:
        self.client = client
        self.prefix = prefix
        self.per_day = per_day
        self.store = RedisStateStore(client, prefix, band_layout=band_layout)
        self.records = Records(client, prefix, per_day, self.store._entries_key)
        self.bands = ProductBands(client, self.store, self.records)

    def grow(self, fps: np.ndarray, start: int, stop: int) -> None:
        self.store.clock()  # marks an empty state (its layout, a token of its own) as the public path does
        self.client.delete(self.store._oldest)  # its stamps are not noted there: every sweep pass reads it whole
        self.bands.grow(fps, start, stop)
        self.records.grow(fps, start, stop, _doc_id)
        buckets: dict[str, dict[str, str]] = {}
        for i in range(start, stop):
            doc_id = _doc_id(i)
            url, content = _hashes(i)
            published_at = int(published(i, self.per_day))
            stamp = self.store._stamp(published_at, published_at)
            link = _link(doc_id, content, published_at)
            verdict = f"{stamp}{i + 1} {self.store._encoded(link)}"
            buckets.setdefault(self.store._bucket("v", doc_id), {})[doc_id] = verdict
            buckets.setdefault(self.store._bucket("c", doc_id), {})[doc_id] = str(i + 1)
            for key in (URL_KEY + url, CONTENT_KEY + content):
                bucket, field_ = self.store._exact(key)
                buckets.setdefault(bucket, {})[field_] = stamp + doc_id
        with self.client.pipeline(transaction=False) as pipe:
            for name, mapping in buckets.items():
                pipe.hset(name, mapping=mapping)  # type: ignore[arg-type]
                if len(pipe) >= 256:
                    pipe.execute()
            languages = {LANGUAGES[int(lang)]: 1 for lang in np.unique(fps[start:stop, 1])}
            pipe.hset(f"{self.prefix}languages", mapping=languages)  # type: ignore[arg-type]
            pipe.set(f"{self.prefix}seq", stop)
            pipe.set(f"{self.prefix}vseq", stop)
            pipe.set(f"{self.prefix}clock", int(published(stop - 1, self.per_day)))
            pipe.execute()


def dump(client: redis.Redis, prefix: str) -> dict[str, Any]:
    """Every key under `prefix` (named without it) and its value; the lease, its fences, the sweep's cursor and
    its families' oldest stamps left out (the lock's and the sweep's state, not what the cascade wrote)."""
    wanted = [
        key
        for key in client.scan_iter(match=f"{prefix}*", count=10_000)
        if not key[len(prefix) :].startswith(("lease", "lock:", "sweep", "oldest"))
    ]
    found: dict[str, Any] = {}
    for start in range(0, len(wanted), 5_000):  # pipelined: an 8x32+p1 state of 100,000 has a million keys
        part = wanted[start : start + 5_000]
        with client.pipeline(transaction=False) as pipe:
            for key in part:
                pipe.type(key)
            kinds = pipe.execute()
            for key, kind in zip(part, kinds, strict=True):
                if kind == "hash":
                    pipe.hgetall(key)
                else:
                    pipe.get(key)
            found.update((key[len(prefix) :], value) for key, value in zip(part, pipe.execute(), strict=True))
    if "layout" in found:  # each state's token is its own
        found["layout"] = found["layout"].partition(" ")[0]
    return found


def verify_bulk(
    client: redis.Redis, prefix: str, fps: np.ndarray, count: int, per_day: int, band_layout: BandLayout
) -> None:
    """Refuse to go on when `ProductBulk` would write other keys or values than the public path wrote under `prefix`."""
    check = f"{PREFIX}check:"
    ProductBulk(client, check, per_day, band_layout).grow(fps, 0, count)
    public, bulk = dump(client, prefix), dump(client, check)
    _delete(client, check)
    if public != bulk:
        differ = sorted(
            {name.split(":")[0] for name in public.keys() ^ bulk.keys()}
            | {name.split(":")[0] for name in public.keys() & bulk.keys() if public[name] != bulk[name]}
        )
        raise RuntimeError(
            f"the bulk writer differs from the public path in key families {differ}: the store's encoding"
            " changed; run with --public-max at least --canonicals (slow) or update ProductBulk"
        )
    say(
        f"bulk writer checked ({band_layout.name}): the same {len(public):,} keys and values as the public path at"
        f" {count:,} canonicals"
    )


# ----------------------------------------------------------------------------- recall on real near-duplicates


@dataclass(frozen=True)
class Pairs:
    """The pooled near-duplicate pairs of benchmarks/thresholds.py: originals, edits, and which are within threshold."""

    originals: np.ndarray
    """(simhash, language index) of each pair's original."""
    edits: np.ndarray
    within: np.ndarray
    """Whether the pair is within the shipped threshold of its language."""


def near_duplicate_pairs(settings: Settings) -> Pairs:
    """thresholds.py's pooled kinds, built by its own functions and seeds: English (NTREX against the GB, US
    and IN edits; updates, new headlines, dropped sentences; rng seed 0) and Bangla (the same edits, rng
    seed 1, and the nukta swap); Clough and the no-NFKC rows are its reference kinds, left out as there."""
    import thresholds as th

    data = th.DEFAULT_DATA
    pairs: list[tuple[int, int, int]] = []
    source = th.ntrex_docs(data, "newstest2019-src.eng.txt")
    english = [
        (a, b)
        for v in ("GB", "US", "IN")
        for a, b in zip(source, th.ntrex_docs(data, f"newstest2019-ref.eng-{v}.txt"), strict=True)
    ]
    english += [pair for kind in th.edited(source, random.Random(0)).values() for pair in kind]
    pairs += [(0, word_simhash(a.text(), 3), word_simhash(b.text(), 3)) for a, b in english]
    bengali_docs = th.ntrex_docs(data, "newstest2019-ref.ben.txt")
    bengali = [pair for kind in th.edited(bengali_docs, random.Random(1)).values() for pair in kind]
    bengali += [(d, th.Doc(th.swap_nukta(d.title), tuple(th.swap_nukta(x) for x in d.lines))) for d in bengali_docs]
    pairs += [(1, char_simhash(a.text(), 4), char_simhash(b.text(), 4)) for a, b in bengali]
    langs = np.array([p[0] for p in pairs], dtype=np.uint64)
    originals = np.stack([np.array([p[1] for p in pairs], dtype=np.uint64), langs], axis=1)
    edits = np.stack([np.array([p[2] for p in pairs], dtype=np.uint64), langs], axis=1)
    within = np.array([hamming(a, b) <= settings.simhash.threshold(LANGUAGES[lang]) for lang, a, b in pairs])
    return Pairs(originals, edits, within)


def recall(pairs: Pairs, found: list[set[int]]) -> dict[str, float]:
    """Share of all pairs within threshold and found (thresholds.py's idx recall), pooled and per language,
    and the share of the pairs within threshold that are found. Original k has seq k + 1."""
    hit = np.array([k + 1 in seqs for k, seqs in enumerate(found)]) & pairs.within
    lang = pairs.originals[:, 1]
    return {
        "recall_within_threshold": float(hit.mean()),
        "recall_en": float(hit[lang == 0].mean()),
        "recall_bn": float(hit[lang == 1].mean()),
        "found_of_within": float(hit.sum() / pairs.within.sum()),
    }


# ----------------------------------------------------------------------------- replay


def links_file(path: Path, fps: np.ndarray, count: int, per_day: int) -> None:
    """`count` links (links schema): each fingerprint a canonical's `unique` verdict, in decision order."""
    check = validator(LINK)
    with path.open("wb") as out:
        for i in range(count):
            url, content = _hashes(i)
            stamp = format_timestamp(int(published(i, per_day)))
            record = {
                "doc_id": f"scale-{i}",
                "verdict": "unique",
                "canonical_id": f"scale-{i}",
                "stage": None,
                "score": None,
                "linked_at": stamp,
                "seq": i + 1,
                "model": None,
                "url_hash": url,
                "content_hash": content,
                "simhash": f"{int(fps[i, 0]):016x}",
                "language": LANGUAGES[int(fps[i, 1])],
                "published_at": stamp,
            }
            if i == 0:
                check(record)
            out.write(orjson.dumps(record) + b"\n")


def replay_rate(client: redis.Redis, path: Path, prefix: str, band_layout: BandLayout) -> tuple[int, float]:
    """Links restored a second from the file into a fresh RedisStateStore: `read_link_record` and `restore`
    per line, what `dedup replay` does for each record of dedup.links. Its keys are deleted afterwards."""
    state = RedisStateStore(client, prefix, band_layout=band_layout)
    restored = 0
    started = time.perf_counter()
    with path.open("rb") as lines:
        for line in lines:
            restored += restore(read_link_record(orjson.loads(line)), state)
    seconds = time.perf_counter() - started
    _delete(client, prefix)
    return restored, restored / seconds


# ----------------------------------------------------------------------------- measuring


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def _delete(client: redis.Redis, prefix: str) -> None:
    keys = list(client.scan_iter(match=f"{prefix}*", count=10_000))
    for start in range(0, len(keys), 10_000):
        client.unlink(*keys[start : start + 10_000])


def families(client: redis.Redis, prefix: str) -> dict[str, int]:
    """MEMORY USAGE (every field counted) of the keys under `prefix`, by key family (the name up to ':')."""
    keys = list(client.scan_iter(match=f"{prefix}*", count=10_000))
    sizes: dict[str, int] = {}
    for start in range(0, len(keys), 2_000):
        part = keys[start : start + 2_000]
        with client.pipeline(transaction=False) as pipe:
            for key in part:
                pipe.memory_usage(key, samples=0)
            for key, size in zip(part, pipe.execute(), strict=True):
                family = key[len(prefix) :].split(":", 1)[0]
                sizes[family] = sizes.get(family, 0) + int(size or 0)
    return sizes


def timed_reads(
    read: Callable[[np.ndarray, np.ndarray], list[int]], queries: np.ndarray, after: Callable[[], None]
) -> dict[str, float]:
    """Candidates per query and seconds per batch of QUERY_BATCH queries (a warm-up batch first, untimed)."""
    batches = len(queries) // QUERY_BATCH
    read(queries[:QUERY_BATCH, 0], queries[:QUERY_BATCH, 1])
    after()
    seconds, counts = [], []
    for b in range(batches):
        part = queries[b * QUERY_BATCH : (b + 1) * QUERY_BATCH]
        started = time.perf_counter()
        counts += read(part[:, 0], part[:, 1])
        seconds.append(time.perf_counter() - started)
        after()
    return {
        "candidates_per_query": float(np.mean(counts)),
        "band_read_p50_ms": float(np.percentile(seconds, 50) * 1e3),
        "band_read_p99_ms": float(np.percentile(seconds, 99) * 1e3),
    }


@dataclass
class Row:
    """One layout's measurements at one point."""

    layout: str
    store: str
    baseline: bool
    canonicals: int
    measured: dict[str, float] = field(default_factory=dict)


@contextmanager
def redis_server(url: str | None, folder: Path) -> Iterator[str]:
    """The given Redis, or a redis-server of our own on a free port (--save '' --appendonly no)."""
    if url is not None:
        yield url
    else:
        with local_redis(folder / "redis") as own:
            yield own


def run(args: argparse.Namespace) -> dict[str, Any]:
    settings = Settings()
    names = args.layouts.split(",")
    products = [PRODUCT_LAYOUTS[name] for name in dict.fromkeys([BASELINE, *names]) if name in PRODUCT_LAYOUTS]
    chosen = [BENCH_LAYOUTS[name] for name in names if name in BENCH_LAYOUTS]
    points = sorted({p for p in map(int, args.points.split(",")) if p < args.canonicals} | {args.canonicals})
    fps = fingerprints(args.canonicals, args.seed, args.jobs)
    queries = fingerprints(QUERY_BATCH * args.batches, args.seed + 1, args.jobs)
    pairs = near_duplicate_pairs(settings)
    say(
        f"{len(fps):,} canonicals ({int(fps[:, 1].sum()):,} Bangla), {len(queries):,} queries,"
        f" {len(pairs.within)} near-duplicate pairs ({int(pairs.within.sum())} within threshold); points {points}"
    )
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="scale-") as tmp, redis_server(args.redis_url, Path(tmp)) as url:
        folder = Path(tmp)
        client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=600)
        replay_links = min(args.replay_links, args.canonicals)
        links_file(folder / "links.jsonl", fps, replay_links, args.per_day)
        replays = {}
        for layout in products:
            restored, replays[layout.name] = replay_rate(client, folder / "links.jsonl", f"{PREFIX}replay:", layout)
            say(f"replay ({layout.name}): {restored:,} links restored into Redis, {replays[layout.name]:,.0f} a second")

        bench_indexes = {layout.index.name for layout in chosen}
        recalls = _recalls(client, folder, pairs, products, chosen, bench_indexes, args)
        redis_states = {
            layout.name: RedisProduct(client, f"{PREFIX}{layout.name}:", args.per_day, layout) for layout in products
        }
        sqlites = {
            layout.name: SqliteProduct(folder / f"state-{layout.name}.sqlite3", args.per_day, layout)
            for layout in ([] if args.skip_sqlite else products)
        }
        bulks = {
            name: ProductBulk(client, state.prefix, args.per_day, state.state.band_layout)
            for name, state in redis_states.items()
        }
        records = Records(client, f"{PREFIX}rec:", args.per_day)
        indexes = {
            name: BenchIndex(client, INDEXES[name], f"{PREFIX}{name}:", records, args.bucket_target, args.per_day)
            for name in sorted(bench_indexes)
        }
        grown: dict[str, int] = dict.fromkeys([*redis_states, "records", *indexes], 0)
        edges = {*points, *range(0, args.canonicals, GROW_SLICE), args.public_max, args.sqlite_max}
        edges = sorted(edge for edge in edges if 0 <= edge <= args.canonicals)
        measured = 0
        for first, last in itertools.pairwise(edges):
            took = {}
            for name, state in redis_states.items():
                started = time.perf_counter()
                write = (state if last <= args.public_max else bulks[name]).grow
                grown[name] += _growth(client, write, fps, first, last)
                took[f"redis {name}"] = time.perf_counter() - started
                if last == args.public_max < args.canonicals:
                    verify_bulk(client, state.prefix, fps, last, args.per_day, state.state.band_layout)
            for name, sqlite in sqlites.items():
                if last <= args.sqlite_max:
                    started = time.perf_counter()
                    sqlite.grow(fps, first, last)
                    took[f"sqlite {name}"] = time.perf_counter() - started
            if indexes:
                grown["records"] += _growth(client, records.grow, fps, first, last, _doc_id)
            if last in points:  # the bench indexes grow a point at a time: a bucket costs a script step per call
                for name, index in indexes.items():
                    started = time.perf_counter()
                    grown[name] += _growth(client, index.grow, fps, measured, last)
                    took[name] = time.perf_counter() - started
            said = ", ".join(f"{k} {v:.0f} s" for k, v in took.items())
            say(f"built {last:,} canonicals ({said}); Redis used_memory {used_memory(client) / 2**30:.2f} GiB")
            if last in points:
                measured = last
                rows += _measure_point(
                    client, last, redis_states, sqlites, indexes, grown, chosen, queries, recalls, args
                )
                _write(_report(rows, replays, replay_links, args, len(pairs.within)), args.json)
        if args.redis_url is not None:
            _delete(client, PREFIX)
        client.close()
    return _report(rows, replays, replay_links, args, len(pairs.within))


def _write(result: dict[str, Any], path: Path | None) -> None:
    """The numbers so far (after every point: a long run that is stopped keeps what it measured)."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))


def _doc_id(index: int) -> str:
    return f"scale-{index}"


def _growth(client: redis.Redis, write: Callable[..., None], *args: Any) -> int:
    """Bytes of Redis used_memory that `write(*args)` added."""
    before = used_memory(client)
    write(*args)
    return used_memory(client) - before


def _recalls(
    client: redis.Redis,
    folder: Path,
    pairs: Pairs,
    products: list[BandLayout],
    chosen: list[Layout],
    bench: set[str],
    args: argparse.Namespace,
) -> dict[str, dict[str, float]]:
    """Recall of each layout (and store): every original registered in a fresh index, every edit looked up."""
    count = len(pairs.originals)
    now = int(published(count - 1, args.per_day))
    edits = pairs.edits[:, 0], pairs.edits[:, 1]
    out = {}
    prefix = f"{PREFIX}pairs:"
    for layout in products:
        state = RedisProduct(client, f"{prefix}{layout.name}:", args.per_day, layout)
        state.grow(pairs.originals, 0, count)
        out[f"{layout.name} redis"] = recall(pairs, state.seqs(*edits, now))
        if not args.skip_sqlite:
            sqlite = SqliteProduct(folder / f"pairs-{layout.name}.sqlite3", args.per_day, layout)
            sqlite.grow(pairs.originals, 0, count)
            out[f"{layout.name} sqlite"] = recall(pairs, sqlite.seqs(*edits, now))
            sqlite.state.close()
    records = Records(client, f"{prefix}rec:", args.per_day)
    records.grow(pairs.originals, 0, count, _doc_id)
    for name in sorted(bench):
        index = BenchIndex(client, INDEXES[name], f"{prefix}{name}:", records, args.bucket_target, args.per_day)
        index.grow(pairs.originals, 0, count)
        for layout in chosen:
            if layout.index.name == name:
                out[layout.name] = recall(pairs, index.seqs(*edits, now, layout.probe))
    _delete(client, prefix)
    for name, found in out.items():
        say(
            f"recall {name}: {found['recall_within_threshold']:.1%} of all pairs within threshold and found"
            f" (en {found['recall_en']:.1%}, bn {found['recall_bn']:.1%});"
            f" {found['found_of_within']:.1%} of those within"
        )
    return out


def _lookups(layout: Layout, index: BenchIndex) -> int:
    """Hash fields read per query."""
    days = 2 if layout.index.per_day else 1
    return days * sum(1 + (bits if layout.probe else 0) for bits in index.key_bits)


def _measure_point(
    client: redis.Redis,
    point: int,
    redis_states: dict[str, RedisProduct],
    sqlites: dict[str, SqliteProduct],
    indexes: dict[str, BenchIndex],
    grown: dict[str, int],
    chosen: list[Layout],
    queries: np.ndarray,
    recalls: dict[str, dict[str, float]],
    args: argparse.Namespace,
) -> list[Row]:
    now = int(published(point - 1, args.per_day))
    rows = []
    base_families: dict[str, int] = {}
    for name, state in redis_states.items():
        family = families(client, state.prefix)
        base_families = family if name == BASELINE else base_families
        lookups = state.state.band_layout.lookups_per_query
        measured = timed_reads(partial(state.read, now=now), queries, lambda: None)
        by_family = {f"bytes_{kind}": size / point for kind, size in sorted(family.items())}
        measured |= {"bytes_per_canonical": grown[name] / point, **by_family, "lookups_per_query": lookups}
        rows.append(Row(name, "redis", name == BASELINE, point, measured | recalls[f"{name} redis"]))
        sqlite = sqlites.get(name)
        if sqlite is not None and point <= args.sqlite_max:
            measured = timed_reads(partial(sqlite.read, now=now), queries, sqlite.forget)
            measured |= {"bytes_per_canonical": sqlite.size() / point, "lookups_per_query": lookups}
            found = recalls[f"{name} sqlite"]
            rows.append(Row(f"{name} (sqlite)", "sqlite", name == BASELINE, point, measured | found))
    for layout in chosen:
        index = indexes[layout.index.name]
        measured = timed_reads(partial(index.read, now=now, probe=layout.probe), queries, lambda: None)
        shared = grown[BASELINE] - base_families.get("b", 0) - base_families.get("s", 0)
        own = grown["records"] + grown[layout.index.name]
        measured |= {
            "bytes_per_canonical": (shared + own) / point,
            "bytes_tables": grown[layout.index.name] / point,
            "bytes_s": grown["records"] / point,
            "lookups_per_query": _lookups(layout, index),
        }
        rows.append(Row(layout.name, "redis", False, point, measured | recalls[layout.name]))
    for row in rows:
        m = row.measured
        say(
            f"{point:,} {row.layout} ({row.store}): {m['candidates_per_query']:.1f} candidates a query, band read"
            f" p50 {m['band_read_p50_ms']:.1f} ms p99 {m['band_read_p99_ms']:.1f} ms a batch of {QUERY_BATCH},"
            f" {m['bytes_per_canonical']:.0f} bytes a canonical"
        )
    return rows


def _report(
    rows: list[Row], replays: dict[str, float], restored: int, args: argparse.Namespace, pairs: int
) -> dict[str, Any]:
    layouts: dict[str, dict[str, Any]] = {}
    for row in rows:
        entry = layouts.setdefault(
            row.layout, {"name": row.layout, "baseline": row.baseline, "store": row.store, "points": []}
        )
        entry["points"].append({"canonicals": row.canonicals, **{k: round(v, 4) for k, v in row.measured.items()}})
    return {
        "layouts": list(layouts.values()),
        "replay_links_per_s": round(replays[BASELINE], 1),
        "replay_links_per_s_by_layout": {name: round(rate, 1) for name, rate in replays.items()},
        "replay_links": restored,
        "queries": QUERY_BATCH * args.batches,
        "query_batch": QUERY_BATCH,
        "near_duplicate_pairs": pairs,
        "seed": args.seed,
        "per_day": args.per_day,
        "bucket_target": args.bucket_target,
        "command": " ".join(["benchmarks/scale.py", *sys.argv[1:]]),
    }


def print_table(result: dict[str, Any]) -> None:
    """The JSON as a rich table: one row per layout and point."""
    table = Table(title=f"SimHash index at scale (batches of {result['query_batch']} queries)")
    for header in ("layout", "store", "canonicals", "cand/query", "N/cand", "lookups", "p50 ms", "p99 ms"):
        table.add_column(header, justify="left" if header in ("layout", "store") else "right")
    for header in ("bytes/canon", "recall", "en", "bn", "of within t"):
        table.add_column(header, justify="right")
    for layout in result["layouts"]:
        for point in layout["points"]:
            candidates = point["candidates_per_query"]
            table.add_row(
                layout["name"] + (" (baseline)" if layout["baseline"] and layout["store"] == "redis" else ""),
                layout["store"],
                f"{point['canonicals']:,}",
                f"{candidates:,.1f}",
                f"{point['canonicals'] / candidates:,.0f}" if candidates else "-",
                f"{point['lookups_per_query']:,}",
                f"{point['band_read_p50_ms']:,.1f}",
                f"{point['band_read_p99_ms']:,.1f}",
                f"{point['bytes_per_canonical']:,.0f}",
                f"{point['recall_within_threshold']:.1%}",
                f"{point['recall_en']:.1%}",
                f"{point['recall_bn']:.1%}",
                f"{point['found_of_within']:.1%}",
            )
    Console(width=200).print(table)
    for name, rate in result["replay_links_per_s_by_layout"].items():
        print(f"replay into Redis ({name}): {rate:,.0f} links a second ({result['replay_links']:,} links)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--canonicals", type=int, default=10_000_000, help="canonicals at the last point")
    parser.add_argument("--json", type=Path, default=None, help="write the numbers to this file")
    parser.add_argument("--points", default="100000,1000000,3000000,10000000", help="measure at these sizes too")
    parser.add_argument(
        "--layouts",
        default=DEFAULT_LAYOUTS,
        help=f"comma-separated, of {', '.join(CHOICES)} (the product's {BASELINE}, the baseline, always)",
    )
    parser.add_argument("--redis-url", default=None, help="an empty Redis to use (default: start redis-server)")
    parser.add_argument("--skip-sqlite", action="store_true", help="no embedded-store baseline")
    parser.add_argument(
        "--sqlite-max", type=int, default=1_000_000, help="SQLite only up to this many (its public path: ~3k/s here)"
    )
    parser.add_argument(
        "--public-max",
        type=int,
        default=100_000,
        help="Redis baseline through the store's public path up to this many, then the checked bulk writer",
    )
    parser.add_argument("--batches", type=int, default=40, help=f"batches of {QUERY_BATCH} queries timed")
    parser.add_argument("--replay-links", type=int, default=100_000, help="links replayed (at most --canonicals)")
    parser.add_argument("--per-day", type=int, default=1_000_000, help="canonicals a day of stream time")
    parser.add_argument("--bucket-target", type=int, default=10_000_000, help="canonicals bench buckets are sized for")
    parser.add_argument("--seed", type=int, default=0, help="articles of this seed (queries: seed + 1)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="processes making fingerprints")
    parser.add_argument("--fingerprints-only", action="store_true", help="only make (cache) the fingerprints")
    args = parser.parse_args(argv)
    if unknown := [name for name in args.layouts.split(",") if name not in CHOICES]:
        parser.error(f"--layouts: unknown {unknown}; choose from {', '.join(CHOICES)}")
    if args.fingerprints_only:
        fingerprints(args.canonicals, args.seed, args.jobs)
        return 0
    result = run(args)
    print_table(result)
    if args.json is not None:
        _write(result, args.json)
        print(f"numbers written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

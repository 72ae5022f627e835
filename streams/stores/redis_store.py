"""The production state store: the same `StateStore` on Redis, shared by every worker.

Redis spends about 50 bytes on every key, so nothing here has a key of its own:
entries live as fields of hashes split into a fixed number of buckets (a small
hash is stored as one compact listpack). Under a configurable prefix (default
`dedup:`), with `B(x)` the first `bucket_bits` bits of a hash of `x`:

| hash | field | value |
|---|---|---|
| `v:{B(doc_id)}` | doc_id | the verdict: its stamp, its `seq`, a space, then the fields of `_verdict_value` |
| `x:{B(key)}` | 80 more bits of the key's hash | stamp, then the canonical (or document under review) it names |
| `c:{B(doc_id)}` | doc_id | a canonical's first-seen `seq` (marks it registered; its s: entry holds the stamp) |
| `s:{seq >> 8}` | seq | the canonical's simhash (16 hex digits), its stamp, then its doc_id |
| `b:{language}:{band}:{value >> 6}` | band value | the `seq`s of the canonicals with that value, space-separated |
| `g:{B(doc_id)}` | doc_id | members of a canonical's group besides itself, times 65536, plus the stamp |
| `seq` (string) | | the last canonical `seq` given out (never reused, also after a relink removed one) |
| `vseq` (string) | | the last verdict `seq` given out: the order replay restores in |
| `clock` (string) | | the stream's time: the newest `published_at` applied (moves forward only) |
| `sweep` (hash) | `day`, `at` | the sweep's cursor: the day its pass began on, where it goes on |
| `languages` (hash) | language | every language a canonical was registered in (the sweep finds band entries by it) |

Retention (`RetentionSettings`, in the stream's time): a stamp is the day of an entry's
`published_at` (4 hex digits), so an entry is hidden once all of its day is older than the
clock less its family's retention: verdicts (`verdicts_days`), exact keys and group sizes
(`exact_days`), a canonical's s:, c: and band entries (`bands_days`, by its s: stamp; band
entries hold seqs, filtered on read). Every read hides an expired entry at once, every write
treats it as absent, and `expire` removes it later, bucket by bucket (a cursor in Redis, never
LRU); the streaming agents sweep after a batch, under the lease (`stores.batched`). The
sweep reads every bucket once a day instead of keeping a per-day index of what to remove,
which would repeat every entry's field (a doc_id, 20 hex digits of a key's hash) in memory:
measured on the 100,000-document run of `benchmarks/redis_memory.py` (293 bytes per canonical,
stamps included), such an index cost 130 bytes more per canonical as appended strings, 332 as
sets; the stamps cost 10 (283 before them). State written before the stamps reads wrongly:
rebuild it with `dedup replay`.

Every value that holds a caller's strings ends with them (after fixed-width fields,
the first of two prefixed by its length), so no id, however strange, can break the
encoding.

Writes come from the streaming agents in batches (`apply`): fenced by the
registration lease, checked against the verdicts already recorded, and applied
in one MULTI/EXEC transaction (see `apply`). `dedup relink` writes the same way,
its verdict replacements checked against the verdicts it was planned on.

Buckets stay small enough for the compact encoding up to about 100,000 canonicals
(`benchmarks/redis_memory.py` measures bytes per canonical). Claims,
compare-and-set and canonical registration run as Lua scripts, atomic across
workers. The registration script writes the `s:` bucket of the `seq` it has just
drawn, a key it cannot be given in advance: on Redis Cluster, give the prefix a
hash tag (`{dedup}:`) so every key lives in one slot.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import redis
from redis.client import Pipeline

from streams.config import RetentionSettings
from streams.core.model import (
    CONTENT_KEY_CHARS,
    DAY_S,
    Canonical,
    Link,
    Stage,
    Verdict,
    clamped,
    expired,
    keep_seconds,
)
from streams.features.simhash import bands
from streams.stores.redis_lock import Lease, LeaseLost
from streams.stores.writes import (
    CanonicalWrite,
    ClaimWrite,
    GrowWrite,
    RemoveCanonicalWrite,
    ReplaceVerdictWrite,
    ReplaceWrite,
    VerdictWrite,
    Write,
)

_SIMHASH_HEX = 16
_DAY_HEX = 4
"""A stamp is the day (Unix s // 86400) of a `published_at`, in 4 hex digits: up to day 65535 (year 2149)."""
_DAY_MAX = 0xFFFF
_GROUP_DAY = 1 << 16
"""A group size is one integer, members * 65536 + day: a listpack keeps it in 4 bytes, a string would take 7."""
_WRITE_ATTEMPTS = 3
"""Transactions tried for one batch while only the renewal of its own lease ends their WATCH."""
_SWEEP_BUCKETS = 256
"""Hash buckets one sweep step may read: it stops at the first after `_SWEEP_FIELDS` fields read."""
_SWEEP_FIELDS = 20_000
"""Fields one sweep step reads at most, give or take a bucket: a few milliseconds of Redis time."""

# Scripts that judge an entry's age read the clock (KEYS[1]) first. An entry of day d is past a retention of
# `keep` seconds (0: forever) once the last second of its day is older than clock - keep, as `model.expired`
# says of `_day_end(d)`.
_AGE = """
local clock = tonumber(redis.call('GET', KEYS[1]) or '0')
local function expired(day, keep)
  keep = tonumber(keep)
  return keep > 0 and day * 86400 + 86399 < clock - keep
end
local function stamp(value) return tonumber(string.sub(value, 1, 4), 16) end
"""
# A verdict keeps the seq it had live (a replay) or draws the next one; the counter moves past it.
_VERDICT_SEQ = """
local function verdict_seq(counter, given)
  local seq = tonumber(given)
  if seq <= 0 then
    return redis.call('INCR', counter)
  elseif seq > tonumber(redis.call('GET', counter) or '0') then
    redis.call('SET', counter, seq)
  end
  return seq
end
"""
# Takes a canonical's seq out of one band entry (the field goes when it holds no other).
_DROP_BAND = """
local function drop_band(key, value, seq)
  local current = redis.call('HGET', key, value)
  if current then
    local kept = {}
    for token in string.gmatch(current, '%S+') do
      if token ~= seq then kept[#kept + 1] = token end
    end
    if #kept == 0 then
      redis.call('HDEL', key, value)
    else
      redis.call('HSET', key, value, table.concat(kept, ' '))
    end
  end
end
"""
_FENCE = """
if ARGV[1] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[1] then return -1 end
"""

# One command for many hash fields across buckets, and the clock they are read at: a pipeline of HGETs
# costs a command each in the client. KEYS: the clock, then the hashes.
_FIELDS = """
local out = {redis.call('GET', KEYS[1]) or '0'}
for i = 2, #KEYS do
  out[i] = redis.call('HGET', KEYS[i], ARGV[i - 1]) or false
end
return out
"""
_ADVANCE = """
local clock = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > clock then
  redis.call('SET', KEYS[1], ARGV[1])
  return tonumber(ARGV[1])
end
return clock
"""
# KEYS: clock, the x buckets; ARGV: exact retention, the stamped holder, the fields. An expired key is free.
_CLAIM = (
    _AGE
    + """
local holders = {}
for i = 2, #KEYS do
  local current = redis.call('HGET', KEYS[i], ARGV[i + 1])
  if not current or expired(stamp(current), ARGV[1]) then
    current = ARGV[2]
    redis.call('HSET', KEYS[i], ARGV[i + 1], current)
  end
  holders[i - 1] = string.sub(current, 5)
end
return holders
"""
)
# KEYS: clock, x bucket; ARGV: exact retention, field, expected holder, new holder. The stamp stays.
_REPLACE = (
    _AGE
    + """
local current = redis.call('HGET', KEYS[2], ARGV[2])
if current and string.sub(current, 5) == ARGV[3] and not expired(stamp(current), ARGV[1]) then
  redis.call('HSET', KEYS[2], ARGV[2], string.sub(current, 1, 4) .. ARGV[4])
  return 1
end
return 0
"""
)
# KEYS: clock, c bucket, seq counter, languages, 4 band buckets; ARGV: bands retention, doc_id, its s: entry
# (simhash hex, stamp, doc_id), language, 4 band values, s-bucket prefix. A canonical whose entry expired
# registers again under a new seq; the old seq stays hidden in its band entries until the sweep.
# The seq bucket is only known after INCR, so its key is built here from ARGV[9] (single-slot prefix).
_ADD_CANONICAL = (
    _AGE
    + """
local old = redis.call('HGET', KEYS[2], ARGV[2])
if old then
  local entry = redis.call('HGET', ARGV[9] .. math.floor(tonumber(old) / 256), old)
  if entry and not expired(tonumber(string.sub(entry, 17, 20), 16), ARGV[1]) then return 0 end
end
local seq = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[2], ARGV[2], seq)
redis.call('HSET', ARGV[9] .. math.floor(seq / 256), seq, ARGV[3])
redis.call('HSET', KEYS[4], ARGV[4], 1)
for i = 5, 8 do
  local value = ARGV[i]
  local current = redis.call('HGET', KEYS[i], value)
  if current then
    redis.call('HSET', KEYS[i], value, current .. ' ' .. seq)
  else
    redis.call('HSET', KEYS[i], value, seq)
  end
end
return seq
"""
)
# KEYS: clock, v bucket, vseq counter; ARGV: verdicts retention, doc_id, stamp, the encoded verdict, its seq
# (0: draw the next one). A verdict past its retention is no verdict: the new one replaces it.
_RECORD = (
    _AGE
    + _VERDICT_SEQ
    + """
local current = redis.call('HGET', KEYS[2], ARGV[2])
if current and not expired(stamp(current), ARGV[1]) then return 0 end
local seq = verdict_seq(KEYS[3], ARGV[5])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3] .. seq .. ' ' .. ARGV[4])
return seq
"""
)
# KEYS, ARGV as `_RECORD`, then the encoded verdict it replaces. Nothing is written unless the stored
# verdict is still that one (its stamp and seq aside).
_REPLACE_VERDICT = (
    _AGE
    + _VERDICT_SEQ
    + """
local current = redis.call('HGET', KEYS[2], ARGV[2])
if not current or expired(stamp(current), ARGV[1]) then return 0 end
if string.sub(current, string.find(current, ' ', 1, true) + 1) ~= ARGV[6] then return 0 end
local seq = verdict_seq(KEYS[3], ARGV[5])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3] .. seq .. ' ' .. ARGV[4])
return seq
"""
)
# KEYS: c bucket, 4 band buckets; ARGV: doc_id, 4 band values, s-bucket prefix. Takes the canonical's seq
# out of its band entries and forgets its s: entry; the seq counter is left alone (seqs are never reused).
_REMOVE_CANONICAL = (
    _DROP_BAND
    + """
local seq = redis.call('HGET', KEYS[1], ARGV[1])
if not seq then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', ARGV[6] .. math.floor(tonumber(seq) / 256), seq)
for i = 2, 5 do drop_band(KEYS[i], ARGV[i], seq) end
return tonumber(seq)
"""
)
# KEYS: clock, g bucket; ARGV: exact retention, doc_id, members to add (negative: fewer), the day of the
# latest member (0 for a shrink: the group keeps its stamp). An expired group counts from nothing again;
# a group back to its canonical alone loses its field, as if it had never grown.
_GROUP = (
    _AGE
    + """
local value = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')
local members, day = math.floor(value / 65536), value % 65536
if value > 0 and expired(day, ARGV[1]) then members, day = 0, 0 end
members = members + tonumber(ARGV[3])
if members <= 0 then redis.call('HDEL', KEYS[2], ARGV[2]) return 0 end
day = math.max(day, tonumber(ARGV[4]))
redis.call('HSET', KEYS[2], ARGV[2], members * 65536 + day)
return members
"""
)
# The sweep, one step: KEYS: clock, sweep cursor, lease key (unfenced: any key), the hashes; ARGV: lease
# token ('' unfenced), retention, where the stamp is ('v'alue prefix or 'g'roup integer), the most fields
# to remove, the cursor position of the first hash, the most fields to read. Removes expired fields hash by
# hash; the cursor moves past a hash once nothing expired is left in it, and the step ends after the hash
# that reached the fields to read. Returns how many it removed (-1: the lease is lost).
_EXPIRE_FIELDS = (
    _AGE
    + _FENCE
    + """
local left, at, budget = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
for i = 4, #KEYS do
  if budget <= 0 then
    redis.call('HSET', KEYS[2], 'at', at + i - 4)
    return tonumber(ARGV[4]) - left
  end
  local flat = redis.call('HGETALL', KEYS[i])
  budget = budget - #flat / 2
  for j = 1, #flat, 2 do
    local day = ARGV[3] == 'g' and tonumber(flat[j + 1]) % 65536 or stamp(flat[j + 1])
    if expired(day, ARGV[2]) then
      if left == 0 then
        redis.call('HSET', KEYS[2], 'at', at + i - 4)
        return tonumber(ARGV[4])
      end
      redis.call('HDEL', KEYS[i], flat[j])
      left = left - 1
    end
  end
end
redis.call('HSET', KEYS[2], 'at', at + #KEYS - 3)
return tonumber(ARGV[4]) - left
"""
)
# KEYS: clock, an s: bucket; ARGV: bands retention. Its expired entries (seq, entry, ...): only those travel.
_EXPIRED_CANONICALS = (
    _AGE
    + """
local out = {}
local flat = redis.call('HGETALL', KEYS[2])
for j = 1, #flat, 2 do
  if expired(tonumber(string.sub(flat[j + 1], 17, 20), 16), ARGV[1]) then
    out[#out + 1] = flat[j]
    out[#out + 1] = flat[j + 1]
  end
end
return out
"""
)
# The sweep of one s: bucket: KEYS: clock, sweep cursor, lease key, the s: bucket, then per canonical its
# c: bucket and its band buckets in every language (`width` keys in all); ARGV: lease token, bands
# retention, the cursor afterwards, width, then per canonical its seq, doc_id and 4 band values. A
# canonical still expired loses its s: entry, its c: entry if that still names this seq (it may have
# registered again), and its seq in its band entries, as `_REMOVE_CANONICAL` takes them out.
_EXPIRE_CANONICALS = (
    _AGE
    + _FENCE
    + _DROP_BAND
    + """
local width, removed, key = tonumber(ARGV[4]), 0, 5
for k = 5, #ARGV, 6 do
  local seq, doc = ARGV[k], ARGV[k + 1]
  local entry = redis.call('HGET', KEYS[4], seq)
  if entry and expired(tonumber(string.sub(entry, 17, 20), 16), ARGV[2]) then
    redis.call('HDEL', KEYS[4], seq)
    if redis.call('HGET', KEYS[key], doc) == seq then redis.call('HDEL', KEYS[key], doc) end
    for j = 1, width - 1 do drop_band(KEYS[key + j], ARGV[k + 2 + (j - 1) % 4], seq) end
    removed = removed + 1
  end
  key = key + width
end
redis.call('HSET', KEYS[2], 'at', ARGV[3])
return removed
"""
)


class StaleSnapshot(RuntimeError):
    """A batch was decided on a snapshot that another writer changed: decide it again."""


@dataclass
class Applied:
    """What `apply` did: the sequence number of each verdict recorded, and the documents skipped."""

    seqs: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    """Documents that had a verdict already: none of their writes were applied."""
    clock: int = 0
    """The clock once the batch was written (it moves to the batch's newest stamp)."""


@dataclass(frozen=True, slots=True)
class Keep:
    """Each key family's retention in seconds (0: forever), from `RetentionSettings`."""

    verdicts: int
    exact: int
    """Exact keys and group sizes."""
    bands: int
    """A canonical's s:, c: and band entries."""


@dataclass(frozen=True, slots=True)
class Swept:
    """What one bounded sweep did: fields removed, and whether the pass for the clock's day is complete."""

    removed: int
    done: bool


_RETENTION = RetentionSettings()


class RedisStateStore:
    """`StateStore` on a Redis server (or a Redis-protocol one)."""

    def __init__(
        self,
        client: redis.Redis,
        prefix: str = "dedup:",
        bucket_bits: int = 12,
        retention: RetentionSettings = _RETENTION,
    ) -> None:
        self._redis = client
        self._prefix = prefix
        self._bucket_hex = max(1, bucket_bits // 4)
        self._clock = f"{prefix}clock"
        self._cursor = f"{prefix}sweep"
        self.keep = Keep(
            keep_seconds(retention.verdicts_days),
            keep_seconds(retention.exact_days),
            keep_seconds(retention.bands_days),
        )
        self._fields = client.register_script(_FIELDS)
        self._advance = client.register_script(_ADVANCE)
        self._claim = client.register_script(_CLAIM)
        self._replace = client.register_script(_REPLACE)
        self._add_canonical = client.register_script(_ADD_CANONICAL)
        self._record = client.register_script(_RECORD)
        self._replace_verdict = client.register_script(_REPLACE_VERDICT)
        self._remove_canonical = client.register_script(_REMOVE_CANONICAL)
        self._group = client.register_script(_GROUP)
        self._expire_fields = client.register_script(_EXPIRE_FIELDS)
        self._expired_canonicals = client.register_script(_EXPIRED_CANONICALS)
        self._expire_canonicals = client.register_script(_EXPIRE_CANONICALS)

    @classmethod
    def from_url(
        cls,
        url: str,
        prefix: str = "dedup:",
        password: str | None = None,
        retention: RetentionSettings = _RETENTION,
    ) -> RedisStateStore:
        """A store on `url` (`redis://` or `rediss://` for TLS); the password may also be in the URL."""
        return cls(redis.Redis.from_url(url, password=password, decode_responses=True), prefix, retention=retention)

    def close(self) -> None:
        self._redis.close()

    def _bucket(self, kind: str, item: str) -> str:
        digest = hashlib.blake2b(item.encode(), digest_size=8).hexdigest()
        return f"{self._prefix}{kind}:{digest[: self._bucket_hex]}"

    def _exact(self, key: str) -> tuple[str, str]:
        """(bucket, field) of an exact key: the bucket's bits of its hash, then 80 more in the field (with 12
        bucket bits, two of a billion keys share all 92 with odds of about 1e-10); a field 16 bits
        shorter than before pays for the value's stamp."""
        digest = hashlib.blake2b(key.encode(), digest_size=16).hexdigest()
        return f"{self._prefix}x:{digest[: self._bucket_hex]}", digest[self._bucket_hex : self._bucket_hex + 20]

    # The clock and retention

    def clock(self) -> int:
        return int(self._redis.get(self._clock) or 0)

    def advance(self, published_at: int) -> int:
        """Move the clock forward to `published_at` (clamped to the wall clock plus a day); returns the clock."""
        return int(self._advance(keys=[self._clock], args=[clamped(published_at, time.time())]))

    def stale(self, keep_s: int, published_at: int, clock: int) -> bool:
        """Whether an entry stamped now with `published_at` is hidden at `clock` under retention `keep_s`."""
        return expired(_day_end(_day(published_at, time.time())), clock, keep_s)

    def verdict_of(self, doc_id: str) -> Link | None:
        return self.verdicts_of([doc_id])[doc_id]

    def verdicts_of(self, doc_ids: Sequence[str]) -> dict[str, Link | None]:
        """The verdicts of many documents in one round trip (None: not decided, or past its retention)."""
        return self.verdicts_at(doc_ids)[1] if doc_ids else {}

    def verdicts_at(self, doc_ids: Sequence[str]) -> tuple[int, dict[str, Link | None]]:
        """The clock and the verdicts read at it, in one round trip."""
        clock, values = self._read([(self._bucket("v", doc_id), doc_id) for doc_id in doc_ids])
        verdicts = {}
        for doc_id, value in zip(doc_ids, values, strict=True):
            live = value is not None and not expired(_day_end(int(value[:_DAY_HEX], 16)), clock, self.keep.verdicts)
            verdicts[doc_id] = _read_verdict(doc_id, value) if live else None
        return clock, verdicts

    def _read(self, places: Sequence[tuple[str, str]]) -> tuple[int, list[str | None]]:
        """The clock, and HGET of each (hash, field), in one round trip and one command."""
        found = self._fields(keys=[self._clock, *(h for h, _ in places)], args=[f for _, f in places])
        return int(found[0]), list(found[1:])

    def record_verdict(self, link: Link) -> Link:
        seq = self._queue_verdict(self._redis, link, self._stamp(link.published_at))
        if seq:
            return replace(link, seq=int(seq))
        stood = self.verdict_of(link.doc_id)
        assert stood is not None
        return stood

    def _stamp(self, published_at: int | None, clock: int | None = None) -> str:
        """The stamp of an entry: the day of its `published_at`, or of the clock (read now unless given)."""
        if published_at is None:
            published_at = self.clock() if clock is None else clock
        return f"{_day(published_at, time.time()):0{_DAY_HEX}x}"

    def _queue_verdict(self, client: redis.Redis | Pipeline, link: Link, stamp: str) -> int | Pipeline:
        keys = [self._clock, self._bucket("v", link.doc_id), f"{self._prefix}vseq"]
        args = [self.keep.verdicts, link.doc_id, stamp, _verdict_value(link), link.seq or 0]
        return self._record(keys=keys, args=args, client=client)

    def exact_lookup(self, keys: Sequence[str]) -> dict[str, str]:
        if not keys:
            return {}
        clock, values = self._read([self._exact(key) for key in keys])
        return {
            key: value[_DAY_HEX:]
            for key, value in zip(keys, values, strict=True)
            if value is not None and not expired(_day_end(int(value[:_DAY_HEX], 16)), clock, self.keep.exact)
        }

    def exact_claim(self, keys: Sequence[str], canonical_id: str, published_at: int) -> dict[str, str]:
        holders = self._queue_claim(self._redis, keys, canonical_id, self._stamp(published_at))
        return dict(zip(keys, holders, strict=True))

    def _queue_claim(
        self, client: redis.Redis | Pipeline, keys: Sequence[str], canonical_id: str, stamp: str
    ) -> list[str] | Pipeline:
        places = [self._exact(key) for key in keys]
        args = [self.keep.exact, stamp + canonical_id, *(f for _, f in places)]
        return self._claim(keys=[self._clock, *(b for b, _ in places)], args=args, client=client)

    def exact_replace(self, key: str, expected: str, canonical_id: str) -> bool:
        return bool(self._queue_exact_replace(self._redis, key, expected, canonical_id))

    def _queue_exact_replace(
        self, client: redis.Redis | Pipeline, key: str, expected: str, canonical_id: str
    ) -> int | Pipeline:
        bucket, field_ = self._exact(key)
        return self._replace(
            keys=[self._clock, bucket], args=[self.keep.exact, field_, expected, canonical_id], client=client
        )

    def _band_keys(self, language: str, bands: Sequence[int]) -> list[str]:
        return [f"{self._prefix}b:{language}:{index}:{value >> 6}" for index, value in enumerate(bands)]

    def band_candidates(self, language: str, bands: Sequence[int]) -> list[Canonical]:
        return self.band_candidates_many([(language, tuple(bands))])[0]

    def band_candidates_many(self, queries: Sequence[tuple[str, tuple[int, ...]]]) -> list[list[Canonical]]:
        """`band_candidates` of many (language, bands) queries in two round trips; a canonical past
        its retention (its s: entry's stamp) is none."""
        if not queries:
            return []
        _, values = self._read(
            [
                (key, str(value))
                for language, bands in queries
                for key, value in zip(self._band_keys(language, bands), bands, strict=True)
            ]
        )
        found = iter(values)
        wanted = [sorted({int(seq) for _ in bands for seq in (next(found) or "").split()}) for _, bands in queries]
        every = sorted({seq for seqs in wanted for seq in seqs})
        if not every:
            return [[] for _ in queries]
        clock, values = self._read([(f"{self._prefix}s:{seq // 256}", str(seq)) for seq in every])
        entries = dict(zip(every, values, strict=True))
        results = []
        for (language, _), seqs in zip(queries, wanted, strict=True):
            candidates = []
            for seq in seqs:
                entry = entries[seq]
                if entry is None:  # a seq leaves its band entries with its s: entry; should one stay, it is none
                    continue
                stamp = _day_end(int(entry[_SIMHASH_HEX : _SIMHASH_HEX + _DAY_HEX], 16))
                if not expired(stamp, clock, self.keep.bands):
                    simhash, doc_id = entry[:_SIMHASH_HEX], entry[_SIMHASH_HEX + _DAY_HEX :]
                    candidates.append(Canonical(doc_id, int(simhash, 16), language, seq, stamp))
            results.append(candidates)
        return results

    def add_canonical(
        self, canonical_id: str, simhash: int, language: str, bands: Sequence[int], published_at: int
    ) -> None:
        self._queue_canonical(self._redis, canonical_id, simhash, language, bands, self._stamp(published_at))

    def _queue_canonical(
        self,
        client: redis.Redis | Pipeline,
        canonical_id: str,
        simhash: int,
        language: str,
        bands: Sequence[int],
        stamp: str,
    ) -> None:
        keys = [
            self._clock,
            self._bucket("c", canonical_id),
            f"{self._prefix}seq",
            f"{self._prefix}languages",
            *self._band_keys(language, bands),
        ]
        entry = f"{simhash:0{_SIMHASH_HEX}x}{stamp}{canonical_id}"
        args = [self.keep.bands, canonical_id, entry, language, *map(str, bands), f"{self._prefix}s:"]
        self._add_canonical(keys=keys, args=args, client=client)

    def replace_verdict(self, link: Link, expected: Link) -> bool:
        current = self.verdict_of(link.doc_id)
        if current != expected:
            return False
        assert current is not None
        return bool(self._queue_replace(self._redis, link, current, self._stamp(link.published_at)))

    def _queue_replace(self, client: redis.Redis | Pipeline, link: Link, current: Link, stamp: str) -> int | Pipeline:
        """Replace `current` (as stored: its encoding is compared) by `link`."""
        keys = [self._clock, self._bucket("v", link.doc_id), f"{self._prefix}vseq"]
        args = [self.keep.verdicts, link.doc_id, stamp, _verdict_value(link), link.seq or 0, _verdict_value(current)]
        return self._replace_verdict(keys=keys, args=args, client=client)

    def remove_canonical(self, canonical_id: str, language: str, bands: Sequence[int]) -> None:
        self._queue_remove(self._redis, canonical_id, language, bands)

    def _queue_remove(
        self, client: redis.Redis | Pipeline, canonical_id: str, language: str, bands: Sequence[int]
    ) -> None:
        keys = [self._bucket("c", canonical_id), *self._band_keys(language, bands)]
        args = [canonical_id, *map(str, bands), f"{self._prefix}s:"]
        self._remove_canonical(keys=keys, args=args, client=client)

    def grow_group(self, canonical_id: str, published_at: int) -> int:
        return int(self._queue_group(self._redis, canonical_id, 1, published_at)) + 1

    def shrink_group(self, canonical_id: str) -> int:
        return int(self._queue_group(self._redis, canonical_id, -1, 0)) + 1

    def _queue_group(
        self, client: redis.Redis | Pipeline, canonical_id: str, count: int, published_at: int
    ) -> int | Pipeline:
        """Add `count` members (negative: fewer), the group stamped with the latest member's day (0 for a
        shrink: a group keeps the stamp it has)."""
        day = _day(published_at, time.time()) if count > 0 else 0
        keys = [self._clock, self._bucket("g", canonical_id)]
        return self._group(keys=keys, args=[self.keep.exact, canonical_id, count, day], client=client)

    def group_size(self, canonical_id: str) -> int:
        return self.group_sizes([canonical_id])[canonical_id]

    def group_sizes(self, canonical_ids: Sequence[str]) -> dict[str, int]:
        if not canonical_ids:
            return {}
        clock, values = self._read([(self._bucket("g", canonical_id), canonical_id) for canonical_id in canonical_ids])
        sizes = {}
        for canonical_id, value in zip(canonical_ids, values, strict=True):
            members, day = divmod(int(value or 0), _GROUP_DAY)
            sizes[canonical_id] = 1 if expired(_day_end(day), clock, self.keep.exact) else members + 1
        return sizes

    def apply(self, writes: Sequence[Write], fence: Lease, exact: bool = False) -> Applied:
        """Carry out a batch's buffered writes in one MULTI/EXEC transaction, fenced by `fence`.

        `writes` is a sequence of per-document groups, each ending with the document's
        `VerdictWrite` (the cascade records a verdict last) or, from a relink, its
        `ReplaceVerdictWrite`: a replacement whose document's verdict is no longer the one
        it was planned on is `StaleSnapshot`, whatever `exact` says. Under WATCH of the lease key:
        the lease must still be ours, or `LeaseLost`; a document that has a verdict by
        now (an agent that read without the lease, a redelivery) has its whole group
        dropped, so a lost race never makes a canonical, claims a key or grows a group;
        with `exact` (a batch decided entirely under the lease) that is `StaleSnapshot`
        instead, since later documents of the batch may have been decided against it. A
        document linked to one that is no canonical by now (a relink linked it back) is
        `StaleSnapshot` too: the batch was resolved on a snapshot read before that; one
        whose verdict has passed its retention is still the canonical its exact keys name.
        EXEC fails if the lease key changed or expired meanwhile: `LeaseLost` again (a change
        that leaves the lease ours, its renewal, has the batch checked and written again).

        The clock moves to the batch's newest stamp first, in the same transaction; a write
        without a `published_at` is stamped with that clock.
        """
        groups = _by_document(writes)
        if not groups:
            return Applied()
        attempts = _WRITE_ATTEMPTS
        while True:
            try:
                return self._apply(groups, fence, exact)
            except redis.WatchError:
                # EXEC wrote nothing. Renewing the lease (PEXPIRE) ends a WATCH as a new holder would:
                # while the lease is still ours, the batch is checked and written again.
                attempts -= 1
                if attempts == 0 or self._redis.get(fence.key) != fence.token:
                    raise LeaseLost(f"lease {fence.key} expired while the batch was being written") from None

    def _apply(self, groups: list[tuple[str | None, list[Write]]], fence: Lease, exact: bool) -> Applied:
        """`apply`, once: `redis.WatchError` when the lease key changed before EXEC."""
        applied = Applied()
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.watch(fence.key)
            if pipe.get(fence.key) != fence.token:
                raise LeaseLost(f"lease {fence.key} expired before the batch was written")
            closing = {doc_id: group[-1] for doc_id, group in groups if doc_id is not None}
            replacing = {d: w.expected for d, w in closing.items() if isinstance(w, ReplaceVerdictWrite)}
            targets = {w.link.canonical_id for w in closing.values()} - closing.keys()
            clock, stored = self.verdicts_at([*closing, *targets])
            decided = {doc_id: stored[doc_id] for doc_id in closing}
            for doc_id, expected in replacing.items():
                if decided.pop(doc_id) != expected:
                    raise StaleSnapshot(f"the verdict of {doc_id} changed since the relink was planned")
            applied.lost = [doc_id for doc_id, link in decided.items() if link is not None]
            skipped = set(applied.lost)
            if applied.lost and exact:
                raise StaleSnapshot(f"{len(applied.lost)} documents were decided meanwhile, e.g. {applied.lost[0]}")
            # A link is only ever to a canonical. One found on a snapshot read without the lease may have
            # stopped being one since (a relink linked it back into another group): decide it again.
            for doc_id, write in closing.items():
                target = write.link.canonical_id
                if doc_id in skipped or target == doc_id:
                    continue
                now = closing[target].link if target in closing and target not in skipped else stored[target]
                if now is not None and not now.verdict.canonical:
                    raise StaleSnapshot(f"{doc_id} was linked to {target}, which is no canonical any more")
            wall = time.time()
            written = (write for _, group in groups for write in group)
            stamps = [clamped(p, wall) for p in map(_published_at, written) if p is not None]
            applied.clock = max([clock, *stamps])
            pipe.multi()
            self._advance(keys=[self._clock], args=[applied.clock], client=pipe)
            recorded: list[str | None] = []
            for doc_id, group in groups:
                if doc_id in skipped:
                    continue
                for write in group:
                    self._queue_write(pipe, write, applied.clock)
                    closes = isinstance(write, VerdictWrite | ReplaceVerdictWrite)
                    recorded.append(write.link.doc_id if closes else None)
            results = pipe.execute()
        applied.clock = max(applied.clock, int(results[0]))
        seqs = zip(recorded, results[1:], strict=True)
        applied.seqs = {doc_id: int(seq) for doc_id, seq in seqs if doc_id and seq}
        return applied

    def _queue_write(self, pipe: Pipeline, write: Write, clock: int) -> None:
        """Queue one write; `clock` stamps a write that has no `published_at`."""
        match write:
            case ClaimWrite(keys, canonical_id, published_at):
                self._queue_claim(pipe, keys, canonical_id, self._stamp(published_at, clock))
            case ReplaceWrite(key, expected, canonical_id):
                self._queue_exact_replace(pipe, key, expected, canonical_id)
            case CanonicalWrite(canonical_id, simhash, language, bands, published_at):
                self._queue_canonical(pipe, canonical_id, simhash, language, bands, self._stamp(published_at, clock))
            case GrowWrite(canonical_id, count, published_at):
                self._queue_group(pipe, canonical_id, count, published_at)
            case VerdictWrite(link):
                self._queue_verdict(pipe, link, self._stamp(link.published_at, clock))
            case RemoveCanonicalWrite(canonical_id, language, bands):
                self._queue_remove(pipe, canonical_id, language, bands)
            case ReplaceVerdictWrite(link, expected):
                self._queue_replace(pipe, link, expected, self._stamp(link.published_at, clock))

    # The sweep: by bucket, never by LRU

    def expire(self, limit: int = 10_000) -> int:
        """Remove up to `limit` entries past their retention (already invisible to every read): verdicts,
        exact keys, group sizes, and canonicals (a canonical's s:, c: and band entries count as one).
        Returns how many it removed; 0 when the pass for the clock's day is complete."""
        return self.sweep(limit).removed

    def sweep(self, limit: int, fence: Lease | None = None, deadline: float | None = None) -> Swept:
        """`expire`, bounded in time too: it stops at `deadline` (`time.monotonic()`), and fenced by
        `fence` when given (a sweep run under the registration lease stops once the lease is lost).

        A pass reads every bucket once, in order: v:, x:, g: (2**bucket_bits each), then the s: buckets
        of every seq given out; each step removes what it found expired and moves the cursor
        (`{prefix}sweep`, in Redis: another worker or a restart resumes there). A pass starts when the
        clock has moved into a day after the one the last pass started on; a family kept forever is
        skipped, and with every family kept forever there is no pass.
        """
        removed = 0
        while removed < limit and (deadline is None or time.monotonic() < deadline):
            place = self._sweep_position()
            if place is None:
                return Swept(removed, True)
            step = self._sweep_step(*place, limit - removed, fence)
            if step < 0:
                return Swept(removed, False)
            removed += step
        return Swept(removed, self._sweep_position() is None)

    def _sweep_position(self) -> tuple[int, int] | None:
        """Where the sweep goes on, and where its pass ends: the cursor, 0 for a new pass once the clock is
        in a later day than the last pass began on; None when the pass for today is complete."""
        if not (self.keep.verdicts or self.keep.exact or self.keep.bands):
            return None
        with self._redis.pipeline(transaction=False) as pipe:
            pipe.get(self._clock)
            pipe.hmget(self._cursor, ["day", "at"])
            pipe.get(f"{self._prefix}seq")
            clock, (day, at), seq = pipe.execute()
        end = len(_FAMILIES) * 16**self._bucket_hex + int(seq or 0) // 256 + 1
        if at is not None and int(at) < end:
            return int(at), end
        today = int(clock or 0) // DAY_S
        if day is not None and int(day) >= today:
            if at is not None:
                self._redis.hdel(self._cursor, "at")
            return None
        self._redis.hset(self._cursor, mapping={"day": today, "at": 0})
        return 0, end

    def _sweep_step(self, at: int, end: int, limit: int, fence: Lease | None) -> int:
        """Sweep the buckets at cursor position `at` (`end` ends the pass): hash buckets of one family (up
        to `_SWEEP_BUCKETS`, `_SWEEP_FIELDS` fields), or one s: bucket. Returns how many entries it removed
        (-1: the lease is lost)."""
        lease = [fence.key if fence else self._clock]
        token = fence.token if fence else ""
        per_family = 16**self._bucket_hex
        family = at // per_family
        keep = (self.keep.verdicts, self.keep.exact, self.keep.exact, self.keep.bands)[min(family, len(_FAMILIES))]
        if not keep:  # kept forever: on to the next family
            self._redis.hset(self._cursor, "at", (family + 1) * per_family if family < len(_FAMILIES) else end)
            return 0
        if family < len(_FAMILIES):
            kind, stamp_in = _FAMILIES[family]
            first = at % per_family
            last = min(per_family, first + _SWEEP_BUCKETS)
            buckets = [f"{self._prefix}{kind}:{b:0{self._bucket_hex}x}" for b in range(first, last)]
            keys = [self._clock, self._cursor, *lease, *buckets]
            args = [token, keep, stamp_in, limit, at, _SWEEP_FIELDS]
            return int(self._expire_fields(keys=keys, args=args))
        return self._sweep_canonicals(at, at - len(_FAMILIES) * per_family, limit, lease, token)

    def _sweep_canonicals(self, at: int, bucket: int, limit: int, lease: list[str], token: str) -> int:
        """Remove up to `limit` expired canonicals of s: bucket `bucket`, with their c: and band entries
        in every language registered (the s: entry does not name its language: that would cost bytes
        in every canonical). The cursor stays on the bucket while expired canonicals are left in it."""
        s_bucket = f"{self._prefix}s:{bucket}"
        with self._redis.pipeline(transaction=False) as pipe:
            self._expired_canonicals(keys=[self._clock, s_bucket], args=[self.keep.bands], client=pipe)
            pipe.hkeys(f"{self._prefix}languages")
            flat, languages = pipe.execute()
        gone = list(zip(flat[::2], flat[1::2], strict=True))
        keys: list[str] = []
        args: list[str | int] = []
        for seq, entry in gone[:limit]:
            doc_id, values = entry[_SIMHASH_HEX + _DAY_HEX :], bands(int(entry[:_SIMHASH_HEX], 16))
            keys += [
                self._bucket("c", doc_id),
                *(k for lang in sorted(languages) for k in self._band_keys(lang, values)),
            ]
            args += [seq, doc_id, *values]
        after = at if len(gone) > limit else at + 1
        width = 1 + 4 * len(languages)
        keys = [self._clock, self._cursor, *lease, s_bucket, *keys]
        return int(self._expire_canonicals(keys=keys, args=[token, self.keep.bands, after, width, *args]))


_FAMILIES = (("v", "v"), ("x", "v"), ("g", "g"))
"""The hash families swept bucket by bucket, and where their stamp is: a value's prefix, or a group's integer."""


def _day(published_at: int, wall: float) -> int:
    """The stamp of `published_at`: its day, clamped as the clock is (at most a day after the wall clock)."""
    return min(max(clamped(published_at, wall), 0) // DAY_S, _DAY_MAX)


def _day_end(day: int) -> int:
    """The last second of a stamp's day: an entry is hidden once all of its day is past its retention."""
    return day * DAY_S + DAY_S - 1


def _published_at(write: Write) -> int | None:
    """The stamp a write carries, if any: the clock moves to the newest in the batch."""
    match write:
        case ClaimWrite() | CanonicalWrite() | GrowWrite():
            return write.published_at
        case VerdictWrite(link) | ReplaceVerdictWrite(link):
            return link.published_at
    return None


def _by_document(writes: Sequence[Write]) -> list[tuple[str | None, list[Write]]]:
    """Writes split into per-document groups, each closed by its VerdictWrite (or ReplaceVerdictWrite).

    Writes after the last verdict belong to no document (None) and are applied as they are.
    """
    groups: list[tuple[str | None, list[Write]]] = []
    current: list[Write] = []
    for write in writes:
        current.append(write)
        if isinstance(write, VerdictWrite | ReplaceVerdictWrite):
            groups.append((write.link.doc_id, current))
            current = []
    if current:
        groups.append((None, current))
    return groups


_VERDICT_CODE = {Verdict.UNIQUE: "u", Verdict.DUPLICATE: "d", Verdict.REVIEW: "r", Verdict.UNLINKED: "n"}
_VERDICT_OF = {code: verdict for verdict, code in _VERDICT_CODE.items()}
_STAGE_CODE = {None: "-", Stage.URL: "u", Stage.CONTENT: "c", Stage.SIMHASH: "s", Stage.SEMANTIC: "e"}
_STAGE_OF = {code: stage for stage, code in _STAGE_CODE.items()}
_NO_CONTENT = "-" * CONTENT_KEY_CHARS


def _verdict_value(link: Link) -> str:
    """`{verdict}{stage}{content}{score};{len(canonical)};{canonical}{model}`: one letter each for the
    verdict and the stage, the content key, the score, then the two strings, the first prefixed
    by its length and empty for a canonical (itself). Every byte counts at millions of verdicts;
    JSON cost 40% more here."""
    canonical = "" if link.canonical_id == link.doc_id else link.canonical_id
    score = "" if link.score is None else repr(float(link.score))
    content = link.content or _NO_CONTENT
    return (
        f"{_VERDICT_CODE[link.verdict]}{_STAGE_CODE[link.stage]}{content}{score};{len(canonical)};"
        f"{canonical}{link.model or ''}"
    )


def _read_verdict(doc_id: str, value: str) -> Link:
    """A verdict as stored: `{stamp}{seq} ` then `_verdict_value` (its `published_at` is not kept, only its day)."""
    head, _, encoded = value.partition(" ")
    seq = head[_DAY_HEX:]
    verdict, stage = _VERDICT_OF[encoded[0]], _STAGE_OF[encoded[1]]
    start = 2 + CONTENT_KEY_CHARS
    content = encoded[2:start]
    score_end = encoded.index(";", start)
    length_end = encoded.index(";", score_end + 1)
    length = int(encoded[score_end + 1 : length_end])
    canonical = encoded[length_end + 1 : length_end + 1 + length] or doc_id
    model = encoded[length_end + 1 + length :] or None
    score = float(encoded[start:score_end]) if score_end > start else None
    return Link(
        doc_id,
        verdict,
        canonical,
        stage,
        score,
        model,
        int(seq),
        None if content == _NO_CONTENT else content,
    )

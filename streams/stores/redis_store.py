"""The production state store: the same `StateStore` on Redis, shared by every worker.

Redis spends about 50 bytes on every key, so nothing here has a key of its own:
entries live as fields of hashes split into a fixed number of buckets (a small
hash is stored as one compact listpack). Under a configurable prefix (default
`dedup:`), with `B(x)` the first `bucket_bits` bits of a hash of `x`:

| hash | field | value |
|---|---|---|
| `v:{B(doc_id)}` | doc_id | the verdict: its `seq`, a space, then the fields of `_verdict_value` |
| `x:{B(key)}` | rest of the key's hash (96 bits) | the canonical (or document under review) an exact key points to |
| `c:{B(doc_id)}` | doc_id | a canonical's first-seen `seq` (marks it registered) |
| `s:{seq >> 8}` | seq | the canonical's simhash (16 hex digits) followed by its doc_id |
| `b:{language}:{band}:{value >> 6}` | band value | the `seq`s of the canonicals with that value, space-separated |
| `g:{B(doc_id)}` | doc_id | members of a canonical's group besides itself |
| `seq` (string) | | the last canonical `seq` given out (never reused, also after a relink removed one) |
| `vseq` (string) | | the last verdict `seq` given out: the order replay restores in |

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
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import redis
from redis.client import Pipeline

from streams.core.model import CONTENT_KEY_CHARS, Canonical, Link, Stage, Verdict
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

_CLAIM = """
local holders = {}
for i, key in ipairs(KEYS) do
  redis.call('HSETNX', key, ARGV[i + 1], ARGV[1])
  holders[i] = redis.call('HGET', key, ARGV[i + 1])
end
return holders
"""
# One command for many hash fields across buckets: a pipeline of HGETs costs a command each in the client.
_FIELDS = """
local out = {}
for i, key in ipairs(KEYS) do
  out[i] = redis.call('HGET', key, ARGV[i]) or false
end
return out
"""
_REPLACE = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
return 0
"""
# KEYS: c bucket, seq counter, 4 band buckets; ARGV: doc_id, simhash hex + doc_id, 4 band values, s-bucket prefix.
# The seq bucket is only known after INCR, so its key is built here from ARGV[7] (single-slot prefix).
_ADD_CANONICAL = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
local seq = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], ARGV[1], seq)
redis.call('HSET', ARGV[7] .. math.floor(seq / 256), seq, ARGV[2])
for i = 3, 6 do
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
# KEYS: v bucket, vseq counter; ARGV: doc_id, the encoded verdict, its seq (0: draw the next one).
# A replayed verdict keeps the seq it had live, and the counter moves past it.
_RECORD = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
local seq = tonumber(ARGV[3])
if seq <= 0 then
  seq = redis.call('INCR', KEYS[2])
elseif seq > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], seq)
end
redis.call('HSET', KEYS[1], ARGV[1], seq .. ' ' .. ARGV[2])
return seq
"""


# KEYS: v bucket, vseq counter; ARGV: doc_id, the encoded verdict, its seq (0: draw the next one), the
# encoded verdict it replaces. Nothing is written unless the stored verdict is still that one.
_REPLACE_VERDICT = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current or string.sub(current, string.find(current, ' ', 1, true) + 1) ~= ARGV[4] then return 0 end
local seq = tonumber(ARGV[3])
if seq <= 0 then
  seq = redis.call('INCR', KEYS[2])
elseif seq > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], seq)
end
redis.call('HSET', KEYS[1], ARGV[1], seq .. ' ' .. ARGV[2])
return seq
"""
# KEYS: c bucket, 4 band buckets; ARGV: doc_id, 4 band values, s-bucket prefix. Takes the canonical's seq
# out of its band entries and forgets its s: entry; the seq counter is left alone (seqs are never reused).
_REMOVE_CANONICAL = """
local seq = redis.call('HGET', KEYS[1], ARGV[1])
if not seq then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', ARGV[6] .. math.floor(tonumber(seq) / 256), seq)
for i = 2, 5 do
  local current = redis.call('HGET', KEYS[i], ARGV[i])
  if current then
    local kept = {}
    for token in string.gmatch(current, '%S+') do
      if token ~= seq then kept[#kept + 1] = token end
    end
    if #kept == 0 then
      redis.call('HDEL', KEYS[i], ARGV[i])
    else
      redis.call('HSET', KEYS[i], ARGV[i], table.concat(kept, ' '))
    end
  end
end
return tonumber(seq)
"""
# A group back to its canonical alone loses its field, as if it had never grown.
_GROUP = """
local members = redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
if members <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) return 0 end
return members
"""


class StaleSnapshot(RuntimeError):
    """A batch was decided on a snapshot that another writer changed: decide it again."""


@dataclass
class Applied:
    """What `apply` did: the sequence number of each verdict recorded, and the documents skipped."""

    seqs: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    """Documents that had a verdict already: none of their writes were applied."""


class RedisStateStore:
    """`StateStore` on a Redis server (or a Redis-protocol one)."""

    def __init__(self, client: redis.Redis, prefix: str = "dedup:", bucket_bits: int = 12) -> None:
        self._redis = client
        self._prefix = prefix
        self._bucket_hex = max(1, bucket_bits // 4)
        self._fields = client.register_script(_FIELDS)
        self._claim = client.register_script(_CLAIM)
        self._replace = client.register_script(_REPLACE)
        self._add_canonical = client.register_script(_ADD_CANONICAL)
        self._record = client.register_script(_RECORD)
        self._replace_verdict = client.register_script(_REPLACE_VERDICT)
        self._remove_canonical = client.register_script(_REMOVE_CANONICAL)
        self._group = client.register_script(_GROUP)

    @classmethod
    def from_url(cls, url: str, prefix: str = "dedup:", password: str | None = None) -> RedisStateStore:
        """A store on `url` (`redis://` or `rediss://` for TLS); the password may also be in the URL."""
        return cls(redis.Redis.from_url(url, password=password, decode_responses=True), prefix)

    def close(self) -> None:
        self._redis.close()

    def _bucket(self, kind: str, item: str) -> str:
        digest = hashlib.blake2b(item.encode(), digest_size=8).hexdigest()
        return f"{self._prefix}{kind}:{digest[: self._bucket_hex]}"

    def _exact(self, key: str) -> tuple[str, str]:
        """(bucket, field) of an exact key: 128 bits of its hash, split."""
        digest = hashlib.blake2b(key.encode(), digest_size=16).hexdigest()
        return f"{self._prefix}x:{digest[: self._bucket_hex]}", digest[self._bucket_hex : self._bucket_hex + 24]

    def verdict_of(self, doc_id: str) -> Link | None:
        return self.verdicts_of([doc_id])[doc_id]

    def verdicts_of(self, doc_ids: Sequence[str]) -> dict[str, Link | None]:
        """The verdicts of many documents in one round trip (None: not decided)."""
        values = self._hget_many([(self._bucket("v", doc_id), doc_id) for doc_id in doc_ids])
        return {
            doc_id: None if value is None else _read_verdict(doc_id, value)
            for doc_id, value in zip(doc_ids, values, strict=True)
        }

    def _hget_many(self, places: Sequence[tuple[str, str]]) -> list[str | None]:
        """HGET of each (hash, field), in one round trip and one command."""
        if not places:
            return []
        return list(self._fields(keys=[h for h, _ in places], args=[f for _, f in places]))

    def record_verdict(self, link: Link) -> Link:
        seq = self._queue_verdict(self._redis, link)
        if seq:
            return replace(link, seq=int(seq))
        stood = self.verdict_of(link.doc_id)
        assert stood is not None
        return stood

    def _queue_verdict(self, client: redis.Redis | Pipeline, link: Link) -> int | Pipeline:
        keys = [self._bucket("v", link.doc_id), f"{self._prefix}vseq"]
        return self._record(keys=keys, args=[link.doc_id, _verdict_value(link), link.seq or 0], client=client)

    def exact_lookup(self, keys: Sequence[str]) -> dict[str, str]:
        values = self._hget_many([self._exact(key) for key in keys])
        return {key: value for key, value in zip(keys, values, strict=True) if value is not None}

    def exact_claim(self, keys: Sequence[str], canonical_id: str) -> dict[str, str]:
        places = [self._exact(key) for key in keys]
        holders = self._claim(keys=[bucket for bucket, _ in places], args=[canonical_id, *(f for _, f in places)])
        return dict(zip(keys, holders, strict=True))

    def exact_replace(self, key: str, expected: str, canonical_id: str) -> bool:
        bucket, field = self._exact(key)
        return bool(self._replace(keys=[bucket], args=[field, expected, canonical_id]))

    def _band_keys(self, language: str, bands: Sequence[int]) -> list[str]:
        return [f"{self._prefix}b:{language}:{index}:{value >> 6}" for index, value in enumerate(bands)]

    def band_candidates(self, language: str, bands: Sequence[int]) -> list[Canonical]:
        return self.band_candidates_many([(language, tuple(bands))])[0]

    def band_candidates_many(self, queries: Sequence[tuple[str, tuple[int, ...]]]) -> list[list[Canonical]]:
        """`band_candidates` of many (language, bands) queries in two round trips."""
        found = iter(
            self._hget_many(
                [
                    (key, str(value))
                    for language, bands in queries
                    for key, value in zip(self._band_keys(language, bands), bands, strict=True)
                ]
            )
        )
        wanted = [sorted({int(seq) for _ in bands for seq in (next(found) or "").split()}) for _, bands in queries]
        every = sorted({seq for seqs in wanted for seq in seqs})
        if not every:
            return [[] for _ in queries]
        entries = dict(
            zip(every, self._hget_many([(f"{self._prefix}s:{seq // 256}", str(seq)) for seq in every]), strict=True)
        )
        results = []
        for (language, _), seqs in zip(queries, wanted, strict=True):
            candidates = []
            for seq in seqs:
                entry = entries[seq]
                simhash, doc_id = entry[:_SIMHASH_HEX], entry[_SIMHASH_HEX:]
                candidates.append(Canonical(doc_id, int(simhash, 16), language, seq))
            results.append(candidates)
        return results

    def add_canonical(self, canonical_id: str, simhash: int, language: str, bands: Sequence[int]) -> None:
        self._queue_canonical(self._redis, canonical_id, simhash, language, bands)

    def _queue_canonical(
        self, client: redis.Redis | Pipeline, canonical_id: str, simhash: int, language: str, bands: Sequence[int]
    ) -> None:
        keys = [self._bucket("c", canonical_id), f"{self._prefix}seq", *self._band_keys(language, bands)]
        args = [canonical_id, f"{simhash:0{_SIMHASH_HEX}x}{canonical_id}", *map(str, bands), f"{self._prefix}s:"]
        self._add_canonical(keys=keys, args=args, client=client)

    def replace_verdict(self, link: Link, expected: Link) -> bool:
        current = self.verdict_of(link.doc_id)
        if current != expected:
            return False
        assert current is not None
        return bool(self._queue_replace(self._redis, link, current))

    def _queue_replace(self, client: redis.Redis | Pipeline, link: Link, current: Link) -> int | Pipeline:
        """Replace `current` (as stored: its encoding is compared) by `link`."""
        keys = [self._bucket("v", link.doc_id), f"{self._prefix}vseq"]
        args = [link.doc_id, _verdict_value(link), link.seq or 0, _verdict_value(current)]
        return self._replace_verdict(keys=keys, args=args, client=client)

    def remove_canonical(self, canonical_id: str, language: str, bands: Sequence[int]) -> None:
        self._queue_remove(self._redis, canonical_id, language, bands)

    def _queue_remove(
        self, client: redis.Redis | Pipeline, canonical_id: str, language: str, bands: Sequence[int]
    ) -> None:
        keys = [self._bucket("c", canonical_id), *self._band_keys(language, bands)]
        args = [canonical_id, *map(str, bands), f"{self._prefix}s:"]
        self._remove_canonical(keys=keys, args=args, client=client)

    def grow_group(self, canonical_id: str) -> int:
        return int(self._redis.hincrby(self._bucket("g", canonical_id), canonical_id, 1)) + 1

    def shrink_group(self, canonical_id: str) -> int:
        return int(self._group(keys=[self._bucket("g", canonical_id)], args=[canonical_id, -1])) + 1

    def group_size(self, canonical_id: str) -> int:
        return self.group_sizes([canonical_id])[canonical_id]

    def group_sizes(self, canonical_ids: Sequence[str]) -> dict[str, int]:
        values = self._hget_many([(self._bucket("g", canonical_id), canonical_id) for canonical_id in canonical_ids])
        return {
            canonical_id: 1 if value is None else int(value) + 1
            for canonical_id, value in zip(canonical_ids, values, strict=True)
        }

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
        `StaleSnapshot` too: the batch was resolved on a snapshot read before that.
        EXEC fails if the lease key changed or expired meanwhile: `LeaseLost` again.
        """
        groups = _by_document(writes)
        applied = Applied()
        if not groups:
            return applied
        with self._redis.pipeline(transaction=True) as pipe:
            pipe.watch(fence.key)
            if pipe.get(fence.key) != fence.token:
                raise LeaseLost(f"lease {fence.key} expired before the batch was written")
            closing = {doc_id: group[-1] for doc_id, group in groups if doc_id is not None}
            replacing = {d: w.expected for d, w in closing.items() if isinstance(w, ReplaceVerdictWrite)}
            targets = {w.link.canonical_id for w in closing.values()} - closing.keys()
            stored = self.verdicts_of([*closing, *targets])
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
                if now is None or not now.verdict.canonical:
                    raise StaleSnapshot(f"{doc_id} was linked to {target}, which is no canonical any more")
            pipe.multi()
            recorded: list[str | None] = []
            for doc_id, group in groups:
                if doc_id in skipped:
                    continue
                for write in group:
                    self._queue_write(pipe, write)
                    closes = isinstance(write, VerdictWrite | ReplaceVerdictWrite)
                    recorded.append(write.link.doc_id if closes else None)
            try:
                results = pipe.execute()
            except redis.WatchError:
                raise LeaseLost(f"lease {fence.key} expired while the batch was being written") from None
        applied.seqs = {doc_id: int(seq) for doc_id, seq in zip(recorded, results, strict=True) if doc_id and seq}
        return applied

    def _queue_write(self, pipe: Pipeline, write: Write) -> None:
        match write:
            case ClaimWrite(keys, canonical_id):
                places = [self._exact(key) for key in keys]
                self._claim(keys=[b for b, _ in places], args=[canonical_id, *(f for _, f in places)], client=pipe)
            case ReplaceWrite(key, expected, canonical_id):
                bucket, field_ = self._exact(key)
                self._replace(keys=[bucket], args=[field_, expected, canonical_id], client=pipe)
            case CanonicalWrite(canonical_id, simhash, language, bands):
                self._queue_canonical(pipe, canonical_id, simhash, language, bands)
            case GrowWrite(canonical_id, count) if count >= 0:
                pipe.hincrby(self._bucket("g", canonical_id), canonical_id, count)
            case GrowWrite(canonical_id, count):
                self._group(keys=[self._bucket("g", canonical_id)], args=[canonical_id, count], client=pipe)
            case VerdictWrite(link):
                self._queue_verdict(pipe, link)
            case RemoveCanonicalWrite(canonical_id, language, bands):
                self._queue_remove(pipe, canonical_id, language, bands)
            case ReplaceVerdictWrite(link, expected):
                self._queue_replace(pipe, link, expected)


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
    seq, _, encoded = value.partition(" ")
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

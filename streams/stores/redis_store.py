"""The production state store: the same `StateStore` on Redis, shared by every worker.

Keys, under a configurable prefix (default `dedup:`):

| key | type | holds |
|---|---|---|
| `v:{doc_id}` | string | the verdict: `verdict␟canonical␟stage␟score␟model` |
| `x:{exact key}` | string | the canonical (or document under review) an exact key points to |
| `c:{doc_id}` | string | a canonical's first-seen `seq` (marks it registered) |
| `b:{language}:{band}:{value}` | set | members `doc_id␟simhash hex␟seq` of the canonicals with that band value |
| `seq` | counter | the last `seq` given out |
| `g:{doc_id}` | counter | members of a canonical's group besides itself |

Band set members carry the fingerprint and `seq`, so a candidate lookup is one
SUNION. Claims and compare-and-set run as Lua scripts: atomic across workers.
Every key a script touches is passed in KEYS, as Redis Cluster requires.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from streams.core.model import Canonical, Link, Stage, Verdict

_SEP = "\x1f"

_CLAIM = """
local holders = {}
for i, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[1], 'NX')
  holders[i] = redis.call('GET', key)
end
return holders
"""
_REPLACE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0
"""
_ADD_CANONICAL = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local seq = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], seq)
for i = 3, #KEYS do
  redis.call('SADD', KEYS[i], ARGV[1] .. seq)
end
return seq
"""


class RedisStateStore:
    """`StateStore` on a Redis server (or a Redis-protocol one)."""

    def __init__(self, client: redis.Redis, prefix: str = "dedup:") -> None:
        self._redis = client
        self._prefix = prefix
        self._claim = client.register_script(_CLAIM)
        self._replace = client.register_script(_REPLACE)
        self._add_canonical = client.register_script(_ADD_CANONICAL)

    @classmethod
    def from_url(cls, url: str, prefix: str = "dedup:", password: str | None = None) -> RedisStateStore:
        """A store on `url` (`redis://` or `rediss://` for TLS); the password may also be in the URL."""
        return cls(redis.Redis.from_url(url, password=password, decode_responses=True), prefix)

    def close(self) -> None:
        self._redis.close()

    def verdict_of(self, doc_id: str) -> Link | None:
        value = self._redis.get(f"{self._prefix}v:{doc_id}")
        if value is None:
            return None
        verdict, canonical_id, stage, score, model = value.split(_SEP)
        return Link(
            doc_id,
            Verdict(verdict),
            canonical_id,
            Stage(stage) if stage else None,
            float(score) if score else None,
            model or None,
        )

    def record_verdict(self, link: Link) -> None:
        score = "" if link.score is None else repr(link.score)
        value = _SEP.join((link.verdict.value, link.canonical_id, link.stage or "", score, link.model or ""))
        self._redis.set(f"{self._prefix}v:{link.doc_id}", value)

    def exact_lookup(self, keys: Sequence[str]) -> dict[str, str]:
        values = self._redis.mget([f"{self._prefix}x:{key}" for key in keys])
        return {key: value for key, value in zip(keys, values, strict=True) if value is not None}

    def exact_claim(self, keys: Sequence[str], canonical_id: str) -> dict[str, str]:
        holders = self._claim(keys=[f"{self._prefix}x:{key}" for key in keys], args=[canonical_id])
        return dict(zip(keys, holders, strict=True))

    def exact_replace(self, key: str, expected: str, canonical_id: str) -> bool:
        return bool(self._replace(keys=[f"{self._prefix}x:{key}"], args=[expected, canonical_id]))

    def _band_keys(self, language: str, bands: Sequence[int]) -> list[str]:
        return [f"{self._prefix}b:{language}:{index}:{value}" for index, value in enumerate(bands)]

    def band_candidates(self, language: str, bands: Sequence[int]) -> list[Canonical]:
        candidates = []
        for member in self._redis.sunion(self._band_keys(language, bands)):
            doc_id, simhash, seq = member.split(_SEP)
            candidates.append(Canonical(doc_id, int(simhash, 16), language, int(seq)))
        return candidates

    def add_canonical(self, canonical_id: str, simhash: int, language: str, bands: Sequence[int]) -> None:
        keys = [f"{self._prefix}c:{canonical_id}", f"{self._prefix}seq", *self._band_keys(language, bands)]
        self._add_canonical(keys=keys, args=[f"{canonical_id}{_SEP}{simhash:x}{_SEP}"])

    def grow_group(self, canonical_id: str) -> int:
        return int(self._redis.incr(f"{self._prefix}g:{canonical_id}")) + 1

    def group_size(self, canonical_id: str) -> int:
        value = self._redis.get(f"{self._prefix}g:{canonical_id}")
        return 1 if value is None else int(value) + 1

"""A lease on one Redis key: the registration lock of the streaming workers.

Only the last stage of the cascade makes canonicals, and it does so for a whole
batch under this lock, so two workers never register near-duplicates of each
other at the same moment (docs/streaming.md, "Documents in flight"). The lease
expires after `ttl_s`, so a worker killed while holding it blocks the others
for at most that long.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis

log = logging.getLogger(__name__)

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class LockTimeout(RuntimeError):
    """The lock stayed held by another worker for longer than we were willing to wait."""


class RedisLock:
    """SET NX PX to take, compare-and-delete to release (never frees another holder's lease)."""

    def __init__(self, client: redis.Redis, name: str, ttl_s: float) -> None:
        self._redis = client
        self._name = name
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._release = client.register_script(_RELEASE)

    @contextmanager
    def held(self, wait_s: float = 60.0) -> Iterator[None]:
        token = secrets.token_hex(8)
        deadline = time.monotonic() + wait_s
        pause = 0.001
        while not self._redis.set(self._name, token, nx=True, px=self._ttl_ms):
            if time.monotonic() > deadline:
                raise LockTimeout(f"lock {self._name} still held by another worker after {wait_s:.0f} s")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        started = time.monotonic()
        try:
            yield
        finally:
            held_ms = (time.monotonic() - started) * 1000
            if not self._release(keys=[self._name], args=[token]):
                log.warning("lock %s expired while held (%.0f ms > ttl %d ms)", self._name, held_ms, self._ttl_ms)

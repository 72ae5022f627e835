"""A lease on one Redis key: the registration lock of the streaming workers, with fencing.

Only the last stage of the cascade makes canonicals, and it does so for a whole
batch under this lock, so two workers never register near-duplicates of each
other at the same moment (docs/streaming.md, "Documents in flight"). The lease
expires after `ttl_s`, so a worker killed while holding it blocks the others
for at most that long; while its holder works, a thread renews it.

A lease that expired anyway (the holder was stopped, paused or starved past
`ttl_s`) must not write: a lock alone cannot stop a late holder, so every write
carries the `Lease` it was decided under and the store checks it: the token
before a batch, and the lease's epoch inside every one-slot script that writes
(`RedisStateStore.apply`, "Fencing"). That check is the fence.

A cluster client sends a command again when its reply was lost (a dropped
connection, a failover): each command here takes being run twice. A SET NX sent
again finds the taker's own token; an INCR sent again draws a later epoch; a
publication sent again finds its own epoch, and the lease draws once more. A
release leaves a mark (`{key}:released` in the lock's slot, the lease's token, for
`ttl_s`), so that one sent again finds it freed the lock itself, not that the
lease had expired while held.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis
from redis.crc import key_slot

log = logging.getLogger(__name__)

# KEYS: the lock, its release mark (in the lock's slot; the lock alone where none can be); ARGV: the token, the
# mark's time to live in ms. The mark tells a release sent again (a cluster client resends a command whose
# reply was lost) that it freed the lock itself, where it would find it free and take it for expired.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if KEYS[2] then redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2]) end
  return 1
end
if KEYS[2] and redis.call('GET', KEYS[2]) == ARGV[1] then return 1 end
return 0
"""
_AT_LEAST = """
if tonumber(ARGV[1]) > tonumber(redis.call('GET', KEYS[1]) or '0') then redis.call('SET', KEYS[1], ARGV[1]) end
return 1
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""


def _beside(name: str, suffix: str, cluster: bool) -> list[str]:
    """A key named after `name` in its slot (a script's keys share one on a cluster): `name` and `suffix`,
    under the same prefix, on one server or where `name` has a hash tag, else `name` made the tag; none where
    that would hash elsewhere."""
    for key in (f"{name}{suffix}", f"{{{name}}}{suffix}"):
        if not cluster or key_slot(key.encode()) == key_slot(name.encode()):
            return [key]
    return []


class LockTimeout(RuntimeError):
    """The lock stayed held by another worker for longer than we were willing to wait."""


class LeaseLost(RuntimeError):
    """The lease expired (and may be someone else's now): the batch decided under it is refused."""


@dataclass(frozen=True, slots=True)
class Lease:
    """Proof of holding the lock: the key and the random token written into it."""

    key: str
    token: str
    epoch: int = 0
    """The lease's place in the order of every lease taken on its key (`{key}:epoch`): the fencing token the
    store's per-slot scripts compare (a newer holder's epoch refuses an older one's writes); 0: none."""


class RedisLock:
    """SET NX PX to take, compare-and-expire to renew, compare-and-delete to release (leaving a mark that a
    release sent again after a lost reply finds)."""

    def __init__(
        self,
        client: redis.Redis | redis.RedisCluster,
        name: str,
        ttl_s: float,
        renew: bool = True,
        fence: Callable[[Lease], int] | None = None,
    ) -> None:
        """`renew=False` leaves the lease to expire on its own (tests of the fence use it). `fence` is
        called with every lease taken, before `acquire` returns: the store publishes its epoch to every
        slot (`RedisStateStore.fence`), so no older holder writes anywhere once this one has read."""
        self._redis = client
        self._name = name
        self._epoch = f"{name}:epoch"
        self._cluster = isinstance(client, redis.RedisCluster)
        self._fence = fence
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._renew = renew
        self._release = client.register_script(_RELEASE)
        self._extend = client.register_script(_RENEW)
        self._at_least = client.register_script(_AT_LEAST)

    def acquire(self, wait_s: float = 60.0) -> Lease:
        """Take the lock, waiting up to `wait_s` for its holder; the lease expires after `ttl_s`."""
        token = secrets.token_hex(8)
        deadline = time.monotonic() + wait_s
        pause = 0.001
        while not self._take(token):
            if time.monotonic() > deadline:
                raise LockTimeout(f"lock {self._name} still held by another worker after {wait_s:.0f} s")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        # Drawn after the lock is ours, so every later holder draws a greater epoch (the key may be in
        # another slot than the lock: no script can hold both on a cluster).
        lease = Lease(self._name, token, int(self._redis.incr(self._epoch)))
        if self._fence is not None:
            try:
                newest = self._fence(lease)
                if newest >= lease.epoch:
                    # A fence holds this epoch or a newer one already: the counter went back (its key
                    # deleted with the lock's, or its INCR lost in a failover). While the lock is ours,
                    # move the counter past it and publish again, or no write would pass a fence again.
                    if self._redis.get(self._name) != token:
                        raise LeaseLost(f"lock {self._name} was taken by a newer holder before it was fenced")
                    self._at_least(keys=[self._epoch], args=[newest])
                    lease = Lease(self._name, token, int(self._redis.incr(self._epoch)))
                    self._fence(lease)
            except BaseException:
                self.release(lease)
                raise
        return lease

    def _take(self, token: str) -> bool:
        """SET NX PX. Refused, the key may hold this token all the same: a cluster client sends a command
        again after its reply was lost (a dropped connection, a failover), and the second SET finds the first's."""
        return (
            bool(self._redis.set(self._name, token, nx=True, px=self._ttl_ms)) or self._redis.get(self._name) == token
        )

    def release(self, lease: Lease) -> bool:
        """Free the lock if `lease` still holds it (never another holder's); False if it had expired."""
        keys = [lease.key, *_beside(lease.key, ":released", self._cluster)]  # the lock, and its release mark
        return bool(self._release(keys=keys, args=[lease.token, self._ttl_ms]))

    @contextmanager
    def held(self, wait_s: float = 60.0) -> Iterator[Lease]:
        """The lease for the block, renewed by a thread while the block runs (unless `renew=False`)."""
        lease = self.acquire(wait_s)
        started = time.monotonic()
        done = threading.Event()
        renewer = None
        if self._renew:
            renewer = threading.Thread(target=self._keep, args=(lease, done), name="lease-renewal", daemon=True)
            renewer.start()
        try:
            yield lease
        finally:
            done.set()
            if renewer is not None:
                renewer.join()
            held_ms = (time.monotonic() - started) * 1000
            try:
                released = self.release(lease)
            except redis.RedisError as exc:  # the lease expires by itself; never mask the caller's error
                log.warning("lock %s not released (%s); it expires in %d ms", self._name, exc, self._ttl_ms)
            else:
                if not released:
                    log.warning("lock %s expired while held (%.0f ms > ttl %d ms)", self._name, held_ms, self._ttl_ms)

    def _keep(self, lease: Lease, done: threading.Event) -> None:
        """Renew the lease every third of its time to live until `done`, or until it is lost."""
        while not done.wait(self._ttl_ms / 3000):
            try:
                if not self._extend(keys=[lease.key], args=[lease.token, self._ttl_ms]):
                    log.warning("lock %s was lost before it could be renewed", lease.key)
                    return
            except redis.RedisError as exc:  # the fence refuses the batch if the lease is gone by then
                log.warning("lock %s not renewed: %s", lease.key, exc)

"""A `StateStore` that decides a whole batch against Redis in a handful of round trips.

Deciding one document one call at a time costs about seven round trips to Redis.
A stage agent instead `warm`s this store with what the batch will read (the
cascade says what: `Cascade.reads`), in six round trips (a command per slot on Redis Cluster),
decides the batch against that snapshot, and `flush`es every write in a few rounds of
one-slot scripts fenced by the lease (`RedisStateStore.apply`: idempotent, so a batch stopped
between them is completed by its redelivery). Reads see the batch's own writes, as they would on Redis.

The snapshot is exact only while nobody else writes exact keys or band sets, so
the streaming agents flush under the registration lease, and the last stage holds
it from `warm` to `flush` (docs/streaming.md). An agent before the last may warm
without it: a stale snapshot only misses canonicals made meanwhile, and the
documents it passes on are decided again by the last stage; a document that got
a verdict meanwhile keeps that one, and none of this batch's writes for it apply.

Retention: the snapshot is read through the store, which hides what is past its
retention; what the batch itself makes is hidden the same way, against the clock
the batch will leave (the stored one, or the newest stamp written since). After a
flush that moved the clock into a new day, the flush sweeps expired entries under
the same lease, for a bounded time, until the day's pass is complete; the semantic agent's
flush expires its vector store's old vectors too, once a day.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TypeVar

import redis

from streams.core.model import DAY_S, Canonical, Link, clamped, expired, verdict_gone
from streams.core.ports import Reads, VectorStore
from streams.stores.redis_lock import Lease
from streams.stores.redis_store import Applied, RedisStateStore
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

T = TypeVar("T")

log = logging.getLogger(__name__)

_PROVISIONAL_SEQ = 1 << 62
"""First-seen order of canonicals made in this batch: after every stored one, in order."""


class BatchedState:
    """Reads from a warmed snapshot, writes buffered until `flush`."""

    def __init__(
        self,
        backend: RedisStateStore,
        sweep_limit: int = 10_000,
        sweep_share: float = 0.1,
        vectors: VectorStore | None = None,
        vectors_s: int = 0,
    ) -> None:
        """`sweep_limit` entries bound the sweep after a flush, and so does time: at most `sweep_share` of the
        time the batch took from its warm-up, and at least one step. A day's pass (about a second at 16
        bucket bits on a small state, minutes at 10M canonicals) is spread over the batches in proportion
        to their work: the verdicts it holds back stay a tenth later at most, where a slice of a quarter of
        a second took a half-loaded worker's p99 verdict latency from 95 ms to 715 ms
        (`benchmarks/bench_streaming.py`).

        `vectors` (the semantic agent's store, kept `vectors_s`; 0: forever) are swept too, once a day: the
        vectors of every model past their retention, one delete by range per collection (a day's canonicals
        once the first pass is done), before the state's share of the time."""
        self._backend = backend
        self.band_layout = backend.band_layout
        self._sweep_limit = sweep_limit
        self._sweep_share = sweep_share
        self._vectors = vectors if vectors_s else None
        self._vectors_s = vectors_s
        self._swept_day = -1
        """The last day whose sweep pass this agent saw complete."""
        self._vectors_day = -1
        """The last day this agent expired the vectors on."""
        self.reset()

    def reset(self) -> None:
        """Forget the snapshot and any unflushed write."""
        self._verdicts: dict[str, Link | None] = {}
        self._verdict_stamps: dict[str, int] = {}
        """The stamps the verdicts read from the store age by: one past `verdicts_days` at a document's own time
        (`see`) is hidden from it, as the store would hide it then."""
        self._expired_read: dict[str, int | None] = {}
        """The verdicts read that `verdict_of` found expired by their document's own time, by seq: `apply` lets the
        fresh verdict replace that one, and no other."""
        self._exact: dict[str, tuple[str, int] | None] = {}
        """Exact keys read or written in this batch: holder and stamp (None: absent)."""
        self._bands: dict[tuple[str, tuple[int, ...]], list[Canonical]] = {}
        self._groups: dict[str, tuple[int, int]] = {}
        """Group sizes read or grown in this batch, with their stamps (`RedisStateStore.group_entries`)."""
        self._new: dict[tuple[str, int, int], list[Canonical]] = {}
        """Canonicals made in this batch, by (language, band index, band value)."""
        self._made: dict[str, int] = {}
        """The same canonicals' fingerprints by id: a stored entry of one of them with another is no candidate (its id
        reused for another text: `RedisStateStore._write` replaces it)."""
        self._removed: set[str] = set()
        """Canonicals a relink took out of the band sets in this batch."""
        self._writes: list[Write] = []
        self._standing: list[tuple[str, str]] = []
        """(canonical, member) of the batch's documents linked already when read: redeliveries."""
        self._pending: dict[str, Link] = {}
        """The pending links the batch's documents were read with: a stopped batch's (`pending_of`)."""
        self._pending_read: set[str] = set()
        """The documents whose pending link was read: the batch's, and those looked up one by one."""
        self._stored_clock: int | None = None
        self._horizon: int | None = None
        """The sweep's horizon, read with the warm-up's clock (`RedisStateStore.verdict_expired`)."""
        self._newest = 0
        """The newest stamp written in this batch: `apply` moves the clock there."""
        self._seen = 0
        """The newest `published_at` of the batch's documents decided so far (`see`)."""
        self._warmed_at: float | None = None
        """When the batch's warm-up began: the sweep's share of time is measured from there."""

    def warm(self, reads: Reads) -> None:
        """Load a fresh snapshot of what the batch reads: verdicts, exact keys, band candidates,
        then the verdicts of the key holders and the group sizes of every canonical found and of the
        batch's own documents."""
        self.reset()
        self._warmed_at = time.monotonic()
        backend = self._backend
        doc_ids = _unique(reads.doc_ids)
        self._stored_clock, self._horizon, verdicts, self._pending = backend.verdicts_at(doc_ids)
        self._pending_read.update(doc_ids)
        self._read_verdicts(verdicts)
        self._standing = [(v.canonical_id, d) for d, (v, _) in _found(verdicts) if v.canonical_id != d]
        keys = _unique(reads.exact_keys)
        entries = backend.exact_entries(keys)
        self._exact.update({key: entries.get(key) for key in keys})
        found = {key: holder for key, (holder, _) in entries.items()}
        queries = _unique(reads.band_queries)
        self._bands.update(zip(queries, backend.band_candidates_many(queries), strict=True))
        holders = _unique(h for h in found.values() if h not in self._verdicts)
        self._read_verdicts(backend.verdict_entries(holders))
        # The batch's own documents too: one made a canonical here is joined by its copies later in the batch.
        canonicals = _unique([*found.values(), *(c.doc_id for cs in self._bands.values() for c in cs), *doc_ids])
        self._groups.update(backend.group_entries(canonicals))

    def flush(self, lease: Lease, exact: bool = False) -> dict[str, Link]:
        """Send every buffered write, fenced by `lease` (`RedisStateStore.apply`); then forget the snapshot.

        Returns the verdict that stands for every document decided in this batch: the
        one recorded now, with its sequence number, or the one someone else recorded
        first, which the caller publishes instead of its own (`Applied.stood`: read after
        the batch's sweep, at the clock its newer documents moved, one past `verdicts_days`
        was none, and the caller published its own link, never recorded). Raises `LeaseLost`
        (and with `exact`, `StaleSnapshot`) when nothing was written: decide again.
        """
        try:
            applied = self._apply(lease, exact, mark=True)
            standing = dict(applied.stood)
            for doc_id, seq in applied.seqs.items():
                link = self._verdicts.get(doc_id)
                if link is not None:
                    standing[doc_id] = replace(link, seq=seq)
            return standing
        finally:
            self.reset()

    def flush_applied(self, lease: Lease, exact: bool = False) -> Applied:
        """`flush` for a caller that publishes nothing (a replay): what `apply` did, without building
        (nor reading) the verdicts that stand, a copy of each link per document. Its links were decided
        already, so none is left pending (its redelivery applies the same links again)."""
        try:
            return self._apply(lease, exact, mark=False)
        finally:
            self.reset()

    def _apply(self, lease: Lease, exact: bool, mark: bool) -> Applied:
        """The buffered writes applied (with the markers of the documents read linked already, and the
        pending links read), then the sweep after a batch that wrote."""
        writes, self._writes = self._writes, []
        applied = self._backend.apply(
            writes, lease, exact, self._standing, mark, self._pending.keys(), self._expired_read
        )
        if writes:
            self._sweep(lease, applied.clock)
        return applied

    def _sweep(self, lease: Lease, clock: int) -> None:
        """After a batch that moved the clock into a new day: expired entries removed under `lease`, for
        `sweep_share` of the batch's time (the batch is written whatever happens here; later flushes go on)."""
        day = clock // DAY_S
        if day <= self._swept_day:
            return
        now = time.monotonic()
        spent = now - self._warmed_at if self._warmed_at is not None else 0.0
        if self._vectors is not None and day > self._vectors_day:
            self._expire_vectors(clock)
            self._vectors_day = day
        try:
            swept = self._backend.sweep(self._sweep_limit, lease, now + self._sweep_share * spent)
        except redis.RedisError as exc:
            log.warning("sweep of expired entries stopped: %s", exc)
            return
        if swept.done:
            self._swept_day = day

    def _expire_vectors(self, clock: int) -> None:
        """The vectors of every model that are past their retention at `clock`, removed (invisible already:
        the cascade never searches before the horizon); a store that fails here is tried again next day."""
        assert self._vectors is not None
        try:
            removed = self._vectors.expire_every_model(clock - self._vectors_s)
        except Exception as exc:  # the batch is written: a vector store down only delays its sweep
            log.warning("sweep of expired vectors stopped: %s", exc)
            return
        if removed:
            log.info("expired %d vectors", removed)

    # Retention

    def clock(self) -> int:
        """The clock this batch decides at: the stored one (read with the warm-up's verdicts), or the newest
        stamp written since, or the newest document decided since (`see`)."""
        if self._stored_clock is None:
            self._stored_clock = self._backend.clock()
        return max(self._stored_clock, self._newest, self._seen)

    def see(self, published_at: int) -> None:
        """The batch's next document (one without a verdict) is decided at the stream's time with it in: its
        `published_at`, clamped, where later; as `dedup run` advances its state to each document before deciding
        it. No round trip: what the snapshot read is hidden here once past its retention at that time (band
        entries, exact keys, group sizes), and the flush moves the stored clock there with the document's stamps.
        Decided at the clock its batch read, a document 31 days after its canonical was linked to it past
        `bands_days`, and a near-duplicate of a group expired by its own time was sent to review (`group_cap`):
        the same stream gave other verdicts than `dedup run`. Verdicts read with the batch are hidden the same way
        (`verdict_of`): an id whose verdict expired by its own time is decided afresh, not as a new version of it."""
        self._seen = max(self._seen, clamped(published_at, time.time()))

    def advance(self, published_at: int) -> int:
        self._stored_clock = self._backend.advance(published_at)
        return self.clock()

    def expire(self, limit: int = 10_000) -> int:
        return self._backend.expire(limit)

    def verdict_expired(self, stamp: int) -> bool:
        """`RedisStateStore.verdict_expired` at the batch's clock and horizon (no round trip once warmed)."""
        if self._warmed_at is None:  # (not warmed: no horizon read)
            return self._backend.verdict_expired(stamp)
        return verdict_gone(stamp, self.clock(), self._backend.keep.verdicts, self._horizon)

    def _stamped(self, published_at: int | None) -> None:
        if published_at is not None:
            self._newest = max(self._newest, clamped(published_at, time.time()))

    def _hidden(self, keep_s: int, published_at: int) -> bool:
        """Whether the store will hide an entry stamped `published_at` once this batch is written."""
        return self._backend.stale(keep_s, published_at, self.clock())

    # StateStore

    def verdict_of(self, doc_id: str) -> Link | None:
        """As the store would answer at the batch's clock: a verdict read with the batch at the clock before it,
        and past `verdicts_days` by now, is none (its document is decided afresh, as `dedup run` decides it). A
        verdict recorded in this batch stands for the rest of it, however old (the flush returns it)."""
        if doc_id not in self._verdicts:
            self._read_verdicts(self._backend.verdict_entries([doc_id]))
        link, stamp = self._verdicts[doc_id], self._verdict_stamps.get(doc_id)
        if link is not None and stamp is not None and expired(stamp, self.clock(), self._backend.keep.verdicts):
            self._expired_read[doc_id] = link.seq
            return None
        return link

    def _read_verdicts(self, entries: dict[str, tuple[Link, int] | None]) -> None:
        for doc_id, entry in entries.items():
            self._verdicts[doc_id] = None if entry is None else entry[0]
        self._verdict_stamps.update((doc_id, stamp) for doc_id, (_, stamp) in _found(entries))

    def pending_of(self, doc_id: str) -> Link | None:
        """As read with the batch's verdicts: a document not warmed (a new version, under an id of its own)
        is read on its own."""
        if doc_id not in self._pending_read:
            self._pending_read.add(doc_id)
            link = self._backend.pending_of(doc_id)
            if link is not None:
                self._pending[doc_id] = link
            return link
        return self._pending.get(doc_id)

    def record_verdict(self, link: Link) -> Link:
        """Seen by the rest of the batch even when past its retention already: it is the verdict the
        flush returns for the document."""
        self._stamped(link.published_at)
        self._verdicts[link.doc_id] = link
        self._verdict_stamps.pop(link.doc_id, None)
        self._writes.append(VerdictWrite(link))
        return link

    def exact_lookup(self, keys: Sequence[str]) -> dict[str, str]:
        missing = [key for key in keys if key not in self._exact]
        if missing:
            found = self._backend.exact_entries(missing)
            self._exact.update({key: found.get(key) for key in missing})
        keep, clock = self._backend.keep.exact, self.clock()
        return {
            key: entry[0]
            for key in keys
            if (entry := self._exact[key]) is not None and not expired(entry[1], clock, keep)
        }

    def exact_claim(self, keys: Sequence[str], canonical_id: str, published_at: int) -> dict[str, str]:
        self._stamped(published_at)
        held = self.exact_lookup(keys)
        claimed = {key: held.get(key, canonical_id) for key in keys}
        if not self._hidden(self._backend.keep.exact, published_at):
            entry = (canonical_id, self._backend.stamp_of(published_at))
            self._exact.update({key: entry for key in keys if key not in held})
        self._writes.append(ClaimWrite(tuple(keys), canonical_id, published_at))
        return claimed

    def exact_replace(self, key: str, expected: str, canonical_id: str, published_at: int | None = None) -> bool:
        if self.exact_lookup([key]).get(key) != expected:
            return False
        entry = self._exact[key]
        assert entry is not None
        self._exact[key] = (canonical_id, entry[1] if published_at is None else self._backend.stamp_of(published_at))
        self._writes.append(ReplaceWrite(key, expected, canonical_id, published_at))
        return True

    def band_candidates(self, language: str, bands: Sequence[int]) -> list[Canonical]:
        query = (language, tuple(bands))
        if query not in self._bands:
            self._bands[query] = self._backend.band_candidates(language, bands)
        made_here = {
            canonical.doc_id: canonical
            for index, value in self.band_layout.lookups(query[1])
            for canonical in self._new.get((language, index, value), ())
        }
        keep, clock = self._backend.keep.bands, self.clock()
        made = self._made
        stored = [
            c
            for c in self._bands[query]
            if c.doc_id not in self._removed
            and made.get(c.doc_id, c.simhash) == c.simhash
            and not expired(c.published_at, clock, keep)
        ]
        live = [c for c in made_here.values() if not self._hidden(keep, c.published_at)]
        return stored + sorted(live, key=lambda canonical: canonical.seq)

    def add_canonical(
        self,
        canonical_id: str,
        simhash: int,
        language: str,
        bands: Sequence[int],
        published_at: int,
        figures: int = 0,
    ) -> None:
        if canonical_id in self._made:
            return  # registering again changes nothing, as in Redis
        self._stamped(published_at)
        seq = _PROVISIONAL_SEQ + len(self._made)
        figures = figures if self._backend.keeps_figures else 0  # as the batch's later documents will read it
        canonical = Canonical(canonical_id, simhash, language, seq, published_at, figures)
        self._made[canonical_id] = simhash
        for index, value in enumerate(bands):
            self._new.setdefault((language, index, value), []).append(canonical)
        self._writes.append(CanonicalWrite(canonical_id, simhash, language, tuple(bands), published_at, figures))

    def grow_group(self, canonical_id: str, published_at: int) -> int:
        """As Redis grows it: an expired group counts from its canonical alone, stamped with its latest member."""
        self._stamped(published_at)
        size, stamp = self._group(canonical_id)
        self._groups[canonical_id] = (size + 1, max(stamp, self._backend.stamp_of(published_at)))
        self._writes.append(GrowWrite(canonical_id, 1, published_at))
        return self.group_size(canonical_id)

    def shrink_group(self, canonical_id: str) -> int:
        size, stamp = self._group(canonical_id)
        self._groups[canonical_id] = (max(1, size - 1), stamp)
        self._writes.append(GrowWrite(canonical_id, -1, 0))  # a shrink keeps the group's stamp
        return max(1, size - 1)

    def replace_verdict(self, link: Link, expected: Link) -> bool:
        """Checked against the snapshot now, and against Redis again when the batch is flushed."""
        current = self.verdict_of(link.doc_id)
        if current != expected:
            return False
        assert current is not None
        self._stamped(link.published_at)
        self._verdicts[link.doc_id] = link
        self._verdict_stamps.pop(link.doc_id, None)
        self._writes.append(ReplaceVerdictWrite(link, current))
        return True

    def remove_canonical(self, canonical_id: str, language: str, bands: Sequence[int]) -> None:
        self._removed.add(canonical_id)
        self._made.pop(canonical_id, None)
        for made in self._new.values():
            made[:] = [c for c in made if c.doc_id != canonical_id]
        self._writes.append(RemoveCanonicalWrite(canonical_id, language, tuple(bands)))

    def group_size(self, canonical_id: str) -> int:
        return self._group(canonical_id)[0]

    def _group(self, canonical_id: str) -> tuple[int, int]:
        """The group's size and stamp at the batch's clock: past `exact_days` there, its canonical alone."""
        if canonical_id not in self._groups:
            self._groups.update(self._backend.group_entries([canonical_id]))
        size, stamp = self._groups[canonical_id]
        return (1, -1) if size > 1 and expired(stamp, self.clock(), self._backend.keep.exact) else (size, stamp)


def _found(entries: dict[str, T | None]) -> list[tuple[str, T]]:
    """The entries read that were there."""
    return [(key, entry) for key, entry in entries.items() if entry is not None]


def _unique(items: Iterable[T]) -> list[T]:
    return list(dict.fromkeys(items))

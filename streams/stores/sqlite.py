"""The embedded state store: one SQLite file in the state folder.

Exact keys map to their canonical; canonicals carry their four band values in
indexed columns, so a candidate lookup is four index probes, never a scan;
every verdict is kept by document id, so a redelivery gets the same answer.

Writes are buffered in memory until `commit` and then written with one
`executemany` per table: the runner commits every few hundred documents, and a
statement per write would cost more than all the hashing. Reads see the
buffer first, so the store behaves as if every write went straight to disk.
One process writes a state folder at a time (the runner holds a lock on it).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from streams.core.model import Canonical, Link, Stage, Verdict
from streams.core.ports import Reads

_SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (
    doc_id TEXT PRIMARY KEY, verdict TEXT NOT NULL, canonical_id TEXT NOT NULL,
    stage TEXT, score REAL, model TEXT, content TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS exact_keys (key BLOB PRIMARY KEY, canonical_id TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS canonicals (
    seq INTEGER PRIMARY KEY, doc_id TEXT NOT NULL UNIQUE, simhash INTEGER NOT NULL,
    language TEXT NOT NULL, b0 INTEGER NOT NULL, b1 INTEGER NOT NULL, b2 INTEGER NOT NULL, b3 INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS canonicals_b0 ON canonicals (b0);
CREATE INDEX IF NOT EXISTS canonicals_b1 ON canonicals (b1);
CREATE INDEX IF NOT EXISTS canonicals_b2 ON canonicals (b2);
CREATE INDEX IF NOT EXISTS canonicals_b3 ON canonicals (b3);
CREATE TABLE IF NOT EXISTS groups (canonical_id TEXT PRIMARY KEY, size INTEGER NOT NULL) WITHOUT ROWID;
"""
_SIGN = 1 << 63
_IN_LIMIT = 512
"""Values bound in one `IN (...)` (SQLite allows 32,766 since 3.32; older builds 999)."""


def _to_signed(value: int) -> int:
    """SQLite integers are signed 64-bit; store the unsigned fingerprint in two's complement."""
    return value - (1 << 64) if value >= _SIGN else value


def _to_unsigned(value: int) -> int:
    return value + (1 << 64) if value < 0 else value


def _packed(key: str) -> bytes:
    """An exact key as 16 bytes (BLAKE2b-128): a quarter of the index of the text key, and
    no collision in practice (2**-64 at four billion keys)."""
    return hashlib.blake2b(key.encode(), digest_size=16).digest()


class SqliteStateStore:
    """`StateStore` on a SQLite file (or ":memory:"), durable at each `commit`."""

    def __init__(self, path: Path | str) -> None:
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        # The default 2 MB page cache thrashes once the indexes outgrow it (tens of
        # thousands of documents); SQLite takes only what it uses of these limits.
        self._db.execute("PRAGMA cache_size=-262144")
        self._db.execute("PRAGMA mmap_size=1073741824")
        self._db.executescript(_SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(verdicts)")}
        if "content" not in columns:  # a state folder from before versions: its verdicts match any content
            self._db.execute("ALTER TABLE verdicts ADD COLUMN content TEXT")
        self._next_seq = self._db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM canonicals").fetchone()[0]
        self._verdicts: dict[str, Link] = {}
        self._exact: dict[str, str] = {}
        self._known: dict[str, str | None] = {}
        """Exact keys read since the last commit (None: absent), so a claim after a lookup costs no read."""
        self._canonicals: list[tuple[Canonical, Sequence[int]]] = []
        self._bands: defaultdict[tuple[int, int], list[Canonical]] = defaultdict(list)
        self._groups: dict[str, int] = {}
        # What `warm` (and single reads) found in the file since the last commit. Only this
        # store writes the file, and its own writes stay in the buffers above until `commit`,
        # so the file cannot change under these until then.
        self._stored_verdicts: dict[str, Link | None] = {}
        self._stored_bands: dict[tuple[int, int], list[Canonical]] = {}
        self._stored_groups: dict[str, int] = {}
        self._removed: set[str] = set()
        """Canonicals taken out of the band sets since the last commit (a relink made them duplicates)."""
        # Reads run inside one open transaction: a read transaction per statement
        # would cost more than the lookup itself.
        self._db.execute("BEGIN")

    def commit(self) -> None:
        """Write everything decided since the last commit in one transaction."""
        db = self._db
        db.executemany(
            "INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (v.doc_id, v.verdict.value, v.canonical_id, v.stage, v.score, v.model, v.content)
                for v in self._verdicts.values()
            ],
        )
        db.executemany(
            "INSERT INTO exact_keys VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET canonical_id = excluded.canonical_id",
            [(_packed(key), canonical_id) for key, canonical_id in self._exact.items()],
        )
        # Removals first: a canonical removed and registered again since the last commit gets its new row.
        db.executemany("DELETE FROM canonicals WHERE doc_id = ?", [(doc_id,) for doc_id in self._removed])
        db.executemany(
            "INSERT OR IGNORE INTO canonicals VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(c.seq, c.doc_id, _to_signed(c.simhash), c.language, *bands) for c, bands in self._canonicals],
        )
        # A group back to its canonical alone has no row, as if it had never grown.
        db.executemany("INSERT OR REPLACE INTO groups VALUES (?, ?)", [g for g in self._groups.items() if g[1] > 1])
        db.executemany("DELETE FROM groups WHERE canonical_id = ?", [(c,) for c, n in self._groups.items() if n <= 1])
        db.execute("COMMIT")
        db.execute("BEGIN")
        self._verdicts.clear()
        self._exact.clear()
        self._known.clear()
        self._canonicals.clear()
        self._bands.clear()
        self._groups.clear()
        self._removed.clear()
        self._stored_verdicts.clear()
        self._stored_bands.clear()
        self._stored_groups.clear()

    def close(self) -> None:
        self.commit()
        self._db.execute("COMMIT")
        self._db.close()

    def warm(self, reads: Reads) -> None:
        """Read what deciding a chunk will read, in a few statements instead of several per document:
        its verdicts, exact keys and band candidates, then the verdicts and group sizes of the
        canonicals they name. A read it did not foresee still goes to the file."""
        self._load_verdicts(reads.doc_ids)
        found = self.exact_lookup(list(dict.fromkeys(reads.exact_keys)))
        wanted = [
            band for _, bands in reads.band_queries for band in enumerate(bands) if band not in self._stored_bands
        ]
        wanted = list(dict.fromkeys(wanted))
        for band in wanted:
            self._stored_bands[band] = []
        for index in range(4):
            for part in _parts([value for i, value in wanted if i == index]):
                marks, values = _bound(part)
                rows = self._db.execute(
                    f"SELECT doc_id, simhash, language, seq, b{index} FROM canonicals WHERE b{index} IN ({marks})",
                    values,
                )
                for doc_id, simhash, language, seq, value in rows:
                    self._stored_bands[index, value].append(Canonical(doc_id, _to_unsigned(simhash), language, seq))
        self._load_verdicts(found.values())
        self._load_groups([*found.values(), *(c.doc_id for band in wanted for c in self._stored_bands[band])])

    def _load_verdicts(self, doc_ids: Iterable[str]) -> None:
        rest = [d for d in dict.fromkeys(doc_ids) if d not in self._verdicts and d not in self._stored_verdicts]
        for part in _parts(rest):
            self._stored_verdicts.update(dict.fromkeys(part))
            marks, values = _bound(part)
            rows = self._db.execute(
                "SELECT doc_id, verdict, canonical_id, stage, score, model, content FROM verdicts"
                f" WHERE doc_id IN ({marks})",
                values,
            )
            for doc_id, *row in rows:
                self._stored_verdicts[doc_id] = _link(doc_id, *row)

    def _load_groups(self, canonical_ids: Iterable[str]) -> None:
        rest = [c for c in dict.fromkeys(canonical_ids) if c not in self._groups and c not in self._stored_groups]
        for part in _parts(rest):
            self._stored_groups.update(dict.fromkeys(part, 1))
            marks, values = _bound(part)
            rows = self._db.execute(f"SELECT canonical_id, size FROM groups WHERE canonical_id IN ({marks})", values)
            self._stored_groups.update(rows)

    def verdict_of(self, doc_id: str) -> Link | None:
        pending = self._verdicts.get(doc_id)
        if pending is not None:
            return pending
        if doc_id in self._stored_verdicts:
            return self._stored_verdicts[doc_id]
        row = self._db.execute(
            "SELECT verdict, canonical_id, stage, score, model, content FROM verdicts WHERE doc_id = ?", (doc_id,)
        ).fetchone()
        link = self._stored_verdicts[doc_id] = None if row is None else _link(doc_id, *row)
        return link

    def record_verdict(self, link: Link) -> Link:
        # One writer per state folder (see `locked`), and the cascade asked `verdict_of` just
        # before: no other verdict can have come in between.
        self._verdicts[link.doc_id] = link
        return link

    def exact_lookup(self, keys: Sequence[str]) -> dict[str, str]:
        rest = [key for key in keys if key not in self._exact and key not in self._known]
        if rest:
            packed = {_packed(key): key for key in rest}
            marks, values = _bound(list(packed))
            rows = self._db.execute(f"SELECT key, canonical_id FROM exact_keys WHERE key IN ({marks})", values)
            self._known.update(dict.fromkeys(rest))
            self._known.update((packed[key], canonical_id) for key, canonical_id in rows)
        found = {}
        for key in keys:
            holder = self._exact.get(key) or self._known.get(key)
            if holder is not None:
                found[key] = holder
        return found

    def exact_claim(self, keys: Sequence[str], canonical_id: str) -> dict[str, str]:
        holders = self.exact_lookup(keys)
        for key in keys:
            if key not in holders:
                holders[key] = self._exact[key] = canonical_id
        return holders

    def exact_replace(self, key: str, expected: str, canonical_id: str) -> bool:
        if self.exact_lookup([key]).get(key) != expected:
            return False
        self._exact[key] = canonical_id
        return True

    def band_candidates(self, language: str, bands: Sequence[int]) -> list[Canonical]:
        stored = self._stored_bands
        if all(band in stored for band in enumerate(bands)):  # warmed: no statement
            found = {
                c.doc_id: c
                for band in enumerate(bands)
                for c in stored[band]
                if c.language == language and c.doc_id not in self._removed
            }
        else:
            rows = self._db.execute(
                "SELECT doc_id, simhash, language, seq FROM canonicals"
                " WHERE (b0 = ? OR b1 = ? OR b2 = ? OR b3 = ?) AND language = ?",
                (*bands, language),
            ).fetchall()
            found = {
                doc_id: Canonical(doc_id, _to_unsigned(simhash), lang, seq)
                for doc_id, simhash, lang, seq in rows
                if doc_id not in self._removed
            }
        for band in enumerate(bands):
            for canonical in self._bands.get(band, ()):
                if canonical.language == language and canonical.doc_id not in found:
                    found[canonical.doc_id] = canonical
        return list(found.values())

    def add_canonical(self, canonical_id: str, simhash: int, language: str, bands: Sequence[int]) -> None:
        """Register a canonical; registering one again changes nothing (its first `seq` stays)."""
        canonical = Canonical(canonical_id, simhash, language, self._next_seq)
        self._next_seq += 1
        self._canonicals.append((canonical, tuple(bands)))
        for band in enumerate(bands):
            self._bands[band].append(canonical)

    def remove_canonical(self, canonical_id: str, language: str, bands: Sequence[int]) -> None:
        self._removed.add(canonical_id)
        self._canonicals = [(c, b) for c, b in self._canonicals if c.doc_id != canonical_id]
        for band in enumerate(bands):
            pending = self._bands.get(band)
            if pending:
                pending[:] = [c for c in pending if c.doc_id != canonical_id]

    def replace_verdict(self, link: Link, expected: Link) -> bool:
        if self.verdict_of(link.doc_id) != expected:
            return False
        self._verdicts[link.doc_id] = link
        return True

    def grow_group(self, canonical_id: str) -> int:
        size = self._groups[canonical_id] = self.group_size(canonical_id) + 1
        return size

    def shrink_group(self, canonical_id: str) -> int:
        size = self._groups[canonical_id] = max(1, self.group_size(canonical_id) - 1)
        return size

    def group_size(self, canonical_id: str) -> int:
        pending = self._groups.get(canonical_id)
        if pending is not None:
            return pending
        stored = self._stored_groups.get(canonical_id)
        if stored is not None:
            return stored
        row = self._db.execute("SELECT size FROM groups WHERE canonical_id = ?", (canonical_id,)).fetchone()
        size = self._stored_groups[canonical_id] = 1 if row is None else row[0]
        return size


def _link(
    doc_id: str,
    verdict: str,
    canonical_id: str,
    stage: str | None,
    score: float | None,
    model: str | None,
    content: str | None,
) -> Link:
    """A verdict as a row of `verdicts` holds it."""
    return Link(doc_id, Verdict(verdict), canonical_id, Stage(stage) if stage else None, score, model, content=content)


def _bound(values: list[Any]) -> tuple[str, list[Any]]:
    """Placeholders for `IN (...)`, and the values padded (with their last) to a power of two: a
    few statement texts, which sqlite3 prepares once and keeps, instead of one per length."""
    size = 1 << max(len(values) - 1, 0).bit_length()
    return ",".join("?" * size), values + values[-1:] * (size - len(values))


def _parts(values: list[Any]) -> Iterator[list[Any]]:
    """`values` in slices small enough to bind in one statement."""
    for start in range(0, len(values), _IN_LIMIT):
        yield values[start : start + _IN_LIMIT]

"""The embedded state store: one SQLite file in the state folder.

Exact keys map to their canonical; canonicals carry their four band values in
indexed columns, so a candidate lookup is four index probes, never a scan;
every verdict is kept by document id, so a redelivery gets the same answer.
Writes are grouped into transactions by the caller (`commit`), which is what
makes thousands of documents a second possible on one core.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from streams.core.model import Canonical, Link, Stage, Verdict

_SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (
    doc_id TEXT PRIMARY KEY, verdict TEXT NOT NULL, canonical_id TEXT NOT NULL,
    stage TEXT, score REAL, model TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS exact_keys (key TEXT PRIMARY KEY, canonical_id TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS canonicals (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, doc_id TEXT NOT NULL UNIQUE, simhash INTEGER NOT NULL,
    language TEXT NOT NULL, b0 INTEGER NOT NULL, b1 INTEGER NOT NULL, b2 INTEGER NOT NULL, b3 INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS canonicals_b0 ON canonicals (b0);
CREATE INDEX IF NOT EXISTS canonicals_b1 ON canonicals (b1);
CREATE INDEX IF NOT EXISTS canonicals_b2 ON canonicals (b2);
CREATE INDEX IF NOT EXISTS canonicals_b3 ON canonicals (b3);
CREATE TABLE IF NOT EXISTS groups (canonical_id TEXT PRIMARY KEY, size INTEGER NOT NULL) WITHOUT ROWID;
"""
_SIGN = 1 << 63


def _to_signed(value: int) -> int:
    """SQLite integers are signed 64-bit; store the unsigned fingerprint in two's complement."""
    return value - (1 << 64) if value >= _SIGN else value


def _to_unsigned(value: int) -> int:
    return value + (1 << 64) if value < 0 else value


class SqliteStateStore:
    """`StateStore` on a SQLite file (or ":memory:")."""

    def __init__(self, path: Path | str) -> None:
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._db.execute("BEGIN")

    def commit(self) -> None:
        """Make everything decided so far durable, and start the next transaction."""
        self._db.execute("COMMIT")
        self._db.execute("BEGIN")

    def close(self) -> None:
        self._db.execute("COMMIT")
        self._db.close()

    def verdict_of(self, doc_id: str) -> Link | None:
        row = self._db.execute(
            "SELECT verdict, canonical_id, stage, score, model FROM verdicts WHERE doc_id = ?", (doc_id,)
        ).fetchone()
        if row is None:
            return None
        verdict, canonical_id, stage, score, model = row
        return Link(doc_id, Verdict(verdict), canonical_id, Stage(stage) if stage else None, score, model)

    def record_verdict(self, link: Link) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?, ?, ?)",
            (link.doc_id, link.verdict.value, link.canonical_id, link.stage, link.score, link.model),
        )

    def exact_lookup(self, keys: Sequence[str]) -> dict[str, str]:
        marks = ",".join("?" * len(keys))
        return dict(self._db.execute(f"SELECT key, canonical_id FROM exact_keys WHERE key IN ({marks})", keys))

    def exact_claim(self, keys: Sequence[str], canonical_id: str) -> dict[str, str]:
        values = ",".join("(?, ?)" for _ in keys)
        rows = self._db.execute(
            f"INSERT INTO exact_keys VALUES {values} ON CONFLICT (key) DO UPDATE SET key = key"
            " RETURNING key, canonical_id",
            [value for key in keys for value in (key, canonical_id)],
        )
        return dict(rows)

    def exact_replace(self, key: str, expected: str, canonical_id: str) -> bool:
        cursor = self._db.execute(
            "UPDATE exact_keys SET canonical_id = ? WHERE key = ? AND canonical_id = ?", (canonical_id, key, expected)
        )
        return cursor.rowcount == 1

    def band_candidates(self, language: str, bands: Sequence[int]) -> list[Canonical]:
        rows = self._db.execute(
            "SELECT doc_id, simhash, language, seq FROM canonicals"
            " WHERE (b0 = ? OR b1 = ? OR b2 = ? OR b3 = ?) AND language = ?",
            (*bands, language),
        ).fetchall()
        return [Canonical(doc_id, _to_unsigned(simhash), lang, seq) for doc_id, simhash, lang, seq in rows]

    def add_canonical(self, canonical_id: str, simhash: int, language: str, bands: Sequence[int]) -> Canonical:
        row = self._db.execute(
            "INSERT INTO canonicals (doc_id, simhash, language, b0, b1, b2, b3) VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (doc_id) DO UPDATE SET doc_id = doc_id RETURNING seq",
            (canonical_id, _to_signed(simhash), language, *bands),
        ).fetchone()
        return Canonical(canonical_id, simhash, language, row[0])

    def grow_group(self, canonical_id: str) -> int:
        row = self._db.execute(
            "INSERT INTO groups VALUES (?, 2) ON CONFLICT (canonical_id) DO UPDATE SET size = size + 1 RETURNING size",
            (canonical_id,),
        ).fetchone()
        return row[0]

    def group_size(self, canonical_id: str) -> int:
        row = self._db.execute("SELECT size FROM groups WHERE canonical_id = ?", (canonical_id,)).fetchone()
        return 1 if row is None else row[0]

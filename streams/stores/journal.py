"""The state folder's journal: what the service keeps in its compacted topics, for files.

The workers publish every verdict to `dedup.links` and every candidate pair of the
semantic stage to `dedup.candidates`; compaction keeps the latest record per
document. A state folder keeps the same in one SQLite file beside its state, so
that the commands a person runs after `dedup run` (relink, review, calibrate) need
nothing but the state folder: the latest link record of every document (its
features, without the vector, which the vector store holds) and every candidate
record. The cascade never reads it.

Writes are buffered and committed with the state (before it, so the journal never
misses a verdict the state remembers; a record written again after a crash just
replaces itself). A kill between the two commits leaves the journal ahead of the
state: the state's commit notes the journal's position it covers
(`SqliteStateStore.note_journal`), and a record past it is one the state never
took in (`link(..., through=)`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from streams.stores.sqlite import SqliteStateStore, cannot_open

_SCHEMA = """
CREATE TABLE IF NOT EXISTS links (position INTEGER PRIMARY KEY, doc_id TEXT NOT NULL UNIQUE, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS candidates (
    position INTEGER PRIMARY KEY, doc_id TEXT NOT NULL UNIQUE, record BLOB NOT NULL
);
"""
_TABLES = ("links", "candidates")
JOURNAL_FILE = "journal.sqlite3"


class Journal:
    """Latest link record and candidate record per document, in the order they were last written."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / JOURNAL_FILE
        self.path = path
        try:
            self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise cannot_open(path, "journal", exc) from None
        self._pending: dict[str, dict[str, bytes]] = {table: {} for table in _TABLES}
        self.position = self._last_position()
        """Where the committed link records end: a state committed after the journal notes it."""

    def put_link(self, record: dict[str, Any]) -> None:
        """Keep a document's latest link record; its vector is left out (the vector store has it)."""
        kept = {key: value for key, value in record.items() if key != "vector"}
        self._put("links", record["doc_id"], kept)

    def put_candidate(self, record: dict[str, Any]) -> None:
        self._put("candidates", record["doc_id"], record)

    def _put(self, table: str, doc_id: str, record: dict[str, Any]) -> None:
        pending = self._pending[table]
        pending.pop(doc_id, None)  # the latest write goes last, as in the table
        pending[doc_id] = orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY)

    def commit(self) -> None:
        """Write every buffered record in one transaction."""
        if not any(self._pending.values()):
            return
        self._db.execute("BEGIN")
        for table, pending in self._pending.items():
            # Delete, then insert: a record written again moves to the end, where its latest write belongs. Numbered
            # past the last committed position, not by SQLite (one past the largest row left): a record written
            # again that was the last one would leave its position to the first new one, which a state's mark
            # (`through`) covers.
            start = self._last_position(table) + 1
            self._db.executemany(f"DELETE FROM {table} WHERE doc_id = ?", [(doc_id,) for doc_id in pending])
            self._db.executemany(
                f"INSERT INTO {table} (position, doc_id, record) VALUES (?, ?, ?)",
                [(start + n, doc_id, record) for n, (doc_id, record) in enumerate(pending.items())],
            )
            pending.clear()
        self._db.execute("COMMIT")
        self.position = self._last_position()

    def _last_position(self, table: str = "links") -> int:
        return int(self._db.execute(f"SELECT COALESCE(MAX(position), 0) FROM {table}").fetchone()[0])

    def close(self) -> None:
        self.commit()
        self._db.close()

    def link(self, doc_id: str, through: int | None = None) -> dict[str, Any] | None:
        """The latest link record of `doc_id`, or None; with `through`, None also for a committed one written
        past that position (a state that noted `through` never took it in). A buffered one is this process's."""
        return self._get("links", doc_id, through)

    def candidate(self, doc_id: str) -> dict[str, Any] | None:
        """The candidate record of `doc_id` (a document the semantic stage searched with), or None."""
        return self._get("candidates", doc_id)

    def links(self) -> Iterator[dict[str, Any]]:
        """Every document's latest link record, oldest first (buffered ones last)."""
        return self._all("links")

    def candidates(self) -> Iterator[dict[str, Any]]:
        return self._all("candidates")

    def _get(self, table: str, doc_id: str, through: int | None = None) -> dict[str, Any] | None:
        pending = self._pending[table].get(doc_id)
        if pending is not None:
            return orjson.loads(pending)
        row = self._db.execute(f"SELECT position, record FROM {table} WHERE doc_id = ?", (doc_id,)).fetchone()
        if row is None or (through is not None and row[0] > through):
            return None
        return orjson.loads(row[1])

    def _all(self, table: str) -> Iterator[dict[str, Any]]:
        pending = self._pending[table]
        rows = self._db.execute(f"SELECT doc_id, record FROM {table} ORDER BY position")
        for doc_id, record in rows:
            if doc_id not in pending:
                yield orjson.loads(record)
        for record in list(pending.values()):
            yield orjson.loads(record)


def settle(journal: Journal, state: SqliteStateStore) -> None:
    """Give the journal the records its state owes it (`SqliteStateStore.owe_journal`: a command killed after
    committing the state), before anything reads the journal. ValueError, before any write, where the journal
    ends before the position the state's last commit covered: deleted, or put back from an older copy than the
    state. Its next records would be numbered at positions the state's mark covers, and pass for ones the state
    took in (`link(..., through=)`); and it lacks verdicts the state has swept, which it alone keeps."""
    owed = state.journal_owed()
    if state.journal_mark and journal.position < state.journal_mark:
        raise ValueError(
            f"{journal.path} is behind its state: its records end at position {journal.position:,}, and the"
            f" state took in {state.journal_mark:,} (deleted, or put back from an older copy than state.sqlite3);"
            " put back the journal that goes with this state, or"
            " rebuild the folder with `dedup replay` from its links files into a new state folder"
        )
    if not owed:
        return
    for record in owed:
        journal.put_link(record)
    journal.commit()
    state.note_journal(journal.position)
    state.settle_journal()
    state.commit()

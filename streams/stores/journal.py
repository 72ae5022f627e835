"""The state folder's journal: what the service keeps in its compacted topics, for files.

The workers publish every verdict to `dedup.links` and every candidate pair of the
semantic stage to `dedup.candidates`; compaction keeps the latest record per
document. A state folder keeps the same in one SQLite file beside its state, so
that the commands a person runs after `dedup run` (relink, review, calibrate) need
nothing but the state folder: the latest link record of every document (its
features, without the vector, which the vector store holds) and every candidate
record. The cascade never reads it.

Writes are buffered and committed with the state, after it: the state's commit
keeps the records the journal takes next (`SqliteStateStore.owe_journal`), and a
kill between the two leaves them to the next command to give (`settle`). So the
journal never holds a record the state did not take in; each state commit notes
the journal's position it covers (`SqliteStateStore.note_journal`), and a record
past it (a journal committed first, by an earlier release) is not the state's
(`link(..., through=)`). An id reused for other content keeps the latest record of
each content it had (`decided`): a run reading the id's first story again knows it
decided it.
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
CREATE TABLE IF NOT EXISTS earlier (
    doc_id TEXT NOT NULL, content_hash TEXT NOT NULL, position INTEGER NOT NULL, record BLOB NOT NULL,
    PRIMARY KEY (doc_id, content_hash)
) WITHOUT ROWID;
"""
_CONTENT = "json_extract(CAST(record AS TEXT), '$.content_hash')"
_TABLES = ("links", "candidates")
JOURNAL_FILE = "journal.sqlite3"


class Journal:
    """Latest link record and candidate record per document, in the order they were last written; and, for an id
    reused for other content, the latest link record of each content it had before (`decided`)."""

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
        self._contents: dict[str, str | None] = {}
        """The content hash of each pending link record."""
        self._earlier: dict[tuple[str, str], bytes] = {}
        """Pending link records of other content than their id's latest one, by id and content."""
        self.position = self._last_position()
        """Where the committed link records end: a state committed after the journal notes it."""

    def put_link(self, record: dict[str, Any]) -> None:
        """Keep a document's latest link record; its vector is left out (the vector store has it)."""
        kept = {key: value for key, value in record.items() if key != "vector"}
        doc_id, content = record["doc_id"], record.get("content_hash")
        before, pending = self._contents.get(doc_id), self._pending["links"].get(doc_id)
        if pending is not None and before is not None and before != content:
            self._earlier[(doc_id, before)] = pending
        self._contents[doc_id] = content
        self._put("links", doc_id, kept)

    def put_candidate(self, record: dict[str, Any]) -> None:
        self._put("candidates", record["doc_id"], record)

    def _put(self, table: str, doc_id: str, record: dict[str, Any]) -> None:
        pending = self._pending[table]
        pending.pop(doc_id, None)  # the latest write goes last, as in the table
        pending[doc_id] = orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY)

    def pending_links(self) -> list[bytes]:
        """The link records written since the last commit, encoded, in the order a journal takes them again: what a
        state committed before the journal owes it (`SqliteStateStore.owe_journal`)."""
        return [*self._earlier.values(), *self._pending["links"].values()]

    def pending_candidates(self) -> list[bytes]:
        """The candidate records written since the last commit, encoded: owed as `pending_links` are."""
        return list(self._pending["candidates"].values())

    def commit(self) -> None:
        """Write every buffered record in one transaction."""
        if not any(self._pending.values()):
            return
        self._db.execute("BEGIN")
        # A record replacing one of other content keeps that one by id and content: a resumed or repeated run
        # reads an id's first story again after the id was given a second one, and must know it decided it.
        self._db.executemany(
            f"INSERT OR REPLACE INTO earlier SELECT doc_id, {_CONTENT}, position, record FROM links"
            f" WHERE doc_id = ? AND {_CONTENT} IS NOT NULL AND {_CONTENT} IS NOT ?",
            [(doc_id, content) for doc_id, content in self._contents.items() if content is not None],
        )
        # Numbered past the last committed position, not by SQLite (one past the largest row left): a record
        # written again that was the last one would leave its position to the first new one, which a state's
        # mark (`through`) covers. Records replaced before this commit come first.
        start = self._last_position("links") + 1
        earlier = [
            (doc_id, content, start + n, record) for n, ((doc_id, content), record) in enumerate(self._earlier.items())
        ]
        self._db.executemany("INSERT OR REPLACE INTO earlier VALUES (?, ?, ?, ?)", earlier)
        starts = {"links": start + len(earlier), "candidates": self._last_position("candidates") + 1}
        self._earlier.clear()
        self._contents.clear()
        for table, pending in self._pending.items():
            # Delete, then insert: a record written again moves to the end, where its latest write belongs.
            self._db.executemany(f"DELETE FROM {table} WHERE doc_id = ?", [(doc_id,) for doc_id in pending])
            self._db.executemany(
                f"INSERT INTO {table} (position, doc_id, record) VALUES (?, ?, ?)",
                [(starts[table] + n, doc_id, record) for n, (doc_id, record) in enumerate(pending.items())],
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

    def decided(self, doc_id: str, content_hash: str, through: int | None = None) -> dict[str, Any] | None:
        """The latest link record of `doc_id` given for this content: its latest, or one of an earlier story the id
        was used for. With `through`, the latest one a state that noted `through` took in."""
        pending = self._pending["links"].get(doc_id)
        if pending is not None and self._contents.get(doc_id) == content_hash:
            return orjson.loads(pending)
        if (doc_id, content_hash) in self._earlier:
            return orjson.loads(self._earlier[(doc_id, content_hash)])
        bound = through if through is not None else -1
        row = self._db.execute(
            f"SELECT position, record FROM links WHERE doc_id = ?1 AND {_CONTENT} = ?2 AND (?3 < 0 OR position <= ?3)"
            " UNION ALL SELECT position, record FROM earlier WHERE doc_id = ?1 AND content_hash = ?2"
            " AND (?3 < 0 OR position <= ?3) ORDER BY position DESC LIMIT 1",
            (doc_id, content_hash, bound),
        ).fetchone()
        return None if row is None else orjson.loads(row[1])

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
    owed, owed_candidates = state.journal_owed(), state.journal_owed_candidates()
    if state.journal_mark and journal.position < state.journal_mark:
        raise ValueError(
            f"{journal.path} is behind its state: its records end at position {journal.position:,}, and the"
            f" state took in {state.journal_mark:,} (deleted, or put back from an older copy than state.sqlite3);"
            " put back the journal that goes with this state, or"
            " rebuild the folder with `dedup replay` from its links files into a new state folder"
        )
    if not owed and not owed_candidates:
        return
    for record in owed:
        journal.put_link(record)
    for record in owed_candidates:
        journal.put_candidate(record)
    journal.commit()
    state.note_journal(journal.position)
    state.settle_journal()
    state.commit()


def commit_state_then_journal(state: SqliteStateStore, journal: Journal) -> None:
    """The state, then the journal: the state's commit keeps the records the journal takes next (`owe_journal`),
    so a kill between the two leaves the journal behind, given them by the next command (`settle`), never ahead
    with records the state did not take in. The journal's position is noted with the state's next commit."""
    state.owe_journal(journal.pending_links(), journal.pending_candidates())
    state.commit()
    journal.commit()
    state.note_journal(journal.position)
    state.settle_journal()

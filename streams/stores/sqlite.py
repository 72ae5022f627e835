"""The embedded state store: one SQLite file in the state folder.

Exact keys map to their canonical; canonicals carry their band keys (one per
table of the state's band layout, `streams.features.bands`) in indexed columns,
so a candidate lookup is an index probe per key it reads, never a scan; every
verdict is kept by document id, so a redelivery gets the same answer. The band
layout is the state's own (`made_with`): a store of another is refused.

Writes are buffered in memory until `commit` and then written with one
`executemany` per table: the runner commits every few hundred documents, and a
statement per write would cost more than all the hashing. Reads see the
buffer first, so the store behaves as if every write went straight to disk.
One process writes a state folder at a time (the runner holds a lock on it).

Retention (`RetentionSettings`): every row carries a `stamp` (a `published_at`,
Unix s, at most a day after the wall clock) and the stream's clock is kept in `meta`. A row older than its family's
retention is skipped by every read at once; `expire` deletes such rows later,
oldest first, through an index on `stamp` (a day bucket is a range of it).
A state folder of the version before retention gets a `stamp` column of NULLs:
its rows count as "stamped at migration", i.e. with the first clock the state
is advanced to (written at the next `commit`), so an old state keeps all its
data for a full retention from then on.
"""

from __future__ import annotations

import hashlib
import math
import sqlite3
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any

import orjson

from streams.config import RetentionSettings
from streams.core.model import Canonical, Link, Stage, Verdict, clamped, keep_seconds
from streams.core.ports import LayoutMismatch, Reads
from streams.features.bands import DEFAULT, FOUR_BY_16, BandLayout

_SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (
    doc_id TEXT PRIMARY KEY, verdict TEXT NOT NULL, canonical_id TEXT NOT NULL,
    stage TEXT, score REAL, model TEXT, content TEXT, stamp INTEGER
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS exact_keys (key BLOB PRIMARY KEY, canonical_id TEXT NOT NULL, stamp INTEGER) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS groups (canonical_id TEXT PRIMARY KEY, size INTEGER NOT NULL, stamp INTEGER) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS made_with (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS journal_owed (position INTEGER PRIMARY KEY, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS journal_owed_candidates (position INTEGER PRIMARY KEY, record BLOB NOT NULL);
"""
_OWED_LINKS, _OWED_CANDIDATES = "journal_owed", "journal_owed_candidates"
_OUTPUT = "output:"
"""The `meta` rows of output marks (`note_output`), named by the file's resolved path."""
_OWED = "owed article:"
"""The `meta` rows of articles owed to deduped.jsonl (`note_owed_articles`), named by `[doc_id, content_hash]`."""
_BEFORE_LAYOUTS = FOUR_BY_16.name
"""The band layout of a state folder made before layouts were recorded (`made_with` has no `bands`)."""


def _canonicals_schema(tables: int) -> str:
    """The canonicals, one indexed column per band table (`b0`...): a table's lookup is an index probe."""
    bands = "".join(f"b{i} INTEGER NOT NULL, " for i in range(tables))
    return (
        "CREATE TABLE IF NOT EXISTS canonicals (seq INTEGER PRIMARY KEY, doc_id TEXT NOT NULL UNIQUE,"
        f" simhash INTEGER NOT NULL, language TEXT NOT NULL, {bands}stamp INTEGER, figures INTEGER);"
        + "".join(f"CREATE INDEX IF NOT EXISTS canonicals_b{i} ON canonicals (b{i});" for i in range(tables))
    )


_FAMILIES = {"verdicts": "doc_id", "exact_keys": "key", "canonicals": "seq", "groups": "canonical_id"}
"""Each table of a key family, with the column that names a row (for deleting by stamp)."""
_STAMP_INDEXES = "".join(f"CREATE INDEX IF NOT EXISTS {t}_stamp ON {t} (stamp);" for t in _FAMILIES)
_NEVER = 1 << 62
"""Later than any `published_at`: clamped, it is the latest stamp the wall clock allows."""
_SIGN = 1 << 63
_IN_LIMIT = 512
"""Values bound in one `IN (...)` (SQLite allows 32,766 since 3.32; older builds 999)."""


def cannot_open(path: Path | str, what: str, exc: sqlite3.Error) -> ValueError:
    """The one-line error for an SQLite file that would not open: another version's (or no SQLite file at all)
    only where SQLite says so; else what it said, with the usual causes (a full disk said "no state file this
    version can open" and sent people after their versions)."""
    if any(sign in str(exc) for sign in ("not a database", "malformed")):
        return ValueError(f"{path} is no {what} this version can open ({exc})")
    return ValueError(f"cannot open {path}: {exc} (a full disk, a read-only folder, or no permission to write)")


def _to_signed(value: int) -> int:
    """SQLite integers are signed 64-bit; store an unsigned fingerprint (a simhash, figures) in two's complement."""
    return value - (1 << 64) if value >= _SIGN else value


def _to_unsigned(value: int) -> int:
    return value + (1 << 64) if value < 0 else value


def _packed(key: str) -> bytes:
    """An exact key as 16 bytes (BLAKE2b-128): a quarter of the index of the text key, and
    no collision in practice (2**-64 at four billion keys)."""
    return hashlib.blake2b(key.encode(), digest_size=16).digest()


class SqliteStateStore:
    """`StateStore` on a SQLite file (or ":memory:"), durable at each `commit`."""

    def __init__(
        self, path: Path | str, retention: RetentionSettings | None = None, band_layout: BandLayout = DEFAULT
    ) -> None:
        retention = retention or RetentionSettings()
        self.band_layout = band_layout
        self._keep = {
            "verdicts": keep_seconds(retention.verdicts_days),
            "exact_keys": keep_seconds(retention.exact_days),
            "canonicals": keep_seconds(retention.bands_days),
            "groups": keep_seconds(retention.exact_days),
        }
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
        except sqlite3.Error as exc:
            raise cannot_open(path, "state file", exc) from None
        self._db.execute("PRAGMA synchronous=NORMAL")
        # The default 2 MB page cache thrashes once the indexes outgrow it (tens of
        # thousands of documents); SQLite takes only what it uses of these limits.
        self._db.execute("PRAGMA cache_size=-262144")
        self._db.execute("PRAGMA mmap_size=1073741824")
        self._db.executescript(_SCHEMA)
        self._check_layout(path)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(verdicts)")}
        if "content" not in columns:  # a state folder from before versions: its verdicts match any content
            self._db.execute("ALTER TABLE verdicts ADD COLUMN content TEXT")
        self._abandoned = False
        self._unstamped = False
        """Rows without a stamp exist (a state from before retention): stamped with the clock at `commit`."""
        for table in _FAMILIES:
            if "stamp" not in {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN stamp INTEGER")
                self._unstamped = True
        self._figures = "figures" in {row[1] for row in self._db.execute("PRAGMA table_info(canonicals)")}
        """The canonicals carry figures. A state folder from before the figure check gets the column with the first
        canonical a commit writes (its own canonicals state none: NULL, checked against nothing), not on opening:
        a read (`dedup relink --dry-run`, a review) changes nothing, and the release before, which inserts
        canonicals by position, can go on writing the folder until then."""
        self._unstamped = self._unstamped or any(
            self._db.execute(f"SELECT 1 FROM {table} WHERE stamp IS NULL LIMIT 1").fetchone() for table in _FAMILIES
        )
        self._db.executescript(_STAMP_INDEXES)
        marks = dict(
            self._db.execute(
                "SELECT name, value FROM meta WHERE name IN ('clock', 'journal', 'verdicts_horizon')"
            ).fetchall()
        )
        self._horizon: int | None = marks.get("verdicts_horizon")
        """The latest bound `expire` swept verdicts below (the clock less `verdicts_days` then): a verdict stamped
        before it may be gone, so it counts as expired even once `verdicts_days` is lengthened."""
        self._swept_to: int | None = None
        """A new `_horizon`, written with the next commit."""
        self.journal_mark: int | None = marks.get("journal", None if "clock" in marks else 0)
        """The position in the state folder's journal that the last commit covered (`note_journal`): a record
        past it was journalled before a kill stopped this commit. None: a state from before marks (or one kept
        without a journal), which covers every record."""
        self._noted: int | None = None
        self._outputs_noted: dict[str, int] = {}
        self._owed: list[bytes] = []
        self._owed_candidates: list[bytes] = []
        self._settled = False
        row = self._db.execute("SELECT value FROM meta WHERE name = 'clock'").fetchone()
        self._clock = 0
        self._since: dict[str, float] = {}
        """Per family, the oldest stamp still visible at the clock (set by `advance`)."""
        self._ceiling = 0
        """The latest stamp a write may carry: the wall clock plus a day, when the clock last moved."""
        self.advance(0 if row is None else row[0])
        self._next_seq = self._db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM canonicals").fetchone()[0]
        self._verdicts: dict[str, Link] = {}
        self._exact: dict[str, tuple[str, int | None]] = {}
        """Exact keys claimed or re-pointed since the last commit: holder and stamp."""
        self._known: dict[str, tuple[str, int | None] | None] = {}
        """Exact keys read since the last commit (None: absent), so a claim after a lookup costs no read."""
        self._packed: dict[str, bytes] = {}
        """`_packed` of the keys read since the last commit: `commit` writes them without hashing them again."""
        self._canonicals: list[tuple[Canonical, Sequence[int], int | None]] = []
        """Canonicals registered since the last commit: their bands, and the oldest band stamp visible then (None:
        kept forever), below which a row of the same id had expired when it was registered again."""
        self._bands: defaultdict[tuple[int, int], list[Canonical]] = defaultdict(list)
        self._made: dict[str, Canonical] = {}
        """The same canonicals by id: a stored row of one of them with another fingerprint is no candidate."""
        self._groups: dict[str, tuple[int, int | None]] = {}
        """Group sizes changed since the last commit, with their stamps."""
        # What `warm` (and single reads) found in the file since the last commit. Only this
        # store writes the file, and its own writes stay in the buffers above until `commit`,
        # so the file cannot change under these until then.
        self._stored_verdicts: dict[str, Link | None] = {}
        self._stored_bands: dict[tuple[int, int], list[Canonical]] = {}
        self._stored_groups: dict[str, tuple[int, int | None]] = {}
        self._stored_rows: dict[str, tuple[int, int, int | None] | None] = {}
        """The seq, fingerprint and stamp of a canonical's row, by id (None: no row): registered again with that
        fingerprint, it keeps that seq."""
        self._removed: set[str] = set()
        """Canonicals taken out of the band sets since the last commit (a relink made them duplicates)."""
        # Reads run inside one open transaction: a read transaction per statement
        # would cost more than the lookup itself.
        self._db.execute("BEGIN")

    def _check_layout(self, path: Path | str) -> None:
        """Refuse a state made in another band layout; record this one in a new state."""
        db = self._db
        row = db.execute("SELECT value FROM made_with WHERE name = 'bands'").fetchone()
        made = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'canonicals'").fetchone()
        written = row[0] if row else _BEFORE_LAYOUTS if made else None
        if written is not None and written != self.band_layout.name:
            db.close()
            raise LayoutMismatch(
                f"the state in {path} was made with band layout {written}, this run has {self.band_layout.name}:"
                f" set DEDUP_SIMHASH__BANDS={written}, or rebuild the state in another folder with `dedup replay`"
            )
        db.executescript(_canonicals_schema(len(self.band_layout.tables)))
        db.execute("INSERT OR IGNORE INTO made_with VALUES ('bands', ?)", (self.band_layout.name,))

    def commit(self) -> None:
        """Write everything decided since the last commit in one transaction."""
        db = self._db
        db.executemany(
            "INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (v.doc_id, v.verdict.value, v.canonical_id, v.stage, v.score, v.model, v.content, v.published_at)
                for v in self._verdicts.values()
            ],
        )
        packed = self._packed
        db.executemany(
            "INSERT INTO exact_keys VALUES (?, ?, ?)"
            " ON CONFLICT (key) DO UPDATE SET canonical_id = excluded.canonical_id, stamp = excluded.stamp",
            [
                (packed.get(key) or _packed(key), canonical_id, stamp)
                for key, (canonical_id, stamp) in self._exact.items()
            ],
        )
        # Removals first: a canonical removed and registered again since the last commit gets its new row.
        db.executemany("DELETE FROM canonicals WHERE doc_id = ?", [(doc_id,) for doc_id in self._removed])
        if self._canonicals and not self._figures:
            db.execute("ALTER TABLE canonicals ADD COLUMN figures INTEGER")
            self._figures = True
            self.__dict__.pop("_band_select", None)  # made without the column
        if self._canonicals:  # (a statement is prepared even for no rows: it must fit the table)
            db.executemany(
                self._canonical_upsert,
                [
                    (
                        c.seq,
                        c.doc_id,
                        _to_signed(c.simhash),
                        c.language,
                        *bands,
                        c.published_at,
                        _to_signed(c.figures),
                        since,
                    )
                    for c, bands, since in self._canonicals
                ],
            )
        # A group back to its canonical alone has no row, as if it had never grown.
        db.executemany(
            "INSERT OR REPLACE INTO groups VALUES (?, ?, ?)",
            [(c, size, stamp) for c, (size, stamp) in self._groups.items() if size > 1],
        )
        db.executemany(
            "DELETE FROM groups WHERE canonical_id = ?", [(c,) for c, (size, _) in self._groups.items() if size <= 1]
        )
        if self._swept_to is not None:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('verdicts_horizon', ?)", (self._swept_to,))
            self._swept_to = None
        if self._noted is not None:  # `journal_mark` took it when noted
            db.execute("INSERT OR REPLACE INTO meta VALUES ('journal', ?)", (self._noted,))
            self._noted = None
        db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", self._outputs_noted.items())
        self._outputs_noted.clear()
        for table, owed in ((_OWED_LINKS, self._owed), (_OWED_CANDIDATES, self._owed_candidates)):
            if self._settled:
                db.execute(f"DELETE FROM {table}")
            db.executemany(f"INSERT INTO {table} (record) VALUES (?)", [(record,) for record in owed])
            owed.clear()
        self._settled = False
        if self._clock:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('clock', ?)", (self._clock,))
            if self._unstamped:  # "stamped at migration": with the first clock the old rows see
                for table in _FAMILIES:
                    db.execute(f"UPDATE {table} SET stamp = ? WHERE stamp IS NULL", (self._clock,))
                self._unstamped = False
        db.execute("COMMIT")
        db.execute("BEGIN")
        self._verdicts.clear()
        self._exact.clear()
        self._known.clear()
        self._packed.clear()
        self._canonicals.clear()
        self._bands.clear()
        self._made.clear()
        self._groups.clear()
        self._removed.clear()
        self._stored_verdicts.clear()
        self._stored_bands.clear()
        self._stored_groups.clear()
        self._stored_rows.clear()

    def clock(self) -> int:
        return self._clock

    def advance(self, published_at: int) -> int:
        """Move the stream's clock forward (never back); written to the file at `commit`."""
        if published_at <= self._clock and self._since:
            return self._clock  # (every document asks: nothing to recompute until the clock moves)
        self._clock = max(self._clock, int(published_at))
        self._since = {table: self._clock - keep if keep else -math.inf for table, keep in self._keep.items()}
        if self._horizon is not None:  # `verdicts_days` lengthened: what an earlier sweep expired stays expired
            self._since["verdicts"] = max(self._since["verdicts"], self._horizon)
        self._ceiling = clamped(_NEVER, time.time())
        return self._clock

    def expire(self, limit: int = 10_000) -> int:
        """Delete up to `limit` rows older than their family's retention, oldest first (through the stamp
        indexes); durable at the next `commit`. Returns how many it deleted (0: none left)."""
        removed = 0
        for table, name in _FAMILIES.items():
            since = self._since[table]
            if since == -math.inf or removed >= limit:
                continue
            removed += self._db.execute(
                f"DELETE FROM {table} WHERE {name} IN"
                f" (SELECT {name} FROM {table} WHERE stamp < ? ORDER BY stamp LIMIT ?)",
                (int(since), limit - removed),
            ).rowcount
            if table == "verdicts" and since != self._horizon:
                self._horizon = self._swept_to = int(since)
        return removed

    def verdict_expired(self, stamp: int) -> bool:
        """Whether a verdict stamped `stamp` has expired from this state: past `verdicts_days` at the clock, or
        past a shorter `verdicts_days` an earlier sweep kept (`_horizon`): it may be gone."""
        return stamp < self._since["verdicts"]

    def _alive(self, stamp: int | None, table: str) -> bool:
        """Whether a row of `table` stamped `stamp` is within its retention (unstamped rows are):
        `model.expired`, against the horizon `advance` worked out."""
        return stamp is None or stamp >= self._since[table]

    def note_journal(self, position: int) -> None:
        """The journal's records are committed through `position`: noted with the state's next commit, and the
        state's from now (the state took them in before the journal committed them, see `owe_journal`)."""
        self._noted = self.journal_mark = position

    def note_output(self, path: Path, size: int) -> None:
        """An output file of a run holds `size` bytes that this state has taken in: noted with the next commit."""
        self._outputs_noted[_OUTPUT + str(path.resolve())] = size

    def output_marks(self) -> dict[Path, int]:
        """Every output file the state noted (by its resolved path), with how many bytes at its start the state took
        in at its last commit; what follows was written after, a kill's leftover. A file not noted (a run's before
        the marks) counts as 0."""
        rows = self._db.execute("SELECT name, value FROM meta WHERE name LIKE ?", (_OUTPUT + "%",)).fetchall()
        return {Path(name.removeprefix(_OUTPUT)): int(value) for name, value in rows}

    def owed_articles(self) -> dict[str, str]:
        """The canonicals (id: content hash) whose article deduped.jsonl lacked at the last commit
        (`streams.runner.embedded`: a kill between a run's links and its articles)."""
        rows = self._db.execute("SELECT name FROM meta WHERE name LIKE ?", (_OWED + "%",)).fetchall()
        return dict(orjson.loads(name.removeprefix(_OWED)) for (name,) in rows)

    def note_owed_articles(self, owed: dict[str, str]) -> None:
        """These articles are owed now, and no others (kept with the next commit)."""
        self._db.execute("DELETE FROM meta WHERE name LIKE ?", (_OWED + "%",))
        self._db.executemany(
            "INSERT INTO meta VALUES (?, 0)", [(_OWED + orjson.dumps(item).decode(),) for item in owed.items()]
        )

    def vector_shards(self) -> set[str]:
        """The vector shards (one folder per model, `model_dir_name`) this state's canonicals have vectors in."""
        rows = self._db.execute("SELECT name FROM made_with WHERE name LIKE 'vectors/%'").fetchall()
        return {name.removeprefix("vectors/") for (name,) in rows}

    def note_vector_shards(self, names: Iterable[str]) -> None:
        """The state holds vectors in these shards now (kept with the next commit): a state folder whose
        vectors are lost is refused, not decided on as if it had none (`vector_shards`)."""
        self._db.executemany("INSERT OR IGNORE INTO made_with VALUES (?, '1')", [(f"vectors/{n}",) for n in names])

    def owe_journal(self, records: Iterable[dict[str, Any] | bytes], candidates: Iterable[bytes] = ()) -> None:
        """Link records (or their JSON), and candidate records' JSON, the journal takes after the state's next
        commit, kept in that commit: a kill between the two leaves them here for the next command to give the
        journal (`journal_owed`). The state commits first, so the journal never holds a record the state did
        not take in: a record past the state's mark would pass for one it took in once a later commit's mark
        covered it."""
        self._owed.extend(
            record if isinstance(record, bytes) else orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY)
            for record in records
        )
        self._owed_candidates.extend(candidates)

    def journal_owed(self) -> list[dict[str, Any]]:
        """The link records a committed state owes its journal, in the order they were written."""
        return self._owed_rows(_OWED_LINKS)

    def journal_owed_candidates(self) -> list[dict[str, Any]]:
        """The candidate records a committed state owes its journal, in the order they were written."""
        return self._owed_rows(_OWED_CANDIDATES)

    def _owed_rows(self, table: str) -> list[dict[str, Any]]:
        rows = self._db.execute(f"SELECT record FROM {table} ORDER BY position").fetchall()
        return [orjson.loads(record) for (record,) in rows]

    def settle_journal(self) -> None:
        """The journal has what the state owed it: forgotten with the state's next commit."""
        self._settled = True

    def close(self) -> None:
        if self._abandoned:
            return
        self.commit()
        self._db.execute("COMMIT")
        self._db.close()

    def abandon(self) -> None:
        """Close without committing what was written since the last commit (rolled back; `close` after it does
        nothing): a command stopped half-way through its writes leaves the state at its last commit, which
        running the command again completes, instead of a half it would make a second time."""
        if not self._abandoned:
            self._abandoned = True
            self._db.close()

    def warm(self, reads: Reads) -> None:
        """Read what deciding a chunk will read, in a few statements instead of several per document:
        its verdicts, exact keys and band candidates, then the verdicts and group sizes of the
        canonicals they name. A read it did not foresee still goes to the file."""
        self._load_verdicts(reads.doc_ids)
        found = self.exact_lookup(list(dict.fromkeys(reads.exact_keys)))
        lookups = self.band_layout.lookups
        stored = self._stored_bands
        wanted = list(dict.fromkeys(b for _, keys in reads.band_queries for b in lookups(keys) if b not in stored))
        for band in wanted:
            self._stored_bands[band] = []
        for index in range(len(self.band_layout.tables)):
            for part in _parts([value for i, value in wanted if i == index]):
                marks, values = _bound(part)
                rows = self._db.execute(
                    f"SELECT doc_id, simhash, language, seq, stamp, {self._figures_column}, b{index} FROM canonicals"
                    f" WHERE b{index} IN ({marks})",
                    values,
                )
                for *row, value in rows:
                    self._stored_bands[index, value].append(self._canonical(*row))
        self._load_verdicts(found.values())
        # The chunk's own documents too: one about to be linked is asked whether it has members (`_was_canonical`).
        bands = (c.doc_id for band in wanted for c in self._stored_bands[band])
        self._load_groups([*found.values(), *bands, *reads.doc_ids])
        self._load_rows(reads.doc_ids)

    def _load_verdicts(self, doc_ids: Iterable[str]) -> None:
        rest = [d for d in dict.fromkeys(doc_ids) if d not in self._verdicts and d not in self._stored_verdicts]
        for part in _parts(rest):
            self._stored_verdicts.update(dict.fromkeys(part))
            marks, values = _bound(part)
            rows = self._db.execute(
                "SELECT doc_id, verdict, canonical_id, stage, score, model, content, stamp FROM verdicts"
                f" WHERE doc_id IN ({marks})",
                values,
            )
            for doc_id, *row in rows:
                self._stored_verdicts[doc_id] = self._link(doc_id, *row)

    def _load_rows(self, doc_ids: Iterable[str]) -> None:
        rest = [d for d in dict.fromkeys(doc_ids) if d not in self._stored_rows]
        for part in _parts(rest):
            self._stored_rows.update(dict.fromkeys(part))
            marks, values = _bound(part)
            rows = self._db.execute(
                f"SELECT doc_id, seq, simhash, stamp FROM canonicals WHERE doc_id IN ({marks})", values
            )
            self._stored_rows.update(
                (doc_id, (seq, _to_unsigned(simhash), stamp)) for doc_id, seq, simhash, stamp in rows
            )

    def _load_groups(self, canonical_ids: Iterable[str]) -> None:
        rest = [c for c in dict.fromkeys(canonical_ids) if c not in self._groups and c not in self._stored_groups]
        for part in _parts(rest):
            self._stored_groups.update(dict.fromkeys(part, (1, None)))
            marks, values = _bound(part)
            rows = self._db.execute(
                f"SELECT canonical_id, size, stamp FROM groups WHERE canonical_id IN ({marks})", values
            )
            self._stored_groups.update((c, (size, stamp)) for c, size, stamp in rows)

    def pending_of(self, doc_id: str) -> Link | None:
        """None: a `commit` is one transaction, so a write stopped half-way leaves nothing of itself."""
        return None

    def verdict_of(self, doc_id: str) -> Link | None:
        link = self._verdicts.get(doc_id)
        if link is None:
            if doc_id in self._stored_verdicts:
                link = self._stored_verdicts[doc_id]
            else:
                row = self._db.execute(
                    "SELECT verdict, canonical_id, stage, score, model, content, stamp FROM verdicts WHERE doc_id = ?",
                    (doc_id,),
                ).fetchone()
                link = self._stored_verdicts[doc_id] = None if row is None else self._link(doc_id, *row)
        if link is None or (link.published_at is not None and link.published_at < self._since["verdicts"]):
            return None  # (`_alive`, inline: every document asks this a few times)
        return link

    def record_verdict(self, link: Link) -> Link:
        # One writer per state folder (see `locked`), and the cascade asked `verdict_of` just
        # before: no other verdict can have come in between.
        self._verdicts[link.doc_id] = self._stamped(link)
        return link

    def _stamped(self, link: Link) -> Link:
        """A verdict stamped with its `published_at` (clamped: `_stamp`), or without one (an old record)
        with the clock."""
        if link.published_at is not None:
            stamp = self._stamp(link.published_at)
            return link if stamp == link.published_at else replace(link, published_at=stamp)
        self._unstamped = self._unstamped or not self._clock
        return replace(link, published_at=self._clock or None)

    def exact_lookup(self, keys: Sequence[str]) -> dict[str, str]:
        rest = [key for key in keys if key not in self._exact and key not in self._known]
        if rest:
            own = [(key, _packed(key)) for key in rest]
            self._packed.update(own)
            packed = {digest: key for key, digest in own}
            marks, values = _bound(list(packed))
            rows = self._db.execute(f"SELECT key, canonical_id, stamp FROM exact_keys WHERE key IN ({marks})", values)
            self._known.update(dict.fromkeys(rest))
            self._known.update((packed[key], (canonical_id, stamp)) for key, canonical_id, stamp in rows)
        found = {}
        since = self._since["exact_keys"]
        for key in keys:
            held = self._exact.get(key) or self._known.get(key)
            if held is not None and (held[1] is None or held[1] >= since):  # `_alive`
                found[key] = held[0]
        return found

    def exact_claim(self, keys: Sequence[str], canonical_id: str, published_at: int) -> dict[str, str]:
        holders = self.exact_lookup(keys)
        for key in keys:
            if key not in holders:  # absent, or expired: claimed anew
                holders[key] = canonical_id
                self._exact[key] = (canonical_id, self._stamp(published_at))
        return holders

    def exact_replace(self, key: str, expected: str, canonical_id: str, published_at: int | None = None) -> bool:
        if self.exact_lookup([key]).get(key) != expected:
            return False
        held = self._exact.get(key) or self._known.get(key)
        assert held is not None
        self._exact[key] = (canonical_id, held[1] if published_at is None else self._stamp(published_at))
        return True

    def band_candidates(self, language: str, bands: Sequence[int]) -> list[Canonical]:
        """Canonicals the layout's lookups of `bands` find, those past `bands_days` left out (a canonical's stamp
        is never None)."""
        stored = self._stored_bands
        since = self._since["canonicals"]
        looked = self.band_layout.lookups(bands)
        if all(band in stored for band in looked):  # warmed: no statement
            found = {
                c.doc_id: c
                for band in looked
                for c in stored[band]
                if c.language == language and c.published_at >= since and self._stands(c)
            }
        else:
            rows = self._db.execute(self._band_select, (*(value for _, value in looked), language)).fetchall()
            made = (self._canonical(*row) for row in rows)
            found = {c.doc_id: c for c in made if c.published_at >= since and self._stands(c)}
        made = self._made
        for band in looked:
            for canonical in self._bands.get(band, ()):
                if (
                    canonical.language == language
                    and canonical.doc_id not in found
                    and canonical.published_at >= since
                    and made.get(canonical.doc_id) is canonical  # not one it was registered again over
                ):
                    found[canonical.doc_id] = canonical
        return list(found.values())

    def _stands(self, stored: Canonical) -> bool:
        """Whether a canonical's stored row is still its entry: not taken out since the last commit, nor registered
        again with another fingerprint (its id reused for another text: `add_canonical`)."""
        if stored.doc_id in self._removed:
            return False
        made = self._made.get(stored.doc_id)
        return made is None or made.simhash == stored.simhash

    @cached_property
    def _band_select(self) -> str:
        """One lookup's statement: each table's column against the keys the lookup reads there."""
        layout = self.band_layout
        marks = ", ".join("?" * len(layout.near(0)))
        where = " OR ".join(f"b{index} IN ({marks})" for index in range(len(layout.tables)))
        columns = f"doc_id, simhash, language, seq, stamp, {self._figures_column}"
        return f"SELECT {columns} FROM canonicals WHERE ({where}) AND language = ?"

    @cached_property
    def _canonical_upsert(self) -> str:
        """`commit`'s statement for a canonical, its last parameter the band stamp visible when it was registered.
        Registered again while its row lives with the same fingerprint (its verdict expired, the document sent
        again), its seq and entries stay and its stamp moves on. Registered over a row that had expired, not yet
        swept, or one of another fingerprint (its id reused for another text: `add_canonical`), it replaces the row
        whole, as after the sweep (and as Redis registers an id whose entry expired or held another fingerprint):
        kept, the row's old fingerprint would come back to life under an id reused for another text."""
        columns = ["seq", "doc_id", "simhash", "language", *(f"b{i}" for i in range(len(self.band_layout.tables)))]
        columns += ["stamp", "figures"]
        since = f"?{len(columns) + 1}"
        new = f"stamp < {since} OR simhash <> excluded.simhash"
        replaced = ", ".join(
            f"{column} = iif({new}, excluded.{column}, {column})"
            for column in columns
            if column not in ("doc_id", "stamp")
        )
        values = ", ".join(f"?{i + 1}" for i in range(len(columns)))
        return (
            f"INSERT INTO canonicals ({', '.join(columns)}) VALUES ({values}) ON CONFLICT (doc_id) DO UPDATE SET"
            f" {replaced}, stamp = iif(simhash <> excluded.simhash, excluded.stamp,"
            " MAX(COALESCE(stamp, 0), excluded.stamp))"
        )

    @property
    def _figures_column(self) -> str:
        """What a read selects for a canonical's figures: the column, or NULL while a state folder of the release
        before has none."""
        return "figures" if self._figures else "NULL"

    def add_canonical(
        self,
        canonical_id: str,
        simhash: int,
        language: str,
        bands: Sequence[int],
        published_at: int,
        figures: int = 0,
    ) -> None:
        """Register a canonical. Registered again with the fingerprint of its live row (its verdict expired, the
        document sent again), it keeps the row's seq and its later stamp. With another (its id reused for another
        text), or over a row past `bands_days`, it is a new canonical: a new seq, the new text's entries. Kept, the
        first text's entries would have its near-duplicates linked to the new text (stage 3 merging two articles)
        and the new text's found by nothing (`_canonical_upsert`)."""
        stamp = self._stamp(published_at)
        live = self._live_row(canonical_id)
        if live is not None and live[1] == simhash:
            seq, stamp = live[0], max(stamp, live[2] or 0)
        else:
            seq = self._next_seq
            self._next_seq += 1
        canonical = Canonical(canonical_id, simhash, language, seq, stamp, figures)
        self._made[canonical_id] = canonical
        since = self._since["canonicals"]
        self._canonicals.append((canonical, tuple(bands), None if since == -math.inf else int(since)))
        for band in enumerate(bands):  # the keys it is stored under: a lookup's `near` keys find it
            self._bands[band].append(canonical)

    def _live_row(self, canonical_id: str) -> tuple[int, int, int | None] | None:
        """The seq, fingerprint and stamp of a canonical's live row (registered since the last commit, or stored);
        None where it has none (`warm` read the chunk's)."""
        made = self._made.get(canonical_id)
        if made is not None:
            alive = self._alive(made.published_at, "canonicals")
            return (made.seq, made.simhash, made.published_at) if alive else None
        if canonical_id in self._removed:
            return None
        if canonical_id not in self._stored_rows:
            self._load_rows([canonical_id])
        row = self._stored_rows[canonical_id]
        return row if row is not None and self._alive(row[2], "canonicals") else None

    def remove_canonical(self, canonical_id: str, language: str, bands: Sequence[int]) -> None:
        self._removed.add(canonical_id)
        self._made.pop(canonical_id, None)
        self._canonicals = [entry for entry in self._canonicals if entry[0].doc_id != canonical_id]
        for band in enumerate(bands):
            pending = self._bands.get(band)
            if pending:
                pending[:] = [c for c in pending if c.doc_id != canonical_id]

    def replace_verdict(self, link: Link, expected: Link) -> bool:
        if self.verdict_of(link.doc_id) != expected:
            return False
        self._verdicts[link.doc_id] = link
        return True

    def grow_group(self, canonical_id: str, published_at: int) -> int:
        size, stamp = self._group(canonical_id)
        stamp = self._stamp(published_at) if stamp is None else max(stamp, self._stamp(published_at))
        self._groups[canonical_id] = (size + 1, stamp)
        return size + 1

    def shrink_group(self, canonical_id: str) -> int:
        size, stamp = self._group(canonical_id)
        self._groups[canonical_id] = (max(1, size - 1), stamp)
        return max(1, size - 1)

    def group_size(self, canonical_id: str) -> int:
        return self._group(canonical_id)[0]

    def _group(self, canonical_id: str) -> tuple[int, int | None]:
        """The group's size and stamp; an expired group is its canonical alone again."""
        group = self._groups.get(canonical_id) or self._stored_groups.get(canonical_id)
        if group is None:
            row = self._db.execute("SELECT size, stamp FROM groups WHERE canonical_id = ?", (canonical_id,)).fetchone()
            group = self._stored_groups[canonical_id] = (1, None) if row is None else (row[0], row[1])
        if group[1] is not None and not self._alive(group[1], "groups"):
            return (1, None)
        return group

    def _stamp(self, published_at: int) -> int:
        """A stamp is clamped as the clock is (`model.clamped`): an entry dated 2100 ages from tomorrow."""
        return published_at if published_at <= self._ceiling else self._ceiling

    def _link(self, doc_id: str, *row: Any) -> Link:
        """A verdict as a row of `verdicts` holds it (an unstamped row: stamped at migration, i.e. now)."""
        *fields, stamp = row
        return _link(doc_id, *fields, published_at=self._clock if stamp is None else stamp)

    def _canonical(
        self, doc_id: str, simhash: int, language: str, seq: int, stamp: int | None, figures: int | None
    ) -> Canonical:
        """A canonical as a row of `canonicals` holds it (an unstamped row: stamped at migration, i.e. now)."""
        stamped = self._clock if stamp is None else stamp
        return Canonical(doc_id, _to_unsigned(simhash), language, seq, stamped, _to_unsigned(figures or 0))


def _link(
    doc_id: str,
    verdict: str,
    canonical_id: str,
    stage: str | None,
    score: float | None,
    model: str | None,
    content: str | None,
    published_at: int | None = None,
) -> Link:
    """A verdict as a row of `verdicts` holds it."""
    stage_ = Stage(stage) if stage else None
    return Link(
        doc_id, Verdict(verdict), canonical_id, stage_, score, model, content=content, published_at=published_at
    )


def _bound(values: list[Any]) -> tuple[str, list[Any]]:
    """Placeholders for `IN (...)`, and the values padded (with their last) to a power of two: a
    few statement texts, which sqlite3 prepares once and keeps, instead of one per length."""
    size = 1 << max(len(values) - 1, 0).bit_length()
    return ",".join("?" * size), values + values[-1:] * (size - len(values))


def _parts(values: list[Any]) -> Iterator[list[Any]]:
    """`values` in slices small enough to bind in one statement."""
    for start in range(0, len(values), _IN_LIMIT):
        yield values[start : start + _IN_LIMIT]

"""Taking published link records into a state folder: what `dedup replay` does for each line of a links file,
and what `dedup run` does for the lines a kill left past its state's last commit (`take_in_outputs`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from streams.config import RetentionSettings
from streams.core.model import clamped
from streams.core.replay import Recorded, chain, restore
from streams.records.output import read_link_record
from streams.stores.journal import Journal
from streams.stores.sqlite import SqliteStateStore

if TYPE_CHECKING:
    from streams.vectors.edge import EdgeVectorStore

COMMIT_EVERY = 10_000
"""Links restored between two commits at most, as `dedup replay` commits (`streams.runner.replay.COMMIT_LINKS`)."""
PROGRESS_LINES = 1_000
"""Links read between two reports of the progress of taking them in."""
LINK_ERRORS = (orjson.JSONDecodeError, KeyError, ValueError, TypeError, AttributeError)
"""What `orjson.loads` and `read_link_record` raise on a line that is no link record."""


def why_not_a_link(exc: Exception) -> str:
    return f"missing field {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"


class LinkRestorer:
    """Restores link records into a state folder's state, journal and vectors, one whole record at a time."""

    def __init__(
        self,
        state: SqliteStateStore,
        journal: Journal,
        vectors: EdgeVectorStore | None,
        retention: RetentionSettings,
    ) -> None:
        self._state, self._journal, self._vectors, self._retention = state, journal, vectors, retention

    def taken_in(self, recorded: Recorded) -> bool:
        """Whether this state took in the link of a document it has no verdict of (`restore`): its verdict has
        expired by the state's clock and the journal holds a record of it that the state covers. Files come in
        any order, so the clock alone cannot say: an older file's links are new to it."""
        return self._state.verdict_expired(recorded.verdict_stamp) and (
            self._journal.link(recorded.link.doc_id, self._state.journal_mark) is not None
        )

    def chained(self, recorded: Recorded) -> str | None:
        """Why this link would make a chain in the state (`chain`): skipped, as `dedup replay` of a topic skips it."""
        return chain(recorded.link, self._state.verdict_of)

    def take(self, record: dict[str, Any], recorded: Recorded) -> bool:
        """Restore one record (the state's clock moved to it first, as the cascade moves it); False when the state
        holds it already."""
        self._state.advance(clamped(recorded.published_at, time.time()))
        if restore(recorded, self._state, self._vectors, self._retention, self.taken_in):
            self._journal.put_link(record)
            return True
        if self._journal.link(recorded.link.doc_id) is None:
            self._journal.put_link(record)
        # Else the journal keeps what it has: a verdict sent again (a redelivery) lacks what a relink's record
        # says of it (decided_by, previous), which relink reads.
        return False

    def take_candidate(self, record: dict[str, Any]) -> None:
        """Give the journal the candidate record of a document whose link was taken in, unless it holds it."""
        if self._journal.candidate(record["doc_id"]) != record:
            self._journal.put_candidate(record)


def _span(path: Path, marks: dict[Path, int]) -> tuple[int, int]:
    """Where the bytes of `path` past the state's mark begin and end: empty where the file is missing, or the mark
    is past its end (not the file the state noted: moved away, another in its place). No mark noted means the
    state took in none of the file."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0, 0
    start = marks.get(path.resolve(), 0)
    return (start, size) if start < size else (0, 0)


def _past_mark(path: Path, span: tuple[int, int]) -> Iterator[bytes]:
    """The lines of `path` in its `span` (`_span`) that end in a newline (a last line torn by a kill is no record),
    read one at a time (where the state was lost, that is the whole file)."""
    start, end = span
    if start >= end:
        return
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        return
    with handle:
        handle.seek(start)
        for line in handle:
            if line.endswith(b"\n"):
                yield line


def take_in_outputs(
    links: Path,
    candidates: Path,
    marks: dict[Path, int],
    restorer: LinkRestorer,
    commit: Callable[[], None],
    owed: dict[str, str],
    has_article: Callable[[str, str], bool],
    on_bytes: Callable[[int, int, int], None] | None = None,
) -> set[str]:
    """Take in what a `dedup run` stopped past its state's last commit published: the link records of `links`
    past the state's mark (all of them where the state noted none: it never took any in, as after a kill before
    its first commit), and the candidate records of those documents. Their ids.

    Decided again instead, a document gets this release's and these settings' verdict, which need not be the
    one its line already says (another figure check, other stages): a second verdict for one document, or keys
    the links never claimed, and a state that `dedup replay` of the links does not rebuild.

    `commit` is called after every `COMMIT_EVERY` links restored and at the end, as `dedup replay` commits, so that
    the journal's pending records stay bounded (a lost state's whole file can be millions of links). A kill in
    between leaves the marks where they were: the next run reads the same lines again, restores the rest and
    skips what is there, and still gives the journal the candidate records it lacks. `on_bytes` hears how many
    lines and bytes of those links are taken in, and of how many bytes, every `PROGRESS_LINES` lines and at the
    end.

    A document that the last of its lines publishes (a canonical) whose article `has_article` does not find is put
    in `owed` (id: content hash): a kill came between the links' hand-over to their file and the articles'. The run
    writes it when it reads the document; until one does, it is owed, not lost (the state notes it).

    The file is opened as the run's output first (`JsonlOutput`), which refuses one with a line that is no JSON
    object (fix or delete that line) before any line is taken in: taken in up to it, the line, once fixed, would be
    restored after the lines that follow it (its verdict and keys stamped later than `dedup replay` stamps them).
    """
    found: set[str] = set()
    restored = done = number = 0
    span = _span(links, marks)
    total = span[1] - span[0]
    for number, line in enumerate(_past_mark(links, span), start=1):
        done += len(line)
        if on_bytes is not None and number % PROGRESS_LINES == 0:
            on_bytes(number, done, total)
        try:
            record = orjson.loads(line)
            recorded = read_link_record(record)
        except LINK_ERRORS:
            continue  # no link this release can restore: `dedup replay` skips it the same way
        if restorer.chained(recorded) is not None:
            continue  # as `dedup replay` skips it: the run decides the document again
        doc_id = recorded.link.doc_id
        found.add(doc_id)
        content = record.get("content_hash")
        if recorded.link.publishes and isinstance(content, str) and not has_article(doc_id, content):
            owed[doc_id] = content
        else:
            owed.pop(doc_id, None)
        if restorer.take(record, recorded):
            restored += 1
            if restored % COMMIT_EVERY == 0:
                commit()
    for line in _past_mark(candidates, _span(candidates, marks)):
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(record, dict) and record.get("doc_id") in found:
            restorer.take_candidate(record)
    if found:
        commit()
    if on_bytes is not None and total:
        on_bytes(number, total, total)
    return found

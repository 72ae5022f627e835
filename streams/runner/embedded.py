"""`dedup run`: the cascade over JSONL files, state in a local folder, no server.

Documents are decided strictly in input order, one at a time, so the verdicts
are those of a one-by-one stream. Only the embedder is batched: when a
document needs its vector, the runner embeds it together with the next
documents that (as far as the state tells now) will need theirs too.

Running the same command again continues, so the outputs always hold what the
state holds: the state is committed only after the output lines of everything
it remembers are fsynced, and Ctrl-C waits for the document being decided and
written. A kill between commits leaves outputs ahead of the state: the next run
first restores the link records past the state's last commit (`_take_in_published`),
so those documents keep the verdicts their lines say, whatever this release or
these settings would decide, and `JsonlOutput` does not write a line the file
already has (it also cuts a line torn by the kill). A document's lines reach
their files in one order (held, then handed over in order): its candidate line,
its link line, its article. So a link taken in never lacks its candidate record,
no article is published without its verdict, and a restored canonical whose
article the kill caught is written when a run reads it again (until then the
state notes it as owed, and every run names it: `owed_articles`). Emitting from
the state on resume instead would need every output line (the article, its
vector) kept in the state; ordering the writes needs nothing kept twice.
Until it has, another command on the state is refused (`refuse_a_stopped_command`):
the state notes how much of each output it took in, and run.json which command
wrote the outputs last.
"""

from __future__ import annotations

import base64
import fcntl
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from streams.config import RetentionSettings, Settings
from streams.core.cascade import Cascade, Decision
from streams.core.model import Document, Stage, clamped, version_id
from streams.core.ports import Embedder
from streams.records.article import Featurizer, Rejection, parse_timestamp
from streams.records.output import candidate_record, deduped_record, link_record, read_link_record
from streams.runner.collector import rare_collections
from streams.runner.interrupts import Interrupts
from streams.runner.jsonl import InputLine, JsonlOutput, read_lines
from streams.runner.restoring import LinkRestorer, take_in_outputs
from streams.runner.summary import RunStats
from streams.stores.journal import Journal, commit_state_then_journal, settle
from streams.stores.sqlite import SqliteStateStore

if TYPE_CHECKING:
    from streams.vectors.edge import EdgeVectorStore

CHUNK = 256
"""Documents parsed ahead of their decisions (the embedder's look-ahead window)."""
COMMIT_SECONDS = 2.0
"""How often outputs are flushed and the state committed: each commit syncs the disk."""
HELD_BYTES = 32 * 1024 * 1024
"""Output lines held in memory at most between two commits before they are handed to the files, in order."""
SWEEP_LIMIT = 10_000
"""Expired entries removed after a commit, at most: the sweep catches up over a few commits, never stalls one."""


@dataclass(frozen=True)
class RunPaths:
    out: Path
    state: Path

    @property
    def links(self) -> Path:
        return self.out / "links.jsonl"

    @property
    def deduped(self) -> Path:
        return self.out / "deduped.jsonl"

    @property
    def rejected(self) -> Path:
        return self.out / "rejected.jsonl"

    @property
    def candidates(self) -> Path:
        """The semantic stage's candidate records (`dedup.candidates` as a file): what `dedup replay` gives a
        rebuilt state's journal, so that relink can unlink an embedded duplicate there too."""
        return self.out / "candidates.jsonl"

    @property
    def summary(self) -> Path:
        return self.out / "summary.json"

    @property
    def owner(self) -> Path:
        """Which state folder the outputs belong to: they continue only with that state."""
        return self.out / "run.json"

    @property
    def written(self) -> tuple[Path, ...]:
        """Every file a run writes in `out`."""
        return (self.links, self.deduped, self.rejected, self.candidates, self.summary, self.owner)


@contextmanager
def locked(folder: Path, what: str = "state folder") -> Iterator[None]:
    """One run per folder: the vector shard and SQLite file are single-writer, and so are the outputs."""
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"{what} {folder} is a file, not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "LOCK", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"{what} {folder} is in use by another dedup run") from None
        yield


def link_identity(record: dict[str, Any]) -> object:
    """What a link says, without when it was written or measurements that a re-decision may round apart. Not the
    URL's hash: a document seen again (by id and content) gets its first verdict whatever URL it comes with now, or
    however `sources` normalises it now, and that verdict's line is there already."""
    fields = ("doc_id", "verdict", "canonical_id", "stage", "content_hash")
    return [record.get(name) for name in fields]


def link_occurrence(record: dict[str, Any]) -> object:
    """A link line as one occurrence of what it says: a document registered again after its verdict expired
    (`_Run._registered_again`) says the same at a later date, and is written again, once."""
    return [*link_identity(record), record.get("published_at"), record.get("clock")]


def candidate_identity(record: dict[str, Any]) -> object:
    """A candidate record re-made on resume is the same record though its neighbours' scores may round apart."""
    fields = ("doc_id", "model", "verdict", "canonical_id")
    return [record.get(name) for name in fields]


def deduped_identity(record: dict[str, Any]) -> object:
    return [record.get("id"), article_features(record).get("content_hash")]


def article_features(record: dict[str, Any]) -> dict[str, Any]:
    """A published article's `features` object; empty where a file handed in says something else there."""
    features = record.get("features")
    return features if isinstance(features, dict) else {}


def refuse_own_outputs(sources: list[str], paths: RunPaths) -> None:
    """ValueError when an input is one of the files the run writes, by any name (a symlink, stdin redirected
    from it): the run would read the lines it appends. Its own rejected.jsonl never ended (each rejection,
    rejected again, is a new line), growing by gigabytes a minute."""
    written: dict[tuple[int, int], Path] = {}
    for path in paths.written:
        try:
            found = path.stat()
        except OSError:
            continue  # not written yet: no input can be it
        written[found.st_dev, found.st_ino] = path
    for source in sources:
        try:
            found = os.fstat(sys.stdin.fileno()) if source == "-" else os.stat(source)
        except (OSError, ValueError):  # a stdin with no file behind it (a test runner's): none of these
            continue
        output = written.get((found.st_dev, found.st_ino))
        if output is not None:
            named = "standard input" if source == "-" else f"input {source}"
            raise ValueError(
                f"{named} is this run's output {output}: it would read the lines it writes;"
                " copy it out of the --out folder first, or give another --out"
            )


def _claim_outputs(paths: RunPaths, force: bool) -> bool:
    """Whether to start the outputs over: only those of another state folder, and only with `force`.

    Outputs continue only with the state they came from. Outputs of this very state are
    always continued, `force` or not: started over, they would lose the canonicals that
    the state remembers as published.
    """
    state = str(paths.state.resolve())
    written = any(
        p.exists() and p.stat().st_size for p in (paths.links, paths.deduped, paths.rejected, paths.candidates)
    )
    owner = _owner(paths)
    theirs = written and owner != state
    if theirs and not force:
        if owner is None:
            raise ValueError(
                f"output folder {paths.out} holds outputs without a run.json naming their state folder"
                " (an older dedup wrote them): use another --out, or --force to start them over"
            )
        raise ValueError(
            f"output folder {paths.out} holds the outputs of state folder {owner}: give --state {owner}"
            " to continue them, another --out, or --force to start them over"
        )
    return theirs


def _owner(paths: RunPaths) -> str | None:
    """The state folder run.json names (None: no run.json); ValueError naming it when it names none."""
    if not paths.owner.is_file():
        return None
    try:
        record = orjson.loads(paths.owner.read_bytes())
    except orjson.JSONDecodeError:
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("state"), str):
        raise ValueError(
            f'{paths.owner} names no state folder: write {{"state": "/path/to/the/state"}} into it (the'
            " folder whose outputs these are), or use --force to start the outputs over"
        )
    return record["state"]


def note_owner(paths: RunPaths, command: Command) -> None:
    """Write run.json (which state folder the outputs belong to, and the command writing them now) once every
    store has opened, so that a command that fails before (a state of another band layout) leaves the outputs to
    the state they had; written whole or not at all (a kill or a full disk never leaves it empty)."""
    temporary = paths.owner.with_name(f".{paths.owner.name}.tmp")
    with open(temporary, "wb") as handle:
        handle.write(orjson.dumps({"state": str(paths.state.resolve()), "command": command}))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, paths.owner)


Command = dict[str, Any]
"""What run.json says wrote the outputs last: `{"run": [input files]}` or `{"relink": its decisions or cut-off}`
(`streams.core.relink.relink_command`)."""


def run_command(sources: list[str]) -> Command:
    return {"run": [source if source == "-" else str(Path(source).resolve()) for source in sources]}


def refuse_a_stopped_command(paths: RunPaths, state: SqliteStateStore, command: Command) -> None:
    """ValueError where a command killed past the state's last commit (or failed before it) left records in an
    output folder of this state that the state never took in, unless `command` is that one again into that folder.

    Decided without those records, another command would contradict outputs that say they were made: a story
    published just before the kill published again under another id, a state that `dedup replay` of the links
    does not rebuild. The stopped command run again takes them in and completes its outputs.
    """
    for path, mark in state.output_marks().items():
        try:
            past = path.stat().st_size - mark
        except OSError:  # moved away: nothing there to contradict
            continue
        owner, stopped = _last_command(path.parent)
        if past <= 0 or owner != str(paths.state.resolve()) or stopped is None:
            # all taken in; outputs another state took over; or written last by a release before commands were
            # named (its relinks did not move the marks: what lies past them may be theirs, taken in)
            continue
        if stopped == command and path.parent.resolve() == paths.out.resolve():
            continue
        raise ValueError(
            f"{_described(stopped, path.parent)} was stopped before it completed (a kill, a crash), or the state"
            f" folder is older than its outputs (a backup put back): {path} holds"
            f" {past:,} bytes of records past the state's last commit, which the state has not taken in. Run that"
            " command again first, then this one; if it cannot be (its input is gone), rebuild the state folder"
            " from its links files with `dedup replay` (into a new folder, then put in place of this one), which"
            " takes those records in"
        )


def mark_outputs(state: SqliteStateStore, outputs: Sequence[Path], fresh: bool = False) -> list[int]:
    """The marks the state noted for `outputs` (0: none); where none was noted, or the outputs start over, their
    size now is noted and committed before anything is written to them, so that what a kill leaves past it
    shows (`refuse_a_stopped_command`)."""
    noted = state.output_marks()
    marks = [noted.get(path.resolve(), 0) for path in outputs]
    unmarked = [path for path in outputs if fresh or path.resolve() not in noted]
    for path in unmarked:
        state.note_output(path, 0 if fresh or not path.exists() else path.stat().st_size)
    if unmarked:
        state.commit()
    return marks


def _take_in_published(
    paths: RunPaths,
    state: SqliteStateStore,
    journal: Journal,
    vectors: EdgeVectorStore | None,
    retention: RetentionSettings,
    owed: dict[str, str],
    deduped: JsonlOutput,
    on_bytes: Callable[[int, int, int], None] | None,
) -> set[str]:
    """Restore, and commit, the link records a stopped run published past the state's last commit (the ids of
    their documents): the documents are then repeated, with the verdicts their lines say, whatever this release
    or these settings would decide now (`streams.runner.restoring.take_in_outputs`). The canonicals among them
    whose article `deduped` lacks are added to `owed`, and those it has are taken out of it."""

    def has_article(doc_id: str, content: str) -> bool:
        return deduped.holds(deduped_identity({"id": doc_id, "features": {"content_hash": content}}))

    def commit() -> None:
        if vectors is not None:
            state.note_vector_shards(vectors.shard_names())
        state.note_owed_articles(owed)
        commit_state_then_journal(state, journal)

    for doc_id, content in list(owed.items()):
        if has_article(doc_id, content):  # written, and a kill came before the state's commit
            del owed[doc_id]
    restorer = LinkRestorer(state, journal, vectors, retention)
    marks = state.output_marks()
    return take_in_outputs(paths.links, paths.candidates, marks, restorer, commit, owed, has_article, on_bytes)


SHOWN_OWED = 10
"""Ids of owed articles a message names."""


def owed_articles(owed: Sequence[str]) -> str:
    """What a run says while the state owes articles (`_Run._owed`), and what to do. They are the state's, not an
    output folder's: a run into another folder with this state (an incremental run) writes them there."""
    shown = orjson.dumps(list(owed[:SHOWN_OWED])).decode() + (" and more" if len(owed) > SHOWN_OWED else "")
    return (
        f"deduped.jsonl lacks the articles of {len(owed):,} canonical{'s' if len(owed) != 1 else ''} that this"
        f" state's links.jsonl publishes, {shown}: a run was stopped after their links were written and before"
        " their articles were. Run dedup run with this state on an input that holds them (the stopped run's): it"
        " writes them to its deduped.jsonl. Until one does, every run with this state says so"
    )


def note_outputs(
    state: SqliteStateStore, outputs: Sequence[JsonlOutput], completed: bool, owed: dict[str, str]
) -> None:
    """Note with the state's next commit how much of each output it has taken in (`JsonlOutput.committed`), and
    the articles deduped.jsonl still owes."""
    for output in outputs:
        state.note_output(output.path, output.committed(completed))
    state.note_owed_articles(owed)


def _last_command(out: Path) -> tuple[str | None, Command | None]:
    """The state folder and the last command that run.json of `out` names (None where it names none)."""
    try:
        record = orjson.loads((out / "run.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None, None
    if not isinstance(record, dict):
        return None, None
    owner, command = record.get("state"), record.get("command")
    return owner if isinstance(owner, str) else None, command if isinstance(command, dict) else None


def _described(command: Command, out: Path) -> str:
    if isinstance(command.get("run"), list):
        return f"`dedup run {' '.join(map(str, command['run']))} --out {out}`"
    if "relink" in command:
        said = orjson.dumps(command["relink"]).decode()
        return f"the `dedup relink` into {out} of {said if len(said) <= 500 else said[:500] + '...'}"
    return f"the last command into {out}"


def run(
    settings: Settings,
    sources: list[str],
    paths: RunPaths,
    *,
    embedder: Embedder | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    force: bool = False,
    on_taking_in: Callable[[int, int, int], None] | None = None,
) -> RunStats:
    """Decide every document of `sources`; add links, deduped, rejected and candidate records under `paths.out`.

    `on_progress` hears, after each line is decided or rejected, how many lines and how many
    input bytes are done. `force` starts over outputs that belong to another state folder.
    `on_taking_in` hears how many lines and bytes of links.jsonl, of how many, the run has taken in before
    it decides (the lines a stopped run left past the state's last commit; all of them where the
    state folder was lost).
    """
    interrupts = Interrupts()
    with ExitStack() as held, interrupts.installed():
        held.enter_context(locked(paths.out, "output folder"))
        if paths.state.resolve() != paths.out.resolve():
            held.enter_context(locked(paths.state))
        refuse_own_outputs(sources, paths)
        fresh = _claim_outputs(paths, force)
        state = SqliteStateStore(
            paths.state / "state.sqlite3", retention=settings.retention, band_layout=settings.simhash.band_layout
        )
        journal = Journal(paths.state)
        command = run_command(sources)
        try:
            settle(journal, state)
            refuse_a_stopped_command(paths, state, command)
        except ValueError:
            journal.close()
            state.abandon()
            raise
        vectors = None
        if Stage.SEMANTIC in settings.stages:
            from streams.embedders import make_embedder
            from streams.vectors.edge import EdgeVectorStore

            embedder = embedder or make_embedder(settings.semantic)
            vectors = EdgeVectorStore(paths.state / "vectors")
            if (problem := vectors.missing(state.vector_shards())) is not None:
                raise ValueError(problem)
        cascade = Cascade(settings, state, vectors, embedder.model_id if embedder else None)
        note_owner(paths, command)
        noted = state.output_marks()
        marks = [0 if fresh else noted.get(p.resolve(), 0) for p in (paths.links, paths.deduped, paths.candidates)]
        # In the order they are handed to the files (each commit, past HELD_BYTES, closing): a document's candidate
        # line, its link line, its article. Opened before the links past the mark are taken in: a file with a line
        # that is no JSON object is refused before any of its lines is (`take_in_outputs`).
        outputs = (
            JsonlOutput(paths.rejected, lambda record: record, fresh=fresh),
            JsonlOutput(paths.candidates, candidate_identity, fresh=fresh, committed=marks[2], held=True),
            JsonlOutput(
                paths.links, link_identity, fresh=fresh, occurrence=link_occurrence, committed=marks[0], held=True
            ),
            JsonlOutput(paths.deduped, deduped_identity, fresh=fresh, committed=marks[1], held=True),
        )
        owed = {} if fresh else state.owed_articles()
        restored = (
            set()
            if fresh
            else _take_in_published(paths, state, journal, vectors, settings.retention, owed, outputs[3], on_taking_in)
        )
        mark_outputs(state, (paths.links, paths.deduped, paths.candidates), fresh)
        held.enter_context(rare_collections())  # what is loaded now (state, model) is frozen out of them
        consistent = completed = False
        try:
            work = _Run(settings, cascade, (state, journal, vectors), embedder, outputs, interrupts, on_progress, owed)
            stats = work.run(read_lines(sources, settings.max_record_bytes))
            consistent = completed = True
        except KeyboardInterrupt:
            consistent = True  # held to document boundaries: every recorded verdict is written
            raise
        except InputFailed as failed:
            consistent = True  # what was read before it is decided and committed
            raise failed.__cause__ from None
        finally:
            with interrupts:
                note_outputs(state, (outputs[2], outputs[3], outputs[1]), completed, owed)
                for output in outputs:
                    output.close()
                if consistent:
                    commit_state_then_journal(state, journal)
                    journal.close()
                    state.close()
                # Otherwise the state is left uncommitted: it stays at its last commit, which
                # the outputs hold, and the next run decides the rest again.
                if vectors is not None:
                    vectors.close()
    stats.notes += [f"cut a torn last line ({o.torn:,} bytes) of {o.path}" for o in outputs if o.torn]
    if restored:
        stats.notes.append(
            f"took in the verdicts of {len(restored):,} documents in {paths.links} that the state folder lacked"
            " (written past its last commit by a stopped run, or the state folder is new): they keep those verdicts"
        )
    stats.owed = sorted(owed)
    paths.summary.write_bytes(orjson.dumps(stats.as_dict(), option=orjson.OPT_INDENT_2))
    return stats


def sweep(retention: RetentionSettings, state: SqliteStateStore, vectors: EdgeVectorStore | None) -> int:
    """Remove up to `SWEEP_LIMIT` expired state entries, and the expired vectors of every model the state
    folder holds (the one in use and any used before it); how many."""
    removed = state.expire(SWEEP_LIMIT)
    clock = state.clock()
    if vectors is not None and retention.vectors_s and clock:
        removed += vectors.expire_every_model(clock - retention.vectors_s)
    return removed


class InputFailed(Exception):
    """The input could not be read on (its `__cause__` says why), between two documents."""


def _reading(lines: Iterator[InputLine]) -> Iterator[InputLine]:
    """`lines`, an error of the reader's (not of the deciding between two lines) raised as InputFailed."""
    try:
        yield from lines
    except (OSError, ValueError) as exc:
        raise InputFailed from exc


class _Run:
    def __init__(
        self,
        settings: Settings,
        cascade: Cascade,
        state: tuple[SqliteStateStore, Journal, EdgeVectorStore | None],
        embedder: Embedder | None,
        outputs: tuple[JsonlOutput, JsonlOutput, JsonlOutput, JsonlOutput],
        interrupts: Interrupts,
        on_progress: Callable[[int, int], None] | None,
        owed: dict[str, str],
    ) -> None:
        self._settings = settings
        self._cascade = cascade
        self._state, self._journal, self._vector_store = state
        self._embedder = embedder
        self._outputs = outputs
        self._rejected, self._candidates, self._links, self._deduped = outputs
        self._owed = owed
        """Canonicals whose article deduped.jsonl lacks (`_take_in_published`: a kill between a link line and its
        article's): written when the run reads them."""
        self._interrupts = interrupts
        self._on_progress = on_progress
        self._done_lines = self._done_bytes = 0
        self._featurizer = Featurizer(settings)
        self._vectors: dict[tuple[str, str], np.ndarray] = {}
        self.stats = RunStats(stages=tuple(settings.stages))

    def run(self, lines: Iterator[InputLine]) -> RunStats:
        """Decide every line; InputFailed (its cause the reader's error) once the lines read before the input
        failed (a damaged gzip, a read error) are decided and committed: their verdicts are in the outputs
        already, and the same command run again fails at the same place, so the state must hold them now."""
        started = last_commit = time.perf_counter()
        chunk: list[InputLine] = []
        try:
            for line in _reading(lines):
                chunk.append(line)
                if len(chunk) == CHUNK:
                    self._chunk(chunk)
                    chunk = []
                    if time.perf_counter() - last_commit >= COMMIT_SECONDS:
                        self._commit()
                        last_commit = time.perf_counter()
        except InputFailed:
            if chunk:
                self._chunk(chunk)
            self._commit()
            raise
        if chunk:
            self._chunk(chunk)
        self._commit(completed=True)
        self.stats.elapsed = time.perf_counter() - started
        for stage, seconds in self._cascade.seconds.items():
            self.stats.seconds[stage.value] = seconds
        return self.stats

    def _chunk(self, lines: list[InputLine]) -> None:
        ingest_time = int(time.time())
        limit = self._settings.max_record_bytes
        docs: list[Document] = []
        their_lines: list[InputLine] = []
        started = time.perf_counter()
        # The whole chunk is featurised in one call (its text work batched); a line over the
        # limit was never read whole, so it is refused without being parsed.
        readable = [line.raw for line in lines if line.size <= limit]
        # Ctrl-C waits for the chunk's features (milliseconds): a KeyboardInterrupt raised inside a
        # compiled (Numba) kernel comes out as a SystemError, not as an interruption.
        with self._interrupts:
            parsed = iter(self._featurizer.parse_batch(readable, ingest_time=ingest_time))
        for line in lines:
            self.stats.read += 1
            result = (
                Rejection(f"record is {line.size:,} bytes, above the limit of {limit:,}", line.raw)
                if line.size > limit
                else next(parsed)
            )
            if isinstance(result, Rejection):
                self._reject(line, result)
            else:
                docs.append(result)
                their_lines.append(line)
        self.stats.seconds["features"] += time.perf_counter() - started
        self._state.warm(self._cascade.reads(docs))  # the chunk's reads in a few statements
        wall = time.time()
        for index, (doc, line) in enumerate(zip(docs, their_lines, strict=True)):
            # The stream's time as a one-by-one stream has it when this document comes: moved to a later
            # document of the chunk before, it hid canonicals (vectors, bands) this one should still find.
            # A redelivery (its verdict stands) moves it not: it gets its first verdict and writes no link, so
            # a replay of the links could not move it either (nor does the service, whose clock follows what
            # it writes), and a later date on it would expire entries there that a replayed state keeps.
            if self._cascade.standing(doc) is None:
                self._state.advance(clamped(doc.published_at, wall))
            known = self._journalled(doc)
            if isinstance(known, Decision):
                with self._interrupts:
                    self._emit(known, doc, None)
            else:
                vector = self._vector_for(docs, index) if self._cascade.semantic else None
                with self._interrupts:
                    self._emit(self._cascade.decide(known, vector), doc, vector)
            self._done(line)

    def _journalled(self, doc: Document) -> Decision | Document:
        """For a document older than `verdicts_days` in stream time, whose verdict has expired from the
        state, what the journal (every link, as the links topic keeps them) knows: the verdict this state
        folder gave it, or that its id was decided with other content (it is a new version, decided under
        its own id). Otherwise the document as it is. A resumed run, or a second day over last month's
        archive, so never decides a document again (where its canonical has expired since, it would come
        out unique). A record the journal holds past the state's last commit (a kill between the two) is
        not the state's: the document is decided again, its verdict the same. A document dated past its
        ingest was stamped with the day its deciding run clamped it to: its record says whether that expired."""
        future = _clamped(doc)
        if not self._state.verdict_expired(doc.published_at) and not future:
            return doc
        version = replace(doc, doc_id=version_id(doc.doc_id, doc.content_hash), version_of=doc.doc_id)
        through = self._state.journal_mark  # what a kill left in the journal beyond the state is decided again
        first = self._journal.link(doc.doc_id, through)
        if future and (first is None or not self._state.verdict_expired(parse_timestamp(first["published_at"]))):
            return doc  # the state holds its verdict, stamped with the day the run that decided it clamped it to
        # Its own record, or one of a story its id was used for before the one the id has now.
        same = self._journal.decided(doc.doc_id, doc.content_hash, through)
        for known, record in ((doc, same), (version, self._journal.link(version.doc_id, through))):
            if record is not None and record.get("content_hash") == doc.content_hash:
                return Decision(read_link_record(record).link, repeated=True, version=None if known is doc else known)
        return doc if first is None else version

    def _emit(self, decision: Decision, doc: Document, vector: np.ndarray | None) -> None:
        """Count the decision and write its outputs (the link always; the journal and the article once)."""
        doc = decision.version or doc  # a new version of an id seen before goes out under its own id
        link = decision.link
        self.stats.count(link, decision.repeated)
        record = link_record(link, doc, vector, stages=self._settings.stages)
        if not self._links.write(record, None if decision.repeated else lambda: self._registered_again(record)):
            self.stats.already_written += 1
        if not decision.repeated:
            self._journal.put_link(record)
            if decision.candidates is not None and vector is not None:
                semantic = self._settings.semantic
                model = str(self._cascade.model)
                candidate = candidate_record(
                    link, doc, vector, decision.candidates, model, semantic.candidate_text_chars
                )
                self._candidates.write(candidate)
                self._journal.put_candidate(candidate)
        if decision.group_size is not None:
            self.stats.see_group(link.canonical_id, decision.group_size)
        owed = decision.repeated and self._owed.get(link.doc_id) == doc.content_hash
        if owed:  # its verdict is read: written if it still publishes (a relink may have linked it since)
            del self._owed[link.doc_id]
        if link.publishes and (not decision.repeated or owed):
            self._deduped.write(deduped_record(link, doc))
        if sum(output.held for output in self._outputs) > HELD_BYTES:
            for output in self._outputs:
                output.flush()

    def _registered_again(self, record: dict[str, Any]) -> bool:
        """Whether a document decided afresh, whose line says what an earlier line says, was decided with this
        content before, by this process or by a run the state took in: then its verdict has expired since, and
        this is its registration again, which the links must hold to age it from its new date. Otherwise a
        kill left its line before the state's commit, and this is the same decision made again."""
        content = record.get("content_hash")
        return (
            content is not None
            and self._journal.decided(record["doc_id"], content, self._state.journal_mark) is not None
        )

    def _done(self, line: InputLine) -> None:
        self._done_lines += 1
        self._done_bytes += line.consumed
        if self._on_progress is not None:
            self._on_progress(self._done_lines, self._done_bytes)

    def _commit(self, completed: bool = False) -> None:
        """Outputs reach the disk before the state that remembers them (see the module docstring); then
        what has expired is swept (made durable by the next commit, or by closing the state). `completed`:
        every line of the input is decided."""
        with self._interrupts:
            for output in self._outputs:
                output.sync()
            note_outputs(self._state, (self._links, self._deduped, self._candidates), completed, self._owed)
            if self._vector_store is not None:
                self._state.note_vector_shards(self._vector_store.shard_names())
            commit_state_then_journal(self._state, self._journal)
            started = time.perf_counter()
            self.stats.expired += sweep(self._settings.retention, self._state, self._vector_store)
            self.stats.seconds["expire"] += time.perf_counter() - started

    def _vector_for(self, docs: list[Document], index: int) -> np.ndarray | None:
        """This document's vector if the cascade will need it, embedding a batch ahead.

        The batch takes the next documents that need a vector as the state stands,
        except copies of a document already in the batch: once that one is decided
        they will most likely be linked to it by stages 1 to 3. A guess that turns out
        wrong only costs a smaller batch later, never a different verdict.
        """
        doc = docs[index]
        if doc.identity in self._vectors:
            return self._vectors.pop(doc.identity)
        if not self._cascade.needs_vector(doc):
            return None
        assert self._embedder is not None
        batch = [doc]
        for later in docs[index + 1 :]:
            if len(batch) >= self._settings.semantic.batch_size:
                break
            if (
                later.identity not in self._vectors
                and not any(self._cascade.would_link(later, earlier) for earlier in batch)
                and self._cascade.needs_vector(later)
                and not isinstance(self._journalled(later), Decision)
            ):
                batch.append(later)
        started = time.perf_counter()
        vectors = self._embedder.embed([d.text for d in batch])
        self.stats.seconds["embed"] += time.perf_counter() - started
        for later, vector in zip(batch[1:], vectors[1:], strict=True):
            self._vectors[later.identity] = vector
        return vectors[0]

    def _reject(self, line: InputLine, rejection: Rejection) -> None:
        self.stats.rejected += 1
        record: dict[str, Any] = {"source": line.source, "line": line.line_no, "reason": rejection.reason}
        try:
            record["raw"] = rejection.raw.decode("utf-8")
        except UnicodeDecodeError:  # base64, as the service gives it: escaped, \xff would read as a written \\xff
            record["raw_base64"] = base64.b64encode(rejection.raw).decode("ascii")
        self._rejected.write(record)
        self._done(line)


def _clamped(doc: Document) -> bool:
    """Whether the document is dated more than a day after its ingest (`published_at` was clamped): each run
    clamps it to its own day, and the verdict an earlier run gave it was stamped with that run's."""
    if doc.published_at < time.time():
        return False
    given = doc.article.get("published_at")
    return bool(given) and parse_timestamp(given) > doc.published_at

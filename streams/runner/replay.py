"""`dedup replay` for files: rebuild an embedded state folder from links.jsonl files.

The files are read a line at a time and each link restored as it comes (a file is in decision
order already), so memory holds what waits for the next commit: at most `COMMIT_LINKS` links, and
`COMMIT_SECONDS` of them on a slow host.

The state's clock follows the records' `published_at` (clamped as `dedup run` clamps it) and each
commit is followed by a sweep, so a replayed state ages as the live one did.

The candidates.jsonl beside a links.jsonl (its run's semantic candidate records) goes into the journal
after that file's links, the latest record of a document last: relink reads a document's article and
vector there to unlink it, as it does in the state folder the run wrote.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from streams.config import RetentionSettings, Settings
from streams.core.replay import ReplayStats
from streams.features.bands import BandLayout
from streams.records.output import read_link_record
from streams.runner.embedded import COMMIT_SECONDS, locked, sweep
from streams.runner.interrupts import Interrupts
from streams.runner.jsonl import read_lines
from streams.runner.restoring import LINK_ERRORS, LinkRestorer, why_not_a_link
from streams.stores.journal import Journal, commit_state_then_journal, settle
from streams.stores.sqlite import SqliteStateStore
from streams.vectors.edge import EdgeVectorStore

COMMIT_LINKS = 10_000
"""Links restored between two commits at most: what the journal and the state hold until one."""


def replay_files(
    sources: list[str],
    state_dir: Path,
    on_bytes: Callable[[int], None] | None = None,
    retention: RetentionSettings | None = None,
    band_layout: BandLayout | None = None,
) -> ReplayStats:
    """Restore every link of `sources`, in order, into the state folder (created if absent).

    A source whose first line is no link is refused (ValueError): it is some other file,
    given by mistake. Later unreadable lines are skipped and reported, never fatal.
    `retention` and `band_layout` default to the configured ones (`[retention]`, `simhash.bands`).
    """
    stats = ReplayStats()
    if retention is None or band_layout is None:
        configured = Settings()
        retention = retention or configured.retention
        band_layout = band_layout or configured.simhash.band_layout
    interrupts = Interrupts()
    with locked(state_dir), interrupts.installed():
        state = SqliteStateStore(state_dir / "state.sqlite3", retention=retention, band_layout=band_layout)
        journal = Journal(state_dir)
        settle(journal, state)
        vectors = EdgeVectorStore(state_dir / "vectors")
        last_commit, uncommitted = time.perf_counter(), 0

        restorer = LinkRestorer(state, journal, vectors, retention)

        def commit() -> None:
            state.note_vector_shards(vectors.shard_names())
            commit_state_then_journal(state, journal)
            sweep(retention, state, vectors)

        consistent = False
        try:
            if (problem := vectors.missing(state.vector_shards())) is not None:
                raise ValueError(problem)  # its canonicals would be skipped as there, their vectors still lost
            for source in sources:
                first = True
                for line in read_lines([source]):
                    if on_bytes is not None:
                        on_bytes(line.consumed)
                    stats.read += 1
                    try:
                        record = orjson.loads(line.raw)
                        recorded = read_link_record(record)
                    except LINK_ERRORS as exc:
                        why = why_not_a_link(exc)
                        if first:
                            raise ValueError(
                                f"{source} is not a links file ({why} on line {line.line_no}):"
                                " replay reads the links.jsonl that dedup run writes"
                            ) from None
                        stats.bad.append(f"{source}:{line.line_no}: {why}")
                        continue
                    first = False
                    if (why := restorer.chained(recorded)) is not None:
                        stats.bad.append(f"{source}:{line.line_no}: {why}")
                        continue
                    with interrupts:  # a link is restored whole, journal record and all, or not at all
                        if restorer.take(record, recorded):
                            stats.restored += 1
                        else:
                            stats.already_there += 1
                    uncommitted += 1
                    if uncommitted >= COMMIT_LINKS or time.perf_counter() - last_commit >= COMMIT_SECONDS:
                        with interrupts:
                            commit()
                        last_commit, uncommitted = time.perf_counter(), 0
                beside = Path(source).with_name("candidates.jsonl")
                if Path(source).name == "links.jsonl" and beside.is_file():
                    for line in read_lines([str(beside)]):
                        problem = _candidate_problem(line.raw)
                        if problem is not None:
                            stats.bad.append(f"{beside}:{line.line_no}: {problem}")
                            continue
                        with interrupts:
                            journal.put_candidate(orjson.loads(line.raw))
                        stats.candidates += 1
            with interrupts:
                commit()
            consistent = True
        except KeyboardInterrupt:
            consistent = True  # held to link boundaries: what the state holds is whole
            raise
        finally:
            with interrupts:
                if consistent:
                    commit_state_then_journal(state, journal)
                    journal.close()
                    state.close()
                # Otherwise both stay at their last commit (a link restored in part is never kept) and
                # the next replay restores the rest again.
                vectors.close()
    return stats


def _candidate_problem(raw: bytes) -> str | None:
    """Why a candidates.jsonl line cannot be a candidate record, or None: relink reads its `doc_id`, its
    `article` (published when the document is unlinked), its `vector`, `model` and `text`."""
    try:
        record: Any = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return f"not JSON ({exc})"
    if not isinstance(record, dict):
        return "not a JSON object"
    if not isinstance(record.get("doc_id"), str) or not isinstance(record.get("model"), str):
        return "doc_id and model must be strings"
    if not isinstance(record.get("article"), dict) or not isinstance(record.get("text"), str):
        return "article must be an object and text a string"
    vector = record.get("vector")
    if not (isinstance(vector, list) and vector and all(_finite(x) for x in vector)):
        return "vector must be a non-empty list of finite numbers"
    return None


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < float("inf")

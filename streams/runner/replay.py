"""`dedup replay` for files: rebuild an embedded state folder from links.jsonl files."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import orjson

from streams.core.replay import ReplayStats, restore
from streams.records.output import read_link_record
from streams.runner.embedded import COMMIT_SECONDS, locked
from streams.runner.jsonl import read_lines
from streams.stores.sqlite import SqliteStateStore
from streams.vectors.edge import EdgeVectorStore


def replay_files(sources: list[str], state_dir: Path, on_bytes: Callable[[int], None] | None = None) -> ReplayStats:
    """Restore every link of `sources`, in order, into the state folder (created if absent)."""
    stats = ReplayStats()
    with locked(state_dir):
        state = SqliteStateStore(state_dir / "state.sqlite3")
        vectors = EdgeVectorStore(state_dir / "vectors")
        last_commit = time.perf_counter()
        try:
            for line in read_lines(sources, on_bytes):
                stats.read += 1
                try:
                    recorded = read_link_record(orjson.loads(line.raw))
                except (orjson.JSONDecodeError, KeyError, ValueError, TypeError, AttributeError) as exc:
                    stats.bad.append(f"{line.source}:{line.line_no}: {type(exc).__name__}: {exc}")
                    continue
                if restore(recorded, state, vectors):
                    stats.restored += 1
                else:
                    stats.already_there += 1
                if time.perf_counter() - last_commit >= COMMIT_SECONDS:
                    state.commit()
                    last_commit = time.perf_counter()
        finally:
            state.close()
            vectors.close()
    return stats

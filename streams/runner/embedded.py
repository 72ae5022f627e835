"""`dedup run`: the cascade over JSONL files, state in a local folder, no server.

Documents are decided strictly in input order, one at a time, so the verdicts
are those of a one-by-one stream. Only the embedder is batched: when a
document needs its vector, the runner embeds it together with the next
documents that (as far as the state tells now) will need theirs too.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from streams.config import Settings
from streams.core.cascade import Cascade
from streams.core.model import Document, Stage
from streams.core.ports import Embedder
from streams.records.article import Featurizer, Rejection
from streams.records.output import deduped_record, link_record
from streams.runner.jsonl import InputLine, JsonlWriter, read_lines
from streams.runner.summary import RunStats
from streams.stores.sqlite import SqliteStateStore

CHUNK = 256
"""Documents parsed ahead of their decisions (the embedder's look-ahead window)."""
COMMIT_SECONDS = 2.0
"""How often outputs are flushed and the state committed: each commit syncs the disk."""


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
    def summary(self) -> Path:
        return self.out / "summary.json"


@contextmanager
def locked(state_dir: Path) -> Iterator[None]:
    """One run per state folder: the vector shard and SQLite file are single-writer."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / "LOCK", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"state folder {state_dir} is in use by another dedup run") from None
        yield


def run(
    settings: Settings,
    sources: list[str],
    paths: RunPaths,
    *,
    embedder: Embedder | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> RunStats:
    """Decide every document of `sources`; write links, deduped and rejected records under `paths.out`."""
    paths.out.mkdir(parents=True, exist_ok=True)
    with locked(paths.state):
        state = SqliteStateStore(paths.state / "state.sqlite3")
        vectors = None
        if Stage.SEMANTIC in settings.stages:
            from streams.embedders import make_embedder
            from streams.vectors.edge import EdgeVectorStore

            embedder = embedder or make_embedder(settings.semantic)
            vectors = EdgeVectorStore(paths.state / "vectors")
        cascade = Cascade(settings, state, vectors, embedder.model_id if embedder else None)
        outputs = [JsonlWriter(p) for p in (paths.links, paths.deduped, paths.rejected)]
        try:
            stats = _Run(settings, cascade, state, embedder, *outputs).run(read_lines(sources, on_bytes))
        finally:
            for writer in outputs:
                writer.close()
            state.close()
            if vectors is not None:
                vectors.close()
    paths.summary.write_bytes(orjson.dumps(stats.as_dict(), option=orjson.OPT_INDENT_2))
    return stats


class _Run:
    def __init__(
        self,
        settings: Settings,
        cascade: Cascade,
        state: SqliteStateStore,
        embedder: Embedder | None,
        links: JsonlWriter,
        deduped: JsonlWriter,
        rejected: JsonlWriter,
    ) -> None:
        self._settings = settings
        self._cascade = cascade
        self._state = state
        self._embedder = embedder
        self._links, self._deduped, self._rejected = links, deduped, rejected
        self._featurizer = Featurizer(settings)
        self._vectors: dict[str, np.ndarray] = {}
        self.stats = RunStats()

    def run(self, lines: Iterator[InputLine]) -> RunStats:
        started = last_commit = time.perf_counter()
        chunk: list[InputLine] = []
        for line in lines:
            chunk.append(line)
            if len(chunk) == CHUNK:
                self._chunk(chunk)
                chunk = []
                if time.perf_counter() - last_commit >= COMMIT_SECONDS:
                    self._commit()
                    last_commit = time.perf_counter()
        if chunk:
            self._chunk(chunk)
        self._commit()
        self.stats.elapsed = time.perf_counter() - started
        for stage, seconds in self._cascade.seconds.items():
            self.stats.seconds[stage.value] = seconds
        return self.stats

    def _chunk(self, lines: list[InputLine]) -> None:
        ingest_time = int(time.time())
        docs: list[Document] = []
        started = time.perf_counter()
        for line in lines:
            self.stats.read += 1
            parsed = self._featurizer.parse(line.raw, ingest_time=ingest_time)
            if isinstance(parsed, Rejection):
                self._reject(line, parsed)
            else:
                docs.append(parsed)
        self.stats.seconds["features"] += time.perf_counter() - started
        for index, doc in enumerate(docs):
            vector = self._vector_for(docs, index) if self._cascade.semantic else None
            decision = self._cascade.decide(doc, vector)
            link = decision.link
            self.stats.count(link, decision.repeated)
            self._links.write(link_record(link, doc, vector))
            if decision.group_size is not None:
                self.stats.see_group(link.canonical_id, decision.group_size)
            if link.publishes and not decision.repeated:
                self._deduped.write(deduped_record(link, doc))

    def _commit(self) -> None:
        # Outputs reach the disk before the state that remembers them: a crash
        # repeats work at worst, and a repeated document gets its recorded verdict.
        for writer in (self._links, self._deduped, self._rejected):
            writer.flush()
        self._state.commit()

    def _vector_for(self, docs: list[Document], index: int) -> np.ndarray | None:
        """This document's vector if the cascade will need it, embedding a batch ahead.

        The batch takes the next documents that need a vector as the state stands,
        except copies of a document already in the batch: once that one is decided
        they will most likely be linked to it by stages 1 to 3. A guess that turns out
        wrong only costs a smaller batch later, never a different verdict.
        """
        doc = docs[index]
        if doc.doc_id in self._vectors:
            return self._vectors.pop(doc.doc_id)
        if not self._cascade.needs_vector(doc):
            return None
        assert self._embedder is not None
        batch = [doc]
        for later in docs[index + 1 :]:
            if len(batch) >= self._settings.semantic.batch_size:
                break
            if (
                later.doc_id not in self._vectors
                and not any(self._cascade.would_link(later, earlier) for earlier in batch)
                and self._cascade.needs_vector(later)
            ):
                batch.append(later)
        started = time.perf_counter()
        vectors = self._embedder.embed([d.text for d in batch])
        self.stats.seconds["embed"] += time.perf_counter() - started
        for later, vector in zip(batch[1:], vectors[1:], strict=True):
            self._vectors[later.doc_id] = vector
        return vectors[0]

    def _reject(self, line: InputLine, rejection: Rejection) -> None:
        self.stats.rejected += 1
        self._rejected.write(
            {
                "source": line.source,
                "line": line.line_no,
                "reason": rejection.reason,
                "raw": rejection.raw.decode("utf-8", errors="backslashreplace"),
            }
        )

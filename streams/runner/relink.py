"""`dedup relink --state DIR --out DIR2`: people's decisions and new cut-offs applied to a state folder.

The plan is made from the state folder's journal (the latest link record of every
document, the candidate records with vectors and articles) and its exact-key index
(streams.core.relink). Applying it, in this order:

1. every change is checked against the state (a document must still have the verdict
   it was planned on) before anything is written;
2. DIR2/run.json names the relink (its decisions or cut-off), and the new link records are
   appended to DIR2/links.jsonl and the documents it publishes to DIR2/deduped.jsonl, and
   both are synced;
3. the state (and the vectors) are changed and committed, the new records with them as
   owed to the journal (`SqliteStateStore.owe_journal`), and the files' new ends as the
   state's marks of them;
4. the journal takes the new records.

A relink stopped anywhere is completed by running it again: before 3 the state is as
it was and the same plan is made again; after 3 the changes are found made. Before 3,
another command on the state (a relink of other decisions, `dedup run`) is refused
(`refuse_a_stopped_command`: DIR2's files end past the state's marks); after 3, it first
gives the journal what the state owes it (`streams.stores.journal.settle`), so no plan is
made from a journal behind its state. A record already the last of its document in
DIR2/links.jsonl is not appended again, nor an article already published there with the
same verdict; so the last record of every document stays its verdict. The state folder
and DIR2 are locked as `dedup run` locks them.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from streams.config import Settings
from streams.core.model import Document
from streams.core.relink import (
    PUBLISHED_AS,
    Change,
    Cutoff,
    Label,
    Plan,
    apply,
    change_record,
    check,
    likeness,
    plan_cutoff,
    plan_decisions,
    relink_command,
)
from streams.records.article import Featurizer
from streams.records.output import now_rfc3339, published_record
from streams.runner.embedded import (
    RunPaths,
    _claim_outputs,
    _owner,
    article_features,
    link_identity,
    locked,
    mark_outputs,
    note_owner,
    refuse_a_stopped_command,
)
from streams.runner.jsonl import JsonlOutput, read_lines
from streams.stores.journal import JOURNAL_FILE, Journal, settle
from streams.stores.sqlite import SqliteStateStore


@dataclass
class RelinkResult:
    plan: Plan
    made: list[Change] = field(default_factory=list)
    """The changes made in the state now (a rerun finds some made already)."""
    written: int = 0
    """Link records appended."""
    published: int = 0
    """Articles appended to deduped.jsonl."""


def read_labels(path: Path) -> list[Label]:
    """The decisions of a labels.jsonl file; ValueError naming the first line that is no label."""
    labels = []
    for line in read_lines([str(path)]):
        try:
            record = orjson.loads(line.raw)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            labels.append(Label.from_record(record))
        except (orjson.JSONDecodeError, ValueError) as exc:
            raise ValueError(f"{path}:{line.line_no} is not a label ({exc})") from None
    return labels


def relink_files(
    state_dir: Path,
    out_dir: Path,
    *,
    decisions: Iterable[Label] | None = None,
    cutoff: Cutoff | None = None,
    dry_run: bool = False,
    articles: Sequence[Path] = (),
) -> RelinkResult:
    """Apply `decisions` (labels) or a `cutoff` to the state folder; the new records go to `out_dir`.

    `articles`: deduped.jsonl files where documents were published, for a document to publish
    that the semantic stage never embedded (out_dir/deduped.jsonl is read too, and the one of the
    run whose state folder is `OUT/state`).
    """
    if (decisions is None) == (cutoff is None):
        raise ValueError("give decisions (labels) or a cut-off, one of them")
    labels = list(decisions) if decisions is not None else None
    if not (state_dir / JOURNAL_FILE).is_file():
        raise ValueError(
            f"{state_dir} has no journal of links: a state folder written by `dedup run`, or rebuilt with"
            " `dedup replay --state`, has one"
        )
    paths = RunPaths(out=out_dir, state=state_dir)
    with ExitStack() as held:
        if not dry_run:
            held.enter_context(locked(out_dir, "output folder"))
            if state_dir.resolve() != out_dir.resolve():
                held.enter_context(locked(state_dir))
        configured = Settings()
        state = SqliteStateStore(
            state_dir / "state.sqlite3", retention=configured.retention, band_layout=configured.simhash.band_layout
        )
        journal = Journal(state_dir)
        try:
            settle(journal, state)
            sources = [out_dir / "deduped.jsonl", *_own_outputs(state_dir), *articles]
            published = PublishedArticles(sources, journal.link, Featurizer(configured))
            if labels is not None:
                plan = plan_decisions(
                    journal.links(), labels, state.exact_lookup, journal.candidate, published, state.verdict_of
                )
            else:
                assert cutoff is not None
                plan = plan_cutoff(
                    journal.links(), cutoff, state.exact_lookup, journal.candidate, published, state.verdict_of
                )
            result = RelinkResult(plan)
            if dry_run or not plan.changes:
                return result
            _claim_outputs(paths, force=False)
            todo = check(plan.changes, state)
            records = [change_record(change, now_rfc3339()) for change in plan.changes]
            command = {"relink": relink_command(labels, cutoff)}
            refuse_a_stopped_command(paths, state, command)
            note_owner(paths, command)
            mark_outputs(state, (paths.links, paths.deduped))
            links = _LastRecords(paths.links)
            deduped = JsonlOutput(paths.deduped, _deduped_identity)
            try:
                for change, record in zip(plan.changes, records, strict=True):
                    result.written += links.write(record)
                    if change.article is not None:
                        result.published += deduped.write(change.article)
            finally:
                links.close()
                deduped.close()
            for path in (paths.links, paths.deduped):  # what the relink wrote is taken in with its changes
                state.note_output(path, path.stat().st_size)
            if todo:
                from streams.vectors.edge import EdgeVectorStore

                with EdgeVectorStore(state_dir / "vectors") as vectors:
                    result.made = apply(todo, state, vectors, checked=True, retention=configured.retention)
                state.owe_journal(records)
            state.commit()
            for record in records:
                journal.put_link(record)
            journal.commit()
            state.note_journal(journal.position)  # committed as the state closes, with what it owed forgotten
            state.settle_journal()
            return result
        except BaseException:
            # Stopped inside its writes (Ctrl-C, a vector store that failed): committing the half made would
            # have a second run make it again (a group shrunk twice). The state stays at its last commit.
            state.abandon()
            raise
        finally:
            journal.close()
            state.close()


def _own_outputs(state_dir: Path) -> list[Path]:
    """The deduped.jsonl of the run whose state this is, when it is the default `OUT/state` (its run.json
    names it): where the documents it published are."""
    owner = RunPaths(out=state_dir.parent, state=state_dir)
    try:
        named = _owner(owner)
    except ValueError:  # a run.json that names no state: no run's outputs to look in
        return []
    return [owner.deduped] if named == str(state_dir.resolve()) else []


def _deduped_identity(record: dict[str, Any]) -> object:
    """An article published again with another verdict (unlinked after review) is written again."""
    features = article_features(record)
    return [record.get("id"), features.get("content_hash"), features.get("verdict")]


class _LastRecords:
    """links.jsonl, appended to unless a document's last record there says the same already."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._last: dict[str, bytes] = {}
        if path.exists():
            # JsonlOutput cuts a torn last line and refuses a file that is not JSON lines.
            JsonlOutput(path, lambda record: record).close()
            with open(path, "rb") as handle:
                for line_no, line in enumerate(handle, start=1):
                    record = orjson.loads(line)
                    if not isinstance(record.get("doc_id"), str):
                        raise ValueError(f"{path}:{line_no} is no link record (it has no doc_id): move it away")
                    self._last[record["doc_id"]] = self._key(record)
        self._handle = open(path, "ab")  # noqa: SIM115 - closed in close()

    @staticmethod
    def _key(record: dict[str, Any]) -> bytes:
        said = [link_identity(record), record.get("decided_by"), record.get("previous")]
        return hashlib.blake2b(orjson.dumps(said), digest_size=16).digest()

    def write(self, record: dict[str, Any]) -> bool:
        key = self._key(record)
        if self._last.get(record["doc_id"]) == key:
            return False
        self._last[record["doc_id"]] = key
        self._handle.write(orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE))
        return True

    def close(self) -> None:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()


class PublishedArticles:
    """Articles published before, by id, read from deduped files on first need: of each document, the one its
    verdict (its latest link record, `verdict`) was given to, else the latest of the verdict's content, else none
    (`streams.core.relink.likeness`, the rule the service follows): the latest article of an id may be another
    story, published before its verdict expired and the crawler reused the id.

    A line without `features` is a raw article (the run's own input, for a SimHash duplicate, which is published
    nowhere): featurised as `dedup run` featurised it (`featurizer`), when its id is asked for, so that it is
    matched by the features it has, never taken on its id alone."""

    def __init__(
        self,
        sources: Sequence[Path],
        verdict: Callable[[str], dict[str, Any] | None],
        featurizer: Featurizer,
    ) -> None:
        self._sources = sources
        self._verdict = verdict
        self._featurizer = featurizer
        self._found: dict[str, dict[tuple[Any, ...], dict[str, Any]]] | None = None
        """Per id, the latest article of each `PUBLISHED_AS` (mostly one), in the order last seen."""
        self._raw: dict[str, list[bytes]] = defaultdict(list)
        """Per id, the raw articles not featurised yet."""

    def __call__(self, doc_id: str) -> dict[str, Any] | None:
        if self._found is None:
            self._found = defaultdict(dict)
            for source in self._sources:
                if not source.is_file():
                    continue
                for line in read_lines([str(source)]):
                    try:
                        record = orjson.loads(line.raw)
                    except orjson.JSONDecodeError:
                        continue
                    if isinstance(record, dict) and isinstance(record.get("id"), str):
                        if "features" not in record:
                            self._raw[record["id"]].append(line.raw)
                            continue
                        self._seen(record["id"], {**record, "features": article_features(record)})
        if doc_id in self._raw:
            # now, as the run's ingest time: dates past it are clamped as then, and a missing date is no match
            for doc in self._featurizer.parse_batch(self._raw.pop(doc_id), ingest_time=int(time.time())):
                if isinstance(doc, Document):
                    self._seen(doc_id, published_record(doc))
        record = self._verdict(doc_id)
        # The most like the one decided, and the latest of equals (max keeps the first, the order is last seen).
        best = max(reversed(self._found.get(doc_id, {}).values()), key=lambda a: likeness(a, record), default=None)
        return best if best is not None and likeness(best, record) > 0 else None

    def _seen(self, doc_id: str, article: dict[str, Any]) -> None:
        assert self._found is not None
        seen = self._found[doc_id]
        published_as = tuple(article["features"].get(name) for name in PUBLISHED_AS)
        seen.pop(published_as, None)
        seen[published_as] = article

"""Rebuilding state from published verdicts: replaying links gives back every index.

Each link carries what its document left in the state: its verdict, its exact
keys, and for a canonical its fingerprint and (when embedded) its vector. A link
decided without a stage that claims keys names the stages that ran (`stages`):
the keys of the others were never claimed, and a replay claims none of them.
Restoring links in the order they were decided reproduces the state exactly,
since every claim is set-if-absent and the first claimant wins again.
Restoring is idempotent: a link already in the state is skipped.

A relink (streams.core.relink) writes a later record for a document whose
verdict changed. Restored over the earlier verdict, it undoes what that verdict
left (a place in its canonical's group; a canonical's band entries and vector),
re-points the exact keys it names (`Recorded.keys`) and leaves what the new
verdict needs; restored first (Kafka replay keeps only a document's latest
record) it is restored like any verdict, its named keys pointed outright. A
relink applies its changes through this very function, so a replay cannot
rebuild anything else than what the relink made. A cascade record for a document
that already has another verdict changes nothing: the first verdict stands, as
it does live.

Every entry is stamped with the record's `published_at`, as the cascade stamps
it live, so a replayed state ages as the live one did (`RetentionSettings`).

A replay run again over its own state meets links whose verdicts the sweep has
taken since (past `verdicts_days`) while their keys and groups stay (a year):
such a document looks undecided, and restored again a duplicate would grow its
canonical's group a second time. Each replay knows from its own evidence whether
the state took a link in before (`applied_before`): the Kafka replay from the
clock the state had, since the topic holds every link the state saw; the file
replay from the state folder's journal, since files may come in any order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from streams.config import RetentionSettings
from streams.core.cascade import CONTENT_KEY, URL_KEY, claim_keys, key_stamp
from streams.core.model import Link, ModelId, Stage, Verdict
from streams.core.ports import StateStore, VectorStore


@dataclass(frozen=True, slots=True)
class Recorded:
    """A published verdict with the features that rebuild state."""

    link: Link
    url_hash: str
    content_hash: str
    simhash: int
    language: str
    published_at: int
    vector: np.ndarray | None = None
    keys: tuple[Stage, ...] | None = None
    """A relink's record: the exact keys it points at the document's holder (None: a cascade verdict)."""
    facts: dict[str, list[str]] | None = None
    """What an embedded canonical's text states: its vector's payload, for the fact check."""
    stages: frozenset[Stage] | None = None
    """The stages the cascade ran when it decided (the record's `stages`; None: every stage): a run without the
    content stage claimed no content key, one without SimHash no band entries, and a replay claims as it did."""

    figures: int = 0
    """The digest of the figures the document's text states (0: none, or a record written before them)."""

    def claims(self, stage: Stage) -> bool:
        """Whether deciding this document left `stage`'s keys in the state."""
        return self.stages is None or stage in self.stages

    @property
    def verdict_stamp(self) -> int:
        """What the verdict ages by: the link's stamp (the clock when it was recorded, where later than the
        document's date), else the document's `published_at`."""
        return self.link.published_at if self.link.published_at is not None else self.published_at


@dataclass
class ReplayStats:
    read: int = 0
    restored: int = 0
    already_there: int = 0
    bad: list[str] = field(default_factory=list)
    """Where and why each link (or candidate record) that could not be read was skipped (never fatal)."""
    candidates: int = 0
    """Candidate records put in the journal (a file replay's candidates.jsonl; the service reads its topic)."""


def restore(
    recorded: Recorded,
    state: StateStore,
    vectors: VectorStore | None = None,
    retention: RetentionSettings | None = None,
    applied_before: Callable[[Recorded], bool] | None = None,
) -> bool:
    """Put back what deciding (or relinking) this document put in the state; False when it is there already.

    `retention` stamps the keys of a document under review as the cascade does (`key_stamp`); without it
    they age as any exact key. `applied_before` says, of a link whose document has no verdict, whether
    the state took it in before its verdict expired (then it is there already: see the module's text).
    """
    published_at = recorded.published_at
    link = (
        recorded.link if recorded.link.published_at is not None else replace(recorded.link, published_at=published_at)
    )
    old = state.verdict_of(link.doc_id)
    if old == link or (old is not None and recorded.keys is None):
        return False
    if old is None and applied_before is not None and applied_before(recorded):
        return False
    # A duplicate's keys lead to its canonical; a canonical and a document under review hold their own.
    holder = link.canonical_id if link.verdict is Verdict.DUPLICATE else link.doc_id
    keys = {Stage.URL: URL_KEY + recorded.url_hash, Stage.CONTENT: CONTENT_KEY + recorded.content_hash}
    named = recorded.keys or ()
    # A review's own keys expire with its verdict, stamped as the cascade stamps them (`key_stamp`).
    stamp = key_stamp(
        link.verdict, recorded.verdict_stamp if link.verdict is Verdict.REVIEW else published_at, retention
    )
    own = [key for stage, key in keys.items() if stage not in named and recorded.claims(stage)]
    # A key the document held for itself under review was stamped to expire with that verdict (`key_stamp`):
    # stamped anew, as a replay claims it. Any other key keeps the stamp of the document that claimed it.
    restamped = link.doc_id if old is not None and Verdict.REVIEW in (old.verdict, link.verdict) else None
    if old is None:
        if own:
            claim_keys(state, own, holder, stamp)  # as the cascade claims: a key held by a duplicate is taken over
    else:
        _leave(old, recorded, state, vectors)
        if holder == restamped:  # its own keys, unnamed: a review copy's that are its head's stay as they are
            for key, current in state.exact_lookup(own).items():
                if current == holder:
                    state.exact_replace(key, holder, holder, stamp)
    for stage in named:
        _point(state, keys[stage], holder, stamp, restamped)
    if link.verdict.canonical:
        if old is None or not old.verdict.canonical:
            if recorded.claims(Stage.SIMHASH):
                keys = state.band_layout.keys(recorded.simhash)
                state.add_canonical(
                    link.doc_id, recorded.simhash, recorded.language, keys, published_at, recorded.figures
                )
            if vectors is not None and recorded.vector is not None and link.model:
                model = model_named(link.model, len(recorded.vector))
                vectors.add(
                    model, link.doc_id, recorded.vector, recorded.published_at, recorded.language, recorded.facts
                )
    elif link.verdict is Verdict.DUPLICATE:
        state.grow_group(link.canonical_id, published_at)
    if old is None:
        state.record_verdict(link)
    elif not state.replace_verdict(link, old):
        raise RuntimeError(f"the verdict of {link.doc_id} changed while it was being restored")
    return True


def chain(link: Link, verdict_of: Callable[[str], Link | None]) -> str | None:
    """Why restoring `link` would make a chain: it links to a document that the state (`verdict_of`) holds as no
    canonical, which no run writes (a line edited by hand, or another state's); None when it does not. A canonical
    whose verdict has expired is still the one its keys name."""
    if link.verdict.canonical:
        return None
    target = verdict_of(link.canonical_id)
    if target is None or target.verdict.canonical:
        return None
    return f"its canonical {link.canonical_id} is no canonical ({target.verdict} of {target.canonical_id}): a chain"


def _leave(old: Link, recorded: Recorded, state: StateStore, vectors: VectorStore | None) -> None:
    """Undo what the document's earlier verdict left in the state, as far as its new one differs."""
    if old.verdict is Verdict.DUPLICATE:
        state.shrink_group(old.canonical_id)
    elif old.verdict.canonical and not recorded.link.verdict.canonical:
        state.remove_canonical(old.doc_id, recorded.language, state.band_layout.keys(recorded.simhash))
        if vectors is not None and old.model:
            vectors.remove(model_named(old.model), old.doc_id)


def _point(state: StateStore, key: str, holder: str, published_at: int, restamped: str | None = None) -> None:
    """Point `key` at `holder`. A key nobody holds is claimed, stamped with `published_at` (as a replay, which
    claims it afresh, would); a held key keeps its stamp, the date of the document that claimed it, as it
    does in a state that never saw the relink: a relink moves a key for every document of the plan that
    shares its hash (an exact copy dated later, a late crawl's copy crawled on time), and stamped with the
    mover's date it expired at another time. Only the key of `restamped`, held for itself under review, is
    stamped anew: its stamp followed that verdict (`key_stamp`)."""
    current = state.exact_lookup([key]).get(key)
    if current is None:
        state.exact_claim([key], holder, published_at)
    else:
        state.exact_replace(key, current, holder, published_at if current == restamped else None)


def model_named(name: str, dim: int = 0) -> ModelId:
    """The model a link names (`name@version`: a name holds no '@', see `ModelId`); removing a vector needs
    no dimension."""
    model, _, version = name.partition("@")
    return ModelId(model, version, dim)

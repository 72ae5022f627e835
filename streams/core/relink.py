"""Relinking: every suppression is reversible, by a person's decision or by a new semantic cut-off.

Nothing is ever deleted: a relink gives a document a new verdict, published as a
new link record (its last record is its verdict), and changes the state the way
replaying that record does (`streams.core.replay.restore`), so a replay rebuilds
exactly what a relink made. The guarantees of the cascade hold after every
relink: stars, never chains (every `canonical_id` names a canonical; every exact
key points to a canonical or to a document under review); one canonical per
exact key; the first seen stays canonical (no canonical is ever merged into
another); documents decided afterwards see the corrected state.

What changes, given the latest link record of every document:

- **Not a duplicate** (a label false for `a` against `b`, or a semantic link
  scoring below a new cut-off): `a`, a duplicate of `b` or under review against
  it, becomes `unlinked`, a canonical: its band entries and its vector (from its
  candidate record, when the semantic stage embedded it) are registered, it is
  published (the article from its candidate record, or from where it was
  published before; with none on record it cannot be, and is refused), and its
  exact copies follow it: documents linked to `b` through a URL or content key
  that `a` brought (its own, or one a follower brought, and so on) become
  duplicates of `a`, and those keys point to `a`. A key some document staying
  with `b` brought as well (two documents of `b`'s group with one text, one of
  them a copy of `a` by URL) stays with `b`: one holder per key, and the group
  that had it keeps it. Review copies of a review document become duplicates of
  it, since it is a canonical now. `b`'s group shrinks.
- **A duplicate after all** (a label true for `a` under review against `b`): `a`
  becomes a duplicate of `b`; the keys it held, and its review copies (as
  duplicates of `b`, with theirs), go to `b`'s group.
- **Linked back** (a label true for an unlinked `a` whose earlier canonical is
  `b`, or a cut-off that its earlier semantic score meets again): `a` gets its
  earlier verdict back (a duplicate of `b`), with the copies that followed it; its
  band entries and vector are removed. Refused when documents other than those
  copies linked to `a` meanwhile (linking it back would make a chain), and when
  `b` is no canonical any more.

A threshold relink (`Cutoff`) re-judges one stage's links (semantic): every
duplicate scoring below the cut-off, of the kind of pair chosen (same-language
by default: the cut-off replaces a model's `link`; `cross` its `cross_link`;
`both`), becomes unlinked, and every document an earlier threshold relink
unlinked whose earlier score meets the cut-off gets its earlier verdict back. So
a cut-off made stricter and then set back restores the first state exactly.
Reviews are left to people, and so is every verdict a person gave.

A decision that matches the verdict changes nothing, and so relinking twice
changes nothing. Exact links (a URL or content copy) are never undone on their
own: the document they copy is decided instead. Merging two canonicals is not
done (it would re-point a whole group): such a label is refused with the reason.

`plan_decisions` and `plan_cutoff` are pure: they read the latest records, the
exact-key holders and the candidate records through the callables given, and
return a `Plan`. `apply` makes the changes through the ports, checking first
that each document still has the verdict it was planned on (else `Stale`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import numpy as np

from streams.config import RetentionSettings
from streams.core.cascade import CONTENT_KEY, URL_KEY
from streams.core.model import Link, Stage, Verdict, content_key, stages_named
from streams.core.ports import StateStore, VectorStore
from streams.core.replay import Recorded, restore
from streams.features.facts import payload_facts
from streams.features.figures import figures_from_hex

DecidedBy = Literal["person", "threshold"]
Pair = Literal["same", "cross", "both"]
EXACT = (Stage.URL, Stage.CONTENT)

Records = Iterable[dict[str, Any]]
Holders = Callable[[Sequence[str]], dict[str, str]]
"""Exact keys to the documents they point to (absent keys left out): `StateStore.exact_lookup`."""
Lookup = Callable[[str], dict[str, Any] | None]
"""A document id to its candidate record (or published article), or None."""
Current = Callable[[str], Link | None]
"""The state's verdict of a document (`StateStore.verdict_of`): None where it has expired."""


PUBLISHED_AS = ("url_hash", "content_hash", "published_at")
"""The features an article published with a verdict shares with that verdict's link record."""


def likeness(article: dict[str, Any], record: dict[str, Any] | None) -> int:
    """How far `article` (a published record, with its `features`) is the one a document's verdict (`record`, its
    latest link record) was given to: 2 for the article as decided, 1 for another of the verdict's content (sent
    again from a mirror, dated later), 0 for any other. A relink publishes only an article above 0: one of other
    content may be another story, published under the id before its verdict expired and the crawler reused it,
    and would go out under the verdict of a story that never reached the feed."""
    features = article.get("features")
    if record is None or not isinstance(features, dict):
        return 0
    if all(features.get(name) == record.get(name) for name in PUBLISHED_AS):
        return 2
    return 1 if features.get("content_hash") == record.get("content_hash") else 0


class Stale(RuntimeError):
    """The state changed since the relink was planned (the stream moved on): plan it again."""


@dataclass(frozen=True, slots=True)
class Label:
    """A person's decision on a pair: `a` (a document) is or is not a duplicate of `b` (a canonical)."""

    a: str
    b: str
    duplicate: bool
    by: str | None = None

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Label:
        """From a labels.jsonl line (schemas/label.schema.json); ValueError when it is none."""
        try:
            a, b, duplicate = record["a"], record["b"], record["label"]
        except (KeyError, TypeError):
            raise ValueError("a label needs a, b and label") from None
        if not (isinstance(a, str) and isinstance(b, str) and isinstance(duplicate, bool)):
            raise ValueError("a label's a and b are document ids and its label is true or false")
        by = record.get("labelled_by")
        return cls(a, b, duplicate, by if isinstance(by, str) and by else None)


@dataclass(frozen=True, slots=True)
class Cutoff:
    """A new link cut-off for one stage's links: duplicates scoring below it are unlinked."""

    below: float
    pair: Pair = "same"
    stage: Stage = Stage.SEMANTIC

    def __post_init__(self) -> None:
        if self.stage is not Stage.SEMANTIC:
            raise ValueError(f"a cut-off relink re-judges semantic links, not {self.stage} ones")
        if self.pair not in ("same", "cross", "both"):
            raise ValueError(f"pair must be same, cross or both, not {self.pair!r}")
        if not -1.0 <= self.below <= 1.0:
            raise ValueError(f"a cosine cut-off lies between -1 and 1, not {self.below}")

    def covers(self, same_language: bool) -> bool:
        return self.pair == "both" or (self.pair == "same") == same_language


def relink_command(labels: Sequence[Label] | None, cutoff: Cutoff | None) -> Any:
    """A relink's decisions or cut-off as JSON values: its mark while it is under way (run.json, Redis), by which
    the same relink run again is known, and another one refused, naming them."""
    if labels is not None:
        return [asdict(label) for label in labels]
    assert cutoff is not None
    return {**asdict(cutoff), "stage": cutoff.stage.value}


@dataclass(frozen=True, slots=True)
class Change:
    """One document's new verdict, and what its new link record and the state need."""

    doc_id: str
    link: Link
    """The new verdict."""
    previous: Link
    """The verdict it replaces: the change is made only while the document still has it."""
    decided_by: DecidedBy
    reason: str
    keys: tuple[tuple[Stage, str], ...]
    """The exact keys pointed at the new holder, each with the document that holds it now."""
    record: dict[str, Any] = field(repr=False)
    """The document's latest link record: its features."""
    vector: list[float] | None = field(default=None, repr=False)
    """For a document that becomes a canonical and was embedded: its vector."""
    article: dict[str, Any] | None = field(default=None, repr=False)
    """For a document that becomes a canonical: the deduped record to publish."""
    follows: str | None = None
    """For an exact copy: the document whose change it follows."""
    group: int | None = None
    """For a canonical linked back: its group size now (itself and the copies that follow it)."""
    facts: dict[str, list[str]] | None = field(default=None, repr=False)
    """For a document that becomes a canonical with a vector: what its text states, for the fact check
    of later documents (its vector's payload, as the cascade gives a canonical it registers)."""

    @property
    def holder(self) -> str:
        """Where the document's exact keys lead after the change."""
        return self.link.canonical_id if self.link.verdict is Verdict.DUPLICATE else self.doc_id

    @property
    def publishes(self) -> bool:
        return self.article is not None


@dataclass(frozen=True, slots=True)
class Refusal:
    """A decision or rule that was not applied to a document, and why."""

    doc_id: str
    other: str | None
    reason: str


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    """Documents whose verdict already is what they were asked to be."""


# ---------------------------------------------------------------------------------------------- planning


@dataclass(frozen=True, slots=True)
class _Doc:
    link: Link
    record: dict[str, Any]

    @property
    def decided_by(self) -> str:
        return str(self.record.get("decided_by") or "cascade")

    @property
    def previous(self) -> Link | None:
        """The verdict a relink replaced with this one (None for the cascade's own, and for one that cannot be
        read: the replay never reads it, so a garbled one is restored, and planning on it would refuse every
        relink for as long as the compacted topic keeps it)."""
        earlier = self.record.get("previous")
        if not isinstance(earlier, dict):
            return None
        canonical_id, stage, score, model = (earlier.get(k) for k in ("canonical_id", "stage", "score", "model"))
        if not isinstance(canonical_id, str) or not canonical_id or not isinstance(model, str | None):
            return None
        if not isinstance(score, int | float | None) or isinstance(score, bool):
            return None
        try:
            verdict, stage = Verdict(earlier.get("verdict")), Stage(stage) if stage else None
        except ValueError:
            return None
        return Link(self.link.doc_id, verdict, canonical_id, stage, score, model, content=self.link.content)


def _key(record: dict[str, Any], stage: Stage) -> str:
    return (URL_KEY + record["url_hash"]) if stage is Stage.URL else (CONTENT_KEY + record["content_hash"])


def _hash(record: dict[str, Any], stage: Stage) -> str:
    return str(record["url_hash"] if stage is Stage.URL else record["content_hash"])


def _link_of(record: dict[str, Any]) -> Link:
    stage = record.get("stage")
    return Link(
        record["doc_id"],
        Verdict(record["verdict"]),
        record["canonical_id"],
        Stage(stage) if stage else None,
        record.get("score"),
        record.get("model"),
        content=content_key(record["content_hash"]),
    )


class _Planner:
    """The latest verdicts, indexed; each planned change is applied to this view, so later
    decisions in one plan see earlier ones."""

    def __init__(
        self, records: Records, holders: Holders, candidate: Lookup, article: Lookup | None, current: Current | None
    ) -> None:
        self._current = current
        self._docs: dict[str, _Doc] = {}
        for record in records:
            self._docs[record["doc_id"]] = _Doc(_link_of(record), record)
        self._rank = {doc_id: rank for rank, doc_id in enumerate(self._docs)}
        self._linked: defaultdict[str, set[str]] = defaultdict(set)
        """Canonical -> documents linked to it (duplicates and reviews)."""
        self._sharing: defaultdict[tuple[Stage, str], set[str]] = defaultdict(set)
        """(exact stage, hash) -> documents with that hash."""
        for doc_id, doc in self._docs.items():
            if doc.link.canonical_id != doc_id:
                self._linked[doc.link.canonical_id].add(doc_id)
            for stage in EXACT:
                self._sharing[(stage, _hash(doc.record, stage))].add(doc_id)
        self._holders = holders
        self._held: dict[str, str | None] = {}
        self._candidate = candidate
        self._article = article
        self.plan = Plan()

    def order(self) -> list[str]:
        return list(self._docs)

    def gone(self, doc_id: str) -> bool:
        """Whether the state no longer has the document's verdict (past `verdicts_days`, or never committed):
        it cannot say what a change would undo, so the document is not relinked there."""
        return self._current is not None and self._current(doc_id) is None

    def refuse_gone(self, doc_id: str, other: str | None) -> bool:
        """Refuse a document that is `gone`; True when refused."""
        if self.gone(doc_id):
            self._refuse(doc_id, other, "its verdict has expired from the state (retention.verdicts_days)")
            return True
        return False

    def doc(self, doc_id: str) -> _Doc | None:
        return self._docs.get(doc_id)

    def holder(self, key: str) -> str | None:
        if key not in self._held:
            self._held[key] = self._holders([key]).get(key)
        return self._held[key]

    # -- the three moves

    def unlink(self, head: str, decided_by: DecidedBy, reason: str) -> None:
        """`head` (a duplicate of, or under review against, its canonical) becomes a canonical."""
        doc = self._docs[head]
        old = doc.link.canonical_id
        inside = {head}
        moving: set[str] = set()
        grew = True
        while grew:
            grew = False
            for member in list(inside):
                for stage in EXACT:
                    key = _key(self._docs[member].record, stage)
                    held = self.holder(key)
                    if key in moving or held is None or held == head:
                        continue
                    if held in inside or (held == old and self._uncontested(stage, member, old, inside)):
                        moving.add(key)
                        grew = True
            for other in sorted(self._linked[old] - inside):
                copy = self._docs[other]
                if copy.link.stage in EXACT:
                    key = _key(copy.record, copy.link.stage)
                    if key in moving or self.holder(key) in inside:
                        inside.add(other)
                        grew = True
        found = self._candidate(head) or {}
        article = found.get("article") or (self._article(head) if self._article is not None else None)
        if article is None:
            self._refuse(
                head,
                old,
                "no article on record (never embedded, never published), so it cannot be published as a canonical",
            )
            return
        vector = found.get("vector")
        model = found.get("model") if vector is not None else None
        # The candidate record keeps the first candidate_text_chars of the text, as much as the fact check reads.
        facts = payload_facts(found["text"]) if vector is not None and found.get("text") else None
        unlinked = Link(head, Verdict.UNLINKED, head, model=model, content=doc.link.content)
        published = {**article, "features": {**article.get("features", {}), "verdict": Verdict.UNLINKED.value}}
        self._change(head, unlinked, decided_by, reason, moving, vector=vector, article=published, facts=facts)
        for other in self._followers(inside, head):
            copy = self._docs[other]
            link = Link(other, Verdict.DUPLICATE, head, copy.link.stage, content=copy.link.content)
            why = f"an exact ({copy.link.stage}) copy that follows {head}: {reason}"
            self._change(other, link, decided_by, why, moving, follows=head)

    def confirm(self, head: str, decided_by: DecidedBy, reason: str) -> None:
        """`head`, under review against its canonical, becomes its duplicate with its review copies."""
        doc = self._docs[head]
        canonical = doc.link.canonical_id
        if self._refuse_no_canonical(head, canonical, "suspected"):
            return
        inside = {head}
        grew = True
        while grew:
            grew = False
            for other in sorted(self._linked[canonical] - inside):
                copy = self._docs[other]
                review_copy = copy.link.verdict is Verdict.REVIEW and copy.link.stage in EXACT
                if review_copy and self.holder(_key(copy.record, copy.link.stage)) in inside:
                    inside.add(other)
                    grew = True
        moving = {key for member in inside for key in self._keys(member) if self.holder(key) in inside}
        link = replace(doc.link, verdict=Verdict.DUPLICATE)
        self._change(head, link, decided_by, reason, moving)
        for other in self._followers(inside, head):
            copy = self._docs[other]
            link = Link(other, Verdict.DUPLICATE, canonical, copy.link.stage, content=copy.link.content)
            self._change(other, link, decided_by, f"an exact copy of {head}: {reason}", moving, follows=head)

    def back(self, head: str, decided_by: DecidedBy, reason: str) -> None:
        """`head`, unlinked, goes back to its earlier canonical with the copies that followed it."""
        doc = self._docs[head]
        earlier = doc.previous
        assert earlier is not None
        canonical = earlier.canonical_id
        followers = set()
        gained = set()
        for other in self._linked[head]:
            copy = self._docs[other]
            before = copy.previous
            moved_with = copy.link.verdict is Verdict.DUPLICATE and copy.decided_by != "cascade"
            if moved_with and before is not None and before.canonical_id == canonical:
                followers.add(other)
            else:
                gained.add(other)
        if gained:
            names = ", ".join(sorted(gained)[:3]) + (" ..." if len(gained) > 3 else "")
            why = f"{len(gained)} documents linked to it while it was unlinked ({names}): linking it back would chain"
            self._refuse(head, canonical, why)
            return
        if self._refuse_no_canonical(head, canonical, "earlier"):
            return
        inside = {head, *followers}
        moving = {key for member in inside for key in self._keys(member) if self.holder(key) == head}
        link = Link(
            head, Verdict.DUPLICATE, canonical, earlier.stage, earlier.score, earlier.model, None, doc.link.content
        )
        self._change(head, link, decided_by, reason, moving, group=1 + len(followers))
        for other in self._followers(inside, head):
            copy = self._docs[other]
            before = copy.previous
            assert before is not None
            link = Link(
                other, Verdict.DUPLICATE, canonical, before.stage, before.score, before.model, None, copy.link.content
            )
            self._change(other, link, decided_by, f"follows {head} back: {reason}", moving, follows=head)

    # -- helpers

    def _refuse_no_canonical(self, head: str, canonical: str, which: str) -> bool:
        """Refuse linking `head` to `canonical` where that id is no canonical any more; True when refused. Its
        verdict expired and the crawler reused the id for a copy of another story (decided afresh, a duplicate): a
        review would be confirmed, or an unlinked document linked back, as a duplicate of a duplicate (a chain)."""
        target = self._docs.get(canonical)
        if target is not None and target.link.verdict.canonical:
            return False
        now = "unknown" if target is None else f"now a {target.link.verdict} of {target.link.canonical_id}"
        self._refuse(head, canonical, f"its {which} canonical {canonical} is no canonical any more ({now})")
        return True

    def _uncontested(self, stage: Stage, member: str, canonical: str, inside: set[str]) -> bool:
        """Whether a key held by `canonical` can move: no document staying with it shares the hash
        without having been linked through this very key (such a document may have brought it)."""
        for other in self._sharing[(stage, _hash(self._docs[member].record, stage))]:
            if other in inside:
                continue
            held = self._docs[other]
            stays = other == canonical or held.link.canonical_id == canonical
            if stays and held.link.stage is not stage:
                return False
        return True

    def original(self, doc_id: str, stage: Stage) -> str:
        """The document an exact copy copies: the one of its group with that hash not linked through it."""
        doc = self._docs[doc_id]
        canonical = doc.link.canonical_id
        for other in self._docs:
            held = self._docs[other]
            if other == doc_id or _hash(held.record, stage) != _hash(doc.record, stage):
                continue
            if held.link.stage is not stage and canonical in (other, held.link.canonical_id):
                return other
        return canonical

    def _keys(self, doc_id: str) -> list[str]:
        return [_key(self._docs[doc_id].record, stage) for stage in EXACT]

    def _followers(self, inside: set[str], head: str) -> list[str]:
        """The copies in record order (the order they were decided in), after their head; a copy `gone` from
        the state is left as it is there (no verdict links it anywhere)."""
        return sorted((d for d in inside - {head} if not self.gone(d)), key=self._rank.__getitem__)

    def _change(
        self,
        doc_id: str,
        link: Link,
        decided_by: DecidedBy,
        reason: str,
        moving: set[str],
        *,
        vector: list[float] | None = None,
        article: dict[str, Any] | None = None,
        follows: str | None = None,
        group: int | None = None,
        facts: dict[str, list[str]] | None = None,
    ) -> None:
        doc = self._docs[doc_id]
        keys = tuple(
            (stage, holder)
            for stage in EXACT
            if (key := _key(doc.record, stage)) in moving and (holder := self.holder(key)) is not None
        )
        if isinstance(vector, np.ndarray):
            vector = vector.tolist()
        change = Change(
            doc_id, link, doc.link, decided_by, reason, keys, doc.record, vector, article, follows, group, facts
        )
        self.plan.changes.append(change)
        # The view moves on: later decisions of this plan see the change.
        if doc.link.canonical_id != doc_id:
            self._linked[doc.link.canonical_id].discard(doc_id)
        if link.canonical_id != doc_id:
            self._linked[link.canonical_id].add(doc_id)
        self._docs[doc_id] = _Doc(link, {**doc.record, **_verdict_fields(link), **_relink_fields(change)})
        for stage, _ in keys:
            self._held[_key(doc.record, stage)] = change.holder

    def _refuse(self, doc_id: str, other: str | None, reason: str) -> None:
        self.plan.refused.append(Refusal(doc_id, other, reason))


def plan_decisions(
    records: Records,
    labels: Iterable[Label],
    holders: Holders,
    candidate: Lookup,
    article: Lookup | None = None,
    current: Current | None = None,
) -> Plan:
    """What people's labels change, applied in their order (the last label of a pair counts). `current`: the
    state's verdicts, so that a document whose verdict has expired there is refused, not planned."""
    planner = _Planner(records, holders, candidate, article, current)
    last: dict[tuple[str, str], Label] = {}
    for label in labels:
        last.pop((label.a, label.b), None)
        last[(label.a, label.b)] = label
    # A label refused for what a later one changes (a link back refused while a document linked to it, which a
    # later label unlinks) is decided again after them, until a round changes nothing more: otherwise the
    # same file applied a second time would change the state again.
    todo = list(last.values())
    while todo:
        made = len(planner.plan.changes)
        refused: list[tuple[Label, list[Refusal]]] = []
        for label in todo:
            start = len(planner.plan.refused)
            _decide(planner, label)
            if len(planner.plan.refused) > start:
                refused.append((label, planner.plan.refused[start:]))
        if len(planner.plan.changes) == made:
            break
        withdrawn = {id(refusal) for _, said in refused for refusal in said}
        planner.plan.refused = [r for r in planner.plan.refused if id(r) not in withdrawn]
        todo = [label for label, _ in refused]
    return planner.plan


def _decide(planner: _Planner, label: Label) -> None:
    a, b = label.a, label.b
    doc = planner.doc(a)
    by = label.by or "a person"
    if doc is None:
        planner._refuse(a, b, "no verdict on record for this document")
        return
    if planner.refuse_gone(a, b):
        return
    link = doc.link
    linked = link.canonical_id == b and link.verdict in (Verdict.DUPLICATE, Verdict.REVIEW) and a != b
    earlier = doc.previous
    unlinked_from_b = link.verdict is Verdict.UNLINKED and earlier is not None and earlier.canonical_id == b
    if linked and link.stage in EXACT and (not label.duplicate or link.verdict is Verdict.REVIEW):
        original = planner.original(a, link.stage)
        what = f"an exact ({link.stage}) copy of {original}"
        if original == b:
            planner._refuse(a, b, f"{what} itself: an exact link is not undone")
        else:
            planner._refuse(a, b, f"{what}: exact links are not undone on their own; decide {original} instead")
        return
    if not label.duplicate:
        if linked:
            planner.unlink(a, "person", f"labelled not a duplicate of {b} by {by}")
        else:
            planner.plan.unchanged.append(a)
        return
    if linked and link.verdict is Verdict.DUPLICATE:
        planner.plan.unchanged.append(a)
    elif linked:
        planner.confirm(a, "person", f"labelled a duplicate of {b} by {by}")
    elif unlinked_from_b:
        planner.back(a, "person", f"labelled a duplicate of {b} by {by}")
    elif link.verdict.canonical:
        planner._refuse(a, b, f"a canonical, never linked to {b}: merging two groups is not done")
    else:
        planner._refuse(a, b, f"linked to {link.canonical_id}, not {b}: merging two groups is not done")


def plan_cutoff(
    records: Records,
    cutoff: Cutoff,
    holders: Holders,
    candidate: Lookup,
    article: Lookup | None = None,
    current: Current | None = None,
) -> Plan:
    """What a new cut-off changes: duplicates below it unlinked, earlier threshold unlinks that meet it back
    (`current` as for `plan_decisions`)."""
    planner = _Planner(records, holders, candidate, article, current)
    # Every unlink first, then every link back: a document linked to an unlinked one while it was unlinked
    # blocks its link back (a chain) until the cut-off unlinks that document too.
    for doc_id in planner.order():
        doc = planner.doc(doc_id)
        assert doc is not None
        link = doc.link
        if link.verdict is Verdict.DUPLICATE and link.stage is cutoff.stage and link.score is not None:
            kind = _kind(planner, doc, link.canonical_id)
            if kind is None:
                planner._refuse(doc_id, link.canonical_id, "its canonical has no record: same- or cross-language?")
                continue
            if not cutoff.covers(kind) or link.score >= cutoff.below:
                continue
            if doc.decided_by == "person":
                planner._refuse(doc_id, link.canonical_id, "a person decided it; a cut-off leaves it alone")
                continue
            if planner.refuse_gone(doc_id, link.canonical_id):
                continue
            why = f"{link.stage} score {link.score:.3f} below {cutoff.below} ({_pair_name(kind)})"
            planner.unlink(doc_id, "threshold", why)
    for doc_id in planner.order():
        doc = planner.doc(doc_id)
        assert doc is not None
        if doc.link.verdict is Verdict.UNLINKED and doc.decided_by == "threshold":
            earlier = doc.previous
            if earlier is None or earlier.stage is not cutoff.stage or earlier.score is None:
                continue
            kind = _kind(planner, doc, earlier.canonical_id)
            if kind is None or not cutoff.covers(kind) or earlier.score < cutoff.below:
                continue
            if planner.refuse_gone(doc_id, earlier.canonical_id):
                continue
            why = f"{earlier.stage} score {earlier.score:.3f} at or above {cutoff.below} ({_pair_name(kind)})"
            planner.back(doc_id, "threshold", why)
    return planner.plan


def _kind(planner: _Planner, doc: _Doc, canonical_id: str) -> bool | None:
    """Whether the document and its canonical are in one language (None: the canonical is unknown)."""
    canonical = planner.doc(canonical_id)
    return None if canonical is None else doc.record["language"] == canonical.record["language"]


def _pair_name(same_language: bool) -> str:
    return "same-language" if same_language else "cross-language"


# ---------------------------------------------------------------------------------------------- applying


def recorded(change: Change) -> Recorded:
    """The change as replay reads its link record back."""
    record = change.record
    published_at = _published(record["published_at"])
    return Recorded(
        link=replace(change.link, published_at=_kept_from(record, published_at)),
        url_hash=record["url_hash"],
        content_hash=record["content_hash"],
        simhash=int(record["simhash"], 16),
        language=record["language"],
        published_at=published_at,
        vector=np.asarray(change.vector, dtype=np.float32) if change.vector is not None else None,
        keys=tuple(stage for stage, _ in change.keys),
        facts=change.facts,
        stages=stages_named(record["stages"]) if "stages" in record else None,
        figures=figures_from_hex(record["figures"]) if "figures" in record else 0,
    )


def _kept_from(record: dict[str, Any], published_at: int) -> int:
    """What the new verdict ages by: as the document's verdicts before it, the later of its `published_at` and the
    clock its first verdict was recorded at (`clock`, a late crawl's). Aged from its date alone, a late crawl's
    relinked verdict expired as it was made: the state forgot the person's decision, and it could not be undone."""
    clock = record.get("clock")
    return max(published_at, _published(clock)) if isinstance(clock, str) else published_at


def _published(value: str) -> int:
    from streams.records.article import parse_timestamp

    return parse_timestamp(value)


def check(changes: Sequence[Change], state: StateStore) -> list[Change]:
    """The changes still to make, after checking every one against the state; `Stale` if one cannot be.

    A document must still have the verdict the change was planned on, each key it moves must
    still point where it did, and a canonical linked back must have no other members. A change
    whose verdict is there already (a relink that stopped after writing the state) is left out.
    """
    verdicts: dict[str, Link | None] = {}
    held: dict[str, str | None] = {}
    sizes: dict[str, int] = {}
    """Group sizes as the plan's earlier changes leave them (a member unlinked before its canonical links back)."""
    todo: list[Change] = []

    def size(canonical_id: str) -> int:
        return sizes[canonical_id] if canonical_id in sizes else state.group_size(canonical_id)

    for change in changes:
        doc_id = change.doc_id
        current = verdicts[doc_id] if doc_id in verdicts else state.verdict_of(doc_id)
        if current == change.link:
            continue
        if current is None:
            # Never committed, or expired (older than retention.verdicts_days in stream time): the state
            # cannot say what the change would undo, so it is not made (nothing deleted, no chain).
            raise Stale(
                f"{doc_id} has no verdict in the state (expired after retention.verdicts_days, or not committed):"
                " it cannot be relinked there"
            )
        if current != change.previous:
            now = f"{current.verdict} of {current.canonical_id}"
            raise Stale(f"{doc_id} has another verdict ({now}) than the relink was planned on: plan it again")
        for stage, expected in change.keys:
            key = _key(change.record, stage)
            holder = held[key] if key in held else state.exact_lookup([key]).get(key)
            if holder not in (expected, change.holder):
                raise Stale(f"the {stage} key of {doc_id} points to {holder}, not {expected}: plan it again")
            held[key] = change.holder
        if change.group is not None and size(doc_id) != change.group:
            raise Stale(f"{doc_id} gained members since the relink was planned: plan it again")
        if current.verdict is Verdict.DUPLICATE:  # as `restore` moves it: a duplicate counts in its group
            sizes[current.canonical_id] = size(current.canonical_id) - 1
        if change.link.verdict is Verdict.DUPLICATE:
            sizes[change.link.canonical_id] = size(change.link.canonical_id) + 1
        verdicts[doc_id] = change.link
        todo.append(change)
    return todo


def apply(
    changes: Sequence[Change],
    state: StateStore,
    vectors: VectorStore | None = None,
    *,
    checked: bool = False,
    retention: RetentionSettings | None = None,
) -> list[Change]:
    """Make the changes in the state (and the vectors) as replay makes them; returns those made now.

    Every change is checked (`check`) before any is made, so a stale plan writes nothing;
    `checked` says the caller has just done so. `retention` stamps as `restore` does.
    """
    todo = list(changes) if checked else check(changes, state)
    for change in todo:
        restore(recorded(change), state, vectors, retention)
    return todo


def change_record(change: Change, linked_at: str, seq: int | None = None) -> dict[str, Any]:
    """The new link record (schemas/link.schema.json): the verdict, who decided and why, the verdict it
    replaces, the keys it re-pointed, the features replay needs, and the vector of a new canonical."""
    record = {
        **_verdict_fields(change.link),
        "linked_at": linked_at,
        **{name: change.record[name] for name in ("url_hash", "content_hash", "simhash", "language", "published_at")},
        **_relink_fields(change),
    }
    # The document's own: which crawl, what it claimed, its figures, the clock its verdicts age from (a late crawl).
    for carried in ("version_of", "stages", "figures", "clock"):
        if carried in change.record:
            record[carried] = change.record[carried]
    if seq is not None:
        record["seq"] = seq
    if change.vector is not None and change.link.verdict.canonical:
        record["vector"] = change.vector
        if change.facts:
            record["facts"] = change.facts
    return record


def _verdict_fields(link: Link) -> dict[str, Any]:
    return {
        "doc_id": link.doc_id,
        "verdict": link.verdict.value,
        "canonical_id": link.canonical_id,
        "stage": link.stage.value if link.stage else None,
        "score": link.score,
        "model": link.model,
    }


def _relink_fields(change: Change) -> dict[str, Any]:
    earlier = change.previous
    return {
        "decided_by": change.decided_by,
        "reason": change.reason,
        "previous": {
            "verdict": earlier.verdict.value,
            "canonical_id": earlier.canonical_id,
            "stage": earlier.stage.value if earlier.stage else None,
            "score": earlier.score,
            "model": earlier.model,
        },
        "keys": [stage.value for stage, _ in change.keys],
    }

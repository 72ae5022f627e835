"""The cascade: one document in, one verdict out, cheapest stage first.

The representative rule keeps groups as stars: exact keys (URL and content
hashes) of every document point at its canonical, which cannot chain because
equality is transitive; SimHash bands and vectors hold canonicals only, and a
document joins a group only if it is within threshold of the group's
canonical (the closest; ties to the oldest). The first seen stays canonical.
A document in doubt (a score between the review and link cut-offs, or a
near-duplicate of a group at its size cap) gets `review`: it joins no group and
keeps its exact keys, so its exact copies share its verdict.

The cascade knows its stores only through the ports, and takes vectors from
its caller, so the same code runs on a file with embedded stores and on Kafka
with Redis and Qdrant, and the caller decides how to batch the embedder.

Retention (`RetentionSettings`): every entry ages in the stream's time (the
state's clock) and is invisible once past its family's retention, so a document
whose canonical has expired finds nothing and becomes a canonical itself. The
families expire at different ages, and a verdict usually goes first (7 days
against a year for exact keys), so no missing verdict is read as "not a
canonical" in a way that deletes data or makes a chain:

- A key holder without a verdict is a canonical (keys point at canonicals, or at
  documents under review); the keys a document under review holds for itself
  expire with its verdict (`key_stamp`), so a later copy is decided afresh, never
  linked to a document that may be under review.
- A vector without a verdict is an orphan (removed) only while its verdict could
  still be there; past `verdicts_days` it is a canonical's, as every vector is.
- A document without a verdict may be a redelivery whose verdict expired, or its
  id reused for other content once its verdict had gone. If it has members (its
  group, stamped with its latest member, lives `exact_days`) it was a canonical and
  stays one: linked to another, its members' links would be chains. Its own exact
  keys lead a redelivery back to itself too.
- An id the crawler reuses once its verdict expired is decided afresh under that id. Where that makes it a
  duplicate, the band entries and exact keys of its first text still name it: they are passed over
  (`_still_canonical`, `_reused`), never followed to the other story it copies now, and a document that claims
  such a key takes it over (`claim_keys`; a replay claims alike). Where it makes it a canonical again, the stores
  register it anew, with the new text's band entries (`StateStore.add_canonical`); its first text's exact keys
  still lead to it (a limit: tests/test_retention_attacks.py).
- A vector neighbour older than `vectors_hours` is never searched for (the
  window starts at the horizon), even before the sweep removes it.

Redelivered: a document decided once and decided again (its batch stopped before
its verdict was recorded) gets the verdict it got the first time. A verdict that
stands is given again; a link left pending by a write stopped half-way (the
store's `pending_of`) is recorded as it was, since deciding again would find the
document's own claims. It is the id's first verdict, for its content: another
article sent under that id before the redelivery is a new version, decided afresh.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from time import perf_counter

import numpy as np

from streams.config import ModelThresholds, RetentionSettings, Settings
from streams.core.model import (
    Canonical,
    Document,
    Link,
    ModelId,
    Neighbour,
    Stage,
    Verdict,
    content_key,
    keep_seconds,
    version_id,
)
from streams.core.ports import Reads, StateStore, VectorStore
from streams.features.facts import Facts, disagreement, payload_facts, text_facts
from streams.features.figures import figures_conflict
from streams.features.simhash import hamming

URL_KEY = "u:"
CONTENT_KEY = "c:"


def nearest_canonical(simhash: int, candidates: list[Canonical], max_distance: int) -> tuple[Canonical, int] | None:
    """The closest candidate within `max_distance` bits; ties go to the first seen."""
    best: tuple[int, int, Canonical] | None = None
    for candidate in candidates:
        distance = hamming(simhash, candidate.simhash)
        if distance <= max_distance and (best is None or (distance, candidate.seq) < best[:2]):
            best = (distance, candidate.seq, candidate)
    return None if best is None else (best[2], best[0])


def semantic_match(
    same: Neighbour | None, cross: Neighbour | None, thresholds: ModelThresholds
) -> tuple[Neighbour, Verdict] | None:
    """The neighbour a document joins, from the best same-language and cross-language ones.

    Each is held to its own cut-offs; a link beats a review, then the higher score
    wins, then the same-language neighbour.
    """
    best: tuple[Neighbour, Verdict] | None = None
    for neighbour, same_language in ((same, True), (cross, False)):
        if neighbour is None:
            continue
        link, review = thresholds.pair(same_language)
        if neighbour.score < review:
            continue
        verdict = Verdict.DUPLICATE if neighbour.score >= link else Verdict.REVIEW
        if best is None or (verdict is Verdict.DUPLICATE, neighbour.score) > (
            best[1] is Verdict.DUPLICATE,
            best[0].score,
        ):
            best = (neighbour, verdict)
    return best


def key_stamp(verdict: Verdict, published_at: int, retention: RetentionSettings | None) -> int:
    """The stamp of the exact keys a document claims for itself or its canonical, with its verdict.

    A document under review holds its own keys; once its verdict has expired nobody can tell its copies
    that it was under review, so its keys expire with its verdict (stamped earlier by the difference of
    the two retentions): a later copy is decided afresh, never a duplicate of a document under review.
    `published_at` is then what its verdict ages by (a late crawl's: the clock), or its keys would expire
    before its verdict and its copies, while it is under review, go to review again, published again.
    Where exact keys are kept forever (`exact_days` 0), they stay.
    """
    if retention is None or verdict is not Verdict.REVIEW:
        return published_at
    exact, verdicts = keep_seconds(retention.exact_days), keep_seconds(retention.verdicts_days)
    return published_at - (exact - verdicts) if exact > verdicts > 0 else published_at


def claim_keys(state: StateStore, keys: list[str], holder: str, stamp: int) -> dict[str, str]:
    """`state.exact_claim`, but a key whose holder is a duplicate now is taken over (re-pointed at `holder`, stamped
    `stamp`): such a holder's id was reused for a copy of another story once its verdict expired (`_reused`), or a
    person linked it back after a stopped batch claimed the key for it. Either way the key is no longer its
    document's: a document's keys point at its canonical (under review, at itself). The cascade and a replay claim
    alike, so a replay rebuilds what the live state did. Returns each key's holder afterwards.

    A holder's verdict is read only where the claim found another holder (rare), and the lookup read it already."""
    holders = state.exact_claim(keys, holder, stamp)
    for key, current in holders.items():
        if current != holder:
            held = state.verdict_of(current)
            if (
                held is not None
                and held.verdict is Verdict.DUPLICATE
                and state.exact_replace(key, current, holder, stamp)
            ):
                holders[key] = holder
    return holders


@dataclass(frozen=True, slots=True)
class Decision:
    """A verdict, and whether it was given before (the document is a redelivery)."""

    link: Link
    repeated: bool = False
    group_size: int | None = None
    """Size of the canonical's group after a duplicate joined it."""
    version: Document | None = None
    """The document as decided, when it is a new version of an id seen before (its own id)."""
    candidates: tuple[Neighbour, ...] | None = None
    """For a document the semantic stage searched with: its nearest same-language and cross-language
    canonicals scoring at least `semantic.candidate_floor`, links or not (None: it was not searched)."""


class Cascade:
    """Decides verdicts against a state store and, for the semantic stage, a vector store."""

    def __init__(
        self,
        settings: Settings,
        state: StateStore,
        vectors: VectorStore | None = None,
        model: ModelId | None = None,
    ) -> None:
        self._settings = settings
        self._state = state
        if state.band_layout is not settings.simhash.band_layout:
            raise ValueError(
                f"the state store indexes fingerprints in band layout {state.band_layout.name}, the settings say"
                f" {settings.simhash.bands}: open the store with the settings' layout"
            )
        self._bands = state.band_layout.keys
        """A fingerprint's band keys, in the state's layout."""
        self._stages = frozenset(settings.stages)
        self.semantic = Stage.SEMANTIC in self._stages
        # Asked for every document, three times: a Stage hashes in Python, a bool costs nothing.
        self._url_key = Stage.URL in self._stages
        self._content_key = Stage.CONTENT in self._stages
        if self.semantic and (vectors is None or model is None):
            raise ValueError("the semantic stage needs a vector store and an embedding model")
        self._vectors = vectors
        self._model = model
        if self.semantic and model is not None:
            self._thresholds = settings.semantic.thresholds_for(model.name)
            self._window_s = int(settings.semantic.window_hours * 3600)
        self._fact_check = settings.semantic.fact_check
        self._figure_check = settings.simhash.figure_check
        retention = settings.retention
        self._vectors_s = retention.vectors_s
        self.seconds: dict[Stage, float] = dict.fromkeys(Stage, 0.0)
        """Time spent in each stage's lookups and decisions, for the run summary."""

    @property
    def model(self) -> ModelId | None:
        """The embedding model of the semantic stage (None without it)."""
        return self._model

    def reads(self, docs: Sequence[Document], through: Stage = Stage.SEMANTIC) -> Reads:
        """What deciding (or resolving up to `through`) these documents reads first (pure)."""
        simhash = self._runs_simhash(through)
        return Reads(
            doc_ids=[doc.doc_id for doc in docs],
            exact_keys=[key for doc in docs for key in self._exact_keys(doc).values()],
            band_queries=[(doc.language, self._bands(doc.simhash)) for doc in docs] if simhash else [],
        )

    def identify(self, doc: Document) -> Document:
        """The document as the state knows it: itself, or, when its id was decided with other
        content, a new version under an id of its own (read-only). A link left pending (`_pending`) is
        the id's first verdict: other content under that id is a new version of it, never given it."""
        prior = self._state.verdict_of(doc.doc_id) or self._state.pending_of(doc.doc_id)
        if prior is None or prior.content is None or prior.content == content_key(doc.content_hash):
            return doc
        return replace(doc, doc_id=version_id(doc.doc_id, doc.content_hash), version_of=doc.doc_id)

    def standing(self, doc: Document) -> Link | None:
        """The verdict `doc` already has (read-only): a redelivery gets it again, and neither moves the stream's
        clock nor is decided afresh; None for a document to decide (a new one, or a new version of its id)."""
        return self._state.verdict_of(self.identify(doc).doc_id)

    def needs_vector(self, doc: Document) -> bool:
        """Whether `decide` will want this document's vector, given the state right now (read-only): one that
        stages 1 to 3 do not link, and one the figure check keeps apart, which becomes a canonical the
        semantic stage can find (its translation is linked to it)."""
        if not self.semantic:
            return False
        doc = self.identify(doc)
        if self._state.verdict_of(doc.doc_id) is not None:
            return False
        link = self._cheap(doc)
        return link is None or link.canonical_id == doc.doc_id

    def would_link(self, doc: Document, earlier: Document) -> bool:
        """Whether stages 1 to 3 would link `doc` to `earlier` were `earlier` a canonical (pure), or decide it
        against `earlier` (a near-duplicate whose figures differ goes to review, or stays apart)."""
        stages = self._stages
        return (
            (Stage.URL in stages and doc.url_hash == earlier.url_hash)
            or (Stage.CONTENT in stages and doc.content_hash == earlier.content_hash)
            or (
                Stage.SIMHASH in stages
                and doc.language == earlier.language
                and hamming(doc.simhash, earlier.simhash) <= self._settings.simhash.threshold(doc.language)
            )
        )

    def resolve(self, doc: Document, through: Stage) -> Decision | None:
        """Link `doc` to an existing canonical by the stages up to `through`, or None to pass it on.

        A stage agent that is not the last uses this: it never makes a canonical, so the
        documents it passes on are decided by `decide` at the last stage, which sees every
        canonical registered meanwhile (see docs/streaming.md, "Documents in flight").
        """
        doc = self.identify(doc)
        prior = self._state.verdict_of(doc.doc_id)
        if prior is not None:
            return Decision(prior, repeated=True, version=_version(doc))
        if (pending := self._pending(doc)) is not None:
            return self._recorded(doc, pending, self._attach(doc, pending))
        link = self._cheap(doc, timed=True, through=through)
        if link is None or link.canonical_id == doc.doc_id or self._was_canonical(doc):
            # Not found; or an exact key that names this very document: a redelivered copy of it
            # is being registered by the last stage right now, which will give its verdict; or a
            # canonical whose verdict expired, which the last stage registers again.
            return None
        group_size = self._attach(doc, link)
        return self._recorded(doc, link, group_size)

    def decide(self, doc: Document, vector: np.ndarray | None = None) -> Decision:
        """The verdict for `doc`, recorded in the state; a redelivered document gets its first verdict,
        and an id seen before with other content is decided as a new version (`Decision.version`)."""
        doc = self.identify(doc)
        prior = self._state.verdict_of(doc.doc_id)
        if prior is not None:
            return Decision(prior, repeated=True, version=_version(doc))
        if (pending := self._pending(doc)) is not None:
            return self._recorded(doc, pending, self._attach(doc, pending))
        link = self._cheap(doc, timed=True)
        candidates = None
        if link is None and self.semantic:
            if vector is None:
                raise ValueError(f"document {doc.doc_id} reached the semantic stage without a vector")
            started = perf_counter()
            link, candidates = self._semantic(doc, vector)
            self.seconds[Stage.SEMANTIC] += perf_counter() - started
        kept = link is not None and link.canonical_id != doc.doc_id and self._was_canonical(doc)
        if link is None or link.canonical_id == doc.doc_id or kept:
            apart = link.reason if link is not None and not kept else None  # the fact check kept it apart
            link, group_size = self._register(doc, vector, kept)
            if kept:
                link = replace(
                    link, reason="a canonical with members, its verdict expired: registered again, not linked"
                )
            elif apart is not None and link.verdict is Verdict.UNIQUE:
                link = replace(link, reason=apart)
        else:
            group_size = self._attach(doc, link)
        decision = self._recorded(doc, link, group_size)
        if decision.repeated or candidates is None:
            return decision
        return replace(decision, candidates=candidates)

    def _pending(self, doc: Document) -> Link | None:
        """The link an earlier attempt at `doc` began writing and did not finish (`StateStore.pending_of`):
        its claims (to its canonical, or under review to itself) may be in the state, so deciding again
        would find them and make a near-duplicate a URL duplicate, a document under review a canonical.
        Its writes are made again instead (each once). None where there is none, or where its canonical
        is no canonical by now (a relink since): decided afresh."""
        link = self._state.pending_of(doc.doc_id)
        if link is None:
            return None
        held = self._state.verdict_of(link.canonical_id)
        return None if held is not None and not held.verdict.canonical else link

    def _recorded(self, doc: Document, link: Link, group_size: int | None) -> Decision:
        """Record the verdict with the content it was given to; if another worker recorded one for
        this document first, that one stands. The verdict ages from the stream's clock where the document
        is older (a late crawl): kept for redelivery `verdicts_days` from when it was recorded."""
        link = with_content(link, content_key(doc.content_hash), max(doc.published_at, self._state.clock()))
        stood = self._state.record_verdict(link)
        if stood is not link and stood != link:  # (the identity test first: it is the usual case, and cheap)
            return Decision(stood, repeated=True, version=_version(doc))
        return Decision(stood, group_size=group_size, version=_version(doc))

    def _cheap(self, doc: Document, timed: bool = False, through: Stage = Stage.SIMHASH) -> Link | None:
        """Stages 1 to 3 (or up to `through`): a link to an existing canonical, or None.

        Both exact keys are looked up in one call (one round trip to Redis); its time
        is counted under the URL stage.
        """
        started = perf_counter()
        keys = self._exact_keys(doc)
        found = self._state.exact_lookup(list(keys.values())) if keys else {}
        for stage, key in keys.items():
            holder = found.get(key)
            if holder is not None and (link := self._exact_link(doc, stage, holder)) is not None:
                if timed:
                    self.seconds[Stage.URL] += perf_counter() - started
                return link
        if timed:
            self.seconds[Stage.URL] += perf_counter() - started
        if self._runs_simhash(through):
            started = perf_counter()
            link = self._simhash(doc)
            if timed:
                self.seconds[Stage.SIMHASH] += perf_counter() - started
            return link
        return None

    def _runs_simhash(self, through: Stage) -> bool:
        return Stage.SIMHASH in self._stages and through in (Stage.SIMHASH, Stage.SEMANTIC)

    def _exact_link(self, doc: Document, stage: Stage, holder: str) -> Link | None:
        """Link to the holder of an exact key: a canonical, or a document under review; None where the holder's
        id now names another document (`_reused`): the key is passed over, as if expired.

        A document under review holds its own keys until a person decides; its exact
        copies share its verdict: review, against the same suspected canonical. A holder
        without a verdict is a canonical (its verdict expired before its keys; a document
        under review has its keys expire with its verdict: `key_stamp`). A holder linked
        since (a canonical linked back by a person, whose own keys the relink re-pointed,
        while a stopped batch's claims still named it) leads to its canonical: linked to
        the holder, the batch was refused as stale every time it was decided again.
        """
        if holder != doc.doc_id:
            held = self._state.verdict_of(holder)
            if held is not None and held.verdict is Verdict.REVIEW:
                return Link(doc.doc_id, Verdict.REVIEW, held.canonical_id, stage)
            if held is not None and held.verdict is Verdict.DUPLICATE:
                if self._reused(doc, holder):
                    return None
                why = f"its {stage} key leads to {holder}, linked to {held.canonical_id} since"
                return Link(doc.doc_id, Verdict.DUPLICATE, held.canonical_id, stage, reason=why)
        return Link(doc.doc_id, Verdict.DUPLICATE, holder, stage)

    def _reused(self, doc: Document, holder: str) -> bool:
        """Whether a key holder that is a duplicate now got that verdict as another document: its id was a canonical
        whose verdict expired (`verdicts_days`) before its exact keys (`exact_days`), and the crawler reused it for
        a copy of another story, decided afresh. Its keys name a text it no longer is: followed to its canonical, a
        copy of its first text was linked to that other story (stage 1 or 2 merging two articles).

        The one other way a key names a duplicate is a batch stopped after its claims, whose canonical a person
        linked back before the redelivery (the relink re-points a canonical's own keys, not such claims): that
        document's pending link names the holder, and the key leads on to the holder's canonical. Read only for
        a holder that is a duplicate: rare."""
        pending = self._state.pending_of(doc.doc_id)
        return pending is None or pending.canonical_id != holder

    def _simhash(self, doc: Document) -> Link | None:
        """Link to the nearest canonical within the language's threshold whose figures agree with the document's
        (`_figures_differ`). When the nearest ones all state other figures (the same template filled in again),
        the document goes to review against the nearest, or stays apart (`simhash.figure_check`)."""
        candidates = self._state.band_candidates(doc.language, self._bands(doc.simhash))
        threshold = self._settings.simhash.threshold(doc.language)
        candidates = self._still_canonical(doc.simhash, candidates, threshold)
        found = nearest_canonical(doc.simhash, candidates, threshold)
        if found is None:
            return None
        canonical, distance = found
        differ = self._figures_differ(doc, canonical)
        if differ is not None:
            agreeing = [c for c in candidates if self._figures_differ(doc, c) is None]
            found = nearest_canonical(doc.simhash, agreeing, threshold)
            if found is None:
                return self._figures_apart(doc, canonical.doc_id, distance, differ)
            canonical, distance = found
        verdict, why = self._near(canonical.doc_id)
        return Link(doc.doc_id, verdict, canonical.doc_id, Stage.SIMHASH, distance, reason=why)

    def _still_canonical(self, simhash: int, candidates: list[Canonical], threshold: int) -> list[Canonical]:
        """The candidates within `threshold`, less those whose id has been given another verdict since their band
        entries were written: a canonical's verdict expires (`verdicts_days`) before its band entries
        (`bands_days`), and a crawler that then reuses the id for a copy of another story gets it linked there.
        Linked to its old band entry, a near-duplicate would be a duplicate of a duplicate (a chain).

        Only a candidate whose entry is older than `verdicts_days` can have a verdict given afresh (a verdict ages
        from no earlier than its document's date), so only those are read: in a stream, rarely one. The state says
        which (`verdict_expired`): after a sweep under a shorter `verdicts_days` than today's, a younger one too."""
        kept = []
        for candidate in candidates:
            if hamming(simhash, candidate.simhash) > threshold:
                continue
            if self._state.verdict_expired(candidate.published_at):
                held = self._state.verdict_of(candidate.doc_id)
                if held is not None and not held.verdict.canonical:
                    continue
            kept.append(candidate)
        return kept

    def _figures_differ(self, doc: Document, canonical: Canonical) -> str | None:
        """How the figures of a document and a near-duplicate canonical conflict, or None (no conflict, a
        canonical recorded without figures, or `simhash.figure_check` off)."""
        if self._figure_check == "off":
            return None
        return figures_conflict(doc.figures, canonical.figures)

    def _figures_apart(self, doc: Document, canonical_id: str, distance: int, differ: str) -> Link:
        """A near-duplicate whose figures differ from its nearest canonical's: under review against it, or a
        canonical of its own (`apart`), with the reason."""
        if self._figure_check == "apart":
            why = f"figure check: kept apart from {canonical_id} (simhash, {distance} bits): {differ}"
            return Link(doc.doc_id, Verdict.UNIQUE, doc.doc_id, reason=why)
        why = f"figure check: {differ} (this document vs its canonical, {distance} bits apart)"
        return Link(doc.doc_id, Verdict.REVIEW, canonical_id, Stage.SIMHASH, distance, reason=why)

    def _semantic(self, doc: Document, vector: np.ndarray) -> tuple[Link | None, tuple[Neighbour, ...]]:
        """Link to the nearest canonical vector within the cut-offs, and the candidate pairs: the best
        same-language and cross-language canonicals at or above the candidate floor.

        A vector whose document is not a canonical (an orphan, e.g. left by a version of this software
        that wrote vectors before verdicts) is never linked to nor kept as a candidate: it is removed,
        and the search runs again.
        """
        assert self._vectors is not None and self._model is not None
        floor = min(self._settings.semantic.candidate_floor, self._thresholds.review, self._thresholds.cross_review)
        clock = self._state.clock()
        window = self._window(doc.published_at, clock)
        while True:
            same, cross = (
                self._nearest(vector, doc.language, same_language, window) for same_language in (True, False)
            )
            found = [n for n in (same, cross) if n is not None and n.score >= floor]
            orphans = [n for n in found if not self._is_canonical(n)]
            if not orphans:
                break
            for orphan in orphans:
                self._vectors.remove(self._model, orphan.doc_id)
        kept = self._settings.semantic.candidate_floor
        candidates = tuple(n for n in found if n.score >= kept)
        match = semantic_match(same, cross, self._thresholds)
        if match is None:
            return None, candidates
        neighbour, verdict = match
        score = round(neighbour.score, 6)
        disagree = self._facts_disagree(doc, neighbour)
        if disagree is not None and self._fact_check == "apart":
            why = f"fact check: kept apart from {neighbour.doc_id} (semantic {score:.3f}): {disagree}"
            return Link(doc.doc_id, Verdict.UNIQUE, doc.doc_id, reason=why), candidates
        why = None if disagree is None else f"fact check: {disagree} (this document vs its canonical)"
        if disagree is not None:
            verdict = Verdict.REVIEW
        elif verdict is Verdict.DUPLICATE:
            verdict, why = self._near(neighbour.doc_id)
        link = Link(doc.doc_id, verdict, neighbour.doc_id, Stage.SEMANTIC, score, str(self._model), reason=why)
        return link, candidates

    def _facts_disagree(self, doc: Document, neighbour: Neighbour) -> str | None:
        """Which facts the document and the canonical it matched state differently; None when none do,
        when the canonical's vector carries no facts, or when `semantic.fact_check` is off.

        Only the match the cut-offs chose is checked: kept apart, the document becomes a canonical
        (its other neighbour, scoring lower, is not tried). Names are compared only within a language.
        """
        if self._fact_check == "off" or not neighbour.facts:
            return None
        same_language = neighbour.language == doc.language
        return disagreement(text_facts(doc.text), Facts.from_json(neighbour.facts), same_language=same_language)

    def _window(self, published_at: int, clock: int) -> tuple[int, int] | None:
        """The search window [low, high] around `published_at`, starting no earlier than the vectors'
        horizon: an expired vector is never searched for, even before the sweep removes it (a hit there
        would hide the live canonicals below it). None when the whole window has expired."""
        low, high = published_at - self._window_s, published_at + self._window_s
        if self._vectors_s:
            low = max(low, clock - self._vectors_s)
        return None if low > high else (low, high)

    def _nearest(
        self, vector: np.ndarray, language: str, same_language: bool, window: tuple[int, int] | None
    ) -> Neighbour | None:
        """The store's nearest canonical in the window."""
        assert self._vectors is not None and self._model is not None
        if window is None:
            return None
        low, high = window
        return self._vectors.nearest_between(self._model, vector, low, high, language, same_language)

    def _is_canonical(self, neighbour: Neighbour) -> bool:
        """Whether a vector is a canonical's: its verdict says so, or its verdict has expired (vectors hold
        canonicals only; one whose verdict could still be there and is not is an orphan)."""
        held = self._state.verdict_of(neighbour.doc_id)
        if held is None:
            return self._state.verdict_expired(neighbour.published_at)
        return held.verdict.canonical

    def _was_canonical(self, doc: Document) -> bool:
        """Whether a document about to be linked is a canonical whose verdict expired, with members of its own:
        a redelivery of an old one, or its id reused by the crawler for other content once its verdict had
        gone, however recent that content's date. Linked now, its members' links would be chains; it is
        registered again instead. (The batch's own group sizes are read with its verdicts: no round trip.)"""
        return self._state.group_size(doc.doc_id) > 1

    def _near(self, canonical_id: str) -> tuple[Verdict, str | None]:
        """A near-duplicate's verdict: a link, or review once the group reaches its size cap (the percolation
        alarm), with the reason."""
        size, cap = self._state.group_size(canonical_id), self._settings.group_cap
        if size < cap:
            return Verdict.DUPLICATE, None
        return Verdict.REVIEW, f"group cap: the group of {canonical_id} has {size} members, group_cap is {cap}"

    def _exact_keys(self, doc: Document) -> dict[Stage, str]:
        """The exact keys of the enabled exact stages, URL first."""
        keys = {}
        if self._url_key:
            keys[Stage.URL] = URL_KEY + doc.url_hash
        if self._content_key:
            keys[Stage.CONTENT] = CONTENT_KEY + doc.content_hash
        return keys

    def _attach(self, doc: Document, link: Link) -> int | None:
        """Point a linked document's exact keys at its canonical, so its copies find the canonical;
        a document under review keeps its keys for itself (see `_exact_link`).

        Returns the canonical's group size after a duplicate joined it.
        """
        keys = [key for stage, key in self._exact_keys(doc).items() if stage is not link.stage]
        duplicate = link.verdict is Verdict.DUPLICATE
        if keys:
            published = doc.published_at
            if link.verdict is Verdict.REVIEW:  # its keys expire with its verdict, which ages from the clock
                published = max(published, self._state.clock())  # where later (a late crawl: `_recorded`)
            stamp = key_stamp(link.verdict, published, self._settings.retention)
            claim_keys(self._state, keys, link.canonical_id if duplicate else doc.doc_id, stamp)
        return self._state.grow_group(link.canonical_id, doc.published_at) if duplicate else None

    def _register(self, doc: Document, vector: np.ndarray | None, kept: bool = False) -> tuple[Link, int | None]:
        """Make `doc` a canonical: claim its exact keys, then its bands and its vector.

        Claims are set-if-absent, so when another worker claimed a key first the
        document becomes that canonical's duplicate, and any key it did claim is
        re-pointed to that canonical: one canonical per exact key, never a chain.
        A canonical `kept` (`_was_canonical`) stays one: a key another canonical
        claimed after its own expired stays with that one.
        """
        keys = self._exact_keys(doc)
        holders = claim_keys(self._state, list(keys.values()), doc.doc_id, doc.published_at) if keys else {}
        for stage, key in keys.items():
            holder = holders[key]
            if holder != doc.doc_id and not kept:
                for own, own_holder in holders.items():
                    if own_holder == doc.doc_id:
                        self._state.exact_replace(own, doc.doc_id, holder)
                link = Link(doc.doc_id, Verdict.DUPLICATE, holder, stage)
                return link, self._state.grow_group(holder, doc.published_at)
        if Stage.SIMHASH in self._stages:
            bands = self._bands(doc.simhash)
            self._state.add_canonical(doc.doc_id, doc.simhash, doc.language, bands, doc.published_at, doc.figures)
        model = None
        if self.semantic and vector is not None:
            assert self._vectors is not None and self._model is not None
            facts = payload_facts(doc.text)  # for the fact check of later documents
            self._vectors.add(self._model, doc.doc_id, vector, doc.published_at, doc.language, facts)
            model = str(self._model)
        return Link(doc.doc_id, Verdict.UNIQUE, doc.doc_id, model=model), None


def with_content(link: Link, content: str, published_at: int | None = None) -> Link:
    """`replace(link, content=content)` (and `published_at`, when given) at a third of its cost (every
    decision makes one); tests/test_batched_features.py holds it to `replace` for every field of Link."""
    return Link(
        link.doc_id,
        link.verdict,
        link.canonical_id,
        link.stage,
        link.score,
        link.model,
        link.seq,
        content,
        link.reason,
        link.published_at if published_at is None else published_at,
    )


def _version(doc: Document) -> Document | None:
    return doc if doc.version_of is not None else None

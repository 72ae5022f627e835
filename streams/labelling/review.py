"""Review documents as pairs for the labelling screen, and what a decision on one does.

A `review` verdict is the cascade saying "probably a duplicate of this canonical, but not sure
enough to suppress it": a semantic score between the review and link cut-offs, a near-duplicate
(SimHash or semantic) of a group at its size cap, or one whose figures or facts differ from its
canonical's (the figure check, the fact check: the link's reason, shown). `dedup review` shows each such document (`a`)
beside its suspected canonical (`b`) on the labelling screen, oldest first; a person's decision is
written as a label (the same labels.jsonl that calibration reads) and applied at once as a relink
(streams.core.relink), which carries the document's exact copies along.

What is shown: only the document under review itself (stage `simhash` or `semantic`); its exact
copies (stage `url` or `content`, sharing its review verdict) follow its decision. A review that is
decided (its latest verdict is no longer `review`) is not shown again, so a session is resumable
from the verdicts alone, whatever the labels file holds.

Texts come from the candidate records of the semantic stage (every document it embedded, and the
canonicals it compared them to, have one) and otherwise from the published articles. A SimHash
review was never embedded: its score is a Hamming distance (bits of 64), not a cosine, so it has no
similarity band and says nothing about the semantic cut-offs. Its decision is applied as a relink
like any other (the new link record keeps who decided, why and the verdict it replaces) but is not
written to labels.jsonl, whose pairs are cosine pairs that calibration fits; nor is a semantic
review for which no record says whether a and b share a language (fit reads the two kinds apart).
A text found nowhere is said so on the screen: the decision can still be made from what is on record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from streams.config import SemanticSettings
from streams.core.model import Stage, Verdict
from streams.core.relink import Change, Label, Plan
from streams.labelling.pairs import BAND_LABELS, LabelWriter, Pair, band_counts, band_of, label_record
from streams.labelling.screen import DecisionCallback, LabelApp
from streams.reporting.inert import inert

if TYPE_CHECKING:
    from streams.runner.relink import RelinkResult

Lookup = Callable[[str], Mapping[str, Any] | None]
"""A document id to its candidate record (or its published article), or None."""
Apply = Callable[[Label], "RelinkResult"]
"""Applies one person's decision as a relink (files or service) and says what it changed."""

REVIEWED = (Stage.SIMHASH, Stage.SEMANTIC)
"""Stages whose reviews a person decides; a review by `url` or `content` is an exact copy that follows them."""
SIMHASH_MODEL = "simhash"
"""The `model` of a SimHash review pair: it has no embedding model, and is never written as a label."""
LANGUAGES_UNKNOWN = "languages_unknown"
"""In a semantic review pair's `extra` when no record says whether a and b share a language: its
decision is applied but written as no label, which fit would count on a side it cannot tell."""
NO_TEXT = "(text not on record: no candidate record and no published article found; pass --articles)"


def article_text(article: Mapping[str, Any]) -> str | None:
    """The normalised headline + body of a published article, as the cascade compared it; None if it has none."""
    from streams.features.extract import ExtractionError, extract_article
    from streams.features.text import document_text
    from streams.records.article import body_text

    text = body_text(dict(article))
    if text is None and isinstance(article.get("html"), str):
        try:
            title, body = extract_article(article["html"], 0)
        except ExtractionError:
            return None
        text = document_text(article.get("title") or title, body)
    return text or None


def review_pairs(
    links: Iterable[Mapping[str, Any]],
    candidate: Lookup,
    article: Lookup | None = None,
    limit: int | None = None,
) -> list[Pair]:
    """The undecided reviews as pairs, in the order of `links` (oldest decision first), at most `limit`.

    `links` are the latest link records, one per document; `candidate` finds a document's candidate
    record (title and text); `article` its published article, for what the semantic stage never saw.
    """
    languages: dict[str, str | None] = {}
    reviews: list[Mapping[str, Any]] = []
    for record in links:
        languages[record["doc_id"]] = record.get("language")
        if record.get("verdict") == Verdict.REVIEW.value and record.get("stage") in REVIEWED:
            reviews.append(record)
    if limit is not None:
        reviews = reviews[:limit]
    return [_pair(record, languages.get(record["canonical_id"]), candidate, article) for record in reviews]


def _pair(record: Mapping[str, Any], b_linked: str | None, candidate: Lookup, article: Lookup | None) -> Pair:
    """The pair of one review. Whether a and b share a language is a's candidate record's word on
    its neighbour b (as the stage compared them), else the two languages, from b's own candidate
    record or link record; neither known, the pair is marked LANGUAGES_UNKNOWN."""
    a, b = record["doc_id"], record["canonical_id"]
    a_found, b_found = candidate(a), candidate(b)
    a_title, a_text = _title_and_text(a, a_found, article)
    b_title, b_text = _title_and_text(b, b_found, article)
    neighbour = next((n for n in (a_found or {}).get("neighbours") or () if n.get("doc_id") == b), {})
    a_language = record.get("language") or (a_found or {}).get("language")
    b_language = (b_found or {}).get("language") or b_linked or neighbour.get("language")
    same = neighbour.get("same_language")
    if not isinstance(same, bool) and a_language is not None and b_language is not None:
        same = a_language == b_language
    texts = {"a_title": a_title, "a_text": a_text, "a_language": a_language}
    texts |= {"b_title": b_title, "b_text": b_text, "b_language": b_language}
    score = float(record["score"]) if record.get("score") is not None else 0.0
    if record["stage"] == Stage.SIMHASH.value:
        model, band = SIMHASH_MODEL, ""
        extra: dict[str, Any] = {"stage": Stage.SIMHASH.value, "distance": int(score)}
        if isinstance(reason := record.get("reason"), str):
            extra["reason"] = reason  # the figure check's, or the group cap's
    else:
        model, band = str(record.get("model") or "unknown"), band_of(score) or ""
        extra = {} if isinstance(same, bool) else {LANGUAGES_UNKNOWN: True}
    return Pair(a, b, score, band, model, same is not False, **texts, source="review", verdict="review", extra=extra)


SHOWN_CHARS = SemanticSettings.model_fields["candidate_text_chars"].default
"""Characters of a published article's text a pair shows: what a candidate record keeps by default. The word
diff is quadratic, and a SimHash review's texts come whole from the published articles (up to
`max_record_bytes`): 80,000 words kept the screen from showing its first pair for minutes."""


def _title_and_text(
    doc_id: str, found: Mapping[str, Any] | None, article: Lookup | None
) -> tuple[str | None, str | None]:
    if found is not None and found.get("text"):
        return found.get("title"), found["text"]
    published = article(doc_id) if article is not None else None
    if published is None:
        return None, None
    title, text = published.get("title"), article_text(published)
    return (title[:SHOWN_CHARS] if isinstance(title, str) else None), (text and text[:SHOWN_CHARS])


def is_simhash(pair: Pair) -> bool:
    return pair.extra.get("stage") == Stage.SIMHASH.value


def calibrates(pair: Pair) -> bool:
    """Whether the decision is a labelled pair for calibration: a cosine of an embedding model, in a band,
    between documents known to share a language or not (fit reads the two kinds apart)."""
    return not is_simhash(pair) and pair.band in BAND_LABELS and not pair.extra.get(LANGUAGES_UNKNOWN)


def decide(pair: Pair, duplicate: bool, apply: Apply, writer: LabelWriter | None, by: str | None) -> str:
    """Record a person's decision on a review and apply it as a relink; returns what it changed.

    The label goes to labels.jsonl first (fsync'd): the judgement is a person's time and holds
    whether or not it can be applied. A relink that is refused raises with the reason, so the
    screen keeps the review on it; the review stays undecided and comes back next session.
    """
    if writer is not None and calibrates(pair):
        writer.write(label_record(pair, duplicate, by))
    result = apply(Label(pair.a, pair.b, duplicate, by))
    return describe(result.plan, pair.a, duplicate)


def describe(plan: Plan, doc_id: str, duplicate: bool) -> str:
    """One line on what a decision changed; RuntimeError with the reason when it was refused."""
    for refusal in plan.refused:
        if refusal.doc_id == doc_id:
            raise RuntimeError(refusal.reason)
    head: Change | None = next((c for c in plan.changes if c.doc_id == doc_id and c.follows is None), None)
    if head is None:
        if doc_id in plan.unchanged:
            return f"{doc_id}: already {'a duplicate' if duplicate else 'not a duplicate'}, nothing changed"
        raise RuntimeError(f"the relink made no change to {doc_id}")
    link = head.link
    if link.verdict is Verdict.DUPLICATE:
        now = f"a duplicate of {link.canonical_id}"
    else:
        now = f"{link.verdict} (a canonical{', published' if head.publishes else ''})"
    copies = sum(1 for c in plan.changes if c.follows == doc_id)
    follow = f"; {copies} exact {'copy follows' if copies == 1 else 'copies follow'} it" if copies else ""
    return f"applied: {doc_id} is {now}{follow}"


class ReviewApp(LabelApp):
    """The labelling screen over review pairs: says which stage raised each review, shows a SimHash
    review's Hamming distance (not a cosine) and a missing text as missing, and reports each relink."""

    def __init__(
        self,
        pairs: Sequence[Pair],
        on_decision: Callable[[Pair, bool], str],
        *,
        title: str = "dedup review",
        subtitle: str = "",
    ) -> None:
        self.applied: list[str] = []
        """What each decision of this session changed, in order."""

        def decided(pair: Pair, duplicate: bool) -> object:
            message = on_decision(pair, duplicate)
            self.applied.append(message)
            self.notify(inert(str(message)), timeout=6, markup=False)  # ids are the crawl's: shown, not markup
            return message

        callback: DecisionCallback = decided
        # Resuming is by verdict: the pairs given are the undecided reviews, whatever the labels file holds.
        super().__init__(pairs, callback, labels=None, title=title, subtitle=subtitle)

    def refresh_pair(self) -> None:
        super().refresh_pair()
        pair = self.current
        if pair is None:
            done = sum(1 for p in self.pairs if p.key in self.labels)
            message = f"Nothing left to review: {done} of {len(self.pairs)} reviews decided and applied"
            if self.skipped:
                message += f", {len(self.skipped)} skipped (shown again next time)"
            self.query_one("#pair", Static).update(Text(message + ". b: back, q: quit.", style="bold"))
            return
        for side, text in (("a", pair.a_text), ("b", pair.b_text)):
            if text is None:
                self.query_one(f"#{side}-text", Static).update(Text(NO_TEXT, style="italic yellow"))

    def _pair_line(self, pair: Pair) -> Text:
        assert self.cursor is not None
        line = Text.assemble((f"review {self.cursor + 1} of {len(self.pairs)}", "bold"), "   ")
        if is_simhash(pair):
            distance = int(pair.extra.get("distance", pair.score))
            line.append("SimHash review", style="bold magenta")
            why = inert(pair.extra["reason"]) if "reason" in pair.extra else "no reason on record"
            line.append(f": Hamming distance {distance} of 64 bits, {why}")
            line.append("   (no cosine: applied, not written to the labels)", style="italic")
        else:
            line.append("semantic review", style="bold")
            line.append(f": score {pair.score:.4f}   band ")
            line.append(pair.band or "below 0.75", style="bold")
            line.append(f"   model {inert(pair.model)}   ")
            if pair.extra.get(LANGUAGES_UNKNOWN):
                line.append("languages not on record (applied, not written to the labels)", style="italic")
            else:
                line.append("same language" if pair.same_language else "cross-language")
        if pair.key in self.labels:
            earlier = "duplicate" if self.labels[pair.key] else "not a duplicate"
            line.append(f"   decided: {earlier} (a new key replaces it)", style="italic")
        return line

    def counts_table(self) -> Table:
        """Decided / total and duplicates per band, and a row for SimHash reviews."""
        semantic = [pair for pair in self.pairs if not is_simhash(pair)]
        counts = band_counts(semantic, self.labels)
        groups = [same for same in (True, False) if any(counts[(same, b)].total for b in BAND_LABELS)]
        table = Table(box=None, padding=(0, 2), show_edge=False, header_style="bold")
        table.add_column("band")
        for same in groups or [None]:
            name = "reviews" if same is None else "same language" if same else "cross-language"
            table.add_column(f"{name}: decided/total", justify="right")
            table.add_column("duplicates", justify="right")
        current = self.current
        for band in BAND_LABELS if semantic else ():
            row = [band]
            for same in groups:
                count = counts[(same, band)]
                row += [f"{count.labelled}/{count.total}", str(count.duplicates)]
            bold = current is not None and not is_simhash(current) and current.band == band
            table.add_row(*row, style="bold" if bold else None)
        simhash = [pair for pair in self.pairs if is_simhash(pair)]
        if simhash:
            decided = [pair for pair in simhash if pair.key in self.labels]
            row = ["SimHash", f"{len(decided)}/{len(simhash)}", str(sum(self.labels[p.key] for p in decided))]
            row += [""] * (1 + 2 * max(len(groups), 1) - len(row))
            table.add_row(*row, style="bold" if current is not None and is_simhash(current) else None)
        return table

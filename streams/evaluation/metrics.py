"""Precision and recall per kind of duplicate, from verdicts and ground truth."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from streams.evaluation.corpus import NEGATIVE, ORIGINAL, Labelled


@dataclass(frozen=True)
class KindScore:
    kind: str
    total: int
    linked: int
    correct: int
    reviewed: int = 0
    """Sent to review (not suppressed): counted apart from links."""

    @property
    def recall(self) -> float:
        """Copies linked to a canonical of their own story, out of all copies of this kind."""
        return self.correct / self.total if self.total else 1.0

    @property
    def precision(self) -> float:
        """Links of this kind that point into the right story, out of all links of this kind."""
        return self.correct / self.linked if self.linked else 1.0


def score_by_kind(stream: Iterable[Labelled], links: Iterable[dict[str, Any]]) -> dict[str, KindScore]:
    """Score the verdicts in `links` (link records) against the stream's ground truth.

    A copy counts as found when its verdict is `duplicate` and its canonical belongs to the
    same story. Originals and hard negatives count as wrongly linked when they are linked at all.
    """
    truth = {item.doc_id: item for item in stream}
    verdicts = {link["doc_id"]: link for link in links}
    tallies: dict[str, list[int]] = {}
    for doc_id, item in truth.items():
        link = verdicts[doc_id]
        linked = link["verdict"] == "duplicate"
        right = linked and truth[link["canonical_id"]].group == item.group
        is_copy = item.kind not in (ORIGINAL, NEGATIVE)
        tally = tallies.setdefault(item.kind, [0, 0, 0, 0])
        tally[0] += 1
        tally[1] += linked
        tally[2] += right and is_copy
        tally[3] += link["verdict"] == "review"
    return {kind: KindScore(kind, *values) for kind, values in tallies.items()}


def order_free_recall(stream: Iterable[Labelled], links: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Per kind of copy, the share that ends in the same group as its story's original.

    Unlike `score_by_kind`, this does not care which member of a story became the
    canonical: with several partitions a copy may be seen before its original, take
    the canonical's place, and the original is linked to it instead.
    """
    items = list(stream)
    verdicts = {link["doc_id"]: link for link in links}

    def group_of(doc_id: str) -> str:
        link = verdicts[doc_id]
        return link["canonical_id"] if link["verdict"] == "duplicate" else doc_id

    originals = {item.group: group_of(item.doc_id) for item in items if item.kind == ORIGINAL}
    found: dict[str, list[int]] = {}
    for item in items:
        if item.kind in (ORIGINAL, NEGATIVE):
            continue
        tally = found.setdefault(item.kind, [0, 0])
        tally[0] += 1
        tally[1] += originals.get(item.group) == group_of(item.doc_id)
    return {kind: hits / total for kind, (total, hits) in found.items()}

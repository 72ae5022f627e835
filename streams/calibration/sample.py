"""A stratified random sample of the semantic stage's candidate pairs, for a person to label.

Every candidate record (schemas/candidate.schema.json) holds a document's best same-language and
best cross-language canonical scoring at least the floor, links or not; each is a pair (a = the
document, b = the canonical). Pairs are drawn per similarity band, and same-language and
cross-language pairs apart, because that is how `fit` reads them: a plain random sample would be
nearly all low-score pairs and say little about the bands where the cut-offs are chosen.

b's title and text come from b's own candidate record (every embedded canonical has one), so a
pair whose b has none (its record not yet on the topic, or of another model) is left out.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streams.labelling.pairs import BAND_LABELS, Pair, band_of

if TYPE_CHECKING:
    from streams.config import Settings

DEFAULT_PER_BAND = 25
DEFAULT_SEED = 1


@dataclass(frozen=True, slots=True)
class _Found:
    """A pair before its texts are read: what stratifying and sorting need."""

    a: str
    b: str
    score: float
    band: str
    same_language: bool
    verdict: str | None


@dataclass
class Sample:
    """The drawn pairs and what they were drawn from."""

    model: str
    per_band: int
    pairs: list[Pair]
    available: dict[tuple[bool, str], int]
    """Pairs there were to draw from, per (same_language, band), every band present."""
    without_b: int = 0
    """Pairs left out because b has no candidate record of the model."""
    models: dict[str, int] = field(default_factory=dict)
    """Candidate records per model."""

    def drawn(self, same_language: bool, band: str) -> int:
        return min(self.per_band, self.available[(same_language, band)])

    def short(self) -> list[tuple[bool, str, int]]:
        """(same_language, band, pairs there were) for every band with fewer pairs than asked."""
        return [(same, band, n) for (same, band), n in self.available.items() if n < self.per_band]


def choose_model(present: Mapping[str, int], wanted: str | None) -> str:
    """The model to calibrate: the one named (name@version, or a name only one version has), else
    the only one present. ValueError when there is none, or several and none is named: thresholds
    belong to one model, and scores of two models must never be mixed."""
    listing = ", ".join(f"{model} ({count})" for model, count in sorted(present.items()))
    if wanted:
        if wanted in present:
            return wanted
        named = [model for model in present if model.split("@", 1)[0] == wanted]
        if len(named) == 1:
            return named[0]
        if named:
            raise ValueError(f"several versions of {wanted} are present: {listing}; name one as NAME@VERSION")
        raise ValueError(f"no records of model {wanted}; present: {listing or 'none'}")
    if not present:
        raise ValueError("no candidate records: nothing was embedded yet (run the semantic stage first)")
    if len(present) > 1:
        raise ValueError(f"records of several models are present: {listing}; choose one with --model NAME@VERSION")
    return next(iter(present))


def draw(
    records: Iterable[Mapping[str, Any]],
    lookup: Callable[[str], Mapping[str, Any] | None],
    per_band: int = DEFAULT_PER_BAND,
    model: str | None = None,
    seed: int = DEFAULT_SEED,
) -> Sample:
    """Draw up to `per_band` pairs in each band and kind (same- or cross-language) for one model.

    `records` are the candidate records (read once); `lookup` finds one by document id, for the
    titles and texts of the pairs drawn. The same records and seed give the same sample, whatever
    order the records come in: each band's pairs are sorted before drawing. The sample is then
    shuffled, so a person labelling it in file order is not led by the score.
    """
    if per_band < 1:
        raise ValueError(f"--per-band must be at least 1, got {per_band}")
    found: dict[str, list[_Found]] = {}
    embedded: dict[str, set[str]] = {}
    counts: Counter[str] = Counter()
    for record in records:
        name = str(record["model"])
        counts[name] += 1
        embedded.setdefault(name, set()).add(record["doc_id"])
        for neighbour in record.get("neighbours") or ():
            band = band_of(float(neighbour["score"]))
            if band is None:
                continue  # a floor set below the lowest band
            found.setdefault(name, []).append(
                _Found(
                    record["doc_id"],
                    neighbour["doc_id"],
                    float(neighbour["score"]),
                    band,
                    bool(neighbour["same_language"]),
                    record.get("verdict"),
                )
            )
    chosen = choose_model(counts, model)
    ids = embedded[chosen]
    pairs = [pair for pair in found.get(chosen, []) if pair.b in ids]
    strata: dict[tuple[bool, str], list[_Found]] = {(same, band): [] for same in (True, False) for band in BAND_LABELS}
    for pair in pairs:
        strata[(pair.same_language, pair.band)].append(pair)
    rng = random.Random(seed)
    drawn: list[_Found] = []
    for stratum in strata.values():
        stratum.sort(key=lambda p: (p.a, p.b))
        drawn.extend(rng.sample(stratum, min(per_band, len(stratum))))
    rng.shuffle(drawn)
    return Sample(
        model=chosen,
        per_band=per_band,
        pairs=[_with_texts(pair, chosen, lookup) for pair in drawn],
        available={key: len(stratum) for key, stratum in strata.items()},
        without_b=len(found.get(chosen, [])) - len(pairs),
        models=dict(counts),
    )


def _with_texts(found: _Found, model: str, lookup: Callable[[str], Mapping[str, Any] | None]) -> Pair:
    a, b = lookup(found.a), lookup(found.b)
    if a is None or b is None:  # read a moment ago: only a journal changed underneath could do this
        raise RuntimeError(f"candidate record of {found.a if a is None else found.b} disappeared while sampling")
    return Pair(
        a=found.a,
        b=found.b,
        score=found.score,
        band=found.band,
        model=model,
        same_language=found.same_language,
        a_title=a.get("title"),
        a_text=a.get("text"),
        a_language=a.get("language"),
        b_title=b.get("title"),
        b_text=b.get("text"),
        b_language=b.get("language"),
        source="sample",
        verdict=found.verdict,
    )


def from_state(state_dir: Path, **options: Any) -> Sample:
    """Draw from a state folder's journal (what `dedup run` kept)."""
    from streams.stores.journal import JOURNAL_FILE, Journal

    folder = Path(state_dir)
    if not (folder / JOURNAL_FILE).is_file():
        raise ValueError(f"{folder} holds no journal ({JOURNAL_FILE}): not a state folder of `dedup run`")
    journal = Journal(folder)
    try:
        return draw(journal.candidates(), journal.candidate, **options)
    finally:
        journal.close()


def from_topic(settings: Settings, **options: Any) -> tuple[Sample, list[str]]:
    """Draw from the service's candidates topic, read to its current end; and its unreadable records."""
    from streams.kafka.journal import latest

    current = latest(settings, settings.topics.candidates)
    return draw(current.records.values(), current.records.get, **options), current.bad

"""Precision per similarity band, with a Wilson interval, and the cut-offs that meet a tolerance.

A band's precision is the share of its labelled pairs that are duplicates: what linking every pair
in it would get right. The link cut-off is the lowest band edge from which every labelled band up
has at least the wanted precision (the review cut-off likewise, with a looser tolerance): one
band below the tolerance above a cut-off would be wrong merges the cut-off lets through.

The rule reads point estimates; with 25 labels a band's 95% interval is some 0.15 wide, which is
why the intervals are printed beside them, for a person to see how sure each band is. Bands
without labels carry no evidence either way: they neither qualify nor stop the search (a model
may never score a translation above 0.96), and a cut-off is never put below the lowest labelled
band that qualifies.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streams.labelling.pairs import BAND_LABELS, BANDS, band_of, is_cosine

Z95 = 1.959963984540054
"""The standard normal quantile of 0.975: a two-sided 95% interval."""

SIDES: tuple[tuple[str, bool], ...] = (("same", True), ("cross", False))
"""The two kinds of pair, as the JSON output names them, and their `same_language`."""

_EPSILON = 1e-12  # 4 of 5 is exactly 0.8 as a tolerance, whatever the float division rounds to


def wilson(duplicates: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion `duplicates / n`.

    Unlike the normal approximation it stays inside [0, 1] and is not zero-wide at 0 or n out of n,
    which is where the bands that decide a link cut-off sit. (0.0, 1.0) for no observations.
    """
    if n < 0 or not 0 <= duplicates <= n:
        raise ValueError(f"need 0 <= duplicates <= n, got {duplicates} of {n}")
    if n == 0:
        return 0.0, 1.0
    p = duplicates / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    low, high = max(0.0, centre - half), min(1.0, centre + half)
    # At 0 or n out of n the bound is exactly 0 or 1; floating point leaves a hair either side.
    return (0.0 if duplicates == 0 else low), (1.0 if duplicates == n else high)


@dataclass(frozen=True, slots=True)
class BandFit:
    """The labelled pairs of one band and kind (same- or cross-language)."""

    same_language: bool
    low: float
    high: float
    n: int
    duplicates: int

    @property
    def precision(self) -> float | None:
        return self.duplicates / self.n if self.n else None

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.duplicates, self.n)

    @property
    def label(self) -> str:
        return f"{self.low:.2f}-{self.high:.2f}"

    def meets(self, target: float) -> bool:
        return self.n > 0 and self.duplicates >= target * self.n - _EPSILON * self.n

    def to_json(self) -> dict[str, Any]:
        ci_low, ci_high = self.interval
        return {
            "same_language": self.same_language,
            "low": self.low,
            "high": self.high,
            "n": self.n,
            "duplicates": self.duplicates,
            "precision": self.precision,
            "ci_low": round(ci_low, 6),
            "ci_high": round(ci_high, 6),
        }


def cut_off(bands: Iterable[BandFit], target: float) -> float | None:
    """The lowest band edge from which every labelled band up meets `target` (point estimates);
    None when the top labelled band does not. Unlabelled bands are passed over."""
    edge = None
    for band in sorted(bands, key=lambda b: b.low, reverse=True):
        if band.n == 0:
            continue
        if not band.meets(target):
            break
        edge = band.low
    return edge


@dataclass
class Fit:
    """Precision per band and kind, and the cut-offs for one model."""

    model: str
    """name@version of the model whose scores were fitted."""
    bands: list[BandFit]
    """Every band of both kinds, same-language first, each from its low edge up; empty ones too."""
    precision: float
    review_precision: float
    link: dict[str, float | None] = field(default_factory=dict)
    review: dict[str, float | None] = field(default_factory=dict)
    labels: int = 0
    below: dict[str, int] = field(default_factory=dict)
    """Labelled pairs that score below every band (possible when another model re-scores them)."""

    @property
    def model_name(self) -> str:
        """The model's name without its version: what `[semantic.thresholds.<name>]` is keyed by."""
        return self.model.split("@", 1)[0]

    def side(self, same_language: bool) -> list[BandFit]:
        return [band for band in self.bands if band.same_language == same_language]

    def to_json(self) -> dict[str, Any]:
        """The stable `--json` object: labelled bands only (every number a number), then the cut-offs."""
        return {
            "model": self.model,
            "labels": self.labels,
            "precision": self.precision,
            "review_precision": self.review_precision,
            "bands": [band.to_json() for band in self.bands if band.n],
            "link": dict(self.link),
            "review": dict(self.review),
        }


@dataclass(frozen=True, slots=True)
class Labelled:
    """What a fit needs of one labelled pair."""

    score: float
    same_language: bool
    duplicate: bool


def labelled(records: Iterable[Mapping[str, Any]]) -> list[Labelled]:
    """The labelled pairs of labels.jsonl records (the band is read from the score, as the stage
    would compare it)."""
    return [Labelled(float(r["score"]), bool(r["same_language"]), bool(r["label"])) for r in records]


def band_index(score: float) -> int | None:
    """Which of BANDS a score falls in, as `band_of` reads it; None below the lowest band.

    ValueError for a score that is no cosine (7.0): in any band it would move that band's cut-off.
    """
    if not is_cosine(score):
        raise ValueError(f"score {score} is no cosine")
    label = band_of(score)
    return None if label is None else BAND_LABELS.index(label)


def fit(model: str, pairs: Iterable[Labelled], precision: float = 0.99, review_precision: float = 0.8) -> Fit:
    """Precision per band and kind, and the link and review cut-offs (the review one never above the link one)."""
    for name, value in (("precision", precision), ("review precision", review_precision)):
        if not 0.0 < value <= 1.0:
            raise ValueError(f"{name} must be above 0 and at most 1, got {value}")
    counts = {(same, index): [0, 0] for _, same in SIDES for index in range(len(BANDS))}
    below = {side: 0 for side, _ in SIDES}
    total = 0
    for pair in pairs:
        total += 1
        index = band_index(pair.score)
        if index is None:
            below["same" if pair.same_language else "cross"] += 1
            continue
        count = counts[(pair.same_language, index)]
        count[0] += 1
        count[1] += pair.duplicate
    bands = [
        BandFit(same, low, high, *counts[(same, index)]) for _, same in SIDES for index, (low, high) in enumerate(BANDS)
    ]
    result = Fit(model, bands, precision, review_precision, labels=total, below=below)
    for side, same in SIDES:
        link = cut_off(result.side(same), precision)
        review = cut_off(result.side(same), review_precision)
        if link is not None and (review is None or review > link):
            review = link  # a stricter review tolerance than the link one: review nothing the link would not
        result.link[side], result.review[side] = link, review
    return result

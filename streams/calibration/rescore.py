"""Labelled pairs scored again by another model: the regression test before a model change.

The labels keep both documents' texts (the normalised headline + body the stage embedded), so a
new model can score the same pairs without the documents; the person's labels stay as they were.
Its table and cut-offs are fitted as for the model that was labelled, with one caveat printed
beside them: the pairs were drawn by the old model's scores, so bands the new model puts pairs
in that the old one did not may hold few of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from streams.core.ports import Embedder
from streams.labelling.pairs import band_of


@dataclass
class Rescored:
    """The labels with the new model's scores, and the labels it could not score (no texts)."""

    model: str
    records: list[dict[str, Any]]
    without_text: int


def rescore(labels: Sequence[Mapping[str, Any]], embedder: Embedder) -> Rescored:
    """Each label record with `score`, `band` and `model` of `embedder`; the label itself unchanged.

    Every distinct text is embedded once; a pair's score is the cosine of its two unit vectors, as
    the vector store computes it. A pair scoring below the lowest band keeps `band` null.
    """
    usable = [r for r in labels if r.get("a_text") and r.get("b_text")]
    texts = sorted({r[side] for r in usable for side in ("a_text", "b_text")})
    index = {text: row for row, text in enumerate(texts)}
    vectors = embedder.embed(texts) if texts else np.zeros((0, 0), dtype=np.float32)
    model = str(embedder.model_id)
    records = []
    for record in usable:
        score = float(np.dot(vectors[index[record["a_text"]]], vectors[index[record["b_text"]]]))
        score = round(score, 6)
        records.append({**record, "score": score, "band": band_of(score), "model": model})
    return Rescored(model, records, len(labels) - len(usable))

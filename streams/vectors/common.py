"""Rules both vector stores share, so the embedded and the server store agree exactly.

Point ids, collection/folder names and the tie-break live here once: a replay against
either store must pick the same neighbour.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Callable, Iterable

import numpy as np

from streams.core.model import ModelId, Neighbour

TOP_K = 8
"""Candidates fetched per search; the tie-break runs over these (widened while they all tie)."""

SCORE_DECIMALS = 6
"""Scores equal after rounding to 1e-6 are a tie: float noise must not decide who is canonical."""

POINT_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:streams:dedup:doc")
"""Namespace of point ids: Qdrant only takes integers or UUIDs, doc ids are arbitrary strings."""

_UNSAFE = re.compile(r"[^A-Za-z0-9.-]+")
_HASHED = re.compile(r"(?:.*-)?[0-9a-f]{8}")
"""What `safe_part` makes of a name it changes: a legal name of that form is hashed too, or it would be
another name's safe form."""
_MAX_PART = 80


def point_id(doc_id: str) -> str:
    """Deterministic UUID of a document, so a redelivered `add` overwrites instead of duplicating."""
    return str(uuid.uuid5(POINT_NAMESPACE, doc_id))


def safe_part(text: str) -> str:
    """`text` as a file- and collection-safe name, without collisions.

    Letters, digits, '.' and '-' are kept; anything else (including '_', used as a
    separator by the server store) becomes '-', and then a short hash of the original
    is appended so 'a/b' and 'a-b' stay apart. A name kept as it is never looks hashed
    (`-` and 8 hex digits at its end): 'a-b-c14cddc0', the safe form of 'a/b', is hashed
    as well, so it does not share the folder and collection of 'a/b'.
    """
    cleaned = _UNSAFE.sub("-", text).lstrip(".")[:_MAX_PART]
    if cleaned == text and cleaned and not _HASHED.fullmatch(text):
        return cleaned
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
    return f"{cleaned}-{digest}" if cleaned else digest


def model_dir_name(model: ModelId) -> str:
    """Folder of a model's edge shard: `name@version`, each part made safe."""
    return f"{safe_part(model.name)}@{safe_part(model.version)}"


def collection_name(prefix: str, model: ModelId) -> str:
    """Server collection of a model: `{prefix}_{name}_{version}`, parts made safe."""
    return f"{prefix}_{safe_part(model.name)}_{safe_part(model.version)}"


def owns_collection(prefix: str, name: str) -> bool:
    """Whether collection `name` is one `collection_name(prefix, ...)` gives: safe parts hold no '_', so
    another deployment's prefix ('dedup_eu' beside 'dedup') never passes for this one's."""
    parts = name.removeprefix(f"{prefix}_").split("_")
    return name.startswith(f"{prefix}_") and len(parts) == 2 and all(parts)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The score both stores give (Qdrant normalises for cosine): 0 against a zero vector, which matches nothing."""
    norms = float(np.linalg.norm(a)) * float(np.linalg.norm(b))
    return float(np.dot(a, b)) / norms if norms else 0.0


def payload(
    model: ModelId, doc_id: str, published_at: int, language: str, facts: dict[str, list[str]] | None = None
) -> dict[str, object]:
    """What each point carries: enough to answer `nearest` and to audit which model wrote it, and the
    facts its text states for the semantic stage's fact check (left out when there are none)."""
    found: dict[str, object] = {
        "doc_id": doc_id,
        "language": language,
        "published_at": int(published_at),
        "model": str(model),
    }
    if facts:
        found["facts"] = facts
    return found


def as_vector(model: ModelId, vector: np.ndarray) -> list[float]:
    """The vector as a plain float list, after checking it has the model's dimension."""
    array = np.asarray(vector, dtype=np.float32).reshape(-1)
    if array.shape[0] != model.dim:
        raise ValueError(f"vector has {array.shape[0]} dimensions, model {model} has {model.dim}")
    return array.tolist()


def _rank(n: Neighbour) -> tuple[float, int, str]:
    return (-round(n.score, SCORE_DECIMALS), n.published_at, n.doc_id)


def best_neighbour(candidates: Iterable[Neighbour]) -> Neighbour | None:
    """Highest score; equal scores (to 1e-6) go to the earliest `published_at`, then smallest id."""
    return min(candidates, key=_rank, default=None)


def nearest_with_ties(search: Callable[[int], list[Neighbour]], k: int = TOP_K) -> Neighbour | None:
    """Run `search(limit)` and pick the best, widening the limit while every hit ties the best.

    The engine orders equal scores arbitrarily, so a tie spread over more than `k`
    points could hide the oldest one; widening until a lower score appears fixes that.
    """
    limit = k
    while True:
        hits = search(limit)
        best = best_neighbour(hits)
        if best is None or len(hits) < limit:
            return best
        top = round(best.score, SCORE_DECIMALS)
        if any(round(h.score, SCORE_DECIMALS) < top for h in hits):
            return best
        limit *= 4


class WindowSearch:
    """`nearest` about a date, for a store that searches a range of dates (`nearest_between`)."""

    def nearest(
        self, model: ModelId, vector: np.ndarray, published_at: int, window_s: int, language: str, same_language: bool
    ) -> Neighbour | None:
        """`nearest_between` within `window_s` of `published_at`, both sides."""
        low, high = published_at - window_s, published_at + window_s
        return self.nearest_between(model, vector, low, high, language, same_language)

    def nearest_between(
        self, model: ModelId, vector: np.ndarray, low: int, high: int, language: str, same_language: bool
    ) -> Neighbour | None:
        raise NotImplementedError

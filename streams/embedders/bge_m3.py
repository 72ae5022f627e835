"""The production embedder: BGE-M3 dense vectors, from a local folder of weights.

BGE-M3 puts a Bangla article and its English counterpart close together. Weights
are never fetched from a hub at run time, so the folder must already be there;
FlagEmbedding (the `bge` extra: needs transformers<5, sentence-transformers<6,
huggingface_hub<1) is imported only when the model loads.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from streams.core.model import ModelId
from streams.embedders.base import LazyEmbedder

DIM = 1024
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def weights_version(path: Path) -> str:
    """A version that changes when the weights do, read from the folder itself.

    The upstream commit when known (a git checkout's HEAD, or a Hugging Face cache
    snapshot folder, which is named after it), else a hash of `config.json`; 12 hex chars.
    """
    git = path / ".git"
    if git.is_dir():
        head = (git / "HEAD").read_text().strip()
        if head.startswith("ref: "):
            ref = head[5:]
            ref_file = git / ref
            if ref_file.is_file():
                head = ref_file.read_text().strip()
            elif (git / "packed-refs").is_file():
                for line in (git / "packed-refs").read_text().splitlines():
                    if line.endswith(f" {ref}"):
                        head = line.split()[0]
        if _COMMIT.match(head):
            return head[:12]
    if _COMMIT.match(path.resolve().name):
        return path.resolve().name[:12]
    config = path / "config.json"
    if not config.is_file():
        raise ValueError(f"BGE-M3 folder {path} has no config.json; is it a model folder?")
    return hashlib.sha256(config.read_bytes()).hexdigest()[:12]


class BgeM3Embedder(LazyEmbedder):
    """`Embedder` over FlagEmbedding's `BGEM3FlagModel`, dense vectors only.

    The folder is checked (and versioned) at construction, so a wrong path fails at
    start-up; the model itself loads on the first `embed`.
    """

    def __init__(
        self,
        path: Path | None,
        device: str | None = None,
        batch_size: int = 32,
        max_chars: int = 2000,
        max_length: int = 1024,
    ) -> None:
        if path is None:
            raise ValueError(
                "model 'bge-m3' needs a local folder of weights: set semantic.bge_m3_path (DEDUP_SEMANTIC__BGE_M3_PATH)"
            )
        self.path = Path(path)
        if not self.path.is_dir():
            raise ValueError(f"BGE-M3 weights folder {self.path} does not exist or is not a directory")
        super().__init__(ModelId(name="bge-m3", version=weights_version(self.path), dim=DIM), max_chars)
        self.device = device
        self.batch_size = batch_size
        self.max_length = max_length

    def _open(self) -> Any:
        try:
            import torch
            from FlagEmbedding import BGEM3FlagModel
        except ImportError as exc:
            raise ImportError(
                "BGE-M3 needs FlagEmbedding: install the `bge` extra "
                "(FlagEmbedding needs transformers<5, sentence-transformers<6, huggingface_hub<1)"
            ) from exc
        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        return BGEM3FlagModel(str(self.path), use_fp16=device.startswith("cuda"), devices=device)

    def _encode(self, model: Any, texts: list[str]) -> Any:
        return model.encode(texts, batch_size=self.batch_size, max_length=self.max_length)["dense_vecs"]

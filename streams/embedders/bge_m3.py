"""The production embedder: BGE-M3 dense vectors, from a local folder of weights.

BGE-M3 puts a Bangla article and its English counterpart close together. Weights
are never fetched from a hub at run time, so the folder must already be there;
FlagEmbedding (the `bge` extra: needs transformers<5, sentence-transformers<6,
huggingface_hub<1) is imported only when the model loads. The ONNX Runtime engine
(`streams.embedders.onnx_runtime`) reads the same folder and gives the same vectors
under the same `ModelId`, so switching engines is no change of model.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from streams.core.model import ModelId
from streams.embedders.base import LazyEmbedder

NAME = "bge-m3"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_WEIGHT_FILES = ("*.safetensors", "pytorch_model*.bin")
_SAMPLE_BYTES = 1 << 20


def model_config(path: Path) -> dict[str, Any]:
    """The folder's `config.json`: the model's shape (hidden size, heads, layers)."""
    config = path / "config.json"
    if not config.is_file():
        raise ValueError(f"BGE-M3 folder {path} has no config.json; is it a model folder?")
    return json.loads(config.read_text(encoding="utf-8"))


def weights_version(path: Path) -> str:
    """A version that changes when the weights do, read from the folder itself.

    The upstream commit when known (a git checkout's HEAD, or a Hugging Face cache
    snapshot folder, which is named after it); else a hash of `config.json` and of each
    weight file's name, size, first and last MiB (a fine-tuned model keeps the config
    but not the weights, and reading a few MiB costs nothing at start-up); 12 hex chars.
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
    model_config(path)  # a clear error for a folder that is no model
    digest = hashlib.sha256((path / "config.json").read_bytes())
    for weights in sorted({file for pattern in _WEIGHT_FILES for file in path.glob(pattern)}):
        size = weights.stat().st_size
        digest.update(f"\0{weights.name}\0{size}\0".encode())
        with weights.open("rb") as handle:
            digest.update(handle.read(_SAMPLE_BYTES))
            handle.seek(max(0, size - _SAMPLE_BYTES))
            digest.update(handle.read(_SAMPLE_BYTES))
    return digest.hexdigest()[:12]


def checked_folder(path: Path | None) -> Path:
    """The weights folder, or a clear error at start-up rather than at the first document."""
    if path is None:
        raise ValueError(
            "model 'bge-m3' needs a local folder of weights: set semantic.bge_m3_path (DEDUP_SEMANTIC__BGE_M3_PATH)"
        )
    folder = Path(path)
    if not folder.is_dir():
        raise ValueError(f"BGE-M3 weights folder {folder} does not exist or is not a directory")
    return folder


def folder_model_id(path: Path) -> ModelId:
    """Name, version and dimension (the hidden size: 1,024 for BGE-M3) of the folder's model."""
    return ModelId(name=NAME, version=weights_version(path), dim=int(model_config(path)["hidden_size"]))


def pick_device(device: str | None) -> str:
    """`device` if given, else CUDA where torch sees a GPU, else the CPU."""
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def bucket_width(tokens: int, max_length: int) -> int:
    """The padded width of a batch whose longest document has `tokens` tokens.

    Powers of two up to 64, then multiples of 64: at most 63 padding tokens a row, and
    a handful of shapes for a GPU's kernels.
    """
    width = 16
    while width < min(tokens, 64):
        width *= 2
    if tokens > 64:
        width = -(-tokens // 64) * 64
    return max(tokens, min(width, max_length))


def length_batches(lengths: Sequence[int], batch_size: int, max_length: int) -> Iterator[tuple[np.ndarray, int]]:
    """Row indices of each batch, longest documents first, and the width to pad the batch to.

    Sorting by token count before cutting batches keeps short documents from being padded
    to the length of a long one.
    """
    counts = np.asarray(lengths)
    order = np.argsort(-counts, kind="stable")
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        yield rows, bucket_width(int(counts[rows].max()), max_length)


def padded(
    token_ids: Sequence[Sequence[int]], rows: np.ndarray, width: int, pad_id: int
) -> tuple[np.ndarray, np.ndarray]:
    """`input_ids` and `attention_mask` (int64, `width` wide) of the documents `rows`."""
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for row, index in enumerate(rows):
        tokens = token_ids[index]
        ids[row, : len(tokens)] = tokens
        mask[row, : len(tokens)] = 1
    return ids, mask


class BgeM3Embedder(LazyEmbedder):
    """`Embedder` over FlagEmbedding's `BGEM3FlagModel`, dense vectors only.

    The folder is checked (and versioned) at construction, so a wrong path fails at
    start-up; the model itself loads on the first `embed`. fp16 on a GPU, fp32 on a CPU.
    """

    def __init__(
        self,
        path: Path | None,
        device: str | None = None,
        batch_size: int = 32,
        max_chars: int = 2000,
        max_length: int = 1024,
    ) -> None:
        self.path = checked_folder(path)
        super().__init__(folder_model_id(self.path), max_chars)
        self.device = device
        self.batch_size = batch_size
        self.max_length = max_length

    def _open(self) -> Any:
        try:
            import torch
            from FlagEmbedding import BGEM3FlagModel
        except ImportError as exc:
            raise ImportError(
                "BGE-M3 needs FlagEmbedding: install torch first (`pip install torch==2.13.0` for the CPU build),"
                " then the `bge` extra (FlagEmbedding needs transformers<5, sentence-transformers<6,"
                " huggingface_hub<1)"
            ) from exc
        device = pick_device(self.device)
        flag = BGEM3FlagModel(
            str(self.path), use_fp16=device.startswith("cuda"), devices=device, passage_max_length=self.max_length
        )
        # FlagEmbedding's model (its CLS pooling and normalisation), driven batch by batch here:
        # its `encode` runs the first batch twice (a probe for the batch size) on every call,
        # which doubles the cost of the cascade's one-batch calls, and draws progress bars.
        model = flag.model.to(device).eval()
        if device == "cpu":
            model.float()
        return _FlagSession(flag.tokenizer, model, device, torch)

    def _encode(self, model: Any, texts: list[str]) -> Any:
        return model.encode(texts, self.batch_size, self.max_length)


class _FlagSession:
    """FlagEmbedding's BGE-M3 model with its tokenizer: documents to dense vectors in length buckets."""

    def __init__(self, tokenizer: Any, model: Any, device: str, torch: Any) -> None:
        self.tokenizer = tokenizer
        self.model = model
        self.device = device
        self.torch = torch
        self.pad_id = tokenizer.pad_token_id

    def encode(self, texts: list[str], batch_size: int, max_length: int) -> np.ndarray:
        token_ids = self.tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
        out = np.empty((len(texts), self.model.model.config.hidden_size), dtype=np.float32)
        torch = self.torch
        with torch.inference_mode():
            for rows, width in length_batches([len(ids) for ids in token_ids], batch_size, max_length):
                ids, mask = padded(token_ids, rows, width, self.pad_id)
                inputs = {
                    "input_ids": torch.from_numpy(ids).to(self.device),
                    "attention_mask": torch.from_numpy(mask).to(self.device),
                }
                dense = self.model(inputs, return_dense=True, return_sparse=False, return_colbert_vecs=False)
                out[rows] = dense["dense_vecs"].float().cpu().numpy()
        return out


def write_random_model(
    folder: Path,
    corpus: Iterable[str],
    *,
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    intermediate: int | None = None,
    vocab: int | None = None,
    tokenizer_vocab: int = 2000,
    max_positions: int = 8194,
    seed: int = 0,
    init_std: float = 0.02,
) -> Path:
    """Save a BGE-M3-shaped folder (XLM-RoBERTa, random weights) where real weights cannot be had.

    Tests and the GPU benchmark load it exactly as they would load BGE-M3: a `config.json`,
    `model.safetensors`, and a fast tokenizer with XLM-R's special tokens (`<s>` 0, `<pad>` 1,
    `</s>` 2, `<unk>` 3) trained on `corpus` with the `tokenizers` library. BGE-M3 itself is
    24 layers, hidden 1,024, 16 heads, intermediate 4,096, vocabulary 250,002, 8,194 positions;
    `vocab` defaults to the tokenizer's size (a larger one only costs memory).
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import XLMRobertaConfig, XLMRobertaModel, XLMRobertaTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=tokenizer_vocab, special_tokens=specials, unk_token="<unk>", show_progress=False
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    fast = XLMRobertaTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
        model_max_length=max_positions - 2,
    )
    fast.save_pretrained(folder)

    config = XLMRobertaConfig(
        vocab_size=max(vocab or 0, fast.vocab_size),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate or 4 * hidden,
        max_position_embeddings=max_positions,
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        initializer_range=init_std,
    )
    torch.manual_seed(seed)
    XLMRobertaModel(config).save_pretrained(folder, safe_serialization=True)
    return folder

"""BGE-M3 dense vectors on ONNX Runtime: the same folder and vectors as FlagEmbedding, faster on a GPU.

The model is exported once from the weights folder (torch.onnx, then onnxruntime's
transformer optimizer fuses attention, LayerNorm and GELU and, for the GPU, converts
to fp16) and kept beside it; later starts load the exported file. Only the CLS vector
leaves the graph, so a batch copies (batch, 1,024) floats back instead of every token's
state. On CUDA the inputs and the output are bound to the device (IO binding); batches
are cut from documents sorted by token count and padded to a few fixed widths, so
little compute goes to padding and the GPU sees few distinct shapes.

Vectors carry the same `ModelId` as `BgeM3Embedder`'s: the engine is no change of model.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from streams.embedders.base import LazyEmbedder
from streams.embedders.bge_m3 import checked_folder, folder_model_id, length_batches, model_config, padded

INPUTS = ("input_ids", "attention_mask")
OUTPUT = "dense"
_LARGE_PROTO = 2_000_000_000  # protobuf's 2 GiB cap: larger models keep their weights in external data


def export_onnx(folder: Path, target: Path, *, fp16: bool) -> Path:
    """Export the folder's XLM-RoBERTa to `target` (a folder): CLS vector out, fused, fp16 if asked.

    Written into a temporary folder and renamed into place, so two workers starting at
    once never load a half-written model (the loser's copy is dropped).
    """
    import torch
    from google.protobuf.message import EncodeError
    from onnxruntime.transformers.optimizer import optimize_model
    from transformers import AutoModel

    config = model_config(folder)
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        # Eager attention: its graph is the one the optimizer's attention fusion recognises.
        model = AutoModel.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
        raw = work / "raw" / "model.onnx"
        raw.parent.mkdir()
        ids = torch.tensor([[0, 5, 6, 7, 2, 1], [0, 8, 9, 2, 1, 1]], dtype=torch.long)
        mask = (ids != 1).long()
        # The TorchScript exporter (dynamo=False): its graph is the one onnxruntime's fusions know,
        # and it needs no onnxscript. It warns that it is deprecated, and that the padding index
        # check is traced as a constant (it is one).
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            torch.onnx.export(
                _cls_only(model),
                (ids, mask),
                str(raw),
                input_names=list(INPUTS),
                output_names=[OUTPUT],
                dynamic_axes={
                    "input_ids": {0: "batch", 1: "sequence"},
                    "attention_mask": {0: "batch", 1: "sequence"},
                    OUTPUT: {0: "batch"},
                },
                opset_version=17,
                do_constant_folding=True,
                dynamo=False,
            )
        del model
        optimized = optimize_model(
            str(raw),
            model_type="bert",
            num_heads=int(config["num_attention_heads"]),
            hidden_size=int(config["hidden_size"]),
            opt_level=0,
            use_gpu=fp16,
        )
        if fp16:
            optimized.convert_float_to_float16(keep_io_types=True)
        out = work / "model"
        out.mkdir()
        try:
            large = optimized.model.ByteSize() > _LARGE_PROTO
        except EncodeError:  # over protobuf's limit: it cannot even count itself
            large = True
        optimized.save_model_to_file(str(out / "model.onnx"), use_external_data_format=large)
        try:
            out.rename(target)
        except OSError:
            if not (target / "model.onnx").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _cls_only(model: Any) -> Any:
    """The encoder wrapped so that the exported graph returns the CLS state alone (BGE-M3's dense pooling)."""
    import torch

    class ClsOnly(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, 0]

    return ClsOnly()


class OnnxBgeM3Embedder(LazyEmbedder):
    """`Embedder` for BGE-M3 dense vectors on ONNX Runtime: CUDA with fp16 where a GPU is, else the CPU.

    `onnx_dir` holds the exported models (default: `onnx/` inside the weights folder),
    one folder per weights version and precision, exported on first use. `fp16` defaults
    to CUDA's choice (fp16 on a GPU, fp32 on a CPU); the tests set it to check the fp16
    model's vectors on a CPU.
    """

    def __init__(
        self,
        path: Path | None,
        device: str | None = None,
        batch_size: int = 32,
        max_chars: int = 2000,
        max_length: int = 1024,
        onnx_dir: Path | None = None,
        fp16: bool | None = None,
    ) -> None:
        self.path = checked_folder(path)
        super().__init__(folder_model_id(self.path), max_chars)
        self.device = device
        self.batch_size = batch_size
        self.max_length = max_length
        self.onnx_dir = Path(onnx_dir) if onnx_dir is not None else self.path / "onnx"
        self.fp16 = fp16
        self.provider = ""
        """The execution provider the session runs on, once the model is loaded."""

    def exported(self, fp16: bool) -> Path:
        """The exported model file for this precision, exporting it first if it is not there."""
        target = self.onnx_dir / f"{self.model_id.version}-{'fp16' if fp16 else 'fp32'}"
        if not (target / "model.onnx").is_file():
            export_onnx(self.path, target, fp16=fp16)
        return target / "model.onnx"

    def _open(self) -> Any:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise ImportError(
                "the ONNX engine needs onnxruntime: install the `onnx` extra (CPU) or the `gpu` extra"
                " (onnxruntime-gpu), after torch (`pip install torch==2.13.0` for the CPU build)"
            ) from exc
        wanted = self.device or ("cuda" if "CUDAExecutionProvider" in ort.get_available_providers() else "cpu")
        cuda = wanted.startswith("cuda")
        device_id = int(wanted.partition(":")[2] or 0) if cuda else 0
        if cuda and hasattr(ort, "preload_dlls"):
            with contextlib.suppress(OSError):  # best effort: the session below says whether CUDA came up
                ort.preload_dlls()  # CUDA and cuDNN from the nvidia-* wheels torch brings, where present
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        providers: list[Any] = [("CUDAExecutionProvider", {"device_id": device_id})] if cuda else []
        providers.append("CPUExecutionProvider")
        fp16 = cuda if self.fp16 is None else self.fp16
        session = ort.InferenceSession(str(self.exported(fp16)), options, providers=providers)
        if cuda and "CUDAExecutionProvider" not in session.get_providers():
            if self.device:
                raise RuntimeError(f"device {self.device!r} asked for, but ONNX Runtime could not start CUDA")
            cuda = False  # onnxruntime-gpu without a usable GPU: the CPU, in fp32 unless asked otherwise
            fp16 = bool(self.fp16)
            session = ort.InferenceSession(str(self.exported(fp16)), options, providers=["CPUExecutionProvider"])
        self.fp16 = fp16
        self.provider = session.get_providers()[0]
        tokenizer = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        tokenizer.no_padding()
        pad_id = tokenizer.token_to_id("<pad>")
        return _Session(session, tokenizer, 1 if pad_id is None else pad_id, "cuda" if cuda else "cpu", device_id)

    def _encode(self, model: Any, texts: list[str]) -> np.ndarray:
        return model.encode(texts, self.batch_size, self.max_length)


class _Session:
    """An inference session with its tokenizer: documents to CLS vectors in length buckets.

    Inputs and the output are bound to the session's device (IO binding): on CUDA a batch
    is one copy in and one copy of (batch, hidden) floats out, whatever the provider
    would otherwise allocate and copy.
    """

    def __init__(self, session: Any, tokenizer: Any, pad_id: int, device_type: str, device_id: int) -> None:
        self.session = session
        self.tokenizer = tokenizer
        self.pad_id = pad_id
        self.device_type = device_type
        self.device_id = device_id

    def encode(self, texts: list[str], batch_size: int, max_length: int) -> np.ndarray:
        self.tokenizer.enable_truncation(max_length)
        token_ids = [encoding.ids for encoding in self.tokenizer.encode_batch(texts)]
        out: np.ndarray | None = None
        for rows, width in length_batches([len(ids) for ids in token_ids], batch_size, max_length):
            dense = self._run(*padded(token_ids, rows, width, self.pad_id))
            if out is None:
                out = np.empty((len(texts), dense.shape[1]), dtype=np.float32)
            out[rows] = dense
        assert out is not None
        return out

    def _run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        binding = self.session.io_binding()
        binding.bind_cpu_input("input_ids", ids)
        binding.bind_cpu_input("attention_mask", mask)
        binding.bind_output(OUTPUT, self.device_type, self.device_id)
        self.session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()[0]

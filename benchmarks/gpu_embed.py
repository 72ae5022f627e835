"""Documents per second of BGE-M3: FlagEmbedding against ONNX Runtime, at 256 and 512 tokens.

Run:  .venv/bin/python benchmarks/gpu_embed.py --json gpu_embed.json [--small] [--docs N]

Builds a BGE-M3-shaped model with random weights (XLM-RoBERTa large: 24 layers, hidden
1,024, 16 heads, intermediate 4,096, vocabulary 250,002, 8,194 positions: the speed of a
model is its shape, not its weights) and a tokenizer trained on the sample articles, then
embeds documents cut to exactly 256 and 512 tokens with
- `flagembedding`: FlagEmbedding's `BGEM3FlagModel.encode`, as the library ships it (it runs
  the first batch of every call twice, to probe the batch size);
- `flagembedding-bucketed`: `streams.embedders.bge_m3.BgeM3Embedder`, the `flag` engine of
  the cascade: FlagEmbedding's model driven in length buckets, no probe;
- `onnxruntime`: `streams.embedders.onnx_runtime.OnnxBgeM3Embedder` (the export is timed
  apart and not counted), with a check that its vectors match FlagEmbedding's (cosine).
On a GPU both run in fp16 (the ONNX model on the CUDA execution provider with IO binding).
Without a GPU it says so and measures a small model (6 layers, hidden 384: the shape of
multilingual-e5-small, the bundled model) on the CPU in fp32; `--small` does that anywhere.

On a GPU host (CUDA build of torch first, then onnxruntime-gpu through the `gpu` extra):
    python3 -m venv .venv && .venv/bin/pip install torch && .venv/bin/pip install -e '.[gpu]'
    .venv/bin/python benchmarks/gpu_embed.py --json gpu_embed.json

Writes `{"device": STR, "results": [{"engine": STR, "tokens": INT, "docs_per_s": FLOAT}, ...]}`
(each result also has `precision`, `batch_size`, `docs`, `seconds`; ONNX results the lowest
cosine to FlagEmbedding's vector of the same document), plus `model` (its shape) and
`export_s` (the ONNX export and session start).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

REPO = Path(__file__).resolve().parents[1]
LARGE = {"layers": 24, "hidden": 1024, "heads": 16, "intermediate": 4096}
SMALL = {"layers": 6, "hidden": 384, "heads": 12, "intermediate": 1536}
VOCAB = 250_002


def sentences() -> list[str]:
    """English and Bangla news sentences from the shipped sample (no data folder needed)."""
    found: list[str] = []
    for line in (REPO / "examples" / "articles.jsonl").read_bytes().splitlines():
        try:
            article = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # the sample's broken lines
        if isinstance(article, dict) and isinstance(article.get("body"), str):
            found += [s.strip() for s in re.split(r"(?<=[.!?।])\s+", article["body"]) if len(s.strip()) > 20]
    return found


def documents(pool: list[str], count: int, words: int, seed: int = 7) -> list[str]:
    """`count` documents of at least `words` words, each its own shuffle of the sentences."""
    rng = random.Random(seed)
    made = []
    for _ in range(count):
        parts: list[str] = []
        while sum(len(part.split()) for part in parts) < words:
            parts.append(rng.choice(pool))
        made.append(" ".join(parts))
    return made


def timed(embed: Any, texts: list[str], warm: list[str], repeat: int) -> float:
    """The fastest of `repeat` runs embedding `texts`, after one warm-up call (kernels chosen,
    memory allocated): the fastest is the one least disturbed by whatever else the machine runs."""
    embed(warm)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        embed(texts)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="Write the results here.")
    parser.add_argument("--small", action="store_true", help="The small model, even where a GPU is.")
    parser.add_argument("--docs", type=int, help="Documents per measurement (default: 4,096 on a GPU, 24 on a CPU).")
    parser.add_argument("--batch-size", type=int, help="Documents per batch (default: 128 on a GPU, 8 on a CPU).")
    parser.add_argument("--repeat", type=int, default=3, help="Runs per measurement; the fastest counts.")
    parser.add_argument("--tokens", type=int, nargs="+", default=[256, 512], help="Document lengths in tokens.")
    parser.add_argument("--model-dir", type=Path, help="Keep the built model (and its ONNX export) here.")
    args = parser.parse_args()

    import torch
    from FlagEmbedding import BGEM3FlagModel

    from streams.embedders.bge_m3 import BgeM3Embedder, write_random_model
    from streams.embedders.onnx_runtime import OnnxBgeM3Embedder

    gpu = torch.cuda.is_available()
    if gpu:
        device_name = torch.cuda.get_device_name(0)
        device = "cuda:0"
    else:
        device_name = f"cpu ({os.cpu_count()} cores; no GPU available)"
        device = "cpu"
        print("No GPU available: measuring a small model on the CPU in fp32 instead of BGE-M3's shape in fp16.")
    small = args.small or not gpu
    shape = SMALL if small else LARGE
    fp16 = gpu
    precision = "fp16" if fp16 else "fp32"
    count = args.docs or (4096 if gpu else 24)
    batch_size = args.batch_size or (128 if gpu else 8)
    longest = max(args.tokens)

    pool = sentences()
    texts = documents(pool, count, words=2 * longest)
    folder = args.model_dir or Path(tempfile.mkdtemp(prefix="gpu-embed-"))
    started = time.perf_counter()
    if not (folder / "config.json").is_file():
        write_random_model(folder, pool, **shape, vocab=VOCAB, tokenizer_vocab=4000)
    print(f"model: {shape} vocabulary {VOCAB:,}, built in {time.perf_counter() - started:.1f} s at {folder}")
    print(f"device: {device_name}; {count} documents a measurement, batches of {batch_size}, {precision}")

    flag = BGEM3FlagModel(str(folder), use_fp16=fp16, devices=device, batch_size=batch_size)
    bucketed = BgeM3Embedder(folder, device=device, batch_size=batch_size, max_chars=10**9)
    embedder: OnnxBgeM3Embedder | None = None
    export_s = 0.0
    results: list[dict[str, Any]] = []
    for tokens in args.tokens:
        lengths = [len(ids) for ids in flag.tokenizer(texts, truncation=True, max_length=tokens)["input_ids"]]
        assert min(lengths) == tokens, f"documents shorter than {tokens} tokens: {min(lengths)}"
        warm = texts[:batch_size]

        def flag_embed(batch: list[str], tokens: int = tokens) -> np.ndarray:
            return flag.encode(batch, batch_size=batch_size, max_length=tokens)["dense_vecs"]

        seconds = timed(flag_embed, texts, warm, args.repeat)
        results.append(_result("flagembedding", precision, tokens, count, seconds, batch_size))
        reference = flag_embed(texts[:batch_size])

        bucketed.max_length = tokens
        seconds = timed(bucketed.embed, texts, warm, args.repeat)
        results.append(_result("flagembedding-bucketed", precision, tokens, count, seconds, batch_size))

        if embedder is None:
            embedder = OnnxBgeM3Embedder(folder, device=device, batch_size=batch_size, max_chars=10**9, fp16=fp16)
            started = time.perf_counter()
            embedder.embed(["warm"])  # exports on first use, then loads the session
            export_s = round(time.perf_counter() - started, 1)
        embedder.max_length = tokens
        seconds = timed(embedder.embed, texts, warm, args.repeat)
        cosine = float(np.min(np.sum(embedder.embed(texts[:batch_size]) * reference, axis=1)))
        result = _result("onnxruntime", precision, tokens, count, seconds, batch_size)
        results.append({**result, "provider": embedder.provider, "min_cosine_to_flag": round(cosine, 6)})

    print(f"{'engine':<24}{'tokens':>8}{'docs/s':>12}  precision")
    for result in results:
        print(f"{result['engine']:<24}{result['tokens']:>8}{result['docs_per_s']:>12,.1f}  {result['precision']}")
    report = {
        "device": device_name,
        "model": {**shape, "vocab": VOCAB, "bge_m3_shape": not small},
        "export_s": export_s,
        "results": results,
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))


def _result(engine: str, precision: str, tokens: int, count: int, seconds: float, batch_size: int) -> dict[str, Any]:
    return {
        "engine": engine,
        "tokens": tokens,
        "docs_per_s": round(count / seconds, 1),
        "precision": precision,
        "batch_size": batch_size,
        "docs": count,
        "seconds": round(seconds, 2),
    }


if __name__ == "__main__":
    main()

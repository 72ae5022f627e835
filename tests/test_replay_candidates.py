"""A state folder rebuilt by `dedup replay` can undo what the first one could: it has the candidate records.

`dedup relink` unlinks a semantic duplicate with what the semantic stage kept of it, its candidate record
(article, text and vector), which lives in the state folder's journal. A state rebuilt from links.jsonl alone
had none: unlinking such a duplicate there was refused ("no article on record"), and the document became a
canonical without its vector. `dedup run` now writes the records to candidates.jsonl beside links.jsonl (the
file form of `dedup.candidates`), and `dedup replay` reads the one beside each links file it is given.
"""

from __future__ import annotations

from pathlib import Path

import jsonschema
import orjson
import pytest

from streams.runner.replay import replay_files
from tests.test_relink import DAY_ONE, VECTORS, ToyEmbedder, World, _label, _settings, _vectors, dump


@pytest.fixture
def world(tmp_path: Path) -> World:
    world = World(tmp_path, tmp_path / "out", tmp_path / "out" / "state", _settings(), ToyEmbedder(VECTORS))
    world.run(DAY_ONE, "out")
    return world


def _relinked(world: World, state: Path, out: str) -> World:
    other = World(world.folder, world.out, state, world.settings, world.embedder)
    result = other.relink(out, decisions=[_label("A", "B", False)])
    assert not result.plan.refused, result.plan.refused
    return other


def test_a_rebuilt_state_unlinks_a_semantic_duplicate_as_the_first_state_does(world: World) -> None:
    candidates = world.out / "candidates.jsonl"
    records = [orjson.loads(line) for line in candidates.read_bytes().splitlines()]
    schema = orjson.loads(Path("schemas/candidate.schema.json").read_bytes())
    for record in records:
        jsonschema.validate(record, schema)
    embedded = {r["doc_id"] for r in world.links("out") if r["stage"] == "semantic" or r["verdict"] == "unique"}
    assert {r["doc_id"] for r in records} >= embedded - {"S"} and "A" in {r["doc_id"] for r in records}

    rebuilt = world.folder / "rebuilt"
    stats = replay_files([str(world.out / "links.jsonl")], rebuilt)
    assert not stats.bad
    assert dump(rebuilt) == dump(world.state)

    _relinked(world, world.state, "relinked-live")
    _relinked(world, rebuilt, "relinked-rebuilt")
    assert dump(rebuilt) == dump(world.state)
    assert _vectors(rebuilt) == _vectors(world.state) and "A" in _vectors(rebuilt)
    live, again = world.latest("relinked-live"), world.latest("relinked-rebuilt")
    assert {d: (r["verdict"], r["canonical_id"]) for d, r in again.items()} == {
        d: (r["verdict"], r["canonical_id"]) for d, r in live.items()
    }


def test_a_rerun_writes_no_candidate_record_twice_and_a_bad_line_is_reported(world: World) -> None:
    """A run continued after a kill appends only what is missing; a damaged line of candidates.jsonl is
    reported by the replay and skipped, never fatal: the links alone still rebuild the verdicts."""
    before = (world.out / "candidates.jsonl").read_bytes()
    world.run(DAY_ONE, "out")  # the same input again: every verdict is there already
    assert (world.out / "candidates.jsonl").read_bytes() == before
    (world.out / "candidates.jsonl").write_bytes(before + b'{"doc_id": 5}\nnot json\n')
    stats = replay_files([str(world.out / "links.jsonl")], world.folder / "rebuilt")
    assert len(stats.bad) == 2 and all("candidates.jsonl" in why for why in stats.bad), stats.bad
    assert dump(world.folder / "rebuilt") == dump(world.state)

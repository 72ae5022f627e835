"""`dedup run` collects garbage rarely while it decides, and gives the process back as it found it."""

from __future__ import annotations

import gc
from pathlib import Path

import orjson
import pytest

from streams.config import Settings
from streams.evaluation.corpus import synthetic_articles
from streams.runner.collector import YOUNG_ALLOCATIONS
from streams.runner.embedded import RunPaths, run


def _articles(path: Path, count: int) -> Path:
    path.write_bytes(b"".join(orjson.dumps(a) + b"\n" for a in synthetic_articles(count)))
    return path


def test_the_run_decides_with_rare_young_collections_and_restores_the_thresholds(tmp_path: Path) -> None:
    source = _articles(tmp_path / "in.jsonl", 300)
    before = gc.get_threshold()
    seen: list[tuple[int, int, int]] = []
    run(
        Settings(stages=["url", "content", "simhash"]),
        [str(source)],
        RunPaths(tmp_path / "out", tmp_path / "state"),
        on_progress=lambda lines, _: seen.append(gc.get_threshold()),
    )
    assert seen and all(threshold[0] == YOUNG_ALLOCATIONS for threshold in seen)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_a_run_that_fails_restores_the_thresholds(tmp_path: Path) -> None:
    source = _articles(tmp_path / "in.jsonl", 50)
    before = gc.get_threshold()

    def fail(lines: int, _: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(Settings(stages=["url"]), [str(source)], RunPaths(tmp_path / "out", tmp_path / "state"), on_progress=fail)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0

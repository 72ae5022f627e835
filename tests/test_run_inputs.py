"""What `dedup run` reads: a byte-order mark is not an error, a huge line is rejected without being held whole."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import orjson

from streams.config import Settings
from streams.runner.embedded import RunPaths, run
from streams.runner.jsonl import read_lines

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "articles.jsonl"
CHEAP = Settings(stages=["url", "content", "simhash"])


def _read(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_a_byte_order_mark_on_the_first_line_is_accepted(tmp_path: Path) -> None:
    """Windows tools write UTF-8 with a BOM; the first article is an article, not invalid JSON."""
    source = tmp_path / "bom.jsonl"
    source.write_bytes(b"\xef\xbb\xbf" + SAMPLE.read_bytes())
    paths = RunPaths(tmp_path / "out", tmp_path / "state")
    run(CHEAP, [str(source)], paths)
    first = orjson.loads(SAMPLE.read_bytes().splitlines()[0])["id"]
    assert _read(paths.links)[0]["doc_id"] == first
    assert len(_read(paths.rejected)) == 2  # the sample's own bad lines only
    assert [line.raw for line in read_lines([str(source)])] == [line.raw for line in read_lines([str(SAMPLE)])]


def test_a_huge_line_without_newline_is_rejected_without_being_read_whole(tmp_path: Path) -> None:
    limit, huge = 1024 * 1024, 48 * 1024 * 1024
    good = orjson.loads(SAMPLE.read_bytes().splitlines()[0])
    source = tmp_path / "huge.jsonl"
    with source.open("wb") as handle:
        handle.write(orjson.dumps(good) + b"\n")
        handle.write(b'{"id": "huge", "url": "https://e.com/huge", "body": "')
        for _ in range(huge // limit):
            handle.write(b"x" * limit)
        handle.write(b'"}\n' + orjson.dumps({**good, "id": "after", "url": "https://e.com/after"}))  # no last newline
    paths = RunPaths(tmp_path / "out", tmp_path / "state")
    tracemalloc.start()
    try:
        stats = run(Settings(stages=["url", "content", "simhash"], max_record_bytes=limit), [str(source)], paths)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * limit, f"peak {peak:,} bytes for a {huge:,}-byte line"
    assert [link["doc_id"] for link in _read(paths.links)] == [good["id"], "after"]
    (rejected,) = _read(paths.rejected)
    assert rejected["line"] == 2 and "above the limit of 1,048,576" in rejected["reason"]
    assert f"{huge + 55:,} bytes" in rejected["reason"]
    assert len(rejected["raw"]) <= limit  # a prefix to recognise it by, not the whole line
    assert stats.rejected == 1 and stats.read == 3

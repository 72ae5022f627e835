"""Reading JSONL inputs (files, `.gz`, stdin) line by line, and writing JSONL outputs."""

from __future__ import annotations

import gzip
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson


@dataclass(frozen=True, slots=True)
class InputLine:
    source: str
    line_no: int
    raw: bytes


def check_sources(sources: list[str]) -> None:
    """Fail before any work when an input file is missing."""
    for source in sources:
        if source != "-" and not Path(source).is_file():
            raise FileNotFoundError(f"input file not found: {source}")


def input_size(sources: list[str]) -> int | None:
    """Total bytes to read, for a progress bar; None when reading stdin."""
    check_sources(sources)
    if "-" in sources:
        return None
    return sum(Path(s).stat().st_size for s in sources)


def read_lines(sources: list[str], on_bytes: Callable[[int], None] | None = None) -> Iterator[InputLine]:
    """Every non-blank line of every source, with its 1-based line number.

    `on_bytes` is told how many (compressed) bytes each line advanced, for progress.
    """
    check_sources(sources)
    for source in sources:
        for line_no, raw, consumed in _lines_of(source):
            if on_bytes is not None:
                on_bytes(consumed)
            stripped = raw.rstrip(b"\r\n")
            if stripped.strip():
                yield InputLine(source, line_no, stripped)


def _lines_of(source: str) -> Iterator[tuple[int, bytes, int]]:
    if source == "-":
        for line_no, raw in enumerate(sys.stdin.buffer, start=1):
            yield line_no, raw, len(raw)
        return
    with open(source, "rb") as handle:
        stream: IO[bytes] = gzip.GzipFile(fileobj=handle) if source.endswith(".gz") else handle
        position = 0
        for line_no, raw in enumerate(stream, start=1):
            now = handle.tell()
            yield line_no, raw, now - position
            position = now


class JsonlWriter:
    """Appends one JSON object per line; numpy arrays are written as lists."""

    def __init__(self, path: Path) -> None:
        self._handle = open(path, "wb")  # noqa: SIM115 - closed in close()

    def write(self, record: dict[str, Any]) -> None:
        self._handle.write(orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE))

    def flush(self) -> None:
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()

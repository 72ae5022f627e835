"""Reading JSONL inputs (files, `.gz`, stdin) line by line, and the JSONL outputs of a run."""

from __future__ import annotations

import gzip
import hashlib
import os
import sys
import zlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

BOM = b"\xef\xbb\xbf"
READ_ON = 1024 * 1024
"""Bytes read at a time past the limit of an oversized line, which is skipped, never held whole."""
KEPT_OF_OVERSIZED = 1024
"""Bytes of an oversized line kept for its rejection: enough to recognise it."""


@dataclass(frozen=True, slots=True)
class InputLine:
    source: str
    line_no: int
    raw: bytes
    size: int
    """Bytes of the whole line; above `len(raw)` when the line was over the reader's limit."""
    consumed: int
    """Input bytes (compressed, for `.gz`) up to the end of this line since the line before, for progress."""


def check_sources(sources: list[str]) -> None:
    """Fail before any work when an input is missing or is a directory. A pipe is an input too: `<(zcat ...)`
    hands over /dev/fd/63, and a FIFO or /dev/stdin reads as stdin does.

    A file given twice, by any name (a glob overlapping a named file, a symlink), is refused: read twice, its
    bad lines were rejected and counted twice, and a report counted its records twice."""
    seen: dict[tuple[int, int], int] = {}
    for at, source in enumerate(sources):
        if source == "-":
            continue
        path = Path(source)
        if path.is_dir():
            raise IsADirectoryError(f"input {source} is a directory, not a file")
        if not path.exists():
            raise FileNotFoundError(f"input file not found: {source}")
        if not path.is_file():
            continue  # a pipe or a device: each read of it gives other bytes
        found = path.stat()
        first = seen.setdefault((found.st_dev, found.st_ino), at)
        if first != at:
            raise ValueError(f"input {source} is {sources[first]} again: give each file once")


def input_size(sources: list[str]) -> int | None:
    """Total bytes to read, for a progress bar; None when one is stdin or a pipe (no size to read ahead)."""
    check_sources(sources)
    if "-" in sources or not all(Path(s).is_file() for s in sources):
        return None
    return sum(Path(s).stat().st_size for s in sources)


def read_lines(sources: list[str], limit: int | None = None) -> Iterator[InputLine]:
    """Every non-blank line of every source, with its 1-based line number.

    A UTF-8 byte-order mark opening a source is dropped (Windows tools write one).
    A line longer than `limit` is read on in chunks and comes with only its first
    bytes, so one huge line without a newline never sits in memory whole.
    """
    check_sources(sources)
    for source in sources:
        blank = 0
        for line_no, raw, size, consumed in _lines_of(source, limit):
            # A line cut to its first bytes is no blank line, whatever they are: it is rejected for its size.
            if raw.strip() or size > len(raw):
                yield InputLine(source, line_no, raw, size, blank + consumed)
                blank = 0
            else:
                blank += consumed


_Line = tuple[int, bytes, int, int]
"""Line number, the line without its end, its full size, input bytes consumed."""


GZIP_MAGIC = b"\x1f\x8b"
"""How a gzip stream begins: gzip is read by its content, whatever the name (`.GZ`, stdin, a pipe)."""


def _lines_of(source: str, limit: int | None) -> Iterator[_Line]:
    with ExitStack() as held:
        handle = sys.stdin.buffer if source == "-" else held.enter_context(open(source, "rb"))
        packed = handle.peek(len(GZIP_MAGIC))[: len(GZIP_MAGIC)] == GZIP_MAGIC
        stream: IO[bytes] = gzip.GzipFile(fileobj=handle) if packed else handle
        line_no = 0
        try:
            if stream.peek(len(BOM))[: len(BOM)] == BOM:  # type: ignore[attr-defined]
                stream.read(len(BOM))  # before the first line is measured: it counts nothing against the limit
            for line in _split(stream, limit, handle if handle.seekable() else None):
                line_no = line[0]
                yield line
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise ValueError(f"{source} is damaged gzip after line {line_no}: {exc}") from None


def _split(stream: IO[bytes], limit: int | None, position_of: IO[bytes] | None) -> Iterator[_Line]:
    """Each line of `stream`; bytes consumed by the position of `position_of` (the file under a `.gz`)."""
    position = 0
    line_no = 0
    while True:
        head = stream.readline(-1 if limit is None else limit + 2)  # a line of `limit` bytes and its CRLF
        if not head:
            return
        line_no += 1
        size, tail = len(head), head
        if limit is not None and len(head) > limit + 1 and not head.endswith(b"\n"):
            while tail and not tail.endswith(b"\n"):
                tail = stream.readline(READ_ON)
                size += len(tail)
        ending = len(tail) - len(tail.rstrip(b"\r\n"))
        if limit is not None and size - ending > limit:
            head = head[:KEPT_OF_OVERSIZED]
        now = position_of.tell() if position_of is not None else position + size
        yield line_no, head.rstrip(b"\r\n"), size - ending, now - position
        position = now


def not_continued(path: Path, line_no: int) -> ValueError:
    """Why an output whose line `line_no` is no JSON object cannot be continued (appended to, or taken in)."""
    return ValueError(
        f"{path}:{line_no} is not a JSON object, so this file cannot be continued: fix or delete that line, or"
        " move the file away (--force starts over only another state's outputs)"
    )


def _digest(identity: object) -> bytes:
    return hashlib.blake2b(orjson.dumps(identity), digest_size=16).digest()


class JsonlOutput:
    """An output file of a run: appended to, and never given the same record twice.

    `identity` says which records are the same (a verdict re-decided on resume has
    another `linked_at`). Opening reads the records already there, so a run that
    resumes after Ctrl-C or a crash writes only what is missing; a last line torn
    by a kill is cut, since its document was not committed to the state either.

    `occurrence` (a finer identity: what a record says and when) lets a record the same
    as an earlier one be written again where the writer knows it for another occurrence
    (`write`'s `again`), and still once only: a document registered again a month after
    its verdict expired says what its first line said, at another date. Only records past
    the first `committed` bytes (what the writer's state took in) are kept by occurrence:
    an occurrence before them cannot come again (its state would not decide it afresh).

    `held` keeps the lines in memory until `flush` or `sync`, so that they reach the file
    in the order the writer flushes its outputs, never by a buffer that filled: `dedup run`
    writes a document's candidate line before its link line, and that before its article.
    """

    def __init__(
        self,
        path: Path,
        identity: Callable[[dict[str, Any]], object],
        *,
        fresh: bool = False,
        occurrence: Callable[[dict[str, Any]], object] | None = None,
        committed: int = 0,
        held: bool = False,
    ) -> None:
        self.path = path
        self._held = bytearray() if held else None
        self._identity = identity
        self._occurrence = occurrence
        self._seen: set[bytes] = set()
        self._occurred: set[bytes] = set()
        """Occurrence keys of the records past `committed` bytes, where `occurrence` is given: what a kill left
        past the last commit (a few seconds of records), not the file."""
        self.torn = 0
        """Bytes of a torn last line cut on opening."""
        self._tail: int | None = None
        """Where the records past the writer's last commit began when the file was opened, if any were there."""
        if path.exists() and not fresh:
            self._load(committed)
        self._handle = open(path, "wb" if fresh else "ab")  # noqa: SIM115 - closed in close()

    def _load(self, committed: int) -> None:
        whole = 0
        if committed > self.path.stat().st_size:
            committed = 0  # not the file the state noted: every record is kept by occurrence
        with open(self.path, "rb+") as handle:
            for line_no, line in enumerate(handle, start=1):
                if not line.endswith(b"\n"):
                    break
                try:
                    record = orjson.loads(line)
                except orjson.JSONDecodeError:
                    record = None
                if not isinstance(record, dict):
                    raise not_continued(self.path, line_no)
                self._seen.add(self._key(record))
                if self._occurrence is not None and whole >= committed:
                    self._occurred.add(_digest(self._occurrence(record)))
                whole += len(line)
            if whole > committed:
                self._tail = committed
            end = handle.seek(0, os.SEEK_END)
            if whole < end:
                handle.truncate(whole)
                self.torn = end - whole

    def _key(self, record: dict[str, Any]) -> bytes:
        return _digest(self._identity(record))

    def holds(self, identity: object) -> bool:
        """Whether the file has a record of this identity (what `identity` gives for it)."""
        return _digest(identity) in self._seen

    def write(self, record: dict[str, Any], again: Callable[[], bool] | None = None) -> bool:
        """Append the record unless the file has it already; True when written. A record the same as one
        there is written where `again` (asked only then) says it is another occurrence of it, unless this
        very occurrence is there too (the file has `occurrence`'s key: a run decided it before a kill)."""
        key = self._key(record)
        if key in self._seen:
            # Only records a process before this one left past its last commit are kept by occurrence: this one
            # decides a document afresh with the same date once at most (after that, a record of that date is
            # older than its verdict and is read from the journal).
            if again is None or self._occurrence is None or _digest(self._occurrence(record)) in self._occurred:
                return False
            if not again():
                return False
        self._seen.add(key)
        line = orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE)
        if self._held is None:
            self._handle.write(line)
        else:
            self._held += line
        return True

    def committed(self, completed: bool) -> int:
        """The bytes at the file's start that a commit of the writer's state now covers: all of them, but for
        the records an earlier process left past its last commit (a kill) while this one has not completed its
        run: the run reads those documents again to write what their lines lack (`dedup run` restores their
        links when it starts, and writes a restored canonical's article where the file lacks it)."""
        if completed or self._tail is None:
            return self._handle.tell() + self.held
        return self._tail

    @property
    def held(self) -> int:
        """Bytes written and held, not yet handed to the file."""
        return len(self._held or b"")

    def flush(self) -> None:
        """Hand every line written so far to the file (the page cache: a killed process loses none of it)."""
        with self._naming_the_file():
            if self._held:
                self._handle.write(self._held)
                self._held.clear()
            self._handle.flush()

    def sync(self) -> None:
        """Make every line written so far durable (before the state that remembers them is committed)."""
        self.flush()
        with self._naming_the_file():
            os.fsync(self._handle.fileno())

    @contextmanager
    def _naming_the_file(self) -> Iterator[None]:
        """A write error says which file (a full disk says only "No space left on device")."""
        try:
            yield
        except OSError as exc:
            if exc.filename is not None:
                raise
            raise OSError(exc.errno, exc.strerror, str(self.path)) from exc

    def close(self) -> None:
        self.sync()
        self._handle.close()

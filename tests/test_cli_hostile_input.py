"""The `dedup` command line and its configuration on bad values, damaged files and pipes: each test a guarantee
that once broke (a traceback, a wrong exit code, a state put in the working directory, the outputs of two states
mixed, a gzip or a pipe not read)."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "examples" / "articles.jsonl"
CHEAP = ("--stages", "url,content,simhash")


def dedup(
    *args: object, env: dict[str, str] | None = None, cwd: Path | None = None, stdin: bytes | None = None
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DEDUP_")}
    return subprocess.run(
        [sys.executable, "-m", "streams", *map(str, args)],
        input=stdin,
        capture_output=True,
        timeout=300,
        check=False,
        cwd=cwd,
        env={**environment, "COLUMNS": "200", **(env or {})},
    )


def text(result: subprocess.CompletedProcess[str]) -> str:
    return result.stderr.decode() if isinstance(result.stderr, bytes) else result.stderr


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    stderr = text(result)
    assert "Traceback" not in stderr, stderr
    assert result.returncode == 2, (result.returncode, stderr)
    assert len(stderr.strip().splitlines()) == 1, stderr
    for needle in needles:
        assert needle in stderr, stderr


def links_of(out: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in (out / "links.jsonl").read_bytes().splitlines()]


# --- configuration values pydantic accepts but the run cannot use ------------------------------------------


@pytest.mark.parametrize(
    ("toml", "env"),
    [
        ("[retention]\nbands_days = inf\n", {}),  # TOML's inf passes ge=0; int(inf) raises OverflowError
        ("", {"DEDUP_RETENTION__BANDS_DAYS": "inf"}),
        ("", {"DEDUP_RETENTION__EXACT_DAYS": "1e200"}),  # seconds past SQLite's 64-bit INTEGER
        ("[retention]\nverdicts_days = 1e300\n", {}),
        ("max_record_bytes = 9223372036854775807\n", {}),  # readline(limit + 1) overflows ssize_t
    ],
    ids=["toml-inf-bands", "env-inf-bands", "env-huge-exact", "toml-huge-verdicts", "toml-max-record-bytes"],
)
def test_an_unusable_retention_or_size_is_one_line_not_a_traceback(
    tmp_path: Path, toml: str, env: dict[str, str]
) -> None:
    config = tmp_path / "dedup.toml"
    config.write_text(toml)
    result = dedup("run", SAMPLE, "--out", tmp_path / "out", *CHEAP, "-q", "--config", config, env=env)
    assert_one_line_error(result)


def test_an_empty_state_dir_variable_does_not_put_the_state_in_the_working_directory(tmp_path: Path) -> None:
    """`DEDUP_STATE_DIR=` (as a compose file or `env -u`-less script leaves it) was read as Path("") == ".":
    the state went to whatever folder the command was started in, shared by every run started there.
    An empty variable is now unset."""
    work = tmp_path / "work"
    work.mkdir()
    result = dedup("run", SAMPLE, "--out", tmp_path / "out", *CHEAP, "-q", env={"DEDUP_STATE_DIR": ""}, cwd=work)
    assert result.returncode in (0, 2), text(result)
    assert not (work / "state.sqlite3").exists(), "the state was written into the working directory"
    if result.returncode == 0:
        assert (tmp_path / "out" / "state" / "state.sqlite3").exists()


def test_dedup_stages_takes_the_form_of_the_stages_option(tmp_path: Path) -> None:
    """The README gives `DEDUP_STAGES` as the environment form of `--stages` (url,content,simhash); it was refused
    with 'error parsing value for field "stages" from source "EnvSettingsSource"' unless written as JSON."""
    result = dedup("run", SAMPLE, "--out", tmp_path / "out", "-q", env={"DEDUP_STAGES": "url,content,simhash"})
    assert result.returncode == 0, text(result)
    summary = orjson.loads((tmp_path / "out" / "summary.json").read_bytes())
    assert summary["stages"] == ["url", "content", "simhash"]


# --- inputs ---------------------------------------------------------------------------------------------------


def _truncated_gzip(path: Path) -> Path:
    path.write_bytes(gzip.compress(SAMPLE.read_bytes(), mtime=0)[:1500])
    return path


def _corrupt_gzip(path: Path) -> Path:
    data = bytearray(gzip.compress(SAMPLE.read_bytes(), mtime=0))
    data[200] ^= 0xFF
    data[201] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("command", ["run", "report"])
@pytest.mark.parametrize("damage", [_truncated_gzip, _corrupt_gzip], ids=["truncated", "corrupt"])
def test_a_damaged_gzip_input_is_one_line_with_exit_code_2(tmp_path: Path, command: str, damage) -> None:
    """A truncated download raised EOFError (click printed 'Aborted.' and exited 1); corrupt deflate data raised
    zlib.error (a traceback): neither is an OSError, which is all `one_line_errors` caught of the two."""
    source = damage(tmp_path / "articles.jsonl.gz")
    args = ("run", source, "--out", tmp_path / "out", *CHEAP, "-q") if command == "run" else ("report", source)
    assert_one_line_error(dedup(*args), str(source))


def test_an_input_given_through_process_substitution_is_read(tmp_path: Path) -> None:
    """`dedup run <(zcat day.jsonl.gz)` hands over /dev/fd/63, a pipe: `check_sources` wanted `is_file()` and
    said 'input file not found: /dev/fd/63' of a file that is there (a FIFO, /dev/stdin, /dev/null alike)."""
    out = tmp_path / "out"
    command = f"{sys.executable} -m streams run <(cat {SAMPLE}) --out {out} --stages url,content,simhash -q"
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert len(links_of(out)) == 12


@pytest.mark.parametrize("how", ["stdin", "upper-case suffix"])
def test_a_gzip_input_is_read_whatever_its_name(tmp_path: Path, how: str) -> None:
    """Gzip was recognised by the `.gz` suffix only: `cat day.jsonl.gz | dedup run -` or `day.jsonl.GZ` had every
    line rejected as invalid UTF-8, its articles kept only as escaped bytes in rejected.jsonl."""
    packed = gzip.compress(SAMPLE.read_bytes(), mtime=0)
    out = tmp_path / "out"
    if how == "stdin":
        result = dedup("run", "-", "--out", out, *CHEAP, "-q", stdin=packed)
    else:
        source = tmp_path / "articles.jsonl.GZ"
        source.write_bytes(packed)
        result = dedup("run", source, "--out", out, *CHEAP, "-q")
    assert result.returncode == 0, text(result)
    assert len(links_of(out)) == 12


# --- state and output folders ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "where", ["state.sqlite3 garbage", "journal.sqlite3 garbage", "state.sqlite3 a folder", "replay", "sample"]
)
def test_a_damaged_state_folder_is_one_line(tmp_path: Path, where: str) -> None:
    """sqlite3.DatabaseError / OperationalError are no OSError, ValueError or RuntimeError: they were a traceback."""
    state = tmp_path / "state"
    state.mkdir()
    garbage = bytes(range(256)) * 20
    if where == "state.sqlite3 a folder":
        (state / "state.sqlite3").mkdir()
    elif where in ("journal.sqlite3 garbage", "sample"):
        (state / "journal.sqlite3").write_bytes(garbage)
    else:
        (state / "state.sqlite3").write_bytes(garbage)
    if where == "replay":
        good = tmp_path / "good"
        assert dedup("run", SAMPLE, "--out", good, *CHEAP, "-q").returncode == 0
        result = dedup("replay", good / "links.jsonl", "--state", state, "-q")
    elif where == "sample":
        result = dedup("calibrate", "sample", "--state", state, "--out", tmp_path / "pairs.jsonl", "-q")
    else:
        result = dedup("run", SAMPLE, "--out", tmp_path / "out", "--state", state, *CHEAP, "-q")
    assert_one_line_error(result)


def test_a_forced_run_that_fails_leaves_the_outputs_to_their_own_state(tmp_path: Path) -> None:
    """`_claim_outputs` rewrote run.json for the new state before the state was opened; when that failed (here a
    state of another band layout) the outputs were not started over, yet run.json named the new state: the
    next run with that state, without --force, continued the old state's outputs instead of being refused."""
    b8 = tmp_path / "b8.toml"
    b8.write_text('[simhash]\nbands = "8x32+p1"\n')
    out, other = tmp_path / "out", tmp_path / "other"
    assert dedup("run", SAMPLE, "--out", out, *CHEAP, "-q").returncode == 0
    assert dedup("run", SAMPLE, "--out", other, *CHEAP, "-q", "--config", b8).returncode == 0
    owner = (out / "run.json").read_bytes()

    failed = dedup("run", SAMPLE, "--out", out, "--state", other / "state", *CHEAP, "-q", "--force")
    assert failed.returncode == 2, text(failed)  # the band layouts differ
    assert (out / "run.json").read_bytes() == owner, "a failed command changed which state owns the outputs"

    mixed = dedup("run", SAMPLE, "--out", out, "--state", other / "state", *CHEAP, "-q", "--config", b8)
    assert_one_line_error(mixed, "holds the outputs of state folder")


@pytest.mark.parametrize("content", [b"", b"[]\n"], ids=["empty", "not-an-object"])
def test_an_unreadable_run_json_is_one_line_naming_it(tmp_path: Path, content: bytes) -> None:
    """run.json was written in place (`write_bytes`), so a kill or a full disk could leave it empty: the rerun then
    said only 'Input is a zero-length, empty document: line 1 column 1 (char 0)'; a JSON list is a traceback."""
    out = tmp_path / "out"
    assert dedup("run", SAMPLE, "--out", out, *CHEAP, "-q").returncode == 0
    (out / "run.json").write_bytes(content)
    result = dedup("run", SAMPLE, "--out", out, *CHEAP, "-q")
    if result.returncode == 0:  # a fix may also repair it: the outputs are then still complete, each line once
        assert len(links_of(out)) == 12
        return
    assert_one_line_error(result, "run.json")


# --- report options -------------------------------------------------------------------------------------------


def test_a_nan_alarm_factor_is_refused(tmp_path: Path) -> None:
    """`--alarm-factor nan` passed `factor <= 1` and silently switched the drift alarm (and --fail-on-alarm) off."""
    out = tmp_path / "out"
    assert dedup("run", SAMPLE, "--out", out, *CHEAP, "-q").returncode == 0
    result = dedup("report", out / "links.jsonl", "--alarm-factor", "nan", "--json")
    assert_one_line_error(result, "alarm factor")


@pytest.mark.parametrize("command", [("topics", "create"), ("publish", str(SAMPLE))])
def test_a_kafka_setting_librdkafka_refuses_is_one_line(command: tuple[str, ...]) -> None:
    """A typo in DEDUP_KAFKA_CONFIG (a property librdkafka does not know) is said in one line naming it, before
    any broker is asked: it was a KafkaException traceback from the client's constructor."""
    env = {"DEDUP_KAFKA_BOOTSTRAP": "127.0.0.1:1", "DEDUP_KAFKA_CONFIG": '{"securty.protocol": "SSL"}'}
    assert_one_line_error(dedup(*command, env=env), "securty.protocol")

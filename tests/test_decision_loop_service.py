"""The whole correction loop against the streaming service, as a person runs it from a shell.

A real worker decides a labelled stream (a real broker, Redis, embedded vectors, the bundled
model); then, with nothing but the usual DEDUP_* settings: `dedup calibrate sample` draws pairs
from dedup.candidates, the known truth labels them, `dedup calibrate fit` fits cut-offs,
`dedup relink --decisions` applies the labels to Redis, the vectors and the topics, and
`dedup report` counts what dedup.links now says. Each step is checked against the topics.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from streams.evaluation.corpus import labelled_stream
from streams.evaluation.stack import Stack, assert_invariants
from streams.kafka.journal import latest as read_topic

STORIES, NEGATIVE_PAIRS = 6, 12


def dedup(stack: Stack, *args: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "streams", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **stack.env(), "COLUMNS": "200"},
    )
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    return done


@pytest.fixture
def stack(make_stack: Callable[[str], Stack]) -> Stack:
    stack = make_stack("url,content,simhash,semantic")
    stack.partitions = 1
    stack.create_topics()
    return stack


def test_sample_label_fit_relink_and_report_against_the_service(stack: Stack, tmp_path: Path) -> None:
    stream = labelled_stream(negative_pairs=NEGATIVE_PAIRS, stories=STORIES)
    group = {item.doc_id: item.group for item in stream}
    worker = stack.start_worker()
    stack.produce(orjson.dumps(item.record) for item in stream)
    before, _ = stack.final_links(set(group), timeout=300)
    worker.stop()  # the embedded vector shard is one process's at a time
    topics = stack.settings().topics

    # Sample from dedup.candidates: every pair is a document and a canonical it was compared with.
    pairs_file = tmp_path / "pairs.jsonl"
    dedup(stack, "calibrate", "sample", "--out", pairs_file, "--per-band", 4)
    pairs = [orjson.loads(line) for line in pairs_file.read_bytes().splitlines()]
    candidates = read_topic(stack.settings(), topics.candidates).records
    assert pairs and all(candidates[p["a"]] and before[p["b"]]["verdict"] == "unique" for p in pairs)

    # Labels from the truth; the fit sees them all.
    labels_file = tmp_path / "labels.jsonl"
    labels = [
        {**pair, "label": group[pair["a"]] == group[pair["b"]], "labelled_at": "2026-12-01T00:00:00Z"} for pair in pairs
    ]
    labels_file.write_bytes(b"".join(orjson.dumps(label) + b"\n" for label in labels))
    fit = orjson.loads(dedup(stack, "calibrate", "fit", labels_file, "--json", "--out", tmp_path / "t.toml").stdout)
    assert sum(band["n"] for band in fit["bands"]) == len(labels)
    assert sum(band["duplicates"] for band in fit["bands"]) == sum(label["label"] for label in labels)

    # Relink by the labels: a wrong link or review is undone, a right review confirmed.
    dedup(stack, "relink", "--decisions", labels_file)
    after = read_topic(stack.settings(), topics.links).records
    assert after.keys() == before.keys()
    assert_invariants(after)
    expected_changes = 0
    for label in labels:
        was, now = before[label["a"]], after[label["a"]]
        linked = was["verdict"] in ("duplicate", "review") and was["canonical_id"] == label["b"]
        if linked and not label["label"]:
            expected_changes += 1
            assert now["verdict"] == "unlinked" and now["decided_by"] == "person", now
            assert now["previous"]["canonical_id"] == label["b"]
        elif linked and was["verdict"] == "review":
            expected_changes += 1
            assert (now["verdict"], now["canonical_id"]) == ("duplicate", label["b"]), now
        elif not linked and label["label"] is False:
            assert (now["verdict"], now["canonical_id"]) == (was["verdict"], was["canonical_id"])
    changed = [doc for doc in after if after[doc].get("decided_by") == "person"]
    assert expected_changes > 0  # the stream has wrong links and reviews to correct (6 here)
    assert len(changed) >= expected_changes  # and exact copies follow what they copy
    for doc in changed:  # every document unlinked is published again, as a canonical
        if after[doc]["verdict"] == "unlinked":
            assert read_topic(stack.settings(), topics.deduped).records[doc]["features"]["verdict"] == "unlinked"

    # The report counts what the links topic says, final verdict by final verdict.
    report = orjson.loads(dedup(stack, "report", "--json").stdout)
    counted = Counter((link["stage"] or "none", link["verdict"]) for link in after.values())
    assert {
        (stage, verdict): count
        for stage, verdicts in report["by_stage"].items()
        for verdict, count in verdicts.items()
        if count
    } == dict(counted)

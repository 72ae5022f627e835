"""`dedup review` driven by Textual's pilot on states that `dedup run` built from ../shared/data.

The semantic state: MRPC negative pairs (two sentences about one event, not paraphrases) as
`labelled_stream` orders them, each later sentence followed by a re-crawl (a URL copy) and a
syndicated copy (a content copy). The bundled model sends a third of the later sentences to review
(scores between 0.95 and 0.98), and their copies share the review verdict: the screen must show
the sentence, not its copies, and each decision must carry the copies along. The SimHash state: two
NTREX stories with their edits, `group_cap = 3` and no semantic stage, so the edits of a full group
go to review at a Hamming distance.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest
from rich.text import Text
from textual.widgets import Static

from streams.cli.review import files_review, review_screen, service_review
from streams.core.model import Verdict
from streams.evaluation.corpus import labelled_stream
from streams.evaluation.stack import Stack
from streams.kafka.journal import latest as read_topic
from streams.labelling.pairs import LabelWriter, Pair, read_label_records
from streams.labelling.review import NO_TEXT, Apply, ReviewApp
from streams.stores.redis_store import RedisStateStore

REPO = Path(__file__).resolve().parents[1]
SIZE = (140, 48)
NEGATIVE_PAIRS = 24
LABEL_SCHEMA = orjson.loads((REPO / "schemas" / "label.schema.json").read_bytes())
LINK_SCHEMA = orjson.loads((REPO / "schemas" / "link.schema.json").read_bytes())


def dedup(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streams", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(record) + b"\n" for record in records))
    return path


def negatives_with_copies() -> list[dict[str, Any]]:
    """MRPC negative pairs; each later sentence (`-b`) followed by its re-crawl and a syndicated copy."""
    records = []
    for item in labelled_stream(negative_pairs=NEGATIVE_PAIRS, stories=0):
        record = dict(item.record)
        records.append(record)
        if record["id"].endswith("-b"):
            records.append({**record, "id": f"{record['id']}-recrawl", "url": f"{record['url']}?utm_source=feed"})
            records.append({**record, "id": f"{record['id']}-wire", "url": record["url"].replace("hardb", "wire")})
    return records


@pytest.fixture(scope="module")
def semantic_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`dedup run` over the negatives with the bundled model; kept read-only, each test copies it."""
    folder = tmp_path_factory.mktemp("review-semantic")
    stream = write_jsonl(folder / "stream.jsonl", negatives_with_copies())
    done = dedup("run", str(stream), "--out", str(folder / "out"), "-q")
    assert done.returncode == 0, done.stderr
    return folder / "out"


@pytest.fixture
def out(semantic_run: Path, tmp_path: Path) -> Path:
    shutil.copytree(semantic_run, tmp_path / "out")
    return tmp_path / "out"


def links(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def latest(*paths: Path) -> dict[str, dict[str, Any]]:
    return {record["doc_id"]: record for path in paths for record in links(path)}


def reviews(out: Path) -> list[dict[str, Any]]:
    """The review records of the run, in decision order."""
    return [record for record in links(out / "links.jsonl") if record["verdict"] == "review"]


def session(
    state: Path,
    relinked: Path,
    labels: Path | None,
    keys: list[str],
    check: Callable[[ReviewApp], None] | None = None,
    limit: int | None = None,
) -> ReviewApp:
    """One `dedup review --state STATE --out RELINKED --labels LABELS --by alice`, wired as the command wires it."""
    pairs, apply = files_review(state, relinked, [], limit)
    return screen_session(pairs, apply, labels, keys, check)


def screen_session(
    pairs: list[Pair],
    apply: Apply,
    labels: Path | None,
    keys: list[str],
    check: Callable[[ReviewApp], None] | None = None,
) -> ReviewApp:
    """Drive the review screen with the pilot: press `keys`, run `check` on the live screen, quit with q."""

    async def drive(writer: LabelWriter | None) -> ReviewApp:
        app = review_screen(pairs, apply, writer, "alice")
        async with app.run_test(size=SIZE) as pilot:
            for key in keys:
                await pilot.press(key)
            await pilot.pause()
            if check is not None:
                check(app)
            await pilot.press("q")
        assert app.return_value is not None, "q did not quit the screen"
        return app

    if labels is None:
        return asyncio.run(drive(None))
    with LabelWriter(labels) as writer:
        return asyncio.run(drive(writer))


def shown(app: ReviewApp, widget: str) -> str:
    content = app.query_one(widget, Static).content
    return content.plain if isinstance(content, Text) else str(content)


# ------------------------------------------------------------------------------- semantic reviews


def test_the_run_sends_sentences_to_review_with_their_copies(out: Path) -> None:
    found = reviews(out)
    heads = [r for r in found if r["stage"] == "semantic"]
    assert len(heads) >= 4, "the bundled model sends several MRPC negatives to review"
    assert all(0.95 <= r["score"] < 0.98 for r in heads)
    copies = {r["doc_id"] for r in found if r["stage"] in ("url", "content")}
    assert copies == {f"{r['doc_id']}-{kind}" for r in heads for kind in ("recrawl", "wire")}


def test_y_and_n_are_labels_and_relinks_and_the_copies_follow(out: Path, tmp_path: Path) -> None:
    first, second = [r for r in reviews(out) if r["stage"] == "semantic"][:2]
    relinked, labels = tmp_path / "relinked", tmp_path / "labels.jsonl"
    screens: list[str] = []

    def first_screen(app: ReviewApp) -> None:
        screens.append(shown(app, "#pair"))

    # What the screen shows first: the oldest review, the sentence itself (never one of its copies).
    session(out / "state", relinked, labels, [], first_screen)
    assert screens[0].startswith("review 1 of ")
    assert "semantic review" in screens[0] and f"score {first['score']:.4f}" in screens[0]

    app = session(out / "state", relinked, labels, ["y", "n"])
    assert app.applied == [
        f"applied: {first['doc_id']} is a duplicate of {first['canonical_id']}; 2 exact copies follow it",
        f"applied: {second['doc_id']} is unlinked (a canonical, published); 2 exact copies follow it",
    ]

    # Two labels, valid labelled pairs for calibration.
    records = list(read_label_records(labels))
    assert [(r["a"], r["b"], r["label"]) for r in records] == [
        (first["doc_id"], first["canonical_id"], True),
        (second["doc_id"], second["canonical_id"], False),
    ]
    for record, review in zip(records, (first, second), strict=True):
        jsonschema.validate(record, LABEL_SCHEMA, format_checker=jsonschema.FormatChecker())
        assert record["score"] == review["score"] and record["model"] == review["model"]
        assert record["source"] == "review" and record["verdict"] == "review" and record["labelled_by"] == "alice"
        assert record["same_language"] is True and record["a_text"] and record["b_text"]

    # The relinks: new link records, decided by a person, the review they replace kept in them.
    written = links(relinked / "links.jsonl")
    for record in written:
        jsonschema.validate(record, LINK_SCHEMA)
        assert record["decided_by"] == "person" and record["previous"]["verdict"] == "review"
    now = latest(out / "links.jsonl", relinked / "links.jsonl")
    a, b = first["doc_id"], first["canonical_id"]
    assert (now[a]["verdict"], now[a]["canonical_id"], now[a]["stage"]) == ("duplicate", b, "semantic")
    assert "by alice" in now[a]["reason"]
    for copy in (f"{a}-recrawl", f"{a}-wire"):
        assert (now[copy]["verdict"], now[copy]["canonical_id"]) == ("duplicate", b)
    a = second["doc_id"]
    assert (now[a]["verdict"], now[a]["canonical_id"], now[a]["stage"]) == ("unlinked", a, None)
    for copy in (f"{a}-recrawl", f"{a}-wire"):
        assert (now[copy]["verdict"], now[copy]["canonical_id"]) == ("duplicate", a)
    published = [orjson.loads(line) for line in (relinked / "deduped.jsonl").read_bytes().splitlines()]
    assert [(p["id"], p["features"]["verdict"]) for p in published] == [(a, "unlinked")]


def test_a_second_session_shows_only_the_remaining_reviews(out: Path, tmp_path: Path) -> None:
    heads = [r["doc_id"] for r in reviews(out) if r["stage"] == "semantic"]
    relinked, labels = tmp_path / "relinked", tmp_path / "labels.jsonl"
    seen: list[list[str]] = []

    def pairs_of(app: ReviewApp) -> None:
        seen.append([pair.a for pair in app.pairs])

    # y on the first, skip the second, n on the third.
    session(out / "state", relinked, labels, ["y", "s", "n"], pairs_of)
    assert seen[0] == heads
    # Again: the skipped one first, then those never shown; --limit takes the oldest of them.
    session(out / "state", relinked, labels, [], pairs_of)
    assert seen[1] == [heads[1], *heads[3:]]
    session(out / "state", relinked, labels, [], pairs_of, limit=2)
    assert seen[2] == [heads[1], heads[3]]
    # The labels file holds no skipped review; what a review is shown by is its verdict, not the labels.
    assert [r["a"] for r in read_label_records(labels)] == [heads[0], heads[2]]


def test_back_changes_a_decision_as_a_relink_and_the_last_label_wins(out: Path, tmp_path: Path) -> None:
    head = next(r for r in reviews(out) if r["stage"] == "semantic")
    a, b = head["doc_id"], head["canonical_id"]
    relinked, labels = tmp_path / "relinked", tmp_path / "labels.jsonl"
    # y, back, n (unlinked), back, y (linked back): each applied as it is made.
    app = session(out / "state", relinked, labels, ["y", "b", "n", "b", "y"])
    copies = "2 exact copies follow it"
    assert app.applied == [
        f"applied: {a} is a duplicate of {b}; {copies}",
        f"applied: {a} is unlinked (a canonical, published); {copies}",
        f"applied: {a} is a duplicate of {b}; {copies}",
    ]
    history = [(r["verdict"], r["canonical_id"]) for r in links(relinked / "links.jsonl") if r["doc_id"] == a]
    assert history == [("duplicate", b), ("unlinked", a), ("duplicate", b)]
    wire = [r["canonical_id"] for r in links(relinked / "links.jsonl") if r["doc_id"] == f"{a}-wire"]
    assert wire == [b, a, b]
    assert [r["label"] for r in read_label_records(labels)] == [True, False, True]
    # A review decided in an earlier session is not shown again (`dedup relink --decisions` changes it).
    pairs, _ = files_review(out / "state", relinked, [], None)
    assert a not in {pair.a for pair in pairs}


def test_the_labels_feed_calibrate_fit(out: Path, tmp_path: Path) -> None:
    heads = [r for r in reviews(out) if r["stage"] == "semantic"]
    relinked, labels = tmp_path / "relinked", tmp_path / "labels.jsonl"
    ends: list[str] = []
    # MRPC negatives: none is a paraphrase.
    session(out / "state", relinked, labels, ["n"] * len(heads), lambda app: ends.append(shown(app, "#pair")))
    assert ends[0].startswith(f"Nothing left to review: {len(heads)} of {len(heads)} reviews decided and applied")
    done = dedup("calibrate", "fit", str(labels), "--json", "--out", str(tmp_path / "thresholds.toml"))
    assert done.returncode == 0, done.stderr
    fitted = orjson.loads(done.stdout)
    counted = {(b["low"], b["high"]): (b["n"], b["duplicates"]) for b in fitted["bands"] if b["n"]}
    assert sum(n for n, _ in counted.values()) == len(heads) and all(d == 0 for _, d in counted.values())
    assert fitted["link"]["same"] is None  # no band reaches 99% precision on these: nothing links
    assert (tmp_path / "thresholds.toml").is_file()
    # Every review was decided: a new session has nothing to show.
    pairs, _ = files_review(out / "state", relinked, [], None)
    assert pairs == []


# ------------------------------------------------------------------------------- SimHash reviews


@pytest.fixture(scope="module")
def simhash_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two NTREX stories, stages 1 to 3, groups capped at 3: their edits go to review at a distance."""
    folder = tmp_path_factory.mktemp("review-simhash")
    stream = write_jsonl(folder / "stream.jsonl", [dict(item.record) for item in labelled_stream(0, stories=2)])
    (folder / "cap.toml").write_text("group_cap = 3\n", encoding="utf-8")
    done = dedup("run", str(stream), "--out", str(folder / "out"), "-q", "--stages", "url,content,simhash",
                 "--config", str(folder / "cap.toml"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    return folder


def test_a_simhash_review_shows_its_distance_and_is_applied_but_not_labelled(simhash_run: Path, tmp_path: Path) -> None:
    shutil.copytree(simhash_run, tmp_path / "run")
    out = tmp_path / "run" / "out"
    # The copy's run.json names the original state; the copied run's articles are given instead.
    (out / "run.json").write_bytes(orjson.dumps({"state": str(out / "state")}))
    first = next(r for r in reviews(out) if r["stage"] == "simhash")
    relinked, labels = tmp_path / "relinked", tmp_path / "labels.jsonl"
    lines: list[str] = []

    def check(app: ReviewApp) -> None:
        lines.append(shown(app, "#pair"))
        lines.append(shown(app, "#a-text"))

    app = session(out / "state", relinked, labels, [], check)
    assert f"SimHash review: Hamming distance {first['score']} of 64 bits" in lines[0]
    assert lines[1] and NO_TEXT not in lines[1], "the text comes from the run's deduped.jsonl"
    assert all(pair.a.endswith(("-us", "-uk", "-update", "-headline")) for pair in app.pairs)

    app = session(out / "state", relinked, labels, ["n"])
    assert app.applied == [f"applied: {first['doc_id']} is unlinked (a canonical, published)"]
    now = latest(out / "links.jsonl", relinked / "links.jsonl")
    assert now[first["doc_id"]]["verdict"] == "unlinked" and now[first["doc_id"]]["decided_by"] == "person"
    assert not labels.exists() or labels.read_bytes() == b"", "a Hamming distance is no labelled pair"


def test_a_text_found_nowhere_is_said_so_and_a_refused_decision_stays_on_screen(
    simhash_run: Path, tmp_path: Path
) -> None:
    shutil.copytree(simhash_run / "out" / "state", tmp_path / "state")  # the state alone: no articles anywhere
    first = next(r for r in reviews(simhash_run / "out") if r["stage"] == "simhash")
    relinked = tmp_path / "relinked"
    seen: list[tuple[str, str, str | None]] = []

    def check(app: ReviewApp) -> None:
        seen.append((shown(app, "#a-text"), shown(app, "#b-text"), app.current.a if app.current else None))

    app = session(tmp_path / "state", relinked, None, ["n"], check)
    a_text, b_text, current = seen[0]
    assert a_text == NO_TEXT and b_text == NO_TEXT
    assert current == first["doc_id"] and app.applied == [], "unlinking needs an article to publish: refused"
    app = session(tmp_path / "state", relinked, None, ["y"])
    assert app.applied == [f"applied: {first['doc_id']} is a duplicate of {first['canonical_id']}"]


# ------------------------------------------------------------------------------- the command


def test_the_command_without_a_terminal_is_refused_before_any_file_is_made(out: Path, tmp_path: Path) -> None:
    relinked, labels = tmp_path / "relinked", tmp_path / "labels.jsonl"
    done = dedup("review", "--state", str(out / "state"), "--out", str(relinked), "--labels", str(labels))
    assert done.returncode == 2 and "run it in a terminal" in done.stderr, done.stderr
    assert not relinked.exists() and not labels.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--state", "STATE"], "give --out DIR"),
        (["--state", "EMPTY", "--out", "o"], "has no journal of links"),
        (["--articles", "x.jsonl"], "--out and --articles go with --state"),
        (["--state", "STATE", "--out", "o", "--limit", "0"], "Invalid value for '--limit'"),
    ],
)
def test_mistakes_are_one_line(out: Path, tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "empty").mkdir()
    given = {"STATE": str(out / "state"), "EMPTY": str(tmp_path / "empty"), "o": str(tmp_path / "o")}
    done = dedup("review", "--labels", str(tmp_path / "labels.jsonl"), *[given.get(arg, arg) for arg in args])
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_nothing_left_to_review_is_said_and_not_an_error(simhash_run: Path, tmp_path: Path) -> None:
    shutil.copytree(simhash_run / "out" / "state", tmp_path / "state")
    pairs, _ = files_review(tmp_path / "state", tmp_path / "relinked", [], None)
    session(tmp_path / "state", tmp_path / "relinked", None, ["y"] * len(pairs))
    done = dedup("review", "--state", str(tmp_path / "state"), "--out", str(tmp_path / "relinked"), "--labels",
                 str(tmp_path / "labels.jsonl"))  # fmt: skip
    assert done.returncode == 0 and "no reviews left to decide" in done.stderr, done.stderr


# ------------------------------------------------------------------------------- the service


SERVICE_PAIRS = 12
"""The first MRPC pairs of the stream: a handful of reviews, few documents for the worker to embed."""


def test_the_service_is_reviewed_through_redis_the_broker_and_the_vectors(
    make_stack: Callable[[str], Stack], tmp_path: Path
) -> None:
    stack = make_stack("url,content,simhash,semantic")
    stack.partitions = 1  # decisions in input order, as `dedup run` makes them
    stack.extra_env["DEDUP_TOPICS__CANDIDATES"] = f"{stack.name}.dedup.candidates"
    stack.create_topics()
    records = [r for r in negatives_with_copies() if int(r["id"].split("-")[1]) < SERVICE_PAIRS]
    worker = stack.start_worker()
    stack.produce(orjson.dumps(record) for record in records)
    first, _ = stack.final_links({record["id"] for record in records}, timeout=300)
    worker.stop()  # the embedded vector shard is one process's at a time
    order = sorted(first.values(), key=lambda record: record["seq"])
    heads = [r for r in order if r["verdict"] == "review" and r["stage"] == "semantic"]
    assert len(heads) >= 3, "the bundled model sends several MRPC negatives to review"

    settings = stack.settings()
    labels = tmp_path / "labels.jsonl"
    pairs, apply = service_review(settings, None)
    assert [pair.a for pair in pairs] == [r["doc_id"] for r in heads]
    app = screen_session(pairs, apply, labels, ["y", "n"])
    one, two = heads[0], heads[1]
    assert app.applied == [
        f"applied: {one['doc_id']} is a duplicate of {one['canonical_id']}; 2 exact copies follow it",
        f"applied: {two['doc_id']} is unlinked (a canonical, published); 2 exact copies follow it",
    ]
    for record in read_label_records(labels):
        jsonschema.validate(record, LABEL_SCHEMA, format_checker=jsonschema.FormatChecker())

    now = read_topic(settings, settings.topics.links).records
    a = one["doc_id"]
    assert (now[a]["verdict"], now[a]["canonical_id"], now[a]["decided_by"]) == (
        "duplicate",
        one["canonical_id"],
        "person",
    )
    assert now[a]["seq"] > max(r["seq"] for r in order)
    assert now[f"{a}-wire"]["canonical_id"] == one["canonical_id"]
    a = two["doc_id"]
    assert (now[a]["verdict"], now[a]["canonical_id"], now[a]["decided_by"]) == ("unlinked", a, "person")
    assert now[f"{a}-recrawl"]["canonical_id"] == a and now[a]["vector"]
    deduped = read_topic(settings, settings.topics.deduped).records
    assert deduped[a]["features"]["verdict"] == "unlinked"
    redis_state = RedisStateStore.from_url(stack.redis_url, prefix=settings.redis_prefix)
    try:
        held = redis_state.verdicts_of([one["doc_id"], a, f"{a}-wire"])
    finally:
        redis_state.close()
    assert [(link.verdict, link.canonical_id) for link in held.values() if link is not None] == [
        (Verdict.DUPLICATE, one["canonical_id"]),
        (Verdict.UNLINKED, a),
        (Verdict.DUPLICATE, a),
    ]

    # Again: only the remaining reviews.
    pairs, _ = service_review(settings, None)
    assert [pair.a for pair in pairs] == [r["doc_id"] for r in heads[2:]]

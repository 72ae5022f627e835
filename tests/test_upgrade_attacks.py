"""Attacks on the upgrade path: the release before (commit ce9bcb2) and this code side by side, on one state.

The old code runs from a git worktree of that commit (made here when missing, removed after the session), in
processes of its own with the same interpreter. Every test but the guards (said so in their docstrings) fails on
the code it was written against: each shows a bug.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import redis

from streams.config import Settings
from streams.core.cascade import Cascade
from streams.core.model import Document, Stage, Verdict
from streams.core.relink import Cutoff
from streams.labelling.review import review_pairs
from streams.records.article import Featurizer, format_timestamp
from streams.records.output import link_record
from streams.runner.embedded import RunPaths, run
from streams.runner.relink import relink_files
from streams.runner.replay import replay_files
from streams.stores.batched import BatchedState
from streams.stores.redis_lock import RedisLock
from streams.stores.redis_store import RedisStateStore
from streams.stores.sqlite import SqliteStateStore
from tests.test_figure_check import DAYS, MARKET_EN, T0

OLD_RELEASE = "ce9bcb2"
ROOT = Path(__file__).resolve().parents[1]
CHEAP = [Stage.URL, Stage.CONTENT, Stage.SIMHASH]


MARKS_RELEASE = "a9358eb"
"""The last commit whose run.json names no command, and whose relinks left the output marks where they were."""


@pytest.fixture(scope="session")
def old_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A worktree of the release before, removed after the session (skipped where the clone lacks the commit)."""
    yield from _worktree(OLD_RELEASE, tmp_path_factory)


@pytest.fixture(scope="session")
def marks_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from _worktree(MARKS_RELEASE, tmp_path_factory)


def _worktree(commit: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"]).returncode:
        pytest.skip(f"commit {commit} is not in this clone")
    tree = tmp_path_factory.mktemp(f"release-{commit}") / "old"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit], check=True, capture_output=True
    )
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
        shutil.rmtree(tree, ignore_errors=True)


def old(tree: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`python ARGS` with the old release first on the path (its `streams`, not this checkout's)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


_MARK_LAYOUT_3 = """
import sys, redis
from streams.stores.redis_store import RedisStateStore
from streams.stores.sqlite import SqliteStateStore
client = redis.Redis.from_url(sys.argv[1], decode_responses=True)
for prefix in sys.argv[2:]:
    RedisStateStore(client, prefix).clock()  # the old release marks a new state with its layout, 3
    print(client.get(prefix + "layout"))
"""


def layout_3_states(tree: Path, redis_url: str, count: int) -> list[str]:
    """Prefixes of empty Redis states that the old release marked as its own (layout 3)."""
    prefixes = [f"t{uuid.uuid4().hex}:" for _ in range(count)]
    done = old(tree, "-c", _MARK_LAYOUT_3, redis_url, *prefixes)
    assert done.returncode == 0, done.stderr
    assert all(line.startswith("3/16 ") for line in done.stdout.splitlines()), done.stdout
    return prefixes


def market_docs(settings: Settings) -> list[Document]:
    """Today's and the next session's market report: one template, other figures, 6 SimHash bits apart."""
    featurizer = Featurizer(settings)
    docs = []
    for n, day in enumerate(DAYS):
        article = {
            "id": f"r{n}",
            "url": f"https://m.example.com/{n}",
            "title": MARKET_EN[0].format(**day),
            "body": MARKET_EN[1].format(**day),
            "published_at": format_timestamp(T0 + n * 86_400),
        }
        doc = featurizer.featurize(article, b"", ingest_time=T0 + n * 86_400)
        assert isinstance(doc, Document), doc
        docs.append(doc)
    return docs


# ------------------------------------------------------------------------------------------ state folders


def test_a_dry_run_relink_leaves_a_state_folder_the_old_release_can_still_write(old_tree: Path, tmp_path: Path) -> None:
    """`dedup relink --dry-run` "writes nothing" (README), and takes no lock. Run by this release on a state folder
    of the release before (what a user does to try the new version before switching), it still opens the state
    with `SqliteStateStore`, whose constructor adds `canonicals.figures` by ALTER TABLE
    (streams/stores/sqlite.py:141-143). The old release writes canonicals with a positional
    `INSERT INTO canonicals VALUES (9 values)`, so every later `dedup run` of the old release (the cron job still
    running it, or a rollback) stops at its commit: "table canonicals has 10 columns but 9 values were supplied",
    exit code 2, its outputs written and its state never committed again."""
    day1, day2 = tmp_path / "day1.jsonl", tmp_path / "day2.jsonl"
    for path, n in ((day1, 0), (day2, 1)):
        article = {
            "id": f"r{n}",
            "url": f"https://m.example.com/{n}",
            "title": MARKET_EN[0].format(**DAYS[n]),
            "body": MARKET_EN[1].format(**DAYS[n]),
            "published_at": format_timestamp(T0 + n * 86_400),
        }
        path.write_bytes(orjson.dumps(article) + b"\n")
    state = tmp_path / "state"
    command = ("-m", "streams", "run", "--out", str(tmp_path / "o1"), "--state", str(state), "-q")
    first = old(old_tree, *command, "--stages", "url,content,simhash", str(day1))
    assert first.returncode == 0, first.stderr

    untouched = tmp_path / "untouched"
    shutil.copytree(state, untouched, ignore=shutil.ignore_patterns("LOCK"))
    control = ("-m", "streams", "run", "--out", str(tmp_path / "o2"), "--state", str(untouched), "-q")
    assert (
        old(old_tree, *control, "--stages", "url,content,simhash", str(day2)).returncode == 0
    )  # the old state is fine

    result = relink_files(state, tmp_path / "dry", cutoff=Cutoff(0.99, "same"), dry_run=True)
    assert not result.plan.changes and not (tmp_path / "dry").exists()

    second = old(old_tree, *command, "--stages", "url,content,simhash", str(day2))
    assert second.returncode == 0, second.stderr


def test_a_run_the_old_release_left_unfinished_is_completed_with_one_verdict_per_document(
    old_tree: Path, tmp_path: Path
) -> None:
    """A user whose old-release run was killed between its outputs and its state's commit upgrades and runs the
    same command again. Decided again, the next day's report came out otherwise (this release keeps it apart by
    the figure check), and since the line differs (`link_identity`) a second cascade verdict for the same document
    was appended: links.jsonl said r1 is a duplicate of r0 and then that it is unique, the live state held the
    second, `dedup replay` restored the first and skipped the second as "already there". The resumed run takes in
    the verdicts the outputs already published: one verdict per document, the live state the rebuilt one (a
    `dedup relink` is how a published verdict changes)."""
    day = tmp_path / "day.jsonl"
    day.write_bytes(
        b"".join(
            orjson.dumps(
                {
                    "id": f"r{n}",
                    "url": f"https://m.example.com/{n}",
                    "title": MARKET_EN[0].format(**DAYS[n]),
                    "body": MARKET_EN[1].format(**DAYS[n]),
                    "published_at": format_timestamp(T0 + n * 3600),
                }
            )
            + b"\n"
            for n in range(2)
        )
    )
    out, state = tmp_path / "out", tmp_path / "state"
    command = (
        "-m",
        "streams",
        "run",
        "--out",
        str(out),
        "--state",
        str(state),
        "-q",
        "--stages",
        "url,content,simhash",
    )
    done = old(old_tree, *command, str(day))
    assert done.returncode == 0, done.stderr
    shutil.rmtree(state)  # what a kill after the outputs were synced and before the state's first commit leaves

    stats = run(Settings(stages=CHEAP), [str(day)], RunPaths(out=out, state=state))
    assert any(note.startswith("took in the verdicts of 2 documents") for note in stats.notes), stats.notes
    replay_files([str(out / "links.jsonl")], tmp_path / "rebuilt")
    verdicts = []
    for folder in (state, tmp_path / "rebuilt"):
        store = SqliteStateStore(folder / "state.sqlite3")
        try:
            link = store.verdict_of("r1")
        finally:
            store.close()
        assert link is not None
        verdicts.append((link.verdict, link.canonical_id))
    lines = [orjson.loads(line) for line in (out / "links.jsonl").read_bytes().splitlines()]
    said = [(line["verdict"], line["canonical_id"]) for line in lines if line["doc_id"] == "r1"]
    assert said == [("duplicate", "r0")]  # what the old release published, once
    assert verdicts[0] == (Verdict.DUPLICATE, "r0")
    assert verdicts[1] == verdicts[0], said


# ------------------------------------------------------------------------------------------ Redis, layout 3


def _decide_in_batches(client: redis.Redis, prefix: str, settings: Settings, batches: list[list[Document]]) -> list:
    """The worker's way: a batch snapshot (BatchedState) decided under the registration lease, then flushed."""
    store = RedisStateStore(client, prefix)
    state = BatchedState(store)
    cascade = Cascade(settings, state)
    lock = RedisLock(client, f"{prefix}lock:register", ttl_s=30, fence=store.fence)
    links = []
    for batch in batches:
        with lock.held() as lease:
            state.warm(cascade.reads(batch))
            links += [cascade.decide(doc).link for doc in batch]
            state.flush(lease, exact=True)
    return [(link.doc_id, link.verdict, link.canonical_id) for link in links]


def test_on_a_layout_3_state_a_verdict_does_not_depend_on_the_batch(old_tree: Path, redis_url: str) -> None:
    """A Redis state of the release before (layout 3) "is read and written as it was, its canonicals without
    figures (checked against nothing)" (README, "Memory"). The worker's batch snapshot keeps each canonical it
    makes with its figures (streams/stores/batched.py:305-310, `Canonical(..., figures)` in `_new`), while the
    layout 3 store drops them when the batch is written (`_Entries.write`). So the next day's report is kept
    apart from today's when both arrive in one batch, and linked to it when they arrive in two: the verdict hangs
    on batch boundaries, which a one-by-one stream and a replay of the links do not see."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    together, apart = layout_3_states(old_tree, redis_url, 2)
    settings = Settings(stages=CHEAP)
    docs = market_docs(settings)
    one_batch = _decide_in_batches(client, together, settings, [docs])
    two_batches = _decide_in_batches(client, apart, settings, [docs[:1], docs[1:]])
    assert two_batches[1] == ("r1", Verdict.DUPLICATE, "r0")  # checked against nothing, as README says
    assert client.get(f"{together}layout").startswith("3/16 ")  # still layout 3
    assert one_batch == two_batches


def test_the_review_screen_names_no_figure_check_that_a_layout_3_state_never_made(
    old_tree: Path, redis_url: str
) -> None:
    """On a layout 3 state the cascade compares no figures (the store keeps none), but every link record the new
    workers write carries `figures`. A near-duplicate of a group at `group_cap` went to review with no reason, and
    the review screen, for a SimHash review without a reason, inferred one from the two link records' digests and
    told the person "figure check: other figures" for what was the group cap (the same wherever the digests were
    not compared: `figure_check = "off"`). A group cap's review now says so itself, and the screen infers nothing."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    (prefix,) = layout_3_states(old_tree, redis_url, 1)
    settings = Settings(stages=CHEAP, group_cap=1)
    docs = market_docs(settings)
    cascade = Cascade(settings, RedisStateStore(client, prefix))
    records = [link_record(cascade.decide(doc).link, doc, stages=CHEAP) for doc in docs]
    assert (records[1]["verdict"], records[1]["canonical_id"]) == ("review", "r0")
    assert records[1]["reason"] == "group cap: the group of r0 has 1 members, group_cap is 1"
    assert records[0]["figures"] and records[1]["figures"]  # carried, though the state compared none
    (pair,) = review_pairs(records, lambda doc_id: None, lambda doc_id: None)
    assert pair.extra["reason"].startswith("group cap: "), pair.extra
    (pair,) = review_pairs([{**records[1], "reason": None}], lambda doc_id: None, lambda doc_id: None)
    assert "reason" not in pair.extra  # a record sent again without it: nothing inferred


# ------------------------------------------------------------------------------------------ guards

_OLD_STORE_OPS = """
import sys, redis
from streams.stores.redis_store import RedisStateStore
from streams.stores.sqlite import SqliteStateStore
client = redis.Redis.from_url(sys.argv[1], decode_responses=True)
ops = {
    "clock": lambda s: s.clock(),
    "verdict_of": lambda s: s.verdict_of("r0"),
    "band_candidates": lambda s: s.band_candidates("en", (1, 2, 3, 4)),
    "add_canonical": lambda s: s.add_canonical("z", 5, "en", (1, 2, 3, 4), 1764979200),
    "advance": lambda s: s.advance(1764979200 + 400 * 86400),
    "expire": lambda s: s.expire(),
}
for name, op in ops.items():
    try:
        op(RedisStateStore(client, sys.argv[2]))
        print(name, "accepted")
    except Exception as exc:
        print(name, type(exc).__name__, str(exc).replace(chr(10), " "))
"""


def test_guard_the_old_release_refuses_a_layout_4_state_and_leaves_it_as_it_was(old_tree: Path, redis_url: str) -> None:
    """Guard (found correct, covered by no test): every read and write of the old release's store on a state this
    release made (layout 4) is refused with LayoutMismatch in one line naming `dedup replay --fresh`, and nothing
    under the prefix changes (a running old worker answers /readyz 503 with that line at its first batch)."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    prefix = f"t{uuid.uuid4().hex}:"
    RedisStateStore(client, prefix).add_canonical("r0", 0x1234, "en", (1, 2, 3, 4), T0, 0x55)
    assert client.get(f"{prefix}layout").startswith("4/16 ")
    before = {key: client.dump(key) for key in client.scan_iter(f"{prefix}*")}
    done = old(old_tree, "-c", _OLD_STORE_OPS, redis_url, prefix)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 6 and all(" LayoutMismatch " in line and "dedup replay --fresh" in line for line in lines)
    assert {key: client.dump(key) for key in client.scan_iter(f"{prefix}*")} == before


_OLD_WRITES = """
import sys, redis
from streams.core.model import Link, Verdict
from streams.stores.redis_store import RedisStateStore
from streams.stores.sqlite import SqliteStateStore
client = redis.Redis.from_url(sys.argv[1], decode_responses=True)
store = RedisStateStore(client, sys.argv[2])
simhash, published_at = int(sys.argv[3], 16), int(sys.argv[4])
store.advance(published_at)
store.add_canonical("r0", simhash, "en", store.band_layout.keys(simhash), published_at)
store.record_verdict(Link("r0", Verdict.UNIQUE, "r0", published_at=published_at))
"""


def test_guard_a_layout_3_state_the_old_release_wrote_is_continued_as_layout_3(old_tree: Path, redis_url: str) -> None:
    """Guard (found correct, covered by no test with the old release's own entries): this release reads the old
    release's s: entries (simhash, stamp, doc_id), writes its new canonicals in the same form without figures,
    links the next day's report to today's as the old release would (checked against nothing), and its sweep
    finds the old entries' stamps; the marker stays layout 3."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    prefix = f"t{uuid.uuid4().hex}:"
    settings = Settings(stages=CHEAP)
    today, tomorrow = market_docs(settings)
    done = old(old_tree, "-c", _OLD_WRITES, redis_url, prefix, f"{today.simhash:016x}", str(today.published_at))
    assert done.returncode == 0, done.stderr
    store = RedisStateStore(client, prefix)
    found = store.band_candidates("en", store.band_layout.keys(today.simhash))
    assert [(c.doc_id, c.simhash, c.figures) for c in found] == [("r0", today.simhash, 0)]
    link = Cascade(settings, store).decide(tomorrow).link
    assert (link.verdict, link.canonical_id, link.stage) == (Verdict.DUPLICATE, "r0", Stage.SIMHASH)
    other = Featurizer(settings).featurize(
        {"id": "x", "url": "https://m.example.com/x", "body": "A different story altogether, about rivers."},
        b"",
        ingest_time=T0 + 86_400,
    )
    assert isinstance(other, Document)
    assert Cascade(settings, store).decide(other).link.verdict is Verdict.UNIQUE
    entries = sorted(value for key in client.scan_iter(f"{prefix}s:*") for value in client.hvals(key))
    assert entries == sorted(
        [f"{today.simhash:016x}{today.published_at // 86_400:04x}r0", f"{other.simhash:016x}"
         f"{other.published_at // 86_400:04x}x"]
    )  # fmt: skip
    assert client.get(f"{prefix}layout").startswith("3/16 ")
    store.advance(T0 + 400 * 86_400)
    store.expire()
    assert list(client.scan_iter(f"{prefix}s:*")) == []


def test_guard_a_run_goes_on_where_the_release_before_relinked_into_its_folder(
    marks_tree: Path, tmp_path: Path
) -> None:
    """Guard: a relink of the release before appended to the run's links.jsonl without moving the state's mark, and
    wrote a run.json that names no command; the records past the mark are the relink's, taken in, not a kill's
    leftovers, and the next run goes on."""
    from tests.test_stopped_commands import EDITED_A, TEXT_A, _article, _write

    out = tmp_path / "out"
    head = _write(tmp_path / "head.jsonl", [_article("c", "https://c.example.com/1", TEXT_A, T0),
                                            _article("d", "https://d.example.com/1", EDITED_A, T0 + 60)])  # fmt: skip
    later = _write(tmp_path / "later.jsonl", [_article("e", "https://e.example.com/1", EDITED_A, T0 + 120)])
    labels = tmp_path / "labels.jsonl"
    labels.write_bytes(orjson.dumps({"a": "d", "b": "c", "label": False}) + b"\n")
    state = str(out / "state")
    relink = ("relink", "--state", state, "--out", str(out), "--decisions", str(labels), "--articles", head)
    for args in (("run", head, "--out", str(out), "--stages", "url,content,simhash"), relink):
        done = old(marks_tree, "-m", "streams", *args)
        assert done.returncode == 0, done.stderr
    assert b'"command"' not in (out / "run.json").read_bytes()
    run(Settings(stages=CHEAP), [later], RunPaths(out=out, state=out / "state"))
    lines = [orjson.loads(line) for line in (out / "links.jsonl").read_bytes().splitlines()]
    assert [(r["doc_id"], r["verdict"]) for r in lines] == [
        ("c", "unique"), ("d", "duplicate"), ("d", "unlinked"), ("e", "duplicate")
    ]  # fmt: skip

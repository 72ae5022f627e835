"""`dedup relink` on a state folder run twice, over verdicts past their retention, and on hostile files: each
test a guarantee that once broke (the same cut-off or labels file changed the state again when run again; one
expired verdict refused the whole relink; an articles or links line of the wrong shape crashed it).

Built on the toy world of tests/test_relink.py (chosen vectors, real runner, real SQLite state).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from streams.core.relink import Cutoff, Label
from streams.stores.journal import Journal
from tests.test_relink import (
    DAY_ONE,
    VECTORS,
    ToyEmbedder,
    World,
    _article,
    _body,
    _near,
    _settings,
    dedup,
    dump,
)

A_VEC = VECTORS[1]
# X: 0.982 with A (links to A once A is a canonical: above the toy link cut-off 0.98), 0.967 with B.
X_VEC = _near(A_VEC, 0.982, 20)
MORE_VECTORS = {**VECTORS, 8: X_VEC, 9: _near(VECTORS[0], 0.97, 21), 10: np.eye(64, dtype=np.float32)[30]}


@pytest.fixture
def world(tmp_path: Path) -> World:
    world = World(tmp_path, tmp_path / "out", tmp_path / "out" / "state", _settings(), ToyEmbedder(MORE_VECTORS))
    world.run(DAY_ONE, "out")
    return world


def _label(a: str, b: str, duplicate: bool) -> Label:
    return Label(a, b, duplicate, "mallory")


def _verdicts(world: World) -> dict[str, tuple[Any, ...]]:
    return {doc_id: row[:2] for doc_id, row in dump(world.state)["verdicts"].items()}


# ---------------------------------------------------------------- a re-run of a command changes nothing


def test_the_same_cut_off_run_twice_changes_nothing_the_second_time(world: World) -> None:
    """A is unlinked by a stricter cut-off; X then links to A (0.982). A cut-off of 0.984 both links A
    back (0.985 >= 0.984) and unlinks X (0.982 < 0.984). The first run refused A (X was linked to it),
    then unlinked X; so running the very same command again linked A back."""
    world.relink("r1", cutoff=Cutoff(0.99))
    world.run([_article("X", "https://x.example.org/x", _body(30, 8))], "later")
    assert world.latest("later")["X"]["canonical_id"] == "A"
    first = world.relink("r2", cutoff=Cutoff(0.984))
    after_first = dump(world.state)
    second = world.relink("r3", cutoff=Cutoff(0.984))
    assert second.plan.changes == [], (
        f"the same cut-off run again changed {[c.doc_id for c in second.plan.changes]}"
        f" (first run changed {[c.doc_id for c in first.plan.changes]},"
        f" refused {[(r.doc_id, r.reason) for r in first.plan.refused]})"
    )
    assert dump(world.state) == after_first


def test_the_same_labels_file_run_twice_changes_nothing_the_second_time(world: World) -> None:
    """The same as a person's decisions: `A is B's duplicate` and `X is not A's`, in one file."""
    world.relink("r1", decisions=[_label("A", "B", False)])
    world.run([_article("X", "https://x.example.org/x", _body(30, 8))], "later")
    labels = [_label("A", "B", True), _label("X", "A", False)]
    first = world.relink("r2", decisions=labels)
    second = world.relink("r3", decisions=labels)
    assert second.plan.changes == [], (
        f"the same labels applied again changed {[c.doc_id for c in second.plan.changes]}"
        f" (first: changed {[c.doc_id for c in first.plan.changes]},"
        f" refused {[(r.doc_id, r.reason) for r in first.plan.refused]})"
    )


# ---------------------------------------------------------------- verdicts past retention.verdicts_days

Z_VEC = np.eye(64, dtype=np.float32)[30]
LATER_VECTORS = {**MORE_VECTORS, 10: Z_VEC, 11: _near(Z_VEC, 0.985, 31)}


def _ten_days_later(world: World) -> None:
    """A new story Z and a semantic duplicate of it (0.985), ten days after day one: day one's verdicts
    (A's among them) have expired from the state (verdicts_days = 7), Z2's has not."""
    world.embedder = ToyEmbedder(LATER_VECTORS)
    later = [
        {**_article("Z", "https://z.example.org/z", _body(50, 10)), "published_at": "2026-03-11T08:00:00Z"},
        {**_article("Z2", "https://z2.example.org/z", _body(51, 11)), "published_at": "2026-03-11T09:00:00Z"},
    ]
    world.run(later, "later")
    got = world.latest("later")
    assert (got["Z2"]["verdict"], got["Z2"]["canonical_id"], got["Z2"]["stage"]) == ("duplicate", "Z", "semantic")
    assert "A" not in dump(world.state)["verdicts"]  # expired


def test_a_cut_off_still_applies_once_old_verdicts_have_expired(world: World) -> None:
    """A stricter cut-off ten days on: Z2 (0.985, live) is unlinked; A (0.985, expired) cannot be and is
    refused with its reason. The whole relink raised Stale ("plan it again"), and planning again gave the
    same plan: no cut-off relink could be applied to a state once one semantic duplicate below it expired."""
    _ten_days_later(world)
    result = world.relink("r1", cutoff=Cutoff(0.99))
    assert "Z2" in {c.doc_id for c in result.plan.changes}
    assert dump(world.state)["verdicts"]["Z2"][0] == "unlinked"
    assert "A" in {r.doc_id for r in result.plan.refused}


def test_a_decision_on_an_expired_document_does_not_block_the_others(world: World) -> None:
    """One label on a document whose verdict expired, beside one on a live document: the live one is
    applied and the expired one refused with its reason (the whole file was refused)."""
    _ten_days_later(world)
    result = world.relink("r1", decisions=[_label("Z2", "Z", False), _label("A", "B", False)])
    assert dump(world.state)["verdicts"]["Z2"][0] == "unlinked"
    assert "A" in {r.doc_id for r in result.plan.refused}


# ---------------------------------------------------------------- hostile input files


@pytest.mark.parametrize("features", [None, "x", [1, 2]])
def test_an_articles_line_whose_features_are_no_object_is_a_clear_error(world: World, features: object) -> None:
    """H (a SimHash duplicate, never embedded) is unlinked with its article from --articles. A line
    there whose `features` was null, a string or a list made `{**features}` raise a TypeError: a
    traceback (exit 1), not a one-line error or a refusal."""
    articles = world.folder / "articles.jsonl"
    articles.write_bytes(orjson.dumps({**DAY_ONE[-1], "features": features}) + b"\n")
    labels = world.folder / "labels.jsonl"
    labels.write_bytes(orjson.dumps({"a": "H", "b": "S", "label": False}) + b"\n")
    done = dedup("relink", "--state", str(world.state), "--out", str(world.folder / "relinked"),
                 "--decisions", str(labels), "--articles", str(articles))  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr[-600:]
    assert done.returncode in (0, 2)


@pytest.mark.parametrize("line", [b'{"verdict": "unique"}', b"[1, 2]", b'"a string"', b"null"])
def test_a_links_file_in_out_with_a_line_that_is_no_link_is_a_clear_error(world: World, line: bytes) -> None:
    """OUT/links.jsonl (of this very state: its run.json names it) holds a JSON line that is no link
    record. `_LastRecords` read `record["doc_id"]` unguarded: KeyError / TypeError, a traceback (and
    `dedup run` crashed on a line that is JSON but no object). Now a one-line error, exit 2."""
    out = world.folder / "relinked"
    out.mkdir()
    (out / "run.json").write_bytes(orjson.dumps({"state": str(world.state.resolve())}))
    (out / "links.jsonl").write_bytes(line + b"\n")
    labels = world.folder / "labels.jsonl"
    labels.write_bytes(orjson.dumps({"a": "A", "b": "B", "label": False}) + b"\n")
    done = dedup("relink", "--state", str(world.state), "--out", str(out), "--decisions", str(labels))
    assert "Traceback" not in done.stderr, done.stderr[-400:]
    assert done.returncode == 2


# ---------------------------------------------------------------- a kill between the state's commit and the journal's


class _Killed(BaseException):
    """The process stopped here (SIGKILL): nothing after it runs, not even a `finally` that commits."""


def _kill_before_the_journal(world: World, labels: list[Label], monkeypatch: pytest.MonkeyPatch) -> None:
    """The relink wrote its outputs and committed the state, then was killed as the journal committed: the
    journal is as before."""

    def killed(self: Journal) -> None:
        raise _Killed

    with monkeypatch.context() as patch:
        patch.setattr(Journal, "commit", killed)
        with pytest.raises(_Killed):
            world.relink(decisions=labels)


def test_a_decision_after_a_killed_relink_is_applied_not_reported_as_already_made(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after the state commit (A unlinked there and in relinked/links.jsonl), the person then
    changed their mind: `A is a duplicate of B`. The plan was made from the journal, which still said
    duplicate: reported "already as decided", nothing changed, and the state kept A unlinked."""
    _kill_before_the_journal(world, [_label("A", "B", False)], monkeypatch)
    assert _verdicts(world)["A"] == ("unlinked", "A")
    result = world.relink(decisions=[_label("A", "B", True)])
    assert _verdicts(world)["A"] == ("duplicate", "B"), (
        f"changes {[c.doc_id for c in result.plan.changes]}, unchanged {result.plan.unchanged}"
    )


def test_a_run_after_a_killed_relink_finds_the_relinked_verdict_in_the_journal(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same kill, then `dedup run` over day one again: the journal (which the run asks about documents
    past `verdicts_days`) lacked the relink's records until a relink ran again."""
    _kill_before_the_journal(world, [_label("A", "B", False)], monkeypatch)
    world.run([_article("Y2", "https://y2.example.org/y", _body(60, 10))], "later")
    journal = Journal(world.state)
    try:
        record = journal.link("A")
    finally:
        journal.close()
    assert record is not None and record["verdict"] == "unlinked", record

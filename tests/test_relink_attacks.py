"""`dedup relink` attacked where the other relink tests do not look: a relink interrupted half-way through its
writes, documents the figure check kept apart or sent to review, a group at `group_cap`, and sequences of a
person's actions followed by their inverse. Each test failed on the code before its fix.

The semantic cases are built on the toy world of tests/test_relink.py (chosen vectors, real runner, real SQLite
state); the SimHash cases on a cheap-stage world of real texts (the figure check's market reports).
"""

from __future__ import annotations

import shutil
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.config import Settings
from streams.core.cascade import Cascade
from streams.core.model import DAY_S, Document, Link, Stage, Verdict
from streams.core.ports import StateStore
from streams.core.relink import Label, plan_decisions
from streams.records.article import Featurizer, format_timestamp, parse_timestamp
from streams.runner.relink import RelinkResult, relink_files
from streams.runner.replay import replay_files
from streams.stores.sqlite import SqliteStateStore
from streams.vectors.edge import EdgeVectorStore
from tests.test_figure_check import CHEAP, DAYS, MARKET_EN, T0
from tests.test_relink import (
    VECTORS,
    ToyEmbedder,
    World,
    _body,
    _commit,
    _settings,
    assert_stars,
    dump,
    published,
)


@pytest.fixture
def world(tmp_path: Path) -> World:
    from tests.test_relink import DAY_ONE

    world = World(tmp_path, tmp_path / "out", tmp_path / "out" / "state", _settings(), ToyEmbedder(VECTORS))
    world.run(DAY_ONE, "out")
    return world


def _label(a: str, b: str, duplicate: bool) -> Label:
    return Label(a, b, duplicate, "carol")


# ---------------------------------------------------------------- interrupted half-way, then run again


def test_a_relink_interrupted_inside_its_state_writes_is_completed_by_running_it_again(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (or a failing vector write) lands while the relink writes the state: A's group share was taken
    from B, its keys re-pointed and its bands registered, its verdict not yet replaced. The `finally` closing
    the state committed that half, so running the relink again took A from B's group a second time."""
    clean = World(world.folder / "clean", world.folder / "clean" / "out", world.folder / "clean" / "out" / "state",
                  world.settings, world.embedder)  # fmt: skip
    shutil.copytree(world.out, clean.out)
    clean.relink(decisions=[_label("A", "B", False)])
    expected = dump(clean.state)

    def interrupted(self: EdgeVectorStore, *args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(EdgeVectorStore, "add", interrupted)
        with pytest.raises(KeyboardInterrupt):
            world.relink(decisions=[_label("A", "B", False)])
    world.relink(decisions=[_label("A", "B", False)])
    assert_stars(world.state)
    assert dump(world.state) == expected


# ---------------------------------------------------------------- an id reused once its verdict expired


def _market() -> tuple[str, str]:
    """The first day's market report (title, body)."""
    return MARKET_EN[0].format(**DAYS[0]), MARKET_EN[1].format(**DAYS[0])


def _other() -> tuple[str, str]:
    """A story unrelated to the market report."""
    return "Another story", _body(7, 99, 200)


def _decider(store: StateStore) -> Callable[..., Link]:
    """Decide a document of (title, body) at a time on `store` (stages 1 to 3), the clock moved there, committed."""
    settings = Settings(stages=CHEAP)
    cascade, featurizer = Cascade(settings, store), Featurizer(settings)

    def decide(doc_id: str, text: tuple[str, str], at: int, extra: str = "") -> Link:
        article = {"id": doc_id, "url": f"https://x.example.com/{doc_id}/{at}", "title": text[0],
                   "body": text[1] + extra, "published_at": format_timestamp(at)}  # fmt: skip
        doc = featurizer.featurize(article, b"", ingest_time=at)
        assert isinstance(doc, Document)
        store.advance(at)
        link = cascade.decide(doc).link
        _commit(store)
        return link

    return decide


def test_a_canonical_id_reused_for_a_copy_of_another_story_is_no_simhash_candidate_any_more(
    new_state: Callable[[], StateStore],
) -> None:
    """C is a canonical; its verdict expires (`verdicts_days`, 7) while its band entries stay (`bands_days`,
    30). The crawler then reuses the id C for a copy of another story Z: C is decided afresh, a duplicate of Z.
    A near-duplicate of C's first text found C's old band entry and was linked to it: a duplicate of a
    duplicate, a chain. It becomes a canonical of its own (nothing else is near it)."""
    store = new_state()
    decide, market, other = _decider(store), _market(), _other()

    assert decide("C", market, T0).verdict is Verdict.UNIQUE
    later = T0 + 8 * DAY_S
    assert decide("Z", other, later).verdict is Verdict.UNIQUE
    assert store.verdict_of("C") is None  # expired: the id is free again
    reused = decide("C", other, later)
    assert (reused.verdict, reused.canonical_id) == (Verdict.DUPLICATE, "Z")
    near = decide("M", market, later, " More later.")
    held = store.verdict_of(near.canonical_id)
    assert held is not None and held.verdict.canonical, f"M is linked to {near.canonical_id}: {held}"
    assert (near.verdict, near.canonical_id) == (Verdict.UNIQUE, "M")


def test_a_canonical_id_reused_for_a_new_story_is_found_by_its_new_text(new_state: Callable[[], StateStore]) -> None:
    """C's verdict expires while its band entries live; the id is reused for another story, a canonical again.
    Registering it again kept the band entries of its first text (SQLite's upsert kept the live row's
    fingerprint; Redis wrote no entry over a live one of another fingerprint): a near-duplicate of its new text
    was no duplicate of it, and one of its first text still was."""
    store = new_state()
    decide, market, other = _decider(store), _market(), _other()

    assert decide("C", market, T0).verdict is Verdict.UNIQUE
    later = T0 + 8 * DAY_S
    reused = decide("C", other, later)
    assert (reused.verdict, reused.canonical_id) == (Verdict.UNIQUE, "C")
    near = decide("N", other, later, " More later.")
    assert (near.verdict, near.canonical_id, near.stage) == (Verdict.DUPLICATE, "C", Stage.SIMHASH)


# ---------------------------------------------------------------- a world of cheap stages: SimHash and the figure check

URLS = "https://x.example.com/"


def _report(doc_id: str, day: int, extra: str = "", url: str | None = None, when: str = "2025-12-06") -> dict:
    """A market report (tests/test_figure_check.py): day 0 and its edits are near-duplicates of one another, day 1
    states other figures in the same words (the figure check)."""
    figures = DAYS[day]
    return {
        "id": doc_id,
        "url": url or URLS + doc_id,
        "title": MARKET_EN[0].format(**figures),
        "body": MARKET_EN[1].format(**figures) + extra,
        "language": "en",
        "published_at": f"{when}T08:00:00Z",
    }


def _cheap_day(late: bool = False) -> list[dict]:
    return [
        _report("K", 0),
        _report("K-u", 0, " Updated.", url=URLS + "K?utm_source=a"),
        _report("E1", 0, " More later.", when="2025-11-01" if late else "2025-12-06"),  # 1 bit from K
        _report("E1-c", 0, " More later.", url="https://y.example.com/E1"),  # E1's text
        _report("D1", 1),  # the next day's figures: kept apart, or under review
        _report("D1-c", 1, url="https://y.example.com/D1"),
    ]


class CheapWorld(World):
    """The toy World's runner and relink on the cheap stages; articles for relink from the first run's input, as
    published elsewhere (the SimHash stage's duplicates are published nowhere here)."""

    def relink(self, out: str = "relinked", **kwargs: Any) -> RelinkResult:
        articles = self.folder / "out.published.jsonl"
        inputs = [orjson.loads(line) for line in (self.folder / "out.jsonl").read_bytes().splitlines()]
        articles.write_bytes(b"".join(orjson.dumps(published(self.settings, article)) + b"\n" for article in inputs))
        return relink_files(self.state, self.folder / out, articles=[articles], **kwargs)


def cheap_world(folder: Path, figure_check: str = "apart", late: bool = False) -> CheapWorld:
    folder.mkdir(parents=True, exist_ok=True)
    settings = Settings(stages=CHEAP, simhash={"figure_check": figure_check})
    world = CheapWorld(folder, folder / "out", folder / "out" / "state", settings, ToyEmbedder({}))
    world.run(_cheap_day(late), "out")
    return world


def test_a_late_crawl_unlinked_by_a_person_keeps_its_verdict_and_can_be_linked_back(tmp_path: Path) -> None:
    """E1 was published 35 days before the stream's clock (a late crawl of an archive page) and decided now: its
    verdict ages from the clock (`clock` in its record), as README's Retention says. Unlinked by a person, its
    new verdict aged from its own date instead: expired at once, so the state forgot the person's decision (a
    redelivery would be decided afresh) and linking it back was refused as expired."""
    world = cheap_world(tmp_path, late=True)
    assert world.latest("out")["E1"]["verdict"] == "duplicate" and "clock" in world.latest("out")["E1"]
    first = dump(world.state)
    world.relink(decisions=[_label("E1", "K", False)])
    assert dump(world.state)["verdicts"]["E1"][:2] == ("unlinked", "E1")
    state = SqliteStateStore(world.state / "state.sqlite3", retention=world.settings.retention)
    try:
        assert state.verdict_of("E1") is not None, "the unlinked verdict expired as it was made"
    finally:
        state.close()
    back = world.relink(decisions=[_label("E1", "K", True)])
    assert not back.plan.refused, back.plan.refused
    assert dump(world.state) == first
    rebuilt = tmp_path / "rebuilt"
    replay_files([str(tmp_path / "out" / "links.jsonl"), str(tmp_path / "relinked" / "links.jsonl")], rebuilt)
    assert dump(rebuilt) == first


@pytest.mark.parametrize("figure_check", ["apart", "review"])
def test_an_unlink_and_its_inverse_leave_later_documents_the_verdicts_of_a_state_that_never_saw_them(
    tmp_path: Path, figure_check: str
) -> None:
    """E1 (a SimHash duplicate of K) unlinked and linked back: the state is the first one key for key, and later
    documents (an edit near both, the figure check's next-day report and its copy) get the verdicts they get in
    a state that never saw the two relinks. A figure-check review (D1, with its content copy) decided `n` then
    `y` keeps stars, and a replay of every record rebuilds it."""
    never = cheap_world(tmp_path / "never", figure_check)
    world = cheap_world(tmp_path / "relinked", figure_check)
    assert world.relink("r1", decisions=[_label("E1", "K", False)]).plan.changes
    assert world.relink("r2", decisions=[_label("E1", "K", True)]).plan.changes
    assert dump(world.state) == dump(never.state)
    later = [
        _report("E3", 0, " More later, with a chart."),
        _report("D1-s", 1, url="https://z.example.com/D1"),
        _report("D1-e", 1, " More later."),
    ]
    for each in (never, world):
        each.run(later, "later")
    fields = ("verdict", "canonical_id", "stage", "score")
    assert [[r[f] for f in fields] for r in world.links("later")] == [
        [r[f] for f in fields] for r in never.links("later")
    ]
    assert dump(world.state) == dump(never.state)
    if figure_check == "review":
        assert world.latest("out")["D1"]["verdict"] == "review"
        world.relink("r3", decisions=[_label("D1", "K", False)])
        world.relink("r4", decisions=[_label("D1", "K", True)])
        latest = world.latest("out", "r1", "r2", "later", "r3", "r4")
        assert (latest["D1-c"]["verdict"], latest["D1-c"]["canonical_id"]) == ("duplicate", "K")
    assert_stars(world.state)
    outs = [o for o in ("out", "r1", "r2", "later", "r3", "r4") if (world.folder / o / "links.jsonl").exists()]
    replay_files([str(world.folder / o / "links.jsonl") for o in outs], tmp_path / "rebuilt")
    assert dump(tmp_path / "rebuilt") == dump(world.state)


def test_a_review_cannot_be_confirmed_once_its_suspected_canonicals_id_names_a_duplicate(tmp_path: Path) -> None:
    """D1 (the next day's report) and its content copy D1-c are under review against K (the figure check), D1 a day
    after K. K has no members (a review joins no group), so once its verdict expires (7 days, a day before D1's) the
    crawler's reuse of the id K for a copy of another story Z is decided afresh: K is Z's duplicate. The latest article
    published as K is still its first text (a duplicate is not published), and a person's `y` made D1 and D1-c
    duplicates of K, a duplicate: a chain, and the market report merged into Z's group. It is refused, as a link
    back to a canonical that is no canonical any more is, and `n` still makes D1 a canonical with its copy."""
    settings = Settings(stages=CHEAP, simhash={"figure_check": "review"})
    world = CheapWorld(tmp_path, tmp_path / "out", tmp_path / "out" / "state", settings, ToyEmbedder({}))
    next_day = "2025-12-07"
    world.run(
        [_report("K", 0), _report("D1", 1, when=next_day), _report("D1-c", 1, url=URLS + "c", when=next_day)], "out"
    )
    assert {d: (r["verdict"], r["canonical_id"]) for d, r in world.latest("out").items() if d != "K"} == {
        "D1": ("review", "K"),
        "D1-c": ("review", "K"),
    }
    title, body = _other()
    at = "2025-12-13T20:00:00Z"  # K's verdict has expired, D1's has not
    reuse = [{"id": doc_id, "url": URLS + f"other/{doc_id}", "title": title, "body": body, "published_at": at}
             for doc_id in ("Z", "K")]  # fmt: skip
    world.run(reuse, "reuse")
    assert (world.latest("reuse")["K"]["verdict"], world.latest("reuse")["K"]["canonical_id"]) == ("duplicate", "Z")

    confirmed = world.relink("r1", decisions=[_label("D1", "K", True)])
    assert not confirmed.plan.changes, [(c.doc_id, c.link) for c in confirmed.plan.changes]
    assert [(r.doc_id, r.other) for r in confirmed.plan.refused] == [("D1", "K")]
    assert "no canonical any more" in confirmed.plan.refused[0].reason
    unlinked = world.relink("r2", decisions=[_label("D1", "K", False)])
    assert {c.doc_id: (c.link.verdict, c.link.canonical_id) for c in unlinked.plan.changes} == {
        "D1": (Verdict.UNLINKED, "D1"),
        "D1-c": (Verdict.DUPLICATE, "D1"),
    }


def test_unlinking_a_reused_id_publishes_no_article_of_the_ids_first_story(tmp_path: Path) -> None:
    """`dedup relink` on files, as `tests/test_relink_service.py` holds the service to it. D was published with
    another story; its verdict expired and the crawler reused the id D for a near-duplicate of Z (never published).
    A person unlinks D: no candidate record (the SimHash stage decided it), and the only article published as D is
    its first story, which the relink took (the latest of its id, whatever its content) and published under D's
    new verdict: the first story's text went out again, and the story the verdict is about never reached the
    feed. Refused instead (no article of D's content on record); nothing is published or changed."""
    world = CheapWorld(tmp_path, tmp_path / "out", tmp_path / "out" / "state", Settings(stages=CHEAP), ToyEmbedder({}))
    title, body = _other()
    first = {"id": "D", "url": URLS + "first/D", "title": title, "body": body, "published_at": "2025-12-06T08:00:00Z"}
    world.run([first], "out")
    assert world.latest("out")["D"]["verdict"] == "unique"
    later = "2025-12-20"  # D's verdict (7 days) has expired
    world.run([_report("Z", 0, when=later), _report("D", 0, " More later.", when=later)], "reuse")
    assert (world.latest("reuse")["D"]["verdict"], world.latest("reuse")["D"]["canonical_id"]) == ("duplicate", "Z")
    before = dump(world.state)

    result = relink_files(world.state, tmp_path / "relinked", decisions=[_label("D", "Z", False)])
    assert not result.plan.changes, [(c.doc_id, c.article and c.article.get("title")) for c in result.plan.changes]
    assert [(r.doc_id, r.other) for r in result.plan.refused] == [("D", "Z")]
    assert "no article on record" in result.plan.refused[0].reason
    assert not (tmp_path / "relinked" / "deduped.jsonl").exists()
    assert dump(world.state) == before


def test_a_review_confirmed_after_its_suspected_canonicals_id_was_reused_is_planned_again(redis_url: str) -> None:
    """The service plans `y` for D1, under review against K (the figure check); before the plan is applied, a batch
    decides the crawler's reuse of the id K (its verdict expired, D1's not) for a copy of another story Z: K is Z's
    duplicate. `check` only asks whether D1 still has the verdict it was planned on (it has), not whether K is still
    a canonical; what keeps D1 from becoming a duplicate of a duplicate (a chain) is the fenced write, which refuses a
    link to a document that is no canonical any more: `relink_service` plans again, and the plan refuses the label.
    Held here on real Redis through the service's own write, so that a change to either keeps this order safe."""
    from streams.records.output import link_record
    from streams.service.relink import _write
    from streams.stores.batched import BatchedState
    from streams.stores.redis_store import RedisStateStore, StaleSnapshot

    settings = Settings(stages=CHEAP, simhash={"figure_check": "review"}, redis_prefix=f"t{uuid.uuid4().hex}:")
    backend = RedisStateStore.from_url(redis_url, prefix=settings.redis_prefix)
    store, records = BatchedState(backend), []
    cascade, featurizer = Cascade(settings, store), Featurizer(settings)

    def decide(article: dict[str, Any]) -> Link:
        at = parse_timestamp(article["published_at"])
        doc = featurizer.featurize(article, orjson.dumps(article), ingest_time=at)
        assert isinstance(doc, Document)
        store.advance(at)
        link = cascade.decide(doc).link
        _commit(store)
        records.append(link_record(link, doc, stages=settings.stages))
        return link

    try:
        decide(_report("K", 0))
        assert decide(_report("D1", 1, when="2025-12-07")).verdict is Verdict.REVIEW
        plan = plan_decisions(records, [_label("D1", "K", True)], backend.exact_lookup, lambda _: None,
                              current=backend.verdict_of)  # fmt: skip
        assert [(c.doc_id, c.link.verdict, c.link.canonical_id) for c in plan.changes] == [
            ("D1", Verdict.DUPLICATE, "K")
        ]
        title, body = _other()
        at = "2025-12-14T08:00:00Z"  # K's verdict has expired (7 days, counted from the end of its day), D1's not
        for doc_id in ("Z", "K"):
            decide({"id": doc_id, "url": URLS + f"other/{doc_id}", "title": title, "body": body, "published_at": at})
        assert (backend.verdict_of("K").verdict, backend.verdict_of("K").canonical_id) == (Verdict.DUPLICATE, "Z")

        relinking = RedisStateStore(backend._redis, settings.redis_prefix, relinking=True)  # the relink's own store
        with pytest.raises(StaleSnapshot, match="no canonical any more"):
            _write(settings, backend._redis, relinking, None, plan, RelinkResult(plan), "D1 is K's duplicate")
        assert backend.verdict_of("D1").verdict is Verdict.REVIEW
        again = plan_decisions(records, [_label("D1", "K", True)], backend.exact_lookup, lambda _: None,
                               current=backend.verdict_of)  # fmt: skip
        assert not again.changes and "no canonical any more" in again.refused[0].reason
    finally:
        backend.close()


# ---------------------------------------------------------------- the stamps of the exact keys a relink moves


def _stamps(state_dir: Path) -> dict[str, tuple[str, int]]:
    """Every exact key of a state folder: its holder and its stamp (what `dump` leaves out: when it expires)."""
    db = sqlite3.connect(state_dir / "state.sqlite3")
    try:
        return {key.hex(): (holder, stamp) for key, holder, stamp in db.execute("SELECT * FROM exact_keys")}
    finally:
        db.close()


SHORT_EXACT = {"DEDUP_RETENTION__EXACT_DAYS": "40"}
"""Exact keys kept 40 days: long enough for the first day's relinks, short enough to meet in a test."""


@pytest.mark.parametrize(
    ("e1_day", "copy_day", "later_day"),
    [
        pytest.param("2025-11-01", "2025-12-06", "2025-12-20", id="late-crawl"),
        pytest.param("2025-12-06", "2025-12-10", "2026-01-17", id="copy-dated-later"),
    ],
)
def test_an_unlink_and_its_inverse_keep_the_stamps_of_the_keys_they_move(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, e1_day: str, copy_day: str, later_day: str
) -> None:
    """E1 (a SimHash duplicate of K) claimed its content key on its date; E1-c, its text at another URL, came
    later (a late crawl's E1 35 days before the stream's clock, or a copy four days after it). Unlinked, E1
    takes its key with E1-c following, and both changes re-pointed it: the second stamped it with E1-c's date.
    Linked back, the state was the first one holder for holder, but the key stayed stamped with E1-c's date,
    so it expired weeks later than in a state that never saw the relinks: with `exact_days` 40, a later copy
    of E1's text was a content duplicate of K there, and decided afresh (the bands, or nothing) in the
    other."""
    for name, value in SHORT_EXACT.items():
        monkeypatch.setenv(name, value)
    settings = Settings(stages=CHEAP)
    day = [
        _report("K", 0),
        _report("E1", 0, " More later.", when=e1_day),
        _report("E1-c", 0, " More later.", url="https://y.example.com/E1", when=copy_day),
    ]
    worlds = {}
    for name in ("never", "relinked"):
        folder = tmp_path / name
        folder.mkdir()
        worlds[name] = CheapWorld(folder, folder / "out", folder / "out" / "state", settings, ToyEmbedder({}))
        worlds[name].run(day, "out")
    never, world = worlds["never"], worlds["relinked"]
    got = {d: (r["verdict"], r["canonical_id"], r["stage"]) for d, r in world.latest("out").items()}
    assert got == {
        "K": ("unique", "K", None),
        "E1": ("duplicate", "K", "simhash"),
        "E1-c": ("duplicate", "K", "content"),
    }
    first = _stamps(world.state)

    assert world.relink("r1", decisions=[_label("E1", "K", False)]).plan.changes
    unlinked = _stamps(world.state)
    assert {key: stamp for key, (_, stamp) in unlinked.items()} == {key: stamp for key, (_, stamp) in first.items()}
    assert world.relink("r2", decisions=[_label("E1", "K", True)]).plan.changes
    assert _stamps(world.state) == _stamps(never.state) == first

    later = [_report("E1-s", 0, " More later.", url="https://z.example.com/E1", when=later_day)]
    for each in (never, world):
        each.run(later, "later")
    fields = ("verdict", "canonical_id", "stage", "score")
    assert [[r[f] for f in fields] for r in world.links("later")] == [
        [r[f] for f in fields] for r in never.links("later")
    ]
    replay_files([str(world.folder / o / "links.jsonl") for o in ("out", "r1", "r2", "later")], tmp_path / "rebuilt")
    assert _stamps(tmp_path / "rebuilt") == _stamps(world.state) == _stamps(never.state)


def test_a_simhash_duplicate_is_unlinked_with_its_article_from_the_runs_raw_input(tmp_path: Path) -> None:
    """On the cheap stages a SimHash duplicate is published nowhere (no candidate record, no deduped line), so
    a person's `n` was refused for want of an article, whatever `--articles` named: a SimHash suppression could
    not be undone in file mode. Its raw input line is featurised as `dedup run` featurised it and matched by those
    features: it is published as decided. A raw line of the id with other content (the id reused) is not taken."""
    world = CheapWorld(tmp_path, tmp_path / "out", tmp_path / "out" / "state", Settings(stages=CHEAP), ToyEmbedder({}))
    world.run(_cheap_day(), "out")
    assert (world.latest("out")["E1"]["verdict"], world.latest("out")["E1"]["stage"]) == ("duplicate", "simhash")
    raw = tmp_path / "out.jsonl"  # the run's input, as the crawler sent it
    other = tmp_path / "other.jsonl"
    title, body = _other()
    other.write_bytes(orjson.dumps({"id": "E1", "url": URLS + "E1", "title": title, "body": body}) + b"\n")

    refused = relink_files(world.state, tmp_path / "r0", decisions=[_label("E1", "K", False)], articles=[other])
    assert [(r.doc_id, "no article on record" in r.reason) for r in refused.plan.refused] == [("E1", True)]
    result = relink_files(world.state, tmp_path / "r1", decisions=[_label("E1", "K", False)], articles=[other, raw])
    assert {c.doc_id: (c.link.verdict, c.link.canonical_id) for c in result.plan.changes} == {
        "E1": (Verdict.UNLINKED, "E1"),
        "E1-c": (Verdict.DUPLICATE, "E1"),
    }
    (published,) = [orjson.loads(line) for line in (tmp_path / "r1" / "deduped.jsonl").read_bytes().splitlines()]
    decided = world.latest("out")["E1"]
    assert published["title"] == _report("E1", 0)["title"] and published["body"].endswith(" More later.")
    assert {name: published["features"][name] for name in ("url_hash", "content_hash", "simhash", "published_at")} == {
        name: decided[name] for name in ("url_hash", "content_hash", "simhash", "published_at")
    }
    assert published["features"]["verdict"] == "unlinked"

"""Attacks on stage 3's figure check (streams/features/figures.py and what carries its digest).

Every test but the guards (said so in their docstrings) fails on the code it was written against: each shows a bug.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from streams.config import Settings
from streams.core.model import Stage, Verdict
from streams.features.facts import text_facts
from streams.features.figures import MAX_CHARS, figures_conflict, text_figures
from streams.features.text import normalize_text
from streams.records.article import format_timestamp
from streams.runner.replay import replay_files
from streams.stores.sqlite import SqliteStateStore
from tests.test_figure_check import DAYS, MARKET_EN, T0, _cascade, _doc, market_lines

# ------------------------------------------------------------------------------------------ the kernel


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("Updated 2025-12-06 16:35 BST.", "Updated 2025-12-07 09:10 BST."),  # ISO 8601, as a CMS stamps a page
        ("Published: 06-12-2025 Dhaka.", "Published: 07-12-2025 Dhaka."),  # dd-mm-yyyy, as Bangladeshi sites do
    ],
    ids=["iso", "dd-mm-yyyy"],
)
def test_a_recrawl_whose_date_stamp_moved_is_still_linked(before: str, after: str) -> None:
    """A re-crawl of a page whose "updated" date moved is the same article, as one whose clock time moved (which
    tests/test_figure_check.py links): the lead's figures are the same. The kernel reads the month and day of a
    date (`12-06` of `2025-12-06`, `06-12` of `06-12-2025`) as a *score*, which facts.py, whose reading it claims
    to follow, does not (its score is preceded by no digit or hyphen and followed by no `-digit`); the two dates
    are then two disjoint scores and the copy is kept apart."""
    assert text_facts(normalize_text(before)).scores == ()  # facts.py: a date holds no score
    featurizer, cascade = _cascade()
    title, body = MARKET_EN[0].format(**DAYS[0]), MARKET_EN[1].format(**DAYS[0])
    original = _doc(featurizer, title, f"{before} {body}", "page")
    recrawl = _doc(featurizer, title, f"{after} {body}", "page-recrawl")
    assert cascade.decide(original).link.verdict is Verdict.UNIQUE
    link = cascade.decide(recrawl).link
    assert (link.verdict, link.canonical_id, link.stage) == (Verdict.DUPLICATE, "page", Stage.SIMHASH), link.reason


def test_nothing_past_the_first_max_chars_characters_is_read() -> None:
    """Only the first `MAX_CHARS` characters are read (module docstring, README "The figure check"), so two texts
    whose first MAX_CHARS characters are the same have the same digest. A figure that begins at the last of them
    is read on past it (the digit loop, and the score and clock look-aheads, do not count characters), so texts
    that differ only past them were kept apart."""
    head = "x" * (MAX_CHARS - 1)
    assert text_figures(head + "12 dead") == text_figures(head + "13 dead")  # "1" either way
    assert text_figures(head[:-2] + " 3-1 win") == text_figures(head[:-2] + " 3-2 win")  # "3-" either way
    assert figures_conflict(text_figures(head + "12"), text_figures(head + "19")) is None


def test_digits_beyond_the_basic_plane_are_figures() -> None:
    """ "A figure is a run of decimal digits of any script" (the module docstring; README: "digits of any script"),
    and facts.py reads them so. The kernel's table stops at U+FFFF: Chakma digits (U+11136-U+1113F, a script of
    Bangladesh), Adlam, Brahmi and the other scripts past the BMP state nothing, so two reports of one template in
    Chakma with every figure changed are taken for one text."""
    chakma = str.maketrans("0123456789", "".join(chr(0x11136 + k) for k in range(10)))
    ascii_text = "The council met in 2025 and approved 340 projects worth 12.5 crore."
    text = normalize_text(ascii_text.translate(chakma))
    assert text_facts(text).years == ("2025",)  # facts.py reads them
    assert text_figures(text) == text_figures(ascii_text)  # as Bangla digits are: `২০২৬` is 2026
    other = normalize_text("The council met in 2026 and approved 410 projects worth 8.3 crore.".translate(chakma))
    assert figures_conflict(text_figures(text), text_figures(other)) is not None


# ------------------------------------------------------------------------------------------ the review screen


def test_the_service_review_screen_keeps_the_figure_checks_reason_after_a_redelivery(make_stack: object) -> None:
    """`simhash.figure_check = review` sends the next day's report to review with the reason; the review screen
    shows it instead of "a near-duplicate of a group at its size cap". The reason is kept only in the first link
    record: state stores no reason (Link.reason, compare=False), so when the crawler sends the report again the
    worker re-sends its verdict as a plain record without it, `latest_links` takes that record, and the screen
    names the group cap, a cause that is false (the group has one member)."""
    from streams.cli.review import service_review
    from streams.evaluation.stack import Stack
    from tests.test_review import screen_session, shown

    stack: Stack = make_stack("url,content,simhash")  # type: ignore[operator]
    stack.extra_env["DEDUP_SIMHASH__FIGURE_CHECK"] = "review"
    stack.create_topics()
    stack.start_worker()
    lines = market_lines()
    stack.produce(lines)
    first, _ = stack.final_links({"r0", "r1"})
    assert (first["r1"]["verdict"], first["r1"]["stage"]) == ("review", "simhash")
    assert first["r1"]["reason"].startswith("figure check: other figures")
    stack.produce(lines[1:])  # the crawler sends the report again
    again = stack.read(stack.settings().topics.links, until=3)
    assert again[-1]["doc_id"] == "r1" and again[-1]["verdict"] == "review"

    pairs, apply = service_review(stack.settings(), None)
    assert [pair.a for pair in pairs] == ["r1"]
    screen: list[str] = []
    screen_session(pairs, apply, None, [], lambda app: screen.append(shown(app, "#pair")))
    assert "figure check: other figures" in screen[0] and "size cap" not in screen[0], screen[0]


# ------------------------------------------------------------------------------------------ guards


def test_guard_a_link_record_with_a_hostile_figures_value_is_skipped_by_replay(tmp_path: Path) -> None:
    """Guard (found correct, covered by no test): `dedup replay` of link records whose `figures` is no digest
    (upper case, too short, a number, with a newline after) reports each as bad and restores the rest, the good
    record's digest whole (its top bit set: SQLite's signed integer keeps it)."""
    folder = tmp_path
    good = {
        "doc_id": "good", "verdict": "unique", "canonical_id": "good", "stage": None, "score": None,
        "linked_at": "2025-12-06T00:00:00.000Z", "model": None, "url_hash": "a" * 64, "content_hash": "b" * 64,
        "simhash": "00000000000000ff", "language": "en", "published_at": format_timestamp(T0),
        "figures": "ffffffffffffffff",
    }  # fmt: skip
    hostile = ["FFFFFFFFFFFFFFFF", "ff", 18446744073709551615, "ffffffffffffffff\n", "0x" + "f" * 14, None]
    records = [good] + [
        {**good, "doc_id": f"bad{n}", "canonical_id": f"bad{n}", "content_hash": f"{n:064x}", "figures": value}
        for n, value in enumerate(hostile)
    ]
    links = folder / "links.jsonl"
    links.write_bytes(b"".join(orjson.dumps(record) + b"\n" for record in records))
    stats = replay_files([str(links)], folder / "state")
    assert stats.restored == 1 and len(stats.bad) == len(hostile), stats.bad
    store = SqliteStateStore(folder / "state" / "state.sqlite3", band_layout=Settings().simhash.band_layout)
    try:
        found = {c.doc_id: c.figures for c in store.band_candidates("en", store.band_layout.keys(0xFF))}
    finally:
        store.close()
    assert found == {"good": (1 << 64) - 1}


DENGUE = (
    "Dengue: {deaths} more deaths, {cases} hospitalised in 24 hours",
    "At least {deaths} more people died of dengue and {cases} others were hospitalised with the mosquito-borne "
    "disease in the 24 hours till 8am on {day}, according to the Directorate General of Health Services "
    "(DGHS). With the new deaths, the toll this year rose to {toll}, the DGHS said in a press release. Of the "
    "new patients, {dhaka} were admitted to hospitals in Dhaka city and the rest outside the capital. Health "
    "experts urged people to destroy the breeding grounds of Aedes mosquitoes around their homes, not to let "
    "water stagnate in flower tubs, discarded tyres, coconut shells and construction sites, and to seek "
    "medical care at once if they have a high fever, severe headache, pain behind the eyes, muscle and joint "
    "pain, nausea or a rash. Doctors said patients should drink plenty of fluids and avoid painkillers other "
    "than paracetamol, and warned that a delay in treatment could be fatal, especially for children, pregnant "
    "women and elderly people. The city corporations have launched special drives to spray larvicide and "
    "adulticide in the areas most affected, while the health directorate has set up dedicated dengue corners "
    "at public hospitals across the country. Officials said the number of patients usually peaks in the "
    "monsoon months and early autumn, when rainwater collects in containers and on rooftops, and asked people "
    "to sleep under mosquito nets even during the daytime.",
)
BULLETINS = [
    {"deaths": 5, "cases": "1,234", "day": "Sunday", "toll": 212, "dhaka": 410},
    {"deaths": 7, "cases": "1,102", "day": "Monday", "toll": 219, "dhaka": 388},
    {"deaths": 3, "cases": "987", "day": "Tuesday", "toll": 222, "dhaka": 301},
    {"deaths": 9, "cases": "1,411", "day": "Wednesday", "toll": 231, "dhaka": 502},
]


def test_a_daily_bulletin_is_not_linked_to_another_days_by_the_figure_its_template_repeats() -> None:
    """Four days' health bulletins from one template: every figure that changes is another, but each lead says
    "in 24 hours", a figure every day's repeats. Sharing that one of their first three, two days' bulletins were
    taken for one text (Tuesday's and Wednesday's linked to Sunday's at 5 and 6 bits); two figures of three that
    differ tell another day's report from a corrected one."""
    featurizer, cascade = _cascade()
    for n, day in enumerate(BULLETINS):
        doc = _doc(featurizer, DENGUE[0].format(**day), DENGUE[1].format(**day), f"dengue-{n}")
        link = cascade.decide(doc).link
        assert link.verdict is Verdict.UNIQUE or link.stage is not Stage.SIMHASH, (day["day"], link)

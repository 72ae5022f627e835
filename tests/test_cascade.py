"""The cascade, stages 1 to 3, on each real state store: SQLite and Redis (the semantic stage runs in
the end-to-end tests). Whatever the store, the verdicts are the same."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable

import pytest

from streams.config import ModelThresholds, Settings
from streams.core.cascade import Cascade, semantic_match
from streams.core.model import Document, Link, Neighbour, Stage, Verdict
from streams.core.ports import StateStore
from streams.evaluation.corpus import NtrexDocument, labelled_stream
from streams.features.bands import FOUR_BY_16
from streams.records.article import Featurizer
from streams.stores.redis_store import RedisStateStore
from streams.stores.sqlite import SqliteStateStore

CHEAP = [Stage.URL, Stage.CONTENT, Stage.SIMHASH]
_ids = itertools.count()


def make(featurizer: Featurizer, url: str, title: str, body: str, doc_id: str | None = None) -> Document:
    record = {"id": doc_id or f"d{next(_ids)}", "url": url, "title": title, "body": body}
    doc = featurizer.featurize(record, b"", ingest_time=1_700_000_000)
    assert isinstance(doc, Document), doc
    return doc


@pytest.fixture
def settings() -> Settings:
    return Settings(stages=CHEAP)


@pytest.fixture
def featurizer(settings: Settings) -> Featurizer:
    return Featurizer(settings)


@pytest.fixture
def cascade(settings: Settings, new_state: Callable[[], StateStore]) -> Cascade:
    return Cascade(settings, new_state())


def test_each_stage_links_its_kind_of_copy(
    cascade: Cascade, featurizer: Featurizer, ntrex: list[NtrexDocument]
) -> None:
    doc = ntrex[0]
    title, body = doc.english[0], " ".join(doc.english[1:])
    original = make(featurizer, "https://example.com/a", title, body, "orig")
    assert cascade.decide(original).link == Link.unique("orig")
    recrawl = make(featurizer, "http://www.example.com/a?utm_source=x", title, "changed body", "recrawl")
    assert cascade.decide(recrawl).link == Link("recrawl", Verdict.DUPLICATE, "orig", Stage.URL)
    wire = make(featurizer, "https://wire.example.net/1", title, body.replace("'", "\u2019"), "wire")
    assert cascade.decide(wire).link == Link("wire", Verdict.DUPLICATE, "orig", Stage.CONTENT)
    edited = " ".join(doc.english_us[1:])
    assert edited != body
    near = cascade.decide(make(featurizer, "https://us.example.org/1", doc.english_us[0], edited, "us")).link
    assert (near.verdict, near.canonical_id, near.stage) == (Verdict.DUPLICATE, "orig", Stage.SIMHASH)
    assert near.score is not None and 0 <= near.score <= 3


def test_a_copy_of_a_duplicate_links_to_the_canonical_never_to_the_duplicate(
    cascade: Cascade, featurizer: Featurizer, ntrex: list[NtrexDocument]
) -> None:
    doc = ntrex[1]
    title, body = doc.english[0], " ".join(doc.english[1:])
    cascade.decide(make(featurizer, "https://a.example.com/1", title, body, "canon"))
    us_title, us_body = doc.english_us[0], " ".join(doc.english_us[1:])
    cascade.decide(make(featurizer, "https://b.example.com/1", us_title, us_body, "dup"))
    # Same URL as the duplicate, and the duplicate's text: both exact keys lead to the canonical.
    by_url = cascade.decide(make(featurizer, "https://b.example.com/1?utm_medium=x", "x", "y", "copy1")).link
    by_text = cascade.decide(make(featurizer, "https://c.example.com/9", us_title, us_body, "copy2")).link
    assert by_url.canonical_id == by_text.canonical_id == "canon"


def test_redelivery_gets_the_same_verdict_and_never_a_self_link(
    cascade: Cascade, featurizer: Featurizer, ntrex: list[NtrexDocument]
) -> None:
    doc = ntrex[2]
    first = make(featurizer, "https://a.example.com/2", doc.english[0], " ".join(doc.english[1:]), "x")
    copy = make(featurizer, "https://b.example.com/2", doc.english[0], " ".join(doc.english[1:]), "y")
    assert cascade.decide(first).link == Link.unique("x")
    assert cascade.decide(copy).link.canonical_id == "x"
    again = cascade.decide(first)
    assert again.repeated and again.link == Link.unique("x")
    copy_again = cascade.decide(copy)
    assert copy_again.repeated and copy_again.link.canonical_id == "x"


def test_distinct_stories_are_never_merged(
    cascade: Cascade, featurizer: Featurizer, ntrex: list[NtrexDocument]
) -> None:
    for number, doc in enumerate(ntrex):
        variants = [doc.english, doc.english_gb, doc.english_in]
        for site, sentences in enumerate(variants):
            url = f"https://site{site}.example.com/{number}"
            link = cascade.decide(make(featurizer, url, sentences[0], " ".join(sentences[1:]), f"{number}-{site}")).link
            assert link.canonical_id.split("-")[0] == str(number)


def test_group_cap_sends_further_near_duplicates_to_review(
    featurizer: Featurizer, new_state: Callable[[], StateStore]
) -> None:
    cascade = Cascade(Settings(stages=CHEAP, group_cap=2), new_state())
    words = [f"word{i}" for i in range(300)]
    base = " ".join(words)
    cascade.decide(make(featurizer, "https://a.example.com/0", "t", base, "c"))
    first = cascade.decide(make(featurizer, "https://a.example.com/1", "t", base + " extra1", "n1")).link
    second = cascade.decide(make(featurizer, "https://a.example.com/2", "t", base + " extra2", "n2")).link
    exact = cascade.decide(make(featurizer, "https://a.example.com/3", "t", base, "n3")).link
    assert (first.verdict, second.verdict) == (Verdict.DUPLICATE, Verdict.REVIEW)
    assert second.canonical_id == "c"
    assert exact.verdict is Verdict.DUPLICATE  # exact equality is never in doubt


def test_ties_go_to_the_first_seen_canonical(featurizer: Featurizer, new_state: Callable[[], StateStore]) -> None:
    store = new_state()
    cascade = Cascade(Settings(stages=CHEAP), store)
    words = " ".join(f"w{i}" for i in range(200))
    simhash = make(featurizer, "https://x.example.com/", "t", words).simhash
    # Two canonicals with one fingerprint (as two workers could leave them): the older one wins.
    store.add_canonical("older", simhash, "en", FOUR_BY_16.keys(simhash), 0)
    store.add_canonical("newer", simhash, "en", FOUR_BY_16.keys(simhash), 0)
    link = cascade.decide(make(featurizer, "https://third.example.com/", "t", words + " more", "third")).link
    assert (link.stage, link.canonical_id) == (Stage.SIMHASH, "older")


def test_disabled_stages_are_skipped(featurizer: Featurizer, new_state: Callable[[], StateStore]) -> None:
    cascade = Cascade(Settings(stages=[Stage.CONTENT]), new_state())
    cascade.decide(make(featurizer, "https://a.example.com/1", "t", "one body", "a"))
    other_text = cascade.decide(make(featurizer, "https://a.example.com/1", "t", "another body", "b")).link
    assert other_text == Link.unique("b")


def test_semantic_stage_needs_its_stores() -> None:
    with pytest.raises(ValueError, match="vector store"):
        Cascade(Settings(), SqliteStateStore(":memory:"))


def test_semantic_match_holds_each_language_relation_to_its_own_cut_offs() -> None:
    cuts = ModelThresholds(link=0.98, review=0.95, cross_link=0.85, cross_review=0.83)
    same = Neighbour("same", 0.96, 0, "en")
    cross = Neighbour("cross", 0.90, 0, "bn")
    # 0.96 is only a review in one language; 0.90 is a link across languages: the link wins.
    assert semantic_match(same, cross, cuts) == (cross, Verdict.DUPLICATE)
    assert semantic_match(same, None, cuts) == (same, Verdict.REVIEW)
    assert semantic_match(Neighbour("s", 0.94, 0, "en"), Neighbour("c", 0.82, 0, "bn"), cuts) is None
    close_same = Neighbour("same", 0.99, 0, "en")
    assert semantic_match(close_same, cross, cuts) == (close_same, Verdict.DUPLICATE)


def test_exact_copies_of_a_document_under_review_share_its_verdict(
    featurizer: Featurizer, new_state: Callable[[], StateStore]
) -> None:
    cascade = Cascade(Settings(stages=CHEAP, group_cap=2), new_state())
    base = " ".join(f"word{i}" for i in range(300))
    cascade.decide(make(featurizer, "https://a.example.com/0", "t", base, "c"))
    cascade.decide(make(featurizer, "https://a.example.com/1", "t", base + " extra1", "n1"))
    doubt = cascade.decide(make(featurizer, "https://b.example.com/2", "t", base + " extra2", "n2")).link
    assert (doubt.verdict, doubt.canonical_id, doubt.publishes) == (Verdict.REVIEW, "c", True)
    recrawl = cascade.decide(make(featurizer, "https://b.example.com/2?utm_source=x", "t", "new text", "n2-url")).link
    wire = cascade.decide(make(featurizer, "https://wire.example.net/2", "t", base + " extra2", "n2-wire")).link
    assert (recrawl.verdict, recrawl.canonical_id, recrawl.stage) == (Verdict.REVIEW, "c", Stage.URL)
    assert (wire.verdict, wire.canonical_id, wire.stage) == (Verdict.REVIEW, "c", Stage.CONTENT)
    assert not recrawl.publishes and not wire.publishes
    # The re-crawl's own new text now stands for the review too.
    again = cascade.decide(make(featurizer, "https://c.example.net/9", "t", "new text", "n2-url-copy")).link
    assert (again.verdict, again.canonical_id) == (Verdict.REVIEW, "c")


def test_the_stores_give_the_same_verdicts_on_the_labelled_stream(redis_url: str) -> None:
    stream = labelled_stream(negative_pairs=50)
    settings = Settings(stages=CHEAP)
    featurizer = Featurizer(settings)
    docs = [featurizer.featurize(dict(item.record), b"", ingest_time=0) for item in stream]
    verdicts = []
    for store in (SqliteStateStore(":memory:"), RedisStateStore.from_url(redis_url, prefix=f"t{uuid.uuid4().hex}:")):
        cascade = Cascade(settings, store)
        verdicts.append([cascade.decide(doc).link for doc in docs if isinstance(doc, Document)])
    assert len(verdicts[0]) == len(stream)
    assert verdicts[0] == verdicts[1]
    assert sum(link.verdict is Verdict.DUPLICATE for link in verdicts[0]) > 300


def test_would_link_predicts_what_stages_one_to_three_will_link(featurizer: Featurizer) -> None:
    cascade = Cascade(Settings(stages=CHEAP), SqliteStateStore(":memory:"))
    base = " ".join(f"word{i}" for i in range(300))
    original = make(featurizer, "https://a.example.com/1", "t", base)
    recrawl = make(featurizer, "https://a.example.com/1?utm_source=x", "other", "other text")
    wire = make(featurizer, "https://b.example.com/9", "t", base)
    edited = make(featurizer, "https://c.example.com/9", "t", base + " extra")
    other = make(featurizer, "https://d.example.com/9", "t", " ".join(f"other{i}" for i in range(300)))
    assert [cascade.would_link(d, original) for d in (recrawl, wire, edited, other)] == [True, True, True, False]
    cascade.decide(original)
    assert [cascade.decide(d).link.canonical_id for d in (recrawl, wire, edited)] == [original.doc_id] * 3
    content_only = Cascade(Settings(stages=[Stage.CONTENT]), SqliteStateStore(":memory:"))
    assert not content_only.would_link(recrawl, original) and not content_only.would_link(edited, original)

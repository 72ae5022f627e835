"""A document is its id and its content: the same id with other content is a new version.

Two sources whose numeric ids collide, and an article updated under a stable CMS id, used to
get the first article's verdict, were never registered and never published. Real NTREX text;
every state store; the file runner and replay.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson

from streams.config import Settings
from streams.core.cascade import Cascade
from streams.core.model import Document, Stage, Verdict, version_id
from streams.core.ports import StateStore
from streams.evaluation.corpus import NtrexDocument
from streams.records.article import Featurizer
from streams.runner.embedded import RunPaths, run
from streams.runner.replay import replay_files

CHEAP = [Stage.URL, Stage.CONTENT, Stage.SIMHASH]


def _record(story: NtrexDocument, doc_id: str, url: str) -> dict[str, str]:
    return {"id": doc_id, "url": url, "title": story.english[0], "body": " ".join(story.english[1:])}


def _doc(record: dict[str, str]) -> Document:
    doc = Featurizer(Settings(stages=CHEAP)).featurize(record, b"", ingest_time=1_700_000_000)
    assert isinstance(doc, Document), doc
    return doc


def test_colliding_ids_from_two_sources_are_two_documents(
    new_state: Callable[[], StateStore], ntrex: list[NtrexDocument]
) -> None:
    cascade = Cascade(Settings(stages=CHEAP), new_state())
    first = _doc(_record(ntrex[0], "1001", "https://one.example.com/1001"))
    other = _doc(_record(ntrex[1], "1001", "https://two.example.org/1001"))
    assert cascade.decide(first).link.verdict is Verdict.UNIQUE
    decision = cascade.decide(other)
    assert not decision.repeated and decision.version is not None
    assert decision.link.doc_id == version_id("1001", other.content_hash) == decision.version.doc_id
    assert decision.link.verdict is Verdict.UNIQUE and decision.link.publishes
    assert decision.version.version_of == "1001"
    # Redelivered, each version gets its own verdict back.
    again = cascade.decide(other)
    assert again.repeated and again.link.doc_id == decision.link.doc_id
    assert cascade.decide(first).link.doc_id == "1001"


def test_an_update_under_a_stable_id_is_decided_on_its_own_content(
    new_state: Callable[[], StateStore], ntrex: list[NtrexDocument]
) -> None:
    cascade = Cascade(Settings(stages=CHEAP), new_state())
    story = ntrex[2]
    original = _doc(_record(story, "cms-7", "https://news.example.com/cms-7"))
    updated_record = _record(story, "cms-7", "https://news.example.com/cms-7")
    updated_record["body"] += " " + ntrex[3].english[1]  # an update appended
    updated = _doc(updated_record)
    cascade.decide(original)
    decision = cascade.decide(updated)
    assert decision.version is not None and decision.version.content_hash == updated.content_hash
    assert decision.link.verdict is Verdict.DUPLICATE and decision.link.canonical_id == "cms-7"
    assert decision.link.stage is Stage.URL  # the same page crawled again, now with an update


def test_versions_survive_the_file_run_and_its_replay(tmp_path: Path, ntrex: list[NtrexDocument]) -> None:
    first = _record(ntrex[4], "55", "https://a.example.com/55")
    other = _record(ntrex[5], "55", "https://b.example.net/55")
    source = tmp_path / "in.jsonl"
    source.write_bytes(orjson.dumps(first) + b"\n" + orjson.dumps(other) + b"\n")
    paths = RunPaths(out=tmp_path / "out", state=tmp_path / "state")
    run(Settings(stages=CHEAP), [str(source)], paths)
    links = [orjson.loads(line) for line in paths.links.read_bytes().splitlines()]
    assert [(link["doc_id"], link["verdict"], link.get("version_of")) for link in links] == [
        ("55", "unique", None),
        (version_id("55", _doc(other).content_hash), "unique", "55"),
    ]
    published = [orjson.loads(line) for line in paths.deduped.read_bytes().splitlines()]
    assert [article["body"] for article in published] == [first["body"], other["body"]]

    rebuilt = tmp_path / "rebuilt"
    replay_files([str(paths.links)], rebuilt)
    again = tmp_path / "again.jsonl"
    again.write_bytes(orjson.dumps(other) + b"\n")
    more = RunPaths(out=tmp_path / "out2", state=rebuilt)
    run(Settings(stages=CHEAP), [str(again)], more)
    (link,) = [orjson.loads(line) for line in more.links.read_bytes().splitlines()]
    assert link["doc_id"] == links[1]["doc_id"] and link["verdict"] == "unique"
    assert not more.deduped.read_bytes()  # known already: not published twice

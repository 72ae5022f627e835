"""Random hostile streams with people's decisions in the middle: `dedup run` over a random head, `dedup relink`
with random labels (unlink a duplicate, confirm or reject a review, then link some unlinked documents back; the
articles to publish from the head's raw input), and `dedup run` over the tail, into the same folder. Links stay
stars at every record written, and a state rebuilt from links.jsonl alone (`dedup replay`) is the live state,
before the tail and after it, and decides the tail alike ("every verdict is replayable", relinks included).

The streams are `tests/test_random_streams.py`'s, with `tests/test_random_replays.py`'s group caps and figure
checks (reviews); they stay clear of the same documented limits. A failure names the seed, the cut and the labels.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from streams.core.model import DAY_S
from streams.core.relink import Label
from streams.evaluation.stack import Stack
from streams.kafka.journal import latest as read_topic
from streams.records.article import parse_timestamp
from streams.runner.relink import relink_files
from streams.runner.replay import replay_files
from streams.service.relink import relink_service
from streams.service.resources import Resources
from streams.service.stages import Agent
from tests.test_random_replays import _drawn, _handled, _rows, _run, _settings
from tests.test_random_streams import RETENTION, _batches

CANONICAL = ("unique", "unlinked")
Latest = dict[str, dict[str, Any]]


def _latest(out: Path) -> Latest:
    """Each document's latest link record in `out`/links.jsonl."""
    return {r["doc_id"]: r for r in _links_of(out / "links.jsonl")}


def _links_of(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _labels(rng: random.Random, latest: Latest) -> list[Label]:
    """A few decisions on documents that are duplicates (not exact copies) or under review now, and whose verdicts
    the state still keeps (dated in the last `verdicts_days` of the stream): a duplicate is said not to be one, a
    review is confirmed or rejected."""
    newest = max(parse_timestamp(r["published_at"]) for r in latest.values())
    kept = newest - RETENTION.verdicts_days * DAY_S
    open_ = sorted(
        doc
        for doc, r in latest.items()
        if parse_timestamp(r["published_at"]) > kept
        and (r["verdict"] == "review" or (r["verdict"] == "duplicate" and r["stage"] not in ("url", "content")))
    )
    chosen = rng.sample(open_, min(len(open_), rng.randint(1, 3)))
    return [
        Label(doc, latest[doc]["canonical_id"], latest[doc]["verdict"] == "review" and rng.random() < 0.5)
        for doc in chosen
    ]


def _linked_back(rng: random.Random, before: Latest, after: Latest) -> list[Label]:
    """Some documents the first decisions unlinked, said to be duplicates of their canonical again."""
    unlinked = sorted(d for d, r in after.items() if r["verdict"] == "unlinked" and before[d]["verdict"] != "unlinked")
    return [Label(d, before[d]["canonical_id"], True) for d in unlinked if rng.random() < 0.7]


def _check_stars(files: list[Path], where: str, relinked_from: int | None = None) -> None:
    """Every duplicate or review record, when written, names a document whose verdict then is a canonical's. With
    `relinked_from` (the first line the relinks wrote): no document they made a duplicate still has members at
    the end (an id reused once its verdict expired may: links name the id, as it was when they were made)."""
    holding: dict[str, dict[str, Any]] = {}
    relinked: set[str] = set()
    for path in files:
        for number, record in enumerate(_links_of(path)):
            if record["verdict"] in ("duplicate", "review"):
                target = holding.get(record["canonical_id"], {}).get("verdict")
                assert target in CANONICAL, f"{path.parent.name} line {number}: {record} -> {target}: a chain; {where}"
            holding[record["doc_id"]] = record
            if relinked_from is not None and number >= relinked_from:
                relinked.add(record["doc_id"])
    members = {doc: r["canonical_id"] for doc, r in holding.items() if r["verdict"] in ("duplicate", "review")}
    fallen = {doc: canonical for doc, canonical in members.items() if canonical in relinked and canonical in members}
    assert not fallen, f"members of documents a relink made duplicates: {fallen}; {where}"


def _cut(rng: random.Random, tmp_path: Path, settings: Any, records: list[dict[str, Any]], ends: list[int]) -> int:
    """Where to cut the stream (one of `ends`, records before the cut): mostly right after a document `dedup run`
    suppresses (a SimHash duplicate, a review), whose decision a person may then take back; else anywhere."""
    source = tmp_path / "whole.jsonl"
    source.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    lines = _run(settings, source, tmp_path / "whole", tmp_path / "whole" / "state")
    suppressed = {doc for doc, verdict, _, stage, *_ in lines if verdict == "review" or stage == "simhash"}
    starts = [0, *ends[:-1]]
    after = [end for start, end in zip(starts, ends, strict=True)
             if end < len(records) and any(r["id"] in suppressed for r in records[start:end])]  # fmt: skip
    inner = [end for end in ends if end < len(records)] or ends
    return rng.choice(after) if after and rng.random() < 0.8 else rng.choice(inner)


def _configure(monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]) -> None:
    """The stream's settings in the environment, where `relink_files` reads them (`dedup relink --config`)."""
    for name, value in {"RETENTION__BANDS_DAYS": RETENTION.bands_days, "RETENTION__EXACT_DAYS": RETENTION.exact_days,
                        "RETENTION__VERDICTS_DAYS": RETENTION.verdicts_days, "GROUP_CAP": options["group_cap"],
                        "SIMHASH__FIGURE_CHECK": options["figure_check"]}.items():  # fmt: skip
        monkeypatch.setenv(f"DEDUP_{name}", str(value))


def _rebuilt(settings: Any, out: Path, folder: Path, where: str) -> Path:
    stats = replay_files(
        [str(out / "links.jsonl")], folder, retention=settings.retention, band_layout=settings.simhash.band_layout
    )
    assert not stats.bad, where
    return folder


@pytest.mark.parametrize("seed", range(500))
def test_random_relinks_between_two_runs_keep_stars_and_a_replayable_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    rng, records, where, options = _drawn(seed)
    settings = _settings(options)
    _configure(monkeypatch, options)
    cut = _cut(rng, tmp_path, settings, records, [len(records[: i + 1]) for i in range(len(records))])
    head, tail = tmp_path / "head.jsonl", tmp_path / "tail.jsonl"
    head.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records[:cut]))
    tail.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records[cut:]))
    out = tmp_path / "out"
    _run(settings, head, out, out / "state")
    before = _latest(out)
    head_lines = len((out / "links.jsonl").read_bytes().splitlines())
    labels = _labels(rng, before)
    where = f"cut at {cut}, labels {labels}, {where}"
    first = relink_files(out / "state", out, decisions=labels, articles=[head])
    back = _linked_back(rng, before, _latest(out))
    if back:
        where = f"linked back {back}, {where}"
        relink_files(out / "state", out, decisions=back, articles=[head])
    _check_stars([out / "links.jsonl"], where, relinked_from=head_lines)
    rebuilt = _rebuilt(settings, out, tmp_path / "rebuilt", where)
    assert _rows(rebuilt) == _rows(out / "state"), f"the replay rebuilt another state after the relinks; {where}"
    on_live = _run(settings, tail, tmp_path / "tail-live", out / "state")
    on_rebuilt = _run(settings, tail, tmp_path / "tail-rebuilt", rebuilt)
    assert on_rebuilt == on_live, where
    assert _rows(rebuilt) == _rows(out / "state"), f"the tail left another state; {where}"
    _check_stars([out / "links.jsonl", tmp_path / "tail-live" / "links.jsonl"], where)
    assert first.plan.changes or first.plan.refused or first.plan.unchanged or not labels, where


def _latest_verdicts(records: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    return {r["doc_id"]: (r["verdict"], r["canonical_id"], r["stage"]) for r in records}


@pytest.mark.parametrize("seed", range(100))
def test_random_relinks_change_the_same_verdicts_on_the_service_as_on_files(
    make_stack: Callable[[str], Stack], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """The head through `dedup run` and through the stage agent (its records produced to the topics), the same
    random labels relinked on both (`relink_files`, `relink_service`, articles from the head's raw input), and
    some unlinked documents linked back, then the tail through both: the relinks change and refuse the same
    documents alike, and every document ends with the same verdict on both."""
    rng, records, where, options = _drawn(seed)
    _configure(monkeypatch, options)
    batches = _batches(rng, records)
    settings = _settings(options)
    ends = [sum(map(len, batches[: i + 1])) for i in range(len(batches))]
    cut = ends.index(_cut(rng, tmp_path, settings, records, ends)) + 1
    head = tmp_path / "head.jsonl"
    head.write_bytes(b"".join(orjson.dumps(r) + b"\n" for batch in batches[:cut] for r in batch))
    tail = tmp_path / "tail.jsonl"
    tail.write_bytes(b"".join(orjson.dumps(r) + b"\n" for batch in batches[cut:] for r in batch))
    out = tmp_path / "out"
    _run(settings, head, out, out / "state")
    before = _latest(out)
    labels = _labels(rng, before)
    on_files = [relink_files(out / "state", out, decisions=labels, articles=[head])] if labels else []
    back = _linked_back(rng, before, _latest(out))
    if back:
        on_files.append(relink_files(out / "state", out, decisions=back, articles=[head]))
    where = f"{len(batches)} batches, cut after {cut}, labels {labels}, then {back}, {where}"
    _run(settings, tail, tmp_path / "tail-out", out / "state")

    stack = make_stack("url,content,simhash")
    stack.create_topics()
    live = _settings(options, redis_url=stack.redis_url, redis_prefix=f"{stack.name}:",
                     kafka_bootstrap=stack.bootstrap, topics=stack.settings().topics)  # fmt: skip
    resources = Resources(live)
    try:
        agent = resources.stage_agent(Agent.EXACT, Agent.SIMHASH)
        sent = _handled(agent, batches[:cut])
        producer = Producer({"bootstrap.servers": stack.bootstrap, "linger.ms": 5})
        for out_record in sent:
            producer.produce(out_record.topic, out_record.value, out_record.key)
        assert producer.flush(30) == 0
        on_service = [relink_service(live, decisions=decided, articles=[head]) for decided in (labels, back) if decided]
        later = _handled(agent, batches[cut:])
    finally:
        resources.close()

    def changes(result: Any) -> tuple[dict[str, Any], list[tuple[str, str | None, str]]]:
        made = {c.doc_id: (c.link.verdict, c.link.canonical_id, c.reason) for c in result.plan.changes}
        return made, sorted((r.doc_id, r.other, r.reason) for r in result.plan.refused)

    assert [changes(result) for result in on_service] == [changes(result) for result in on_files], where
    links = live.topics.links
    service_links = [orjson.loads(o.value) for o in sent if o.topic == links]
    service_links += read_topic(live, links).records.values()  # the relink's records, each document's latest
    service_links += [orjson.loads(o.value) for o in later if o.topic == links]
    file_links = _links_of(out / "links.jsonl") + _links_of(tmp_path / "tail-out" / "links.jsonl")
    assert _latest_verdicts(service_links) == _latest_verdicts(file_links), where

"""Band layouts: what each one guarantees, every store finding exactly the candidates its layout
defines, a state kept in the layout it was written in, and the cascade linking what only a
probing layout finds (a real NTREX near-duplicate)."""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
import redis

from benchmarks.replay_speed import keys
from streams.config import Settings
from streams.core.model import Stage
from streams.core.ports import Reads, StateStore
from streams.evaluation.corpus import NtrexDocument
from streams.evaluation.stack import Stack
from streams.features.bands import EIGHT_BY_32, FOUR_BY_16, LAYOUTS, BandLayout, layout
from streams.kafka.replay import replay_links
from streams.runner.embedded import RunPaths, run
from streams.stores.batched import BatchedState
from streams.stores.redis_lock import RedisLock
from streams.stores.redis_store import LayoutMismatch, RedisStateStore
from streams.stores.sqlite import SqliteStateStore

EN = "en"
EXACT_AND_NEAR = "url,content,simhash"


def dedup(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The `dedup` command as a user runs it (a wide terminal: one line is one line)."""
    environment = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "streams", *args], capture_output=True, text=True, timeout=300, env=environment
    )


def _flips(bits: int) -> Iterator[int]:
    for chosen in itertools.combinations(range(64), bits):
        yield sum(1 << bit for bit in chosen)


@pytest.mark.parametrize("band_layout", LAYOUTS.values(), ids=LAYOUTS)
def test_fingerprints_within_the_guaranteed_distance_always_share_and_one_bit_more_need_not(
    band_layout: BandLayout,
) -> None:
    # Keys are bit selections, so whether a and b share depends on a ^ b alone: every pattern is tried.
    base = random.Random(7).getrandbits(64)
    for bits in range(band_layout.guaranteed + 1):
        assert all(band_layout.shares(base, base ^ x) for x in _flips(bits)), bits
    assert not all(band_layout.shares(base, base ^ x) for x in _flips(band_layout.guaranteed + 1))


def test_the_4x16_keys_are_the_four_16_bit_bands_lowest_first() -> None:
    fingerprint = 0x0123_4567_89AB_CDEF
    assert FOUR_BY_16.keys(fingerprint) == (0xCDEF, 0x89AB, 0x4567, 0x0123)
    assert FOUR_BY_16.near(0xCDEF) == (0xCDEF,)
    assert FOUR_BY_16.lookups_per_query == 4


def test_the_8x32_keys_are_byte_planes_each_byte_in_four_tables_and_looked_up_one_bit_away() -> None:
    fingerprint = 0x0706_0504_0302_0100  # byte i holds i
    keys = EIGHT_BY_32.keys(fingerprint)
    assert keys[0] == 0x06_04_02_00 and keys[5] == 0x06_05_02_01 and keys[7] == 0x07_06_05_04
    assert all(sum(byte in table for table in EIGHT_BY_32.tables) == 4 for byte in range(8))
    assert EIGHT_BY_32.near(0)[:3] == (0, 1, 2) and len(EIGHT_BY_32.near(0)) == 33
    assert EIGHT_BY_32.lookups_per_query == 264


def test_an_unknown_layout_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"no band layout '8x16'.*4x16, 8x32\+p1"):
        layout("8x16")
    with pytest.raises(ValueError, match=r"8x32\+p1"):
        Settings(simhash={"bands": "8x16"})
    assert Settings(simhash={"bands": "8x32+p1"}).simhash.band_layout is EIGHT_BY_32
    assert Settings().simhash.band_layout is FOUR_BY_16


Make = Callable[[BandLayout], StateStore]


@pytest.fixture(params=["sqlite", "redis", "redis-batched", "redis-cluster"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Make]:
    """Each store, on a server and on a cluster (where a lookup's probes fall into other slots)."""
    opened: list[SqliteStateStore | RedisStateStore] = []

    def make(band_layout: BandLayout) -> StateStore:
        if request.param == "sqlite":
            sqlite = SqliteStateStore(tmp_path / f"{uuid.uuid4().hex}.sqlite3", band_layout=band_layout)
            opened.append(sqlite)
            return sqlite
        if request.param == "redis-cluster":
            url = request.getfixturevalue("redis_cluster").url
        else:
            url = request.getfixturevalue("redis_url")
        shared = RedisStateStore.from_url(url, prefix=f"t{uuid.uuid4().hex}:", band_layout=band_layout)
        opened.append(shared)
        return BatchedState(shared) if request.param == "redis-batched" else shared

    yield make
    for store in opened:
        store.close()


def _near_patterns(band_layout: BandLayout, rng: random.Random) -> list[int]:
    """Differences from a query that fall on every side of the layout's edges: each single bit (in a key's
    low bits and in the bits that choose a bucket), two bits in one table's key, and random 3 to 8 bits."""
    single = [1 << bit for bit in range(64)]
    two = [(1 << a) | (1 << b) for a, b in itertools.combinations(range(0, 64, 5), 2)]
    wide = [sum(1 << bit for bit in rng.sample(range(64), rng.randint(3, 8))) for _ in range(150)]
    return [0, *single, *two, *wide]


@pytest.mark.parametrize("band_layout", LAYOUTS.values(), ids=LAYOUTS)
def test_every_store_finds_exactly_the_canonicals_its_layout_shares_with_the_query(
    make_store: Make, band_layout: BandLayout
) -> None:
    rng = random.Random(11)
    store = make_store(band_layout)
    queries = [rng.getrandbits(64) for _ in range(3)]
    canonicals: dict[str, int] = {}
    for q, query in enumerate(queries):
        for p, pattern in enumerate(_near_patterns(band_layout, rng)):
            canonicals[f"q{q}-{p}"] = query ^ pattern
    canonicals.update({f"r{i}": rng.getrandbits(64) for i in range(200)})
    for doc_id, simhash in canonicals.items():
        store.add_canonical(doc_id, simhash, EN, band_layout.keys(simhash), 0)
    store.add_canonical("other-language", queries[0], "bn", band_layout.keys(queries[0]), 0)

    def expected(query: int) -> set[str]:
        return {doc_id for doc_id, simhash in canonicals.items() if band_layout.shares(query, simhash)}

    def found(query: int) -> set[str]:
        return {c.doc_id for c in store.band_candidates(EN, band_layout.keys(query))}

    for query in queries:  # before a batch is written (BatchedState: its own writes), then after
        assert found(query) == expected(query)
    if isinstance(store, BatchedState):
        lease = RedisLock(store._backend._redis, f"{store._backend._prefix}lease", ttl_s=60).acquire()
        store.flush(lease)
        store.warm(Reads([], [], [(EN, band_layout.keys(query)) for query in queries]))
    for query in queries:
        assert found(query) == expected(query)
        assert len(expected(query)) > 64  # the patterns reach every table (the 4x16 query finds its 1-bit ones)


def test_a_redis_state_is_read_in_the_band_layout_it_was_written_in(redis_url: str) -> None:
    prefix = f"t{uuid.uuid4().hex}:"
    written = RedisStateStore.from_url(redis_url, prefix=prefix, band_layout=EIGHT_BY_32)
    written.add_canonical("a", 42, EN, EIGHT_BY_32.keys(42), 0)
    assert written.layout == "4/16/8x32+p1"
    with pytest.raises(LayoutMismatch, match=r"band layout 8x32\+p1.*DEDUP_SIMHASH__BANDS=8x32\+p1"):
        RedisStateStore.from_url(redis_url, prefix=prefix).clock()
    again = RedisStateStore.from_url(redis_url, prefix=prefix, band_layout=EIGHT_BY_32)
    assert [c.doc_id for c in again.band_candidates(EN, EIGHT_BY_32.keys(43))] == ["a"]  # one bit away
    # A marker without bands ("4/16", or layout 2's "2/16") is 4x16: read by a 4x16 store, refused by another.
    older = f"t{uuid.uuid4().hex}:"
    RedisStateStore.from_url(redis_url, prefix=older).add_canonical("b", 42, EN, FOUR_BY_16.keys(42), 0)
    assert written._redis.get(f"{older}layout").partition(" ")[0] == "4/16"
    with pytest.raises(LayoutMismatch, match=r"band layout 4x16.*DEDUP_SIMHASH__BANDS=4x16"):
        RedisStateStore.from_url(redis_url, prefix=older, band_layout=EIGHT_BY_32).clock()
    for store in (written, again):
        store.close()


def test_a_state_folder_is_read_in_the_band_layout_it_was_made_in(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    store = SqliteStateStore(path, band_layout=EIGHT_BY_32)
    store.add_canonical("a", 42, EN, EIGHT_BY_32.keys(42), 0)
    store.close()
    with pytest.raises(LayoutMismatch, match=r"band layout 8x32\+p1.*DEDUP_SIMHASH__BANDS=8x32\+p1"):
        SqliteStateStore(path)
    reopened = SqliteStateStore(path, band_layout=EIGHT_BY_32)
    assert [c.doc_id for c in reopened.band_candidates(EN, EIGHT_BY_32.keys(43))] == ["a"]
    reopened.close()


def _articles(path: Path, first: list[str], second: list[str]) -> None:
    records = [
        {"id": "original", "url": "https://a.example/story", "title": first[0], "body": " ".join(first[1:])},
        {"id": "edited", "url": "https://b.example/story", "title": second[0], "body": " ".join(second[1:])},
    ]
    path.write_bytes(b"".join(orjson.dumps({**r, "language": "en"}) + b"\n" for r in records))


@pytest.mark.parametrize(("bands", "linked"), [("4x16", False), ("8x32+p1", True)])
def test_a_near_duplicate_only_the_probing_layout_finds_is_linked_with_it(
    tmp_path: Path, ntrex: list[NtrexDocument], bands: str, linked: bool
) -> None:
    # NTREX document 43 and its US edit are 5 bits apart (within English's 6), with a differing bit in
    # each 16-bit band: 4x16 cannot find the pair, 8x32+p1 does (benchmarks/scale.py counts such pairs).
    document = ntrex[43]
    _articles(tmp_path / "in.jsonl", document.english, document.english_us)
    paths = RunPaths(out=tmp_path / "out", state=tmp_path / "state")
    settings = Settings(stages=[Stage.URL, Stage.CONTENT, Stage.SIMHASH], simhash={"bands": bands})
    run(settings, [str(tmp_path / "in.jsonl")], paths)
    links = {link["doc_id"]: link for link in map(orjson.loads, paths.links.read_bytes().splitlines())}
    edited = links["edited"]
    if linked:
        assert (edited["verdict"], edited["canonical_id"], edited["stage"], edited["score"]) == (
            "duplicate",
            "original",
            "simhash",
            5,
        )
    else:
        assert edited["verdict"] == "unique"


def test_a_state_moves_to_another_layout_by_replay_and_then_links_what_that_layout_finds(
    tmp_path: Path, ntrex: list[NtrexDocument]
) -> None:
    """Day 1 in 4x16; day 2 (the edit) with 8x32+p1 is refused on that state in one line, and
    runs on the state `dedup replay` rebuilt from day 1's links in the new layout."""
    document = ntrex[43]
    _articles(tmp_path / "both.jsonl", document.english, document.english_us)
    first, second = (tmp_path / "both.jsonl").read_bytes().splitlines(keepends=True)
    (tmp_path / "day1.jsonl").write_bytes(first)
    (tmp_path / "day2.jsonl").write_bytes(second)
    day1 = dedup("run", str(tmp_path / "day1.jsonl"), "--out", str(tmp_path / "out1"), "--stages", EXACT_AND_NEAR)
    assert day1.returncode == 0, day1.stderr
    probing = {"DEDUP_SIMHASH__BANDS": "8x32+p1"}
    refused = dedup(
        "run", str(tmp_path / "day2.jsonl"), "--state", str(tmp_path / "out1" / "state"), "--out",
        str(tmp_path / "refused"), "--stages", EXACT_AND_NEAR, env=probing,
    )  # fmt: skip
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "band layout 4x16" in refused.stderr and "DEDUP_SIMHASH__BANDS=4x16" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    rebuilt = tmp_path / "rebuilt"
    replayed = dedup("replay", str(tmp_path / "out1" / "links.jsonl"), "--state", str(rebuilt), env=probing)
    assert replayed.returncode == 0, replayed.stderr
    day2 = dedup(
        "run", str(tmp_path / "day2.jsonl"), "--state", str(rebuilt), "--out", str(tmp_path / "out2"),
        "--stages", EXACT_AND_NEAR, env=probing,
    )  # fmt: skip
    assert day2.returncode == 0, day2.stderr
    (link,) = map(orjson.loads, (tmp_path / "out2" / "links.jsonl").read_bytes().splitlines())
    assert (link["doc_id"], link["verdict"], link["canonical_id"], link["stage"]) == (
        "edited",
        "duplicate",
        "original",
        "simhash",
    )


def test_the_workers_in_8x32_give_the_verdicts_of_dedup_run_in_it(
    make_stack: Callable[[str], Stack], ntrex: list[NtrexDocument], redis_url: str, tmp_path: Path
) -> None:
    """Every NTREX article and its US edit through a worker (originals and edits in the same batches, so
    the probes also reach canonicals the batch itself made), against `dedup run` in the same layout."""
    lines = []
    for i, document in enumerate(ntrex):
        for kind, text in (("original", document.english), ("us", document.english_us)):
            record = {"id": f"{kind}-{i}", "url": f"https://{kind}.example/{i}", "title": text[0]}
            lines.append(orjson.dumps({**record, "body": " ".join(text[1:]), "language": "en"}))
    (tmp_path / "in.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    paths = RunPaths(out=tmp_path / "out", state=tmp_path / "state")
    run(
        Settings(stages=[Stage.URL, Stage.CONTENT, Stage.SIMHASH], simhash={"bands": "8x32+p1"}),
        [str(tmp_path / "in.jsonl")],
        paths,
    )
    embedded = {link["doc_id"]: link for link in map(orjson.loads, paths.links.read_bytes().splitlines())}
    assert embedded["us-43"]["canonical_id"] == "original-43"  # the pair 4x16 cannot find

    stack = make_stack(EXACT_AND_NEAR)
    stack.extra_env = {"DEDUP_SIMHASH__BANDS": "8x32+p1"}
    stack.create_topics()
    stack.start_worker()
    stack.produce(lines)
    streamed, _ = stack.final_links(set(embedded))
    verdicts = {doc_id: (link["verdict"], link["canonical_id"], link["stage"]) for doc_id, link in streamed.items()}
    assert verdicts == {d: (link["verdict"], link["canonical_id"], link["stage"]) for d, link in embedded.items()}
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    assert client.get(f"{stack.name}:layout").partition(" ")[0] == "4/16/8x32+p1"
    # dedup.links rebuilds the state in this layout, key for key (one worker, one partition: the same order)
    stats = replay_links(stack.settings(), client, None, prefix=f"{stack.name}-copy:")
    assert stats.restored == len(lines) and not stats.bad
    ignore = ("sweep", "oldest", "clock", "replay")
    live, replayed = keys(client, f"{stack.name}:", ignore), keys(client, f"{stack.name}-copy:", ignore)
    assert {name for name in live if name.startswith("b:")} and replayed == live
    client.close()

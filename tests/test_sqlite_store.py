from pathlib import Path

from streams.core.model import Link, Stage, Verdict
from streams.stores.sqlite import SqliteStateStore


def test_exact_claim_is_set_if_absent_and_replace_is_compare_and_set(tmp_path: Path) -> None:
    store = SqliteStateStore(tmp_path / "s.sqlite3")
    assert store.exact_lookup(["u:1"]) == {}
    assert store.exact_claim(["u:1"], "a") == {"u:1": "a"}
    assert store.exact_claim(["u:1", "c:1"], "b") == {"u:1": "a", "c:1": "b"}
    assert not store.exact_replace("u:1", "b", "c")
    assert store.exact_replace("u:1", "a", "c")
    assert store.exact_lookup(["u:1", "c:1", "u:2"]) == {"u:1": "c", "c:1": "b"}


def test_band_lookup_finds_canonicals_sharing_any_band_in_the_same_language(tmp_path: Path) -> None:
    store = SqliteStateStore(tmp_path / "s.sqlite3")
    high = 2**64 - 1  # unsigned values above 2**63 survive SQLite's signed integers
    store.add_canonical("a", high, "en", (1, 2, 3, 4))
    store.add_canonical("b", 5, "en", (9, 9, 9, 4))
    store.add_canonical("c", 6, "bn", (1, 2, 3, 4))
    for _ in range(2):  # before and after the buffered writes reach the file
        found = store.band_candidates("en", (0, 0, 3, 0))
        assert [(c.doc_id, c.simhash) for c in found] == [("a", high)]
        both = {c.doc_id: c.seq for c in store.band_candidates("en", (0, 0, 0, 4))}
        assert both.keys() == {"a", "b"} and both["a"] < both["b"]
        assert store.band_candidates("en", (7, 7, 7, 7)) == []
        store.commit()
    first_seq = both["a"]
    store.add_canonical("a", high, "en", (1, 2, 3, 4))  # registering again changes nothing
    store.commit()
    assert [c.seq for c in store.band_candidates("en", (1, 0, 0, 0))] == [first_seq]


def test_state_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = SqliteStateStore(path)
    store.exact_claim(["c:x"], "a")
    store.add_canonical("a", 42, "en", (42, 0, 0, 0))
    store.record_verdict(Link("b", Verdict.DUPLICATE, "a", Stage.SIMHASH, 2))
    assert store.grow_group("a") == 2
    store.close()  # commits
    again = SqliteStateStore(path)
    assert again.exact_lookup(["c:x"]) == {"c:x": "a"}
    assert again.band_candidates("en", (42, 1, 1, 1))[0].doc_id == "a"
    assert again.verdict_of("b") == Link("b", Verdict.DUPLICATE, "a", Stage.SIMHASH, 2)
    assert again.group_size("a") == 2
    assert again.group_size("unknown") == 1


def test_uncommitted_work_is_not_durable(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = SqliteStateStore(path)
    store.exact_claim(["u:kept"], "a")
    store.commit()
    store.exact_claim(["u:lost"], "b")
    assert store.exact_lookup(["u:kept", "u:lost"]) == {"u:kept": "a", "u:lost": "b"}  # the writer sees both
    reader = SqliteStateStore(path)
    assert reader.exact_lookup(["u:kept", "u:lost"]) == {"u:kept": "a"}

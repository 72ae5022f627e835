"""Bucket count of the Redis store (`redis_bucket_bits`): keys land in the configured buckets, the count is
part of the layout marker, and a state written with other buckets is refused in one line."""

from __future__ import annotations

import ast
import hashlib
import uuid
from collections.abc import Iterator

import pytest
import redis
import yaml

from streams.config import RetentionSettings, Settings
from streams.core.model import Link
from streams.evaluation.services import REDIS_TUNING
from streams.stores.redis_store import LAYOUT, LayoutMismatch, RedisStateStore, connect
from tests.conftest import COMPOSE_FILE

BENCHMARK = COMPOSE_FILE.parent / "benchmarks" / "redis_memory.py"


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    client = connect(redis_url)
    yield client
    client.close()


def _prefix() -> str:
    return f"t{uuid.uuid4().hex}:"


def _buckets(client: redis.Redis, prefix: str, family: str) -> set[str]:
    """The bucket names of a family: the hash tag's 2 hex digits and the rest, without the braces."""
    return {
        key[len(prefix) + len(family) + 1 :].replace("{", "").replace("}", "")
        for key in client.scan_iter(match=f"{prefix}{family}:*", count=1_000)
    }


@pytest.mark.parametrize("bits", [8, 12, 16])
def test_keys_land_in_the_configured_buckets(client: redis.Redis, bits: int) -> None:
    prefix = _prefix()
    store = RedisStateStore(client, prefix, bucket_bits=bits)
    for i in range(40):
        store.exact_claim([f"u:{i}"], f"doc-{i}", published_at=1_793_512_800)
        store.record_verdict(Link.unique(f"doc-{i}"))
    for family in ("v", "x"):
        names = _buckets(client, prefix, family)
        assert names and all(len(name) == bits // 4 for name in names), (family, names)
        assert all(0 <= int(name, 16) < 2**bits for name in names)
    assert client.get(f"{prefix}layout").partition(" ")[0] == f"{LAYOUT}/{bits}"
    assert RedisStateStore(client, prefix, bucket_bits=bits).verdict_of("doc-7") is not None


def test_a_state_written_with_other_buckets_is_refused_in_one_line(client: redis.Redis) -> None:
    prefix = _prefix()
    RedisStateStore(client, prefix, bucket_bits=12).record_verdict(Link.unique("a"))
    with pytest.raises(LayoutMismatch, match=r"bucket_bits 12.*DEDUP_REDIS_BUCKET_BITS=12") as refused:
        RedisStateStore(client, prefix, bucket_bits=16).verdict_of("a")
    assert "\n" not in str(refused.value)
    assert RedisStateStore(client, prefix, bucket_bits=12).verdict_of("a") is not None


def test_a_layout_2_state_of_before_the_setting_reads_as_12_bits(client: redis.Redis) -> None:
    """A state marked `2` (no bucket count) was written with the only count there was: 4,096 buckets."""
    prefix = _prefix()
    RedisStateStore(client, prefix, bucket_bits=12).record_verdict(Link.unique("a"))
    client.set(f"{prefix}layout", "2")
    assert RedisStateStore(client, prefix, bucket_bits=12).verdict_of("a") is not None
    with pytest.raises(LayoutMismatch, match=r"bucket_bits 12"):
        RedisStateStore(client, prefix, bucket_bits=16).verdict_of("a")


def test_the_default_bucket_count_is_the_settings(client: redis.Redis) -> None:
    prefix = _prefix()
    RedisStateStore(client, prefix).record_verdict(Link.unique("a"))
    assert client.get(f"{prefix}layout").partition(" ")[0] == f"{LAYOUT}/{Settings().redis_bucket_bits}"


def test_bucket_bits_must_be_whole_hex_digits() -> None:
    with pytest.raises(ValueError, match="multiple of 4"):
        RedisStateStore(redis.Redis(), _prefix(), bucket_bits=14)
    with pytest.raises(ValueError):
        Settings(redis_bucket_bits=14)


def test_the_memory_benchmark_measures_the_redis_compose_runs() -> None:
    """README "Memory": the compose file's Redis keeps long ids and model names in listpacks and never
    evicts; benchmarks/redis_memory.py measures with the same hash-max-listpack-value."""
    command = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))["services"]["redis"]["command"]
    options = dict(zip(command[1::2], command[2::2], strict=True))
    assert options["--maxmemory-policy"] == "noeviction"
    module = ast.parse(BENCHMARK.read_text(encoding="utf-8"))
    value = next(
        node.value.value
        for node in module.body
        if isinstance(node, ast.Assign)
        and getattr(node.targets[0], "id", None) == "LISTPACK_VALUE"
        and isinstance(node.value, ast.Constant)
    )
    assert options["--hash-max-listpack-value"] == str(value)
    tuning = dict(zip(REDIS_TUNING[::2], REDIS_TUNING[1::2], strict=True))
    assert tuning == {key: options[key] for key in tuning}  # the tests' Redis is configured as compose's


def test_an_exact_key_is_an_integer_field_of_its_bucket(client: redis.Redis) -> None:
    """Layouts 3 and 4: 64 bits of the key's hash as a signed decimal, which a listpack keeps as a 9-byte integer
    where layout 2's 20 hex digits took 22 bytes (27 bytes a canonical, its two keys, at 10M)."""
    prefix = _prefix()
    store = RedisStateStore(client, prefix)
    assert store.exact_claim(["u:1", "c:1"], "a", published_at=1_793_512_800) == {"u:1": "a", "c:1": "a"}
    assert client.get(f"{prefix}layout").partition(" ")[0] == "4/16"
    fields = [field for key in client.scan_iter(match=f"{prefix}x:*") for field in client.hkeys(key)]
    assert len(fields) == 2 and all(str(int(field)) == field and -(2**63) <= int(field) < 2**63 for field in fields)
    assert all(client.object("encoding", key) == "listpack" for key in client.scan_iter(match=f"{prefix}x:*"))


def test_a_layout_2_state_keeps_its_hex_exact_keys(client: redis.Redis) -> None:
    """A state written before layout 3 is read and written as it was (its exact keys' fields 20 hex digits);
    `dedup replay --fresh` rebuilds it in layout 3."""
    prefix = _prefix()
    digest = hashlib.blake2b(b"u:old", digest_size=16).hexdigest()
    client.hset(f"{prefix}x:{{{digest[:2]}}}{digest[2:4]}", digest[4:24], "4e80old")  # day 0x4e80: 2025
    store = RedisStateStore(client, prefix)
    store.record_verdict(Link.unique("old"))  # marks the state: as layout 3, unless it says otherwise
    client.set(f"{prefix}layout", "2/16")
    older = RedisStateStore(client, prefix, retention=RetentionSettings(exact_days=0))
    assert older.exact_lookup(["u:old"]) == {"u:old": "old"}
    assert older.exact_claim(["u:new"], "new", published_at=1_793_512_800) == {"u:new": "new"}
    new = hashlib.blake2b(b"u:new", digest_size=16).hexdigest()
    assert client.hget(f"{prefix}x:{{{new[:2]}}}{new[2:4]}", new[4:24]) is not None
    assert RedisStateStore(client, prefix).exact_lookup(["u:new"]) == {"u:new": "new"}

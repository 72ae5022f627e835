"""`DirectPacker` (`streams.stores.packing`) sends what redis-py's hiredis packer sends, byte for byte, for every
kind of command and argument; and the store's client talks to a real server through it."""

from __future__ import annotations

from typing import Any

import pytest
from redis.connection import HiredisRespSerializer
from redis.exceptions import DataError

from streams.stores.packing import DirectPacker
from streams.stores.redis_store import connect

COMMANDS: list[tuple[Any, ...]] = [
    ("EVALSHA", "a" * 40, 3, "dedup:x:{ab}cd", "dedup:x:{ab}ce", "dedup:x:{ab}cf", *map(str, range(300))),
    ("HSET", "k", "f", "ünïcode ও বাংলা", "g", b"\x00\xff raw bytes", "h", 7, "i", -12, "j", 2.5),
    ("SCRIPT LOAD", "return 1"),  # a command name of two words: sent as two
    (b"CLIENT SETNAME", b"worker"),
    ("SET", "k", bytearray(b"buffer")),  # redis-py turns these into bytes
    ("SET", "k", memoryview(b"view")),
    ("GET", ""),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: str(command[0]))
def test_a_command_is_packed_as_redis_py_packs_it(command: tuple[Any, ...]) -> None:
    assert b"".join(DirectPacker().pack(*command)) == b"".join(HiredisRespSerializer().pack(*command))


def test_an_argument_redis_cannot_take_is_refused_as_redis_py_refuses_it() -> None:
    for packer in (DirectPacker(), HiredisRespSerializer()):
        with pytest.raises(DataError):
            packer.pack("SET", "k", object())


def test_the_stores_client_packs_its_commands_directly(redis_url: str) -> None:
    client = connect(redis_url)
    try:
        key = "packing-test:hash"
        client.hset(key, mapping={"ü": "বাংলা", "n": 3})
        with client.pipeline(transaction=False) as pipe:
            pipe.hget(key, "ü").hget(key, "n").delete(key)
            assert pipe.execute() == ["বাংলা", "3", 1]
        connection = client.connection_pool.get_connection()
        try:
            assert isinstance(connection._command_packer, DirectPacker)
        finally:
            client.connection_pool.release(connection)
    finally:
        client.close()

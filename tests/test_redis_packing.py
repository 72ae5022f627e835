"""`DirectPacker` (`streams.stores.packing`) sends what redis-py's hiredis packer sends, byte for byte, for every
kind of command and argument; and the store's client talks to a real server through it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
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


CTRL_C_WHILE_PACKING = """
import sys
from streams.stores.packing import DirectPacker

command = ("EVALSHA", "a" * 40, 1, "key", *range(1, 200_001), 2.5)
packer = DirectPacker()
print("packing", flush=True)
try:
    while True:
        packer.pack(*command)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


def test_ctrl_c_while_a_command_with_numbers_is_packed_is_a_keyboardinterrupt_not_a_crash() -> None:
    """Python checks for signals while it writes an int in decimal. hiredis-py's `pack_command` writes each int
    argument with `PyObject_Repr` and uses the result unchecked (src/pack.c), so a Ctrl-C during it was a
    segfault: `dedup replay` died of SIGSEGV in 2 of 150 runs of `benchmarks/stop_at_random.py`. The packer hands
    hiredis text only: Ctrl-C is then a KeyboardInterrupt, raised in Python, which the commands turn into their
    line."""
    for attempt in range(3):
        child = subprocess.Popen(
            [sys.executable, "-c", CTRL_C_WHILE_PACKING], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        assert child.stdout.readline() == "packing\n"
        time.sleep(0.3 + 0.1 * attempt)  # nearly all of it inside pack_command
        child.send_signal(signal.SIGINT)
        out, errors = child.communicate(timeout=30)
        assert (child.returncode, out) == (130, "interrupted\n"), (child.returncode, errors[-2000:])

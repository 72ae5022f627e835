"""Commands packed for Redis by hiredis alone.

redis-py's hiredis serializer walks every argument of a command in Python before handing them to
`hiredis.pack_command` (to turn a bytearray or memoryview into bytes, which this project never
sends): about 0.12 of its 0.19 us an argument. The store's script calls carry hundreds of arguments
(77 a document in a worker's batch), so the walk was a tenth of a batch's client time. This packer
gives hiredis the arguments as they come, and leaves to redis-py every command it would treat
otherwise (a command name of several words, an argument hiredis does not take). A Redis Cluster
client takes no packer for its nodes' connections (redis-py's `RedisCluster` passes on only the
settings it knows): it keeps redis-py's.

Numbers are written as text here, in Python, before hiredis sees them: hiredis-py's `pack_command` writes
an int or float argument with `PyObject_Repr` and uses the result unchecked (its src/pack.c), and Python
checks for signals while it writes an int in decimal. A Ctrl-C that landed there was a segfault (`dedup
replay` died of SIGSEGV in 2 of 150 runs of `benchmarks/stop_at_random.py`); here it is a KeyboardInterrupt.
It costs about 3 us of a worker's 223 a document (`benchmarks/redis_packing.py`).
"""

from __future__ import annotations

from typing import Any

import hiredis
from redis.connection import HiredisRespSerializer

_NUMBERS = frozenset((int, float))
"""What hiredis would write with an unchecked `repr` (a bool is refused by hiredis: redis-py's error)."""


class DirectPacker(HiredisRespSerializer):
    def pack(self, *args: Any) -> list[bytes]:
        name = args[0]
        if (" " if isinstance(name, str) else b" ") in name:  # "SCRIPT LOAD": redis-py splits the name
            return super().pack(*args)
        try:
            return [hiredis.pack_command(tuple([str(arg) if arg.__class__ in _NUMBERS else arg for arg in args]))]
        except TypeError:  # a bytearray, a memoryview: redis-py's conversion, and its error
            return super().pack(*args)

"""What packing a script call for Redis costs: the store's `DirectPacker` beside hiredis alone and redis-py's packer.

Run:  .venv/bin/python benchmarks/redis_packing.py [--args 255] [--ints 76] [--number 20000] [--documents 2000]

One EVALSHA of `--args` arguments, `--ints` of them ints besides its key count (a worker's batch sends
about 75 arguments a document, 17 of them numbers: `--documents`), packed `--number` times by each packer; the best of 5
repeats, in microseconds a call:

- `hiredis alone`: `hiredis.pack_command` on the arguments as they come (what `DirectPacker` did before it
  wrote numbers as text: a Ctrl-C while hiredis wrote an int was a segfault, see streams/stores/packing.py);
- `DirectPacker`: the store's packer;
- `redis-py`: redis-py's hiredis packer with its encoder, as a client built without a packer uses.

Then, with `--documents N` (0: skip), what a worker's documents send: N synthetic articles through
`benchmarks/bench_streaming.py`'s `agents_only` (stages 1 to 3 as one hop, batches of 256, on a redis-server
of its own), every command counted as `DirectPacker` packs it: arguments and numbers a document, and the
agents' documents a second.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import timeit
from pathlib import Path
from typing import Any

import hiredis
import orjson
from redis.connection import Encoder, HiredisRespSerializer

from streams.stores.packing import DirectPacker


def command(size: int, ints: int, seed: int = 1) -> tuple[Any, ...]:
    rng = random.Random(seed)
    rest: list[Any] = [rng.randrange(1, 2**40) for _ in range(ints)]
    rest += [f"dedup:{{{rng.randrange(65_536):04x}}}:key:{rng.randrange(10**9)}" for _ in range(size - 3 - ints)]
    rng.shuffle(rest)
    return ("EVALSHA", "a" * 40, 12, *rest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--args", type=int, default=255, help="arguments of the call, its name included")
    parser.add_argument("--ints", type=int, default=76, help="how many of them are ints")
    parser.add_argument("--number", type=int, default=20_000, help="calls packed per repeat")
    parser.add_argument("--documents", type=int, default=2_000, help="articles through the agents (0: skip)")
    options = parser.parse_args()
    args = command(options.args, options.ints)
    direct, redis_py = DirectPacker(), HiredisRespSerializer(encode=Encoder("utf-8", "strict", False).encode)
    packers = {
        "hiredis alone": lambda: hiredis.pack_command(args),
        "DirectPacker": lambda: direct.pack(*args),
        "redis-py": lambda: redis_py.pack(*args),
    }
    print(f"one EVALSHA of {len(args)} arguments, {sum(type(a) is int for a in args)} ints")
    for name, pack in packers.items():
        seconds = min(timeit.repeat(pack, number=options.number, repeat=5)) / options.number
        print(f"{name:>14}: {seconds * 1e6:7.2f} us a call, {seconds * 1e9 / len(args):6.1f} ns an argument")
    if options.documents:
        sent(options.documents)


def sent(documents: int) -> None:
    """What `documents` synthetic articles send through the agents, counted at the packer."""
    from benchmarks.bench_streaming import agents_only
    from streams.evaluation.corpus import synthetic_articles
    from streams.evaluation.services import LocalRedis

    counted = {"arguments": 0, "numbers": 0}
    pack = DirectPacker.pack

    def counting(self: DirectPacker, *args: Any) -> list[bytes]:
        counted["arguments"] += len(args)
        counted["numbers"] += sum(arg.__class__ in (int, float) for arg in args)
        return pack(self, *args)

    lines = [orjson.dumps(article) for article in synthetic_articles(documents)]
    with tempfile.TemporaryDirectory(prefix="redis-packing-") as folder:
        server = LocalRedis(Path(folder))
        server.start()
        DirectPacker.pack = counting  # type: ignore[method-assign]
        try:
            rate, _ = agents_only(server, lines)
        finally:
            DirectPacker.pack = pack  # type: ignore[method-assign]
            server.stop()
    print(
        f"{documents} documents through the agents: {counted['arguments'] / documents:.1f} arguments and"
        f" {counted['numbers'] / documents:.1f} numbers a document, {rate:,.0f} documents a second"
    )


if __name__ == "__main__":
    main()

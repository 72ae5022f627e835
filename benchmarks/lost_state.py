"""`dedup run` on synthetic articles, then the same command after its state folder is deleted: the second run takes
in the whole of links.jsonl before it reads the input again (every document then a repeat).

Run:  .venv/bin/python benchmarks/lost_state.py [--count 20000] [--rounds 3]

Stages 1 to 3, each round in a fresh temporary folder; wall and CPU seconds of both runs.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import orjson

from streams.config import Settings
from streams.evaluation.corpus import synthetic_articles
from streams.runner.embedded import RunPaths, run
from streams.runner.summary import RunStats


def _timed(settings: Settings, source: Path, paths: RunPaths) -> tuple[tuple[float, float], RunStats]:
    """Wall and CPU seconds of `dedup run` of `source`, and its statistics."""
    wall, cpu = time.perf_counter(), time.process_time()
    stats = run(settings, [str(source)], paths)
    return (time.perf_counter() - wall, time.process_time() - cpu), stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    source = tmp / "in.jsonl"
    source.write_bytes(b"".join(orjson.dumps(a) + b"\n" for a in synthetic_articles(args.count, seed=1)))
    settings = Settings(stages=["url", "content", "simhash"])  # type: ignore[arg-type]
    for round_ in range(args.rounds):
        paths = RunPaths(tmp / f"out{round_}", tmp / f"out{round_}" / "state")
        first, _ = _timed(settings, source, paths)
        shutil.rmtree(paths.state)
        again, stats = _timed(settings, source, paths)
        print(
            f"round {round_}: decided in {first[0]:.2f} s wall ({first[1]:.2f} CPU); state lost, taken in and"
            f" read again in {again[0]:.2f} s wall ({again[1]:.2f} CPU); {stats.notes[-1][:40]}"
        )
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()

"""Stop `dedup` commands at random points with a signal and count how they ended.

Run:  .venv/bin/python benchmarks/stop_at_random.py [--command replay|run|publish] [--signal SIGINT|SIGTERM]
          [--runs 150] [--from 0.2] [--to 0] [--seed 1]

Starts what the command needs on free ports (noida-db for `replay` and `publish`, redis-server for
`replay`), prepares its input once (`replay`: 3,000 link records from benchmarks/replay_speed.py on a
links topic; `run` and `publish`: synthetic articles in a JSONL file), times one clean run, then starts the
command `--runs` times and sends the signal after a delay drawn between `--from` and `--to` seconds (0: the
clean run's time), each `replay` into a Redis prefix of its own. `PYTHONFAULTHANDLER=1` is set, so a crash
prints where it happened.

An outcome is good when the process ended by itself: exit 0 (it finished first), or 130 (SIGINT) or 143
(SIGTERM) with exactly one line on stderr, no traceback. Anything else is printed with the end of its
stderr: a segfault (-11), a death by the signal itself (-2, -15: caught after Python restored the default
handler, as it exits), a traceback. `run` is also run again after each stop and must then complete with
the verdicts of the clean run.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import orjson

from benchmarks.replay_speed import link_records, produce
from streams.evaluation.corpus import synthetic_articles
from streams.evaluation.services import local_kafka, local_redis
from streams.evaluation.stack import Stack

DEDUP = [sys.executable, "-m", "streams"]


@contextmanager
def prepared(command: str, folder: Path) -> Iterator[tuple[list[str], dict[str, str], Stack | None]]:
    """The command line, its environment, and the stack it talks to (None for `run`)."""
    env = {**os.environ, "COLUMNS": "200", "PYTHONFAULTHANDLER": "1"}
    articles = folder / "articles.jsonl"
    if command in ("run", "publish"):
        count = 6_000 if command == "run" else 30_000
        articles.write_bytes(b"".join(orjson.dumps(a) + b"\n" for a in synthetic_articles(count, seed=3)))
    if command == "run":
        yield [*DEDUP, "run", str(articles), "--stages", "url,content,simhash", "-q", "--out"], env, None
        return
    with ExitStack() as held:
        for name in ("kafka", "redis", "stack"):
            (folder / name).mkdir()
        bootstrap = held.enter_context(local_kafka(folder / "kafka"))
        redis_url = (
            held.enter_context(local_redis(folder / "redis")) if command == "replay" else "redis://127.0.0.1:1/0"
        )
        stack = Stack(bootstrap, redis_url, folder / "stack", stages="url,content,simhash", partitions=2)
        stack.create_topics()
        env.update(stack.env())
        if command == "replay":
            produce(stack.bootstrap, stack.settings().topics.links, link_records(3_000, seed=12))
            yield [*DEDUP, "replay", "--batch", "20"], env, stack
        else:
            yield [*DEDUP, "publish", "-q", str(articles)], env, stack


def verdicts(out: Path) -> list[tuple[str, ...]]:
    lines = (out / "links.jsonl").read_bytes().splitlines()
    return sorted((r["doc_id"], r["verdict"], r["canonical_id"], str(r["stage"])) for r in map(orjson.loads, lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--command", choices=["replay", "run", "publish"], default="replay")
    parser.add_argument("--signal", choices=["SIGINT", "SIGTERM"], default="SIGINT")
    parser.add_argument("--runs", type=int, default=150)
    parser.add_argument("--from", dest="earliest", type=float, default=0.2, help="shortest delay, seconds")
    parser.add_argument("--to", dest="latest", type=float, default=0.0, help="longest delay (0: a clean run's time)")
    parser.add_argument("--seed", type=int, default=1)
    options = parser.parse_args()
    stop = signal.Signals[options.signal]
    folder = Path(tempfile.mkdtemp(prefix="stop-at-random-"))
    try:
        with prepared(options.command, folder) as (command, env, stack):
            target = (
                (lambda i: [*command, str(folder / f"out-{i}")]) if options.command == "run" else (lambda i: command)
            )
            if stack is not None and options.command == "replay":
                env["DEDUP_REDIS_PREFIX"] = f"{stack.name}-clean:"
            started = time.monotonic()
            subprocess.run(target("clean"), env=env, check=True, capture_output=True)
            took = time.monotonic() - started
            clean = verdicts(folder / "out-clean") if options.command == "run" else None
            print(f"{options.command}: a clean run takes {took:.2f} s; {options.runs} runs, {stop.name} after"
                  f" {options.earliest:.2f} to {options.latest or took:.2f} s", flush=True)  # fmt: skip
            rng = random.Random(options.seed)
            outcomes: Counter[str] = Counter()
            for i in range(options.runs):
                if stack is not None and options.command == "replay":
                    env["DEDUP_REDIS_PREFIX"] = f"{stack.name}-{i}:"
                process = subprocess.Popen(target(i), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                delay = rng.uniform(options.earliest, options.latest or took)
                time.sleep(delay)
                process.send_signal(stop)
                _, errors = process.communicate(timeout=120)
                stderr = errors.decode(errors="replace")
                code = process.returncode
                good = code == 0 or (
                    code == 128 + stop and stderr.count("\n") == 1 and "Traceback" not in stderr
                )  # fmt: skip
                outcome = f"exit {code}" + ("" if good else ", bad")
                if options.command == "run":
                    again = subprocess.run(target(i), env=env, capture_output=True)
                    if again.returncode != 0 or verdicts(folder / f"out-{i}") != clean:
                        outcome += ", resumed to other verdicts"
                        good = False
                    shutil.rmtree(folder / f"out-{i}", ignore_errors=True)
                outcomes[outcome] += 1
                if not good:
                    print(f"run {i}, {stop.name} after {delay:.3f} s: {outcome}\n{stderr[-2000:]}", flush=True)
            print(", ".join(f"{outcome}: {n}" for outcome, n in sorted(outcomes.items())), flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

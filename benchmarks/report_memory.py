"""Memory of `dedup report` reading the links topic: the peak Python allocation while the final verdicts are read.

Run:  .venv/bin/python benchmarks/report_memory.py [--links 5000] [--dim 1024]

Starts its own broker (noida-db), sends `--links` link records as `benchmarks/replay_speed.py` makes them (half
canonicals, which carry a vector of `--dim` numbers), and reads them back with
`streams.reporting.verdicts.read_topic`, the service's `dedup report`, under tracemalloc.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.replay_speed import link_records, produce
from streams.config import Settings
from streams.evaluation.services import LocalKafka
from streams.reporting.verdicts import read_topic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--links", type=int, default=5_000)
    parser.add_argument("--dim", type=int, default=1024, help="numbers in a canonical's vector (BGE-M3: 1024)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, LocalKafka(Path(tmp) / "kafka") as broker:
        settings = Settings(kafka_bootstrap=broker.bootstrap)
        topic = settings.topics.links
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
            future.result(30)
        produce(broker.bootstrap, topic, link_records(args.links, dim=args.dim))
        tracemalloc.start()
        started = time.perf_counter()
        final = read_topic(settings)
        seconds = time.perf_counter() - started
        kept, peak = tracemalloc.get_traced_memory()
    print(
        f"{args.links:,} links ({final.records:,} records, vectors of {args.dim}): {len(final.decisions):,} final"
        f" verdicts in {seconds:.1f} s; peak {peak / 2**20:,.1f} MiB, kept {kept / 2**20:,.1f} MiB"
    )


if __name__ == "__main__":
    main()

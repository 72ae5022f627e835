"""What stage 3's figure check holds back: real near-duplicates (its cost) and reports filled in again (its catch).

Run:  .venv/bin/python benchmarks/figure_check.py [--data ../shared/data] [--seed 0] [--json FILE]

The near-duplicates are those `benchmarks/thresholds.py` picks the SimHash thresholds on, with the same
fingerprints and seed: NTREX-128 English sources against their human GB, US and IN edits, Clough `cut` and
`light` answers against their source, and synthetic edits of NTREX documents in English and Bangla (an
appended sentence, another document's headline, a dropped sentence, Bangla nukta letters spelled the other
way). Only the pairs within the shipped thresholds count (the pairs stage 3 would link, were the band index
to find them): for each kind, how many of those the figure check holds back (`streams.features.figures`:
a kind of figure both texts state and share none of). Then the attack it is for: every NTREX text with
digits, in English and in Bangla, against itself with every digit moved by 3 in its own script (the same
words, other results): of those still within the threshold, how many it holds back.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import unicodedata
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.thresholds import DEFAULT_DATA, Doc, clough, edited, ntrex_docs, swap_nukta, table
from streams.config import Settings
from streams.features.figures import figures_conflict, text_figures
from streams.features.simhash import char_simhash, hamming, word_simhash
from streams.features.text import document_text


def _fingerprint(text: str, language: str) -> int:
    return word_simhash(text, 3) if language == "en" else char_simhash(text, 4)


def other_numbers(text: str) -> str:
    """Every digit (any script) moved by 3 in its own script: the same wording, other figures."""

    def bump(match: re.Match[str]) -> str:
        value = unicodedata.decimal(match.group(0))
        return chr(ord(match.group(0)) - value + (value + 3) % 10)

    return re.sub(r"\d", bump, text)


def other_numbers_but_the_first(text: str) -> str:
    """`other_numbers`, but the first figure of the text kept: a template's fixed figure (`in 24 hours`, `till
    8am`) that every day's report repeats beside the figures that change."""
    first = re.search(r"\d+", text)
    if first is None:
        return text
    return text[: first.end()] + other_numbers(text[first.end() :])


def near_duplicates(data: Path, seed: int) -> dict[str, list[tuple[str, str]]]:
    """(language, kind) -> (original, copy) texts, as thresholds.py builds them."""
    rng = random.Random(seed)
    english = ntrex_docs(data, "newstest2019-src.eng.txt")
    pairs: dict[str, list[tuple[str, str]]] = {}
    for variant in ("GB", "US", "IN"):
        edits = ntrex_docs(data, f"newstest2019-ref.eng-{variant}.txt")
        pairs[f"en NTREX {variant} edit"] = [(a.text(), b.text()) for a, b in zip(english, edits, strict=True)]
    sources, answers = clough(data)
    for category in ("cut", "light"):
        pairs[f"en Clough {category}"] = [
            (document_text(None, sources[task]), document_text(None, answer))
            for kind, task, answer in answers
            if kind == category
        ]
    for kind, made in edited(english, rng).items():
        pairs[f"en {kind}"] = [(a.text(), b.text()) for a, b in made]
    bangla = ntrex_docs(data, "newstest2019-ref.ben.txt")
    for kind, made in edited(bangla, rng).items():
        pairs[f"bn {kind}"] = [(a.text(), b.text()) for a, b in made]
    respelled = [Doc(swap_nukta(d.title), tuple(swap_nukta(line) for line in d.lines)) for d in bangla]
    pairs["bn nukta spelling"] = [(a.text(), b.text()) for a, b in zip(bangla, respelled, strict=True)]
    return pairs


def held_back(pairs: list[tuple[str, str]], language: str) -> tuple[int, int]:
    """Of the pairs within the language's threshold: how many, and how many the figure check holds back."""
    threshold = Settings().simhash.threshold(language)
    within = [(a, b) for a, b in pairs if hamming(_fingerprint(a, language), _fingerprint(b, language)) <= threshold]
    return len(within), sum(figures_conflict(text_figures(a), text_figures(b)) is not None for a, b in within)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--seed", type=int, default=0, help="thresholds.py's seed (the synthetic edits)")
    parser.add_argument("--json", type=Path, default=None, help="write the counts there too")
    args = parser.parse_args()
    rows, found = [], {}
    for kind, pairs in near_duplicates(args.data, args.seed).items():
        within, held = held_back(pairs, kind[:2])
        rows.append((kind, len(pairs), within, held))
        found[kind] = {"pairs": len(pairs), "within": within, "held_back": held}
    total = (sum(r[2] for r in rows), sum(r[3] for r in rows))
    rows.append(("all near-duplicates", sum(r[1] for r in rows), *total))
    table(["near-duplicates", "pairs", "within the threshold", "held back (cost)"], rows)
    attacks = []
    for language, name in (("en", "newstest2019-src.eng.txt"), ("bn", "newstest2019-ref.ben.txt")):
        docs = [d.text() for d in ntrex_docs(args.data, name)]
        for kind, key, move in (
            ("every digit moved by 3", "every digit moved", other_numbers),
            ("every figure but the first moved", "all but the first moved", other_numbers_but_the_first),
        ):
            pairs = [(text, moved) for text in docs if (moved := move(text)) != text]
            within, held = held_back(pairs, language)
            attacks.append((f"{language} NTREX, {kind}", len(pairs), within, held))
            found[f"{language} {key}"] = {"pairs": len(pairs), "within": within, "held_back": held}
    table(["reports filled in again", "texts with digits", "within the threshold", "held back (catch)"], attacks)
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(found, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()

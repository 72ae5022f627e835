"""What differs between two texts, word by word, and which differences are numbers or names.

Two reports of two different matches can embed almost alike; what tells them apart is what they
state: the score, the date, the teams. So the labelling screen highlights the differing tokens in
three kinds:

- `number`: a token with a digit in any script. Digits are read with `unicodedata`, so Bangla
  `১২` and ASCII `12` are the same number (as are `১২টি` and `12`: the number, not its suffix),
  and grouping commas are dropped (`1,200` = `1200`).
- `name`: a capitalised word in Latin script (`Dhaka`, `NASA`, `Obama's`); at the start of a
  sentence only a word in capitals or one the text also capitalises inside a sentence (`The` and
  `Around` start sentences, they name nothing).
- `word`: any other word.

Numbers and names differ when the other text does not state them at all (their order does not
matter: a number present in both is a fact both give); names only when the other text has Latin
names too, since a Bangla text writes `Dhaka` as `ঢাকা`. Other words differ by a sequence diff
(difflib over word tokens, compared case-folded without surrounding punctuation); across two
languages a word diff says nothing, so `diff_texts(..., words=False)` leaves words unmarked.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Kind = Literal["number", "name", "word"]
KINDS: tuple[Kind, ...] = ("number", "name", "word")

_WHITESPACE_RUN = re.compile(r"\S+")
_NUMBER = re.compile(r"\d+(?:[.,:/-]\d+)*")
_GROUPING_COMMA = re.compile(r"(?<=\d),(?=\d{2,3}\b)")
_POSSESSIVE = re.compile(r"['\u2019]s$", re.IGNORECASE)
_SENTENCE_END = (".", "!", "?", "।", "॥", ":", '."', ".”", "…")


@dataclass(frozen=True)
class Token:
    """A word of a text: where it is (`start`, `end` in the text), what it compares as (`key`), its kind."""

    text: str
    start: int
    end: int
    key: str
    kind: Kind


@dataclass(frozen=True)
class Side:
    """One text of a diff: its tokens and the indices of those that differ from the other text."""

    text: str
    tokens: tuple[Token, ...]
    changed: frozenset[int]

    def differing(self, kind: Kind | None = None) -> list[Token]:
        """The differing tokens, in text order, of one kind or of all."""
        return [t for i, t in enumerate(self.tokens) if i in self.changed and (kind is None or t.kind == kind)]

    def spans(self) -> list[tuple[int, int, Kind]]:
        """(start, end, kind) of each differing token: what a screen highlights."""
        return [(t.start, t.end, t.kind) for t in self.differing()]


@dataclass(frozen=True)
class TextDiff:
    """The two sides of a diff: `a` (the later document) and `b` (the canonical)."""

    a: Side
    b: Side


def ascii_digits(text: str) -> str:
    """Every decimal digit, of any script (Bangla digits, Devanagari, Arabic-Indic, ...), as ASCII."""
    return "".join(str(d) if (d := unicodedata.decimal(ch, None)) is not None else ch for ch in text)


def _strip_punctuation(word: str) -> str:
    """The word without leading and trailing punctuation and symbols (quotes, commas, the danda)."""
    start, end = 0, len(word)
    while start < end and unicodedata.category(word[start])[0] in "PS":
        start += 1
    while end > start and unicodedata.category(word[end - 1])[0] in "PS":
        end -= 1
    return word[start:end]


def number_key(word: str) -> str | None:
    """The number a token states, in ASCII digits (`১২টি` -> `12`, `1,200` -> `1200`); None without digits."""
    groups = _NUMBER.findall(ascii_digits(word))
    if not groups:
        return None
    return "/".join(_GROUPING_COMMA.sub("", g).rstrip(".,:/-") for g in groups)


def _is_latin_capital(word: str) -> bool:
    first = word[0]
    return first.isupper() and unicodedata.name(first, "").startswith("LATIN")


def tokenize(text: str) -> tuple[Token, ...]:
    """The words of a text (whitespace-separated, punctuation around them ignored), each with its kind.

    A capitalised word that starts a sentence may be any word (`Around`, `The`): it is a name only
    when it is in capitals (`NASA`) or the text also capitalises it inside a sentence."""
    words: list[tuple[str, int, bool]] = []
    sentence_start = True
    for match in _WHITESPACE_RUN.finditer(text):
        raw = match.group()
        word = _strip_punctuation(raw)
        starts_sentence, sentence_start = sentence_start, raw.endswith(_SENTENCE_END)
        if word:
            words.append((word, match.start() + raw.index(word), starts_sentence))
    keys = [_POSSESSIVE.sub("", word).casefold() for word, _, _ in words]
    inside = {
        key for key, (word, _, initial) in zip(keys, words, strict=True) if not initial and _is_latin_capital(word)
    }
    tokens: list[Token] = []
    for key, (word, offset, initial) in zip(keys, words, strict=True):
        kind: Kind
        if (number := number_key(word)) is not None:
            kind, key = "number", number
        elif len(word) > 1 and _is_latin_capital(word) and (not initial or key in inside or word.isupper()):
            kind = "name"
        else:
            kind = "word"
        tokens.append(Token(text=word, start=offset, end=offset + len(word), key=key, kind=kind))
    return tuple(tokens)


def _stated(tokens: Iterable[Token], other: Iterable[Token]) -> set[int]:
    """Indices of the numbers and names in `tokens` that no token of `other` states.

    Names are compared only when `other` has names too: a Bangla text writes `Dhaka` as `ঢাকা`."""
    other = tuple(other)
    keys = {t.key for t in other}
    kinds = {"number", "name"} if any(t.kind == "name" for t in other) else {"number"}
    return {i for i, t in enumerate(tokens) if t.kind in kinds and t.key not in keys}


def diff_texts(a: str | None, b: str | None, *, words: bool = True) -> TextDiff:
    """What differs between two texts: numbers and names one states and the other does not, and
    (with `words`, for two texts in one language) the other words a sequence diff finds changed."""
    tokens_a, tokens_b = tokenize(a or ""), tokenize(b or "")
    changed_a, changed_b = _stated(tokens_a, tokens_b), _stated(tokens_b, tokens_a)
    if words:
        matcher = difflib.SequenceMatcher(None, [t.key for t in tokens_a], [t.key for t in tokens_b], autojunk=False)
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            if op == "equal":
                continue
            changed_a.update(i for i in range(i1, i2) if tokens_a[i].kind == "word")
            changed_b.update(j for j in range(j1, j2) if tokens_b[j].kind == "word")
    return TextDiff(
        a=Side(text=a or "", tokens=tokens_a, changed=frozenset(changed_a)),
        b=Side(text=b or "", tokens=tokens_b, changed=frozenset(changed_b)),
    )

"""Band layouts: how a 64-bit SimHash is cut into table keys, and which keys a lookup reads.

A canonical is stored under one key per table; a lookup reads, in every table, the
query's own key and, with a probe radius of 1, each key one bit away from it
(multi-probe). Two fingerprints are candidates when, in some table, their keys are
within the probe radius. Every table's key is made of whole bytes of the fingerprint.

- `4x16` (the default): four 16-bit bands, no probes. Two fingerprints within 3 bits
  agree exactly on one band (pigeonhole). Candidates grow as N/14,000 on news
  fingerprints: 72 a query at 1M canonicals, 718 at 10M (docs/benchmarks.md, "Scale").
- `8x32+p1`: eight tables of 32-bit keys, each made of four of the eight bytes (the byte
  indexes are the points of the affine space AG(3,2), each table one of its planes: both
  parallel planes of four directions, so every byte is in four tables), each key looked up
  with its 32 neighbours one bit away: 264 lookups a query. Within 3 bits is still
  guaranteed: for any direction, the 3 differing bits leave one of its two parallel planes
  with at most one of them. Past 3 bits it misses less than `4x16` (4.1% of random pairs 4
  bits apart against 10.3%) and finds more of the near-duplicates within the thresholds
  (benchmarks/scale.py); candidates stay near 6 a query at 10M canonicals. It costs more
  lookups and more band entries a canonical: a layout for large states (README, "Bands").
  Of the two kinds of four directions (with three on a line, or none), measured on the
  10M fingerprints of benchmarks/scale.py and its near-duplicate pairs: 5.8 candidates a
  query against 6.5, recall within threshold 73.4% en and 85.5% bn against 73.9% and 84.7%.

A state is written in one layout, recorded with it (a state store refuses another): the
layout changes which canonicals are found, so the embedded store and Redis give the same
verdicts only in the same layout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class BandLayout:
    """Tables of whole fingerprint bytes, and the Hamming radius each table key is looked up within."""

    name: str
    tables: tuple[tuple[int, ...], ...]
    """Per table, the fingerprint's byte indexes (0 the lowest) that make its key, lowest key byte first."""
    probe: int
    """0: a lookup reads the query's own key in each table; 1: also every key one bit away."""
    guaranteed: int
    """Fingerprints at most this many bits apart are always candidates (tests/test_bands.py proves it)."""
    keys: Callable[[int], tuple[int, ...]] = field(init=False, repr=False, compare=False)
    """The fingerprint's key in each table."""
    _flips: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        widths = {len(table) for table in self.tables}
        if len(widths) != 1 or not all(0 <= b < 8 for table in self.tables for b in table):
            raise ValueError(f"band layout {self.name}: every table takes the same number of bytes, of 0 to 7")
        if self.probe not in (0, 1):
            raise ValueError(f"band layout {self.name}: the probe radius is 0 or 1")
        object.__setattr__(self, "keys", _compiled(self.tables))
        object.__setattr__(self, "_flips", tuple(1 << bit for bit in range(self.key_bits)) if self.probe else ())

    @property
    def key_bits(self) -> int:
        return 8 * len(self.tables[0])

    @property
    def lookups_per_query(self) -> int:
        return len(self.tables) * (1 + len(self._flips))

    def near(self, key: int) -> tuple[int, ...]:
        """The keys a lookup reads in a table for `key`: its own first, then those one bit away (with probes)."""
        return (key, *(key ^ flip for flip in self._flips))

    def lookups(self, keys: Sequence[int]) -> list[tuple[int, int]]:
        """(table, key) of every entry a lookup with the fingerprint's `keys` reads."""
        if not self._flips:
            return list(enumerate(keys))
        return [(table, value) for table, key in enumerate(keys) for value in self.near(key)]

    def shares(self, a: int, b: int) -> bool:
        """Whether a lookup of fingerprint `a` finds `b` (and `b` finds `a`: the relation is symmetric)."""
        return any((x ^ y).bit_count() <= self.probe for x, y in zip(self.keys(a), self.keys(b), strict=True))


def _compiled(tables: tuple[tuple[int, ...], ...]) -> Callable[[int], tuple[int, ...]]:
    """`keys` as one expression of shifts and masks, compiled once per layout (as `namedtuple` compiles its
    class): the cascade cuts every document's fingerprint up to three times, and a loop over the bytes
    (`int.to_bytes`, a picker, `int.from_bytes`) took four times as long as the four masks it was before."""
    parts = []
    for table in tables:
        terms, at = [], 0
        while at < len(table):  # a run of consecutive bytes moves as one mask
            run = 1
            while at + run < len(table) and table[at + run] == table[at] + run:
                run += 1
            shift, mask = 8 * (table[at] - at), ((1 << 8 * run) - 1) << 8 * at
            terms.append(f"((s >> {shift}) & {mask:#x})" if shift else f"(s & {mask:#x})")
            at += run
        parts.append(" | ".join(terms))
    return eval(f"lambda s: ({', '.join(parts)},)")  # built above from the layout's byte indexes


FOUR_BY_16 = BandLayout("4x16", ((0, 1), (2, 3), (4, 5), (6, 7)), probe=0, guaranteed=3)
EIGHT_BY_32 = BandLayout(
    "8x32+p1",
    # the planes of directions 1, 2, 3 and 4 of F2^3 (x . a = 0 and x . a = 1 for each a)
    ((0, 2, 4, 6), (1, 3, 5, 7), (0, 1, 4, 5), (2, 3, 6, 7), (0, 3, 4, 7), (1, 2, 5, 6), (0, 1, 2, 3), (4, 5, 6, 7)),
    probe=1,
    guaranteed=3,
)
LAYOUTS = {layout.name: layout for layout in (FOUR_BY_16, EIGHT_BY_32)}
DEFAULT = FOUR_BY_16


def layout(name: str) -> BandLayout:
    """The layout of that name, or a ValueError naming the ones there are."""
    try:
        return LAYOUTS[name]
    except KeyError:
        raise ValueError(f"no band layout {name!r}: choose one of {', '.join(LAYOUTS)}") from None

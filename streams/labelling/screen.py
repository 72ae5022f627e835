"""The labelling screen: a person decides, pair by pair, whether two documents are one story.

Layout, top to bottom:

- the pair line: its position, the score, the band, the model, same- or cross-language, and the
  label it already has (when going back);
- both documents side by side, `A` (the later document) left and `B` (the canonical it was
  compared to) right, each under its id, language and title; what differs between them is
  highlighted: numbers black on yellow, names black on cyan, other words red and underlined (words
  only for two texts in one language; see streams.labelling.diff). Up, down, page up and page
  down scroll the texts;
- the counts per band, always visible: for same- and cross-language pairs, labelled / total and
  the duplicates among the labelled;
- the keys.

Keys: `y` duplicate, `n` not a duplicate, `s` skip (nothing is recorded; the pair comes back next
time), `b` or backspace back to the previous pair (labelling it again replaces its label: the last
label wins), `q` quit. Every decision is handed to the decision callback before the screen moves
on, so a label is on disk (or a relink applied) once the next pair shows.

The screen knows nothing about files: it takes the pairs, the labels they already have (those
pairs are passed over on start, which makes a session resumable) and a callback. `dedup label`
appends each decision to labels.jsonl; `dedup review` shows review documents against their
suspected canonicals the same way and applies each decision as a relink.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Header, Static

from streams.labelling.diff import Kind, Side, diff_texts
from streams.labelling.pairs import BAND_LABELS, Pair, PairKey, band_counts
from streams.reporting.inert import inert

DecisionCallback = Callable[[Pair, bool], object]
"""Called with the pair and the decision (True: duplicate) before the screen moves on; if it
raises, the screen stays on the pair and shows the error."""

STYLES: dict[Kind, str] = {
    "number": "bold black on yellow",
    "name": "bold black on cyan",
    "word": "underline red",
}

KEYS_HELP = (
    "y duplicate · n not a duplicate · s skip · b/backspace back (relabel: the last label wins) · q quit"
    " · up/down/page up/page down scroll"
)


def highlighted(side: Side) -> Text:
    """The side's text with each differing token styled by its kind."""
    text = Text(inert(side.text))  # of the same length: the spans still fall on their tokens
    for start, end, kind in side.spans():
        text.stylize(STYLES[kind], start, end)
    return text


def legend() -> Text:
    return Text.assemble(
        "differs: ",
        ("12", STYLES["number"]),
        " number  ",
        ("Name", STYLES["name"]),
        " name  ",
        ("word", STYLES["word"]),
        " other word",
    )


class LabelApp(App[int]):
    """Shows `pairs` one at a time and hands each decision to `on_decision`; returns the count of decisions made."""

    CSS = """
    #pair { height: auto; padding: 0 1; background: $boost; }
    #documents { height: 1fr; }
    #sides { height: auto; }
    .side { width: 1fr; height: auto; padding: 0 1; }
    .side-head { height: auto; color: $text-muted; }
    .side-title { height: auto; text-style: bold; }
    .side-text { height: auto; margin-top: 1; }
    #legend { height: auto; padding: 0 1; }
    #counts { height: auto; padding: 0 1; }
    """

    BINDINGS = [  # noqa: RUF012  (Textual reads this class attribute)
        Binding("y", "decide(True)", "Duplicate"),
        Binding("n", "decide(False)", "Not a duplicate"),
        Binding("s", "skip", "Skip"),
        Binding("b,backspace", "back", "Back"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(
        self,
        pairs: Sequence[Pair],
        on_decision: DecisionCallback,
        labels: Mapping[PairKey, bool] | None = None,
        *,
        title: str = "dedup label",
        subtitle: str = "",
    ) -> None:
        super().__init__()
        unique: dict[PairKey, Pair] = {}
        for pair in pairs:
            unique.setdefault(pair.key, pair)
        self.pairs: list[Pair] = list(unique.values())
        self.labels: dict[PairKey, bool] = dict(labels or {})
        self.on_decision = on_decision
        self.decisions = 0
        self.skipped: set[PairKey] = set()
        self.history: list[int] = []
        self.cursor: int | None = self._next_open(-1)
        self.title = title
        self.sub_title = subtitle

    # What is shown

    @property
    def current(self) -> Pair | None:
        """The pair on screen, None when every pair is labelled or skipped."""
        return None if self.cursor is None else self.pairs[self.cursor]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="pair")
        with VerticalScroll(id="documents"), Horizontal(id="sides"):
            for side in ("a", "b"):
                with Vertical(classes="side"):
                    yield Static(id=f"{side}-head", classes="side-head")
                    yield Static(id=f"{side}-title", classes="side-title")
                    yield Static(id=f"{side}-text", classes="side-text")
        yield Static(legend(), id="legend")
        yield Static(id="counts")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#documents").focus()
        self.refresh_pair()

    def refresh_pair(self) -> None:
        """Show the current pair (or the end of the list) and the counts."""
        pair = self.current
        if pair is None:
            done = sum(1 for p in self.pairs if p.key in self.labels)
            message = f"Nothing left to label: {done} of {len(self.pairs)} pairs labelled"
            if self.skipped:
                message += f", {len(self.skipped)} skipped (shown again next time)"
            self.query_one("#pair", Static).update(Text(message + ". b: back, q: quit.", style="bold"))
            for side in ("a", "b"):
                for part in ("head", "title", "text"):
                    self.query_one(f"#{side}-{part}", Static).update("")
        else:
            self.query_one("#pair", Static).update(self._pair_line(pair))
            diff = diff_texts(pair.a_text, pair.b_text, words=pair.same_language)
            for side, doc_id, language, title, shown in (
                ("a", pair.a, pair.a_language, pair.a_title, diff.a),
                ("b", pair.b, pair.b_language, pair.b_title, diff.b),
            ):
                role = "A, later document" if side == "a" else "B, its canonical"
                head = Text.assemble((f"{role}: ", "bold"), inert(doc_id), f"  [{inert(language or '?')}]")
                self.query_one(f"#{side}-head", Static).update(head)
                self.query_one(f"#{side}-title", Static).update(Text(inert(title or "(no title)")))
                body = highlighted(shown) if shown.text else Text("(no text)", style="italic")
                self.query_one(f"#{side}-text", Static).update(body)
            self.query_one("#documents", VerticalScroll).scroll_home(animate=False)
        self.query_one("#counts", Static).update(self.counts_table())

    def _pair_line(self, pair: Pair) -> Text:
        assert self.cursor is not None
        line = Text.assemble(
            (f"pair {self.cursor + 1} of {len(self.pairs)}", "bold"),
            f"   score {pair.score:.4f}   band ",
            (pair.band, "bold"),
            f"   model {inert(pair.model)}   ",
            "same language" if pair.same_language else "cross-language",
        )
        if pair.key in self.labels:
            earlier = "duplicate" if self.labels[pair.key] else "not a duplicate"
            line.append(f"   labelled: {earlier} (a new key replaces it)", style="italic")
        return line

    def counts_table(self) -> Table:
        """Labelled / total and duplicates per band, for same- and cross-language pairs present."""
        counts = band_counts(self.pairs, self.labels)
        groups = [same for same in (True, False) if any(counts[(same, b)].total for b in BAND_LABELS)]
        table = Table(box=None, padding=(0, 2), show_edge=False, header_style="bold")
        table.add_column("band")
        for same in groups:
            name = "same language" if same else "cross-language"
            table.add_column(f"{name}: labelled/total", justify="right")
            table.add_column("duplicates", justify="right")
        for band in BAND_LABELS:
            row = [band]
            for same in groups:
                count = counts[(same, band)]
                row += [f"{count.labelled}/{count.total}", str(count.duplicates)]
            style = "bold" if self.current is not None and self.current.band == band else None
            table.add_row(*row, style=style)
        return table

    # Moving

    def _next_open(self, after: int) -> int | None:
        """The first pair after index `after` that has no label and was not skipped in this session."""
        for index in range(after + 1, len(self.pairs)):
            key = self.pairs[index].key
            if key not in self.labels and key not in self.skipped:
                return index
        return None

    def _advance(self) -> None:
        assert self.cursor is not None
        self.history.append(self.cursor)
        self.cursor = self._next_open(self.cursor)
        self.refresh_pair()

    def action_decide(self, duplicate: bool) -> None:
        pair = self.current
        if pair is None:
            return
        try:
            self.on_decision(pair, duplicate)
        except Exception as exc:  # the callback's failure is shown; the pair stays for another try
            self.notify(inert(f"not recorded: {exc}"), severity="error", timeout=10, markup=False)
            return
        self.labels[pair.key] = duplicate
        self.skipped.discard(pair.key)
        self.decisions += 1
        self._advance()

    def action_skip(self) -> None:
        pair = self.current
        if pair is None:
            return
        if pair.key not in self.labels:
            self.skipped.add(pair.key)
        self._advance()

    def action_back(self) -> None:
        """The pair shown before this one; before this session's first, the one before it in the file."""
        if self.history:
            self.cursor = self.history.pop()
        elif self.cursor is None and self.pairs:
            self.cursor = len(self.pairs) - 1
        elif self.cursor is not None and self.cursor > 0:
            self.cursor -= 1
        else:
            self.bell()
            return
        self.refresh_pair()

    async def action_quit(self) -> None:
        self.exit(self.decisions)

"""The thresholds file: a model's four semantic cut-offs as TOML, written by `dedup calibrate fit`.

It is a fragment of the configuration file (`[semantic.thresholds.<model name>]`), so it can be
pasted into one too; loaded on its own (`--thresholds FILE`, `semantic.thresholds_file`) its values
win over the configured ones for the model it names. Its comments say when, from how many labels
and at what precision it was fitted, since a cut-off means nothing without them.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

if TYPE_CHECKING:
    from streams.calibration.fit import Fit
    from streams.config import ModelThresholds

NOTHING = 1.0
"""The cut-off written when no band qualifies: the largest a cosine can be, so the stage links (or
sends to review) only pairs the model cannot tell apart at all, i.e. the same text up to
`semantic.max_chars`, which the exact and SimHash stages catch first. A cut-off above 1.0 would be
stricter still, but the configuration refuses it as no cosine."""

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_UNSAFE_IN_STRING = re.compile(r'["\\\x00-\x1f\x7f]')  # what a TOML basic string must escape
_ESCAPES = {'"': '\\"', "\\": "\\\\"}
_KEYS = ("link", "review", "cross_link", "cross_review")


def load_thresholds_file(path: Path, configured: Mapping[str, ModelThresholds]) -> dict[str, ModelThresholds]:
    """The cut-offs a thresholds file sets, per model, each over that model's configured ones.

    A ValueError naming the file for anything it cannot use: a missing file, bad TOML, a key other
    than `[semantic.thresholds.<model>]` link, review, cross_link and cross_review, a value that
    is no cosine, or a review cut-off above its link cut-off.
    """
    from streams.config import ModelThresholds

    where = f"thresholds file {path}"
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _bad(f"{where} does not exist") from None
    except IsADirectoryError:
        raise _bad(f"{where} is a directory") from None
    except UnicodeDecodeError:
        raise _bad(f"{where} is not UTF-8 text") from None
    except OSError as exc:
        raise _bad(f"{where}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise _bad(f"{where} is not TOML: {exc}") from None
    semantic = data.get("semantic")
    thresholds = semantic.get("thresholds") if isinstance(semantic, dict) else None
    others = sorted(set(data) - {"semantic"}) + (
        sorted(f"semantic.{k}" for k in semantic if k != "thresholds") if isinstance(semantic, dict) else []
    )
    if others:
        raise _bad(f"{where}: only semantic.thresholds.<model> tables belong in it, not {', '.join(others)}")
    if not isinstance(thresholds, dict) or not thresholds or not all(isinstance(v, dict) for v in thresholds.values()):
        raise _bad(f"{where}: no semantic.thresholds.<model> table with {', '.join(_KEYS)}")
    loaded: dict[str, ModelThresholds] = {}
    for name, cuts in thresholds.items():
        base = configured[name].model_dump() if name in configured else {}
        try:
            loaded[name] = ModelThresholds(**{**base, **cuts})
        except ValidationError as exc:
            problems = "; ".join(
                ".".join(map(str, e["loc"])) + ": " + ("unknown key" if e["type"] == "extra_forbidden" else e["msg"])
                if e["loc"]
                else e["msg"].removeprefix("Value error, ")
                for e in exc.errors()
            )
            raise _bad(f"{where}: semantic.thresholds.{name}: {problems}") from None
    return loaded


def _bad(message: str) -> PydanticCustomError:
    """A ValueError that pydantic reports as the message alone: the configuration error names the file
    and says what is wrong, in one line (no "Value error," before it, no markup in it)."""
    return PydanticCustomError("thresholds_file", "{message}", {"message": message})


def _table_key(name: str) -> str:
    """The model's name as a TOML key: bare where it can be, else a basic string (json.dumps writes
    a character outside the BMP as a surrogate pair, which TOML refuses)."""
    if _BARE_KEY.match(name):
        return name
    return '"' + _UNSAFE_IN_STRING.sub(lambda m: _ESCAPES.get(m[0]) or f"\\u{ord(m[0]):04x}", name) + '"'


def _comment(text: str) -> str:
    """`text` (a model's name, a path) as it is in a comment line, or JSON-quoted if it holds a control
    character: a newline would end the comment and make the rest of the name TOML."""
    return json.dumps(text) if _CONTROL.search(text) else text


def thresholds_toml(fit: Fit, labels_file: str, fitted_at: str) -> str:
    """The thresholds file of a fit: its four cut-offs for the fit's model, with comments saying how
    they were found, from how many labels, and why a cut-off that no band reached is 1.0."""
    same_n, cross_n = (sum(band.n for band in fit.side(same)) for same in (True, False))
    lines = [
        f"# Semantic cut-offs for {_comment(fit.model)}, fitted by `dedup calibrate fit` at {fitted_at}",
        f"# from {fit.labels} labels in {_comment(labels_file)}"
        f" ({same_n} same-language, {cross_n} cross-language pairs).",
        f"# link: every labelled band from the cut-off up has precision >= {fit.precision:g};"
        f" review: >= {fit.review_precision:g}.",
        "# Point estimates per band: `dedup calibrate fit` prints each band's 95% Wilson interval, which",
        "# says how sure they are. A cut-off no band reached is 1.0: nothing links (or goes to review)",
        "# but pairs the model cannot tell apart, which the exact and SimHash stages catch first.",
        "# Load with `dedup run --thresholds FILE`, `dedup worker --thresholds FILE` or semantic.thresholds_file.",
        "",
        f"[semantic.thresholds.{_table_key(fit.model_name)}]",
    ]
    for key, value in cut_offs(fit).items():
        same = not key.startswith("cross_")
        found = (fit.link if key.endswith("link") else fit.review)["same" if same else "cross"]
        target = fit.precision if key.endswith("link") else fit.review_precision
        pairs = "same-language" if same else "cross-language"
        if found is None:
            note = f"{pairs}: no labelled band has precision {target:g}; {NOTHING} = none"
        else:
            above = [b for b in fit.side(same) if b.low >= found - 1e-9]
            n, duplicates = sum(b.n for b in above), sum(b.duplicates for b in above)
            note = f"{pairs}: {duplicates} of {n} labelled pairs from {found:.2f} up are duplicates"
        lines.append(f"{key} = {value!r:<6} # {note}")
    return "\n".join(lines) + "\n"


def cut_offs(fit: Fit) -> dict[str, float]:
    """The four values the thresholds file of `fit` sets (a cut-off no band reached is 1.0)."""
    from streams.calibration.fit import SIDES

    values: dict[str, float] = {}
    for side, same in SIDES:
        for kind, cuts in (("link", fit.link), ("review", fit.review)):
            value = cuts[side]
            values[kind if same else f"cross_{kind}"] = NOTHING if value is None else value
    return values

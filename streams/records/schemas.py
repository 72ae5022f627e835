"""The JSON Schema files in `schemas/`, compiled once with fastjsonschema.

fastjsonschema compiles a schema to Python code: validation costs a few
microseconds per record, which the hot path can afford.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import fastjsonschema
import orjson

RAW_ARTICLE = "raw_article"
LINK = "link"
DEDUPED_ARTICLE = "deduped_article"

SchemaError = fastjsonschema.JsonSchemaValueException


def schema_dir() -> Path:
    """`schemas/` at the repository root, or its copy inside an installed wheel."""
    packaged = Path(__file__).resolve().parent.parent / "schemas"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[2] / "schemas"


@cache
def load_schema(name: str) -> dict[str, Any]:
    return orjson.loads((schema_dir() / f"{name}.schema.json").read_bytes())


@cache
def validator(name: str) -> Callable[[Any], Any]:
    """A compiled validator; raises SchemaError with a readable message."""
    return fastjsonschema.compile(load_schema(name))

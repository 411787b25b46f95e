"""Reading provider JSON leniently: each reader returns the value when it has the JSON type asked
for, else ``None``, and never raises. Adapters read every field through these, so a provider's
odd or missing field only means fewer canonical fields (``chronicle.llm.canonical``, "Total")."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import cast

from pydantic import JsonValue


def as_map(value: object) -> Mapping[str, JsonValue] | None:
    """``value`` if it is a JSON object, else ``None``."""
    if type(value) is dict:  # what the capture makes: no ABC check (this runs per JSON node)
        return cast("Mapping[str, JsonValue]", value)
    if isinstance(value, Mapping):
        return cast("Mapping[str, JsonValue]", value)
    return None


def as_list(value: object) -> list[JsonValue] | None:
    """``value`` if it is a JSON array, else ``None``."""
    if isinstance(value, list):
        return cast("list[JsonValue]", value)
    return None


def as_str(value: object) -> str | None:
    """``value`` if it is a string, else ``None``."""
    return value if isinstance(value, str) else None


def nonempty_str(value: object) -> str | None:
    """``value`` if it is a string with at least one non-blank character, else ``None``."""
    return value if isinstance(value, str) and value.strip() else None


def as_int(value: object) -> int | None:
    """An integer (a float with no fraction counts; a bool does not), else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def as_float(value: object) -> float | None:
    """A finite number as a float (a bool is not a number here), else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None

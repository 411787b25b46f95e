"""Reading recordings a replay may trust: ``load_envelopes`` turns what the user passed (a saved
file, a file's text, envelope dicts or models) into validated ``Envelope`` models, refusing
what no recording Chronicle made can be (nesting deeper than ``MAX_DEPTH``, files larger than
``MAX_FILE_BYTES``) before any recursive code meets it, with an error that says what to do.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from agentplane_primitives.models import Envelope
from pydantic import ValidationError

from chronicle.errors import ReplayError
from chronicle.save.client import MAX_ANSWER_BYTES, invalid_envelope, json_kind

logger = logging.getLogger("chronicle")

Match = Literal["order", "input"]
_MATCHES = ("order", "input")
_NO_CALLS: dict[int, Envelope] = {}
_NO_CHILDREN: dict[str, list[Envelope]] = {}


MAX_DEPTH = 200
"""Deepest nesting replay reads in an envelope: capture stores at most ``MAX_DEPTH`` (64) levels
of a value, so anything deeper is a damaged or hostile recording, refused before any recursive
code (validation, comparison, rebuilding) meets it."""

MAX_FILE_BYTES = MAX_ANSWER_BYTES
"""Largest saved file replay reads (the bound of a control plane answer, 256 MiB)."""


def _deeper_than(value: object, limit: int) -> bool:
    """Whether containers in ``value`` nest more than ``limit`` levels (a walk, not recursion)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Iterable[object] = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _too_deep(what: str) -> ReplayError:
    return ReplayError(
        f"replay: {what} nested deeper than any recording ({MAX_DEPTH} levels; capture stores "
        "at most 64), so the recording is damaged and nothing of it is replayed; record the "
        "request again, or pass the file the control plane's answer was saved to"
    )


def load_envelopes(source: object, *, span_id: str | None = None) -> list[Envelope]:
    """Read envelopes from a list, the route's JSON body, a JSON string, or a file path.

    Raises ``ReplayError`` naming what is wrong: unreadable file (or one over ``MAX_FILE_BYTES``),
    not envelopes, an item that is not an envelope object or is nested deeper than ``MAX_DEPTH``
    (a damaged recording), several spans with no ``span_id`` to choose one. Never lets a
    ``RecursionError`` through.
    """
    data: Any = source
    if isinstance(source, Path) or (
        isinstance(source, str) and not source.lstrip().startswith(("{", "["))
    ):
        path = Path(source)
        try:
            size = path.stat().st_size
            if size > MAX_FILE_BYTES:
                raise ReplayError(
                    f"replay: {path} holds {size} bytes, over the {MAX_FILE_BYTES} replay reads; "
                    "save one span's envelopes (GET /v1/traces/{t}/spans/{s}/envelopes)"
                )
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ReplayError(f"replay: cannot read {path}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise ReplayError(f"replay: {path} is not JSON: {exc}") from None
        except RecursionError:
            raise _too_deep(f"{path} holds JSON") from None
    elif isinstance(source, (str, bytes)):
        try:
            data = json.loads(source)
        except json.JSONDecodeError as exc:
            raise ReplayError(f"replay: the text given is not JSON: {exc}") from None
        except RecursionError:
            raise _too_deep("the text given holds JSON") from None
    if isinstance(data, Mapping) and "envelopes" in data:
        data = data["envelopes"]
    if not isinstance(data, (list, tuple)):
        raise ReplayError(
            "replay: expected a list of envelopes or the body of "
            "GET /v1/traces/{t}/spans/{s}/envelopes ({'envelopes': [...]}), got "
            f"{type(data).__name__}"
        )
    envelopes: list[Envelope] = []
    for position, item in enumerate(data):
        if isinstance(item, Envelope):
            envelopes.append(item)
            continue
        if not isinstance(item, Mapping):
            raise ReplayError(
                f"replay: item {position} is {json_kind(item)}, not an envelope: the recording "
                "is damaged, and nothing of it is replayed; pass envelopes saved from the "
                "control plane"
            )
        if _deeper_than(item, MAX_DEPTH):
            raise _too_deep(f"item {position} (envelope {item.get('envelope_id')!s:.40}) is")
        try:
            envelopes.append(Envelope.model_validate(item))
        except ValidationError as exc:
            where = f"item {position} is not a valid envelope"
            raise invalid_envelope(
                exc, where, "pass envelopes saved from the control plane"
            ) from None
    if span_id is not None:
        envelopes = [e for e in envelopes if e.span_id == span_id]
    spans = sorted({e.span_id for e in envelopes})
    if len(spans) > 1:
        raise ReplayError(
            f"replay: the envelopes come from {len(spans)} spans ({', '.join(spans)}); a span is "
            "the unit of replay, so pass span_id= to choose one"
        )
    return envelopes

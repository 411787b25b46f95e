"""Reading recordings a replay may trust: ``load_envelopes`` turns what the user passed (a saved
file, a file's text, envelope dicts or models) into validated ``Envelope`` models, refusing
what no recording Chronicle made can be (nesting deeper than ``MAX_DEPTH``, files larger than
the ``max_file_bytes`` setting, a FIFO or a device in a file's place, text that is not UTF-8)
before any recursive code meets it, with an error that says what to do. A file is read by
``chronicle.save.untrusted.read_json``, as every recording file is.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from agentplane_primitives.models import Envelope
from pydantic import ValidationError

from chronicle.errors import ReplayError
from chronicle.save.client import invalid_envelope, json_kind
from chronicle.save.untrusted import (
    MAX_DEPTH,
    RecordingFileError,
    deeper_than,
    read_json,
    too_deep,
)

logger = logging.getLogger("chronicle")

Match = Literal["order", "input"]
_MATCHES = ("order", "input")
_NO_CALLS: dict[int, Envelope] = {}
_NO_CHILDREN: dict[str, list[Envelope]] = {}

__all__ = ["MAX_DEPTH", "Match", "load_envelopes"]


def load_envelopes(source: object, *, span_id: str | None = None) -> list[Envelope]:
    """Read envelopes from a list, the route's JSON body, a JSON string, or a file path.

    Raises ``ReplayError`` naming what is wrong: a file that cannot be read as a recording
    (``RecordingFileError`` naming it: missing, over ``max_file_bytes``, not a regular file,
    not UTF-8, not JSON, too many values, too deep), not envelopes, an item that is not an
    envelope object or is nested deeper than ``MAX_DEPTH`` (a damaged recording), several
    spans with no ``span_id`` to choose one. Never lets a ``RecursionError`` through.
    """
    data: Any = source
    if isinstance(source, Path) or (
        isinstance(source, str) and not source.lstrip().startswith(("{", "["))
    ):
        path = Path(source)
        try:
            data = read_json(path)
        except FileNotFoundError:
            raise RecordingFileError(
                path,
                "does not exist; check the path, or save the recording with "
                "`chronicle save TRACE_ID -o FILE`",
            ) from None
    elif isinstance(source, (str, bytes)):
        try:
            data = json.loads(source)
        except json.JSONDecodeError as exc:
            raise ReplayError(f"replay: the text given is not JSON: {exc}") from None
        except RecursionError:
            raise too_deep(None, "the text given holds JSON") from None
        except ValueError as exc:  # bytes that are not UTF-8, a number too long to convert
            raise ReplayError(
                f"replay: the text given is not JSON a recording holds: {exc}"
            ) from None
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
        if deeper_than(item, MAX_DEPTH):
            raise too_deep(None, f"item {position} (envelope {item.get('envelope_id')!s:.40}) is")
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

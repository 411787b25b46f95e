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
import re
from collections.abc import Generator, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from agentplane_primitives.models import Envelope
from pydantic import ValidationError

from chronicle.errors import ReplayError
from chronicle.save.client import invalid_envelope, json_kind
from chronicle.save.untrusted import (
    MAX_DEPTH,
    MAX_FILE_DEPTH,
    MAX_ITEMS,
    RecordingFileError,
    count_items,
    deeper_than,
    read_bytes,
    read_json,
    too_deep,
)

logger = logging.getLogger("chronicle")

Match = Literal["order", "input"]
_MATCHES = ("order", "input")
_NO_CALLS: dict[int, Envelope] = {}
_NO_CHILDREN: dict[str, list[Envelope]] = {}

__all__ = [
    "MAX_DEPTH",
    "FileEnvelopes",
    "Items",
    "Match",
    "envelope_items",
    "envelope_of",
    "load_envelopes",
    "streamed",
]


def load_envelopes(source: object, *, span_id: str | None = None) -> list[Envelope]:
    """Read envelopes from a list, the route's JSON body, a JSON string, or a file path.

    Raises ``ReplayError`` naming what is wrong: a file that cannot be read as a recording
    (``RecordingFileError`` naming it: missing, over ``max_file_bytes``, not a regular file,
    not UTF-8, not JSON, too many values, too deep), not envelopes, an item that is not an
    envelope object or is nested deeper than ``MAX_DEPTH`` (a damaged recording), several
    spans with no ``span_id`` to choose one. Never lets a ``RecursionError`` through.
    """
    items = envelope_items(source)
    envelopes = [envelope_of(position, item, items) for position, item in enumerate(items.items)]
    if span_id is not None:
        envelopes = [e for e in envelopes if e.span_id == span_id]
    spans = sorted({e.span_id for e in envelopes})
    if len(spans) > 1:
        raise ReplayError(
            f"replay: the envelopes come from {len(spans)} spans ({', '.join(spans)}); a span is "
            "the unit of replay, so pass span_id= to choose one"
        )
    return envelopes


class Items:
    """What ``envelope_items`` read: the items a source holds (not yet envelopes), and whether
    their nesting was checked already (a file's ``{"envelopes": [...]}``: ``read_json`` refused
    a file nesting deeper than ``MAX_DEPTH`` two levels down, so no item of it does)."""

    __slots__ = ("depth_checked", "items")

    def __init__(self, items: list[Any] | tuple[Any, ...], depth_checked: bool) -> None:
        self.items, self.depth_checked = items, depth_checked


def envelope_items(source: object) -> Items:
    """The items of ``source`` (any ``load_envelopes`` takes), read but not validated: each is
    made an envelope by ``envelope_of``, one at a time, so a caller that keeps less than the
    envelope (``chronicle.diff``) never holds them all. Raises as ``load_envelopes`` does for
    what cannot be read (a file, text that is not JSON, a value that is no list of items)."""
    data: Any = source
    from_file = False
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
        from_file = True
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
    wrapped = isinstance(data, Mapping) and "envelopes" in data
    if wrapped:
        data = data["envelopes"]
    if not isinstance(data, (list, tuple)):
        raise ReplayError(
            "replay: expected a list of envelopes or the body of "
            "GET /v1/traces/{t}/spans/{s}/envelopes ({'envelopes': [...]}), got "
            f"{type(data).__name__}"
        )
    return Items(data, from_file and wrapped)


def envelope_of(position: int, item: object, items: Items) -> Envelope:
    """Item ``position`` of ``items`` as an ``Envelope`` (a model is taken as it is), or the
    ``ReplayError`` ``load_envelopes`` raises for it: not an object, nested deeper than
    ``MAX_DEPTH``, or not a valid envelope."""
    if isinstance(item, Envelope):
        return item
    if not isinstance(item, Mapping):
        raise ReplayError(
            f"replay: item {position} is {json_kind(item)}, not an envelope: the recording "
            "is damaged, and nothing of it is replayed; pass envelopes saved from the "
            "control plane"
        )
    if not items.depth_checked and deeper_than(item, MAX_DEPTH):
        raise too_deep(None, f"item {position} (envelope {item.get('envelope_id')!s:.40}) is")
    try:
        return Envelope.model_validate(item)
    except ValidationError as exc:
        where = f"item {position} is not a valid envelope"
        raise invalid_envelope(exc, where, "pass envelopes saved from the control plane") from None


class FileEnvelopes:
    """The envelopes of a recording file read one at a time (``streamed``), for a reader that
    keeps less than the envelopes (``chronicle.diff`` keeps its calls): only the envelope being
    read is held, never the file's parsed JSON whole, so none of it lives long enough for the
    cyclic collector to walk it again and again (docs/benchmarks.md, "8b, the collector left
    alone").

    A fast path, never an authority: iterating stops at the first thing ``load_envelopes``
    would not take as it stands (not JSON, a value too deep, an item that is not an envelope, a
    repeated ``envelopes`` key, ...), and ``complete`` is true only once the whole file was
    read and every item given. A reader that sees ``complete`` false reads the file with
    ``load_envelopes``, which raises the error it names (or, for one it takes, gives the same
    envelopes): the file is judged by one rule, wherever it is read.
    """

    __slots__ = ("complete", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.complete = False

    def __iter__(self) -> Iterator[Envelope]:
        try:
            for item in _file_items(self.text):
                if not isinstance(item, Mapping) or deeper_than(item, MAX_DEPTH):
                    return
                yield Envelope.model_validate(item)
        except (_NotStreamed, ValueError, RecursionError):  # ValidationError is a ValueError
            return
        self.complete = True


def streamed(path: Path) -> FileEnvelopes | None:
    """The file ``path`` to read envelope by envelope, or ``None`` when it cannot be read as
    it stands (missing, not a regular file, over ``max_file_bytes``, over ``MAX_ITEMS``
    values, not UTF-8): ``load_envelopes(path)`` then says what is wrong."""
    try:
        data = read_bytes(path)
    except (OSError, ReplayError):
        return None
    if count_items(data) > MAX_ITEMS:
        return None
    try:
        return FileEnvelopes(data.decode("utf-8"))
    except UnicodeDecodeError:
        return None


class _NotStreamed(Exception):
    """The text is not one ``json.loads`` reads into envelopes as the stream reads it."""


_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace, as the json module skips it


def _skip(text: str, pos: int) -> int:
    """The position of the first character at or after ``pos`` that is not JSON whitespace."""
    found = _SPACE.match(text, pos)
    assert found is not None  # it matches the empty string
    return found.end()


def _file_items(text: str) -> Iterator[object]:
    """The items of a recording file's envelope array (``{"envelopes": [...], ...}`` or a bare
    array), each decoded as ``json.loads`` decodes it; the rest of the file is read too, and
    checked as ``read_json`` checks it. Raises ``_NotStreamed`` (or the decoder's
    ``ValueError`` / ``RecursionError``) where the text is not such a file."""
    pos = _skip(text, 0)
    if text.startswith("[", pos):
        pos = yield from _array_items(text, pos)
    elif text.startswith("{", pos):
        found = False
        pos = _skip(text, pos + 1)
        while True:
            if not text.startswith('"', pos):
                raise _NotStreamed
            key, pos = _DECODER.raw_decode(text, pos)
            pos = _skip(text, pos)
            if not text.startswith(":", pos):
                raise _NotStreamed
            pos = _skip(text, pos + 1)
            if key == "envelopes":  # json.loads keeps a repeated key's last value: not streamed
                if found or not text.startswith("[", pos):
                    raise _NotStreamed
                found = True
                pos = yield from _array_items(text, pos)
            else:  # one level down, where the file's depth bound leaves one level less
                value, pos = _DECODER.raw_decode(text, pos)
                if deeper_than(value, MAX_FILE_DEPTH - 1):
                    raise _NotStreamed
            pos = _skip(text, pos)
            if text.startswith("}", pos):
                break
            if not text.startswith(",", pos):
                raise _NotStreamed
            pos = _skip(text, pos + 1)
        if not found:
            raise _NotStreamed
        pos += 1
    else:
        raise _NotStreamed
    if _skip(text, pos) != len(text):
        raise _NotStreamed


def _array_items(text: str, pos: int) -> Generator[object, None, int]:
    """The values of the JSON array opening at ``pos``; returns the position after it."""
    pos = _skip(text, pos + 1)
    if text.startswith("]", pos):
        return pos + 1
    while True:
        item, pos = _DECODER.raw_decode(text, pos)
        yield item
        pos = _skip(text, pos)
        if text.startswith("]", pos):
            return pos + 1
        if not text.startswith(",", pos):
            raise _NotStreamed
        pos = _skip(text, pos + 1)

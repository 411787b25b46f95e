"""What a streamed model call stores of its chunks: nothing its output's redaction masked.

A stream's assembled output is redacted as a whole, its chunks one string at a time. A secret the
model emits across several deltas (an API key, or a tool argument under a credential-named key
whose JSON arrives in pieces) is masked in the output but would stay in pieces in the chunks,
and joining their deltas would give it back. So, at the end of the stream:

- ``OutputWatch`` is the redaction the output is redacted with; it notes whether that masked
  anything (``masked_in``).
- ``stored_chunks``: when nothing was masked (the common case) the chunks are stored redacted one
  string at a time, less the fields they all share, as they always were and at no extra cost.
  When something was masked, the redacted chunks are assembled again by the format's own
  assembler and cut like the output: if that gives the stored output exactly (every masked text
  lay whole within one chunk and was masked there), they are stored; otherwise none are, and
  the caller flags ``chronicle.chunks_rebuilt``: a replay rebuilds the stream from the redacted
  output (``StreamFormat.rechunk``), as it does when the chunks outgrew ``max_payload_bytes``.

So no text masked in the output can be put back together from the stored chunks, for every
stream format, and the recording still replays as a stream whose assembled form is the output.
"""

from __future__ import annotations

from pydantic import JsonValue

from chronicle.recording.capture import json_form
from chronicle.recording.stream import StreamFormat
from chronicle.redaction import CREDENTIAL, Redaction
from chronicle.wire import shared_fields


class OutputWatch:
    """``redaction`` for one output, noting whether it masked anything.

    ``redaction`` (the attribute) masks exactly as the given one does; ``masked_in(output)``
    then says whether any string was changed or any value masked as a credential.
    """

    def __init__(self, redaction: Redaction) -> None:
        self._changed = False
        self._credentials = redaction.masks_credentials
        self.redaction = redaction
        if not redaction.redactors:
            return
        inner = redaction.text

        def text(value: str) -> str:
            masked = inner(value)
            if masked is not value:  # ``Redaction.text`` returns the same object when clean
                self._changed = True
            return masked

        self.redaction = Redaction(redaction.redactors)
        self.redaction.text = text

    def masked_in(self, output: JsonValue) -> bool:
        """Whether redacting ``output`` (the JSON form made with ``redaction``) masked something."""
        return self._changed or (self._credentials and _holds_credential(output))


def _holds_credential(value: JsonValue) -> bool:
    """Whether a dict in ``value`` holds a value masked as a credential (the walker's marker).

    A loop over the containers only, not a recursive walk: it runs at the end of every stream.
    """
    if type(value) is not dict and type(value) is not list:
        return False
    pending: list[dict[str, JsonValue] | list[JsonValue]] = [value]
    while pending:
        container = pending.pop()
        for item in container.values() if type(container) is dict else container:
            if item is CREDENTIAL:
                return True
            if type(item) is dict or type(item) is list:
                pending.append(item)
    return False


def stored_chunks(
    fmt: StreamFormat | None,
    items: list[JsonValue],
    output: JsonValue,
    *,
    masked: bool,
    redaction: Redaction,
    limit: int,
) -> tuple[JsonValue, JsonValue] | None:
    """``(shared fields, chunks less them)`` to store, redacted, or ``None`` to store no chunks.

    ``items`` are the stream's chunks as kept, ``output`` the assembled output as stored
    (redacted with ``redaction`` and cut to ``limit``), ``masked`` whether that redaction masked
    anything. ``None`` when the chunks, even redacted one by one, would assemble into more than
    the stored output: they hold in pieces something the output has masked.
    """
    shared, chunks = shared_fields(items)
    kept_shared = redaction.json(shared) if shared else {}
    kept = redaction.json(chunks)
    if not masked or _assembles_to(fmt, kept_shared, kept, output, limit):
        return kept_shared, kept
    return None


def _assembles_to(
    fmt: StreamFormat | None, shared: JsonValue, chunks: JsonValue, output: JsonValue, limit: int
) -> bool:
    """Whether ``chunks`` (with ``shared`` put back) assemble and cut exactly into ``output``."""
    if fmt is None:
        return False
    assembler = fmt.assembler(limit)
    common = shared if isinstance(shared, dict) else {}
    for chunk in chunks if isinstance(chunks, list) else ():
        assembler.add({**common, **chunk} if common and isinstance(chunk, dict) else chunk)
    again = json_form(assembler.result(), max_string_bytes=limit, max_total_bytes=limit).value
    return again == output

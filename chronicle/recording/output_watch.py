"""Whether redacting an output masked anything: a streamed call's chunks depend on it.

A stream's assembled output is redacted as a whole, its chunks one string at a time. A secret the
model emits across several deltas (an API key, or a tool argument under a credential-named key
whose JSON arrives in pieces) is masked in the output but would stay in pieces in the chunks,
and joining their deltas would give it back. Where a format keeps text in its chunks differs
(chat deltas, Responses events that repeat the text whole beside its deltas, Anthropic's
``partial_json``, ...), so the rule is kept format-free: when redacting the output masked
anything, the call stores none of its chunks (``chronicle.chunks_rebuilt``) and a replay
rebuilds the stream from the redacted output (``StreamFormat.rechunk``), as it does when the
chunks outgrew ``max_payload_bytes``. When nothing was masked (the common case) the chunks are
stored as always, redacted one string at a time.

``OutputWatch`` is the redaction the output goes through; ``masked_in`` then says whether it
masked anything, for the cost of one closure call per string of the output.
"""

from __future__ import annotations

from pydantic import JsonValue

from chronicle.redaction import CREDENTIAL, Redaction


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

"""``RedactingSpan``: what other code writes on Chronicle's spans is redacted first.

Chronicle redacts what it sets itself when it captures it. But code running inside a boundary
or a request span reaches that span through the context (``trace.get_current_span()``) and can
write on it: ``record_exception(e)`` puts the exception's message and stack trace, which may quote
a secret, in an event that every exporter sends. So the context holds this wrapper, not the span:
each attribute, event, link, status description and name written through it passes Chronicle's
redaction before it reaches the span. Chronicle keeps the span itself for its own writes.

What this cannot cover: spans that other instrumentations (or the user) start themselves, even
inside a boundary. Those are theirs; redact them with their own tools.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.semconv.attributes.exception_attributes import (
    EXCEPTION_ESCAPED,
    EXCEPTION_MESSAGE,
    EXCEPTION_STACKTRACE,
    EXCEPTION_TYPE,
)
from opentelemetry.trace import SpanContext, Status, StatusCode
from opentelemetry.util import types
from typing_extensions import override

from chronicle.redaction import CREDENTIAL, Redaction, is_credential_value
from chronicle.wire import valid_text

__all__ = ["RedactingSpan"]


class RedactingSpan(trace_api.Span):
    """An OpenTelemetry span whose every text written through it is redacted first.

    Reads (``get_span_context``, ``is_recording``) and ``end`` go to the wrapped span unchanged.
    A string attribute under a credential-named key (``api_key``, ``password``) is masked whole.
    Never raises more than the wrapped span would.
    """

    def __init__(self, span: trace_api.Span, redaction: Redaction) -> None:
        self._span = span
        self._redaction = redaction

    @property
    def wrapped(self) -> trace_api.Span:
        """The span this one writes to."""
        return self._span

    # ---- reads and the end: unchanged --------------------------------------------------------

    @override
    def get_span_context(self) -> SpanContext:
        return self._span.get_span_context()

    @override
    def is_recording(self) -> bool:
        return self._span.is_recording()

    @override
    def end(self, end_time: int | None = None) -> None:
        self._span.end(end_time)

    # ---- writes: redacted ----------------------------------------------------------------------

    @override
    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        self._span.set_attributes(self._attributes(attributes) or {})

    @override
    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        self._span.set_attribute(key, self._value(key, value))

    @override
    def add_event(
        self,
        name: str,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
    ) -> None:
        self._span.add_event(self._text(name), self._attributes(attributes), timestamp)

    @override
    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        self._span.add_link(context, self._attributes(attributes))

    @override
    def update_name(self, name: str) -> None:
        self._span.update_name(self._text(name))

    @override
    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if isinstance(status, Status) and status.description:
            status = Status(status.status_code, self._text(status.description))
        self._span.set_status(status, self._text(description) if description else None)

    @override
    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        """The SDK's ``exception`` event (type, message, stack trace), with its texts redacted."""
        module = type(exception).__module__
        qualname = type(exception).__qualname__
        try:
            message = str(exception)
        except Exception:
            message = f"<{qualname} whose str() failed>"
        event: dict[str, types.AttributeValue] = {
            EXCEPTION_TYPE: f"{module}.{qualname}" if module and module != "builtins" else qualname,
            EXCEPTION_MESSAGE: message,
            EXCEPTION_STACKTRACE: "".join(traceback.format_exception(exception)),
            EXCEPTION_ESCAPED: str(escaped),
        }
        if attributes:
            event.update(attributes)
        self.add_event("exception", event, timestamp)

    # ---- the redaction -------------------------------------------------------------------------

    def _text(self, text: str) -> str:
        return valid_text(self._redaction.text(text)) if isinstance(text, str) else text

    def _value(self, key: str, value: Any) -> Any:
        if isinstance(value, str):
            if self._redaction.masks_credentials and is_credential_value(key, value):
                return CREDENTIAL
            return self._text(value)
        if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
            return [self._text(item) if isinstance(item, str) else item for item in value]
        return value

    def _attributes(self, attributes: types.Attributes) -> types.Attributes:
        if not attributes:
            return attributes
        return {key: self._value(key, value) for key, value in attributes.items()}

    def __repr__(self) -> str:
        return f"RedactingSpan({self._span!r})"

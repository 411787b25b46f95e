"""The keys of Chronicle's state in the OpenTelemetry Context: request span, boundary, replay.

Keeping it in the OTel Context (not in separate context variables) means whatever carries an
OTel context carries Chronicle's too: ``context.attach`` in a worker thread, OTel's own threading
and asyncio propagation, and the user's manual propagation.
"""

from __future__ import annotations

from typing import Protocol

from opentelemetry import context as otel_context


class ActiveReplay(Protocol):
    """What the OTel side needs to know of a replay in the context."""

    export_spans: bool
    """Whether spans started during the replay may reach the user's exporters."""


SESSION_KEY = otel_context.create_key("chronicle.session")
FRAME_KEY = otel_context.create_key("chronicle.frame")
REPLAY_KEY = otel_context.create_key("chronicle.replay")
ATTEMPT_KEY = otel_context.create_key("chronicle.attempt")
# The SDK's own key: its instrumentations and exporters honour it.
_SUPPRESS_KEY = otel_context._SUPPRESS_INSTRUMENTATION_KEY
RECORD_KEY = otel_context.create_key("chronicle.record")
"""Passed only in the context given to ``start_span`` (never attached): the record that the
``ChronicleSpanProcessor`` saves for that span."""


def suppressed(ctx: otel_context.Context | None = None) -> otel_context.Context:
    """``ctx`` (the current context by default) with OpenTelemetry instrumentation suppressed.

    Chronicle's own requests run in it, so no instrumentation (Chronicle's included) records them.
    """
    return otel_context.set_value(_SUPPRESS_KEY, True, ctx)


def is_suppressed(ctx: otel_context.Context | None = None) -> bool:
    """Whether OpenTelemetry instrumentation is suppressed in ``ctx``."""
    return bool(otel_context.get_value(_SUPPRESS_KEY, ctx))


def current_replay_in(ctx: otel_context.Context | None = None) -> ActiveReplay | None:
    """The replay active in ``ctx`` (the current context by default), if any."""
    return otel_context.get_value(REPLAY_KEY, ctx)  # type: ignore[return-value]

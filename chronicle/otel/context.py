"""Chronicle's state in the OpenTelemetry Context: the request span, the boundary, replay.

Keeping it in the OTel Context (not in separate context variables) means whatever carries an
OTel context carries Chronicle's too: ``context.attach`` in a worker thread, OTel's own threading
and asyncio propagation, and the user's manual propagation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opentelemetry import context as otel_context

if TYPE_CHECKING:
    from chronicle.recording.session import Attempt, Frame, Session
    from chronicle.replay.run import ReplayRun

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


def current_session_in(ctx: otel_context.Context | None = None) -> Session | None:
    """The Chronicle request span active in ``ctx`` (the current context by default)."""
    value = otel_context.get_value(SESSION_KEY, ctx)
    return value  # type: ignore[return-value]


def current_frame_in(ctx: otel_context.Context | None = None) -> Frame | None:
    """The innermost Chronicle boundary active in ``ctx``."""
    return otel_context.get_value(FRAME_KEY, ctx)  # type: ignore[return-value]


def current_replay_in(ctx: otel_context.Context | None = None) -> ReplayRun | None:
    """The replay run active in ``ctx``, if any."""
    return otel_context.get_value(REPLAY_KEY, ctx)  # type: ignore[return-value]


def current_attempt_in(ctx: otel_context.Context | None = None) -> Attempt | None:
    """The ``attempt(n, of=...)`` block active in ``ctx``, if any."""
    return otel_context.get_value(ATTEMPT_KEY, ctx)  # type: ignore[return-value]

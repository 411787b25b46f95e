"""The keys of Chronicle's state in the OpenTelemetry Context: request span, boundary, replay.

Keeping it in the OTel Context (not in separate context variables) means whatever carries an
OTel context carries Chronicle's too: ``context.attach`` in a worker thread, OTel's own threading
and asyncio propagation, and the user's manual propagation.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from opentelemetry import context as otel_context

logger = logging.getLogger("chronicle")


class ActiveReplay(Protocol):
    """What the OTel side needs to know of a replay in the context."""

    export_spans: bool
    """Whether spans started during the replay may reach the user's exporters."""


class ActiveReplays:
    """The replays entered in this process, whichever thread or task entered them.

    A replay lives in the context of the code that entered it. This registry is for the code that
    does not carry that context (a thread started before the replay, a pool the context did not
    reach): while a replay is active such code must not run boundaries live or write anything,
    so Chronicle asks here which replay it belongs to. Reading it is one attribute lookup.
    """

    __slots__ = ("_lock", "_replays")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replays: tuple[ActiveReplay, ...] = ()

    def enter(self, replay: ActiveReplay) -> None:
        """``replay`` starts; it is active until ``leave``."""
        with self._lock:
            self._replays = (*self._replays, replay)

    def leave(self, replay: ActiveReplay) -> None:
        """``replay`` is over (a replay not entered is ignored)."""
        with self._lock:
            replays = list(self._replays)
            if replay in replays:
                replays.remove(replay)
            self._replays = tuple(replays)

    def snapshot(self) -> tuple[ActiveReplay, ...]:
        """The replays active now, oldest first (an immutable copy)."""
        return self._replays

    def __bool__(self) -> bool:
        return bool(self._replays)


ACTIVE_REPLAYS = ActiveReplays()
"""Every replay active in the process (see ``ActiveReplays``)."""

SESSION_KEY = otel_context.create_key("chronicle.session")
FRAME_KEY = otel_context.create_key("chronicle.frame")
REPLAY_KEY = otel_context.create_key("chronicle.replay")
REPLAY_PARENT_KEY = otel_context.create_key("chronicle.replay_parent")
"""During a replay, the call whose recorded children the boundaries started here are matched
against (set around the body of a call the replay runs live; absent at the span's top level)."""
ATTEMPT_KEY = otel_context.create_key("chronicle.attempt")
# The SDK's own key: its instrumentations and exporters honour it.
_SUPPRESS_KEY = otel_context._SUPPRESS_INSTRUMENTATION_KEY
RECORD_KEY = otel_context.create_key("chronicle.record")
"""Passed only in the context given to ``start_span`` (never attached): the record that the
``ChronicleSpanProcessor`` saves for that span."""


def detach(token: object, what: str) -> None:
    """Detach ``token`` (from ``otel_context.attach``; ``None`` does nothing), never raising.

    A token detached in another context than it was attached in (a generator resumed on another
    thread, a stream ended elsewhere) is logged at debug level, naming ``what`` was attached.
    """
    if token is None:
        return
    try:
        otel_context.detach(token)  # type: ignore[arg-type]
    except Exception:
        logger.debug("%s context detached out of order", what, exc_info=True)


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
    # ``Context`` is a dict, read here as one (``get_value`` is a call more on every boundary).
    found = (otel_context.get_current() if ctx is None else ctx).get(REPLAY_KEY)
    return found  # type: ignore[return-value]

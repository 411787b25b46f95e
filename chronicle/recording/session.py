"""What the context knows while a request runs: its ``Session``, the innermost boundary, retries.

A ``Session`` is the public face of one request span (its ids, counters and hooks); ``Frame``
marks the innermost boundary, which a nested boundary takes as its parent; ``Attempt`` marks an
``attempt(n, of=...)`` block. All three live in the OpenTelemetry Context (``otel/context.py``),
so whatever carries an OTel context carries them.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping

from opentelemetry import context as otel_context
from pydantic import JsonValue

from chronicle.config import trace_page
from chronicle.otel.context import ATTEMPT_KEY, FRAME_KEY, SESSION_KEY
from chronicle.recording.hooks import HookRegistry, default_hooks
from chronicle.traceparent import is_envelope_id

logger = logging.getLogger("chronicle")

_forks = 0
"""How many times this process's memory was copied into a forked child: bumped in the child."""


def _forked() -> None:
    global _forks
    _forks += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


class Session:
    """A request span in progress: the ids of the Span entity, its counters and hooks.

    ``trace_id``, ``span_id`` (both hex), ``parent_envelope_id`` (the caller's outbound-call
    envelope, or ``None``) and ``service`` are fixed once it is open. ``metadata`` is sent with
    the Span (keys added while it is open go with its close write). ``hooks`` inherits
    ``default_hooks``; hooks registered here apply to this span's calls only. ``url`` is the
    trace's page on the control plane it is saved to. ``closed`` turns true when the request
    span ends; from then on the context no longer yields it (``current_session_in``).
    """

    def __init__(
        self,
        *,
        service: str,
        metadata: dict[str, JsonValue],
        labels: Mapping[str, str] | None = None,
        trace_id: str = "",
        span_id: str = "",
        parent_envelope_id: str | None = None,
        control_plane_url: str | None = None,
        keep: Callable[[str, str], object] | None = None,
    ) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_envelope_id = parent_envelope_id
        self.service = service
        self.metadata = metadata
        self.labels: Mapping[str, str] = dict(labels or {})
        self.hooks = HookRegistry(parent=default_hooks)
        self._sequence = itertools.count(1)
        self._invocations: dict[str, int] = {}
        self._invocation_base = 0
        """Where each name's invocations count from: 0, or ``pid << 32`` in a forked child."""
        self._tool_calls: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self._fork = _forks
        self._control_plane_url = control_plane_url
        self._closed = False
        self._keeper = keep
        """Keeps this request's trace when the sampler dropped it (``KeepBuffer.keep_trace``)."""
        self.unsampled = False
        """The sampler dropped this request span (its calls' spans are dropped with it; with
        keeping on, their records are held). Set once, when it opens."""
        self.dropped = False
        """The sampler dropped this request span and nothing holds dropped requests (keeping
        off): nothing it records could be saved, so its calls build no record and start no span;
        only their hooks run (``recording/call.py``). Set once, when it opens."""

    @property
    def url(self) -> str | None:
        """The control plane's page for this trace; ``None`` when no control plane is set."""
        base = self._control_plane_url
        return trace_page(base, self.trace_id) if base and self.trace_id else None

    def __repr__(self) -> str:
        return (
            f"Session(trace_id={self.trace_id!r}, span_id={self.span_id!r}, "
            f"parent_envelope_id={self.parent_envelope_id!r}, service={self.service!r})"
        )

    def keep(self, reason: str = "flagged by session.keep()") -> None:
        """Save this request even though the sampler dropped it (``keep_unsampled``).

        What it recorded so far and what it records from now on go to the control plane, with
        ``reason`` on its Span (metadata ``chronicle.kept``). A sampled request is saved anyway,
        and a request already kept stays kept: then nothing changes. Raises ``TypeError`` only
        for a ``reason`` that is not a non-empty string; never blocks on the network.
        """
        if not isinstance(reason, str) or not reason.strip():
            raise TypeError(f"session.keep() expects reason as a non-empty string, got {reason!r}")
        keeper = self._keeper
        if keeper is None or not self.trace_id:
            return
        try:
            keeper(self.trace_id, reason)
        except Exception:  # keeping is best effort: never the agent's problem
            logger.exception("could not keep the request of trace %s", self.trace_id)

    def next_call(self, name: str) -> tuple[int, int]:
        """Number the next call of ``name``: ``(sequence in the span, invocation of the name)``.

        In a child forked while this span was open, sequences and each name's invocations
        continue from ``pid << 32``: the parent numbers on from where it was, and the two never
        share a number (the child's calls sort after the parent's). A child's invocation numbers
        are its own, so a replay (which numbers from 1) does not match them to its calls.
        """
        if self._fork != _forks:
            self._renumber_in_child()
        with self._lock:
            count = self._invocations.get(name, self._invocation_base) + 1
            self._invocations[name] = count
            return next(self._sequence), count

    def _renumber_in_child(self) -> None:
        # A fresh lock too: another thread of the parent may have held this one at the fork.
        self._lock = threading.Lock()
        self._sequence = itertools.count((os.getpid() << 32) + 1)
        self._invocation_base = os.getpid() << 32
        self._invocations = {}
        self._fork = _forks


def offer_tool_calls(session: Session, calls: Iterable[tuple[str, str]]) -> None:
    """The model asked for these ``(name, id)`` tool calls; tool boundaries may take the ids."""
    with session._lock:
        for name, call_id in calls:
            session._tool_calls.setdefault(name, []).append(call_id)


def take_tool_call_id(session: Session, name: str) -> str | None:
    """The id of the oldest call of tool ``name`` the model asked for, once; else ``None``."""
    if not session._tool_calls:
        return None
    with session._lock:
        waiting = session._tool_calls.get(name)
        return waiting.pop(0) if waiting else None


class Frame:
    """The innermost boundary on the stack: what a nested boundary takes as its parent."""

    __slots__ = ("envelope_id", "kind", "session")

    def __init__(self, envelope_id: str, session: Session, kind: str | None = None) -> None:
        self.envelope_id = envelope_id
        self.session = session
        self.kind = kind


class Attempt:
    """An ``attempt(n, of=...)`` block: the boundaries it opens directly are retries."""

    __slots__ = ("frame", "number", "of")

    def __init__(self, number: int, of: str | None, frame: Frame | None) -> None:
        self.number = number
        self.of = of
        self.frame = frame


def mark_closed(session: Session) -> None:
    """``session``'s request span has ended: a context that still carries it (a thread that
    outlived the request) no longer records into it (see ``current_session_in``)."""
    session._closed = True


def current_session_in(ctx: otel_context.Context | None = None) -> Session | None:
    """The request span active in ``ctx`` (the current context by default).

    ``None`` for a span that has closed: a context carried into a thread that outlives its
    request (a heartbeat, a poller) no longer records into it, and its calls open request
    spans of their own, in new traces (``closed_session_in``), as calls outside any request do.
    """
    context = otel_context.get_current() if ctx is None else ctx  # a dict: read as one
    session: Session | None = context.get(SESSION_KEY)  # type: ignore[assignment]
    return None if session is None or session._closed else session


def closed_session_in(ctx: otel_context.Context | None = None) -> bool:
    """Whether ``ctx`` carries a request span that has closed (a thread outlived its request)."""
    session: Session | None = otel_context.get_value(SESSION_KEY, ctx)  # type: ignore[assignment]
    return session is not None and session._closed


def current_frame_in(ctx: otel_context.Context | None = None) -> Frame | None:
    """The innermost boundary active in ``ctx``."""
    context = otel_context.get_current() if ctx is None else ctx  # a dict: read as one
    return context.get(FRAME_KEY)  # type: ignore[return-value]


def current_attempt_in(ctx: otel_context.Context | None = None) -> Attempt | None:
    """The ``attempt(n, of=...)`` block active in ``ctx``, if any."""
    context = otel_context.get_current() if ctx is None else ctx  # a dict: read as one
    return context.get(ATTEMPT_KEY)  # type: ignore[return-value]


def current_session() -> Session | None:
    """The request span active here, or ``None``. Never opens one."""
    return current_session_in()


class attempt:
    """``with chronicle.attempt(2, of=first_envelope_id):`` marks the boundaries opened directly
    inside as attempt ``n`` of a retry, each with a ``retry_of`` link to ``of``."""

    def __init__(self, n: int, *, of: str | None = None) -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"attempt number must be a whole number from 1, got {n!r}")
        if of is not None and not is_envelope_id(of):
            raise ValueError(f"of must be an envelope id (16 lowercase hex characters), got {of!r}")
        self._n = n
        self._of = of
        self._token: object = None

    def __enter__(self) -> attempt:
        frame = current_frame_in()
        self._token = otel_context.attach(
            otel_context.set_value(ATTEMPT_KEY, Attempt(self._n, self._of, frame))
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]
            self._token = None

    async def __aenter__(self) -> attempt:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__()

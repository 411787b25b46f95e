"""W3C trace context headers, read and written in one place.

- ``traceparent``: ``00-<trace_id>-<parent-id>-<flags>``, as ``agentplane_primitives`` parses it.
- ``tracestate``: Chronicle adds its member ``chronicle=<envelope_id>`` first, keeping the
  others (at most 32 in all), so the caller's outbound-call envelope survives when another
  instrumentation's client span rewrites ``traceparent``. On reading, that member wins over the
  traceparent's parent-id as the parent envelope.

Headers come as a mapping (any case, ``str`` or ``bytes`` values) or as ASGI-style
``(name, value)`` pairs; ``header_mapping`` turns either into one lower-cased mapping.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import cast

from agentplane_primitives.models import TraceContext
from agentplane_primitives.utils import parse_traceparent

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
TRACESTATE_KEY = "chronicle"
"""Chronicle's member of ``tracestate``."""
_MAX_TRACESTATE_MEMBERS = 32


def header_mapping(headers: object) -> dict[str, str] | None:
    """Headers as ``{lower-case name: value}``; repeated names are joined with commas.

    Accepts a mapping or ASGI ``scope["headers"]`` pairs; ``None`` for anything else.
    """
    if isinstance(headers, Mapping):
        items: Iterable[object] = headers.items()
    elif isinstance(headers, (str, bytes)) or not isinstance(headers, Iterable):
        return None
    else:
        items = headers
    joined: dict[str, str] = {}
    for item in items:
        name, value = cast("tuple[object, object]", item)
        key = (name.decode("latin-1") if isinstance(name, bytes) else str(name)).lower()
        text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
        joined[key] = f"{joined[key]},{text}" if key in joined else text
    return joined


def read_trace_context(headers: Mapping[str, str]) -> TraceContext | None:
    """The caller's trace context from lower-cased ``headers``, or ``None`` if absent or bad."""
    raw = headers.get(TRACEPARENT)
    context = parse_traceparent(raw.strip() if isinstance(raw, str) else raw)
    if context is None:
        return None
    state = headers.get(TRACESTATE)
    if isinstance(state, str):
        for member in state.split(","):
            key, _, value = member.strip().partition("=")
            if key == TRACESTATE_KEY:
                linked = parse_traceparent(f"00-{context.trace_id}-{value}-01")
                if linked is not None:
                    context = TraceContext(
                        trace_id=context.trace_id,
                        parent_envelope_id=linked.parent_envelope_id,
                        flags=context.flags,
                    )
    return context


def format_traceparent(trace_id: str, parent_id: str, sampled: bool) -> str:
    """A version-00 ``traceparent`` value."""
    return f"00-{trace_id}-{parent_id}-{'01' if sampled else '00'}"


def merge_tracestate(existing: str | None, envelope_id: str | None) -> str | None:
    """``existing`` with Chronicle's member set to ``envelope_id`` (first) or removed (``None``).

    ``None`` when nothing is left.
    """
    members: list[str] = []
    if envelope_id is not None:
        members.append(f"{TRACESTATE_KEY}={envelope_id}")
    for member in (existing or "").split(","):
        member = member.strip()
        key = member.partition("=")[0].strip()
        if member and key != TRACESTATE_KEY:
            members.append(member)
    return ",".join(members[:_MAX_TRACESTATE_MEMBERS]) or None


def is_envelope_id(value: object) -> bool:
    """Whether ``value`` is an envelope id: 16 lowercase hex characters, not all zeros."""
    return isinstance(value, str) and parse_traceparent(f"00-{'1' * 32}-{value}-01") is not None
